"""Reading observations: which elements exist, which can be clicked, filled or selected.

The random and explore policies must never emit an invalid action, so every rule about what an
element accepts lives here, once. When an observation carries no ELEMENTS list, candidates are
recovered from the AXTREE text (`[id] role "name" states`), whose ids are the same ids.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit, urlunsplit

from webenv.actions import is_element_id
from webenv.v1 import common_pb2

from .candidates import parse_axtree

#: Roles of text-entry controls (an <input> or <textarea> with one of these roles accepts fill).
TEXT_ROLES = frozenset({"textbox", "searchbox", "spinbutton", "combobox"})
#: Roles that are worth clicking even when the element list does not say `clickable`.
CLICK_ROLES = frozenset(
    {"link", "button", "checkbox", "radio", "menuitem", "menuitemcheckbox", "menuitemradio", "tab", "option",
     "switch", "treeitem", "combobox", "listbox"}
)


@dataclass(frozen=True, slots=True)
class Candidate:
    """One element a policy may act on, normalised from Element or an AXTREE line."""

    element_id: str
    tag: str
    role: str
    name: str
    text: str
    href: str
    value: str
    clickable: bool
    disabled: bool
    checked: bool
    y: float

    @property
    def label(self) -> str:
        return (self.name or self.text or self.value).strip()

    @property
    def fillable(self) -> bool:
        """Accepts `fill`: an <input>/<textarea> text control, or a contenteditable textbox."""
        if self.disabled:
            return False
        if self.tag == "textarea":
            return True
        if self.tag == "input":
            # An input with no text role is a date, file, range... control that `fill` may refuse.
            return self.role in TEXT_ROLES
        # Elements recovered from the AXTREE have no tag; a textbox role there is a text control.
        return self.role in ("textbox", "searchbox") and self.tag in ("", "div", "span", "p")

    @property
    def selectable(self) -> bool:
        """Accepts `select`: only a <select> element."""
        return self.tag == "select" and not self.disabled

    @property
    def is_link(self) -> bool:
        return self.tag == "a" or self.role == "link"

    @property
    def is_submit(self) -> bool:
        words = self.label.lower()
        return (self.tag == "button" or self.role == "button") and bool(
            re.search(r"submit|search|go\b|send|save|continue|sign in|log ?in|apply|ok\b|next|add|book|buy", words)
        )

    @property
    def signature(self) -> str:
        """Identity that survives id changes across visits (used for novelty)."""
        return f"{self.tag}|{self.role}|{self.label[:60]}|{self.href[:512]}"


def _from_element(el: common_pb2.Element) -> Candidate:
    return Candidate(
        element_id=el.element_id, tag=el.tag.lower(), role=el.role.lower(), name=el.name, text=el.text,
        href=el.href, value=el.value, clickable=el.clickable, disabled=el.disabled, checked=el.checked,
        y=el.bbox.y if el.HasField("bbox") else 0.0,
    )


def _from_axtree(axtree: str) -> list[Candidate]:
    out: list[Candidate] = []
    for n in parse_axtree(axtree):
        if not n.element_id or (n.role not in CLICK_ROLES and n.role not in TEXT_ROLES):
            continue
        out.append(Candidate(
            element_id=n.element_id, tag="", role=n.role, name=n.name, text="", href="", value="",
            clickable=n.role in CLICK_ROLES, disabled=n.disabled, checked=n.checked, y=float(n.index),
        ))
    return out


def candidates(obs: common_pb2.Observation) -> list[Candidate]:
    """Visible, enabled elements of the observation, in document order.

    ELEMENTS is preferred; when absent the AXTREE is parsed. Elements marked invisible are dropped
    (an off-screen element is usually a hidden menu that a click would not reach), and so are elements whose id
    no action can name (a hostile observation's ``a\x00b``), which would otherwise fail after the choice.
    """
    if len(obs.elements):
        cands = [_from_element(el) for el in obs.elements if el.visible and is_element_id(el.element_id)]
    else:
        cands = _from_axtree(obs.axtree)
    return [c for c in cands if not c.disabled]


def clickables(cands: list[Candidate]) -> list[Candidate]:
    return [c for c in cands if c.clickable or c.role in CLICK_ROLES or c.tag in ("a", "button", "summary")]


def absolute_url(base: str, href: str) -> str | None:
    """Resolve a link to an absolute http(s) URL without its fragment; None for other schemes."""
    if not href or href.startswith(("javascript:", "mailto:", "tel:", "#")):
        return None
    parts = urlsplit(urljoin(base, href))
    if parts.scheme not in ("http", "https"):
        return None
    return urlunsplit((parts.scheme, parts.netloc, parts.path or "/", parts.query, ""))


def page_kind(url: str) -> str:
    """Coarse page kind of a URL: host + path with numbers and ids generalised (`/product/{n}`)."""
    parts = urlsplit(url)
    segs = []
    for seg in parts.path.strip("/").split("/")[:3]:
        if not seg:
            continue
        if re.fullmatch(r"[\d\-_.]+|[0-9a-f]{8,}|.*\d{2,}.*", seg):
            seg = "{n}"
        segs.append(seg)
    return f"{parts.netloc}/{'/'.join(segs)}"


def select_options(obs: common_pb2.Observation, element_id: str) -> list[str]:
    """Option values of a <select>, read from the DOM format when the observation has it."""
    nodes = obs.dom_nodes
    idx = next((i for i, n in enumerate(nodes) if n.element_id == element_id), None)
    if idx is None:
        return []
    options: list[str] = []
    parents = {idx}
    for i in range(idx + 1, len(nodes)):
        node = nodes[i]
        if node.parent_index not in parents:
            if node.parent_index < idx:
                break
            continue
        parents.add(i)
        if node.tag == "option" and "disabled" not in node.attributes:
            value = node.attributes.get("value")
            if value is None:
                text_child = next((nodes[j].text for j in range(i + 1, min(i + 3, len(nodes)))
                                   if nodes[j].parent_index == i and nodes[j].tag == "#text"), "")
                value = text_child.strip()
            if value:
                options.append(value)
    return options
