"""Content-addressed blob folder for screenshots and other large values, referenced from rows by key."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


class BlobStore:
    """Blobs under ``folder/ab/cdef...`` named by their SHA-256; writing the same bytes twice is a no-op."""

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def put(self, data: bytes, ext: str = "") -> str:
        """Store ``data`` and return its key (``sha256[.ext]``)."""
        key = hashlib.sha256(data).hexdigest() + (f".{ext}" if ext else "")
        path = self.path(key)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(path.suffix + ".tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
        return key

    def path(self, key: str) -> Path:
        """Where the blob with ``key`` lives."""
        return self.folder / key[:2] / key

    def get(self, key: str) -> bytes:
        """The bytes stored under ``key``."""
        return self.path(key).read_bytes()
