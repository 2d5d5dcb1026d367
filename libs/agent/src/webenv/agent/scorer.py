"""The candidate scorer: a small model that ranks the proposer's actions against the instruction.

Why this model: on 2 CPU cores a policy must train in minutes and act in milliseconds. A generative
model spends its capacity on action syntax and copying strings (the world model's tiny Llama, trained
as a newcomer would, skipped a third of its examples as too long); ranking proposed actions leaves it
only the decision. Each candidate is read as a bag of hashed features (its kind, role and words; the
words of the instruction next to a fill value crossed with the field's label; what was done before;
the page kind) and the step's context as a bag of instruction words and page features; an MLP over
[candidate, context, candidate * context, numeric match features] gives a score, and a softmax over
the page's candidates gives the policy. Nothing is truncated: every candidate of every step is read.

A checkpoint folder holds `scorer.pt` (state dict) and `scorer.json` (hyperparameters); the trainer
adds `checkpoint.json` (provenance).
"""

from __future__ import annotations

import json
import math
import re
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlsplit

import torch
from torch import nn

from .candidates import _QUOTED, _TOKEN, Candidate, Context, instruction_values, parse_memory, words
from .facts import wanted_labels

N_NUMERIC = 15  # numeric features of features 1 and 2; features 5 add two (`n_numeric`)
#: Words too common to carry meaning in instruction x label crosses.
_STOP = frozenset("a an the of on in to and or for with by at from as is are be it its this that your you i me "
                  "my what which who how all any some then first".split())
_PREFIXES = ("find", "what", "tell", "report", "give", "which", "open", "navigate", "bring", "list", "go", "add",
             "put", "order", "buy", "place", "book", "apply", "reply", "rate", "dispute", "log", "sign", "compare")


@dataclass(frozen=True)
class ScorerConfig:
    """Model size; stored with every checkpoint."""

    buckets: int = 1 << 17
    dim: int = 32
    hidden: int = 128
    # 2: features that name no website's markup (`Featurizer`: the instruction's own strings as placeholders, no label
    # words, no URL page kind), the default since their pre-registered trial on the web of builders (validation 30.0%
    # -> 42.7% for the selected checkpoint, bench/results/learning/notes.md); 1: words as themselves (the trainer's
    # WEBENV_TRAINER_SCORER_FEATURES=1). A checkpoint saved without the field is 1 and keeps its features. 5: on
    # trial (bench/ranking.py, and the builders-f5 learning run from branch exp/features5, where it is the default),
    # features 2 and how much of what the instruction asks the memory holds (`asked_attributes`;
    # bench/results/learning/notes.md, "Features 5")
    features: int = 2


def n_numeric(config: ScorerConfig) -> int:
    """Numeric features per candidate under the config's features (the MLP's input follows it)."""
    return N_NUMERIC + (2 if config.features >= 5 else 0)


_NOT_SECOND = "of|for|on|from|off|and|as|in|to|with|at|is|are|was|were|that|which|qq"
_ASKED = re.compile(rf"\bthe ([a-z]+(?: (?!(?:{_NOT_SECOND})\b)[a-z]+)?)(?!\s*qq\b)(?=\s*(?:,|\band\b|\bof\b|"
                    r"\bfor\b|\bon\b|\bfrom\b|\boff\b|\bas well as\b|[?.:;!]|$))")


def asked_attributes(instruction: str) -> list[str]:
    """The attributes an instruction asks for: its "the X" phrases (one or two words) that end at a comma, "and",
    "of", "for", "on", "from", "off", "as well as" or punctuation, outside its quoted strings and not naming one
    (`the article "X"` names a record, not an attribute), in order, once each."""
    text = _QUOTED.sub(" qq ", instruction.lower())
    return [a for a in dict.fromkeys(m.group(1) for m in _ASKED.finditer(text)) if a != "qq"]


