"""Vision-language models of the Qwen2-VL family (Qwen2-VL, Qwen2.5-VL) on the local engines: one prompt encoding
for serving and training.

A VLM's prompt is the chat template's text with its image placeholder (``<|vision_start|><|image_pad|><|vision_end|>``)
in the last user turn, before the text (webenv.llm.render_chat with ``images``); the placeholder is repeated once
per image token (the image processor's patch grid over ``merge_size**2``), as Qwen2-VL's own processor does. The
truncation rule is webenv.llm.encode's (the prompt keeps its last ``room`` tokens) except that an image's tokens
are never cut: the earliest tokens outside every image span go first, so a prompt that fits is the same ids either
way, and one whose images alone exceed the room is refused.

:class:`VisionProcessor` is the model's tokenizer and image processor as a ``ProcessorMixin``: what TRL's
SFTTrainer takes as the ``processing_class`` of a vision dataset (an ``images`` column), built from the two parts
the folder holds (``AutoTokenizer`` + ``AutoImageProcessor``). Qwen2-VL's own processor class also wants a video
processor, which needs torchvision; this one does not, and it encodes exactly as that processor does for images.

The transformers backend (webenv.llm.transformers_backend) serves with it, the trainer's causal-LM jobs
(webenv.trainer.train_lm) train with it; both call :meth:`VisionProcessor.encode_request`. The vLLM backend
(webenv.llm.vllm_backend) encodes with it too and hands vLLM the same ids with each image's placeholder run
collapsed to one token (:meth:`VisionProcessor.collapse`) plus the images as ``multi_modal_data``.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

from transformers.processing_utils import ProcessorMixin

from .types import GenerationRequest, VisionPrompt, encode, render_chat

IMAGE_TOKEN, VISION_START, VISION_END = "<|image_pad|>", "<|vision_start|>", "<|vision_end|>"
#: Model inputs beside input_ids / attention_mask that a batch with images carries.
VISION_KEYS = ("pixel_values", "image_grid_thw", "mm_token_type_ids")


def open_image(data: bytes):
    """An encoded image (PNG, JPEG) as an RGB PIL image."""
    from PIL import Image

    return Image.open(io.BytesIO(data)).convert("RGB")


class VisionProcessor(ProcessorMixin):
    """A Qwen2-VL-family model's tokenizer and image processor; encodes prompts with images."""

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None) -> None:
        super().__init__(image_processor, tokenizer, chat_template=chat_template)
        ids = tokenizer.convert_tokens_to_ids([IMAGE_TOKEN, VISION_START, VISION_END])
        if tokenizer.unk_token_id in ids or None in ids:
            raise ValueError(f"the tokenizer has no {IMAGE_TOKEN}/{VISION_START}/{VISION_END} tokens "
                             "(not a Qwen2-VL-family vision model)")
        self.image_token_id, self.vision_start_id, self.vision_end_id = ids

    @classmethod
    def load(cls, path: str | Path) -> VisionProcessor:
        """The tokenizer and image processor of a local folder (no downloads)."""
        from transformers import AutoImageProcessor, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        images = AutoImageProcessor.from_pretrained(path, local_files_only=True)
        return cls(images, tok)

    def save_parts(self, out: str | Path) -> None:
        """Write the tokenizer and image processor (what ``load`` reads, and what Qwen2-VL's processor reads)."""
        self.tokenizer.save_pretrained(out)
        self.image_processor.save_pretrained(out)

    def image_inputs(self, images: Sequence[bytes]) -> dict:
        """The image processor's pixel_values and image_grid_thw of encoded images."""
        return dict(self.image_processor(images=[open_image(b) for b in images], return_tensors="pt"))

    def encode_request(self, request: GenerationRequest, room: int) -> VisionPrompt:
        """The prompt of a request as the model reads it: a chat prompt with images rendered with the image
        placeholder expanded per image token, under the truncation rule above; without images, webenv.llm.encode."""
        if not request.images:
            return VisionPrompt(encode(self.tokenizer, request, room))
        if not request.is_chat:
            raise ValueError("images go with chat prompts (a raw-text prompt has no user turn to put them in)")
        data = [im.data for im in request.images]
        inputs = self.image_inputs(data)
        merge = int(getattr(self.image_processor, "merge_size", 2)) ** 2
        counts = [int(g.prod()) // merge for g in inputs["image_grid_thw"]]
        text = render_chat(self.tokenizer, request.prompt, images=len(data))
        pieces = text.split(IMAGE_TOKEN)
        if len(pieces) != len(counts) + 1:
            raise ValueError(f"the chat template rendered {len(pieces) - 1} image placeholders for {len(counts)} images")
        ids = list(self.tokenizer(pieces[0] + "".join(IMAGE_TOKEN * n + p for n, p in zip(counts, pieces[1:],
                                                                                           strict=True)),
                                  add_special_tokens=False)["input_ids"])
        return VisionPrompt(self.truncate(ids, room), data, inputs["pixel_values"], inputs["image_grid_thw"])

    def collapse(self, ids: Sequence[int]) -> list[int]:
        """``ids`` with each image's run of placeholder tokens as one: the chat template's own prompt, the form in
        which vLLM takes a prompt with ``multi_modal_data`` (its processor expands the placeholder per image token
        itself). Truncation never cuts inside an image, so collapsing encode_request's ids keeps its rule."""
        out: list[int] = []
        for t in ids:
            if not (t == self.image_token_id and out and out[-1] == self.image_token_id):
                out.append(t)
        return out

    def truncate(self, ids: list[int], room: int) -> list[int]:
        """The last ``room`` tokens, never cutting an image: the earliest tokens outside image spans are dropped."""
        room = max(room, 1)
        excess = len(ids) - room
        if excess <= 0:
            return ids
        inside, keep = False, []
        for t in ids:
            if t == self.vision_start_id:
                inside = True
            keep.append(inside)
            if t == self.vision_end_id:
                inside = False
        if excess > keep.count(False):
            raise ValueError(f"the prompt's images take {keep.count(True)} tokens, more than the {room} the context "
                             "leaves (a smaller screenshot, or the image processor's max_pixels)")
        out = []
        for t, protected in zip(ids, keep, strict=True):
            if not protected and excess > 0:
                excess -= 1
                continue
            out.append(t)
        return out

    def batch(self, rows: Sequence[VisionPrompt], pad_id: int, side: str = "left", device: str = "cpu") -> dict:
        """Padded model inputs of prompts: input_ids, attention_mask and, when any has images, pixel_values,
        image_grid_thw and mm_token_type_ids (1 on image tokens: Qwen2-VL's multimodal rotary positions)."""
        import torch

        width = max(len(r.input_ids) for r in rows)

        def pad(row: list[int], fill: int) -> list[int]:
            gap = [fill] * (width - len(row))
            return gap + row if side == "left" else row + gap

        ids = torch.tensor([pad(r.input_ids, pad_id) for r in rows], device=device)
        out = {"input_ids": ids,
               "attention_mask": torch.tensor([pad([1] * len(r.input_ids), 0) for r in rows], device=device)}
        with_images = [r for r in rows if r.images]
        if with_images:
            for r in with_images:
                if r.pixel_values is None:
                    r.pixel_values, r.image_grid_thw = (self.image_inputs(r.images)[k]
                                                        for k in ("pixel_values", "image_grid_thw"))
            out["pixel_values"] = torch.cat([r.pixel_values for r in with_images]).to(device)
            out["image_grid_thw"] = torch.cat([r.image_grid_thw for r in with_images]).to(device)
            out["mm_token_type_ids"] = (ids == self.image_token_id).long()
        return out
