"""The trainer's rankers: one registry by model kind, each library meeting the one interface the training loop uses."""

from __future__ import annotations

import torch
from webenv.trainer.rankers import RANKERS, Ranker
from webenv.v1 import trainer_pb2


def test_every_registered_ranker_meets_the_interface():
    assert set(RANKERS) == {trainer_pb2.MODEL_KIND_SCORER, trainer_pb2.MODEL_KIND_ENCODER}
    for kind in RANKERS.values():
        assert isinstance(kind.library(), Ranker), kind.name  # collate, scores, optimizers, clip, save, load


def test_a_new_scorer_is_wrapped_saved_and_loaded_through_the_registry(tmp_path):
    kind = RANKERS[trainer_pb2.MODEL_KIND_SCORER]
    torch.manual_seed(1)
    model = kind.new("")
    assert hasattr(kind.wrap(model), "example")  # the acting wrapper featurizes a step into a training example
    lib = kind.library()
    lib.save(model, tmp_path)
    again = lib.load(tmp_path)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values(), strict=True))


def test_the_scorers_features_follow_the_trainer_setting_and_its_checkpoint(tmp_path, monkeypatch):
    """WEBENV_TRAINER_SCORER_FEATURES picks a new scorer's features; a checkpoint keeps them, and one saved before
    the field existed loads as features 1."""
    import json

    from webenv.trainer.config import Settings

    kind = RANKERS[trainer_pb2.MODEL_KIND_SCORER]
    assert Settings().trainer_scorer_features == 2
    monkeypatch.setenv("WEBENV_TRAINER_SCORER_FEATURES", "1")
    assert Settings().trainer_scorer_features == 1
    monkeypatch.setenv("WEBENV_TRAINER_SCORER_FEATURES", "2")
    features = Settings().trainer_scorer_features
    lib = kind.library()
    lib.save(kind.new("", features), tmp_path)
    assert lib.load(tmp_path).config.features == 2
    old = json.loads((tmp_path / "scorer.json").read_text())
    del old["features"]
    (tmp_path / "scorer.json").write_text(json.dumps(old))
    assert lib.load(tmp_path).config.features == 1
    monkeypatch.setenv("WEBENV_TRAINER_SCORER_FEATURES", "3")
    try:
        Settings()
    except ValueError as exc:
        assert "trainer_scorer_features" in str(exc)
    else:
        raise AssertionError("features 3 accepted")
