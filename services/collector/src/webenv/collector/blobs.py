"""Content-addressed blob folder for screenshots and other large values, referenced from rows by key.

``put`` does blocking file I/O, so the engine calls it off the event loop (``Episode.rows`` runs in
``asyncio.to_thread``); several threads may then put the same bytes at once, so each write goes to its own
temporary file and is renamed into place atomically: a reader sees the whole blob or none. The rows that name
a blob are written only after ``put`` returned, so a stored row never points at a missing blob.
"""

from __future__ import annotations

import hashlib
import os
import threading
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
            tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
        return key

    def path(self, key: str) -> Path:
        """Where the blob with ``key`` lives."""
        return self.folder / key[:2] / key

    def get(self, key: str) -> bytes:
        """The bytes stored under ``key``."""
        return self.path(key).read_bytes()
