"""Bring-your-own-LM benchmark: a tiny random Qwen3 in WebWorld's format, served over gRPC, timed per Step.

    .venv/bin/python services/worldmodel/bench_webworld.py --model MODEL_DIR --data TRANSITIONS --out bench/results

Builds a randomly initialised Qwen3 folder of the given sizes (tokenizer trained on the data; nothing downloaded),
serves it with WEBENV_WORLDMODEL_LM_PATH behind the simulated EnvironmentService, replays held-out episodes'
recorded actions as Steps over a real gRPC channel (the model's own pages fed back) and reports step latency
(rule steps apart: they never reach the model) and generated tokens/s from the service's own counters. A random
model never stops early, so every model step generates --max-new-tokens tokens: this measures serving cost, not
fidelity. Writes <out>/worldmodel-webworld.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import tempfile
import time
from pathlib import Path

from webenv.actions import parse_action
from webenv.client import make_channel
from webenv.testing import scrape
from webenv.v1 import environment_pb2, environment_pb2_grpc
from webenv.worldmodel import webworld
from webenv.worldmodel.dataset import NO_CHANGE, episodes, read_transitions
from webenv.worldmodel.page import action_kind


def _counter(text: str, name: str) -> float:
    return sum(float(m.group(1)) for m in re.finditer(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+-]+)$", text, re.M))


async def run(args: argparse.Namespace) -> dict:
    from webenv.worldmodel.app import serving
    from webenv.worldmodel.config import Settings

    records = read_transitions(args.data)
    tmp = Path(tempfile.mkdtemp(prefix="wm-qwen3-"))
    params = webworld.tiny_random_model(tmp, [t for r in records[:2000] for t in (r.state, r.action_text)],
                                        hidden=args.hidden, layers=args.layers)
    test = [ep for ep in episodes(r for r in records if r.split == "test").values()][: args.episodes]
    settings = Settings(grpc_port=0, metrics_port=0, host="127.0.0.1", worldmodel_model_path=args.model,
                        worldmodel_lm_path=str(tmp), worldmodel_max_new_tokens=args.max_new_tokens,
                        worldmodel_horizon=1000, worldmodel_threads=args.threads, worldmodel_start_states=args.data[0],
                        worldmodel_retrieval_context=not args.no_retrieval_context, log_json=False)
    lm_ms: list[float] = []
    rule_ms: list[float] = []
    async with serving(settings) as (server, _, _):
        async with make_channel(f"127.0.0.1:{server.port}", timeout=None) as ch:
            env = environment_pb2_grpc.EnvironmentServiceStub(ch)
            before = scrape(server.metrics_port)
            for ep in test:
                s = (await env.OpenSession(environment_pb2.OpenSessionRequest(start_url=ep[0].url))).session
                for i, r in enumerate(ep[: args.steps]):
                    t0 = time.perf_counter()
                    await env.Step(environment_pb2.StepRequest(session_id=s.session_id, step_index=i,
                                                               action=parse_action(r.action_text)), timeout=600)
                    ms = (time.perf_counter() - t0) * 1000
                    kind = action_kind(r.action_text)
                    (rule_ms if kind in NO_CHANGE or kind in ("go_back", "go_forward", "navigate") else lm_ms).append(ms)
                await env.CloseSession(environment_pb2.CloseSessionRequest(session_id=s.session_id))
            after = scrape(server.metrics_port)
        await server.stop()
    tokens = _counter(after, "webenv_worldmodel_generated_tokens_total") - _counter(before, "webenv_worldmodel_generated_tokens_total")
    gen_s = (_counter(after, "webenv_worldmodel_generate_seconds_sum")
             - _counter(before, "webenv_worldmodel_generate_seconds_sum"))

    def pct(xs: list[float], q: float) -> float:
        return round(sorted(xs)[min(len(xs) - 1, int(q * len(xs)))], 1) if xs else 0.0

    return {"parameters": params, "hidden": args.hidden, "layers": args.layers, "threads": args.threads,
            "max_new_tokens": args.max_new_tokens, "retrieval_context": not args.no_retrieval_context,
            "model_steps": len(lm_ms), "rule_steps": len(rule_ms),
            "model_step_ms": {"p50": pct(lm_ms, 0.5), "mean": round(statistics.fmean(lm_ms), 1) if lm_ms else 0.0,
                              "p90": pct(lm_ms, 0.9)},
            "rule_step_ms": {"p50": pct(rule_ms, 0.5)},
            "generated_tokens": int(tokens), "generate_seconds": round(gen_s, 2),
            "tokens_per_second": round(tokens / gen_s, 1) if gen_s else 0.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="world model directory (page actions, exemplars)")
    ap.add_argument("--data", required=True, action="append", help="transitions JSONL (held-out episodes replayed)")
    ap.add_argument("--episodes", type=int, default=4)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--no-retrieval-context", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    res = asyncio.run(run(args))
    print(json.dumps(res, indent=1))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "worldmodel-webworld.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
