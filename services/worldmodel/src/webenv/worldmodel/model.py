"""The CPU-sized world model: a tiny Llama built from a config (no pretrained weights exist here)."""

from __future__ import annotations

from dataclasses import dataclass

from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast


@dataclass(frozen=True)
class TinySize:
    """Model dimensions; `tiny()` for tests, `small()` for the 15-minute CPU run."""

    hidden: int = 128
    layers: int = 4
    heads: int = 4
    intermediate: int = 384
    max_positions: int = 1536

    @classmethod
    def tiny(cls) -> TinySize:
        return cls(hidden=32, layers=1, heads=2, intermediate=64, max_positions=1536)


def build_model(tokenizer: PreTrainedTokenizerFast, size: TinySize = TinySize()) -> LlamaForCausalLM:
    """A freshly initialised causal LM sized for the tokenizer."""
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=size.hidden, num_hidden_layers=size.layers,
        num_attention_heads=size.heads, num_key_value_heads=size.heads, intermediate_size=size.intermediate,
        max_position_embeddings=size.max_positions, tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id)
    return LlamaForCausalLM(config)


def parameter_count(model: LlamaForCausalLM) -> int:
    return sum(p.numel() for p in model.parameters())