def _covered(asked: Sequence[str], labels: Sequence[str]) -> int:
    """How many of the asked attributes some label answers (`facts.wanted_labels`, the phrase as the question)."""
    return sum(1 for a in asked if any(wanted_labels(lb, a) for lb in labels))


def _h(token: str, buckets: int) -> int:
    return zlib.crc32(token.encode()) % buckets


def _stem(w: str) -> str:
    return w[:3]


def entity_words(instruction: str) -> frozenset[str]:
    """Words of the instruction's quoted strings and of its tokens with digits, ``@`` or a hyphen: a record's name, a
    comment to post, a username. They differ from website to website, so features 2 hash them as ``@q`` (the word is
    one of the instruction's own strings) instead of as themselves."""
    found = [m.group(1) for m in _QUOTED.finditer(instruction)] + [m.group(0) for m in _TOKEN.finditer(instruction)]
    return frozenset(w for text in found for w in words(text) if w not in _STOP)


def _page_kind(url: str) -> str:
    path = urlsplit(url).path.strip("/").split("/")
    first = path[0] if path and path[0] else "home"
    return first if not re.search(r"\d", first) else "n"


def _depth_kind(url: str) -> str:
    path = [p for p in urlsplit(url).path.strip("/").split("/") if p]
    return f"{_page_kind(url)}/{len(path)}"


def _landmarks(ctx: Context) -> dict[int, str]:
    """Landmark role (banner, main, navigation, ...) and list membership of every node index."""
    out: dict[int, str] = {}
    stack: list[tuple[int, str]] = []
    for n in ctx.nodes:
        while stack and stack[-1][0] >= n.depth:
            stack.pop()
        roles = [r for _, r in stack]
        land = next((r for r in reversed(roles) if r in ("banner", "main", "navigation", "complementary",
                                                          "contentinfo", "search", "form", "dialog", "table")), "top")
        out[n.index] = land + ("|li" if "listitem" in roles else "")
        stack.append((n.depth, n.role))
    return out


