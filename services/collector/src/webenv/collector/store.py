"""The trajectory store: runs, episodes and steps in ClickHouse through clickhouse-connect.

One client API for both deployments: ``chdb:///path`` opens embedded chDB (zero set-up, one process per data
folder), ``http(s)://host:8123`` a ClickHouse server. The tables come from versioned migrations and are described
in ``schema.py`` (which inserts follow). Every table is a ReplacingMergeTree keyed by natural ids, so writes are
idempotent; exact reads use FINAL.

The ``Store`` is synchronous and used from one worker thread, because the chDB engine is one embedded server per
process and serialising its calls is both safe and fast enough. The service uses it only through ``AsyncStore``,
whose typed methods run there; readers that build their results next to the query (exports, ReadEpisodes
batches) are handed the ``Store`` on that thread by ``AsyncStore.read``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

import clickhouse_connect
from webenv import errors
from webenv.collector.schema import EPISODES, INSERT_ORDER, RUNS, STEPS, TABLES

P = ParamSpec("P")
T = TypeVar("T")

_DB_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_ZEROS = {name: table.zeros() for name, table in TABLES.items()}


class StoreError(errors.Unavailable):
    """The store could not be reached or refused a statement (an RPC that meets it ends UNAVAILABLE)."""

    default_reason = "STORE_UNAVAILABLE"


def embedded_store_holder(url: str) -> str:
    """Why an embedded store (``chdb:///path``) cannot be opened when another process has it open: chDB holds an
    exclusive lock on ``<path>/status`` while open (its own error then says only "Error initializing
    EmbeddedServer"); '' when the lock is free (the cause is something else) or the URL is not embedded."""
    if not url.startswith("chdb://"):
        return ""
    status = Path(url.removeprefix("chdb://").split("?", 1)[0]) / "status"
    try:
        fd = os.open(status, os.O_RDONLY)
    except OSError:
        return ""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pass
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return ""
    finally:
        os.close(fd)
    holder = ""
    with contextlib.suppress(OSError):
        m = re.search(r"^PID: (\d+)", status.read_text(errors="replace"), re.M)  # chDB writes its pid there
        if m:
            holder = f"process {m.group(1)}"
            with contextlib.suppress(OSError):
                cmd = Path(f"/proc/{m.group(1)}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                holder += f" ({cmd.strip()[:120]})" if cmd.strip() else ""
    return (f"Cannot lock file {status}. Another server instance in same directory is already running: "
            f"{holder or 'another process'} has this store open (another collector, or a stack on the same data "
            "folder); stop it, or give this collector another WEBENV_DATA_DIR or WEBENV_STORE_URL")


def migrations() -> list[tuple[int, str, str]]:
    """(version, name, sql) of every migration shipped with the package, in order."""
    out = []
    for entry in resources.files("webenv.collector.migrations").iterdir():
        m = re.match(r"^(\d{3})_(.+)\.sql$", entry.name)
        if m:
            out.append((int(m.group(1)), m.group(2), entry.read_text()))
    return sorted(out)


def _statements(sql: str) -> list[str]:
    body = "\n".join(line for line in sql.splitlines() if not line.strip().startswith("--"))
    return [s.strip() for s in body.split(";") if s.strip()]


class Store:
    """Synchronous store over one clickhouse-connect client; reconnects lazily after a failure."""

    def __init__(self, url: str, database: str = "webenv") -> None:
        if not _DB_NAME.match(database):
            raise ValueError(f"WEBENV_STORE_DATABASE: not a valid database name: {database!r}")
        self.url = url
        self.database = database
        self._client = None
        self._lock = threading.Lock()
        self._migrated = False

    # -- connection ---------------------------------------------------------------------------------------------
    def _connect(self):
        if self._client is None:
            try:
                if self.url.startswith("chdb://"):
                    self._client = clickhouse_connect.get_client(dsn=self.url)
                else:
                    self._client = clickhouse_connect.get_client(
                        dsn=self.url, connect_timeout=3, send_receive_timeout=30
                    )
            except Exception as exc:  # any connection failure means "store down"
                cause = embedded_store_holder(self.url)  # chDB's own message does not say it
                raise StoreError(f"cannot connect to store {self.url}: {cause + ' (' if cause else ''}{exc}"
                                 f"{')' if cause else ''}") from exc
            if not self._migrated:
                self._migrate()
        return self._client

    def retarget(self, url: str) -> None:
        """Point the store at another URL (operations, and the store-outage test); reconnects on next use."""
        with self._lock:
            self._close_client()
            self.url = url
            self._migrated = False

    def _close_client(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            except Exception:
                pass
            self._client = None

    def close(self) -> None:
        """Close the client."""
        with self._lock:
            self._close_client()

    def _run(self, fn):
        with self._lock:
            try:
                client = self._connect()
                return fn(client)
            except StoreError:
                self._close_client()
                raise
            except Exception as exc:
                self._close_client()
                raise StoreError(f"store {self.url}: {exc}") from exc

    # -- schema --------------------------------------------------------------------------------------------------
    def _migrate(self) -> None:
        c = self._client
        db = self.database
        c.command(f"CREATE DATABASE IF NOT EXISTS {db}")
        c.command(
            f"CREATE TABLE IF NOT EXISTS {db}.schema_migrations (version UInt32, name String, "
            f"applied_at DateTime64(3, 'UTC')) ENGINE = MergeTree ORDER BY version"
        )
        done = {r[0] for r in c.query(f"SELECT version FROM {db}.schema_migrations").result_rows}
        for version, name, sql in migrations():
            if version in done:
                continue
            for stmt in _statements(sql.replace("{db}", db)):
                c.command(stmt)
            c.insert(
                "schema_migrations",
                [[version, name, datetime.now(UTC)]],
                column_names=["version", "name", "applied_at"],
                database=db,
            )
        self._migrated = True

    def migrate(self) -> list[int]:
        """Connect and apply pending migrations; returns the versions now applied."""

        def go(c):
            return [r[0] for r in c.query(f"SELECT version FROM {self.database}.schema_migrations ORDER BY version").result_rows]

        return self._run(go)

    # -- writes ----------------------------------------------------------------------------------------------------
    def insert(self, batch: dict[str, list[dict]]) -> None:
        """Insert rows of several tables (steps, then episodes, then runs). Idempotent by the tables' keys."""

        def go(c):
            for table in INSERT_ORDER:
                rows = batch.get(table)
                if not rows:
                    continue
                cols, zeros = TABLES[table].names, _ZEROS[table]
                data = [[zeros[col] if (v := row.get(col)) is None else v for col in cols] for row in rows]
                c.insert(table, data, column_names=cols, database=self.database)

        self._run(go)

    # -- reads ------------------------------------------------------------------------------------------------------
    def query(self, sql: str, parameters: dict | None = None) -> list[dict]:
        """Rows of a query as dicts; ``{db}`` in ``sql`` is the store's database."""

        def go(c):
            r = c.query(sql.replace("{db}", self.database), parameters=parameters or {})
            return [dict(zip(r.column_names, row, strict=True)) for row in r.result_rows]

        return self._run(go)

    def query_arrow(self, sql: str, parameters: dict | None = None):
        """A query's result as a pyarrow Table."""
        return self._run(lambda c: c.query_arrow(sql.replace("{db}", self.database), parameters=parameters or {}))

    def get_run(self, run_id: str) -> dict | None:
        """The latest row of a run, or None."""
        rows = self.query(f"SELECT * FROM {{db}}.{RUNS} FINAL WHERE run_id = {{r:String}}", {"r": run_id})
        return rows[0] if rows else None

    def list_runs(self, state: str | None, limit: int, offset: int) -> list[dict]:
        """Runs newest first."""
        where = "WHERE state = {s:String}" if state else ""
        return self.query(
            f"SELECT * FROM {{db}}.{RUNS} FINAL {where} ORDER BY created_at DESC, run_id DESC "
            f"LIMIT {int(limit)} OFFSET {int(offset)}",
            {"s": state} if state else None,
        )

    def counts(self, run_id: str) -> dict:
        """Exact episode and step counts of a run (FINAL: retried writes count once)."""
        e = self.query(
            "SELECT count() AS episodes, countIf(passed = 1) AS passed, countIf(error != '') AS errored "
            f"FROM {{db}}.{EPISODES} FINAL WHERE run_id = {{r:String}}",
            {"r": run_id},
        )[0]
        s = self.query(f"SELECT count() AS steps FROM {{db}}.{STEPS} FINAL WHERE run_id = {{r:String}}", {"r": run_id})[0]
        return {**e, **s}


class AsyncStore:
    """The store used from asyncio: every call runs on one dedicated worker thread (the inner ``Store`` stays here)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store")

    @property
    def url(self) -> str:
        """Where the store is (``chdb:///path`` or ``http(s)://host:port``)."""
        return self._store.url

    async def call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run other blocking work on the store thread (the spool's disk work, serialised with the store's)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, lambda: fn(*args, **kwargs))

    async def read(self, fn: Callable[Concatenate[Store, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(store, *args)`` on the store thread: a reader that builds its result next to its queries (an export,
        a batch of ReadEpisodes messages) without moving rows to the event loop first."""
        return await self.call(fn, self._store, *args, **kwargs)

    async def migrate(self) -> list[int]:
        """Connect and apply pending migrations; the versions now applied."""
        return await self.call(self._store.migrate)

    async def insert(self, batch: dict[str, list[dict]]) -> None:
        """Insert rows of several tables (idempotent by the tables' keys); StoreError when the store is down."""
        await self.call(self._store.insert, batch)

    async def query(self, sql: str, parameters: dict | None = None) -> list[dict]:
        """Rows of a query as dicts; ``{db}`` in ``sql`` is the store's database."""
        return await self.call(self._store.query, sql, parameters)

    async def get_run(self, run_id: str) -> dict | None:
        """The latest row of a run, or None."""
        return await self.call(self._store.get_run, run_id)

    async def list_runs(self, state: str | None, limit: int, offset: int) -> list[dict]:
        """Run rows newest first (``state``: a stored state name, or None for every run)."""
        return await self.call(self._store.list_runs, state, limit, offset)

    async def counts(self, run_id: str) -> dict:
        """Exact episode and step counts of a run."""
        return await self.call(self._store.counts, run_id)

    async def retarget(self, url: str) -> None:
        """Point the store at another URL (operations, and the store-outage tests); reconnects on next use."""
        await self.call(self._store.retarget, url)

    async def close(self) -> None:
        """Close the client and the worker thread."""
        await self.call(self._store.close)
        self._pool.shutdown(wait=True)
