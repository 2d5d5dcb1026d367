"""RunSpec validation and defaults: every rule a StartRun's spec must pass, in one module.

A bad spec is refused before anything runs, with an INVALID_ARGUMENT that names the offending field
(``spec.repeats``), so a client can point at it. ``resolve`` returns the spec with every default filled in,
which is what gets stored with the run: the stored spec says exactly what ran. ``admit`` is what StartRun
checks without asking another service (size, fields, defaults, whether the run can run on this collector);
``served_policy`` is the one check against the policy service, over the one ListPolicies answer the engine asks
for per StartRun (the planning needs the same answer: which tasks the policy solves).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlparse

from webenv import errors
from webenv.collector.replicas import DNS_PREFIX, split_host_port
from webenv.envcontract import web_url_problem
from webenv.v1 import collector_pb2, common_pb2, policy_pb2

DEFAULT_FORMATS = (common_pb2.OBSERVATION_FORMAT_AXTREE, common_pb2.OBSERVATION_FORMAT_HTML)
KNOWN_POLICIES = ("oracle", "random", "explore", "llm")
#: A trained checkpoint served by the policy service (PolicyService.LoadCheckpoint).
CHECKPOINT_POLICY = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}(@[1-9][0-9]{0,8})?$")
MAX_EPISODES = 10_000_000
MAX_CONCURRENCY = 4096
MAX_INLINE_TASKS = 10_000
#: Episodes of one group (RunSpec.group_size): beyond this a group is a run of its own.
MAX_GROUP_SIZE = 64
#: Forks of one anchor (EnvironmentService.ForkSession's limit).
MAX_BRANCHES = 32
MAX_HISTORY_RUNS = 1000


@dataclass(frozen=True)
class Defaults:
    """The collector's defaults for fields a spec leaves at zero."""

    env_address: str = "localhost:50051"
    concurrency: int = 16
    episode_timeout_seconds: float = 300.0
    policy: str = "random"


def check_size(spec: collector_pb2.RunSpec, max_bytes: int) -> None:
    """INVALID_ARGUMENT ``SPEC_TOO_LARGE`` for a spec larger than the collector takes (WEBENV_MAX_SPEC_BYTES)."""
    size = spec.ByteSize()
    if size > max_bytes:
        raise errors.InvalidArgument(
            f"spec: {size} bytes, more than the collector's limit of {max_bytes} (WEBENV_MAX_SPEC_BYTES)",
            reason="SPEC_TOO_LARGE", metadata={"field": "spec"})


def admit(spec: collector_pb2.RunSpec, defaults: Defaults, *, shared: bool) -> collector_pb2.RunSpec:
    """The resolved spec of a StartRun (``validate`` + ``resolve``), refusing a run this collector cannot run:
    branching on a collector that shares a work queue (``shared``) is FAILED_PRECONDITION."""
    resolved = resolve(spec, defaults)
    if resolved.branching.count and shared:
        raise errors.FailedPrecondition(
            "spec.branching: a branch group shares one anchor session, so it runs on one collector; this "
            "collector shares a work queue (WEBENV_REDIS_URL): start branching runs on one without",
            reason="BRANCHING_NOT_SHARED", metadata={"field": "spec.branching"})
    return resolved


def served_policy(policy: str, listed: Sequence[policy_pb2.PolicyInfo], address: str) -> policy_pb2.PolicyInfo:
    """The policy service's entry for ``policy`` (from its ListPolicies), or INVALID_ARGUMENT ``UNKNOWN_POLICY``.

    A checkpoint is served under its family name and as "<name>@<version>" (the current one is listed); a
    checkpoint named by version must be the one served now (a run of a version not loaded would fail every
    episode), a family name or a built-in policy matches its entry."""
    exact = next((p for p in listed if policy in (p.name, p.version)), None)
    if exact is not None:
        return exact
    family = policy.partition("@")[0]
    versioned = "@" in policy and policy not in KNOWN_POLICIES and CHECKPOINT_POLICY.match(policy)
    info = None if versioned else next((p for p in listed if p.name == family), None)
    if info is None:
        offered = ", ".join(p.name for p in listed)
        if versioned:
            served = sorted({p.name for p in listed} | {p.version for p in listed if p.version})
            offered = ", ".join(served)[:300] + "; load a checkpoint with PolicyService.LoadCheckpoint first"
        hint = " (the llm policy needs a model: see the policy service's README)" if policy == "llm" else ""
        raise errors.InvalidArgument(  # as the policy service answers an unknown policy name
            f"spec.policy: the policy service at {address} does not offer {policy!r}; it offers {offered}{hint}",
            reason="UNKNOWN_POLICY", metadata={"field": "spec.policy", "policy": policy})
    return info


