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
