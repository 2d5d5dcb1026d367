"""Screenshots by reference (issue 52): each image stored once under its SHA-256, steps and exports carrying the key,
GetScreenshot returning it (after a restart of the collector too), inline bytes only when an export asks."""

from __future__ import annotations

import base64
import hashlib
import io
import json
from pathlib import Path

import grpc
import pytest
from PIL import Image
from webenv.v1 import collector_pb2, collector_pb2_grpc, common_pb2

KEEP = [common_pb2.OBSERVATION_FORMAT_AXTREE, common_pb2.OBSERVATION_FORMAT_SCREENSHOT]


def read_steps(path: str) -> list[dict]:
    return [s for line in Path(path).read_text().splitlines() for s in json.loads(line)["steps_detail"]]


async def get(address: str, key: str) -> collector_pb2.GetScreenshotResponse:
    async with grpc.aio.insecure_channel(address) as ch:
        return await collector_pb2_grpc.CollectorServiceStub(ch).GetScreenshot(
            collector_pb2.GetScreenshotRequest(screenshot_key=key))


async def test_screenshots_are_stored_once_by_key_and_resolve_after_a_restart(world, make_collector, watch, tmp_path):
    world.env.screenshots = True
    collector = await make_collector()
    async with grpc.aio.insecure_channel(collector.address) as ch:
        stub = collector_pb2_grpc.CollectorServiceStub(ch)
        spec = collector_pb2.RunSpec(policy="random", repeats=1, seed=3, concurrency=4, keep_formats=KEEP,
                                     horizons=collector_pb2.Horizons(easy=3, medium=3, hard=3),
                                     observation_spec=common_pb2.ObservationSpec(formats=KEEP))
        run_id = (await stub.StartRun(collector_pb2.StartRunRequest(spec=spec))).run.run_id
        await watch(stub, run_id)
        ref = await stub.ExportRun(collector_pb2.ExportRunRequest(
            run_id=run_id, format=collector_pb2.EXPORT_FORMAT_JSONL, destination=str(tmp_path / "ref")))
        inline = await stub.ExportRun(collector_pb2.ExportRunRequest(
            run_id=run_id, format=collector_pb2.EXPORT_FORMAT_JSONL, destination=str(tmp_path / "inline"),
            inline_screenshots=True))
        # inline only for JSONL: another format asking for it is refused, naming the field
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await stub.ExportRun(collector_pb2.ExportRunRequest(
                run_id=run_id, format=collector_pb2.EXPORT_FORMAT_PARQUET, destination=str(tmp_path / "pq"),
                inline_screenshots=True))
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "inline_screenshots" in exc.value.details()

    steps = read_steps(ref.paths[0])
    assert steps and all(s["screenshot_key"] for s in steps) and "screenshot_base64" not in steps[0]
    keys = {s["screenshot_key"] for s in steps}
    assert len(keys) < len(steps)  # the same page's image, shown at many steps, is stored once
    for s in read_steps(inline.paths[0]):
        data = base64.b64decode(s["screenshot_base64"])
        assert s["screenshot_key"] == hashlib.sha256(data).hexdigest() + ".png"

    # the same keys resolve on a new collector process over the same data folder
    await collector.close()
    again = await make_collector()
    for key in keys:
        shot = await get(again.address, key)
        assert hashlib.sha256(shot.data).hexdigest() + ".png" == key == shot.screenshot_key
        assert shot.codec == common_pb2.IMAGE_CODEC_PNG
        assert Image.open(io.BytesIO(shot.data)).size == (320, 180)


@pytest.mark.parametrize(("key", "code"), [
    ("0" * 64 + ".png", grpc.StatusCode.NOT_FOUND),
    ("ab" * 32 + ".webp", grpc.StatusCode.NOT_FOUND),
    ("not-a-key", grpc.StatusCode.INVALID_ARGUMENT),
    ("../" + "0" * 61 + ".png", grpc.StatusCode.INVALID_ARGUMENT),
    ("0" * 64 + ".gif", grpc.StatusCode.INVALID_ARGUMENT),
    ("", grpc.StatusCode.INVALID_ARGUMENT),
])
async def test_an_unknown_screenshot_is_not_found_and_a_malformed_key_invalid(collector, key, code):
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await get(collector.address, key)
    assert exc.value.code() == code
    assert "screenshot_key" in exc.value.details() and len(exc.value.details()) < 300
