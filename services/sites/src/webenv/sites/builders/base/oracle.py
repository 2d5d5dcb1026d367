"""The oracle's actions: the action grammar's element actions (click, fill, select, answer) addressed by CSS
selector, and the URL and selector helpers the oracle methods of every builder write them with."""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlencode

from webenv.v1 import common_pb2 as pb

if TYPE_CHECKING:
    pass



def click(selector: str) -> pb.Action:
    return pb.Action(click=pb.ClickAction(target=pb.ElementTarget(selector=selector)))


def fill(selector: str, text: str) -> pb.Action:
    return pb.Action(fill=pb.FillAction(target=pb.ElementTarget(selector=selector), text=text))


def select(selector: str, option: str) -> pb.Action:
    return pb.Action(select=pb.SelectAction(target=pb.ElementTarget(selector=selector), options=[option]))


def answer(text: str) -> pb.Action:
    return pb.Action(answer=pb.AnswerAction(text=text))


def with_query(url: str, **params: str) -> str:
    """url plus query parameters, whether or not it already has a query."""
    return url + ("&" if "?" in url else "?") + urlencode(params)


def css_str(value: str) -> str:
    """A CSS string literal (for attribute selectors such as a[href="..."])."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
