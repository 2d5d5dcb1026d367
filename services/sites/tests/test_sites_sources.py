"""Other task sources in the one catalog: seed YAML, WebGym rubric JSON, MiniWoB++ (served with assets)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import httpx
import pytest
from webenv.sites.world import DATA
from webenv.splits import RESERVED
from webenv.taskfiles import TaskFileError, rubricjson, seedyaml
from webenv.v1 import common_pb2 as pb
from webenv.v1 import task_pb2

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
    [task] = seedyaml.load_file(f)
    assert task.task_id == "yaml/find_product_under_50" and task.source == pb.TASK_SOURCE_YAML
    assert (task.max_steps, task.timeout_seconds, task.category) == (20, 60.0, "Electronics")
    facts = task.rubric.groups[0].facts
    assert facts[0].criterion.url.value == "/products/" and facts[0].criterion.url.mode == pb.MATCH_MODE_CONTAINS
    assert facts[1].criterion.page.css_selector == ".price"
    assert facts[1].criterion.page.condition == "float(text.strip('$')) < 50"
    assert facts[2].criterion.category.category == "Electronics"
    assert task.difficulty == pb.DIFFICULTY_EASY


def test_shipped_yaml_and_rubric_examples_load() -> None:
    tasks = seedyaml.load_dirs([DATA / "yaml"])
    assert len(tasks) >= 3 and all(t.start_url.startswith("http://") for t in tasks)
    rub = rubricjson.load_file(DATA / "rubric" / "synthetic_examples.json")
    assert rub[0].source == pb.TASK_SOURCE_RUBRIC_JSON and rub[0].subtasks
    kinds = {f.criterion.WhichOneof("kind") for g in rub[0].rubric.groups for f in g.facts}
    assert kinds == {"url", "answer", "llm"}
    real = rubricjson.load_file(DATA / "rubric" / "real_web.json")  # the public web: rubric JSON tasks too
    assert {t.source for t in real} == {pb.TASK_SOURCE_RUBRIC_JSON} and all(t.task_id.startswith("rubric/") for t in real)
    assert {t.metadata["rubric_file"] for t in real} == {str(DATA / "rubric" / "real_web.json")}


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
    with pytest.raises(TaskFileError) as info:
        seedyaml.load_file(f)
    [err] = info.value.errors
    assert isinstance(err, seedyaml.YamlTaskError)
    assert (err.path, err.line, err.field) == (str(f), line, field), str(err)
    assert str(err).startswith(f"{f}:{line}: {field}:")


BAD_DOCS = """\
name: two words
description: d
colour: red
max_steps: 0
success_criteria:
  - type: dom_contains
    condition: 'x'
  - type: url_contain
    value: /a
---
name: fine_one
description: d
success_criteria:
  - type: url_contains
    value: /ok
