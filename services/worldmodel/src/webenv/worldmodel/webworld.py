"""Bring your own language model: a local Hugging Face causal LM folder as the world model, in WebWorld's format.

WebWorld's world models (e.g. the open WebWorld-8B, a Qwen3) read the task instruction, the actions so far, the
current page and the action, and write the next page whole. `WEBENV_WORLDMODEL_LM_PATH` names such a folder; it is
served by the sdk's LLM layer (`webenv.llm`: transformers on the CPU or a GPU, vLLM with
`WEBENV_WORLDMODEL_BACKEND=vllm`) behind the same EnvironmentService and Predict RPC. The rules still decide what
never changes the page (wait, scroll, ..., the history); the language model decides every page action (Predictor
mode `webworld`). With `WEBENV_WORLDMODEL_RETRIEVAL_CONTEXT` on, what retrieval by analogy predicts for the action
(the training websites' outcome re-bound to this page) is given to it as a reference, so a model can copy what
the in-family retrieval gets right (87% of held-out predictions in the standard build) and correct the rest.

Prompt: chat messages rendered with the model's own chat template (a folder without one gets the contents joined
by blank lines, as the layer does). Output: `URL: <next url>` on the first line, then the next a11y tree. An
output without a state keeps the page (`fallback`), as the tiny model's malformed outputs do.
"""

from __future__ import annotations

from dataclasses import dataclass

from webenv.llm import Message

SYSTEM = ("You are a web world model. Given a web task, the actions taken so far, the current page (its URL and "
          "accessibility tree) and the next action, predict the page after the action. Answer with the next URL on "
          "the first line as `URL: <url>`, then the complete accessibility tree of the next page, nothing else.")


def prompt(instruction: str, history: list[tuple[str, str]], url: str, state: str, action: str,
           reference: tuple[str, str] | None = None) -> list[Message]:
    """WebWorld's input: instruction, history, current state, action (and retrieval's (url, state) as reference)."""
    parts = [f"## Instruction\n{instruction or '(none)'}",
             "## History\n" + ("\n".join(f"{i + 1}. {a} (on {u})" for i, (u, a) in enumerate(history)) or "(none)"),
             f"## Current URL\n{url}", f"## Current state\n{state}", f"## Action\n{action}"]
    if reference is not None:
        parts.append("## Reference (retrieved from similar websites' recorded outcomes; may be wrong)\n"
                     f"URL: {reference[0]}\n{reference[1]}")
    parts.append("## Next state")
    return [Message("system", SYSTEM), Message("user", "\n\n".join(parts))]


@dataclass
class Parsed:
    next_url: str
    next_state: str
    fallback: bool
    error: str = ""


def parse(text: str, url: str, state: str) -> Parsed:
    """`URL: <url>` then the next state; a reasoning block (`<think>...</think>`) first is dropped."""
    if "</think>" in text:
        text = text.split("</think>", 1)[1]
    lines = text.strip("\n").split("\n")
    next_url = url
    if lines and lines[0].strip().lower().startswith("url:"):
        next_url = lines[0].split(":", 1)[1].strip() or url
        lines = lines[1:]
    body = "\n".join(line for line in lines if line.strip()).strip("\n")
    if not body:
        return Parsed(url, state, True, "no next state in the output")
    return Parsed(next_url, body, False)


#: A chat template for tokenizers that have none (the tiny test model): Qwen's turn markers, no thinking block.
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def tiny_random_model(path, texts, vocab_size: int = 1024, hidden: int = 64, layers: int = 2) -> int:
    """A tiny randomly initialised model of the Qwen3 architecture with a byte-level BPE tokenizer trained on
    `texts` and a chat template, saved as a Hugging Face folder at `path` (tests and benchmarks: no download).
    Returns its parameter count."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM
    from webenv.worldmodel.tokenizer import train_tokenizer

    tok = train_tokenizer(texts, vocab_size)
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.chat_template = CHAT_TEMPLATE
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=hidden // 4, max_position_embeddings=8192,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
                      pad_token_id=tok.pad_token_id, tie_word_embeddings=True)
    model = Qwen3ForCausalLM(cfg)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return sum(p.numel() for p in model.parameters())
