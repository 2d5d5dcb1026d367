"""Local transitions collector: real Chromium over generated sites, written as transitions JSONL.

Used until the collector service's TRANSITIONS export is available (and by the tests): it drives
Chromium with Playwright over the sites of `sitegen`, takes the a11y-tree text after every action, and
writes one JSON object per transition in the cross-service format
{"episode_id","step_index","site","split","format","instruction","url","state","action_text",
 "next_url","next_state","env_kind"}. Element ids are kept on the DOM (`data-wid`) so an element keeps
its id across steps while it lives, as the farm does. The split is by website.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from webenv.worldmodel.sitegen import SiteServer, site_names

CHROMIUM = "/usr/lib/chromium/chromium"

# Walks the DOM and renders `[id] role "name" states` lines, two spaces per depth. Elements without a
# role are transparent; ids are kept in data-wid so they stay stable while the element lives.
AXTREE_JS = r"""
() => {
  let next = 1 + Math.max(0, ...Array.from(document.querySelectorAll('[data-wid]')).map(e => +e.dataset.wid));
  const lines = [];
  const clean = s => (s || '').replace(/\s+/g, ' ').trim().slice(0, 80);
  const roleOf = el => {
    const t = el.tagName.toLowerCase();
    if (t === 'a' && el.hasAttribute('href')) return 'link';
    if (t === 'button') return 'button';
    if (t === 'input') {
      const ty = (el.getAttribute('type') || 'text').toLowerCase();
      return {checkbox: 'checkbox', radio: 'radio', search: 'searchbox', number: 'spinbutton', submit: 'button'}[ty] || 'textbox';
    }
    if (t === 'textarea') return 'textbox';
    if (t === 'select') return 'combobox';
    if (/^h[1-6]$/.test(t)) return 'heading';
    return {nav: 'navigation', main: 'main', header: 'banner', footer: 'contentinfo', ul: 'list', ol: 'list',
            li: 'listitem', form: 'form', p: 'paragraph', img: 'img', table: 'table', tr: 'row', td: 'cell',
            th: 'columnheader', label: 'LabelText'}[t] || null;
  };
  const leaf = new Set(['link', 'button', 'heading', 'textbox', 'searchbox', 'spinbutton', 'checkbox', 'radio', 'combobox', 'img']);
  const nameOf = (el, role) => {
    if (el.getAttribute('aria-label')) return clean(el.getAttribute('aria-label'));
    if (role === 'img') return clean(el.getAttribute('alt'));
    if (['textbox', 'searchbox', 'spinbutton', 'checkbox', 'radio', 'combobox'].includes(role)) {
      const lab = el.closest('label'); if (lab) return clean(Array.from(lab.childNodes).filter(n => n.nodeType === 3).map(n => n.textContent).join(' '));
      return '';
    }
    if (leaf.has(role)) return clean(el.textContent);
    return '';
  };
  const walk = (el, depth) => {
    if (el.nodeType === 3) {
      const t = clean(el.textContent);
      if (t && depth > 0) lines.push('  '.repeat(depth) + 'StaticText ' + JSON.stringify(t));
      return;
    }
    if (el.nodeType !== 1) return;
    const tag = el.tagName.toLowerCase();
    if (['script', 'style', 'head', 'option'].includes(tag) || el.hidden) return;
    const role = roleOf(el);
    let d = depth;
    if (role) {
      if (!el.dataset.wid) el.dataset.wid = String(next++);
      const st = [];
      if (role === 'heading') st.push('level=' + tag[1]);
      if (['textbox', 'searchbox', 'spinbutton'].includes(role) && el.value) st.push('value=' + JSON.stringify(el.value));
      if (role === 'combobox') st.push('value=' + JSON.stringify(el.value));
      if (['checkbox', 'radio'].includes(role)) st.push(el.checked ? 'checked' : 'unchecked');
      if (el === document.activeElement) st.push('focused');
      if (el.disabled) st.push('disabled');
      const nm = nameOf(el, role);
      lines.push('  '.repeat(depth) + '[' + el.dataset.wid + '] ' + role + (nm ? ' ' + JSON.stringify(nm) : '') + (st.length ? ' ' + st.join(' ') : ''));
      d = depth + 1;
      if (leaf.has(role)) return;
    }
    for (const c of el.childNodes) walk(c, d);
  };
  lines.push('[0] RootWebArea ' + JSON.stringify(clean(document.title)));
  walk(document.body, 1);
  return lines.join('\n');
}
"""

# Candidate actions: interactive elements with their id, role and (for selects) options.
TARGETS_JS = r"""
() => Array.from(document.querySelectorAll('[data-wid]')).filter(e => !e.closest('[hidden]')).map(e => ({
  id: e.dataset.wid, tag: e.tagName.toLowerCase(), type: (e.getAttribute('type') || '').toLowerCase(),
  options: e.tagName === 'SELECT' ? Array.from(e.options).map(o => o.textContent) : []}))
  .filter(t => ['a', 'button', 'input', 'select', 'textarea'].includes(t.tag))
