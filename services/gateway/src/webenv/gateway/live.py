"""Live streams: a run's progress and one session's steps, fanned out to WebSocket viewers.

One upstream watch per run or session, whatever the number of viewers (a topic): ``CollectorService.WatchRun``
for a run; for a session, the steps made through this gateway's REST ``Step`` (action, timings, observation
summary and the step's own screenshot when it asked for one) plus a poll of ``GetSession`` (step count, step
rate, URL, state) and, for viewers who asked for frames, ``BrowserFarmService.CaptureScreenshot`` previews; frames
(the steps' own screenshots and previews alike) go out at most every ``WEBENV_FRAME_INTERVAL_SECONDS`` per session,
so serving viewers costs viewers x frame rate whatever the agents' step rate (measured on 2 cores: 40 viewers of
full-size frames of every step took an agent's step p50 from 222 to 421-669 ms; at one frame per second, 194 to
206-209 ms; bench/results/gateway.md). That covers what the gateway can know of a session: an agent that
steps through the gateway is seen step by step; one that steps the farm directly (the collector's StepStream)
is seen through its step count, URL and previews, which the farm takes beside the steps (never waiting for
them, bounded per node).

Back-pressure: publishing never awaits. Each frame is serialised once and offered to every viewer's bounded
queue; a full queue drops its oldest frame (counted in ``webenv_gateway_frames_dropped_total`` and reported to
the viewer as ``dropped``), so a viewer on a slow link sees fewer, newer frames and the agents, the upstream
watch and the other viewers never wait for it. Newcomers first get the topic's latest frame of each type.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import grpc
from starlette.websockets import WebSocket, WebSocketDisconnect
from webenv import errors
from webenv.actions import format_action
from webenv.gateway import metrics, status
from webenv.gateway.transcoder import to_dict
from webenv.v1 import (
    browser_pb2,
    browser_pb2_grpc,
    collector_pb2,
    collector_pb2_grpc,
    common_pb2,
    environment_pb2,
    environment_pb2_grpc,
)

log = logging.getLogger(__name__)
RATE_WINDOW_SECONDS = 10.0
_MIME = {common_pb2.IMAGE_CODEC_JPEG: "image/jpeg"}


class Viewer:
    """One connected viewer: a bounded queue of serialised frames (oldest dropped when full)."""

    def __init__(self, stream: str, maxlen: int, frames: bool) -> None:
        self.stream = stream
        self.frames = frames
        self.maxlen = maxlen
        self.queue: deque[str] = deque()
        self.dropped = 0
        self.closed = False
        self._ready = asyncio.Event()

    def offer(self, text: str) -> None:
        """Queue a frame without waiting; drops the oldest one when the queue is full."""
        if self.closed:
            return
        if len(self.queue) >= self.maxlen:
            self.queue.popleft()
            self.dropped += 1
            metrics.FRAMES_DROPPED.labels(self.stream).inc()
        self.queue.append(text)
        self._ready.set()

    def close(self) -> None:
        self.closed = True
        self._ready.set()

    async def get(self) -> str | None:
        """The next frame, or None once closed and drained."""
        while not self.queue:
            if self.closed:
                return None
            self._ready.clear()
            await self._ready.wait()
        return self.queue.popleft()


class Topic:
    """What the viewers of one run or session share: the upstream watch and the latest frame of each type."""

    def __init__(self, stream: str, key: str) -> None:
        self.stream = stream
        self.key = key
        self.viewers: set[Viewer] = set()
        self.latest: dict[str, tuple[str, bool]] = {}
        self.task: asyncio.Task[None] | None = None
        self.last_frame_at = 0.0

    @property
    def wants_frames(self) -> bool:
        return any(v.frames for v in self.viewers)

    def publish(self, frame: dict[str, Any], image: bool = False) -> None:
        """Serialise once, offer to every viewer (images only to those who asked); never waits."""
        text = json.dumps(frame, separators=(",", ":"), ensure_ascii=False)
        self.latest[frame["type"]] = (text, image)
        for v in self.viewers:
            if v.frames or not image:
                v.offer(text)

    def publish_image(self, shot: common_pb2.Screenshot, step_index: int, source: str) -> None:
        self.last_frame_at = time.monotonic()
        self.publish({"type": "frame", "source": source, "stepIndex": step_index,
                      "mime": _MIME.get(shot.codec, "image/png"), "width": shot.width, "height": shot.height,
                      "data": base64.b64encode(shot.data).decode()}, image=True)

    def close(self) -> None:
        for v in self.viewers:
            v.close()


def observation_summary(obs: common_pb2.Observation) -> dict[str, Any]:
    """What a viewer sees of an observation without its full text."""
    return {
        "url": obs.url, "title": obs.title, "lastActionError": obs.last_action_error,
        "formats": [common_pb2.ObservationFormat.Name(f) for f in obs.formats], "elements": len(obs.elements),
        "axtreeChars": len(obs.axtree), "tabs": len(obs.tabs),
    }


class LiveHub:
    """Topics by key, their upstream watches, and the hooks the REST routes call after Open/Step/Close."""

    def __init__(self, channel_for: Callable[[str], grpc.aio.Channel], *, viewer_queue: int, max_viewers: int,
                 session_poll_seconds: float, frame_interval_seconds: float, frame_width: int) -> None:
        self._channel_for = channel_for
        self.viewer_queue = viewer_queue
        self.max_viewers = max_viewers
        self.poll = session_poll_seconds
        self.frame_interval = frame_interval_seconds
        self.frame_width = frame_width
        self.topics: dict[str, Topic] = {}
        self.viewers = 0

    # -- viewers ---------------------------------------------------------------------------------------------------
    def join(self, stream: str, ident: str, frames: bool = False) -> tuple[Topic, Viewer]:
        """Add a viewer to a run's or session's topic (starting its upstream watch if it is the first)."""
        if self.viewers >= self.max_viewers:
            raise errors.ResourceExhausted(f"{self.viewers} live viewers connected (WEBENV_MAX_VIEWERS)",
                                           reason="TOO_MANY_VIEWERS", retry_after_seconds=5.0)
        key = f"{stream}:{ident}"
        topic = self.topics.get(key)
        if topic is None:
            topic = self.topics[key] = Topic(stream, key)
            source = self._run_source(topic, ident) if stream == "run" else self._session_source(topic, ident)
            topic.task = asyncio.get_running_loop().create_task(source, name=f"watch {key}")
            metrics.WATCHES.labels(stream).inc()
        viewer = Viewer(stream, self.viewer_queue, frames)
        for text, image in topic.latest.values():
            if frames or not image:
                viewer.offer(text)
        topic.viewers.add(viewer)
        self.viewers += 1
        metrics.VIEWERS.labels(stream).inc()
        return topic, viewer

    def leave(self, topic: Topic, viewer: Viewer) -> None:
        """Remove a viewer; the last one out stops the topic's upstream watch."""
        if viewer in topic.viewers:
            topic.viewers.discard(viewer)
            self.viewers -= 1
            metrics.VIEWERS.labels(topic.stream).dec()
        if not topic.viewers:
            self._drop(topic)

    def _drop(self, topic: Topic) -> None:
        if self.topics.get(topic.key) is topic:
            del self.topics[topic.key]
            metrics.WATCHES.labels(topic.stream).dec()
            if topic.task is not None and topic.task is not asyncio.current_task():
                topic.task.cancel()

    async def close(self) -> None:
        for topic in list(self.topics.values()):
            topic.close()
            self._drop(topic)

    async def serve(self, websocket: WebSocket, stream: str, ident: str) -> None:
        """One WebSocket viewer: frames out until the topic ends or the viewer goes; input is ignored."""
        frames = websocket.query_params.get("frames", "").lower() in ("1", "true", "yes")
        try:
            topic, viewer = self.join(stream, ident, frames)
        except errors.ResourceExhausted:
            await websocket.close(code=1013)
            return
        try:
            await websocket.accept()
            sender = asyncio.create_task(self._send(websocket, viewer))
            receiver = asyncio.create_task(self._drain_input(websocket))
            done, pending = await asyncio.wait({sender, receiver}, return_when=asyncio.FIRST_COMPLETED)
            for t in pending:
                t.cancel()
            for t in pending:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
            if sender in done:
                with contextlib.suppress(Exception):
                    await websocket.close(code=1000)
        finally:
            self.leave(topic, viewer)

    async def _send(self, websocket: WebSocket, viewer: Viewer) -> None:
        reported = 0
        while True:
            text = await viewer.get()
            if text is None:
                return
            if viewer.dropped != reported:  # tell the viewer how much it missed, then go on
                reported = viewer.dropped
                await websocket.send_text(json.dumps({"type": "dropped", "dropped": reported}))
            await websocket.send_text(text)
            metrics.FRAMES_SENT.labels(viewer.stream).inc()

    @staticmethod
    async def _drain_input(websocket: WebSocket) -> None:
        with contextlib.suppress(WebSocketDisconnect):
            while True:
                msg = await websocket.receive()
                if msg["type"] == "websocket.disconnect":
                    return

    # -- sources -----------------------------------------------------------------------------------------------------
    async def _run_source(self, topic: Topic, run_id: str) -> None:
        stub = collector_pb2_grpc.CollectorServiceStub(self._channel_for("webenv.v1.CollectorService"))
        try:
            async for resp in stub.WatchRun(collector_pb2.WatchRunRequest(run_id=run_id)):
                topic.publish({"type": "progress", "progress": to_dict(resp)})
            topic.publish({"type": "end", "runId": run_id})
        except grpc.aio.AioRpcError as exc:
            topic.publish({"type": "error", "error": status.to_json(status.from_rpc_error(exc))})
        finally:
            topic.close()
            self._drop(topic)

    async def _session_source(self, topic: Topic, session_id: str) -> None:
        env = environment_pb2_grpc.EnvironmentServiceStub(self._channel_for("webenv.v1.EnvironmentService"))
        farm = browser_pb2_grpc.BrowserFarmServiceStub(self._channel_for("webenv.v1.BrowserFarmService"))
        samples: deque[tuple[float, int]] = deque()
        can_capture = True
        spec = common_pb2.ScreenshotSpec(width=self.frame_width, codec=common_pb2.IMAGE_CODEC_JPEG, quality=60)
        try:
            while True:
                session = (await env.GetSession(environment_pb2.GetSessionRequest(session_id=session_id),
                                                timeout=10)).session
                now = time.monotonic()
                samples.append((now, session.step_count))
                while samples and now - samples[0][0] > RATE_WINDOW_SECONDS:
                    samples.popleft()
                t0, n0 = samples[0]
                rate = (session.step_count - n0) / (now - t0) if now > t0 else 0.0
                topic.publish({"type": "progress", "session": to_dict(session), "stepRate": round(rate, 3)})
                if session.state != environment_pb2.SESSION_STATE_OPEN:
                    topic.publish({"type": "end", "sessionId": session_id,
                                   "state": environment_pb2.SessionState.Name(session.state)})
                    return
                if can_capture and topic.wants_frames and now - topic.last_frame_at >= self.frame_interval:
                    try:
                        shot = await farm.CaptureScreenshot(browser_pb2.CaptureScreenshotRequest(
                            session_id=session_id, screenshot=spec), timeout=10)
                        topic.publish_image(shot.screenshot, shot.session.step_count, "capture")
                    except grpc.aio.AioRpcError as exc:
                        # UNIMPLEMENTED: an environment without previews (the world model); others: next time.
                        can_capture = exc.code() != grpc.StatusCode.UNIMPLEMENTED
                await asyncio.sleep(min(self.poll, self.frame_interval) if topic.wants_frames else self.poll)
        except grpc.aio.AioRpcError as exc:
            topic.publish({"type": "error", "error": status.to_json(status.from_rpc_error(exc))})
        finally:
            topic.close()
            self._drop(topic)

    # -- hooks on REST calls (O(1) when nobody watches the session) ------------------------------------------------
    def on_step(self, req: environment_pb2.StepRequest, resp: environment_pb2.StepResponse) -> None:
        topic = self.topics.get(f"session:{resp.session_id or req.session_id}")
        if topic is None:
            return
        try:
            action_text = format_action(req.action)
        except Exception:
            action_text = ""
        topic.publish({
            "type": "step", "sessionId": resp.session_id, "stepIndex": resp.step_index, "actionText": action_text,
            "action": to_dict(req.action), "targetElementId": resp.target_element_id, "reward": resp.reward,
            "done": resp.done, "truncated": resp.truncated, "timings": to_dict(resp.timings),
            "observation": observation_summary(resp.observation),
        })
        # Screenshots at most one per frame interval, however fast the agent steps: what viewers cost is bounded by
        # viewers x frame rate, not by the agents' step rate (the poller sends a preview when the agent pauses).
        if resp.observation.screenshot.data and time.monotonic() - topic.last_frame_at >= self.frame_interval:
            topic.publish_image(resp.observation.screenshot, resp.step_index, "step")

    def on_close(self, req: environment_pb2.CloseSessionRequest, resp: environment_pb2.CloseSessionResponse) -> None:
        topic = self.topics.get(f"session:{req.session_id}")
        if topic is not None:
            topic.publish({"type": "end", "sessionId": req.session_id, "state": "SESSION_STATE_CLOSED"})
            topic.close()
            self._drop(topic)
