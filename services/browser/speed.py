"""The farm's speed against the strongest baselines, side by side (called by bench.py; `make bench`).

Three ways to do one click step on the same page, in the same script, interleaved so the machine's load drift
hits all alike:
- raw naive: a Playwright loop, `page.click()` + CDP `Accessibility.getFullAXTree` (what a harness does first);
- raw farm-work: a Playwright loop doing exactly the farm's work without a service: the farm's element
  resolution (RESOLVE_JS) + trusted mouse events at the point, the read of whether the click started a
  navigation (NAV_PENDING_JS), then the farm's observation pass (OBSERVE_JS with the farm's settle options:
  quiet window counted from the click, as after a click on the same document). The strongest baseline:
  what the farm does,
  minus gRPC, sessions, queues and bookkeeping;
- farm: `python -m webenv.browser` over gRPC (bench.py's FarmProc), Step(click) with an AXTREE observation.
And MiniWoB++ click-test (one session): a step (click the button; the page rewards it) and a reset (a new
episode), farm vs the two raw loops.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import psutil
from webenv.browser.actions import RESOLVE_JS
from webenv.browser.observe import OBSERVE_JS, ObserveSettings
from webenv.browser.settle.watchers import INIT_JS, NAV_PENDING_JS
from webenv.browser.tasks import MINIWOB_RESET_JS
from webenv.v1 import common_pb2, environment_pb2

_SETTLE = ObserveSettings()


def observe_opts(miniwob: bool = False, after_click: bool = True) -> dict[str, Any]:
    """The options the farm passes for an AXTREE observation (observe.observe): after a click on the same
    document (a click waits for no frame: sdk ACTION_KINDS), or of a new document (`after_click=False`)."""
    return {"formats": {"axtree": True}, "maxChars": _SETTLE.max_chars, "visibleOnly": False,
            "quietMs": _SETTLE.quiet_ms, "maxMs": _SETTLE.settle_max_ms, "miniwob": miniwob, "frameWait": False,
            "quietSinceAction": after_click}


async def farm_work_step(page: Any, selector: str, miniwob: bool = False) -> dict[str, Any]:
    """One click step the farm's way, in-process: resolve, mouse click at the point, read whether the click
    started a navigation (settle.waits.Settler.nav_started), observe with settle."""
    res = await page.evaluate(RESOLVE_JS, [{"sel": selector}, "point"])
    await page.mouse.click(res["x"], res["y"])
    await page.evaluate(NAV_PENDING_JS)
    return json.loads(await page.evaluate(OBSERVE_JS, observe_opts(miniwob)))


async def new_raw_page(browser: Any, url: str, farm_work: bool) -> Any:
    ctx = await browser.new_context(viewport={"width": 1280, "height": 720})
    if farm_work:  # the farm's init scripts, so its in-page work is the same
        await ctx.add_init_script(INIT_JS)
    page = await ctx.new_page()
    await page.goto(url)
    return page


async def raw_farm_work_run(browser: Any, url: str, k: int, seconds: float, n_targets: int) -> dict[str, Any]:
    """K pages, each looping the farm's click step for `seconds`; with this process's CPU per step (its Playwright
    client: the part of the farm process's CPU that is not the service's)."""
    pages = [await new_raw_page(browser, url, True) for _ in range(k)]
    me = psutil.Process()
    cpu0 = sum(me.cpu_times()[:2])
    busy0 = machine_busy_seconds()
    lat: list[float] = []
    stop = time.perf_counter() + seconds

    async def worker(page: Any) -> None:
        j = 0
        while time.perf_counter() < stop:
            t = time.perf_counter()
            out = await farm_work_step(page, f"#b{j % n_targets}")
            assert out["axtree"]
            lat.append(time.perf_counter() - t)
            j += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(p) for p in pages))
    wall = time.perf_counter() - t0
    cpu = sum(me.cpu_times()[:2]) - cpu0
    busy = machine_busy_seconds() - busy0
    for p in pages:
        await p.context.close()
    return {"k": k, "steps": len(lat), "steps_per_s": len(lat) / wall, "p50_ms": pct(lat, 50) * 1e3,
            "p95_ms": pct(lat, 95) * 1e3, "client_cpu_ms_per_step": cpu / max(1, len(lat)) * 1e3,
            "wall_s": wall, "machine_cpu_s": busy}


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has been busy (every process, Chromium included)."""
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)


def pct(xs: list[float], p: float) -> float:
    """The p-th percentile (nearest rank) of xs; NaN when empty (bench.py uses this one too)."""
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


