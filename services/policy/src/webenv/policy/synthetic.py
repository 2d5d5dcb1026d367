"""Generated observations and requests, for tests and the benchmark (no browser needed).

Pages mix links, buttons, text inputs, selects with options (DOM format), checkboxes, hidden,
disabled and non-interactive elements, so policies meet the awkward cases an observation can hold.
"""

from __future__ import annotations

import random

from webenv.v1 import common_pb2, policy_pb2

_KINDS = [
    ("a", "link"), ("button", "button"), ("input", "textbox"), ("input", "searchbox"), ("input", "checkbox"),
    ("input", "spinbutton"), ("select", "combobox"), ("textarea", "textbox"), ("div", "generic"),
    ("h2", "heading"), ("input", "radio"), ("input", ""), ("img", "img"), ("div", "textbox"),
]
_NAMES = ["Home", "Search", "Cart", "Email", "Name", "Quantity", "Sort by", "Next", "Submit", "Reviews",
          "Laptop X200", "Sign in", "Password", "City", "Comment", "Add to cart"]


def random_observation(rng: random.Random, host: str = "shop-0001.web.test", n: int | None = None,
                       with_axtree: bool = True) -> common_pb2.Observation:
    """One plausible page with `n` elements (random when None), ids unique."""
    n = rng.randint(0, 30) if n is None else n
    path = rng.choice(["/", "/products", f"/product/{rng.randint(1, 99)}", "/cart", "/search", "/login"])
    obs = common_pb2.Observation(url=f"http://{host}{path}", title=f"Page {path}", active_tab_id="0")
    obs.tabs.add(tab_id="0", url=obs.url, title=obs.title, active=True)
    obs.formats.append(common_pb2.OBSERVATION_FORMAT_ELEMENTS)
    ids = rng.sample(range(1, 10 * n + 10), n)
    ax_lines = []
    root = obs.dom_nodes.add(parent_index=-1, tag="body")
    del root
    for eid in ids:
        tag, role = rng.choice(_KINDS)
        name = rng.choice(_NAMES)
        el = obs.elements.add(
            element_id=str(eid), tag=tag, role=role, name=name, text=name if tag in ("a", "button") else "",
            visible=rng.random() > 0.15, clickable=tag in ("a", "button", "input", "select") or rng.random() < 0.2,
            disabled=rng.random() < 0.08, checked=role == "checkbox" and rng.random() < 0.5,
            value=rng.choice(["", "", "abc"]) if role in ("textbox", "searchbox") else "",
            href=rng.choice(["/products", f"/product/{rng.randint(1, 99)}", "#top", "javascript:void(0)",
                             "https://other.web.test/x", "/cart?x=1"]) if tag == "a" else "",
        )
        el.bbox.x, el.bbox.y, el.bbox.width, el.bbox.height = rng.uniform(0, 1200), rng.uniform(0, 800), 80, 24
        parent = len(obs.dom_nodes)
        obs.dom_nodes.add(parent_index=0, tag=tag, element_id=str(eid))
        if tag == "select" and rng.random() < 0.7:
            for k in range(rng.randint(1, 4)):
                obs.dom_nodes.add(parent_index=parent, tag="option", attributes={"value": f"opt{k}"})
        state = " disabled" if el.disabled else ""
        ax_lines.append(f'[{eid}] {role or tag} "{name}"{state}')
    if with_axtree:
        obs.axtree = "\n".join(ax_lines)
    obs.scroll.scroll_height = rng.choice([800, 3000])
    obs.scroll.viewport_height = 800
    obs.scroll.y = rng.choice([0, 0, 2200])
    return obs


def request(obs: common_pb2.Observation, *, policy: str, episode_id: str = "ep-1", step_index: int = 0,
            seed: int = 0, instruction: str = "Find the cheapest laptop and add it to the cart.") -> policy_pb2.ActRequest:
    return policy_pb2.ActRequest(
        episode_id=episode_id, policy=policy, observation=obs, step_index=step_index, seed=seed,
        task=common_pb2.Task(task_id="synthetic/shop-0001/t1", instruction=instruction,
                             source=common_pb2.TASK_SOURCE_SYNTHETIC),
    )
