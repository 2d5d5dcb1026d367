"""Training a few steps lowers the loss; the model directory holds everything served; the checkpoint resumes."""

from __future__ import annotations

import json
from pathlib import Path

from transformers import AutoModelForCausalLM, AutoTokenizer
from webenv.llm import make_backend
from webenv.worldmodel.predict import backend_config
from webenv.worldmodel.train import TrainConfig, TrainResult, train


def test_loss_goes_down_and_model_reloads(tiny_training: TrainResult) -> None:
    assert tiny_training.steps == 40
    assert tiny_training.eval_loss < tiny_training.initial_eval_loss * 0.8
    model_dir = Path(tiny_training.model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    assert sum(p.numel() for p in model.parameters()) == tiny_training.parameters
    assert tok.decode(tok("\t\t[12] link \"é\"")["input_ids"]) == "\t\t[12] link \"é\""
    meta = json.loads((model_dir / "worldmodel.json").read_text())
    assert meta["formats"] == ["axtree"] and meta["max_lines"] == 24 and meta["config"]["max_steps"] == 40
    # what serving needs besides the weights: training websites' actions and pages, and where sessions may start
    for name in ("page_actions.jsonl", "exemplars.jsonl", "start_states.jsonl", "train.json"):
        assert (model_dir / name).stat().st_size > 0, name
    sites = {json.loads(line)["site"] for name in ("page_actions.jsonl", "exemplars.jsonl")
             for line in (model_dir / name).read_text().splitlines()}
    assert sites == {"shop-0000.web.test"}  # never a held-out website
    backend = make_backend(backend_config("transformers", str(model_dir)))
    backend.load()
    assert backend.parameters == tiny_training.parameters
    curve = [json.loads(line) for line in (model_dir.parent / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in curve if "loss" in r][:3] == [1, 2, 3]
    assert curve[0]["step"] == 0 and "eval_loss" in curve[0]
    assert any("eval_loss" in r for r in curve)


def test_resume_continues_from_checkpoint(transitions_file: Path, tmp_path: Path) -> None:
    cfg = TrainConfig(data=[str(transitions_file)], out=str(tmp_path), size="tiny", vocab_size=400, batch_size=4,
                      max_len=1536, max_steps=4, eval_every=2, warmup=1)
    first = train(cfg, progress=False)
    assert first.steps == 4
    cfg.max_steps, cfg.resume = 6, True
    second = train(cfg, progress=False)
    assert second.steps == 6
    steps = [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()
             if "loss" in json.loads(line)]
    assert steps == [1, 2, 3, 4, 5, 6]
