"""`python -m webenv.worldmodel consistency`: do values agree from page to page within a simulated session?

Sessions of random walks (click a link, search, go back) on the tiny web's held-out website (tinyweb.py) run
through the simulated EnvironmentService in-process, twice — value memory off and on (consistency.py) — with the
analogy predictor built from the tiny web's training website (no language model: seconds on one core). The
tiny web is used because it is the only multi-step web this repository can replay without a browser farm and a
trained model; its pages know the truth (tinyweb.PRODUCTS), so each shown price is scored two ways, by an observer
that does not share the memory's rules (a product's name on a line, the first `$` amount on it or the two lines
after it):

* **agree**: of the (session, product) pairs shown on more than one page, the share shown with one price;
* **right**: of all prices shown for a product, the share equal to the website's price.

`--noise P` replaces, on a share P of the new documents the model predicts, every `$` amount by another (what a
composed page or a language model's edit does when it carries another website's number): the memory's effect on
a model that gets numbers wrong, which the analogy predictor on the tiny web rarely does.
"""

from __future__ import annotations

import json
import random
import re
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from webenv.actions import parse_action
from webenv.envservice import EnvironmentService
from webenv.v1 import common_pb2, environment_pb2
from webenv.worldmodel import tinyweb
from webenv.worldmodel.analogy import PageActions
from webenv.worldmodel.compose import Exemplars, PageView
from webenv.worldmodel.dataset import join_exports
from webenv.worldmodel.predict import ModelInfo, Prediction, Predictor, Query
from webenv.worldmodel.simenv import SimulatedEnvironment

SITE = "shop-0001.web.test"  # the tiny web's held-out website
NOTES = """How to read it:

* Without noise the analogy predictor already disagrees with itself: a composed listing carries the training
  website's `$233` for the first item (the exemplar's line its word map could not align); the memory puts the
  item's own price back.
* *right %* reaches 100 with the memory because every walk starts on the website's real page (the session's
  first values are the truth). The memory keeps the first value, not the true one: an item first shown on a
  mispredicted page keeps the wrong price for the session.
* What this web cannot show: values that really change on pages other than the one acted on (a cart's total
  after "Add to cart" elsewhere) are pinned when entity and unit are the same (consistency.py); the tiny web has
  no cart, so that cost is not measured here. The sessions are the tiny web's (the only multi-step web this
  repository replays without a browser farm and a trained model), not recorded real episodes.
"""
_PRICE = re.compile(r"\$\d+")


def analogy_predictor() -> Predictor:
    """The analogy predictor of the tiny web's training website (no language model)."""
    with tempfile.TemporaryDirectory() as tmp:
        files = tinyweb.write_exports(Path(tmp))
        sites = json.loads(files["sites"].read_text())
        records = join_exports([files["axtree"]], [files["markdown"]], sites, "random_crawl")
    ex, pa = Exemplars(max_per_key=10**6), PageActions()
    for r in records:
        if r.split != "train":
            continue
        if r.next_url != r.url:
            ex.add(r.site, r.url, r.state, r.action_text, r.next_url, r.next_state, r.next_links)
        pa.add(r.site, r.page, r.action_text, r.next_url, r.next_state)
    return Predictor(None, ModelInfo("analogy", "none", ["axtree"], 0, 0), ex, pa, mode="analogy")


class Noisy:
    """A predictor whose new documents get other `$` amounts, on a share `p` of them (not the pages back and forward
    restore: the Predictor takes those from the session's history, as they were served)."""

    def __init__(self, inner: Predictor, p: float, seed: int) -> None:
        self.inner, self.p, self.rng = inner, p, random.Random(seed)

    async def predict(self, q: Query) -> Prediction:
        pred = await self.inner.predict(q)
        if not pred.navigated or q.action_text in ("go_back()", "go_forward()") or self.rng.random() >= self.p:
            return pred
        state = _PRICE.sub(lambda _: f"${self.rng.randrange(1, 300)}", pred.page.state)
        return replace(pred, page=PageView(pred.page.url, state, pred.page.links))


def observe(state: str) -> dict[str, list[str]]:
    """product name -> the prices a page shows for it (the observer: independent of consistency.py's rules)."""
    lines = state.split("\n")
    out: dict[str, list[str]] = {}
    for name, _ in tinyweb.PRODUCTS[SITE]:
        for i, line in enumerate(lines):
            if name in line:
                m = next((m for ln in lines[i:i + 3] if (m := _PRICE.search(ln))), None)
                if m:
                    out.setdefault(name, []).append(m.group(0))
    return out


