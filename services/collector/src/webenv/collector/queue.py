"""Sharing runs between collectors through a Redis Streams consumer group.

The collector that receives StartRun publishes the run (spec in a hash) and one stream entry per episode.
Every collector sharing the Redis runs a worker pool: XREADGROUP new entries, run the episode, write it
durably (store or spool), record it in the run's done set, then XACK. A collector that dies leaves its
entries pending; after ``claim_idle_seconds`` another collector takes them over with XAUTOCLAIM. An entry
delivered ``max_deliveries`` times goes to the dead-letter stream instead of being run again. Running and storing
an episode is the engine's job, handed to the queue when it starts (``JobRunner``, the engine's ``run_queued``):
the queue imports nothing of the engine and only counts what the job reports.

A collector keeps the entries it is running claimed: every third of ``claim_idle_seconds`` it re-claims them
(XCLAIM JUSTID, which resets their idle time without counting a delivery), so only an entry whose collector
stopped doing so (it died) is taken over; before that, an episode that ran longer than the claim time under
load was taken over while still running and stored twice.

Exactly-once storage rests on two things: episode ids are deterministic (run id + index), and the store
replaces rows by key. With one shared ClickHouse server a re-run episode replaces its earlier rows. With
per-process chDB stores, a re-delivered episode is skipped when the done set already has it; the only
window left for a duplicate is a crash between the store write and the SADD right after it.

Embedded (chDB) stores cannot be shared between processes, so collectors on them also share their rows: each
one publishes the rows it stores for shared runs (its episodes and, for runs it owns, the run row) to the
stream ``<prefix>:rows`` (zlib-compressed), and every collector copies the others' rows into its own store. A
run's episodes are then visible from every collector (ListRuns, GetRun, ExportRun), the one that started it or
not; reads wait until this collector has caught up with the stream. Chosen over answering reads by asking the
other collectors (a federated read) because it needs no new RPC, every read path stays a local query, and a
collector that died leaves its rows behind in the others' stores. The stream is trimmed to the oldest position
a live collector has read (collectors heartbeat in ``<prefix>:collectors``; one silent for
``peer_timeout_seconds`` no longer holds rows back), so Redis holds only rows some collector has yet to copy.
Screenshots stay in the blob folder of the collector that ran the episode.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis
from google.protobuf import json_format
from webenv.collector import metrics
from webenv.collector.episode import EpisodeJob, Tally
from webenv.collector.run import RunContext
from webenv.collector.schema import STATE_NAMES, STATE_VALUES
from webenv.collector.spool import pack, unpack
from webenv.collector.writer import Writer
from webenv.v1 import collector_pb2

log = logging.getLogger(__name__)

#: How long closing waits for each part to stop (see WorkQueue.close).
CLOSE_SECONDS = 5.0
GROUP = "collectors"

#: What the queue runs for each entry (the engine's ``run_queued``): run one episode job of a shared run, store it
#: durably (store or spool) before returning, and say what counting it needs.
JobRunner = Callable[[EpisodeJob, collector_pb2.RunSpec], Awaitable[Tally]]

#: Count an episode once and finish its run at the target (see WorkQueue._record).
#: KEYS: done set, counts hash, summaries list, meta hash.
#: ARGV: episode id, counter ("finished" or "dead"), steps, outcome ("passed", "errored" or ""), summary JSON
#: ("" for none), target, the running state's name, the succeeded state's name.
_RECORD = """
if redis.call('SADD', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HINCRBY', KEYS[2], ARGV[2], 1)
if ARGV[2] == 'finished' then
  redis.call('HINCRBY', KEYS[2], 'steps', tonumber(ARGV[3]))
  if ARGV[4] ~= '' then redis.call('HINCRBY', KEYS[2], ARGV[4], 1) end
end
if ARGV[5] ~= '' then redis.call('RPUSH', KEYS[3], ARGV[5]) end
local n = tonumber(redis.call('HGET', KEYS[2], 'finished') or '0') + tonumber(redis.call('HGET', KEYS[2], 'dead') or '0')
if n >= tonumber(ARGV[6]) and redis.call('HGET', KEYS[4], 'state') == ARGV[7] then
  redis.call('HSET', KEYS[4], 'state', ARGV[8])
end
return 1
"""


REDIS_CONNECTIONS = 64  # per client; commands beyond it wait for a free connection
REDIS_CONNECTION_WAIT_SECONDS = 30.0


def redis_client(url: str, **kwargs) -> aioredis.Redis:
    """A client whose pool makes a command wait for a free connection instead of failing. redis-py's default pool
    raises MaxConnectionsError past 100 connections: at 1,000 episodes in flight through the queue (one worker
    each, every one issuing commands) every episode of the run failed that way (bench/orchestrator.py --redis)."""
    pool = aioredis.BlockingConnectionPool.from_url(url, max_connections=REDIS_CONNECTIONS,
                                                    timeout=REDIS_CONNECTION_WAIT_SECONDS, **kwargs)
    return aioredis.Redis.from_pool(pool)


class WorkQueue:
    """One collector's side of the shared queue: publishing runs and working on everyone's episodes."""

    def __init__(
        self,
        url: str,
        *,
        consumer: str,
        prefix: str = "webenv",
        claim_idle_seconds: float = 15.0,
        max_deliveries: int = 3,
        workers: int = 16,
        poll_seconds: float = 0.2,
        share_rows: bool = False,
        peer_timeout_seconds: float = 60.0,
    ) -> None:
        self.redis = redis_client(url, decode_responses=True)
        self.raw = redis_client(url)  # bytes: packed rows
        self.consumer = consumer
        self.p = prefix
        self.stream = f"{prefix}:episodes"
        self.dead = f"{prefix}:dead"
        self.claim_idle_ms = int(claim_idle_seconds * 1000)
        self.max_deliveries = max_deliveries
        self.workers = workers
        self.poll_seconds = poll_seconds
        self._freed = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        self._loop: asyncio.Task | None = None
        self._specs: dict[str, collector_pb2.RunSpec] = {}
        self._run_job: JobRunner | None = None
        self._writer: Writer | None = None
        # Row sharing between embedded stores (see the module docstring).
        self.share_rows = share_rows  # publish this collector's rows (its store is its own)
        self.rows = f"{prefix}:rows"
        self.cursors = f"{prefix}:rows:cursors"
        self.alive = f"{prefix}:collectors"
        self.peer_timeout = peer_timeout_seconds
        self._cursor = "0-0"
        self._advanced = asyncio.Event()
        self._replicator: asyncio.Task | None = None

    def _k(self, run_id: str, what: str) -> str:
        return f"{self.p}:run:{run_id}:{what}"

    # -- lifecycle ---------------------------------------------------------------------------------------------------
    async def start(self, run_job: JobRunner, writer: Writer) -> None:
        """Create the group (idempotent) and start working: entries run with ``run_job``; the rows other collectors
        share are written with ``writer``."""
        self._run_job = run_job
        self._writer = writer
        with contextlib.suppress(aioredis.ResponseError):  # BUSYGROUP: it exists
            await self.redis.xgroup_create(self.stream, GROUP, id="0", mkstream=True)
        self._cursor = await self.redis.hget(self.cursors, self.consumer) or "0-0"
        await self._heartbeat(time.time())
        self._replicator = asyncio.create_task(self._replicate())
        self._loop = asyncio.create_task(self._work())

    async def close(self) -> None:
        """Stop taking work; episodes in flight stay pending and are claimed by others (or by us next time).

        Bounded: a task cancelled inside a blocking redis-py command (XREAD with BLOCK) was seen to stay
        "cancelling" for minutes under load (redis-py's connection release after a cancel), which hung a
        collector's shutdown; what has not stopped within CLOSE_SECONDS is left behind with a warning.
        """
        tasks = [t for t in (self._loop, *self._tasks, self._replicator) if t is not None]
        for t in tasks:
            t.cancel()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=CLOSE_SECONDS)
            if pending:
                log.warning("work queue: %d task(s) still running %.0fs after cancel; left behind",
                            len(pending), CLOSE_SECONDS)
        for client in (self.redis, self.raw):
            try:
                await asyncio.wait_for(client.aclose(), CLOSE_SECONDS)
            except (TimeoutError, aioredis.RedisError, OSError) as exc:
                log.warning("work queue: closing a Redis client: %s", exc)

    # -- publishing (the run's owner) --------------------------------------------------------------------------------
    async def run_shared(self, rc: RunContext) -> None:
        """Publish ``rc``'s episodes and follow the shared counts until the run is done or stopped."""
        run = rc.run
        meta = {
            "spec": json_format.MessageToJson(run.spec, indent=None),
            "planned": run.counts.planned,
            "target": rc.target,
            "created_at": run.created_at.ToJsonString(),
            "state": STATE_NAMES[collector_pb2.RUN_STATE_RUNNING],
            "owner": self.consumer,
        }
        await self.redis.hset(self._k(run.run_id, "meta"), mapping=meta)
        pipe = self.redis.pipeline(transaction=False)
        for job in rc.jobs:
            pipe.xadd(self.stream, {"run_id": run.run_id, "job": job.to_json()})
        await pipe.execute()
        run.counts.started = run.counts.planned
        pos = 0
        while True:
            state, pos = await self._sync(rc, pos)
            if state != collector_pb2.RUN_STATE_RUNNING:
                run.state = state
                return
            if rc.stop.is_set():
                await self.stop_run(run.run_id)
                run.state = collector_pb2.RUN_STATE_STOPPED
                return
            await asyncio.sleep(self.poll_seconds)

    async def _sync(self, rc: RunContext, pos: int) -> tuple[int, int]:
        run_id = rc.run.run_id
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(self._k(run_id, "counts"))
        pipe.hget(self._k(run_id, "meta"), "state")
        pipe.lrange(self._k(run_id, "summaries"), pos, -1)
        counts, state, new = await pipe.execute()
        c = rc.run.counts
        changed = bool(new) or int(counts.get("finished", 0)) != c.finished
        c.finished = int(counts.get("finished", 0))
        c.passed = int(counts.get("passed", 0))
        c.errored = int(counts.get("errored", 0)) + int(counts.get("dead", 0))
        c.steps = int(counts.get("steps", 0))
        for s in new:
            summary = collector_pb2.EpisodeSummary()
            json_format.Parse(s, summary)
            rc.summaries.append(summary)
        if changed:
            rc.notify()
        return STATE_VALUES.get(state or "running", collector_pb2.RUN_STATE_RUNNING), pos + len(new)

    async def stop_run(self, run_id: str) -> None:
        """Tell every collector to drop the run's remaining episodes."""
        await self.redis.hset(self._k(run_id, "meta"), "state", STATE_NAMES[collector_pb2.RUN_STATE_STOPPED])

    async def get_run(self, run_id: str) -> collector_pb2.Run | None:
        """A shared run as Redis knows it (for collectors that do not own it)."""
        meta = await self.redis.hgetall(self._k(run_id, "meta"))
        if not meta:
            return None
        counts = await self.redis.hgetall(self._k(run_id, "counts"))
        run = collector_pb2.Run(run_id=run_id, state=STATE_VALUES.get(meta["state"], 0))
        json_format.Parse(meta["spec"], run.spec)
        run.created_at.FromJsonString(meta["created_at"])
        c = run.counts
        c.planned = c.started = int(meta["planned"])
        c.finished = int(counts.get("finished", 0))
        c.passed = int(counts.get("passed", 0))
        c.errored = int(counts.get("errored", 0)) + int(counts.get("dead", 0))
        c.steps = int(counts.get("steps", 0))
        return run

    # -- sharing rows (embedded stores) --------------------------------------------------------------------------------
    async def publish_rows(self, batch: dict[str, list[dict]]) -> None:
        """Offer rows this collector stored to the others (only when its store is its own)."""
        if self.share_rows and batch:
            # ~8 ms for a 10-step episode (127 KiB of JSON -> 11 KiB): off the event loop
            data = await asyncio.to_thread(pack, batch)
            await self.raw.xadd(self.rows, {"origin": self.consumer, "data": data})

    async def catch_up(self, limit_seconds: float = 10.0) -> None:
        """Wait until every row published so far is in this collector's writer (then a drain makes it readable)."""
        try:
            target = (await self.raw.xinfo_stream(self.rows))["last-generated-id"].decode()
        except aioredis.ResponseError:  # no stream yet: nothing was shared
            return
        deadline = time.monotonic() + limit_seconds
        while _id(self._cursor) < _id(target):
            self._advanced.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                log.warning("shared rows: %s behind %s after %.0fs; reading what is stored", self._cursor, target,
                            limit_seconds)
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._advanced.wait(), left)

    async def _heartbeat(self, now: float) -> None:
        """Say this collector is alive; forget silent ones; trim rows every live collector has read."""
        await self.redis.zadd(self.alive, {self.consumer: now})
        gone = await self.redis.zrangebyscore(self.alive, 0, now - self.peer_timeout)
        if gone:
            await self.redis.zrem(self.alive, *gone)
            await self.redis.hdel(self.cursors, *gone)
        live = await self.redis.zrange(self.alive, 0, -1)
        cursors = await self.redis.hgetall(self.cursors)
        low = min((cursors.get(c, "0-0") for c in live), key=_id, default="0-0")
        if low != "0-0":
            await self.redis.xtrim(self.rows, minid=low, approximate=False)

    async def _replicate(self) -> None:
        """Copy the rows other collectors publish into this collector's store, durably, in stream order."""
        assert self._writer is not None
        next_beat = time.time() + 5
        while True:
            try:
                if time.time() >= next_beat:
                    next_beat = time.time() + 5
                    await self._heartbeat(time.time())
                got = await self.raw.xread({self.rows: self._cursor}, count=200, block=1000)
                last = None
                packed = []
                for _stream, entries in got or []:
                    for entry_id, fields in entries:
                        last = entry_id.decode()
                        if fields[b"origin"].decode() != self.consumer:
                            packed.append(fields[b"data"])
                batch = await asyncio.to_thread(_merge, packed) if packed else {}
                if last is None:
                    continue
                if batch:
                    await self._writer.put(batch)  # durable (store or spool) before the cursor moves
                    for table, rows in batch.items():
                        metrics.ROWS_REPLICATED.labels(table).inc(len(rows))
                self._cursor = last
                await self.redis.hset(self.cursors, self.consumer, last)
                self._advanced.set()
            except asyncio.CancelledError:
                raise
            except Exception:  # Redis or store hiccups must not end the copying
                log.exception("shared rows: copy loop error")
                await asyncio.sleep(1.0)

    # -- working (every collector) -------------------------------------------------------------------------------------
    async def _spec(self, run_id: str) -> tuple[collector_pb2.RunSpec | None, str, int]:
        meta = await self.redis.hmget(self._k(run_id, "meta"), ["spec", "state", "target"])
        if meta[0] is None:
            return None, "", 0
        spec = self._specs.get(run_id)
        if spec is None:
            spec = self._specs[run_id] = json_format.Parse(meta[0], collector_pb2.RunSpec())
        return spec, meta[1], int(meta[2])

    async def _work(self) -> None:
        next_claim = 0.0
        while True:
            try:
                while len(self._tasks) >= self.workers:
                    self._freed.clear()
                    await self._freed.wait()
                free = self.workers - len(self._tasks)
                entries: list[tuple[str, dict, bool]] = []
                if time.monotonic() >= next_claim:
                    next_claim = time.monotonic() + max(self.claim_idle_ms / 2000, 0.2)
                    _, claimed, _deleted = await self.redis.xautoclaim(
                        self.stream, GROUP, self.consumer, self.claim_idle_ms, "0-0", count=free
                    )
                    entries += [(i, f, True) for i, f in claimed if f]
                if not entries:
                    got = await self.redis.xreadgroup(GROUP, self.consumer, {self.stream: ">"}, count=free, block=500)
                    for _stream, items in got or []:
                        entries += [(i, f, False) for i, f in items]
                for entry_id, fields, claimed in entries:
                    t = asyncio.create_task(self._handle(entry_id, fields, claimed))
                    self._tasks.add(t)
                    t.add_done_callback(self._done)
                with contextlib.suppress(Exception):
                    groups = await self.redis.xinfo_groups(self.stream)
                    for g in groups:
                        if g.get("name") == GROUP and g.get("lag") is not None:
                            metrics.QUEUE_DEPTH.set(g["lag"])
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis hiccups must not kill the worker loop
                if isinstance(exc, aioredis.ResponseError) and "NOGROUP" in str(exc):
                    # Redis came back empty (restarted without persistence): the group must exist again.
                    log.warning("consumer group %s is gone from Redis; creating it again", GROUP)
                    with contextlib.suppress(Exception):
                        await self.redis.xgroup_create(self.stream, GROUP, id="0", mkstream=True)
                    continue
                log.warning("queue worker loop error: %s: %s", type(exc).__name__, exc)
                await asyncio.sleep(1.0)

    def in_flight(self) -> int:
        """Episodes this collector is running for the queue now."""
        return len(self._tasks)

    def _done(self, t: asyncio.Task) -> None:
        self._tasks.discard(t)
        self._freed.set()
        if not t.cancelled() and t.exception() is not None:
            log.error("queue episode failed: %r", t.exception())

    async def _deliveries(self, entry_id: str) -> int:
        info = await self.redis.xpending_range(self.stream, GROUP, min=entry_id, max=entry_id, count=1)
        return int(info[0]["times_delivered"]) if info else 1

    async def _handle(self, entry_id: str, fields: dict, claimed: bool) -> None:
        assert self._run_job is not None
        run_id = fields["run_id"]
        job = EpisodeJob.from_json(fields["job"])
        spec, state, target = await self._spec(run_id)
        if spec is None or state != STATE_NAMES[collector_pb2.RUN_STATE_RUNNING]:
            await self.redis.xack(self.stream, GROUP, entry_id)  # run gone or stopped: nothing to do
            return
        if await self.redis.sismember(self._k(run_id, "done"), job.episode_id):
            await self.redis.xack(self.stream, GROUP, entry_id)  # stored already by a collector that died before XACK
            return
        if claimed and await self._deliveries(entry_id) > self.max_deliveries:
            await self.redis.xadd(self.dead, {**fields, "reason": "max deliveries", "consumer": self.consumer})
            await self._record(run_id, job.episode_id, target, dead=True)
            await self.redis.xack(self.stream, GROUP, entry_id)
            return
        heartbeat = asyncio.create_task(self._keep_claimed(entry_id))
        try:
            tally = await self._run_job(job, spec)  # durable (store or spool) when this returns
        finally:
            heartbeat.cancel()
        outcome = "errored" if tally.errored else "passed" if tally.passed else ""
        summary = json_format.MessageToJson(tally.summary, indent=None)
        await self._record(run_id, job.episode_id, target, steps=tally.steps, outcome=outcome, summary=summary)
        await self.redis.xack(self.stream, GROUP, entry_id)

    async def _keep_claimed(self, entry_id: str) -> None:
        """Re-claim ``entry_id`` for this consumer while it runs, so no other collector takes it over."""
        every = max(self.claim_idle_ms / 3000, 0.05)
        while True:
            await asyncio.sleep(every)
            try:
                await self.redis.xclaim(self.stream, GROUP, self.consumer, 0, [entry_id], justid=True)
            except Exception as exc:  # Redis down: the entry may be claimed by others, as before
                log.debug("re-claiming %s failed: %s", entry_id, exc)

    async def _record(
        self, run_id: str, episode_id: str, target: int, *, steps: int = 0, outcome: str = "", summary: str = "",
        dead: bool = False,
    ) -> None:
        """Count an episode once (done set, counts, summary) and finish the run at its target, in one atomic step.

        One script, not SADD then a counts pipeline then a finish check: a collector SIGKILLed between those
        left an episode in the done set that no count ever included (whoever took the entry over saw it done and
        only acknowledged it), so the run never reached its target and stayed running forever (seen in CI).
        """
        await self.redis.eval(
            _RECORD, 4,
            self._k(run_id, "done"), self._k(run_id, "counts"), self._k(run_id, "summaries"), self._k(run_id, "meta"),
            episode_id, "dead" if dead else "finished", steps, outcome, summary, target,
            STATE_NAMES[collector_pb2.RUN_STATE_RUNNING], STATE_NAMES[collector_pb2.RUN_STATE_SUCCEEDED],
        )


def _id(entry_id: str) -> tuple[int, int]:
    """A stream entry id as a sortable pair."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _merge(packed: list[bytes]) -> dict[str, list[dict]]:
    """The rows of several packed batches, by table."""
    out: dict[str, list[dict]] = {}
    for data in packed:
        for table, rows in unpack(data).items():
            out.setdefault(table, []).extend(rows)
    return out
