"""Generated observations, requests and prompt-shaped texts, for tests, the benchmark and the tiny model.

Pages mix links, buttons, text inputs, selects with options (DOM format), checkboxes, hidden,
disabled and non-interactive elements, so policies meet the awkward cases an observation can hold.
`corpus` is text in the memory prompt's shape (accessibility trees, the prompt, answers in the action
grammar): what `webenv-policy build-tiny-model` trains the tiny model's tokenizer (and optional warm-up) on.
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


_ROLES = ["link", "button", "textbox", "checkbox", "heading", "combobox", "searchbox", "img", "listitem"]
_WORDS = ("home shop cart search login price product review order total add buy next page submit click "
          "enter text field button link name email password city date blue red green item list menu help "
          "account settings checkout apply filter sort results memory progress intention action answer done").split()


def _tree(rng: random.Random) -> tuple[str, list[str]]:
    lines, ids = [], []
    for i in range(rng.randint(3, 10)):
        eid = str(rng.randint(1, 200))
        ids.append(eid)
        lines.append(f'[{eid}] {rng.choice(_ROLES)} "{" ".join(rng.sample(_WORDS, rng.randint(1, 3)))}"')
        if i == 0:
            lines.append(f'[{eid}] heading "{rng.choice(_WORDS)}"')
    return "\n".join(lines), ids


def _answer(rng: random.Random, ids: list[str]) -> str:
    eid = rng.choice(ids)
    action = rng.choice([f"click({eid})", f'fill({eid}, "{rng.choice(_WORDS)}")', "scroll(0, 300)",
                         f"click({eid})", 'answer("done")', "go_back()"])
    return (f"Memory: {' '.join(rng.sample(_WORDS, 4))}\nProgress: {' '.join(rng.sample(_WORDS, 3))}\n"
            f"Intention: {' '.join(rng.sample(_WORDS, 3))}\nAction: {action}")


def corpus(n: int = 2000, seed: int = 0) -> list[str]:
    """Synthetic memory prompts with answers, rendered as the tiny model's chat template renders them."""
    from webenv.agent.prompt import SYSTEM_PROMPT

    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        obs, ids = _tree(rng)
        texts.append(f"<|system|>\n{SYSTEM_PROMPT}\n<|user|>\nInstruction: {' '.join(rng.sample(_WORDS, 6))}\n"
                     f"Observation:\n{obs}\n<|assistant|>\n{_answer(rng, ids)}</s>")
    return texts
