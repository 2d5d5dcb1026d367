"""`webenv-policy build-tiny-model --out DIR`: a tiny Llama-style model + BPE tokenizer, built locally.

No hub downloads: the tokenizer is trained here on text shaped like our prompts (accessibility trees,
the memory prompt, the action grammar) and the model is a randomly initialised LlamaForCausalLM that
`save_pretrained` writes next to it. Optionally a few hundred optimiser steps teach it the shape of an
answer (`Memory: ... Action: click(3)`), so that demos and tests see parsable actions; loading works the
same way for a real model given by WEBENV_POLICY_MODEL_PATH.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

#: Chat template rendering system + user turns as plain text with an assistant cue.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>"]
ROLES = ["link", "button", "textbox", "checkbox", "heading", "combobox", "searchbox", "img", "listitem"]
WORDS = ("home shop cart search login price product review order total add buy next page submit click "
         "enter text field button link name email password city date blue red green item list menu help "
         "account settings checkout apply filter sort results memory progress intention action answer done").split()


def _observation(rng: random.Random) -> tuple[str, list[str]]:
    lines, ids = [], []
    for i in range(rng.randint(3, 10)):
        eid = str(rng.randint(1, 200))
        ids.append(eid)
        lines.append(f'[{eid}] {rng.choice(ROLES)} "{" ".join(rng.sample(WORDS, rng.randint(1, 3)))}"')
        if i == 0:
            lines.append(f'[{eid}] heading "{rng.choice(WORDS)}"')
    return "\n".join(lines), ids


def _answer(rng: random.Random, ids: list[str]) -> str:
    eid = rng.choice(ids)
    action = rng.choice([f"click({eid})", f'fill({eid}, "{rng.choice(WORDS)}")', "scroll(0, 300)",
                         f"click({eid})", 'answer("done")', "go_back()"])
    return (f"Memory: {' '.join(rng.sample(WORDS, 4))}\nProgress: {' '.join(rng.sample(WORDS, 3))}\n"
            f"Intention: {' '.join(rng.sample(WORDS, 3))}\nAction: {action}")


def corpus(n: int, seed: int = 0) -> list[str]:
    """Synthetic texts in the prompt's shape, for the tokenizer and the optional warm-up training."""
    from webenv.agent.prompt import SYSTEM_PROMPT

    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        obs, ids = _observation(rng)
        texts.append(f"<|system|>\n{SYSTEM_PROMPT}\n<|user|>\nInstruction: {' '.join(rng.sample(WORDS, 6))}\n"
                      f"Observation:\n{obs}\n<|assistant|>\n{_answer(rng, ids)}</s>")
    return texts


def build_tokenizer(out: Path, vocab_size: int, texts: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="<pad>", padding_side="left")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def build_tiny_model(out: Path, *, vocab_size: int = 2048, hidden: int = 128, layers: int = 2, heads: int = 2,
                     max_positions: int = 2048, train_steps: int = 0, seed: int = 0) -> Path:
    """Write tokenizer + model to `out` and return it. `train_steps` > 0 teaches the answer format."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    texts = corpus(2000, seed)
    tok = build_tokenizer(out, vocab_size, texts)
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=hidden, intermediate_size=hidden * 4, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=max_positions,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True, torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    if train_steps > 0:
        _train(model, tok, texts, train_steps)
    model.eval()
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out)
    (out / "webenv-tiny.json").write_text(json.dumps({"train_steps": train_steps, "seed": seed}))
    return out


def _train(model, tok, texts: list[str], steps: int, batch: int = 8) -> None:
    """Plain next-token training on the synthetic prompts (seconds on a CPU)."""
    import torch

    optim = torch.optim.AdamW(model.parameters(), lr=3e-3)
    rng = random.Random(1)
    model.train()
    for _ in range(steps):
        enc = tok(rng.sample(texts, batch), return_tensors="pt", padding=True, truncation=True, max_length=384)
        labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
        loss = model(**enc, labels=labels).loss
        loss.backward()
        optim.step()
        optim.zero_grad()