class Featurizer:
    """Turns (context, candidates) into hashed token lists and numeric features."""

    def __init__(self, config: ScorerConfig) -> None:
        self.buckets = config.buckets
        self.version = config.features

    def _lex(self, instruction: str):
        """The word as hashed: itself, or ``@q`` under features 2 when it is one of the instruction's own strings."""
        if self.version < 2:
            return lambda w: w
        ents = entity_words(instruction)
        return lambda w: "@q" if w in ents else w

    def context_tokens(self, ctx: Context) -> list[int]:
        iw = words(ctx.instruction)
        lx = self._lex(ctx.instruction)
        toks = [f"i:{lx(w)}" for w in iw] + [f"s:{min(ctx.step_index, 8)}"]
        if self.version < 2:  # the URL path's first segment: one builder's scheme
            toks.append(f"p:{_depth_kind(ctx.url)}")
        if ctx.last_error:
            toks.append("err")
        if ctx.history:
            toks.append(f"last:{ctx.history[-1].split('(', 1)[0]}")
        return [_h(t, self.buckets) for t in toks]

    def candidate_features(self, ctx: Context, cands: Sequence[Candidate]) -> tuple[list[list[int]], list[list[float]]]:
        instr = ctx.instruction
        iw = words(instr)
        iset = set(iw)
        istems = {_stem(w) for w in iw}
        quoted = {q.lower() for q in re.findall(r'"([^"]+)"', instr)}
        values = instruction_values(instr)
        value_rank = {v: i for i, v in enumerate(values)}
        done = {}
        for a in ctx.history:
            done[a] = done.get(a, 0) + 1
        acted_ids = set()
        for a in ctx.history:
            m = re.match(r"\w+\((\w+)", a)
            if m:
                acted_ids.add(m.group(1))
        last_kind = ctx.history[-1].split("(", 1)[0] if ctx.history else "none"
        page = _page_kind(ctx.url)
        content = [w for w in dict.fromkeys(iw) if w not in _STOP][:24]
        # how much of the instruction the page already shows: its numbers and words in the URL, a quoted
        # string as the page heading (the signals that a navigation task is done)
        url_words = set(words(urlsplit(ctx.url).path + " " + urlsplit(ctx.url).query.replace("_", " ")))
        numbers = [w for w in iw if w.isdigit()]
        url_numbers = sum(1 for w in numbers if w in url_words) / len(numbers) if numbers else 0.0
        url_content = sum(1 for w in content if w in url_words) / len(content) if content else 0.0
        head = next((n.name.lower() for n in ctx.nodes if n.role == "heading" and n.name), "")
        head_quoted = 1.0 if head and head in quoted else 0.0
        url_bucket = f"{round(url_numbers * 2)}{round(url_content * 4)}{int(head_quoted)}"
        lands = _landmarks(ctx)
        n_nodes = max(len(ctx.nodes), 1)
        prefix = [w for w in iw[:8] if w in _PREFIXES][:3] or ["other"]
        lx = self._lex(instr)
        memory_labels = [k for k, _ in parse_memory(ctx.memory)]  # what a report can name (and features 5 count)
        asked = asked_attributes(instr) if self.version >= 5 else []
        missing = 1.0 - _covered(asked, memory_labels) / len(asked) if asked else 0.0
        lexical = self.version < 2  # a label's own words, crossed with the instruction's, and the URL's page kind
        tokens: list[list[int]] = []
        nums: list[list[float]] = []
        for c in cands:
            node = c.node
            role = node.role if node else "-"
            label = node.name if node else c.label
            lw = words(label)[:12]
            t = [f"k:{c.kind}", f"r:{role}", f"kr:{c.kind}|{role}", f"lk:{last_kind}|{c.kind}",
                 f"s:{min(ctx.step_index, 8)}|{c.kind}"]
            if lexical:
                t.append(f"kp:{c.kind}|{page}")
            if node is not None:
                land = lands.get(node.index, "top")
                t += [f"land:{land}|{c.kind}", f"land:{land}|{role}"]
            if lexical:
                t += [f"l:{w}" for w in lw]
            t += [f"lm:{lx(w)}" for w in lw if w in iset]
            if c.kind != "answer" and lexical:
                t += [f"il:{w}|{x}" for w in content for x in lw[:4] if x not in _STOP]
            t += [f"pre:{p}|{c.kind}" for p in prefix]
            if ctx.last_error:
                t.append(f"err|{c.kind}")
            overlap = sum(1 for w in lw if w in iset) / len(lw) if lw else 0.0
            exact_q = 1.0 if label and label.lower() in quoted else 0.0
            value_q = value_pos = already = opt_overlap = n_report = 0.0
            if c.kind == "fill":
                vw = words(c.value)[:8]
                t += [f"v:{lx(w)}" for w in vw]
                shape = ("q" if c.value.lower() in quoted else "") + ("@" if "@" in c.value else "") + \
                        ("d" if c.value.isdigit() else ("n" if re.search(r"\d", c.value) else "")) + \
                        ("c" if c.value[:1].isupper() else "") + str(min(len(c.value.split()), 4))
                t.append(f"vs:{shape}")
                idx = instr.find(c.value)
                before = words(instr[max(0, idx - 40):idx])[-3:] if idx >= 0 else []
                after = words(instr[idx + len(c.value):idx + len(c.value) + 25])[:2] if idx >= 0 else []
                for b in before + [f">{a}" for a in after]:
                    t.append(f"xv:{lx(b)}|{shape}")
                    for w in lw[:4]:
                        t.append(f"x:{lx(b)}|{lx(w)}")
                for w in lw[:4]:
                    t.append(f"xs:{shape}|{lx(w)}")
                value_q = 1.0 if c.value.lower() in quoted else 0.0
                value_pos = value_rank.get(c.value, len(values)) / max(len(values), 1)
                already = 1.0 if node is not None and node.value == c.value else 0.0
                if node is not None and node.value:
                    t.append("hasvalue")
            elif c.kind == "select":
                ow = words(c.value)[:6]
                t += [f"o:{lx(w)}" for w in ow]
                opt_overlap = sum(1 for w in ow if _stem(w) in istems) / len(ow) if ow else 0.0
                for w in ow:
                    for b in iw:
                        if _stem(b) == _stem(w):
                            t.append(f"om:{lx(w)}")
            elif c.kind == "answer":
                t += [f"a:{c.answer_type}", f"au:{c.answer_type}|{url_bucket}", f"al:{c.answer_type}|{last_kind}"]
                if lexical:
                    t.append(f"ap:{c.answer_type}|{page}")
                t += [f"ai:{c.answer_type}|{lx(w)}" for w in iw[:40]]
                if c.answer_type == "report":
                    n_report = len(c.value.split("; ")) / 5.0
                    labels = {k.lower() for k in memory_labels}
                    t += [f"ar:{lx(w)}" for w in iw if w in labels]
            if c.text in done:
                t.append(f"done:{c.kind}")
            if node is not None and node.element_id in acted_ids:
                t.append(f"acted:{c.kind}")
            tokens.append([_h(x, self.buckets) for x in t])
            nums.append([
                overlap, exact_q, value_q, value_pos, already, opt_overlap, n_report,
                min(done.get(c.text, 0), 3) / 3.0, 1.0 if node is not None and node.element_id in acted_ids else 0.0,
                (node.index / n_nodes) if node is not None else 0.0, min(ctx.step_index, 20) / 20.0,
                1.0 if c.kind == "answer" and c.answer_type == "report" and c.value else 0.0,
                url_numbers if c.kind == "answer" else 0.0, url_content if c.kind == "answer" else 0.0,
                head_quoted if c.kind == "answer" else 0.0,
            ] + ([missing, _covered(asked, [part.split(": ", 1)[0] for part in c.value.split("; ")]) / len(asked)
                  if asked and c.kind == "answer" and c.answer_type == "report" else 0.0]
                 if self.version >= 5 else []))
        return tokens, nums


