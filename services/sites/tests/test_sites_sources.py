"""Other task sources in the one catalog: seed YAML, WebGym rubric JSON, MiniWoB++ (served with assets)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import httpx
import pytest
from webenv.sites import rubricjson, yamltasks
from webenv.sites.world import DATA
from webenv.v1 import common_pb2 as pb

SEED_EXAMPLE = """\
name: find_product_under_50
description: Find any product under $50 in the Electronics category
success_criteria:
  - type: url_contains
    value: /products/
  - type: dom_contains
    selector: .price
    condition: "float(text.strip('$')) < 50"
  - type: category_match
    value: Electronics
max_steps: 20
timeout_seconds: 60
"""


def test_seed_yaml_example_converts_to_rubric(tmp_path: Path) -> None:
    f = tmp_path / "find_product.yaml"
    f.write_text(SEED_EXAMPLE)
    [task] = yamltasks.load_file(f)
    assert task.task_id == "yaml/find_product_under_50" and task.source == pb.TASK_SOURCE_YAML
    assert (task.max_steps, task.timeout_seconds, task.category) == (20, 60.0, "Electronics")
    facts = task.rubric.groups[0].facts
    assert facts[0].criterion.url.value == "/products/" and facts[0].criterion.url.mode == pb.MATCH_MODE_CONTAINS
    assert facts[1].criterion.page.css_selector == ".price"
    assert facts[1].criterion.page.condition == "float(text.strip('$')) < 50"
    assert facts[2].criterion.category.category == "Electronics"
    assert task.difficulty == pb.DIFFICULTY_EASY


def test_shipped_yaml_and_rubric_examples_load() -> None:
    tasks = yamltasks.load_dirs([DATA / "yaml"])
    assert len(tasks) >= 3 and all(t.start_url.startswith("http://") for t in tasks)
    rub = rubricjson.load_file(DATA / "rubric" / "synthetic_examples.json")
    assert rub[0].source == pb.TASK_SOURCE_RUBRIC_JSON and rub[0].subtasks
    kinds = {f.criterion.WhichOneof("kind") for g in rub[0].rubric.groups for f in g.facts}
    assert kinds == {"url", "answer", "llm"}
    real = rubricjson.load_file(DATA / "rubric" / "real_web.json")
    assert {t.source for t in real} == {pb.TASK_SOURCE_REAL_WEB}


@pytest.mark.parametrize(("body", "line", "field"), [
    ("name: x\ndescription: d\nsuccess_criteria:\n  - type: url_contains\n    value: /a\n  - type: dom_contains\n    condition: 'x'\n",
     6, "success_criteria[1].selector"),
    ("name: x\ndescription: d\nsuccess_criteria:\n  - type: url_contain\n    value: /a\n", 4, "success_criteria[0].type"),
    ("name: x\ndescription: d\nsuccess_criteria: []\n", 3, "success_criteria"),
    ("name: x\ndescription: d\nmax_steps: lots\nsuccess_criteria:\n  - type: category_match\n    value: A\n", 3, "max_steps"),
    ("name: x\ndescription: d\ncolour: red\nsuccess_criteria:\n  - type: category_match\n    value: A\n", 3, "colour"),
    ("description: d\nsuccess_criteria:\n  - type: category_match\n    value: A\n", 1, "name"),
    ("name: x\ndescription: d\nsuccess_criteria:\n  - type: dom_contains\n    selector: .p\n    condition: 'float(('\n", 6,
     "success_criteria[0].condition"),
    ("name: x\ndescription: [unclosed\nsuccess_criteria: []\n", 3, "syntax"),
])
def test_malformed_yaml_names_file_line_and_field(tmp_path: Path, body: str, line: int, field: str) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(textwrap.dedent(body))
    with pytest.raises(yamltasks.YamlTaskError) as info:
        yamltasks.load_file(f)
    err = info.value
    assert (err.path, err.line, err.field) == (str(f), line, field), str(err)
    assert str(err).startswith(f"{f}:{line}: {field}:")


def test_malformed_rubric_json_names_the_field(tmp_path: Path) -> None:
    f = tmp_path / "bad.json"
    f.write_text('[{"task_id": "a", "website": "ftp://x", "task": "t", "fact_groups": [{"facts": ["f"]}]}]')
    with pytest.raises(rubricjson.RubricError, match=r"bad.json\[0\]: website"):
        rubricjson.load_file(f)


async def test_miniwob_pages_served_with_assets(sites_service) -> None:
    tasks = [t for t in sites_service.world.tasks.tasks if t.source == pb.TASK_SOURCE_MINIWOB]
    assert len(tasks) >= 100
    assert {"click-test", "book-flight", "enter-text"} <= {t.metadata["miniwob_task"] for t in tasks}
    base = f"http://127.0.0.1:{sites_service.http_port}"
    async with httpx.AsyncClient(base_url=base, headers={"host": "miniwob.web.test"}) as c:
        page = await c.get("/miniwob/click-test.html")
        assert page.status_code == 200 and "../core/core.js" in page.text
        for asset in ("/core/core.js", "/core/core.css", "/core/d3.v3.min.js", "/common/ui_utils.js"):
            r = await c.get(asset)
            assert r.status_code == 200 and len(r.content) > 100, asset
        assert (await c.get("/miniwob/no-such-task.html")).status_code == 404


async def test_miniwob_episode_runs_in_chromium(sites_service, browser) -> None:
    ctx = await browser.new_context()
    page = await ctx.new_page()
    await page.goto("http://miniwob.web.test/miniwob/click-test.html")
    await page.evaluate("core.startEpisodeReal()")
    await page.click("#subbtn")
    reward = await page.evaluate("WOB_RAW_REWARD_GLOBAL")
    assert reward > 0
    await ctx.close()
