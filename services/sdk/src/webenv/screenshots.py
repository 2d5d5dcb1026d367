"""Screenshot codecs and the keys of stored screenshots: one table for the farm (which encodes), the collector (which
stores each image once under ``<sha256>.<ext>`` and serves it by that key), the gateway and the trainer (which read
it by key)."""

from __future__ import annotations

import re

from webenv import errors
from webenv.v1 import common_pb2

#: Each codec's file extension in a key, media type, and the name CDP's Page.captureScreenshot and Pillow give it.
CODECS: dict[int, tuple[str, str, str]] = {
    common_pb2.IMAGE_CODEC_PNG: ("png", "image/png", "png"),
    common_pb2.IMAGE_CODEC_JPEG: ("jpg", "image/jpeg", "jpeg"),
    common_pb2.IMAGE_CODEC_WEBP: ("webp", "image/webp", "webp"),
}
_BY_EXT = {ext: codec for codec, (ext, _, _) in CODECS.items()}
#: A stored screenshot's key: 64 hex digits of SHA-256, then the codec's extension (none: PNG, as keys once were).
KEY = re.compile(r"^[0-9a-f]{64}(\.(png|jpg|webp))?$")


def codec(value: int) -> int:
    """The codec a ScreenshotSpec or Screenshot names (unspecified: PNG)."""
    return value or common_pb2.IMAGE_CODEC_PNG


def extension(value: int) -> str:
    """The key extension of a codec (``png``, ``jpg``, ``webp``)."""
    return CODECS[codec(value)][0]


def encoder(value: int) -> str:
    """The codec's name for CDP's Page.captureScreenshot ``format`` and Pillow's ``save`` (``png``, ``jpeg``, ``webp``)."""
    return CODECS[codec(value)][2]


def key_codec(key: str) -> int:
    """The codec of a stored screenshot, by its key's extension."""
    return _BY_EXT.get(key.rsplit(".", 1)[-1] if "." in key else "png", common_pb2.IMAGE_CODEC_PNG)


def media_type(key: str) -> str:
    """The media type of a stored screenshot, by its key's extension."""
    return CODECS[key_codec(key)][1]


def check_key(key: str, field: str = "screenshot_key") -> None:
    """INVALID_ARGUMENT BAD_SCREENSHOT_KEY naming ``field`` unless ``key`` is a stored screenshot's key."""
    if not KEY.match(key):
        raise errors.InvalidArgument(f"{field}: not a screenshot key (64 hex digits of SHA-256, then .png, .jpg or "
                                     f".webp): {key[:80]!r}", reason="BAD_SCREENSHOT_KEY", metadata={"field": field})
