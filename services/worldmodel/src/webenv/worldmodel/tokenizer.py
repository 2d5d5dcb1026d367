"""A byte-level BPE tokenizer trained locally on transitions text (no hub downloads).

Byte-level so that decoding reproduces any state exactly (edits must apply character for character).
Saved as a transformers PreTrainedTokenizerFast, so `AutoTokenizer.from_pretrained(path)` loads it.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

SPECIAL = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
# Markers of the prompt/target layout, kept whole so the model sees them as single symbols.
MARKERS = ["<instruction>", "<history>", "<url>", "<action>", "<predict>", "<predict reason>",
           "<reasoning>", "</reasoning>", "<nav>", "<same>"]


def train_tokenizer(texts: Iterable[str], vocab_size: int = 4096) -> PreTrainedTokenizerFast:
    """Train byte-level BPE on `texts`."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL.values()) + MARKERS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, **SPECIAL)
