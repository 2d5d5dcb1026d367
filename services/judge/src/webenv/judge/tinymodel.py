"""Build a tiny Llama-style judge model locally (no hub downloads), for tests, benchmarks and demos.

A byte-level BPE tokenizer is trained on judge-prompt-like text, and a randomly initialised tiny
Llama (a few hundred thousand parameters) is saved next to it with ``save_pretrained``. Its judgement
is meaningless; it exercises the real loading, prompting, generation and parsing paths.
"""

from __future__ import annotations

from pathlib import Path

_CORPUS = [
    "You are a strict judge of a web agent's episode. Decide whether the FACT is proven by the EVIDENCE.",
    "If the evidence does not clearly prove the fact, it FAILS. Do not trust the agent's answer alone.",
    "TASK: FACT GROUP: OTHER FACTS IN THE GROUP: FACT: GUIDANCE: AGENT'S FINAL ANSWER: (no answer)",
    "EVIDENCE (keypoint observations, oldest first): --- step 3 | url: https://shop-0042.web.test/products",
    "Reply with exactly two lines: VERDICT: HOLDS or VERDICT: FAILS REASON: one short sentence",
    "VERDICT: HOLDS\nREASON: the final page shows the order confirmation with the product.",
    "VERDICT: FAILS\nREASON: the evidence does not show the price.",
    "button link heading textbox checkbox main navigation search results cart checkout price $49.99 in stock",
    "The quick brown fox jumps over the lazy dog. 0123456789 <div class=\"price\">Total</div>",
]


def build_tiny_model(out: str | Path, seed: int = 0, vocab_size: int = 512, hidden: int = 64, layers: int = 2) -> Path:
    """Write a tokenizer and a tiny random LlamaForCausalLM to ``out``; returns the folder."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    fast.save_pretrained(out)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(fast), hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
        bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(out)
    return out