def bad(field: str, message: str) -> errors.InvalidArgument:
    """INVALID_ARGUMENT ``BAD_RUN_SPEC`` naming ``field``."""
    return errors.InvalidArgument(f"{field}: {message}", reason="BAD_RUN_SPEC", metadata={"field": field})


def _enum_ok(enum_type, value: int) -> bool:
    return value in enum_type.values()


def validate(spec: collector_pb2.RunSpec, *, field: str = "spec") -> None:
    """Raise InvalidArgument naming the first bad field of ``spec``."""
    f = field
    if spec.episodes < 0:
        raise bad(f"{f}.episodes", f"must be >= 0, got {spec.episodes}")
    if spec.episodes > MAX_EPISODES:
        raise bad(f"{f}.episodes", f"must be <= {MAX_EPISODES}, got {spec.episodes}")
    if spec.repeats < 0:
        raise bad(f"{f}.repeats", f"must be >= 0, got {spec.repeats}")
    if spec.concurrency < 0 or spec.concurrency > MAX_CONCURRENCY:
        raise bad(f"{f}.concurrency", f"must be in [0, {MAX_CONCURRENCY}], got {spec.concurrency}")
    if spec.max_retries < 0 or spec.max_retries > 100:
        raise bad(f"{f}.max_retries", f"must be in [0, 100], got {spec.max_retries}")
    if spec.task_limit < 0:
        raise bad(f"{f}.task_limit", f"must be >= 0, got {spec.task_limit}")
    t = spec.episode_timeout_seconds
    if math.isnan(t) or t < 0 or t > 86400:
        raise bad(f"{f}.episode_timeout_seconds", f"must be in [0, 86400], got {t}")
    ff = spec.finish_fraction
    if math.isnan(ff) or ff < 0 or ff > 1:
        raise bad(f"{f}.finish_fraction", f"must be in [0, 1], got {ff}")
    for name in ("easy", "medium", "hard"):
        v = getattr(spec.horizons, name)
        if v < 0 or v > 1000:
            raise bad(f"{f}.horizons.{name}", f"must be in [0, 1000], got {v}")
    if not 0 <= spec.horizons.oracle_slack <= 100:
        raise bad(f"{f}.horizons.oracle_slack", f"must be in [0, 100], got {spec.horizons.oracle_slack}")
    if spec.policy and spec.policy not in KNOWN_POLICIES and not CHECKPOINT_POLICY.match(spec.policy):
        raise bad(f"{f}.policy", f"unknown policy {spec.policy[:80]!r}; expected one of {', '.join(KNOWN_POLICIES)} "
                                  "or a checkpoint the policy service loaded ('<name>' or '<name>@<version>')")
    t = spec.act_options.temperature
    if math.isnan(t) or not 0 <= t <= 5:
        raise bad(f"{f}.act_options.temperature", f"must be in [0, 5], got {t}")
    for name, enum_type in (
        ("sampling", collector_pb2.SamplingStrategy),
        ("level", collector_pb2.CollectionLevel),
        ("mode", collector_pb2.RolloutMode),
    ):
        if not _enum_ok(enum_type, getattr(spec, name)):
            raise bad(f"{f}.{name}", f"unknown value {getattr(spec, name)}")
    for i, fmt in enumerate(spec.observation_spec.formats):
        if fmt == common_pb2.OBSERVATION_FORMAT_UNSPECIFIED or not _enum_ok(common_pb2.ObservationFormat, fmt):
            raise bad(f"{f}.observation_spec.formats[{i}]", f"not an observation format: {fmt}")
    produced = set(spec.observation_spec.formats) or set(DEFAULT_FORMATS)
    for i, fmt in enumerate(spec.keep_formats):
        if fmt not in produced:
            raise bad(f"{f}.keep_formats[{i}]", f"format {common_pb2.ObservationFormat.Name(fmt) if _enum_ok(common_pb2.ObservationFormat, fmt) else fmt} is not among observation_spec.formats")
    for i, url in enumerate(spec.start_urls):
        problem = web_url_problem(url)  # the farm's rule: a URL it cannot open fails here, not once per episode
        if problem:
            raise bad(f"{f}.start_urls[{i}]", f"start URL {url[:200]!r} {problem}")
    if spec.start_urls and spec.level == collector_pb2.COLLECTION_LEVEL_TASK_ORIENTED:
        raise bad(f"{f}.start_urls", "a task-oriented run takes tasks, not start URLs")
    if spec.start_urls and spec.episodes == 0 and spec.repeats == 0:
        raise bad(f"{f}.episodes", "a crawl run needs episodes > 0 or repeats > 0")
    if spec.env_address and ":" not in spec.env_address:
        raise bad(f"{f}.env_address", f"must be host:port, got {spec.env_address!r}")
    for entry in spec.env_address.split(","):
        if entry.strip().startswith(DNS_PREFIX):
            try:
                split_host_port(entry.strip(), f"{f}.env_address")
            except ValueError as exc:
                raise bad(f"{f}.env_address", str(exc).split(": ", 1)[1]) from None
    if spec.starts:
        _validate_starts(spec, f)
    if spec.inline_tasks:
        _validate_inline(spec, f)
    _validate_groups(spec, f)
    tf = spec.tasks
    for i, d in enumerate(tf.difficulties):
        if not _enum_ok(common_pb2.Difficulty, d):
            raise bad(f"{f}.tasks.difficulties[{i}]", f"unknown difficulty {d}")
    for i, s in enumerate(tf.sources):
        if not _enum_ok(common_pb2.TaskSource, s):
            raise bad(f"{f}.tasks.sources[{i}]", f"unknown source {s}")
    if not _enum_ok(common_pb2.Split, tf.split):
        raise bad(f"{f}.tasks.split", f"unknown split {tf.split}")