---
description: no name
success_criteria: []
"""


def test_every_yaml_problem_is_reported_at_once(tmp_path: Path) -> None:
    """One run of the loader names every bad field of every document and file, one line each."""
    (tmp_path / "a.yaml").write_text(BAD_DOCS)
    (tmp_path / "b.yaml").write_text("name: x\ndescription: [unclosed\n")
    with pytest.raises(TaskFileError) as info:
        seedyaml.load_dirs([tmp_path, tmp_path / "missing"])
    lines = str(info.value).splitlines()
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    assert lines == [
        f"{a}:3: colour: unknown field (allowed: category, description, kind, max_steps, name, start_url, "
        "success_criteria, timeout_seconds)",
        f"{a}:1: name: must be a non-empty identifier without spaces",
        f"{a}:4: max_steps: must be > 0",
        f"{a}:6: success_criteria[0].selector: required for type dom_contains",
        f"{a}:8: success_criteria[1].type: must be one of url_contains, dom_contains, category_match, got 'url_contain'",
        f"{a}:17: name: required field is missing",
        f"{a}:18: success_criteria: must be a non-empty list",
        f"{b}:3: syntax: expected ',' or ']', but got '<stream end>'",
        f"{tmp_path / 'missing'}: no such folder",
    ]


def test_malformed_rubric_json_names_every_field(tmp_path: Path) -> None:
    f = tmp_path / "bad.json"
    f.write_text('[{"task_id": "a", "website": "ftp://x", "task": "t", "fact_groups": [{"facts": ["f"]}]},'
                 ' {"task_id": "b c", "website": "http://shop-0001.web.test/", "fact_groups": []}]')
    with pytest.raises(TaskFileError) as info:
        rubricjson.load_file(f)
    lines = str(info.value).splitlines()
    assert lines[0] == f"{f}[0]: website: Value error, task 'a': start URL 'ftp://x' scheme ftp: is not http or https", lines
    assert [ln.split(": ")[1] for ln in lines[1:]] == ["task_id", "instruction", "fact_groups"], lines


def test_a_rubric_tasks_oracle_is_read_in_the_action_grammar(tmp_path: Path) -> None:
    """A rubric JSON task may carry its reference solution (Task.oracle); a malformed action names its place."""
    task = {"task_id": "hours", "website": "http://clinic.web.test/", "task": "When does it open on Saturday?",
            "fact_groups": [{"facts": [{"description": "9 a.m.", "criterion": {"answer": {"mode": "MATCH_MODE_CONTAINS",
                                                                                          "expected": "9 a.m."}}}]}],
            "oracle": ["click(\"a[href='hours.html']\")", "answer(\"9 a.m. to noon\")"]}
    good = tmp_path / "good.json"
    good.write_text(json.dumps([task]))
    (t,) = rubricjson.load_file(good)
    assert t.oracle[0].click.target.selector == "a[href='hours.html']" and t.oracle[1].answer.text == "9 a.m. to noon"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([task, task | {"task_id": "b", "oracle": ["click(\"a\")", "clik(3)"]}]))
    with pytest.raises(TaskFileError) as info:
        rubricjson.load_file(bad)
    (line,) = str(info.value).splitlines()
    assert line.startswith(f"{bad}[1]: oracle[1]: ") and "clik" in line and len(line) < 400, line


async def test_hand_made_sites_are_served_on_their_hosts(sites_service) -> None:
    """The hand-written websites (data/handmade/<host>/) are served by Host, with their 40 tasks in the catalog."""
    tasks = [t for t in sites_service.world.tasks.tasks if t.metadata.get("rubric_file", "").endswith("handmade.json")]
    assert len(tasks) == 40 and all(t.source == pb.TASK_SOURCE_RUBRIC_JSON and t.oracle for t in tasks)
    hosts = sorted({t.site for t in tasks})
    assert len(hosts) >= 5 and all(h.endswith(".web.test") for h in hosts), hosts
    base = f"http://127.0.0.1:{sites_service.http_port}"
    for host in hosts:
        async with httpx.AsyncClient(base_url=base, headers={"host": host}) as c:
            home = await c.get("/")
            assert home.status_code == 200 and "<h1" in home.text, host
            assert (await c.get("/no-such-page.html")).status_code == 404, host


async def test_hand_made_sites_are_never_in_the_train_split(sites_service) -> None:
    """Every hand-made website is held out, whatever its host would hash to: the transfer suite's sites are test, the
    development set's validation, so a run over the train split never samples them and the trainer refuses their
    episodes. A site added to data/handmade/ without its split fixed in webenv.splits fails here."""
    folders = {p.name for p in (DATA / "handmade").iterdir() if p.is_dir()}
    assert folders == set(RESERVED), folders ^ set(RESERVED)
    want = {"handmade.json": pb.SPLIT_TEST, "handmade_dev.json": pb.SPLIT_VALIDATION}
    seen: dict[str, set[int]] = {}
    for t in sites_service.world.tasks.tasks:
        name = Path(t.metadata.get("rubric_file", "")).name
        if name in want:
            seen.setdefault(name, set()).add(t.split)
            assert t.split == RESERVED[t.site] == want[name], (t.task_id, t.split)
    assert seen == {name: {split} for name, split in want.items()}, seen
    catalog = sites_service.world.tasks
    train = {catalog.tasks[i].site for i in catalog.select(task_pb2.TaskFilter(split=pb.SPLIT_TRAIN))}
    assert train and not train & set(RESERVED)


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


def test_task_file_start_urls_are_checked_when_read(tmp_path: Path) -> None:
    """A start URL no browser can open (a port left as a placeholder) is a problem of the file, naming the task and
    the field, found when the file is read rather than once per episode."""
    f = tmp_path / "mine.json"
    f.write_text('[{"task_id": "ok", "website": "http://127.0.0.1:8080/a", "task": "t", "fact_groups": [{"facts": ["f"]}]},'
                 ' {"task_id": "mine-1", "website": "http://127.0.0.1:PORT/a", "task": "t", "fact_groups": [{"facts": ["f"]}]}]')
    with pytest.raises(TaskFileError) as info:
        rubricjson.load_file(f)
    [line] = str(info.value).splitlines()
    assert line.startswith(f"{f}[1]: website: ") and "task 'mine-1'" in line and "port 'PORT' is not a number" in line, line
    y = tmp_path / "mine.yaml"
    y.write_text("name: mine_2\ndescription: d\nstart_url: http://127.0.0.1:PORT/\nsuccess_criteria:\n"
                 "  - type: url_contains\n    value: /a\n")
    with pytest.raises(TaskFileError) as info:
        seedyaml.load_file(y)
    [line] = str(info.value).splitlines()
    assert line.startswith(f"{y}:3: start_url: ") and "task 'mine_2'" in line and "port 'PORT' is not a number" in line, line


async def test_rubric_tasks_on_any_host_are_rubric_json_selectable_by_their_file(tmp_path: Path) -> None:
    """A team's own rubric JSON tasks on local or intranet hosts are TASK_SOURCE_RUBRIC_JSON (`--source rubric-json`
    selects them), like those on the synthetic web, and ListTasks selects a file's tasks by the file's name or path."""
    import grpc
    from webenv.sites.config import Settings
    from webenv.sites.service import SitesService
    from webenv.v1 import task_pb2, task_pb2_grpc

    rdir = tmp_path / "rubric"
    rdir.mkdir()
    (rdir / "intranet.json").write_text(
        '[{"task_id": "wiki-owner", "website": "http://wiki.corp.example:8080/", "task": "t", "fact_groups": [{"facts": ["f"]}]},'
        ' {"task_id": "local-app", "website": "http://127.0.0.1:3000/", "task": "t", "fact_groups": [{"facts": ["f"]}]}]')
    (rdir / "shop.json").write_text(
        '{"task_id": "shop-one", "website": "http://shop-0001.web.test/", "task": "t", "fact_groups": [{"facts": ["f"]}]}')
    tasks = rubricjson.load_file(rdir / "intranet.json")
    assert [(t.task_id, t.source) for t in tasks] == [("rubric/wiki-owner", pb.TASK_SOURCE_RUBRIC_JSON),
                                                      ("rubric/local-app", pb.TASK_SOURCE_RUBRIC_JSON)]
    assert tasks[1].metadata["rubric_file"] == str(rdir / "intranet.json") and tasks[1].metadata["rubric_index"] == "1"
    settings = Settings(host="127.0.0.1", grpc_port=0, metrics_port=0, http_port=0, http_host="127.0.0.1", sites_count=8,
                        log_json=False, sites_rubric_dirs=[str(rdir)], sites_miniwob=False)
    async with SitesService(settings) as svc, \
            grpc.aio.insecure_channel(f"127.0.0.1:{svc.port}") as ch:
        stub = task_pb2_grpc.TaskServiceStub(ch)

        async def ids(**flt: object) -> set[str]:
            r = await stub.ListTasks(task_pb2.ListTasksRequest(filter=task_pb2.TaskFilter(**flt), page_size=1000))
            return {t.task_id for t in r.tasks}

        mine = {"rubric/wiki-owner", "rubric/local-app", "rubric/shop-one"}
        assert mine <= await ids(sources=[pb.TASK_SOURCE_RUBRIC_JSON])
        assert await ids(task_files=["intranet.json"]) == {"rubric/wiki-owner", "rubric/local-app"}
        assert await ids(task_files=[str(rdir / "shop.json")], sources=[pb.TASK_SOURCE_RUBRIC_JSON]) == {"rubric/shop-one"}
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await ids(task_files=["nowhere.json"])
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "filter.task_files" in info.value.details()
        assert "nowhere.json" in info.value.details() and "intranet.json" in info.value.details()
