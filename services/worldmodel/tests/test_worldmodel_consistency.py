"""A simulated session's values stay what it first showed (consistency.py), over a real gRPC channel.

The model is scripted (each action's next page fixed here, values deliberately wrong), so what is checked is the
session's memory, not a model's fidelity: a later page's other price for the same item is served with the first,
a typed text stays in its field on that document, a new session starts with nothing remembered, the memory is
bounded, ambiguous keys and labels are left alone, and `python -m webenv.worldmodel consistency` measures it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import pytest
from webenv import runtime
from webenv.actions import parse_action
from webenv.envservice import EnvironmentService
from webenv.runtime import ServiceSettings
from webenv.v1 import environment_pb2, environment_pb2_grpc
from webenv.worldmodel.compose import PageView
from webenv.worldmodel.consistency import ValueMemory, bindings
from webenv.worldmodel.predict import Prediction, Query
from webenv.worldmodel.simenv import SimulatedEnvironment

pytestmark = pytest.mark.timeout(60)

URL = "http://shop.web.test/"
CHROME = '[1] banner ""\n\t[2] link "Cart (0)"\n'
HOME = CHROME + ('[3] main ""\n\t[4] heading "Shop" level=1\n\t[5] link "Koi Xenon Lamp"\n\tStaticText "$233"\n'
                 '\t[6] link "Haven Zephyr Mug"\n\tStaticText "$41"\n\t[7] searchbox "Search"\n\t[8] button "Go"')
#: The product page as the model predicts it: another website's price carried over.
LAMP = CHROME + '[3] main ""\n\t[4] heading "Koi Xenon Lamp" level=1\n\tStaticText "Price $999"\n\t[5] link "Home"'
#: The home page again, as a new document, with both prices wrong.
HOME_AGAIN = HOME.replace("$233", "$7").replace("$41", "$8")
FILLED_WRONG = HOME.replace('searchbox "Search"', 'searchbox "Search" focused, value="lamb"')
#: After a click on the heading: the model's edit lost the typed text.
FOCUS_LOST = HOME
RESULTS = CHROME + '[3] main ""\n\t[4] heading "Results" level=1\n\t[5] searchbox "Search" value="other"'
LINKS = {"5": "/products/P1", "6": "/products/P2"}

#: (current URL, action) -> (next URL, next page, a new document?)
SCRIPT: dict[tuple[str, str], tuple[str, str, bool]] = {
    (URL, "click(5)"): (URL + "products/P1", LAMP, True),
    (URL + "products/P1", "click(5)"): (URL, HOME_AGAIN, True),
    (URL, 'fill(7, "lamp")'): (URL, FILLED_WRONG, False),
    (URL, "click(4)"): (URL, FOCUS_LOST, False),
    (URL, "click(8)"): (URL + "search", RESULTS, True),
}


class Scripted:
    """A stand-in for the world model: the next page is SCRIPT's, or the page kept."""

    async def predict(self, q: Query) -> Prediction:
        if q.action_text == "go_back()" and q.memory is not None and (back := q.memory.back_page()) is not None:
            return Prediction(back, "recall", navigated=True)  # as the Predictor does: the page as it was left
        url, state, nav = SCRIPT.get((q.page.url, q.action_text), (q.page.url, q.page.state, False))
        return Prediction(PageView(url, state, LINKS if url == URL else {"5": "/"}), "compose" if nav else "edit",
                          navigated=nav)


@dataclass
class Served:
    stub: environment_pb2_grpc.EnvironmentServiceStub
    env: SimulatedEnvironment


async def _serve(values_kept: int) -> AsyncIterator[Served]:
    env = SimulatedEnvironment(Scripted(), {URL: (PageView(URL, HOME, LINKS), "")},  # type: ignore[arg-type]
                               horizon=20, values_kept=values_kept)
    settings = ServiceSettings(grpc_port=0, metrics_port=0, host="127.0.0.1", log_json=False, grace_seconds=1.0)
    services = [(environment_pb2_grpc.add_EnvironmentServiceServicer_to_server, EnvironmentService(env),
                 "webenv.v1.EnvironmentService")]
    async with runtime.serving("worldmodel", settings, services) as server:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            yield Served(environment_pb2_grpc.EnvironmentServiceStub(channel), env)


@pytest.fixture(scope="module")
async def served() -> AsyncIterator[Served]:
    async for s in _serve(512):
        yield s


@pytest.fixture(scope="module")
async def served_off() -> AsyncIterator[Served]:
    async for s in _serve(0):
        yield s


class Session:
    def __init__(self, s: Served, sid: str) -> None:
        self.s, self.sid, self.i = s, sid, 0

    async def step(self, action: str) -> str:
        resp = await self.s.stub.Step(environment_pb2.StepRequest(session_id=self.sid, action=parse_action(action),
                                                                  step_index=self.i))
        self.i += 1
        return resp.observation.axtree