MINIWOB_TASK = common_pb2.Task(task_id="miniwob/click-test", source=common_pb2.TASK_SOURCE_MINIWOB,
                               metadata={"miniwob_task": "click-test"})
SPEC = common_pb2.ObservationSpec(formats=[common_pb2.OBSERVATION_FORMAT_AXTREE])


async def miniwob_click_test(browser: Any, stub: Any, url: str, reps: int, gap_s: float = 0.4) -> dict[str, Any]:
    """MiniWoB++ click-test, one session each way: reset (a new episode) and one step (click the button).

    raw naive: reset = core.startEpisodeReal(); step = page.click('#subbtn') + getFullAXTree.
    raw farm-work: reset = the same + the farm's observation; step = farm_work_step.
    farm: reset = OpenSession(task) (a new context, its page, the episode, the first observation: from a
    context primed with the page when the pool has one), `gap_s` after the previous episode (a client's think
    time, in which the pool refills: as open_latency); step = Step(click #subbtn). And `farm_episode_b2b`:
    OpenSession + Step + CloseSession back to back, no gap (the pool refills beside the episodes), vs
    BrowserGym's reset + step."""
    out: dict[str, Any] = {}
    naive = await new_raw_page(browser, url, False)
    cdp = await naive.context.new_cdp_session(naive)
    await cdp.send("Accessibility.enable")
    work = await new_raw_page(browser, url, True)
    t: dict[str, list[float]] = {k: [] for k in ("naive_reset", "naive_step", "work_reset", "work_step",
                                                 "farm_reset", "farm_step", "farm_action", "farm_settle",
                                                 "farm_observe")}
    for i in range(reps):
        seed = str(i + 1)
        t0 = time.perf_counter()
        await naive.evaluate(MINIWOB_RESET_JS, [seed, 10000])
        t1 = time.perf_counter()
        await naive.click("#subbtn")
        await cdp.send("Accessibility.getFullAXTree")
        t2 = time.perf_counter()
        t["naive_reset"].append(t1 - t0)
        t["naive_step"].append(t2 - t1)

        t0 = time.perf_counter()
        await work.evaluate(MINIWOB_RESET_JS, [seed, 10000])
        json.loads(await work.evaluate(OBSERVE_JS, observe_opts(True, after_click=False)))
        t1 = time.perf_counter()
        got = await farm_work_step(work, "#subbtn", miniwob=True)
        t2 = time.perf_counter()
        assert got["miniwob"]["done"], got.get("miniwob")
        t["work_reset"].append(t1 - t0)
        t["work_step"].append(t2 - t1)

        await asyncio.sleep(gap_s)
        t0 = time.perf_counter()
        o = await stub.OpenSession(environment_pb2.OpenSessionRequest(task=MINIWOB_TASK, seed=i + 1,
                                                                       observation_spec=SPEC))
        t1 = time.perf_counter()
        sid = o.session.session_id
        click = common_pb2.Action(click=common_pb2.ClickAction(target=common_pb2.ElementTarget(selector="#subbtn")))
        r = await stub.Step(environment_pb2.StepRequest(session_id=sid, action=click, step_index=0))
        t2 = time.perf_counter()
        assert r.done and r.raw_reward == 1.0, r.reward_reason
        await stub.CloseSession(environment_pb2.CloseSessionRequest(session_id=sid))
        t["farm_reset"].append(t1 - t0)
        t["farm_step"].append(t2 - t1)
        t["farm_action"].append(r.timings.action_seconds)
        t["farm_settle"].append(r.timings.settle_seconds)
        t["farm_observe"].append(r.timings.observe_seconds)
    for p in (naive, work):
        await p.context.close()
    t["farm_episode_b2b"] = []
    for i in range(reps):
        t0 = time.perf_counter()
        o = await stub.OpenSession(environment_pb2.OpenSessionRequest(task=MINIWOB_TASK, seed=i + 1,
                                                                       observation_spec=SPEC))
        r = await stub.Step(environment_pb2.StepRequest(session_id=o.session.session_id, action=click, step_index=0))
        assert r.done and r.raw_reward == 1.0, r.reward_reason
        await stub.CloseSession(environment_pb2.CloseSessionRequest(session_id=o.session.session_id))
        t["farm_episode_b2b"].append(time.perf_counter() - t0)
    for k, v in t.items():
        out[f"{k}_p50_ms"] = pct(v, 50) * 1e3
    out["reps"] = reps
    return out
