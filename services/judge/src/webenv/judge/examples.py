"""Builders of realistic shop trajectories and rubrics, shared by tests, the benchmark and calibration.

A trajectory here is what the collector hands the judge: steps with observations (cleaned HTML with
``bid`` attributes, an AXTree text), a final observation, a final answer and the site state. Also the
texts the tiny judge model is built from (tests, benchmarks, demos).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webenv.v1 import common_pb2

SITE = "shop-0042.web.test"

#: Judge-prompt-like text the tiny judge model's tokenizer is trained on (`webenv-judge build-tiny-model`).
TINY_MODEL_TEXTS = [
    "You are a strict judge of a web agent's episode. Decide whether the FACT is proven by the EVIDENCE.",
    "If the evidence does not clearly prove the fact, it FAILS. Do not trust the agent's answer alone.",
    "TASK: FACT GROUP: OTHER FACTS IN THE GROUP: FACT: GUIDANCE: AGENT'S FINAL ANSWER: (no answer)",
    "EVIDENCE (keypoint observations, oldest first): --- step 3 | url: https://shop-0042.web.test/products",
    "Reply with exactly two lines: VERDICT: HOLDS or VERDICT: FAILS REASON: one short sentence",
    "VERDICT: HOLDS\nREASON: the final page shows the order confirmation with the product.",
    "VERDICT: FAILS\nREASON: the evidence does not show the price.",
    "button link heading textbox checkbox main navigation search results cart checkout price $49.99 in stock",
    "The quick brown fox jumps over the lazy dog. 0123456789 <div class=\"price\">Total</div>",
]


def build_tiny_judge_model(out: str | Path, seed: int = 0) -> Path:
    """The tiny judge model (webenv.llm.tinymodel on TINY_MODEL_TEXTS): random weights, real loading paths."""
    from webenv.llm.tinymodel import build_tiny_model

    return build_tiny_model(out, TINY_MODEL_TEXTS * 4, vocab_size=512, hidden=64, max_positions=4096, seed=seed)


@dataclass
class Product:
    """A product of the synthetic shop."""

    sku: str
    name: str
    price: float
    category: str
    in_stock: bool = True


def catalog(n: int = 40, seed: int = 0) -> list[Product]:
    """A deterministic product catalog."""
    rng = random.Random(seed)
    adjectives = ["Red", "Blue", "Oak", "Steel", "Compact", "Deluxe", "Mini", "Pro", "Smart", "Classic"]
    nouns = ["Kettle", "Lamp", "Headphones", "Backpack", "Blender", "Chair", "Camera", "Watch", "Router", "Mug"]
    cats = ["Electronics", "Home", "Outdoor", "Kitchen"]
    return [
        Product(f"A{100 + i}", f"{rng.choice(adjectives)} {rng.choice(nouns)} {i}", round(rng.uniform(5, 120), 2),
                rng.choice(cats), rng.random() > 0.2)
        for i in range(n)
    ]


def product_page_html(p: Product, related: list[Product], cart_count: int = 0) -> str:
    """Cleaned HTML of a product page (as the farm produces it: ids as `bid` attributes)."""
    rel = "".join(
        f'<li><a bid="r{q.sku}" href="/products/{q.sku}">{q.name}</a> <span class="price">${q.price:.2f}</span></li>'
        for q in related
    )
    stock = "In stock" if p.in_stock else "Out of stock"
    return (
        f'<html><head><title>{p.name} | Shop</title></head><body>'
        f'<nav bid="1"><a bid="2" href="/">Home</a> <a bid="3" href="/c/{p.category.lower()}">{p.category}</a>'
        f' <a bid="4" href="/cart">Cart (<span id="cart-count">{cart_count}</span>)</a></nav>'
        f'<main bid="5"><h1 bid="6" class="product-title">{p.name}</h1>'
        f'<div class="sku">SKU {p.sku}</div><span bid="7" class="price">${p.price:.2f}</span>'
        f'<p class="stock">{stock}</p>'
        f'<p class="description">The {p.name} is a fine choice for your {p.category.lower()} needs &amp; more. '
        f'Free returns within 30 days. Ships in 2-3 business days.</p>'
        f'<label>Qty <input bid="8" id="qty" name="qty" type="number" value="1"></label>'
        f'<label><input bid="9" id="gift" type="checkbox"> Gift wrap</label>'
        f'<button bid="10" id="add-to-cart" class="btn primary">Add to cart</button>'
        f'<section class="related"><h2>Related products</h2><ul>{rel}</ul></section></main>'
        f'<footer>Shop 0042 - all prices in USD</footer></body></html>'
    )


def axtree_of(p: Product) -> str:
    """A small AXTree text of the product page."""
    return (
        f'[5] main ""\n  [6] heading "{p.name}" level=1\n  [7] StaticText "${p.price:.2f}"\n'
        f'  [8] spinbutton "Qty" value="1"\n  [9] checkbox "Gift wrap" checked=false\n  [10] button "Add to cart"'
    )


def observation(p: Product, related: list[Product], cart_count: int = 0, *, html: bool = True,
                axtree: bool = True) -> common_pb2.Observation:
    """An observation of a product page with the formats asked for."""
    obs = common_pb2.Observation(url=f"https://{SITE}/products/{p.sku}", title=f"{p.name} | Shop")
    if html:
        obs.html = product_page_html(p, related, cart_count)
        obs.formats.append(common_pb2.OBSERVATION_FORMAT_HTML)
    if axtree:
        obs.axtree = axtree_of(p)
        obs.formats.append(common_pb2.OBSERVATION_FORMAT_AXTREE)
    obs.elements.add(element_id="8", tag="input", role="spinbutton", name="Qty", value=str(1 + cart_count))
    obs.elements.add(element_id="9", tag="input", role="checkbox", name="Gift wrap", checked=cart_count > 0)
    return obs


@dataclass
class Episode:
    """A generated episode: its trajectory and the ground truth behind it."""

    trajectory: common_pb2.Trajectory
    target: Product
    bought: bool
    answer: str
    state: dict[str, Any] = field(default_factory=dict)


def shop_episode(
    steps: int = 30, seed: int = 0, *, success: bool = True, keep_html: bool = True, related: int = 4
) -> Episode:
    """An episode that browses ``steps`` product pages, ends on the target and (if success) buys it.

    ``related`` is the number of related products per page (4: ~1.5 KB of HTML, 150: ~25 KB).
    """
    rng = random.Random(seed)
    products = catalog(n=max(40, related + 1), seed=seed)
    target = products[rng.randrange(len(products))]
    traj = common_pb2.Trajectory(episode_id=f"ep-{seed}", task_id=f"synthetic/{SITE}/buy-{target.sku}",
                                 env_kind=common_pb2.ENV_KIND_BROWSER, category=target.category)
    for i in range(steps):
        p = target if i == steps - 1 else products[rng.randrange(len(products))]
        rel = rng.sample(products, related)
        step = traj.steps.add(step_index=i, observation=observation(p, rel, html=keep_html),
                              action_text=f'click("{rng.randrange(2, 11)}")', url_after=f"https://{SITE}/products/{p.sku}")
        step.action.click.target.element_id = str(rng.randrange(2, 11))
    bought = success
    final_p = target
    traj.final_observation.CopyFrom(observation(final_p, rng.sample(products, related), cart_count=1 if bought else 0,
                                                html=keep_html))
    if bought:
        traj.final_observation.url = f"https://{SITE}/cart"
    answer = f"{target.name} costs ${target.price:.2f}" if success else "I could not find it"
    traj.final_answer = answer
    state = {
        "cart": {"items": [{"sku": target.sku, "qty": 1, "price": target.price}] if bought else [],
                 "total": target.price if bought else 0},
        "orders": [{"id": 1, "items": [{"sku": "A999", "qty": 2}]}]
        + ([{"id": 2, "items": [{"sku": target.sku, "qty": 1}], "status": "placed"}] if bought else []),
        "user": {"logged_in": True, "name": "ada"},
    }
    traj.site_state_json = json.dumps(state)
    traj.env_reward = 1.0 if success else 0.0
    return Episode(traj, target, bought, answer, state)


def fact(fid: str, desc: str, **criterion: Any) -> common_pb2.Fact:
    """A Fact with one criterion kind given as keyword (e.g. ``url=common_pb2.UrlCriterion(...)``)."""
    return common_pb2.Fact(fact_id=fid, description=desc, criterion=common_pb2.Criterion(**criterion))


def ten_fact_rubric(target: Product) -> common_pb2.Rubric:
    """The benchmark's 10-fact rubric for a shop episode (every deterministic criterion kind)."""
    C = common_pb2
    g1 = C.FactGroup(group_id="found", description=f"The agent found {target.name}", facts=[
        fact("f1", "A product page was visited", url=C.UrlCriterion(mode=C.MATCH_MODE_CONTAINS,
                                                                     value="/products/", any_step=True)),
        fact("f2", "The final page shows the product title",
             page=C.PageCriterion(css_selector="h1.product-title", text=target.name)),
        fact("f3", "The price is under $500", page=C.PageCriterion(css_selector=".price",
                                                                   condition="float(text.strip('$')) < 500")),
        fact("f4", "The product is in the right category", category=C.CategoryCriterion(category=target.category)),
        fact("f5", "The answer states the price", answer=C.AnswerCriterion(
            mode=C.MATCH_MODE_CONTAINS, expected=f"{target.price:.2f}")),
    ])
    g2 = C.FactGroup(group_id="bought", description="The product is in the cart", facts=[
        fact("f6", "The cart holds the product", site_state=C.SiteStateCriterion(
            path=f'$.cart.items[?(@.sku=="{target.sku}")].qty', op=C.COMPARISON_GE, value_json="1")),
        fact("f7", "An order was placed", site_state=C.SiteStateCriterion(
            path="$.orders[-1].status", op=C.COMPARISON_EQ, value_json='"placed"')),
        fact("f8", "The final URL is the cart", url=C.UrlCriterion(mode=C.MATCH_MODE_REGEX, value=r"/cart/?$")),
        fact("f9", "Gift wrap is checked", element_state=C.ElementStateCriterion(
            css_selector="#gift", property="checked", op=C.COMPARISON_EQ, value_json="true")),
        fact("f10", "The environment rewarded the episode", env_reward=C.EnvRewardCriterion(min_reward=1.0)),
    ])
    return C.Rubric(rubric_id=f"buy-{target.sku}", version=1, groups=[g1, g2])


def task_for(episode: Episode, rubric: common_pb2.Rubric | None = None) -> common_pb2.Task:
    """A Task around a rubric (the ten-fact one by default)."""
    t = episode.target
    return common_pb2.Task(
        task_id=episode.trajectory.task_id, source=common_pb2.TASK_SOURCE_SYNTHETIC,
        kind=common_pb2.TASK_KIND_TRANSACTION, instruction=f"Find {t.name}, tell me its price and buy it.",
        start_url=f"https://{SITE}/", site=SITE, family="shop", category=t.category,
        rubric=rubric if rubric is not None else ten_fact_rubric(t),
    )
