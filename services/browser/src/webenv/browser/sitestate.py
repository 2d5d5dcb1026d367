"""Site state of benchmark tasks (WebArena, WebArena-Verified): logins, resets, and one reset at a time per site.

The configuration is the one the task-file loaders read (``WEBENV_BENCHMARK_SITES``: `webenv.taskfiles.placeholders`,
:class:`SiteState` per placeholder), read by the farm from its own environment when the first benchmark session
opens. A task names its sites (``metadata["sites"]``: ``shopping_admin`` is ``__SHOPPING_ADMIN__``) and asks:

- ``require_reset`` true: each of its sites' reset hook is called before the session starts (the endpoint, a 2xx
  answer meaning done, else the command, exit code 0); a site of such a task with no hook is FAILED_PRECONDITION
  SITE_RESET_NOT_CONFIGURED naming it;
- ``require_login`` true and a ``storage_state`` (:func:`login_sites`): each of those sites' storage_state file
  (cookies and localStorage, Playwright's format) from the configuration is put into the session's context before
  the start page loads; the site's login command runs once first when the file is missing; a site with neither is
  FAILED_PRECONDITION SITE_LOGIN_NOT_CONFIGURED naming it.

Turns: an episode of a task that requires a reset holds its sites alone, from before the reset until the session
ends (closed, expired or crashed); the other benchmark episodes on those sites share them. So two episodes needing a
reset on one site run one after the other, and a reset never lands under a running episode. The turns are per farm
node (a process): a fleet of nodes on one site must send that site's reset tasks to one node.
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from webenv import errors
from webenv.taskfiles.placeholders import FILE_VAR, SiteMap, SiteState, placeholder_of
from webenv.v1 import common_pb2

log = logging.getLogger(__name__)


def login_sites(task: common_pb2.Task, names: list[str]) -> list[str]:
    """The sites a task is to be logged in to: none unless it has ``require_login`` and a ``storage_state`` (WebArena
    loads one only when it is given: its map and Wikipedia tasks have ``require_login`` and no storage_state); the
    sites the storage_state's file name lists (``./.auth/gitlab_state.json``, ``gitlab.reddit_state.json``) when
    they are all the task's, else every site of the task."""
    ss = task.metadata.get("storage_state", "")
    if task.metadata.get("require_login") != "true" or not ss:
        return []
    named = [n for n in Path(ss).name.removesuffix(".json").removesuffix("_state").split(".") if n]
    return named if named and set(named) <= set(names) else names


class SiteTurns:
    """A readers-writer lock of one site: shared by ordinary episodes, held alone by one that needs a reset.
    Writers go first (a waiting reset episode lets no new shared holder in), so reset tasks are not starved."""

    def __init__(self) -> None:
        self._cond = asyncio.Condition()
        self._shared = 0
        self._alone = False
        self._waiting_alone = 0

    async def acquire(self, alone: bool) -> None:
        async with self._cond:
            if alone:
                self._waiting_alone += 1
                try:
                    await self._cond.wait_for(lambda: not self._alone and self._shared == 0)
                finally:
                    self._waiting_alone -= 1
                self._alone = True
            else:
                await self._cond.wait_for(lambda: not self._alone and self._waiting_alone == 0)
                self._shared += 1

    async def release(self, alone: bool) -> None:
        async with self._cond:
            if alone:
                self._alone = False
            else:
                self._shared -= 1
            self._cond.notify_all()


class Held:
    """An episode's turns on its sites (released once, when its session ends) and the storage states to apply."""

    def __init__(self, turns: list[tuple[SiteTurns, bool]], storage: list[dict[str, Any]]) -> None:
        self.turns = turns
        self.storage = storage

    async def release(self) -> None:
        turns, self.turns = self.turns, []
        for t, alone in turns:
            await asyncio.shield(t.release(alone))


