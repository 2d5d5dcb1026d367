"""Server interceptors: metrics for every RPC, the bearer-token check and domain-error translation.

One interceptor wraps each method handler so that unary and streaming RPCs are counted and timed the same way,
and a :class:`~webenv.errors.WebenvError` raised anywhere in a servicer becomes its status code with an ErrorInfo
detail. Unexpected exceptions become INTERNAL with the exception type in the message (and a logged traceback),
never a silent UNKNOWN.

Request bytes that do not decode as the method's request message are answered INVALID_ARGUMENT (field
``request``) with one warning line: left to grpc, a decode failure inside its server loop is UNKNOWN plus a
logged traceback for every such call. The interceptor wraps each handler's request deserializer so a
failure yields an :class:`Undecodable` marker instead of raising; unary calls are refused before the servicer
runs, and a stream's request iterator ends at the bad message (the servicer finishes the items it already has,
as after a half-close) and the call then ends INVALID_ARGUMENT.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from webenv import errors
from webenv.runtime import metrics
from webenv.runtime.heap import Activity

log = logging.getLogger("webenv.runtime")

#: Methods reachable without a token, so Kubernetes probes and grpcurl discovery keep working.
PUBLIC_SERVICES = ("grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection", "grpc.reflection.v1.ServerReflection")


class Undecodable:
    """What a wrapped deserializer returns for bytes that are not a valid request message."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _tolerant(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """``deserializer`` returning :class:`Undecodable` instead of raising."""
    if deserializer is None:
        return None

    def deserialize(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception as exc:  # DecodeError, or anything a custom deserializer raises
            return Undecodable(exc)

    return deserialize


class _Requests:
    """A stream's requests, counted; iteration ends at an undecodable message, whose error is kept in ``bad``."""

    __slots__ = ("_requests", "_received", "_refuse", "_activity", "bad")

    def __init__(self, requests: AsyncIterator[Any], received: Any, refuse: Callable[[Undecodable], errors.WebenvError],
                 activity: Activity) -> None:
        self._requests = requests
        self._received = received
        self._refuse = refuse
        self._activity = activity
        self.bad: errors.WebenvError | None = None

    async def __aiter__(self) -> AsyncIterator[Any]:
        async for item in self._requests:
            self._received.inc()
            self._activity.touch()
            if isinstance(item, Undecodable):
                self.bad = self._refuse(item)
                return
            yield item


def _split(full_method: str) -> tuple[str, str]:
    _, service, method = full_method.split("/", 2) if full_method.count("/") >= 2 else ("", "unknown", full_method)
    return service, method


class ServerInterceptor(grpc.aio.ServerInterceptor):
    """Counts, times, authenticates and translates errors for every RPC."""

    def __init__(self, auth_token: str = "", activity: Activity | None = None) -> None:
        self._token = auth_token
        self.activity = activity or Activity()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(details)
        if handler is None:
            return None
        service, method = _split(details.method)
        denied = self._token and service not in PUBLIC_SERVICES and not self._authorized(details)
        if handler.unary_unary:
            kind, behavior = "unary", handler.unary_unary
        elif handler.unary_stream:
            kind, behavior = "server_stream", handler.unary_stream
        elif handler.stream_unary:
            kind, behavior = "client_stream", handler.stream_unary
        else:
            kind, behavior = "bidi_stream", handler.stream_stream
        labels = (service, method, kind)
        wrapped = _wrap(behavior, kind, labels, bool(denied), self.activity)
        factory = {
            "unary": grpc.unary_unary_rpc_method_handler,
            "server_stream": grpc.unary_stream_rpc_method_handler,
            "client_stream": grpc.stream_unary_rpc_method_handler,
            "bidi_stream": grpc.stream_stream_rpc_method_handler,
        }[kind]
        return factory(
            wrapped,
            request_deserializer=_tolerant(handler.request_deserializer),
            response_serializer=handler.response_serializer,
        )

    def _authorized(self, details: grpc.HandlerCallDetails) -> bool:
        for key, value in details.invocation_metadata or ():
            if key == "authorization" and isinstance(value, str) and value.startswith("Bearer "):
                return hmac.compare_digest(value[7:].encode(), self._token.encode())
        return False


