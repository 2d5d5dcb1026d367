"""Shared fixtures: the tiny two-website web as the collector exports it, a tiny model trained on it, a live server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from webenv.worldmodel import tinyweb
from webenv.worldmodel.dataset import join_exports, write_transitions
from webenv.worldmodel.train import TrainConfig, TrainResult, train


@pytest.fixture(scope="session")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """AXTREE and MARKDOWN TRANSITIONS exports and the sites file (shop-0001 held out by the catalog's split)."""
    return tinyweb.write_exports(tmp_path_factory.mktemp("wm-exports"))


@pytest.fixture(scope="session")
def transitions_file(exports: dict[str, Path]) -> Path:
    """The world model's transitions (what `webenv-worldmodel dataset` writes)."""
    out = exports["axtree"].parent / "transitions.jsonl"
    sites = json.loads(exports["sites"].read_text())
    write_transitions(join_exports([exports["axtree"]], [exports["markdown"]], sites, "random_crawl"), out)
    return out


@pytest.fixture(scope="session")
def tiny_training(transitions_file: Path, tmp_path_factory: pytest.TempPathFactory) -> TrainResult:
    """A tiny model trained for a few dozen steps (seconds)."""
    out = tmp_path_factory.mktemp("wm-model")
    cfg = TrainConfig(data=[str(transitions_file)], out=str(out), size="tiny", vocab_size=512, max_len=1024,
                      batch_size=4, lr=5e-3, warmup=5, max_steps=40, eval_every=20, max_minutes=3)
    return train(cfg, progress=False)


@pytest.fixture(scope="session")
def tiny_model(tiny_training: TrainResult) -> str:
    return tiny_training.model_dir


@pytest.fixture(scope="module")
async def wm_channel(tiny_model: str, transitions_file: Path) -> AsyncIterator[grpc.aio.Channel]:
    """A live world-model server (WorldModelService + EnvironmentService) on free ports, and a channel to it; the
    held-out website's start pages come from the transitions (the model directory holds training websites' only)."""
    from webenv.worldmodel.app import serving
    from webenv.worldmodel.config import Settings

    settings = Settings(grpc_port=0, metrics_port=0, host="127.0.0.1", worldmodel_model_path=tiny_model,
                        worldmodel_max_new_tokens=48, worldmodel_horizon=4, worldmodel_max_state_chars=20_000,
                        worldmodel_start_states=str(transitions_file))
    async with serving(settings) as (server, _, _):
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
        channel.metrics_port = server.metrics_port  # type: ignore[attr-defined]
        yield channel
        await channel.close()
        await server.stop()
