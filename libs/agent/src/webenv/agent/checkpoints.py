"""Versioned checkpoints on a folder shared by the trainer (writer) and the policy service (reader).

Layout: ``<root>/<name>/v<version>/`` holds the model files and ``checkpoint.json`` (the Checkpoint
message in protobuf's JSON mapping: provenance). A version folder is written under a temporary name
and renamed into place, so a reader never sees half a checkpoint. References are ``<name>@<version>``
or ``<name>`` (its latest version); names are restricted so a reference can never leave the root.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from google.protobuf import json_format
from webenv import errors
from webenv.v1 import trainer_pb2

NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
META = "checkpoint.json"


def parse_ref(ref: str, field: str = "ref") -> tuple[str, int | None]:
    """(name, version or None for the latest); INVALID_ARGUMENT naming ``field`` when malformed."""
    name, sep, version = ref.strip().partition("@")
    if not NAME.match(name):
        raise errors.InvalidArgument(
            f"{field}: {ref[:80]!r} is not '<name>' or '<name>@<version>' (name: lower-case letters, digits, '-', '_')",
            reason="BAD_CHECKPOINT_REF", metadata={"field": field})
    if not sep:
        return name, None
    if not version.isdigit() or int(version) < 1:
        raise errors.InvalidArgument(f"{field}: version in {ref[:80]!r} must be a number >= 1",
                                     reason="BAD_CHECKPOINT_REF", metadata={"field": field})
    return name, int(version)


def versions(root: Path, name: str) -> list[int]:
    folder = root / name
    if not folder.is_dir():
        return []
    out = []
    for p in folder.iterdir():
        m = re.fullmatch(r"v(\d+)", p.name)
        if m and (p / META).is_file():
            out.append(int(m.group(1)))
    return sorted(out)


def folder(root: Path, name: str, version: int) -> Path:
    return root / name / f"v{version}"


def resolve(root: Path, ref: str, field: str = "ref") -> Path:
    """The folder of a reference; NOT_FOUND when it does not exist."""
    name, version = parse_ref(ref, field)
    have = versions(root, name)
    if not have:
        raise errors.NotFound(f"{field}: no checkpoint named {name!r} under {root}", reason="CHECKPOINT_NOT_FOUND",
                              metadata={"field": field, "ref": ref[:80]})
    if version is None:
        version = have[-1]
    elif version not in have:
        raise errors.NotFound(f"{field}: {name}@{version} does not exist (versions: {have[-10:]})",
                              reason="CHECKPOINT_NOT_FOUND", metadata={"field": field, "ref": ref[:80]})
    return folder(root, name, version)


def read_meta(path: Path) -> trainer_pb2.Checkpoint:
    meta = trainer_pb2.Checkpoint()
    json_format.Parse((path / META).read_text(), meta, ignore_unknown_fields=True)
    meta.path = str(path)
    return meta


def publish(staging: Path, root: Path, meta: trainer_pb2.Checkpoint) -> Path:
    """Write ``meta`` into ``staging`` and move it to ``<root>/<name>/v<version>`` atomically."""
    (staging / META).write_text(json_format.MessageToJson(meta, indent=1))
    dest = folder(root, meta.name, meta.version)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists():
        shutil.rmtree(dest)
    os.replace(staging, dest)
    return dest


def list_all(root: Path, name: str = "") -> list[trainer_pb2.Checkpoint]:
    """Every checkpoint (of one family when ``name`` is given), newest first."""
    names = [name] if name else sorted(p.name for p in root.iterdir() if p.is_dir() and NAME.match(p.name)) \
        if root.is_dir() else []
    out = [read_meta(folder(root, n, v)) for n in names for v in versions(root, n)]
    out.sort(key=lambda c: (c.created_at.seconds, c.created_at.nanos, c.version), reverse=True)
    return out
