"""The world model's decoding (webenv.llm's sequential transformers path): FastLlama on its weights gives
transformers' logits, and every greedy variant gives the same completions of world-model prompts."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM
from webenv.llm import GenerationRequest, encode, make_backend
from webenv.llm.fastdecode import FastLlama, supported
from webenv.worldmodel.dataset import build_examples, read_transitions
from webenv.worldmodel.predict import Predictor, Query, backend_config, model_info


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


async def test_greedy_variants_agree(tiny_model: str, transitions_file: Path) -> None:
    backend = make_backend(backend_config("transformers", tiny_model, threads=1))
    await backend.start()
    assert backend.fast is not None  # the world model's CPU path
    records = read_transitions([transitions_file])
    predictor = Predictor(backend, model_info(tiny_model, "transformers"))
    requests = [predictor.request(Query(r.page, r.action_text, instruction=r.instruction, max_new_tokens=40))
                for r in records[:4]]
    tok = backend.tokenizer
    for e in build_examples(records)[:4]:  # a served prompt is the token sequence training saw
        served = encode(tok, GenerationRequest(e.prompt, prepend_bos=True), 10**6)
        assert served == [tok.bos_token_id, *tok(e.prompt, add_special_tokens=False)["input_ids"]]
    outputs = []
    for fast in (backend.fast, None):
        for draft in (0, 10):
            saved, backend.fast, backend.lookup_draft = backend.fast, fast, draft
            outputs.append([g.text for g in await backend.generate(requests)])
            backend.fast = saved
    backend.sequential = False  # the batched generate path decodes the same greedy text
    outputs.append([g.text for g in await backend.generate(requests)])
    await backend.close()
    assert all(o == outputs[0] for o in outputs)
