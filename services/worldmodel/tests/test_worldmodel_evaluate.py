"""The evaluation's metrics and baselines, and what a model directory may hold: no page of a held-out website."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from webenv.worldmodel.dataset import read_transitions
from webenv.worldmodel.evaluate import bootstrap_ci, diff_f1, evaluate, hold_out_family, to_markdown
from webenv.worldmodel.predict import load_world_model

HEADER = "[1] banner\n[2] link \"Home\"\n"
FOOTER = "[9] contentinfo \"(c) Shop\"\n"


def test_diff_f1_scores_only_the_change() -> None:
    cur = HEADER + "[5] heading \"Cart\"\n[6] text \"empty\"\n" + FOOTER
    real = HEADER + "[5] heading \"Cart\"\n[7] text \"1 item\"\n" + FOOTER
    assert diff_f1(cur, real, real) == 1.0
    assert diff_f1(cur, cur, real) == 0.0  # keeping the page predicts no change: none of the change is right
    assert diff_f1(cur, cur, cur) == 1.0  # no change predicted, none happened
    half = HEADER + "[5] heading \"Cart\"\n" + FOOTER  # the removal right, the addition missing
    assert diff_f1(cur, half, real) == pytest.approx(2 / 3)


def test_bootstrap_interval_resamples_episodes() -> None:
    lo, hi = bootstrap_ci([1.0] * 10 + [0.0] * 10, ["a"] * 10 + ["b"] * 10)
    assert lo == 0.0 and hi == 1.0  # two episodes: the interval spans what either alone would give
    lo, hi = bootstrap_ci([0.5] * 40, [str(i) for i in range(40)])
    assert lo == hi == 0.5
    lo, hi = bootstrap_ci([float(i % 2) for i in range(200)], [str(i) for i in range(200)])
    assert 0.4 < lo < 0.5 < hi < 0.6


async def test_evaluation_scores_baselines_shares_and_intervals(transitions_file: Path, tiny_model: str) -> None:
    records = read_transitions([transitions_file])
    predictor = await load_world_model("transformers", tiny_model, threads=1, max_new_tokens=48)
    try:
        res = await evaluate(records, predictor, rollout_episodes=1, rollout_steps=3)
    finally:
        await predictor.llm.close()
    ss = res["single_step"]
    assert list(ss["overall"]) == ["copy_state", "lookup", "rules_only", "retrieval_only", "model"]
    for s in ss["overall"].values():
        assert s["line_f1_ci95"][0] <= s["line_f1"] <= s["line_f1_ci95"][1]
        assert s["diff_f1_ci95"][0] <= s["diff_f1"] <= s["diff_f1_ci95"][1]
    # copy-state never predicts a change, so its diff F1 on the steps whose page changed is 0
    assert ss["overall"]["copy_state"]["diff_f1_changed"] == 0.0 and ss["overall"]["copy_state"]["n_changed"] > 0
    assert ss["overall"]["model"]["diff_f1_changed"] > ss["overall"]["rules_only"]["diff_f1_changed"]
    shares = {k: v["share"] for k, v in ss["by_decider"].items()}
    assert set(shares) <= {"rule", "analogy", "lm"} and sum(shares.values()) == pytest.approx(1.0, abs=1e-3)
    assert sum(v["n"] for v in ss["by_decider"].values()) == ss["transitions"]
    md = to_markdown(res)
    assert "diff F1" in md and "retrieval_only" in md and "| share |" in md
    # the report says whether the held-out websites' families were trained on (MiniWoB++ pages were not)
    assert res["unseen_families"] == [] and "same families" in md
    assert "families never trained on: miniwob)" in to_markdown({**res, "unseen_families": ["miniwob"]})


async def test_leave_one_family_out_indexes_no_site_of_the_family(transitions_file: Path, tiny_model: str) -> None:
    records = read_transitions([transitions_file])
    predictor = await load_world_model("transformers", tiny_model, mode="analogy")
    with pytest.raises(ValueError, match="no transitions"):
        hold_out_family(records, predictor, "travel")
    held, v = hold_out_family(records, predictor, "shop")
    assert v is not None and v.mode == "analogy" and not v.page_actions.index  # the only family is held out
    assert {r.split for r in held} == {"test"} and len(held) == len(records)
    res = await evaluate(records, predictor, rollout_episodes=1, rollout_steps=3, held_out_family="shop")
    assert res["held_out_family"] == "shop" and res["test_sites"] == 2 and res["train_sites"] == 0
    # nothing indexed to go by: no edit, no composed page; pages are kept or recalled from the session
    assert set(res["single_step"]["by_source"]) <= {"rule", "recall", "keep"}
    assert "Leave-one-family-out (shop)" in to_markdown(res)


def test_model_directory_holds_no_page_of_a_held_out_website(tiny_model: str, transitions_file: Path) -> None:
    records = read_transitions([transitions_file])
    held_out = {r.site for r in records if r.split == "test"}
    assert held_out == {"shop-0001.web.test"}
    pages = {s for r in records if r.site in held_out for s in (r.state, r.next_state)}
    train_pages = {s for r in records if r.site not in held_out for s in (r.state, r.next_state)}
    own = pages - train_pages  # pages only the held-out website shows
    assert own
    for f in Path(tiny_model).iterdir():
        text = f.read_text(errors="ignore")
        for host in held_out:
            assert host.split(".")[0] not in text, f.name
        for line in (f.read_text(errors="ignore").splitlines() if f.suffix == ".jsonl" else []):
            row = json.loads(line)
            assert row.get("site") not in held_out and row.get("state") not in own, f.name
