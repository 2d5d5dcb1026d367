"""Native form controls (inputs, selects, textareas) as builders render them, and how the oracle fills them."""

from __future__ import annotations

from collections.abc import Iterable
from html import escape
from typing import TYPE_CHECKING, Any

from webenv.sites.builders.base.oracle import click, fill, select
from webenv.sites.families.base import FieldSpec
from webenv.v1 import common_pb2 as pb

if TYPE_CHECKING:
    pass



def options_html(options: Iterable[tuple[str, str]], chosen: str) -> str:
    return "".join(f'<option value="{escape(v)}"{" selected" if v == chosen else ""}>{escape(lbl)}</option>'
                    for v, lbl in options)


def native_control(f: FieldSpec, value: str, ident: str, blank: str = "", attrs: str = "") -> str:
    """A field's plain HTML control (a text, email or number input, a textarea, a select whose first option `blank`
    chooses nothing, a checkbox) named by the field, with the id `ident` and extra attributes; the builder wraps it in
    its own labels, layout and errors."""
    head = f'id="{ident}" name="{f.name}"' + (f" {attrs}" if attrs else "")
    if f.kind == "textarea":
        return f"<textarea {head}>{escape(value)}</textarea>"
    if f.kind == "select":
        return (f'<select {head}><option value="">{escape(blank)}</option>'
                f"{options_html(((o, o) for o in f.options), value)}</select>")
    if f.kind == "checkbox":
        return f'<input {head} type="checkbox"{" checked" if value == "on" else ""}>'
    kind = "number" if f.kind == "number" else "email" if f.kind == "email" else "text"
    return f'<input {head} type="{kind}" value="{escape(value)}">'


def fill_native(fields: Iterable[FieldSpec], values: dict[str, Any], target: str) -> list[pb.Action]:
    """The oracle's actions on native controls: choose the option, tick a checkbox that should be on, type the rest;
    `target` is a CSS selector with `{name}` for the field's name."""
    acts: list[pb.Action] = []
    for f in fields:
        css, v = target.format(name=f.name), values[f.name]
        if f.kind == "select":
            acts.append(select(css, str(v)))
        elif f.kind == "checkbox":
            if v:
                acts.append(click(css))
        else:
            acts.append(fill(css, str(v)))
    return acts
