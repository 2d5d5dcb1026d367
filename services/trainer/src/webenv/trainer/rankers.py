"""The candidate rankers the trainer trains, by model kind, in one registry with one named interface.

A ranker's library is what train_scorer's loop and a job need of it (:class:`Ranker`): batching steps, scoring
candidates, its optimisers, the parameters to clip, saving and loading a model. webenv-agent's `webenv.agent.scorer`
(the hashed scorer, MODEL_KIND_SCORER) and `webenv.agent.encoder` (the fine-tuned encoder, MODEL_KIND_ENCODER) are
such libraries as they are. A registry entry (:class:`RankerKind`) adds how a job makes a new model and the acting
wrapper whose `example` turns a step into a training example; the library is imported when a job first needs it
(torch is most of the import). A new ranker is one library in the sdk (the policy service serves it too) and one
entry here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from webenv.v1 import trainer_pb2

if TYPE_CHECKING:
    import torch


@runtime_checkable
class Ranker(Protocol):
    """What the training loop (train_scorer.train) and a job need of a ranker's library."""

    def collate(self, steps: Sequence[Any]) -> dict: ...

    def scores(self, model: torch.nn.Module, batch: dict) -> torch.Tensor: ...

    def optimizers(self, model: torch.nn.Module, lr: float) -> list[torch.optim.Optimizer]: ...

    def clip_parameters(self, model: torch.nn.Module) -> list[torch.nn.Parameter]: ...

    def save(self, model: torch.nn.Module, folder: Path) -> None: ...

    def load(self, folder: Path) -> torch.nn.Module: ...


@dataclass(frozen=True)
class RankerKind:
    """One registered ranker: its name, its library, a new model (from the base model path, for those that have
    one, and the hashed scorer's features: ``new(base, features)``) and the acting wrapper of a model (its `example`
    featurizes a step)."""

    name: str
    library: Callable[[], Ranker]
    new: Callable[[str, int], torch.nn.Module]
    wrap: Callable[[torch.nn.Module], Any]


def _scorer() -> Ranker:
    from webenv.agent import scorer

    return scorer


def _encoder() -> Ranker:
    from webenv.agent import encoder

    return encoder


def _new_scorer(base: str, features: int = 1) -> torch.nn.Module:
    from webenv.agent import scorer

    return scorer.ScorerModel(scorer.ScorerConfig(features=features))


def _new_encoder(base: str, features: int = 1) -> torch.nn.Module:
    from webenv.agent import encoder

    return encoder.new(encoder.EncoderConfig(), base)


def _wrap_scorer(model: torch.nn.Module) -> Any:
    from webenv.agent import scorer

    return scorer.Scorer(model)


def _wrap_encoder(model: torch.nn.Module) -> Any:
    from webenv.agent import encoder

    return encoder.Encoder(model)


#: The rankers by model kind (both train in train_scorer's loop; MODEL_KIND_CAUSAL_LM is train_lm's).
RANKERS: dict[int, RankerKind] = {
    trainer_pb2.MODEL_KIND_SCORER: RankerKind("scorer", _scorer, _new_scorer, _wrap_scorer),
    trainer_pb2.MODEL_KIND_ENCODER: RankerKind("encoder", _encoder, _new_encoder, _wrap_encoder),
}
