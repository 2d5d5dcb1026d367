"""Small constructors for common_pb2.Action, so policies read as what they do."""

from __future__ import annotations

from webenv.actions import ACTION_KINDS
from webenv.v1 import common_pb2

Action = common_pb2.Action


def _target(element_id: str = "", selector: str = "") -> common_pb2.ElementTarget:
    return common_pb2.ElementTarget(selector=selector) if selector else common_pb2.ElementTarget(element_id=element_id)


def click(element_id: str) -> Action:
    return Action(click=common_pb2.ClickAction(target=_target(element_id)))


def fill(element_id: str, text: str) -> Action:
    return Action(fill=common_pb2.FillAction(target=_target(element_id), text=text))


def select(element_id: str, *options: str) -> Action:
    return Action(select=common_pb2.SelectAction(target=_target(element_id), options=list(options)))


def hover(element_id: str) -> Action:
    return Action(hover=common_pb2.HoverAction(target=_target(element_id)))


def press(key: str, element_id: str = "") -> Action:
    if element_id:
        return Action(press=common_pb2.PressAction(target=_target(element_id), key=key))
    return Action(press=common_pb2.PressAction(key=key))


def scroll(dx: float, dy: float) -> Action:
    return Action(scroll=common_pb2.ScrollAction(dx=dx, dy=dy))


def goto(url: str) -> Action:
    return Action(navigate=common_pb2.NavigateAction(url=url))


def go_back() -> Action:
    return Action(go_back=common_pb2.GoBackAction())


def answer(text: str) -> Action:
    return Action(answer=common_pb2.AnswerAction(text=text))


def noop() -> Action:
    return Action(noop=common_pb2.NoopAction())


def target_id(action: Action) -> str | None:
    """Element id an element action targets (None for other actions or selector targets)."""
    kind = action.WhichOneof("kind")
    if kind and ACTION_KINDS[kind].target:
        target = getattr(action, kind).target
        if target.WhichOneof("ref") == "element_id":
            return target.element_id
    return None