class ScorerModel(nn.Module):
    """Scores candidates: MLP([cand, ctx, cand * ctx, numeric])."""

    def __init__(self, config: ScorerConfig) -> None:
        super().__init__()
        self.config = config
        # sparse gradients: a step touches a few thousand of the 2 x 131k rows, not all of them
        self.cand = nn.EmbeddingBag(config.buckets, config.dim, mode="mean", sparse=True)
        self.ctx = nn.EmbeddingBag(config.buckets, config.dim, mode="mean", sparse=True)
        nn.init.normal_(self.cand.weight, std=0.1)
        nn.init.normal_(self.ctx.weight, std=0.1)
        self.mlp = nn.Sequential(
            nn.Linear(3 * config.dim + n_numeric(config), config.hidden), nn.ReLU(),
            nn.Linear(config.hidden, config.hidden), nn.ReLU(), nn.Linear(config.hidden, 1),
        )

    def forward(self, cand_tokens: torch.Tensor, cand_offsets: torch.Tensor, nums: torch.Tensor,
                ctx_tokens: torch.Tensor, ctx_offsets: torch.Tensor, step_of_cand: torch.Tensor) -> torch.Tensor:
        """Scores of all candidates of a batch of steps (flat; ``step_of_cand`` maps each to its step)."""
        c = self.cand(cand_tokens, cand_offsets)
        s = self.ctx(ctx_tokens, ctx_offsets)[step_of_cand]
        return self.mlp(torch.cat([c, s, c * s, nums], dim=1)).squeeze(1)


@dataclass
class StepExample:
    """One step ready for the model: features of its candidates, the target index and a weight."""

    cand_tokens: list[list[int]]
    nums: list[list[float]]
    ctx_tokens: list[int]
    target: int = -1
    weight: float = 1.0


