"""Builds the whole synthetic world from settings: sites, task catalog (every source), state store, web app."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from webenv.sites import builders as site_builders
from webenv.sites import miniwob
from webenv.sites.catalog import SiteCatalog, stricter_split
from webenv.sites.state import StateStore
from webenv.sites.taskcatalog import TaskCatalog
from webenv.sites.tasks import site_tasks
from webenv.sites.web import SitesApp
from webenv.taskfiles import TaskFileError, rubricjson, seedyaml
from webenv.v1 import common_pb2 as pb

log = logging.getLogger("webenv.sites")
DATA = Path(__file__).parent / "data"
#: Hand-written websites (not from the generator), a folder per host; their tasks are data/rubric/handmade.json.
HANDMADE = DATA / "handmade"


@dataclass
class World:
    sites: SiteCatalog
    tasks: TaskCatalog
    store: StateStore
    app: SitesApp
    build_seconds: float


def build_tasks(sites: SiteCatalog, *, yaml_dirs: list[str] = (), rubric_dirs: list[str] = (),  # type: ignore[assignment]
                builtin: bool = True, with_miniwob: bool = True, real_web: bool = False) -> list[pb.Task]:
    tasks: list[pb.Task] = []
    for site in sites.sites:
        tasks.extend(site_tasks(site))
    ydirs = [*([DATA / "yaml"] if builtin else []), *yaml_dirs]
    rfiles = [DATA / "rubric" / f for f in ("synthetic_examples.json", "handmade.json", "handmade_dev.json")] if builtin else []
    if builtin and real_web:
        rfiles.append(DATA / "rubric" / "real_web.json")
    problems: list[ValueError] = []
    for load in (lambda: seedyaml.load_dirs(ydirs), *(lambda f=f: rubricjson.load_file(f) for f in rfiles),
                 lambda: rubricjson.load_dirs(list(rubric_dirs))):
        try:
            tasks.extend(load())
        except TaskFileError as exc:  # every file is read, so one start-up reports every problem
            problems.extend(exc.errors)
    where: dict[str, str] = {}
    for t in tasks:
        origin = t.metadata.get("yaml_file") or t.metadata.get("rubric_file") or pb.TaskSource.Name(t.source)
        if t.task_id in where:
            problems.append(ValueError(f"{origin}: task id {t.task_id!r} is already used by {where[t.task_id]}"))
        where.setdefault(t.task_id, origin)
    if problems:
        raise TaskFileError(problems)
    for t in tasks:  # a task file's task on a synthetic site: that site's builder, and its split if stricter
        site = sites.by_host.get(t.site) if t.source != pb.TASK_SOURCE_SYNTHETIC else None
        if site is not None:
            t.builder, t.split = site.builder_name, stricter_split(t.split or site.split, site.split)
    root = miniwob.html_dir() if with_miniwob else None
    if root is not None:
        tasks.extend(miniwob.miniwob_tasks(root))
    return tasks


def build_world(*, count: int = 1000, seed: int = 0, yaml_dirs: list[str] = (), rubric_dirs: list[str] = (),  # type: ignore[assignment]
                builtin: bool = True, with_miniwob: bool = True, real_web: bool = False,
                max_sessions: int = 100_000, builders: list[str] | tuple[str, ...] = ()) -> World:
    """The world; `builders` names the site builders sites are spread over (every registered one when empty,
    ["platform"] for the single-platform web)."""
    t0 = time.perf_counter()
    sites = SiteCatalog(count, seed, site_builders.splits(builders))
    tasks = TaskCatalog(build_tasks(sites, yaml_dirs=yaml_dirs, rubric_dirs=rubric_dirs, builtin=builtin,
                                    with_miniwob=with_miniwob, real_web=real_web))
    store = StateStore(max_sessions=max_sessions)
    root = miniwob.html_dir() if with_miniwob else None
    app = SitesApp(sites, store, str(root) if root else None, handmade_dir=HANDMADE)
    took = time.perf_counter() - t0
    log.info("catalog built", extra={"sites": len(sites.sites), "tasks": len(tasks), "seconds": round(took, 2)})
    return World(sites, tasks, store, app, took)
