"""The learning benchmark's post-hoc tools on real checkpoint folders: the average of a run's RL iterates
(bench/learning_average.py) is a checkpoint of their mean that the scorer loads, written once; bad options of it and
of the replay screen (bench/learning_replay.py) exit 2 naming the option, before any stack starts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from webenv.agent import checkpoints, scorer
from webenv.v1 import trainer_pb2

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import learning_average, learning_replay  # bench/ is a folder of scripts at the root


def publish(root: Path, tmp: Path, version: int) -> scorer.ScorerModel:
    torch.manual_seed(version)
    model = scorer.ScorerModel(scorer.ScorerConfig(buckets=64, dim=4, hidden=8))
    scorer.save(model, tmp / f"staging-{version}")
    checkpoints.publish(tmp / f"staging-{version}", root, trainer_pb2.Checkpoint(
        name="agent", version=version, ref=f"agent@{version}", model=trainer_pb2.MODEL_KIND_SCORER,
        labels={"loop": f"rl-{version - 1}"}))
    return model


def test_the_average_of_iterates_is_a_checkpoint_of_their_mean_written_once(tmp_path):
    root = tmp_path / "checkpoints"
    models = [publish(root, tmp_path, v) for v in (1, 2, 3)]
    ref = learning_average.average(root, "agent", [2, 3])
    assert ref == "agent@4"
    assert learning_average.average(root, "agent", [2, 3]) == "agent@4"  # asked again: the same checkpoint
    assert checkpoints.versions(root, "agent") == [1, 2, 3, 4]
    meta = checkpoints.read_meta(checkpoints.resolve(root, ref))
    assert meta.parent == "agent@3" and meta.labels["average"] == "average of agent@2,agent@3"
    loaded = scorer.load(checkpoints.resolve(root, ref)).state_dict()
    for key, tensor in loaded.items():
        mean = (models[1].state_dict()[key] + models[2].state_dict()[key]) / 2
        assert torch.allclose(tensor, mean), key


def test_bad_members_exit_2_naming_the_option(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "learning.json").write_text(json.dumps({
        "config": {"name": "agent"},
        "checkpoints": [{"ref": "agent@1", "label": "bc"}, {"ref": "agent@2", "label": "rl-1"},
                        {"ref": "agent@3", "label": "rl-2"}]}))
    for members in ("2", "1,2", "2,x"):
        code = learning_average.main(["--data-dir", str(tmp_path), "--run", str(run), "--members", members,
                                      "--out", str(tmp_path / "out")])
        assert code == 2
        assert "--members" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("variant", ["x:kl_coef=a", "x:beta=1", "x:kl_ref=bc"])
def test_a_bad_replay_variant_exits_2_naming_it(tmp_path, capsys, variant):
    code = learning_replay.main(["--data-dir", str(tmp_path), "--run", str(tmp_path), "--out",
                                 str(tmp_path / "o.json"), "--variant", variant])
    assert code == 2
    assert variant in capsys.readouterr().err


def test_replay_variants_read_their_options():
    assert learning_replay.parse_variant("recipe") == ("recipe", {})
    assert learning_replay.parse_variant("k:kl_coef=1,kl_ref=parent,rl_epochs=8") == (
        "k", {"kl_coef": 1.0, "kl_ref": "parent", "rl_epochs": 8})