def _wrap(
    behavior: Callable[..., Any], kind: str, labels: tuple[str, str, str], denied: bool, activity: Activity
) -> Callable[..., Any]:
    started, received, sent = (m.labels(*labels) for m in (metrics.STARTED, metrics.RECEIVED, metrics.SENT))
    handling = metrics.HANDLING.labels(*labels)

    def finish(code: grpc.StatusCode, t0: float) -> None:
        metrics.HANDLED.labels(*labels, code.name).inc()
        handling.observe(time.perf_counter() - t0)

    def undecodable(item: Undecodable) -> errors.InvalidArgument:
        log.warning("undecodable request to %s/%s: %s: %s", labels[0], labels[1], type(item.error).__name__,
                    errors.bounded(str(item.error), 200))
        return errors.InvalidArgument(
            f"request: not a valid request message for {labels[1]} ({type(item.error).__name__}: {item.error})",
            reason="UNDECODABLE_REQUEST", metadata={"field": "request"},
        )

    def as_domain_error(exc: BaseException, context: grpc.aio.ServicerContext) -> errors.WebenvError:
        """The domain error a failure ends the call with (unexpected ones become INTERNAL, logged)."""
        if isinstance(exc, errors.WebenvError):
            return exc
        if isinstance(exc, NotImplementedError) and code_of(context) == grpc.StatusCode.UNIMPLEMENTED:
            # the generated servicer base class: a method of the contract this service does not serve (yet)
            return errors.Unimplemented(f"{labels[0]}/{labels[1]} is not implemented by this server")
        log.exception("unhandled error in %s/%s", labels[0], labels[1])
        return errors.Internal(f"internal error in {labels[1]}: {type(exc).__name__}: {exc}")

    def code_of(context: grpc.aio.ServicerContext) -> grpc.StatusCode:
        code = context.code()
        if isinstance(code, grpc.StatusCode):
            return code
        if isinstance(code, int):
            return next((c for c in grpc.StatusCode if c.value[0] == code), grpc.StatusCode.UNKNOWN)
        return grpc.StatusCode.OK

    @contextlib.asynccontextmanager
    async def accounted(context: grpc.aio.ServicerContext) -> AsyncIterator[None]:
        """Count and time one RPC and end it with the status its outcome deserves, whatever the servicer raised."""
        t0 = time.perf_counter()
        started.inc()
        activity.touch()
        code = grpc.StatusCode.OK
        try:
            if denied:
                raise errors.Unauthenticated("missing or invalid bearer token", reason="BAD_TOKEN")
            yield
            code = code_of(context)
        except asyncio.CancelledError:
            code = grpc.StatusCode.CANCELLED
            raise
        except grpc.aio.AbortError:
            code = code_of(context)
            raise
        except Exception as exc:  # every failure must end as a status
            err = as_domain_error(exc, context)
            code = err.code
            await context.abort_with_status(err.to_status())  # raises AbortError
        finally:
            finish(code, t0)

    def one_request(request: Any) -> Any:
        received.inc()
        if isinstance(request, Undecodable):
            raise undecodable(request)
        return request

    if kind in ("unary", "client_stream"):

        async def unary_response(request: Any, context: grpc.aio.ServicerContext) -> Any:
            async with accounted(context):
                if kind == "unary":
                    response = await behavior(one_request(request), context)
                else:
                    requests = _Requests(request, received, undecodable, activity)
                    response = await behavior(requests.__aiter__(), context)
                    if requests.bad is not None:
                        raise requests.bad
                if response is not None:
                    sent.inc()
                return response

        return unary_response

    async def stream_response(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        async with accounted(context):
            requests = None
            if kind == "server_stream":
                request = one_request(request)
            else:
                requests = _Requests(request, received, undecodable, activity)
                request = requests.__aiter__()
            result = behavior(request, context)
            if inspect.isasyncgen(result):
                async for response in result:
                    sent.inc()
                    yield response
            else:  # the servicer writes with context.write() and returns None
                await result
            if requests is not None and requests.bad is not None:
                raise requests.bad

    return stream_response
