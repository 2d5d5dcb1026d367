"""One catalog of tasks from every source, with filtering and AIP-158 pagination.

Tasks are kept in a fixed order (synthetic by site, then YAML, rubric JSON, MiniWoB), so a page is an offset
into the filter's hits; the sdk's `webenv.paging` reads the page fields and issues the tokens (bound to the
filter they were issued for: a token reused with another filter, or a tampered one, is INVALID_ARGUMENT).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import PurePath

from webenv import paging
from webenv.v1 import common_pb2 as pb
from webenv.v1 import task_pb2

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000


class BadRequest(ValueError):
    """A request field is invalid; `field` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


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
        self._cols = [(t.source, t.family, t.split, t.difficulty, t.kind, t.site, t.builder) for t in self.tasks]
        self.families = {t.family for t in self.tasks if t.family}
        self.builders = {t.builder for t in self.tasks if t.builder}
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
        unknown = [x for x in f.builders if x not in self.builders]
        if unknown:
            raise BadRequest("filter.builders", f"filter.builders has {len(unknown)} unknown builders: {_some(unknown)}; "
                                                f"builders: {_some(sorted(self.builders), 20)}")
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
        kinds, sites, builders = set(f.kinds), set(f.sites), set(f.builders)
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
            src, fam, split, diff, kind, site, builder = cols[i]
            if ((sources and src not in sources) or (families and fam not in families) or (f.split and split != f.split)
                    or (difficulties and diff not in difficulties) or (kinds and kind not in kinds)
                    or (sites and site not in sites) or (builders and builder not in builders)):
                continue
            out.append(i)
        return out

    def page(self, req: task_pb2.ListTasksRequest) -> task_pb2.ListTasksResponse:
        page = paging.read(req, default=DEFAULT_PAGE_SIZE, maximum=MAX_PAGE_SIZE)
        hits = self.select(req.filter)
        page.check_within(len(hits))
        chosen = hits[page.offset: page.offset + page.size]
        nxt = page.next_token(page.offset + page.size < len(hits))
        return task_pb2.ListTasksResponse(tasks=[self.tasks[i] for i in chosen], next_page_token=nxt, total_size=len(hits))

    def stats(self) -> dict[str, dict[str, int]]:
        """Counts by source, family, kind, difficulty, split and builder (for the CLI and the benchmark)."""
        out: dict[str, Counter[str]] = {k: Counter() for k in ("source", "family", "kind", "difficulty", "split", "builder")}
        for t in self.tasks:
            out["source"][pb.TaskSource.Name(t.source)] += 1
            out["family"][t.family or "-"] += 1
            out["kind"][pb.TaskKind.Name(t.kind)] += 1
            out["difficulty"][pb.Difficulty.Name(t.difficulty)] += 1
            out["split"][pb.Split.Name(t.split)] += 1
            out["builder"][t.builder or "-"] += 1
        return {k: dict(sorted(v.items())) for k, v in out.items()}
