"""Published benchmarks' task files, in their authors' formats (webenv.taskfiles.webarena / openweb): upstream tasks
(WebArena, WebArena-Verified, VisualWebArena, WebVoyager, Online-Mind2Web) and result files copied verbatim
(tests/benchmarks/README.md: source and license) and the examples written for the project's own sites
(docs/benchmarks/examples/), read by the same `load` that `webenv run --task-file` and `webenv tasks` use;
placeholders without a base URL and func: helpers outside the registry are refused before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from webenv.taskfiles import TaskFileError, load
from webenv.taskfiles.locators import FUNCS, LocatorError, parse_func, parse_locator
from webenv.v1 import common_pb2 as pb

UPSTREAM = Path(__file__).with_name("benchmarks")
EXAMPLES = Path(__file__).resolve().parents[3] / "docs" / "benchmarks" / "examples"
WA = {"WA_SHOPPING": "http://127.0.0.1:7770", "WA_SHOPPING_ADMIN": "http://127.0.0.1:7780/admin",
      "WA_REDDIT": "http://127.0.0.1:9999", "WA_GITLAB": "http://127.0.0.1:8023", "WA_MAP": "http://127.0.0.1:3000"}


@pytest.fixture
def wa_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in WA.items():
        monkeypatch.setenv(k, v)


def _facts(task: pb.Task) -> dict[str, pb.Criterion]:
    return {f.fact_id: f.criterion for g in task.rubric.groups for f in g.facts}


def test_webarena_config_tasks_load_as_upstream_writes_them(wa_env: None) -> None:
    tasks = {t.metadata["benchmark_task_id"]: t for t in load(UPSTREAM / "webarena_test.raw.json")}
    assert len(tasks) == 8 and all(t.source == pb.TASK_SOURCE_BENCHMARK for t in tasks.values())
    t0 = tasks["0"]  # exact_match, shopping_admin behind a login
    assert (t0.task_id, t0.start_url, t0.instruction) == ("webarena/0", "http://127.0.0.1:7780/admin",
                                                          "What is the top-1 best-selling product in 2022")
    assert t0.metadata["storage_state"] == "./.auth/shopping_admin_state.json" and t0.metadata["require_login"] == "true"
    assert t0.template_id == "webarena/279" and t0.kind == pb.TASK_KIND_INFORMATION
    cfg = json.loads(_facts(t0)["string_match"].benchmark.config_json)
    assert cfg["reference_answers"] == {"exact_match": "Quest Lumaflex\u2122 Band"}
    # fuzzy_match is one LLM-judged fact per reference; url_match and program_html keep upstream's configuration
    assert _facts(tasks["8"])["fuzzy_match.0"].HasField("llm")
    url = json.loads(_facts(tasks["44"])["url_match"].benchmark.config_json)
    assert url == {"reference_url": "http://127.0.0.1:8023/dashboard/todos", "url_note": "GOLD in PRED"}
    assert tasks["44"].kind == pb.TASK_KIND_NAVIGATION
    role = json.loads(_facts(tasks["481"])["program_html.0"].benchmark.config_json)["program_html"][0]
    assert role["locator"].startswith("func:gitlab_get_project_memeber_role(__page__,")
    assert role["url"].startswith("http://127.0.0.1:8023/") and tasks["481"].kind == pb.TASK_KIND_TRANSACTION
    post = json.loads(_facts(tasks["615"])["program_html.0"].benchmark.config_json)["program_html"][0]
    assert post["url"] == "func:reddit_get_post_url('__last_url__')"
    # a multi-tab start: the session opens the first, the others are kept in order
    assert json.loads(tasks["431"].metadata["start_urls"])[0] == tasks["431"].start_url
    assert len(json.loads(tasks["431"].metadata["start_urls"])) == 3


def test_webarena_verified_tasks_load(wa_env: None) -> None:
    tasks = {t.task_id: t for t in load(UPSTREAM / "webarena_verified.json")}
    assert set(tasks) == {"webarena-verified/0", "webarena-verified/44", "webarena-verified/156"}
    resp = json.loads(_facts(tasks["webarena-verified/0"])["AgentResponseEvaluator.0"].benchmark.config_json)
    assert resp["expected"]["retrieved_data"] == ["Quest Lumaflex\u2122 Band"] and resp["results_schema"]["type"] == "array"
    net = _facts(tasks["webarena-verified/156"])["NetworkEventEvaluator.1"].benchmark
    assert net.evaluator == "webarena_verified.network_event"
    assert json.loads(net.config_json)["expected"] == {"url": "http://127.0.0.1:8023/dashboard/merge_requests",
                                                       "query_params": {"assignee_username": ["byteblaze"]}}
    assert tasks["webarena-verified/44"].kind == pb.TASK_KIND_NAVIGATION
    assert tasks["webarena-verified/0"].rubric.version == 2  # the task's revision


def test_webvoyager_jsonl_loads() -> None:
    tasks = load(UPSTREAM / "WebVoyager_data.jsonl")
    assert [t.task_id for t in tasks] == ["webvoyager/Allrecipes--0", "webvoyager/Allrecipes--1", "webvoyager/Allrecipes--2"]
    assert tasks[0].start_url == "https://www.allrecipes.com/" and tasks[0].metadata["web_name"] == "Allrecipes"
    assert all(_facts(t)["webvoyager.judge"].HasField("llm") for t in tasks)


def test_visualwebarena_config_tasks_load_as_upstream_writes_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VWA_CLASSIFIEDS", "http://127.0.0.1:9980")  # BrowserGym's name for VWA's placeholder
    tasks = {t.metadata["benchmark_task_id"]: t for t in load(UPSTREAM / "visualwebarena_test.raw.json")}
    assert list(tasks) == ["0", "4", "6", "9"] and all(t.task_id.startswith("visualwebarena/") for t in tasks.values())
    t0 = tasks["0"]  # url_match with VWA's "EXACT" rule, kept as such (not WebArena's "GOLD in PRED")
    assert (t0.start_url, t0.instruction) == ("http://127.0.0.1:9980", "Find me the cheapest blue kayak on this site.")
    assert t0.kind == pb.TASK_KIND_NAVIGATION and t0.metadata["storage_state"] == "./.auth/classifieds_state.json"
    assert json.loads(_facts(t0)["url_match"].benchmark.config_json) == {
        "reference_url": "http://127.0.0.1:9980/index.php?page=item&id=4799", "url_note": "EXACT"}
    t4 = tasks["4"]  # three program_html targets: VWA's get_query_text helper, and a must_exclude
    assert t4.kind == pb.TASK_KIND_TRANSACTION and t4.metadata["require_reset"] == "true"
    targets = [json.loads(_facts(t4)[f"program_html.{i}"].benchmark.config_json)["program_html"][0] for i in range(3)]
    assert [t["locator"] for t in targets] == ["func:get_query_text(__page__, '.price')",
                                               "func:get_query_text(__page__, '.desc')",
                                               "func:get_query_text(__page__, '.desc')"]
    assert targets[0]["url"] == "http://127.0.0.1:9980/index.php?page=item&id=84144"
    assert targets[2]["required_contents"] == {"must_exclude": ["30000", "30,000"]}
    must = json.loads(_facts(tasks["6"])["string_match"].benchmark.config_json)["reference_answers"]["must_include"]
    assert must[0] == "http://127.0.0.1:9980/index.php?page=item&id=4208" and tasks["6"].kind == pb.TASK_KIND_INFORMATION
    t9 = tasks["9"]  # an input image, program_html on the last page, and an image query for the LLM judge
    assert t9.metadata["image"].endswith("input_images/classifieds/task_9/input_0.png")
    assert json.loads(_facts(t9)["program_html.0"].benchmark.config_json)["program_html"][0]["url"] == "last"
    query = _facts(t9)["page_image_query.0"]
    assert query.HasField("llm") and "http://127.0.0.1:9980/oc-content/uploads/42906/42906.png" in query.llm.guidance
    assert "__CLASSIFIEDS__" not in json.dumps([dict(t.metadata) for t in tasks.values()])


def test_online_mind2web_tasks_load() -> None:
    tasks = load(UPSTREAM / "Online_Mind2Web.jsonl")
    assert [t.metadata["benchmark_task_id"] for t in tasks] == [
        "005be9dd91c95669d6ddde9ae667125c", "608c595eec271fa5dc03506923519994", "824eb7bb0ef1ce40bfd49c12182d9428"]
    fedex = tasks[1]
    assert fedex.task_id == "online-mind2web/608c595eec271fa5dc03506923519994"
    assert (fedex.start_url, fedex.site) == ("https://www.fedex.com/en-us/home.html", "www.fedex.com")
    assert fedex.instruction.startswith("Calculate a FedEx Ground shipping rate") and fedex.metadata["reference_length"] == "9"
    assert [t.difficulty for t in tasks] == [pb.DIFFICULTY_EASY, pb.DIFFICULTY_MEDIUM, pb.DIFFICULTY_HARD]
    assert all(_facts(t)["online-mind2web.judge"].HasField("llm") for t in tasks)


def test_every_format_written_for_our_own_sites_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEBENV_SITE_HEARTHLOAF", "http://hearthloaf.web.test")
    got = {p.name: load(p) for p in sorted(EXAMPLES.glob("*.json*"))}
    assert {k: len(v) for k, v in got.items()} == {
        "assistantbench_handmade.jsonl": 1, "online_mind2web_handmade.json": 1, "webarena_handmade.json": 4,
        "webarena_verified_handmade.json": 2, "webvoyager_handmade.jsonl": 2}
    benches = {t.metadata["benchmark"] for ts in got.values() for t in ts}
    assert benches == {"webarena", "webarena-verified", "webvoyager", "online-mind2web", "assistantbench"}
    assert all(t.site == "hearthloaf.web.test" for ts in got.values() for t in ts)
    ab = got["assistantbench_handmade.jsonl"][0]
    assert ab.difficulty == pb.DIFFICULTY_EASY and _facts(ab)["assistantbench.answer"].benchmark.evaluator


def test_a_placeholder_without_a_base_url_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("WA_MAP", "WEBENV_SITE_MAP", "WEBENV_BENCHMARK_SITES"):
        monkeypatch.delenv(k, raising=False)
    for k, v in WA.items():
        if k != "WA_MAP":
            monkeypatch.setenv(k, v)
    with pytest.raises(TaskFileError) as info:
        load(UPSTREAM / "webarena_test.raw.json")
    lines = [str(e) for e in info.value.errors]
    assert len(lines) == 1 and "(task 8): start_url: placeholder __MAP__ has no base URL" in lines[0]
    assert "WEBENV_SITE_MAP" in lines[0] and "WA_MAP" in lines[0]


def test_a_placeholder_file_maps_them_verified_config_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for k in [*WA, "WEBENV_SITE_GITLAB", "WEBENV_SITE_SHOPPING_ADMIN"]:
        monkeypatch.delenv(k, raising=False)
    cfg = tmp_path / "sites.json"
    cfg.write_text(json.dumps({"environments": {"__SHOPPING_ADMIN__": {"urls": ["http://a.test", "http://b.test"],
                                                                       "active_url_idx": 1},
                                                "__GITLAB__": {"urls": ["http://git.test/"]}}}))
    monkeypatch.setenv("WEBENV_BENCHMARK_SITES", str(cfg))
    monkeypatch.setenv("WEBENV_SITE_GITLAB", "http://127.0.0.9:8023")  # a variable wins over the file
    tasks = {t.task_id: t for t in load(UPSTREAM / "webarena_verified.json")}
    assert tasks["webarena-verified/0"].start_url == "http://b.test"
    assert tasks["webarena-verified/44"].start_url == "http://127.0.0.9:8023"


def test_func_helpers_outside_the_registry_are_refused(tmp_path: Path, wa_env: None) -> None:
    upstream = json.loads((UPSTREAM / "webarena_test.raw.json").read_text())
    task = next(t for t in upstream if t["task_id"] == 481)
    task["eval"]["program_html"][0]["locator"] = "func:__import__('os').system('touch /tmp/x')"
    bad_url = json.loads(json.dumps(task))
    bad_url["task_id"], bad_url["eval"]["program_html"][0]["url"] = 9001, "func:open('/etc/passwd')"
    bad_url["eval"]["program_html"][0]["locator"] = ""
    js = json.loads(json.dumps(task))
    js["task_id"], js["eval"]["program_html"][0]["locator"] = 9002, "document.cookie"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([task, bad_url, js]))
    with pytest.raises(TaskFileError) as info:
        load(path)
    lines = [str(e) for e in info.value.errors]
    assert len(lines) == 3, lines
    assert "(task 481): eval.program_html[0].locator: func:__import__ is not a registered helper" in lines[0]
    assert "(task 9001): eval.program_html[0].url: func:open is not a registered helper" in lines[1]
    assert "(task 9002): eval.program_html[0].locator: unsupported member 'cookie'" in lines[2]


def test_locator_grammar_and_func_registry() -> None:
    (term,) = parse_locator("document.querySelectorAll(\".a > b\")[1].outerText")
    assert term.steps[0].op == "qsa" and term.steps[0].index == 1
    assert parse_locator("") == ()
    with pytest.raises(LocatorError, match="takes 1 argument"):
        parse_func("func:shopping_get_sku_latest_review_author('a', 'b')", "locator")
    with pytest.raises(LocatorError, match="computes a url"):
        parse_func("func:reddit_get_post_url('__last_url__')", "locator")
    with pytest.raises(LocatorError, match="argument"):
        parse_func("func:gitlab_get_project_memeber_role('x', 'y')", "locator")
    assert parse_func("func:gitlab_get_project_memeber_role(__page__, 'byteblaze')", "locator").args == ("__page__", "byteblaze")
    assert "gitlab_get_project_memeber_role" in FUNCS


def test_the_sites_file_says_how_each_site_is_logged_in_and_reset(tmp_path: Path) -> None:
    from webenv.taskfiles.placeholders import SiteMap, SiteState, placeholder_of

    cfg = tmp_path / "sites.json"
    cfg.write_text(json.dumps({
        "__SHOPPING__": {"url": "http://shop.test/", "storage_state": "auth/shopping.json",
                         "reset_url": "http://shop.test:7565/reset", "reset_method": "get"},
        "__GITLAB__": {"url": "http://git.test", "login_command": ["python", "auto_login.py"],
                       "storage_state": "/abs/gitlab.json", "reset_command": ["./reset.sh", "gitlab"]},
        "__MAP__": "http://map.test"}))
    sites = SiteMap({"WEBENV_BENCHMARK_SITES": str(cfg)})
    assert sites.url("__SHOPPING__") == "http://shop.test" and sites.url("__MAP__") == "http://map.test"
    assert sites.state("__SHOPPING__") == SiteState(  # a relative storage_state is the config file's neighbour
        "__SHOPPING__", storage_state=str(tmp_path / "auth" / "shopping.json"),
        reset_url="http://shop.test:7565/reset", reset_method="GET")
    gitlab = sites.state("__GITLAB__")
    assert gitlab and gitlab.resettable and gitlab.login_command == ("python", "auto_login.py")
    assert sites.state("__MAP__") is None and placeholder_of("shopping_admin") == "__SHOPPING_ADMIN__"
    # WebArena-Verified's own config carries the same keys beside its urls
    cfg.write_text(json.dumps({"environments": {"__REDDIT__": {"urls": ["http://r.test"], "reset_url": "http://r.test/reset"}}}))
    assert SiteMap({"WEBENV_BENCHMARK_SITES": str(cfg)}).state("__REDDIT__").reset_url == "http://r.test/reset"
    for bad, field in (({"reset_command": "reset.sh"}, "__SHOPPING__.reset_command"),
                       ({"reset_method": "DELETE", "reset_url": "http://x.test"}, "__SHOPPING__.reset_method"),
                       ({"reset_timeout_s": 0, "reset_url": "http://x.test"}, "__SHOPPING__.reset_timeout_s"),
                       ({"storage_state": ""}, "__SHOPPING__.storage_state")):
        cfg.write_text(json.dumps({"__SHOPPING__": {"url": "http://shop.test", **bad}}))
        with pytest.raises(ValueError, match=field.replace(".", r"\.")):
            SiteMap({"WEBENV_BENCHMARK_SITES": str(cfg)})
