"""The fast decoding paths give exactly what transformers gives: same logits, same greedy output."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM
from webenv.worldmodel.backends import TransformersBackend, _lookup
from webenv.worldmodel.dataset import build_examples, read_transitions
from webenv.worldmodel.fastdecode import FastLlama, supported


def test_fast_forward_matches_transformers(tiny_model: str) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_model).eval()
    assert supported(model)
    fast = FastLlama(model, 512)
    ids = list(range(5, 205))
    with torch.inference_mode():
        ref = model(input_ids=torch.tensor([ids])).logits[0]
    assert torch.allclose(fast.forward(ids[:120], all_logits=True), ref[:120], atol=1e-4)
    assert torch.allclose(fast.forward(ids[120:121])[0], ref[120], atol=1e-4)
    assert torch.allclose(fast.forward(ids[121:200], all_logits=True), ref[121:200], atol=1e-4)
    fast.crop(150)  # drafts that were rejected are dropped by cropping the cache
    assert torch.allclose(fast.forward(ids[150:160], all_logits=True), ref[150:160], atol=1e-4)


def test_greedy_variants_agree(tiny_model: str, transitions_file: Path) -> None:
    backend = TransformersBackend(tiny_model, threads=1)
    assert backend.fast is not None
    prompts = [e.prompt for e in build_examples(read_transitions([transitions_file]))[:4]]
    outputs = []
    for fast in (backend.fast, None):
        for draft in (0, 10):
            saved, backend.fast, backend.lookup_draft = backend.fast, fast, draft
            outputs.append([g.text for g in backend.generate(prompts, 40, 0.0)])
            backend.fast = saved
    assert all(o == outputs[0] for o in outputs)


def test_lookup_drafts_from_the_last_ngram() -> None:
    assert _lookup([1, 2, 3, 9, 9, 1, 2, 3], 3) == [9, 9, 1]
    assert _lookup([5, 6, 7], 4) == []
