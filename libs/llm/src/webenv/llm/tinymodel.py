"""A tiny Llama- or Qwen3-architecture causal LM and byte-level BPE tokenizer, built locally (no hub downloads): tests and demos.

The tokenizer is trained here on the given texts (a service passes text shaped like its prompts: the policy its
memory prompts, the judge its judge prompts), with a chat template rendering the turns as ``<|role|>`` lines and an
assistant cue; the model is a randomly initialised LlamaForCausalLM (``arch="qwen3"``: Qwen3ForCausalLM, the
architecture of the Qwen3 family, q/k norms and all) that ``save_pretrained`` writes next to it.
Optionally ``train_steps`` of next-token training on the same texts teach it their shape (the policy's answer
format), so demos see parsable output. Every backend loads the folder the way it loads a real model.

A caller may give its own ``chat_template`` with the special tokens it renders and its end-of-turn ``eos_token``:
TRL's GRPO example passes TRL's Qwen3 template (the tool-calling one TRL parses tool calls from) with Qwen's
``<|im_start|>``/``<|im_end|>``/``<tool_call>`` tokens (a random model this small does not learn to call tools:
that needs a real model, the example's GPU form).

``build_tiny_vlm`` writes a Qwen2-VL-architecture vision-language model the same way: this tokenizer (trained here,
with Qwen's chat and vision special tokens and a chat template rendering image parts as Qwen2-VL's placeholder), a
Qwen2-VL image processor capped at a few image tokens per screenshot, and a randomly initialised
Qwen2VLForConditionalGeneration (a one-block vision tower, a two-layer text model); webenv.llm.vision serves and
trains it.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path

#: Chat template rendering every turn as plain text, with an assistant cue.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>"]
#: Texts used when a caller gives none.
DEFAULT_TEXTS = (
    "<|system|>\nYou are a helpful assistant.\n<|user|>\nSay something short.\n<|assistant|>\nSomething short.</s>",
    "The quick brown fox jumps over the lazy dog. 0123456789 [1] link \"home\" [2] button \"search\"",
    "Reply with exactly one line. VERDICT: HOLDS REASON: the page shows it. Action: click(3)",
)


def build_tokenizer(out: Path, vocab_size: int, texts: Sequence[str], chat_template: str = CHAT_TEMPLATE,
                    special_tokens: Sequence[str] = (), eos_token: str = "</s>"):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = SPECIALS + [t for t in special_tokens if t not in SPECIALS]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(list(texts), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token=eos_token, unk_token="<unk>",
                                   pad_token="<pad>", padding_side="left")
    fast.chat_template = chat_template
    fast.save_pretrained(out)
    return fast


def build_tiny_model(out: str | Path, texts: Sequence[str] = DEFAULT_TEXTS, *, vocab_size: int = 2048,
                     hidden: int = 128, layers: int = 2, heads: int = 2, max_positions: int = 2048,
                     train_steps: int = 0, seed: int = 0, chat_template: str = CHAT_TEMPLATE,
                     special_tokens: Sequence[str] = (), eos_token: str = "</s>", arch: str = "llama") -> Path:
    """Write tokenizer + model to ``out`` and return it. ``train_steps`` > 0 trains on ``texts``; ``chat_template``,
    ``special_tokens`` (kept whole by the tokenizer) and ``eos_token`` replace the plain-text chat format; ``arch``
    is llama or qwen3."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    tok = build_tokenizer(out, vocab_size, texts, chat_template, special_tokens, eos_token)
    if arch not in ("llama", "qwen3"):
        raise ValueError(f"arch: llama or qwen3, got {arch!r}")
    config_cls, model_cls = (Qwen3Config, Qwen3ForCausalLM) if arch == "qwen3" else (LlamaConfig, LlamaForCausalLM)
    extra = {"head_dim": hidden // heads} if arch == "qwen3" else {}
    config = config_cls(
        vocab_size=len(tok), hidden_size=hidden, intermediate_size=hidden * 4, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=max_positions,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True, torch_dtype="float32", **extra,
    )
    model = model_cls(config)
    if train_steps > 0:
        _train(model, tok, list(texts), train_steps)
    model.eval()
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out)
    (out / "webenv-tiny.json").write_text(json.dumps({"train_steps": train_steps, "seed": seed}))
    return out


#: Qwen2-VL's chat format (Qwen's turns, image parts as the vision placeholder), for the tiny VLM.
VLM_CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}{% else %}"
    "{% for c in m['content'] %}{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% else %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
VLM_SPECIALS = ("<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")


def build_tiny_vlm(out: str | Path, texts: Sequence[str] = DEFAULT_TEXTS, *, vocab_size: int = 1024,
                   hidden: int = 64, layers: int = 2, heads: int = 2, max_positions: int = 2048,
                   max_pixels: int = 112 * 112, seed: int = 0) -> Path:
    """Write a tiny Qwen2-VL-architecture VLM (tokenizer, image processor, random weights) to ``out`` and return it.
    ``max_pixels`` caps the image processor's resize: 112 x 112 is 16 image tokens (patches of 14, merged 2 x 2)."""
    import torch
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    tok = build_tokenizer(out, vocab_size, texts, VLM_CHAT_TEMPLATE, VLM_SPECIALS, "<|im_end|>")
    Qwen2VLImageProcessorPil(min_pixels=28 * 28, max_pixels=max_pixels).save_pretrained(out)
    token = tok.convert_tokens_to_ids
    head = hidden // heads
    config = Qwen2VLConfig(
        text_config=dict(vocab_size=len(tok), hidden_size=hidden, intermediate_size=hidden * 2,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                         max_position_embeddings=max_positions, bos_token_id=tok.bos_token_id,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                          "mrope_section": [head // 8, head * 3 // 16, head * 3 // 16]}),
        vision_config=dict(depth=1, embed_dim=32, hidden_size=hidden, num_heads=2, mlp_ratio=2, patch_size=14,
                           spatial_merge_size=2, temporal_patch_size=2),
        image_token_id=token("<|image_pad|>"), video_token_id=token("<|video_pad|>"),
        vision_start_token_id=token("<|vision_start|>"), vision_end_token_id=token("<|vision_end|>"),
        tie_word_embeddings=True)
    model = Qwen2VLForConditionalGeneration(config).eval()
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out)
    (out / "webenv-tiny.json").write_text(json.dumps({"arch": "qwen2_vl", "seed": seed}))
    return out


def _train(model, tok, texts: list[str], steps: int, batch: int = 8) -> None:
    """Plain next-token training on the texts (seconds on a CPU)."""
    import torch

    optim = torch.optim.AdamW(model.parameters(), lr=3e-3)
    rng = random.Random(1)
    model.train()
    for _ in range(steps):
        enc = tok(rng.sample(texts, min(batch, len(texts))), return_tensors="pt", padding=True, truncation=True,
                  max_length=384)
        labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
        loss = model(**enc, labels=labels).loss
        loss.backward()
        optim.step()
        optim.zero_grad()


def tiny_screenshot(i: int = 0) -> bytes:
    """A 224 x 140 PNG page with a blue button moved by ``i`` pixels: the tiny VLM's test page (15 image tokens)."""
    import io

    from PIL import Image, ImageDraw

    img = Image.new("RGB", (224, 140), (240, 240, 240))
    ImageDraw.Draw(img).rectangle((100 + i, 36, 150 + i, 60), fill=(30 * i % 255, 90, 200))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()