def collate(steps: Sequence[StepExample]) -> dict[str, torch.Tensor]:
    """Flat tensors for a batch of steps."""
    cand_flat: list[int] = []
    cand_off: list[int] = []
    nums: list[list[float]] = []
    step_of: list[int] = []
    ctx_flat: list[int] = []
    ctx_off: list[int] = []
    starts: list[int] = []
    for i, st in enumerate(steps):
        starts.append(len(step_of))
        ctx_off.append(len(ctx_flat))
        ctx_flat.extend(st.ctx_tokens or [0])
        for toks, num in zip(st.cand_tokens, st.nums, strict=True):
            cand_off.append(len(cand_flat))
            cand_flat.extend(toks or [0])
            nums.append(num)
            step_of.append(i)
    return {
        "cand_tokens": torch.tensor(cand_flat, dtype=torch.long), "cand_offsets": torch.tensor(cand_off, dtype=torch.long),
        "nums": torch.tensor(nums, dtype=torch.float32), "ctx_tokens": torch.tensor(ctx_flat, dtype=torch.long),
        "ctx_offsets": torch.tensor(ctx_off, dtype=torch.long), "step_of_cand": torch.tensor(step_of, dtype=torch.long),
        "starts": torch.tensor(starts, dtype=torch.long),
        "targets": torch.tensor([st.target for st in steps], dtype=torch.long),
        "weights": torch.tensor([st.weight for st in steps], dtype=torch.float32),
    }


def step_log_probs(scores: torch.Tensor, step_of_cand: torch.Tensor, n_steps: int) -> torch.Tensor:
    """Log-softmax of the flat scores within each step."""
    neg = torch.full((n_steps,), -math.inf)
    maxes = neg.scatter_reduce(0, step_of_cand, scores.detach(), reduce="amax")
    shifted = scores - maxes[step_of_cand]
    sums = torch.zeros(n_steps).index_add(0, step_of_cand, shifted.exp())
    return shifted - sums.log()[step_of_cand]


def scores(model: ScorerModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Flat scores of a collated batch (the training loop's one call into a ranker)."""
    return model(batch["cand_tokens"], batch["cand_offsets"], batch["nums"], batch["ctx_tokens"],
                 batch["ctx_offsets"], batch["step_of_cand"])


def clip_parameters(model: ScorerModel) -> list[nn.Parameter]:
    """Dense parameters whose gradient norm the training loop clips (sparse embeddings are not clipped)."""
    return list(model.mlp.parameters())


def optimizers(model: ScorerModel, lr: float) -> list[torch.optim.Optimizer]:
    """SparseAdam for the hashed embeddings (5x the dense learning rate), Adam for the MLP."""
    return [torch.optim.SparseAdam([model.cand.weight, model.ctx.weight], lr=lr * 5),
            torch.optim.Adam(model.mlp.parameters(), lr=lr)]


def save(model: ScorerModel, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), folder / "scorer.pt")
    (folder / "scorer.json").write_text(json.dumps(asdict(model.config)))


def load(folder: Path) -> ScorerModel:
    config = ScorerConfig(**{"features": 1, **json.loads((folder / "scorer.json").read_text())})
    model = ScorerModel(config)
    model.load_state_dict(torch.load(folder / "scorer.pt", map_location="cpu", weights_only=True))
    model.eval()
    return model


class Scorer:
    """A loaded model with its featurizer: scores one step's candidates."""

    def __init__(self, model: ScorerModel) -> None:
        self.model = model
        self.featurizer = Featurizer(model.config)

    def example(self, ctx: Context, cands: Sequence[Candidate], target: int = -1, weight: float = 1.0) -> StepExample:
        toks, nums = self.featurizer.candidate_features(ctx, cands)
        return StepExample(toks, nums, self.featurizer.context_tokens(ctx), target, weight)

    @torch.no_grad()
    def log_probs(self, ctx: Context, cands: Sequence[Candidate]) -> list[float]:
        batch = collate([self.example(ctx, cands)])
        return step_log_probs(scores(self.model, batch), batch["step_of_cand"], 1).tolist()