def _validate_groups(spec: collector_pb2.RunSpec, f: str) -> None:
    """Group rollouts, branching and the frontier's history."""
    g = spec.group_size
    if g < 0 or g > MAX_GROUP_SIZE:
        raise bad(f"{f}.group_size", f"must be in [0, {MAX_GROUP_SIZE}], got {g}")
    if g > 1 and spec.episodes % g:
        raise bad(f"{f}.group_size", f"episodes ({spec.episodes}) must be a multiple of group_size ({g}): "
                                      "each drawn task runs as one whole group")
    b = spec.branching
    if b.count < 0 or b.count > MAX_BRANCHES:
        raise bad(f"{f}.branching.count", f"must be in [0, {MAX_BRANCHES}], got {b.count}")
    if b.at_step < 0 or b.at_step > 1000:
        raise bad(f"{f}.branching.at_step", f"must be in [0, 1000], got {b.at_step}")
    if b.count:
        if spec.start_urls:
            raise bad(f"{f}.branching", "branching compares judged continuations: it needs tasks, not start URLs")
        if spec.mode == collector_pb2.ROLLOUT_MODE_LOCK_STEP:
            raise bad(f"{f}.branching", "branching runs asynchronously (mode ASYNC)")
        if g > 1:
            raise bad(f"{f}.branching", "give either group_size or branching: a branch group is already a group")
        if spec.episodes % (b.count + 1):
            raise bad(f"{f}.branching.count", f"episodes ({spec.episodes}) must be a multiple of count + 1 "
                                               f"({b.count + 1}): each anchor yields itself and its forks")
    elif b.at_step:
        raise bad(f"{f}.branching.count", "at_step without count: set count (1..32) forks per anchor")
    if len(spec.history_run_ids) > MAX_HISTORY_RUNS:
        raise bad(f"{f}.history_run_ids", f"at most {MAX_HISTORY_RUNS} runs, got {len(spec.history_run_ids)}")
    for i, rid in enumerate(spec.history_run_ids):
        if not rid or len(rid) > 128:
            raise bad(f"{f}.history_run_ids[{i}]", "must be 1-128 characters")


def _validate_starts(spec: collector_pb2.RunSpec, f: str) -> None:
    """Episode starts: a run of them draws no tasks (the steps' bounds need the stored episodes: the engine's)."""
    if len(spec.starts) > MAX_INLINE_TASKS:
        raise bad(f"{f}.starts", f"at most {MAX_INLINE_TASKS} starts, got {len(spec.starts)}")
    for name, given in (("tasks", bool(spec.tasks.ListFields())), ("start_urls", bool(spec.start_urls)),
                        ("inline_tasks", bool(spec.inline_tasks)), ("episodes", bool(spec.episodes)),
                        ("repeats", spec.repeats > 1), ("group_size", spec.group_size > 1),
                        ("branching", bool(spec.branching.count))):
        if given:
            raise bad(f"{f}.{name}", "a run of starts draws no tasks: each start is one episode; leave it unset")
    if spec.mode == collector_pb2.ROLLOUT_MODE_LOCK_STEP:
        raise bad(f"{f}.starts", "starts run asynchronously (mode ASYNC)")
    for i, st in enumerate(spec.starts):
        if not st.episode_id or len(st.episode_id) > 128:
            raise bad(f"{f}.starts[{i}].episode_id", "must be 1-128 characters")
        if not 0 <= st.steps <= 1000:
            raise bad(f"{f}.starts[{i}].steps", f"must be in [0, 1000], got {st.steps}")


