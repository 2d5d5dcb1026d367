"""A tiny two-website web written as the collector's TRANSITIONS exports, for tests and examples.

Pages are in the farm's notation (a11y tree: one tab per depth, `[id] role "name"`; Markdown: `[id:name](href)`),
ids numbered in document order from 1 on every page as the farm does, so the world model's whole path (dataset,
training, recall, composition, serving) runs in seconds without a browser. `shop-0000` is a training website and
`shop-0001` the held-out one; real data comes from `webenv worldmodel build`.
"""

from __future__ import annotations

import json
from pathlib import Path

SITES = {"shop-0000.web.test": "train", "shop-0001.web.test": "test"}
PRODUCTS = {"shop-0000.web.test": [("Koi Xenon Lamp", "$233"), ("Haven Zephyr Mug", "$41"), ("Ember Canyon Tent", "$67")],
            "shop-0001.web.test": [("Nova Pine Chair", "$120"), ("Jade Delta Kettle", "$18"), ("Lotus Tide Rug", "$95")]}
PATHS = ["/", "/products", "/about", "/products/P1000", "/products/P1001", "/products/P1002"]


def _chrome(site: str) -> tuple[list[str], list[str], dict[str, str]]:
    """(a11y lines, markdown parts, links) of the banner shared by every page of a site."""
    name = site.split(".")[0].replace("-", " ").title()
    ax = ['[1] banner ""', '\t[2] search ""', '\t\t[3] searchbox "Search"', '\t\t[4] button "Search"',
          f'\t[5] link "{name}"', '\t[6] link "Products"', '\t[7] link "About"', '[8] main ""']
    links = {"5": "/", "6": "/products", "7": "/about"}
    return ax, [], links


def page(site: str, path: str, query: str = "") -> tuple[str, dict[str, str]]:
    """(a11y tree, links) of one page."""
    ax, _, links = _chrome(site)
    items = PRODUCTS[site]
    n = 9
    if path == "/":
        ax += [f'\t[{n}] heading "Welcome" level=1', f'\t[{n + 1}] list ""']
        n += 2
        for i, (title, price) in enumerate(items):
            ax += [f'\t\t[{n}] listitem ""', f'\t\t\t[{n + 1}] link "{title}"', f'\t\t\tStaticText "{price}"']
            links[str(n + 1)] = f"/products/P100{i}"
            n += 2
    elif path == "/products":
        shown = [(i, t) for i, t in enumerate(items) if not query or query.lower() in t[0].lower()]
        ax += [f'\t[{n}] heading "{"Results for " + query if query else "All products"}" level=1']
        n += 1
        for i, (title, price) in shown:
            ax += [f'\t[{n}] link "{title}"', f'\tStaticText "{price}"']
            links[str(n)] = f"/products/P100{i}"
            n += 1
    elif path == "/about":
        ax += [f'\t[{n}] heading "About us" level=1', f'\t[{n + 1}] paragraph ""', f'\t\tStaticText "{site} sells things."']
        n += 2
    else:
        title, price = items[int(path[-1])]
        ax += [f'\t[{n}] heading "{title}" level=1', f'\tStaticText "Price {price}"', f'\t[{n + 1}] button "Add to cart"']
        n += 2
    ax += [f'[{n}] contentinfo ""', f'\tStaticText "© {site}"']
    return "\n".join(ax), links


def markdown(state: str, links: dict[str, str]) -> str:
    """The page in the farm's Markdown notation (only the links matter to the world model)."""
    return " ".join(f"[{k}:x]({v})" for k, v in sorted(links.items(), key=lambda kv: int(kv[0])))


def _filled(state: str, element: str, text: str) -> str:
    return state.replace(f'[{element}] searchbox "Search"', f'[{element}] searchbox "Search" focused, value="{text}"')


def episodes() -> list[list[dict]]:
    """Episodes of transitions (dicts in the export schema, with `markdown`/`next_markdown` for the other export)."""
    out: list[list[dict]] = []
    for site in SITES:
        base = f"http://{site}"
        for path in PATHS:  # every link of every page, one step each from the page
            state, links = page(site, path)
            for k, (eid, href) in enumerate(sorted(links.items(), key=lambda kv: int(kv[0]))):
                nxt_state, nxt_links = page(site, href)
                out.append([_row(f"{site}{path}-{k}", 0, site, base + path, state, links, f"click({eid})",
                                 base + href, nxt_state, nxt_links)])
        # a search episode: fill the box (an edit), press Enter (a navigation), open a result, go back
        s0, l0 = page(site, "/")
        word = PRODUCTS[site][1][0].split()[0]
        s1 = _filled(s0, "3", word)
        s2, l2 = page(site, "/products", word)
        s3, l3 = page(site, "/products/P1001")
        ep = [_row(f"{site}-search", 0, site, base + "/", s0, l0, f'fill(3, "{word}")', base + "/", s1, l0),
              _row(f"{site}-search", 1, site, base + "/", s1, l0, 'press(3, "Enter")', f"{base}/products?q={word}", s2, l2),
              _row(f"{site}-search", 2, site, f"{base}/products?q={word}", s2, l2, "click(9)", base + "/products/P1001", s3, l3),
              _row(f"{site}-search", 3, site, base + "/products/P1001", s3, l3, "go_back()", f"{base}/products?q={word}", s2, l2),
              _row(f"{site}-search", 4, site, f"{base}/products?q={word}", s2, l2, "scroll(0, 300)", f"{base}/products?q={word}", s2, l2)]
        out.append(ep)
    return out


def _row(episode: str, step: int, site: str, url: str, state: str, links: dict[str, str], action: str, next_url: str,
         next_state: str, next_links: dict[str, str]) -> dict:
    return {"episode_id": episode, "step_index": step, "site": site, "split": "train", "instruction": "", "url": url,
            "state": state, "action_text": action, "next_url": next_url, "next_state": next_state, "env_kind": "browser",
            "markdown": markdown(state, links), "next_markdown": markdown(next_state, next_links)}


def write_exports(folder: Path) -> dict[str, Path]:
    """The AXTREE and MARKDOWN TRANSITIONS exports and the sites file, as `webenv worldmodel build` writes them.

    As in the collector's export, every transition says split "train" (crawl episodes carry no task): the split
    comes from the sites file."""
    folder.mkdir(parents=True, exist_ok=True)
    ax, md = folder / "axtree.jsonl", folder / "markdown.jsonl"
    with ax.open("w") as fa, md.open("w") as fm:
        for ep in episodes():
            for r in ep:
                base = {k: v for k, v in r.items() if k not in ("markdown", "next_markdown")}
                fa.write(json.dumps({**base, "format": "axtree"}) + "\n")
                fm.write(json.dumps({**base, "format": "markdown", "state": r["markdown"],
                                     "next_state": r["next_markdown"]}) + "\n")
    sites = folder / "sites.json"
    sites.write_text(json.dumps({h: {"split": s, "family": "shop"} for h, s in SITES.items()}))
    return {"axtree": ax, "markdown": md, "sites": sites}
