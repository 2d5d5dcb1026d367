"""Wiring: the gRPC server that serves WorldModelService and the simulated EnvironmentService."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

from webenv import runtime
from webenv.envservice import EnvironmentService, TaskCatalog
from webenv.runtime import Server
from webenv.v1 import environment_pb2_grpc, worldmodel_pb2_grpc
from webenv.worldmodel.config import Settings
from webenv.worldmodel.farmstart import FarmStarts
from webenv.worldmodel.predict import START_STATES_FILE, Predictor, load_start_states, load_world_model
from webenv.worldmodel.servicer import WorldModelServicer
from webenv.worldmodel.simenv import SimulatedEnvironment

log = logging.getLogger("webenv.worldmodel")


@contextlib.asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[tuple[Server, WorldModelServicer, SimulatedEnvironment]]:
    """Bind, load the model (health NOT_SERVING meanwhile), set SERVING; stop on exit. Yields the simulated
    environment (the backend the sdk's EnvironmentService serves), for its sessions."""
    wm = WorldModelServicer(None, settings.worldmodel_max_state_chars, settings.worldmodel_max_wait_ms)
    farm = (FarmStarts(settings.worldmodel_farm_addr, settings.worldmodel_farm_start_pages,
                       settings.worldmodel_farm_timeout_seconds) if settings.worldmodel_farm_addr else None)
    env = SimulatedEnvironment(None, {}, settings.worldmodel_horizon, settings.worldmodel_lease_seconds,
                               settings.worldmodel_max_sessions, settings.worldmodel_max_state_chars,
                               settings.worldmodel_max_lease_seconds, settings.worldmodel_max_wait_ms,
                               done_lease_seconds=settings.worldmodel_done_lease_seconds,
                               reaper_interval_seconds=settings.worldmodel_reaper_interval_seconds,
                               ended_kept=settings.worldmodel_ended_sessions_kept,
                               request_ids_kept=settings.worldmodel_request_ids_kept, farm=farm,
                               values_kept=settings.worldmodel_values_kept)
    loaded: list[Predictor] = []

    async def start() -> None:
        env.start()  # the sweep of idle and ended sessions
        reason = {"auto": None, "on": True, "off": False}[settings.worldmodel_reasoning]
        predictor = await load_world_model(settings.worldmodel_backend, settings.worldmodel_model_path,
                                           settings.worldmodel_device, settings.worldmodel_threads,
                                           settings.worldmodel_max_new_tokens, reason,
                                           batch=settings.worldmodel_max_batch, lm_path=settings.worldmodel_lm_path,
                                           retrieval_context=settings.worldmodel_retrieval_context)
        loaded.append(predictor)
        own = Path(settings.worldmodel_model_path) / START_STATES_FILE
        files = [*([own] if own.exists() else []), *(p for p in settings.worldmodel_start_states.split(",") if p)]
        starts = await asyncio.to_thread(load_start_states, files)
        env.start_states = starts
        wm.predictor = env.predictor = predictor
        info = predictor.info
        log.info("model loaded", extra={"model": info.model, "backend": info.backend, "parameters": info.parameters,
                                        "exemplars": len(predictor.exemplars), "start_states": len(starts),
                                        "reasoning": predictor.reason, "farm": settings.worldmodel_farm_addr})

    async def close() -> None:
        await env.close()
        for predictor in loaded:
            if predictor.llm is not None:
                await predictor.llm.close()

    services = [(worldmodel_pb2_grpc.add_WorldModelServiceServicer_to_server, wm, "webenv.v1.WorldModelService"),
                (environment_pb2_grpc.add_EnvironmentServiceServicer_to_server, EnvironmentService(
                    env, TaskCatalog(settings.worldmodel_sites_addr) if settings.worldmodel_sites_addr else None),
                 "webenv.v1.EnvironmentService")]
    async with runtime.serving("worldmodel", settings, services, start=start, close=close) as server:
        yield server, wm, env


async def main(settings: Settings) -> None:
    async with serving(settings) as (server, _, _):
        await server.wait_for_termination()