async def _open(s: Served) -> Session:
    resp = await s.stub.OpenSession(environment_pb2.OpenSessionRequest(start_url=URL))
    assert resp.observation.axtree == HOME
    return Session(s, resp.session.session_id)


async def test_an_items_price_is_the_first_shown(served: Served) -> None:
    sess = await _open(served)
    page = await sess.step("click(5)")  # the model says $999 for the lamp; the listing said $233
    assert 'StaticText "Price $233"' in page and "$999" not in page
    assert page == LAMP.replace("$999", "$233")  # nothing else touched: the heading, the chrome, the ids
    page = await sess.step("click(5)")  # home again, as a new document with both prices wrong
    assert page == HOME
    back = await sess.step("go_back()")  # restored as it was left: not rewritten (it is already right here)
    assert "Price $233" in back
    await served.stub.CloseSession(environment_pb2.CloseSessionRequest(session_id=sess.sid))
    assert sess.sid not in served.env.sessions  # and its memory with it


async def test_a_typed_value_stays_in_its_field(served: Served) -> None:
    sess = await _open(served)
    page = await sess.step('fill(7, "lamp")')  # the model's edit typed another word
    assert '[7] searchbox "Search" focused, value="lamp"' in page
    page = await sess.step("click(4)")  # an edit of the same document that lost the value
    assert '[7] searchbox "Search" value="lamp"' in page
    page = await sess.step("click(8)")  # a new document: its fields are as the model predicts them
    assert 'value="other"' in page


async def test_a_new_session_starts_with_an_empty_memory(served: Served) -> None:
    first = await _open(served)
    await first.step("click(5)")
    second = await _open(served)
    mem = served.env.sessions[second.sid].values
    assert mem is not None and ("koi xenon lamp", "$", 0) in mem.values  # its own start page, nothing more
    assert mem is not served.env.sessions[first.sid].values
    assert not mem.typed and mem.restored == {"entity": 0, "typed": 0}
    # a page the new session has not shown is served as predicted when no page of it bound the item
    fresh = ValueMemory()
    assert fresh.step(PageView(URL, ""), "click(5)", PageView(URL, LAMP), True).state == LAMP
    # a fork copies the parent's memory and goes on with its own
    fork = await served.stub.ForkSession(environment_pb2.ForkSessionRequest(session_id=first.sid, count=1))
    fid = fork.sessions[0].session.session_id
    assert served.env.sessions[fid].values is not served.env.sessions[first.sid].values
    assert served.env.sessions[fid].values.values == served.env.sessions[first.sid].values.values  # type: ignore[union-attr]


async def test_memory_off_serves_the_pages_as_predicted(served_off: Served) -> None:
    sess = await _open(served_off)
    assert served_off.env.sessions[sess.sid].values is None
    assert await sess.step("click(5)") == LAMP


def test_the_memory_is_bounded() -> None:
    items = "\n".join(f'\t[{10 + i}] link "Item number {i}"\n\tStaticText "${i + 1}"' for i in range(50))
    mem = ValueMemory(max_values=8)
    mem.start(PageView(URL, '[1] main ""\n' + items))
    assert len(mem.values) == len(mem.links) == 8
    assert ("item number 49", "$", 0) in mem.values and ("item number 0", "$", 0) not in mem.values  # oldest go
    for i in range(200):  # typed fields too
        mem.step(PageView(URL, f'[1] textbox "f{i}"'), f'fill(1, "{i}")', PageView(URL, f'[1] textbox "f{i}"'), False)
    assert len(mem.typed) <= 64 and len(mem) <= 8 + 8 + 64


def test_labels_chrome_and_ambiguous_keys_are_left_alone() -> None:
    table = ('[1] banner ""\n\t[2] link "Cart"\n\tStaticText "3"\n[3] main ""\n\t[4] link "Koi Xenon Lamp"\n'
             '\tStaticText "Price"\n\tStaticText "$233"\n\t[5] heading "Reviews" level=2\n\tStaticText "4.5"')
    found, _ = bindings(table, set())
    assert found == []  # a label between, the chrome's cart count, a heading no link named: nothing bound
    twice = '[1] main ""\n\t[2] link "View"\n\tStaticText "$5"\n\t[3] link "View"\n\tStaticText "$6"'
    mem = ValueMemory()
    mem.start(PageView(URL, twice))
    assert mem.values[("view", "$", 0)] is None  # ambiguous: never rewritten
    again = twice.replace("$5", "$9")
    assert mem.step(PageView(URL, twice), "click(2)", PageView(URL + "x", again), True).state == again


async def test_consistency_measurement() -> None:
    from webenv.worldmodel.agreement import measure

    off = await measure(sessions=6, steps=6, noise=0.5, values_kept=0)
    on = await measure(sessions=6, steps=6, noise=0.5, values_kept=512)
    assert off.entities == on.entities > 0 and off.restored == 0
    assert on.agree == on.entities and on.agree > off.agree and on.restored > 0