"""


@dataclass
class CollectStats:
    """What a collection produced and how long real browser steps took."""

    transitions: int
    episodes: int
    sites: int
    step_seconds_p50: float
    step_seconds_mean: float


def _q(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def choose_action(rng: random.Random, targets: list[dict], words: list[str]) -> tuple[str, dict | None]:
    """A random action in the action text grammar, and the target it applies to."""
    roll = rng.random()
    if roll < 0.06:
        return "go_back()", None
    if roll < 0.10:
        return "scroll(0, 400)", None
    if not targets:
        return "noop()", None
    t = rng.choice(targets)
    if t["tag"] == "select":
        return f"select({t['id']}, {_q(rng.choice(t['options']))})", t
    if t["tag"] in ("input", "textarea") and t["type"] not in ("checkbox", "radio", "submit"):
        if t["type"] == "search" and rng.random() < 0.5:
            return f"fill({t['id']}, {_q(rng.choice(words))})", t
        return f"fill({t['id']}, {_q(rng.choice(words) if t['type'] != 'number' else str(rng.randint(1, 5)))})", t
    return f"click({t['id']})", t


async def _act(page, action_text: str, target: dict | None) -> None:  # noqa: ANN001 (playwright Page)
    if action_text == "go_back()":
        await page.go_back(wait_until="load")
    elif action_text.startswith("scroll("):
        await page.mouse.wheel(0, 400)
    elif target is None:
        return
    else:
        el = page.locator(f'[data-wid="{target["id"]}"]')
        if action_text.startswith("select("):
            await el.select_option(label=json.loads(action_text.split(", ", 1)[1][:-1]))
        elif action_text.startswith("fill("):
            await el.fill(json.loads(action_text.split(", ", 1)[1][:-1]))
        else:
            await el.click(timeout=2000)
    try:
        await page.wait_for_load_state("load", timeout=3000)
    except Exception:  # noqa: BLE001 (a page that never settles is still observed)
        pass


async def collect(out: Path, sites_per_family: int = 8, episodes_per_site: int = 5, steps: int = 12,
                  test_fraction: float = 0.25, seed: int = 0, test_sites: set[str] | None = None,
                  only_test: bool = False) -> CollectStats:
    """Drive Chromium over generated sites and write transitions JSONL to `out`."""
    from playwright.async_api import async_playwright

    rng = random.Random(seed)
    names = site_names(sites_per_family)
    if test_sites is None:
        test_sites = {n for n in names if random.Random("split" + n).random() < test_fraction}
    step_times: list[float] = []
    count = episodes = 0
    out.parent.mkdir(parents=True, exist_ok=True)
    with SiteServer(names) as server, out.open("w") as fh:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(
                executable_path=CHROMIUM,
                args=["--no-sandbox", "--disable-gpu", f"--host-resolver-rules=MAP *.web.test 127.0.0.1:{server.port}"])
            try:
                for name in names:
                    if only_test and name not in test_sites:
                        continue
                    for e in range(episodes_per_site):
                        context = await browser.new_context()
                        page = await context.new_page()
                        start = rng.choice(["/", "/", "/about", "/" + {"shop": "products", "blog": "archive", "wiki": "articles"}[name.split("-")[0]]])
                        await page.goto(f"http://{name}.web.test{start}")
                        state, url = await page.evaluate(AXTREE_JS), page.url
                        episode_id = f"{name}-s{seed}-e{e}"
                        instruction = f"Explore {name}"
                        for i in range(steps):
                            targets = await page.evaluate(TARGETS_JS)
                            action_text, target = choose_action(rng, targets, list(_WORDS_FOR_FILL))
                            t0 = time.perf_counter()
                            try:
                                await _act(page, action_text, target)
                            except Exception:  # noqa: BLE001 (failed action: the state is what it is)
                                pass
                            next_state, next_url = await page.evaluate(AXTREE_JS), page.url
                            step_times.append(time.perf_counter() - t0)
                            fh.write(json.dumps({
                                "episode_id": episode_id, "step_index": i, "site": name,
                                "split": "test" if name in test_sites else "train", "format": "axtree",
                                "instruction": instruction, "url": url, "state": state, "action_text": action_text,
                                "next_url": next_url, "next_state": next_state, "env_kind": "browser"}) + "\n")
                            count += 1
                            state, url = next_state, next_url
                        episodes += 1
                        await context.close()
            finally:
                await browser.close()
    return CollectStats(transitions=count, episodes=episodes, sites=len(names),
                        step_seconds_p50=statistics.median(step_times) if step_times else 0.0,
                        step_seconds_mean=statistics.fmean(step_times) if step_times else 0.0)


_WORDS_FOR_FILL = ("amber", "cedar", "river", "nova", "tide", "lotus", "zephyr", "jade", "hello", "42")


def main(argv: list[str] | None = None) -> None:
    """`webenv-worldmodel collect --out data/transitions.jsonl`."""
    import argparse
    from dataclasses import asdict

    p = argparse.ArgumentParser(prog="webenv-worldmodel collect", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--sites-per-family", type=int, default=8)
    p.add_argument("--episodes-per-site", type=int, default=5)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only-test", action="store_true", help="collect on the held-out sites only (rollout sets)")
    a = p.parse_args(argv)
    stats = asyncio.run(collect(a.out, a.sites_per_family, a.episodes_per_site, a.steps, seed=a.seed, only_test=a.only_test))
    a.out.with_suffix(".stats.json").write_text(json.dumps(asdict(stats), indent=2))
    print(json.dumps(asdict(stats)))