def per_draw(spec: collector_pb2.RunSpec) -> int:
    """Episodes one drawn task yields: a group (group_size), an anchor and its forks (branching), or 1."""
    if spec.branching.count:
        return spec.branching.count + 1
    return max(spec.group_size, 1)


def _validate_inline(spec: collector_pb2.RunSpec, f: str) -> None:
    if len(spec.inline_tasks) > MAX_INLINE_TASKS:
        raise bad(f"{f}.inline_tasks", f"at most {MAX_INLINE_TASKS} tasks, got {len(spec.inline_tasks)}")
    if spec.start_urls:
        raise bad(f"{f}.inline_tasks", "give either start_urls or inline_tasks, not both")
    if spec.tasks.ListFields():
        raise bad(f"{f}.tasks", "inline_tasks replace the catalog: leave the task filter empty")
    seen: set[str] = set()
    for i, t in enumerate(spec.inline_tasks):
        if not t.task_id:
            raise bad(f"{f}.inline_tasks[{i}].task_id", "required")
        if t.task_id in seen:
            raise bad(f"{f}.inline_tasks[{i}].task_id", f"duplicate task id {t.task_id!r}")
        seen.add(t.task_id)
        problem = web_url_problem(t.start_url)
        if problem:
            raise bad(f"{f}.inline_tasks[{i}].start_url", f"task {t.task_id!r}: start URL {t.start_url[:200]!r} {problem}")


def resolve(spec: collector_pb2.RunSpec, defaults: Defaults) -> collector_pb2.RunSpec:
    """Validate ``spec`` and return a copy with every default filled in."""
    validate(spec)
    out = collector_pb2.RunSpec()
    out.CopyFrom(spec)
    if not out.policy:
        out.policy = "random" if out.start_urls else defaults.policy
    if not out.env_address:
        out.env_address = defaults.env_address
    if not out.concurrency:
        out.concurrency = defaults.concurrency
    if not out.episode_timeout_seconds:
        out.episode_timeout_seconds = defaults.episode_timeout_seconds
    if not out.finish_fraction:
        out.finish_fraction = 1.0
    if not out.mode:
        out.mode = collector_pb2.ROLLOUT_MODE_ASYNC
    if not out.sampling:
        out.sampling = collector_pb2.SAMPLING_STRATEGY_UNIFORM
    if not out.horizons.easy:
        out.horizons.easy = 10
    if not out.horizons.medium:
        out.horizons.medium = 20
    if not out.horizons.hard:
        out.horizons.hard = 30
    if not out.observation_spec.formats:
        # AXTREE for policies, HTML because the judge's page criteria (CSS selectors) need it.
        out.observation_spec.formats.extend(DEFAULT_FORMATS)
    if not out.keep_formats:
        out.keep_formats.extend(out.observation_spec.formats)
    if not out.level:
        if out.start_urls:
            out.level = (
                collector_pb2.COLLECTION_LEVEL_EXPLORATION
                if out.policy in ("explore", "llm")
                else collector_pb2.COLLECTION_LEVEL_RANDOM_CRAWL
            )
        else:
            out.level = collector_pb2.COLLECTION_LEVEL_TASK_ORIENTED
    if not out.repeats and not out.episodes:
        out.repeats = 1
    return out


def horizon_for(spec: collector_pb2.RunSpec, task: common_pb2.Task) -> int:
    """Step cap for one task: the run's horizon by difficulty (medium when unknown), lowered by the task's own cap,
    then, with ``horizons.oracle_slack``, raised to the oracle solution's length plus the slack.

    The collector knows the oracle even when the policy is not shown it, so a cap below what the task needs is never
    chosen for it: under the caps by difficulty alone, hard tasks whose solution is longer than the cap could fail
    whatever the policy did, and counted as the policy's failures.
    """
    h = spec.horizons
    cap = {
        common_pb2.DIFFICULTY_EASY: h.easy or 10,
        common_pb2.DIFFICULTY_HARD: h.hard or 30,
    }.get(task.difficulty, h.medium or 20)
    if task.max_steps > 0:
        cap = min(cap, task.max_steps)
    if h.oracle_slack > 0 and len(task.oracle):
        cap = max(cap, len(task.oracle) + h.oracle_slack)
    return cap


def url_task(url: str, index: int) -> common_pb2.Task:
    """A goal-less task for crawl and exploration runs starting at ``url``."""
    host = urlparse(url).hostname or ""
    return common_pb2.Task(
        task_id=f"url/{host}/{index}",
        source=common_pb2.TASK_SOURCE_URL,
        kind=common_pb2.TASK_KIND_OPEN_ENDED,
        start_url=url,
        site=host,
        difficulty=common_pb2.DIFFICULTY_MEDIUM,
    )


