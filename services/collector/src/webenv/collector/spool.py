"""Local disk spool: rows that could not reach the store wait here, in JSONL segments, until it returns.

A segment is written whole and fsynced before the episode counts as durable, so nothing acknowledged is lost
if the store is down; it is deleted only after its rows were inserted. Re-inserting a segment that had in
fact reached the store is harmless: the tables replace rows by key.

The spool may be capped (``max_bytes``, WEBENV_SPOOL_MAX_MB): once :meth:`Spool.full`, the writer stops
spooling and waits for the store (episodes wait to be acknowledged, nothing is dropped) and the collector's
health says NOT_SERVING, so a long outage cannot fill the disk.
"""

from __future__ import annotations

import json
import os
import uuid
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

Batch = dict[str, list[dict]]


def _encode(v):
    if isinstance(v, datetime):
        return {"$dt": v.timestamp()}
    if isinstance(v, bytes):
        return {"$b": v.hex()}
    return v


def _decode(v):
    if isinstance(v, dict):
        if "$dt" in v:
            return datetime.fromtimestamp(v["$dt"], tz=UTC)
        if "$b" in v:
            return bytes.fromhex(v["$b"])
    return v


def pack(batch: Batch) -> bytes:
    """Rows as compact bytes (zlib-compressed JSON with datetimes and bytes encoded), e.g. for a Redis stream."""
    data = {table: [{k: _encode(v) for k, v in row.items()} for row in rows] for table, rows in batch.items()}
    return zlib.compress(json.dumps(data, separators=(",", ":")).encode(), 1)


def unpack(data: bytes) -> Batch:
    """The rows :func:`pack` packed."""
    return {table: [{k: _decode(v) for k, v in row.items()} for row in rows]
            for table, rows in json.loads(zlib.decompress(data)).items()}


@dataclass
class Spool:
    """A folder of JSONL segments, one per batch that failed to insert; ``max_bytes`` > 0 caps its size."""

    folder: Path
    max_bytes: int = 0

    def __post_init__(self) -> None:
        self.folder = Path(self.folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.bytes = sum(seg.stat().st_size for seg in self.segments())

    def full(self) -> bool:
        """True when the cap is reached: no more segments until the store takes some."""
        return 0 < self.max_bytes <= self.bytes

    def append(self, batch: Batch) -> Path:
        """Write ``batch`` as a new segment, durably (write to a temp name, fsync, rename)."""
        name = f"seg-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S%f')}-{uuid.uuid4().hex[:8]}.jsonl"
        tmp = self.folder / (name + ".tmp")
        with tmp.open("w", encoding="utf-8") as f:
            for table, rows in batch.items():
                for row in rows:
                    f.write(json.dumps({"table": table, "row": {k: _encode(v) for k, v in row.items()}}))
                    f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        final = self.folder / name
        os.replace(tmp, final)
        self.bytes += final.stat().st_size
        return final

    def segments(self) -> list[Path]:
        """Segments waiting, oldest first."""
        return sorted(self.folder.glob("seg-*.jsonl"))

    def read(self, segment: Path) -> Batch:
        """The rows of one segment, grouped by table."""
        out: Batch = {}
        with segment.open(encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                item = json.loads(line)
                out.setdefault(item["table"], []).append({k: _decode(v) for k, v in item["row"].items()})
        return out

    def remove(self, segment: Path) -> None:
        """Drop a segment once its rows are in the store."""
        try:
            size = segment.stat().st_size
        except FileNotFoundError:
            return
        segment.unlink(missing_ok=True)
        self.bytes = max(self.bytes - size, 0)

    def pending_rows(self) -> int:
        """Rows waiting in the spool (for the spool-size metric)."""
        n = 0
        for seg in self.segments():
            with seg.open("rb") as f:
                n += sum(1 for _ in f)
        return n
