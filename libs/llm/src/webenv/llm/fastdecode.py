"""A lean forward pass for small Llama models on CPU, over the very weights transformers loaded.

For a model of a million parameters (the world model, the tiny test models) the arithmetic of one decoding step
takes microseconds; what costs is the per-call machinery of the generic implementation (masks, cache objects,
hooks): ~5-10 ms per token here.
This module re-states the Llama computation (RMSNorm, rotary embeddings, causal attention, SwiGLU) in a few
tensor ops with a preallocated KV cache, so a decoding step costs what the model costs. The transformers backend
uses it for sequential decoding on the CPU, only for plain Llama configs (no rope scaling, no biases); the tests
check it against transformers' logits.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def supported(model) -> bool:
    cfg = model.config
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    return (getattr(cfg, "model_type", "") == "llama" and rope.get("rope_type", "default") == "default"
            and not getattr(cfg, "attention_bias", False) and not getattr(cfg, "mlp_bias", False)
            and getattr(cfg, "hidden_act", "silu") == "silu")


def _rope_theta(cfg) -> float:
    params = getattr(cfg, "rope_parameters", None) or {}
    return float(params.get("rope_theta", getattr(cfg, "rope_theta", 10000.0)))


class FastLlama:
    """Incremental decoding with a static cache; `forward(tokens)` appends them and returns their logits."""

    def __init__(self, model, max_len: int) -> None:
        cfg = model.config
        self.m = model.model
        self.head = model.get_output_embeddings()
        self.n_heads = cfg.num_attention_heads
        self.n_kv = getattr(cfg, "num_key_value_heads", None) or self.n_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_heads
        self.eps = cfg.rms_norm_eps
        self.max_len = max_len
        inv = 1.0 / (_rope_theta(cfg) ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim))
        freqs = torch.outer(torch.arange(max_len, dtype=torch.float32), inv)
        emb = torch.cat([freqs, freqs], dim=-1)
        self.cos, self.sin = emb.cos(), emb.sin()
        layers = len(self.m.layers)
        self.k = torch.zeros(layers, self.n_kv, max_len, self.head_dim)
        self.v = torch.zeros(layers, self.n_kv, max_len, self.head_dim)
        self.length = 0

    def reset(self) -> None:
        self.length = 0

    def crop(self, length: int) -> None:
        self.length = length

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin

    @torch.inference_mode()
    def forward(self, tokens: list[int], all_logits: bool = False) -> torch.Tensor:
        """Logits of the last token (or of every token) after appending `tokens` to the cache."""
        n, start = len(tokens), self.length
        if start + n > self.max_len:
            raise ValueError(f"context of {start + n} tokens exceeds {self.max_len}")
        x = self.m.embed_tokens(torch.tensor(tokens))  # (n, hidden)
        cos, sin = self.cos[start : start + n], self.sin[start : start + n]
        end = start + n
        mask = None
        if n > 1:
            mask = torch.ones(n, end, dtype=torch.bool).tril(diagonal=start)
        rep = self.n_heads // self.n_kv
        for i, layer in enumerate(self.m.layers):
            att = layer.self_attn
            h = self._norm(x, layer.input_layernorm.weight)
            q = att.q_proj(h).view(n, self.n_heads, self.head_dim).transpose(0, 1)
            k = att.k_proj(h).view(n, self.n_kv, self.head_dim).transpose(0, 1)
            v = att.v_proj(h).view(n, self.n_kv, self.head_dim).transpose(0, 1)
            q, k = self._rotate(q, cos, sin), self._rotate(k, cos, sin)
            self.k[i, :, start:end] = k
            self.v[i, :, start:end] = v
            keys, values = self.k[i, :, :end], self.v[i, :, :end]
            if rep > 1:
                keys, values = keys.repeat_interleave(rep, 0), values.repeat_interleave(rep, 0)
            o = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=1 / math.sqrt(self.head_dim))
            x = x + att.o_proj(o.transpose(0, 1).reshape(n, -1))
            mlp = layer.mlp
            h = self._norm(x, layer.post_attention_layernorm.weight)
            x = x + mlp.down_proj(F.silu(mlp.gate_proj(h)) * mlp.up_proj(h))
        self.length = end
        x = self._norm(x if all_logits else x[-1:], self.m.norm.weight)
        return self.head(x)