class SiteStates:
    """The farm's site state: the configuration, each site's turns, the logins done."""

    def __init__(self, sites: SiteMap | None = None) -> None:
        self._sites = sites
        self._turns: dict[str, SiteTurns] = {}
        self._login_locks: dict[str, asyncio.Lock] = {}
        self.resets: dict[str, int] = {}  # resets called, by placeholder (tests, metrics)

    def sites(self) -> SiteMap:
        if self._sites is None:
            try:
                self._sites = SiteMap()
            except ValueError as exc:
                raise errors.FailedPrecondition(f"the farm's site configuration cannot be read: {exc}",
                                                reason="SITE_CONFIG_BAD", metadata={"variable": FILE_VAR}) from exc
        return self._sites

    async def enter(self, task: common_pb2.Task) -> Held:
        """Wait for the task's turn on its sites, reset them when it requires it, read its logins."""
        names = [s for s in dict.fromkeys(x.strip() for x in task.metadata.get("sites", "").split(",")) if s]
        reset = task.metadata.get("require_reset") == "true"
        logins = login_sites(task, names)
        states = {n: self.sites().state(placeholder_of(n)) for n in names}
        if reset:
            self._need(task, names, states, "reset", lambda s: s.resettable, "reset_url or reset_command",
                       "SITE_RESET_NOT_CONFIGURED")
        if logins:
            self._need(task, logins, states, "login", lambda s: bool(s.storage_state), "storage_state",
                       "SITE_LOGIN_NOT_CONFIGURED")
        turns: list[tuple[SiteTurns, bool]] = []
        held = Held(turns, [])
        try:
            for name in sorted(n for n in names if states.get(n) is not None and states[n].resettable):  # type: ignore[union-attr]
                t = self._turns.setdefault(name, SiteTurns())
                await t.acquire(reset)
                turns.append((t, reset))
            if reset:
                for name in names:
                    await self._reset(states[name], task)  # type: ignore[arg-type]
            held.storage = [await self._storage(states[n], task) for n in logins]  # type: ignore[arg-type]
        except BaseException:
            await held.release()
            raise
        return held

    @staticmethod
    def _need(task: common_pb2.Task, names: Iterable[str], states: dict[str, SiteState | None], what: str,
              has: Any, keys: str, reason: str) -> None:
        for name in names:
            s = states.get(name)
            if s is None or not has(s):
                ph = placeholder_of(name)
                raise errors.FailedPrecondition(
                    f"task {task.task_id} requires a {what} of site {name!r}, but the farm's site configuration has no "
                    f"{keys} for {ph}: add it to {ph}'s object in the {FILE_VAR} file", reason=reason,
                    metadata={"task_id": task.task_id, "site": name, "placeholder": ph})

    async def _reset(self, s: SiteState, task: common_pb2.Task) -> None:
        where = f"the reset of {s.placeholder} (task {task.task_id})"
        if s.reset_url:
            def call() -> int:
                req = urllib.request.Request(s.reset_url, method=s.reset_method,
                                             data=b"" if s.reset_method != "GET" else None)
                with urllib.request.urlopen(req, timeout=s.reset_timeout_s) as resp:
                    return int(resp.status)
            try:
                status = await asyncio.to_thread(call)
            except (urllib.error.URLError, OSError, ValueError) as exc:
                raise errors.Unavailable(f"{where}: {s.reset_method} {s.reset_url} failed: {exc}",
                                         reason="SITE_RESET_FAILED", metadata={"placeholder": s.placeholder}) from exc
            if not 200 <= status < 300:
                raise errors.Unavailable(f"{where}: {s.reset_method} {s.reset_url} answered {status}",
                                         reason="SITE_RESET_FAILED", metadata={"placeholder": s.placeholder})
        else:
            await self._run(s.reset_command, s.reset_timeout_s, where, "SITE_RESET_FAILED", s.placeholder)
        self.resets[s.placeholder] = self.resets.get(s.placeholder, 0) + 1
        log.info("site %s reset for task %s", s.placeholder, task.task_id)

    @staticmethod
    async def _run(argv: tuple[str, ...], seconds: float, where: str, reason: str, placeholder: str) -> None:
        try:
            proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.DEVNULL,
                                                        stderr=asyncio.subprocess.PIPE)
        except OSError as exc:
            raise errors.Unavailable(f"{where}: {argv[0]!r} cannot be run: {exc}", reason=reason,
                                     metadata={"placeholder": placeholder}) from exc
        try:
            _, err = await asyncio.wait_for(proc.communicate(), seconds)
        except TimeoutError as exc:
            proc.kill()
            await proc.wait()
            raise errors.Unavailable(f"{where}: {argv[0]!r} ran past {seconds:g}s", reason=reason,
                                     metadata={"placeholder": placeholder}) from exc
        if proc.returncode != 0:
            tail = err.decode(errors="replace").strip()[-300:]
            raise errors.Unavailable(f"{where}: {argv[0]!r} exited {proc.returncode}: {tail}", reason=reason,
                                     metadata={"placeholder": placeholder})

    async def _storage(self, s: SiteState, task: common_pb2.Task) -> dict[str, Any]:
        path = Path(s.storage_state)
        where = f"the login of {s.placeholder} (task {task.task_id})"
        if s.login_command and not await asyncio.to_thread(path.exists):
            async with self._login_locks.setdefault(s.placeholder, asyncio.Lock()):
                if not await asyncio.to_thread(path.exists):
                    await self._run(s.login_command, s.reset_timeout_s, where, "SITE_LOGIN_FAILED", s.placeholder)
        try:
            data = json.loads(await asyncio.to_thread(path.read_text, encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise errors.FailedPrecondition(f"{where}: storage_state {path} cannot be read as JSON: {exc}",
                                            reason="SITE_LOGIN_FAILED",
                                            metadata={"placeholder": s.placeholder}) from exc
        if not isinstance(data, dict) or not isinstance(data.get("cookies", []), list) \
                or not isinstance(data.get("origins", []), list):
            raise errors.FailedPrecondition(f"{where}: storage_state {path} is not Playwright's storage state "
                                            "(an object with cookies and origins lists)", reason="SITE_LOGIN_FAILED",
                                            metadata={"placeholder": s.placeholder})
        return data


# Puts a storage state's localStorage items into a page of their origin before its own scripts run.
LOCAL_STORAGE_JS = """
(origins) => {
  const o = origins.find((x) => x.origin === location.origin);
  if (!o) return;
  try { for (const {name, value} of o.localStorage || []) localStorage.setItem(name, value); } catch (e) {}
}
"""


async def apply_storage(context: Any, storage: list[dict[str, Any]]) -> None:
    """Put storage states (cookies, localStorage origins) into a browser context before its pages load."""
    cookies = [c for s in storage for c in s.get("cookies", [])]
    origins = [o for s in storage for o in s.get("origins", []) if isinstance(o, dict)]
    if cookies:
        await context.add_cookies(cookies)
    if origins:
        await context.add_init_script(script=f"({LOCAL_STORAGE_JS})({json.dumps(origins)})")
