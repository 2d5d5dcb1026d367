"""One catalog of tasks from every source, with filtering and AIP-158 pagination.

Tasks are kept in a fixed order (synthetic by site, then YAML, rubric JSON, MiniWoB); a page token is an
opaque, signed-by-hash offset bound to the filter it was issued for, so a token reused with another
filter, or a tampered one, is rejected as INVALID_ARGUMENT instead of silently returning the wrong page.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections import Counter
from collections.abc import Iterable
from pathlib import PurePath

from webenv.v1 import common_pb2 as pb
from webenv.v1 import task_pb2

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000


class BadRequest(ValueError):
    """A request field is invalid; `field` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _filter_key(f: task_pb2.TaskFilter) -> str:
    return hashlib.sha256(f.SerializeToString(deterministic=True)).hexdigest()[:16]


def encode_token(offset: int, f: task_pb2.TaskFilter) -> str:
    raw = json.dumps({"o": offset, "f": _filter_key(f)}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_token(token: str, f: task_pb2.TaskFilter) -> int:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw)
        offset, key = int(data["o"]), str(data["f"])
    except (ValueError, KeyError, TypeError) as exc:
        raise BadRequest("page_token", f"page_token {token[:40]!r} is not a token this server issued") from exc
    if key != _filter_key(f):
        raise BadRequest("page_token", "page_token was issued for a different filter")
    if offset < 0:
        raise BadRequest("page_token", "page_token has a negative offset")
    return offset


def _some(names: list[str], n: int = 5) -> str:
    """The first few names, quoted (a bounded message however many there are)."""
    return ", ".join(repr(x[:120]) for x in names[:n]) + (f" and {len(names) - n} more" if len(names) > n else "")


class TaskCatalog:
    """All tasks with small per-field indexes for fast filtering."""

    def __init__(self, tasks: Iterable[pb.Task]) -> None:
        self.tasks: list[pb.Task] = []
        self.by_id: dict[str, pb.Task] = {}
        for t in tasks:
            if t.task_id in self.by_id:
                raise ValueError(f"duplicate task id {t.task_id!r}")
            self.by_id[t.task_id] = t
            self.tasks.append(t)
        # columns for filtering without touching protobuf attributes per request
        self._cols = [(t.source, t.family, t.split, t.difficulty, t.kind, t.site) for t in self.tasks]
        self.families = {t.family for t in self.tasks if t.family}
        self.sites = {t.site for t in self.tasks if t.site}
        # the task file of each task read from one (YAML, rubric JSON), by path and by file name
        self.by_file: dict[str, set[int]] = {}
        for i, t in enumerate(self.tasks):
            path = t.metadata.get("yaml_file") or t.metadata.get("rubric_file")
            if path:
                for key in {path, PurePath(path).name}:
                    self.by_file.setdefault(key, set()).add(i)

    def __len__(self) -> int:
        return len(self.tasks)

    def get(self, task_id: str) -> pb.Task | None:
        return self.by_id.get(task_id)

    def validate_filter(self, f: task_pb2.TaskFilter) -> None:
        for name, values, enum in (("sources", f.sources, pb.TaskSource), ("difficulties", f.difficulties, pb.Difficulty),
                                   ("kinds", f.kinds, pb.TaskKind)):
            for v in values:
                if v == 0 or v not in enum.values():
                    raise BadRequest(f"filter.{name}", f"filter.{name} has invalid value {v}")
        if f.split not in pb.Split.values():
            raise BadRequest("filter.split", f"filter.split has invalid value {f.split}")
        unknown = [x for x in f.families if x not in self.families]
        if unknown:
            raise BadRequest("filter.families", f"filter.families has unknown families {unknown}; known: {sorted(self.families)}")
        # Named things that do not exist are a mistake to report, not an empty result to return.
        unknown = [x for x in f.task_ids if x not in self.by_id]
        if unknown:
            raise BadRequest("filter.task_ids", f"filter.task_ids has {len(unknown)} unknown task ids: {_some(unknown)}")
        unknown = [x for x in f.sites if x not in self.sites]
        if unknown:
            raise BadRequest("filter.sites", f"filter.sites has {len(unknown)} unknown sites: {_some(unknown)}")
        unknown = [x for x in f.task_files if x not in self.by_file]
        if unknown:
            files = sorted({k for k in self.by_file if PurePath(k).name == k})
            raise BadRequest("filter.task_files", f"filter.task_files has {len(unknown)} files no task was read from: "
                                                  f"{_some(unknown)}; task files: {_some(files)}")

    def select(self, f: task_pb2.TaskFilter) -> list[int]:
        self.validate_filter(f)
        sources, families, difficulties = set(f.sources), set(f.families), set(f.difficulties)
        kinds, sites = set(f.kinds), set(f.sites)
        if f.task_ids:
            idx = {id(t): i for i, t in enumerate(self.tasks)}
            cand: Iterable[int] = sorted(idx[id(self.by_id[t])] for t in set(f.task_ids) if t in self.by_id)
        else:
            cand = range(len(self.tasks))
        if f.task_files:
            from_files = set().union(*(self.by_file[x] for x in f.task_files))
            cand = sorted(i for i in cand if i in from_files)
        out = []
        cols = self._cols
        for i in cand:
            src, fam, split, diff, kind, site = cols[i]
            if ((sources and src not in sources) or (families and fam not in families) or (f.split and split != f.split)
                    or (difficulties and diff not in difficulties) or (kinds and kind not in kinds)
                    or (sites and site not in sites)):
                continue
            out.append(i)
        return out

    def page(self, req: task_pb2.ListTasksRequest) -> task_pb2.ListTasksResponse:
        if req.page_size < 0:
            raise BadRequest("page_size", f"page_size must be >= 0, got {req.page_size}")
        size = min(req.page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        offset = decode_token(req.page_token, req.filter) if req.page_token else 0
        hits = self.select(req.filter)
        if offset > len(hits):
            raise BadRequest("page_token", "page_token points past the end of the results")
        chosen = hits[offset: offset + size]
        nxt = encode_token(offset + size, req.filter) if offset + size < len(hits) else ""
        return task_pb2.ListTasksResponse(tasks=[self.tasks[i] for i in chosen], next_page_token=nxt, total_size=len(hits))

    def stats(self) -> dict[str, dict[str, int]]:
        """Counts by source, family, kind, difficulty and split (for the CLI and the benchmark)."""
        out: dict[str, Counter[str]] = {k: Counter() for k in ("source", "family", "kind", "difficulty", "split")}
        for t in self.tasks:
            out["source"][pb.TaskSource.Name(t.source)] += 1
            out["family"][t.family or "-"] += 1
            out["kind"][pb.TaskKind.Name(t.kind)] += 1
            out["difficulty"][pb.Difficulty.Name(t.difficulty)] += 1
            out["split"][pb.Split.Name(t.split)] += 1
        return {k: dict(sorted(v.items())) for k, v in out.items()}
