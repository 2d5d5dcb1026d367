"""Runtime overhead: unary RPC round trips through webenv's Server (health, metrics/auth/error interceptor)
versus a bare grpc.aio server with the same servicer, side by side in one process; and one bidi stream's
message rate through each. Writes bench/results/sdk.json and sdk.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

import grpc
from webenv.client import make_channel
from webenv.runtime import Server, ServiceSettings
from webenv.v1 import common_pb2, policy_pb2, policy_pb2_grpc


class Echo(policy_pb2_grpc.PolicyServiceServicer):
    async def Act(self, request, context):
        return policy_pb2.ActResponse(episode_id=request.episode_id, action_text="noop()")

    async def ActStream(self, request_iterator, context):
        async for item in request_iterator:
            yield policy_pb2.ActStreamResponse(tag=item.tag, response=policy_pb2.ActResponse(action_text="noop()"))


def _request() -> policy_pb2.ActRequest:
    obs = common_pb2.Observation(url="http://shop-0001.web.test/", axtree="[1] button \"Buy\"\n" * 60)
    return policy_pb2.ActRequest(episode_id="e", observation=obs)  # ~2 KB, like a small step


async def _measure(port: int, calls: int, stream_msgs: int) -> dict[str, float]:
    async with make_channel(f"127.0.0.1:{port}", timeout=None) as ch:
        stub = policy_pb2_grpc.PolicyServiceStub(ch)
        req = _request()
        for _ in range(50):
            await stub.Act(req)
        lat = []
        t0 = time.perf_counter()
        for _ in range(calls):
            t = time.perf_counter()
            await stub.Act(req)
            lat.append(time.perf_counter() - t)
        unary_rate = calls / (time.perf_counter() - t0)

        async def requests():
            for i in range(stream_msgs):
                yield policy_pb2.ActStreamRequest(tag=str(i), request=req)

        t0 = time.perf_counter()
        n = 0
        async for _ in stub.ActStream(requests()):
            n += 1
        stream_rate = n / (time.perf_counter() - t0)
    lat.sort()
    return {"unary_calls_per_s": unary_rate, "unary_p50_ms": statistics.median(lat) * 1e3,
            "unary_p95_ms": lat[int(len(lat) * 0.95)] * 1e3, "stream_msgs_per_s": stream_rate}


async def run(calls: int, stream_msgs: int) -> dict[str, dict[str, float]]:
    bare = grpc.aio.server()
    policy_pb2_grpc.add_PolicyServiceServicer_to_server(Echo(), bare)
    bare_port = bare.add_insecure_port("127.0.0.1:0")
    await bare.start()
    server = Server("bench", ServiceSettings(host="127.0.0.1", grpc_port=0, metrics_port=0))
    server.add_service(policy_pb2_grpc.add_PolicyServiceServicer_to_server, Echo(), "webenv.v1.PolicyService")
    results: dict[str, dict[str, float]] = {"bare": {}, "webenv": {}}
    async with server:
        await server.set_serving()
        for _ in range(2):  # alternate to spread machine noise over both
            for name, port in (("bare", bare_port), ("webenv", server.port)):
                r = await _measure(port, calls, stream_msgs)
                for k, v in r.items():
                    results[name].setdefault(k, []).append(v)  # type: ignore[union-attr]
    await bare.stop(0)
    return {n: {k: statistics.median(v) for k, v in d.items()} for n, d in results.items()}  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="bench/results")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--stream-msgs", type=int, default=5000)
    args = parser.parse_args()
    res = asyncio.run(run(args.calls, args.stream_msgs))
    ratio = {k: res["webenv"][k] / res["bare"][k] for k in res["bare"]}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sdk.json").write_text(json.dumps({"results": res, "webenv_over_bare": ratio}, indent=2))
    lines = ["# sdk runtime overhead", "", "Same servicer, same process; ~2 KB requests.", "",
             "| metric | bare grpc.aio | webenv Server | ratio |", "| --- | --- | --- | --- |"]
    for k in res["bare"]:
        lines.append(f"| {k} | {res['bare'][k]:.2f} | {res['webenv'][k]:.2f} | {ratio[k]:.2f} |")
    (out / "sdk.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
