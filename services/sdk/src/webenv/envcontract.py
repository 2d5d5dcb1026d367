"""Rules of the EnvironmentService contract that every implementation applies in the same code.

The browser farm and the world model serve one contract, and a client switches between them by address, so
they must answer the same requests the same way: which actions and observation specs are malformed
(INVALID_ARGUMENT naming the field), what a repeated `step_index` means, which leases are valid. Keeping these
rules here — not in each service — is what makes them the same; `tests/test_environment_conformance.py` checks
both implementations over real gRPC channels.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from webenv import errors, tokens
from webenv.actions import ACTION_KINDS
from webenv.streams import serve_in_completion_order
from webenv.v1 import common_pb2, environment_pb2


def web_url_problem(url: str) -> str:
    """What keeps a browser from opening ``url`` as a page ('' when nothing): it must parse, be http or https, have a
    host name (no spaces or control characters in it) and, when it has a port, a number within 1..65535. The farm
    applies it to every start URL and top-level navigation (with its URL guard, or alone where the guard is off),
    task files to their start URLs when they are read: a port left as a placeholder (``http://127.0.0.1:PORT/``)
    passed both and then failed once per episode with Chromium's "Cannot navigate to invalid URL"."""
    raw = url.strip()
    if not raw:
        return "is empty"
    try:
        parts = urlsplit(raw)
    except ValueError as exc:
        return f"is not a URL: {exc}"
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        return f"scheme {scheme or '(none)'}: is not http or https"
    host = parts.hostname or ""
    if not host:
        return "has no host"
    if any(c.isspace() or ord(c) < 32 or c in "<>\\^|%\"" for c in host):
        return f"host {host!r} is not a host name"
    try:
        port = parts.port
    except ValueError:
        given = parts.netloc.rsplit("]", 1)[-1].rpartition(":")[2]
        if given.isdigit():
            return f"port {given} is out of range 1..65535"
        return f"port {given!r} is not a number"
    if port == 0:
        return "port 0 is out of range 1..65535"
    return ""


def element_ref(msg: Any, field: str, required: bool = True) -> dict[str, str] | None:
    """{"id": ...} or {"sel": ...} of an action's ElementTarget; INVALID_ARGUMENT naming `field` when missing/empty."""
    if not msg.HasField("target") or not msg.target.WhichOneof("ref"):
        if required:
            raise errors.InvalidArgument(f"{field}: element_id or selector is required", reason="BAD_ACTION",
                                         metadata={"field": field})
        return None
    t = msg.target
    if t.WhichOneof("ref") == "element_id":
        if not t.element_id.strip():
            raise errors.InvalidArgument(f"{field}.element_id: empty", reason="BAD_ACTION", metadata={"field": field})
        return {"id": t.element_id.strip()}
    if not t.selector.strip():
        raise errors.InvalidArgument(f"{field}.selector: empty", reason="BAD_ACTION", metadata={"field": field})
    return {"sel": t.selector}


def validate_action(action: common_pb2.Action, max_wait_ms: int) -> str:
    """Check an action's shape before anything acts on it; returns its kind or raises INVALID_ARGUMENT
    (reason BAD_ACTION) naming the bad field."""
    kind = action.WhichOneof("kind") or ""
    if not kind:
        raise errors.InvalidArgument("action: no action kind is set", reason="BAD_ACTION", metadata={"field": "action"})
    msg = getattr(action, kind)
    if ACTION_KINDS[kind].target:
        element_ref(msg, f"action.{kind}.target", required=ACTION_KINDS[kind].target == "required")
    if kind == "click" and msg.click_count < 0:
        raise errors.InvalidArgument("action.click.click_count: must be >= 0", reason="BAD_ACTION",
                                     metadata={"field": "action.click.click_count"})
    if kind == "select" and not msg.options:
        raise errors.InvalidArgument("action.select.options: at least one option is required", reason="BAD_ACTION",
                                     metadata={"field": "action.select.options"})
    if kind == "press" and not msg.key.strip():
        raise errors.InvalidArgument("action.press.key: a key name is required", reason="BAD_ACTION",
                                     metadata={"field": "action.press.key"})
    if kind in ("click_at", "drag"):
        coords = [msg.x, msg.y] if kind == "click_at" else [msg.from_x, msg.from_y, msg.to_x, msg.to_y]
        if any(c < 0 or c != c for c in coords):
            raise errors.InvalidArgument(f"action.{kind}: coordinates must be >= 0", reason="BAD_ACTION",
                                         metadata={"field": f"action.{kind}"})
    if kind == "navigate" and not msg.url.strip():
        raise errors.InvalidArgument("action.navigate.url: a URL is required", reason="BAD_ACTION",
                                     metadata={"field": "action.navigate.url"})
    if kind == "switch_tab" and not msg.tab_id.strip():
        raise errors.InvalidArgument("action.switch_tab.tab_id: a tab id is required", reason="BAD_ACTION",
                                     metadata={"field": "action.switch_tab.tab_id"})
    if kind == "wait" and not 0 <= msg.milliseconds <= max_wait_ms:
        raise errors.InvalidArgument(f"action.wait.milliseconds: must be within 0..{max_wait_ms}",
                                     reason="BAD_ACTION", metadata={"field": "action.wait.milliseconds"})
    return kind


#: The smallest AXTREE budget (ObservationSpec.budget_chars): room for the page's first lines and the note of what was cut.
MIN_BUDGET_CHARS = 500
#: The smallest AXTREE budget in tokens (ObservationSpec.budget_tokens): about MIN_BUDGET_CHARS at 3-4 characters a token.
MIN_BUDGET_TOKENS = 150
#: The most steps between whole incremental observations (ObservationSpec.full_every).
MAX_FULL_EVERY = 10000


def validate_observation_spec(spec: common_pb2.ObservationSpec, field: str) -> None:
    """Reject specs that name no real format or ask for impossible sizes (INVALID_ARGUMENT BAD_OBSERVATION_SPEC).

    A real format an implementation cannot produce is not an error: it is left out of the observation."""
    for f in spec.formats:
        if f == common_pb2.OBSERVATION_FORMAT_UNSPECIFIED or f not in common_pb2.ObservationFormat.values():
            raise errors.InvalidArgument(f"{field}.formats: {f} is not a valid observation format",
                                         reason="BAD_OBSERVATION_SPEC", metadata={"field": f"{field}.formats"})
    validate_screenshot_spec(spec.screenshot, f"{field}.screenshot")
    if spec.budget_chars and not MIN_BUDGET_CHARS <= spec.budget_chars:
        raise errors.InvalidArgument(f"{field}.budget_chars: must be 0 (no budget) or at least {MIN_BUDGET_CHARS}",
                                     reason="BAD_OBSERVATION_SPEC", metadata={"field": f"{field}.budget_chars"})
    if spec.budget_tokens and not MIN_BUDGET_TOKENS <= spec.budget_tokens:
        raise errors.InvalidArgument(f"{field}.budget_tokens: must be 0 (no budget) or at least {MIN_BUDGET_TOKENS}",
                                     reason="BAD_OBSERVATION_SPEC", metadata={"field": f"{field}.budget_tokens"})
    if spec.budget_tokens and spec.budget_chars:
        raise errors.InvalidArgument(f"{field}.budget_tokens: set budget_chars or budget_tokens, not both",
                                     reason="BAD_OBSERVATION_SPEC", metadata={"field": f"{field}.budget_tokens"})
    if spec.budget_tokens or spec.tokenizer:
        if not spec.budget_tokens:
            raise errors.InvalidArgument(f"{field}.tokenizer: only with budget_tokens", reason="BAD_OBSERVATION_SPEC",
                                         metadata={"field": f"{field}.tokenizer"})
        tokens.check(spec.tokenizer, f"{field}.tokenizer")
        tokens.counter(spec.tokenizer)  # loaded now: one that cannot load fails the call before anything is acted
    if spec.max_text_chars < 0:
        raise errors.InvalidArgument(f"{field}.max_text_chars: must be >= 0", reason="BAD_OBSERVATION_SPEC",
                                     metadata={"field": f"{field}.max_text_chars"})
    if not 0 <= spec.full_every <= MAX_FULL_EVERY:
        raise errors.InvalidArgument(f"{field}.full_every: must be within 0..{MAX_FULL_EVERY} (0 = every 20 steps)",
                                     reason="BAD_OBSERVATION_SPEC", metadata={"field": f"{field}.full_every"})


def validate_screenshot_spec(s: common_pb2.ScreenshotSpec, field: str) -> None:
    """Reject impossible screenshot sizes and qualities, naming the field."""
    if s.width < 0 or s.height < 0 or s.width > 8192 or s.height > 8192:
        raise errors.InvalidArgument(f"{field}: width/height must be within 0..8192",
                                     reason="BAD_OBSERVATION_SPEC", metadata={"field": field})
    if s.codec not in common_pb2.ImageCodec.values():
        raise errors.InvalidArgument(f"{field}.codec: {s.codec} is not an image codec (PNG, JPEG or WEBP)",
                                     reason="BAD_OBSERVATION_SPEC", metadata={"field": f"{field}.codec"})
    if not 0 <= s.quality <= 100:
        raise errors.InvalidArgument(f"{field}.quality: must be within 0..100",
                                     reason="BAD_OBSERVATION_SPEC", metadata={"field": f"{field}.quality"})


def validate_lease(seconds: float, max_seconds: float) -> None:
    """A requested lease (OpenSession, RenewLease): 0 means the default; INVALID_ARGUMENT BAD_LEASE outside 0..max."""
    if not 0 <= seconds <= max_seconds:
        raise errors.InvalidArgument(f"lease_seconds: must be within 0..{max_seconds:g}", reason="BAD_LEASE",
                                     metadata={"field": "lease_seconds"})


MAX_FORK_COUNT = 32  # ForkSessionRequest.count: at most this many copies per call (environment.proto)


def validate_fork_count(count: int) -> None:
    """ForkSession's `count`: INVALID_ARGUMENT BAD_COUNT naming the field outside 1..MAX_FORK_COUNT."""
    if not 1 <= count <= MAX_FORK_COUNT:
        raise errors.InvalidArgument(f"count: must be within 1..{MAX_FORK_COUNT} (got {count})", reason="BAD_COUNT",
                                     metadata={"field": "count", "max": str(MAX_FORK_COUNT)})


def is_retry(request: environment_pb2.StepRequest, step_count: int, last_index: int | None,
             last_action: common_pb2.Action | None) -> bool:
    """What a Step's `step_index` asks, given the session's steps so far and its last answered step (index, action).

    * unset: no check, act (False) — the proto3 default never means "step 0", so a client that does not send the
      index has every action taken;
    * negative: INVALID_ARGUMENT BAD_STEP_INDEX naming `step_index`;
    * the next index (`step_count`): act (False);
    * the index of the last step answered (step 0 included) with the same action: a retry — answer it from the
      cache, never act twice (True);
    * anything else — that index with another action, an index behind the last step or ahead of the next:
      FAILED_PRECONDITION STEP_INDEX_MISMATCH, expected index in the metadata.
    """
    if not request.HasField("step_index"):
        return False
    step_index = request.step_index
    if step_index < 0:
        raise errors.InvalidArgument(f"step_index: must be >= 0 (got {step_index}); leave it unset for no check",
                                     reason="BAD_STEP_INDEX", metadata={"field": "step_index"})
    if step_index == step_count:
        return False
    if last_index is not None and step_index == last_index:
        if last_action == request.action:
            return True
        why = f"step_index: step {step_index} was taken with another action (send {step_count} for a new step)"
    else:
        why = f"step_index: {step_index} does not match the session's next step {step_count}"
    raise errors.FailedPrecondition(why, reason="STEP_INDEX_MISMATCH",
                                    metadata={"field": "step_index", "expected": str(step_count)})


def task_reference(task: common_pb2.Task) -> str:
    """The id of an OpenSession task given by id alone (nothing set but ``task_id``), for the environment to resolve
    from the task catalog; '' for a whole task (or one with no id)."""
    return task.task_id if task.task_id and task == common_pb2.Task(task_id=task.task_id) else ""


def require_session_id(session_id: str) -> None:
    if not session_id:
        raise errors.InvalidArgument("session_id: required", reason="BAD_SESSION_ID", metadata={"field": "session_id"})


def session_not_found(session_id: str, where: str) -> errors.NotFound:
    return errors.NotFound(f"session {session_id} does not exist on {where}", reason="SESSION_NOT_FOUND",
                           metadata={"session_id": session_id})


def session_ended(session_id: str, state_name: str) -> errors.FailedPrecondition:
    """The error for acting on a session that is no longer open (state_name e.g. SESSION_STATE_CLOSED)."""
    return errors.FailedPrecondition(f"session {session_id} is no longer open ({state_name})",
                                     reason="SESSION_" + state_name.removeprefix("SESSION_STATE_"),
                                     metadata={"session_id": session_id, "state": state_name})


#: Unanswered items per StepStream (`webenv.streams`): above any node's open sessions (the farm's default is 64, the
#: world model's 1000), so only a client sending many steps per session at once waits for its items to be read.
STEP_STREAM_MAX_INFLIGHT = 1024


def step_stream(requests: AsyncIterator[environment_pb2.StepStreamRequest],
                step: Callable[[environment_pb2.StepRequest], Awaitable[environment_pb2.StepResponse]],
                max_inflight: int = STEP_STREAM_MAX_INFLIGHT) -> AsyncIterator[environment_pb2.StepStreamResponse]:
    """StepStream's semantics, the same for every implementation: each item is ``step(item.step)`` in its own task,
    answered in completion order by `tag`; a failed item becomes a StreamError for its tag and the stream goes on
    (`webenv.streams.serve_in_completion_order`)."""

    async def answer(item: environment_pb2.StepStreamRequest) -> environment_pb2.StepResponse:
        return await step(item.step)

    return serve_in_completion_order(requests, answer, environment_pb2.StepStreamResponse,
                                     max_inflight=max_inflight, what="step")