def _action(links: dict[str, str], rng: random.Random, last: str) -> str:
    """The walk's next action: mostly a link, sometimes back or a search."""
    if last.startswith("fill("):
        return 'press(3, "Enter")'
    r = rng.random()
    if r < 0.15 and last:
        return "go_back()"
    if r < 0.25:
        word = rng.choice(tinyweb.PRODUCTS[SITE])[0].split()[0]
        return f'fill(3, "{word}")'
    ids = sorted(links, key=int)
    return f"click({rng.choice(ids)})" if ids else "noop()"


@dataclass
class Figures:
    sessions: int
    steps: int
    entities: int  # (session, product) pairs shown on more than one page
    agree: int
    prices: int
    right: int
    restored: int

    def row(self, label: str) -> str:
        return (f"| {label} | {self.entities} | {self.agree} | {100 * self.agree / max(1, self.entities):.1f} | "
                f"{self.prices} | {100 * self.right / max(1, self.prices):.1f} | {self.restored} |")


async def measure(sessions: int = 40, steps: int = 12, noise: float = 0.0, values_kept: int = 512,
                  seed: int = 0, predictor: Predictor | None = None) -> Figures:
    """Run the walks (the same walks for every setting: one seed) and score them."""
    inner = predictor or analogy_predictor()
    env = SimulatedEnvironment(Noisy(inner, noise, seed) if noise else inner, horizon=steps + 1,  # type: ignore[arg-type]
                               values_kept=values_kept)
    svc = EnvironmentService(env)  # called in process, without a channel (no RPC context)
    truth = dict(tinyweb.PRODUCTS[SITE])
    state, links = tinyweb.page(SITE, "/")
    url = f"http://{SITE}/"
    env.start_states = {url: (PageView(url, state, links), "")}
    rng = random.Random(seed)
    fig = Figures(sessions, 0, 0, 0, 0, 0, 0)
    spec = common_pb2.ObservationSpec(formats=[common_pb2.OBSERVATION_FORMAT_AXTREE])
    for _ in range(sessions):
        opened = await svc.OpenSession(environment_pb2.OpenSessionRequest(start_url=url, observation_spec=spec),
                                       None)
        sid = opened.session.session_id
        shown: dict[str, list[str]] = {}
        for name, prices in observe(opened.observation.axtree).items():
            shown.setdefault(name, []).append(prices[0])
        last = ""
        for i in range(steps):
            s = env.sessions[sid]
            last = _action(s.page.links, rng, last)
            resp = await svc.Step(environment_pb2.StepRequest(session_id=sid, action=parse_action(last), step_index=i),
                                  None)
            fig.steps += 1
            for name, prices in observe(resp.observation.axtree).items():
                shown.setdefault(name, []).extend(prices)
        s = env.sessions[sid]
        fig.restored += s.values.restored["entity"] if s.values is not None else 0
        for name, prices in shown.items():
            fig.prices += len(prices)
            fig.right += sum(p == truth[name] for p in prices)
            if len(prices) > 1:
                fig.entities += 1
                fig.agree += len(set(prices)) == 1
        await svc.CloseSession(environment_pb2.CloseSessionRequest(session_id=sid), None)
    return fig


async def report(sessions: int, steps: int, noises: list[float], seed: int, command: str) -> str:
    """The Markdown report: memory off and on, for each noise level."""
    predictor = analogy_predictor()
    rows = []
    for noise in noises:
        for kept, label in ((0, "off"), (512, "on")):
            fig = await measure(sessions, steps, noise, kept, seed, predictor)
            rows.append(fig.row(f"noise {noise:g}, memory {label}"))
    head = ("| setting | products on >1 page | one price | agree % | prices shown | right % | values put back |\n"
            "|---|---:|---:|---:|---:|---:|---:|")
    return (f"# World model: values consistent within a simulated session\n\nProduced by:\n\n```\n{command}\n```\n\n"
            f"{sessions} sessions of {steps} steps each (random walks: links, searches, back) on the tiny web's "
            f"held-out website `{SITE}`, the analogy predictor of its training website (no language model), "
            "the same walks for every row (seed "
            f"{seed}). *agree %*: of the (session, product) pairs shown on more than one page, those always shown "
            "with one price; *right %*: prices shown equal to the website's; *values put back*: values the memory "
            "rewrote. *noise*: share of new documents whose `$` amounts are replaced by random ones (a model "
            "getting numbers wrong).\n\n" + head + "\n" + "\n".join(rows) + "\n\n" + NOTES)
