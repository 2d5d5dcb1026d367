"""Replay conformance of the world model against the browser farm: `python bench/worldmodel_conformance.py [N]`.

Starts, in this process on free ports, the sites service (the synthetic web), the browser farm on Chromium mapped
to it, and the world model serving a tiny model trained here in seconds on the tiny web's exports (its quality
is not what is measured: the contract's fields are), with WEBENV_WORLDMODEL_FARM_ADDR naming the farm so every
start page is taken from the real page. Then runs, as a subprocess,

    python -m webenv.worldmodel conformance --worldmodel WM --farm FARM --sites SITES --record N --out OUT

(`--exclude-family shop`: the tiny model records start pages of its own shop-0000 and shop-0001, other websites
under the sites service's names) which records N oracle episodes of the catalog's synthetic tasks on the farm (AXTREE, MARKDOWN and HTML) and
replays them through the world model, writing bench/results/worldmodel-conformance.{json,md}.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "results" / "worldmodel-conformance.json"
NOTE = ("Recorded: oracle episodes (`Task.oracle`) of the sites service's synthetic tasks, one of each website in turn, every family "
        "but shop, on the browser farm (real Chromium), AXTREE, MARKDOWN and HTML asked for. Replayed against: the world "
        "model serving a tiny model trained for 4 steps on the tiny web's exports (its page predictions are not what "
        "is measured here), every start page taken from the farm (WEBENV_WORLDMODEL_FARM_ADDR). One 2-core machine "
        "shared with a running benchmark.")


@contextlib.asynccontextmanager
async def local_stack(folder: Path, chromium: str) -> AsyncIterator[tuple]:
    """Sites service, browser farm (Chromium) and the world model in this process, on free ports; the world model a
    tiny model trained for 4 steps on the tiny web's exports, its start pages taken from the farm
    (WEBENV_WORLDMODEL_FARM_ADDR). Yields (sites, farm server, farm app, world-model server). Also the stack of
    tests/test_worldmodel_farm_start.py."""
    from webenv.browser.__main__ import serving as farm_serving
    from webenv.browser.config import Settings as FarmSettings
    from webenv.sites.config import Settings as SitesSettings
    from webenv.sites.service import SitesService
    from webenv.worldmodel import tinyweb
    from webenv.worldmodel.app import serving as wm_serving
    from webenv.worldmodel.config import Settings as WmSettings
    from webenv.worldmodel.dataset import join_exports, write_transitions
    from webenv.worldmodel.train import TrainConfig, train

    files = tinyweb.write_exports(folder / "exports")  # the tiny web's shops: none of the sites service's pages
    data = folder / "transitions.jsonl"
    write_transitions(join_exports([files["axtree"]], [files["markdown"]], json.loads(files["sites"].read_text())), data)
    model = train(TrainConfig(data=[str(data)], out=str(folder / "run"), size="tiny", vocab_size=400, batch_size=4,
                              max_steps=4, eval_every=4, warmup=1), progress=False).model_dir
    sites = SitesService(SitesSettings(host="127.0.0.1", grpc_port=0, metrics_port=0, http_port=0,
                                       http_host="127.0.0.1", sites_count=8, log_json=False))
    async with sites:
        farm_settings = FarmSettings(grpc_port=0, metrics_port=0, host="127.0.0.1", farm_chromium_path=chromium,
                                     farm_sites_http_addr=f"127.0.0.1:{sites.http_port}",
                                     sites_addr=f"127.0.0.1:{sites.port}", farm_warm_contexts=1,
                                     farm_primed_contexts=0, log_json=False, grace_seconds=1.0)
        async with farm_serving(farm_settings) as (farm_server, farm):
            wm_settings = WmSettings(grpc_port=0, metrics_port=0, host="127.0.0.1", worldmodel_model_path=model,
                                     worldmodel_max_new_tokens=8, worldmodel_farm_addr=f"127.0.0.1:{farm_server.port}",
                                     log_json=False, grace_seconds=1.0)
            async with wm_serving(wm_settings) as (wm_server, _, _):
                yield sites, farm_server, farm, wm_server


async def main(n: int) -> int:
    from webenv.testing import find_chromium

    chromium = find_chromium()
    assert chromium, "Chromium is not installed"
    async with local_stack(Path(tempfile.mkdtemp(prefix="wm-conformance-")), chromium) as (sites, farm_server, _,
                                                                                          wm_server):
        farm_addr = f"127.0.0.1:{farm_server.port}"
        args = ["conformance", "--worldmodel", f"127.0.0.1:{wm_server.port}", "--farm", farm_addr,
                "--sites", f"127.0.0.1:{sites.port}", "--record", str(n), "--out", str(OUT),
                "--exclude-family", "shop",
                "--command", f"nice -n 19 python bench/worldmodel_conformance.py {n}", "--note", NOTE]
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "webenv.worldmodel", *args,
                                                    env=os.environ.copy())
        return await proc.wait()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)))
