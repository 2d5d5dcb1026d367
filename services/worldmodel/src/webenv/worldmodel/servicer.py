"""WorldModelService: Predict and GetModelInfo over gRPC."""

from __future__ import annotations

import grpc
from webenv import errors
from webenv.actions import format_action
from webenv.envcontract import validate_action
from webenv.v1 import worldmodel_pb2, worldmodel_pb2_grpc
from webenv.worldmodel.compose import PageView
from webenv.worldmodel.formats import Format, convert
from webenv.worldmodel.predict import ModelInfo, Predictor, Query

FORMAT_OF = {
    worldmodel_pb2.STATE_FORMAT_AXTREE: Format.AXTREE,
    worldmodel_pb2.STATE_FORMAT_HTML: Format.HTML,
    worldmodel_pb2.STATE_FORMAT_MARKDOWN: Format.MARKDOWN,
    worldmodel_pb2.STATE_FORMAT_XML: Format.XML,
}
PB_FORMAT = {v: k for k, v in FORMAT_OF.items()}


def ready(predictor: Predictor | None) -> Predictor:
    """The predictor, or UNAVAILABLE while the model is still loading (health is NOT_SERVING then too)."""
    if predictor is None:
        raise errors.Unavailable("the model is still loading", reason="MODEL_LOADING")
    return predictor


def check_format(value: int, info: ModelInfo) -> tuple[Format, Format]:
    """(requested format, format the model works in); XML requests are served by an axtree model via conversion."""
    if value == worldmodel_pb2.STATE_FORMAT_UNSPECIFIED:
        raise errors.InvalidArgument("format: must be set (AXTREE, HTML, MARKDOWN or XML)", reason="FORMAT_UNSPECIFIED",
                                     metadata={"field": "format"})
    if value not in FORMAT_OF:
        raise errors.InvalidArgument(f"format: unknown value {value}", reason="UNKNOWN_FORMAT", metadata={"field": "format"})
    fmt = FORMAT_OF[value]
    if fmt.value in info.formats:
        return fmt, fmt
    if fmt == Format.XML and Format.AXTREE.value in info.formats:
        return fmt, Format.AXTREE
    raise errors.InvalidArgument(
        f"format: {fmt.value} is not served by this model (trained on {', '.join(info.formats)})",
        reason="FORMAT_NOT_SUPPORTED", metadata={"field": "format", "supported": ",".join(info.formats)})


class WorldModelServicer(worldmodel_pb2_grpc.WorldModelServiceServicer):
    """Predicts next states with the loaded backend."""

    def __init__(self, predictor: Predictor | None, max_state_chars: int, max_wait_ms: int = 10_000) -> None:
        self._predictor = predictor  # None while the model loads (the port binds first)
        self.max_state_chars = max_state_chars
        self.max_wait_ms = max_wait_ms

    @property
    def predictor(self) -> Predictor:
        return ready(self._predictor)

    @predictor.setter
    def predictor(self, predictor: Predictor) -> None:
        """The loaded world model (the service answers UNAVAILABLE until it is set)."""
        self._predictor = predictor

    @property
    def info(self) -> ModelInfo:
        return self.predictor.info

    async def Predict(self, request: worldmodel_pb2.PredictRequest, context: grpc.aio.ServicerContext) -> worldmodel_pb2.PredictResponse:
        fmt, model_fmt = check_format(request.format, self.info)
        if len(request.state) > self.max_state_chars:
            raise errors.InvalidArgument(
                f"state: {len(request.state)} characters exceeds the limit of {self.max_state_chars}",
                reason="STATE_TOO_LARGE", metadata={"field": "state", "limit": str(self.max_state_chars)})
        validate_action(request.action, self.max_wait_ms)
        if request.max_new_tokens < 0 or request.temperature < 0:
            raise errors.InvalidArgument("max_new_tokens and temperature must not be negative", reason="BAD_SAMPLING",
                                         metadata={"field": "max_new_tokens" if request.max_new_tokens < 0 else "temperature"})
        try:
            state = convert(request.state, fmt, model_fmt)
        except Exception as exc:
            raise errors.InvalidArgument(f"state: not valid {fmt.value}: {exc}", reason="STATE_MALFORMED",
                                         metadata={"field": "state"}) from exc
        pred = await self.predictor.predict(Query(
            PageView(request.url, state, dict(request.links)), format_action(request.action),
            history=[(t.url, t.action_text) for t in request.history], instruction=request.instruction,
            max_new_tokens=request.max_new_tokens, temperature=request.temperature))
        next_state = convert(pred.next_state, model_fmt, fmt) if fmt != model_fmt else pred.next_state
        return worldmodel_pb2.PredictResponse(
            next_state=next_state, next_url=pred.next_url, edit=pred.edit, reasoning=pred.reasoning,
            prompt_tokens=pred.prompt_tokens, completion_tokens=pred.completion_tokens,
            latency_seconds=pred.latency_seconds, fallback=pred.fallback, next_links=pred.page.links,
            navigated=pred.navigated)

    async def GetModelInfo(self, request: worldmodel_pb2.GetModelInfoRequest, context: grpc.aio.ServicerContext) -> worldmodel_pb2.GetModelInfoResponse:
        info = self.info
        return worldmodel_pb2.GetModelInfoResponse(
            model=info.model, backend=info.backend, formats=[PB_FORMAT[Format(f)] for f in info.formats if f in Format._value2member_map_],
            parameters=info.parameters, max_context_tokens=info.max_context_tokens)
