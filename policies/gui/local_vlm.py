"""A GUI policy from a transformers vision-language model run in this process: ``--policy hf:<path>``.

>>> pol = LocalVLMPolicy("models/GUI-Owl-7B", coords="image_px", device="cuda").bind(dev.embodiment)  # doctest: +SKIP
>>> pol.act(dev.observe(), "open the settings")                                                 # doctest: +SKIP
GuiAction(type='click', point=(912.0, 41.5), ...)

The model reads exactly the conversation `OpenAIPolicy` sends to a server (`embodia.policies.gui.prompt`):
system prompt, instruction, embodiment, history, UI tree, screenshot. The conversation is rendered
with the model's chat template, the model generates (greedy by default), only the new tokens are
decoded, and the reply goes through `parse_reply` with the size of the image the model saw. A
reply that does not parse is appended with the parser's error and the model is asked again, at
most ``max_retries`` times, then `PolicyGaveUp`; nothing unparsed is ever executed.

Loading, offline. ``path`` is a folder written by ``save_pretrained`` (or a hub id, which only
resolves from the local cache when ``HF_HUB_OFFLINE=1``). The model comes from
``AutoModelForImageTextToText`` when that knows the config, else from the class named in
``config.architectures``. The processor comes from ``AutoProcessor``; where that cannot be built
(Qwen's processors need torchvision for their video half, which this install lacks) a small
processor is assembled from the tokenizer and the model's ``*ImageProcessorPil`` image processor,
for Qwen-VL-style processors (patches merged ``merge_size``², ``image_grid_thw``), which is what
Qwen2-VL, Qwen2.5-VL, GUI-Owl and UI-TARS-1.5 use; `info()` says which one was used and why. The
chat template is the processor's or the tokenizer's; without one a plain ChatML template (or
``Role: text`` lines for tokenizers without ``<|im_start|>``) is used. A missing folder or file
raises `ModelLoadError` (a ``ValueError``) naming it.

The screenshot is resized by us to the size the image processor would resize it to (Qwen: sides
that are multiples of patch * merge within its pixel bounds), so ``coords="image_px"`` replies are
read against exactly the image the model saw, and the prompt names that size.

Text that reaches the template from outside (the instruction, UI-tree labels, the model's own
earlier replies) cannot smuggle in the tokenizer's special tokens: an ``<|image_pad|>`` written on
a screen is tokenized as plain text (a word joiner is put after its first character).

Test-time scaling (``samples=N``, ``select=``, see `embodia.policies.gui.prompt`): the N candidates come
from one ``generate`` call with ``num_return_sequences=N``, ``do_sample=True`` and
``temperature=sample_temperature`` (the prompt and the screenshot are encoded once); the judge's
turn is a plain `_complete` of the same model.

``generation_kwargs`` go to ``model.generate`` unchanged: a ``logits_processor=``, a
``prefix_allowed_tokens_fn=`` for constrained decoding, ``temperature=`` with ``do_sample=True``.
"""
from __future__ import annotations

import inspect
import json
import os
import re
import time
from pathlib import Path

import torch

from embodia.devices import Embodiment
from embodia.policies.backbone import (
    TOKENIZER_FILES,
    WEIGHT_FILES,
    load_image_processor,
    quiet_progress,
    step_loader,
)
from embodia.policies.backbone_images import size_bounds, smart_resize
from embodia.policies.gui.prompt import ChatGuiPolicy, SAMPLE_TEMPERATURE, fit_image, resize_screen
from embodia.policies.gui.selection import VOTE_GRID
from embodia.policies.placement import Placement

_JOINER = "\u2060"          # word joiner: breaks a special token's literal match, reads the same


class ModelLoadError(ValueError):
    """A local model folder (or hub id) that cannot be loaded; the message names it and what failed."""


class LocalVLMPolicy(ChatGuiPolicy):
    """GUI actions from a transformers vision-language model loaded by path; see the module doc.

    ``image_max_side`` bounds the screenshot before the image processor's own bounds apply;
    ``history`` previous actions are shown; ``threads`` sets torch's CPU threads; ``device`` and
    ``dtype`` default to the process's choice (`embodia.policies.placement`: CUDA in bfloat16 when
    present, the CPU in float32 otherwise). `step_record()` lists each attempt's reply, parse
    error, latency and tokens generated.
    """

    def __init__(self, path: str | os.PathLike, *, embodiment: Embodiment | None = None, coords: str = "norm1000",
                 max_retries: int = 2, max_new_tokens: int = 256, image_max_side: int = 1280, history: int = 4,
                 threads: int | None = None, device: str | None = None, dtype=None, do_sample: bool = False,
                 system_prompt: str | None = None, supported=None, generation_kwargs: dict | None = None,
                 samples: int = 1, select="vote", sample_temperature: float = SAMPLE_TEMPERATURE,
                 vote_grid: float = VOTE_GRID):
        if not os.fspath(path):
            raise ModelLoadError("hf: needs a model folder: hf:<path>")
        if max_new_tokens < 1:
            raise ValueError("max_new_tokens must be >= 1")
        if embodiment is not None:
            self.bind(embodiment)           # a body without a screen is refused before the model loads
        if threads:
            torch.set_num_threads(threads)
        self.path = os.fspath(path)
        self.model = self.path
        # the process's choice (--torch-device, $EMBODIA_TORCH_DEVICE, auto) unless told here
        self.placement = Placement.resolve(device, None if isinstance(dtype, torch.dtype) else dtype)
        self.device = self.placement.device
        self.dtype = dtype if isinstance(dtype, torch.dtype) else self.placement.dtype
        self.max_new_tokens, self.do_sample = max_new_tokens, do_sample
        self.generation_kwargs = dict(generation_kwargs or {})
        loaded = _load(self.path, self.device, self.dtype)
        self.net, self.processor, self.tokenizer = loaded["model"], loaded["processor"], loaded["tokenizer"]
        self.processor_kind, self.chat_template = loaded["processor_kind"], loaded["chat_template"]
        self._image_text = loaded["image_text"]
        if self.chat_template is None and self._image_text is None:
            raise ModelLoadError(f"{self.path!r} has no chat template and no image token this policy knows; "
                                 f"save a chat template with the tokenizer or processor")
        self._special = _special_pattern(self.tokenizer)
        self._eos = _eos_ids(self.net, self.tokenizer)
        self._types = _token_types(self.net)
        ip = getattr(self.processor, "image_processor", None)
        self._grid = _qwen_grid(ip)
        super().__init__(embodiment=embodiment, coords=coords, max_retries=max_retries,
                         image_max_side=image_max_side, image_multiple=self._grid[0] if self._grid else None,
                         history=history, system_prompt=system_prompt, supported=supported, samples=samples,
                         select=select, sample_temperature=sample_temperature, vote_grid=vote_grid)

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self._tokens: list[int] = []
        if self.do_sample and seed is not None:
            torch.manual_seed(seed)

    def info(self) -> dict:
        out = super().info()
        out.update(processor=self.processor_kind, device=str(self.device), tokens=int(sum(self._tokens)))
        if self._tokens and sum(self._ms):
            out["tokens_per_s"] = 1e3 * sum(self._tokens) / sum(self._ms)
        return out

    def reply(self, text: str, images=()) -> str:
        """The model's reply to one user turn of ``text`` followed by ``images`` (uint8 [H, W, 3]
        arrays, each resized as the model's image processor wants), decoded as it is: no action
        parsing, no retries. What a judge (``--success judge:hf:<path>``) asks.

        >>> vlm.reply("Is the switch on? Reply yes or no.", [screen])                       # doctest: +SKIP
        'yes'
        """
        parts = [{"type": "text", "text": text}]
        for img in images:
            h, w = img.shape[:2]
            parts.append(self._image_part(resize_screen(img, self._input_size(w, h))))
        return self._complete([{"role": "user", "content": parts}])[0]

    # -- ChatGuiPolicy hooks -----------------------------------------------------------------------
    def _input_size(self, width: int, height: int) -> tuple[int, int]:
        w, h = fit_image(width, height, self.image_max_side, self.image_multiple)
        if self._grid is None:          # the processor resizes on its own terms
            return w, h
        factor, lo, hi = self._grid
        h, w = smart_resize(h, w, factor, lo, hi)
        return w, h

    def _image_part(self, image) -> dict:
        return {"type": "image", "image": image}

    def _complete(self, messages: list) -> tuple[str, dict]:
        """Render, process, generate: (the new tokens as text, {"ms", "tokens", "prompt_tokens"})."""
        replies, meta = self._generate(messages, {"do_sample": self.do_sample, **self.generation_kwargs})
        return replies[0], meta

    def _sample(self, messages: list, n: int) -> tuple[list[str], dict]:
        """``n`` sampled replies from one ``generate`` call; ``tokens`` counts all of them."""
        return self._generate(messages, {"do_sample": True, "temperature": self.sample_temperature,
                                         **self.generation_kwargs, "num_return_sequences": n})

    def _generate(self, messages: list, options: dict) -> tuple[list[str], dict]:
        t0 = time.perf_counter()
        conv, images = [], []
        for m in messages:
            parts = [{"type": "text", "text": m["content"]}] if isinstance(m["content"], str) else m["content"]
            content = []
            for p in parts:
                if p["type"] == "image":
                    images.append(p["image"])
                    content.append({"type": "image"})
                else:
                    content.append({"type": "text", "text": self._defuse(p["text"])})
            conv.append({"role": m["role"], "content": content})
        text = self._render(conv)
        bos = getattr(self.tokenizer, "bos_token", None)
        inputs = self.processor(text=[text], images=images or None, return_tensors="pt",
                                add_special_tokens=not (bos and text.startswith(bos)))
        inputs = dict(inputs)
        ids = inputs["input_ids"]
        if self._types is not None and "mm_token_type_ids" not in inputs:
            image_id, video_id = self._types
            types = (ids == image_id).int()
            inputs["mm_token_type_ids"] = types if video_id is None else types + 2 * (ids == video_id).int()
        inputs = {k: (v.to(self.device, self.dtype) if torch.is_floating_point(v) else v.to(self.device))
                  if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
        pad = self.tokenizer.pad_token_id
        kwargs = {"max_new_tokens": self.max_new_tokens, "eos_token_id": self._eos,
                  "pad_token_id": pad if pad is not None else self._eos[0], **options}
        with torch.inference_mode():
            out = self.net.generate(**inputs, **kwargs)
        replies, tokens = [], 0
        for row in out[:, ids.shape[1]:].tolist():
            end = next((i for i, t in enumerate(row) if t in self._eos), len(row))
            replies.append(self.tokenizer.decode(row[:end], skip_special_tokens=False))
            tokens += min(end + 1, len(row))        # a finished row is padded to the longest
        ms = (time.perf_counter() - t0) * 1e3
        self._tokens.append(tokens)
        return replies, {"ms": ms, "tokens": tokens, "prompt_tokens": int(ids.shape[1])}

    # -- prompt text -------------------------------------------------------------------------------
    def _defuse(self, text: str) -> str:
        if self._special is None:
            return text
        return self._special.sub(lambda m: m.group(0)[0] + _JOINER + m.group(0)[1:], text)

    def _render(self, conv: list) -> str:
        if self.chat_template is not None:
            return self.tokenizer.apply_chat_template(conv, chat_template=self.chat_template, tokenize=False,
                                                      add_generation_prompt=True)
        chatml = all(self.tokenizer.convert_tokens_to_ids(t) not in (None, self.tokenizer.unk_token_id)
                     for t in ("<|im_start|>", "<|im_end|>"))
        turns = []
        for m in conv:
            body = "".join(self._image_text if p["type"] == "image" else p["text"] for p in m["content"])
            turns.append(f"<|im_start|>{m['role']}\n{body}<|im_end|>\n" if chatml
                         else f"{m['role'].capitalize()}: {body}\n\n")
        return "".join(turns) + ("<|im_start|>assistant\n" if chatml else "Assistant:")


# ------------------------------------------------------------------------------------------------
# loading
# ------------------------------------------------------------------------------------------------

def _load(src: str, device: torch.device, dtype) -> dict:
    """Model, processor, tokenizer, chat template and the image text of the plain template."""
    from transformers import AutoConfig

    p = Path(src).expanduser()
    local = p.exists() or os.path.isabs(src) or src.startswith((".", "~")) or src.count("/") != 1
    if local:
        if not p.is_dir():
            raise ModelLoadError(f"hf:{src}: {str(p)!r} is not a directory (a model folder written by "
                                 f"save_pretrained)")
        missing = [what for what, names in (("config.json", ("config.json",)),
                                            ("model weights (model.safetensors)", WEIGHT_FILES),
                                            ("tokenizer files (tokenizer.json)", TOKENIZER_FILES))
                   if not any((p / n).is_file() for n in names)]
        if missing:
            raise ModelLoadError(f"hf:{src}: {str(p)!r} lacks " + ", ".join(missing))
        src = str(p)

    load = step_loader(ModelLoadError, local, lambda what, hint: f"hf:{src}: cannot load the {what}{hint}")

    config = load("config", lambda: AutoConfig.from_pretrained(src))
    cls = load("model class", lambda: _model_class(config))
    model = load("model", lambda: cls.from_pretrained(src, dtype=dtype)).to(device)
    model.eval()
    processor, kind = _processor(src, config, load)
    tokenizer = processor.tokenizer
    template = getattr(processor, "chat_template", None) or getattr(tokenizer, "chat_template", None)
    if template is None and local and (Path(src) / "chat_template.json").is_file():
        template = load("chat template", lambda: json.loads((Path(src) / "chat_template.json").read_text())
                        ["chat_template"])
    return {"model": model, "processor": processor, "tokenizer": tokenizer, "processor_kind": kind,
            "chat_template": template, "image_text": _image_text(config, processor)}


def _model_class(config):
    import transformers
    from transformers import AutoModelForImageTextToText
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING

    if type(config) in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING:
        return AutoModelForImageTextToText
    for name in getattr(config, "architectures", None) or ():
        cls = getattr(transformers, name, None)
        if cls is not None and hasattr(cls, "generate"):
            return cls
    raise ValueError(f"AutoModelForImageTextToText does not know model_type={config.model_type!r} and "
                     f"config.architectures names no transformers class ({config.architectures})")


def _processor(src: str, config, load):
    """AutoProcessor, or the tokenizer + a PIL image processor; (processor, how it was built)."""
    from transformers import AutoImageProcessor, AutoProcessor, AutoTokenizer

    try:
        with quiet_progress():
            proc = AutoProcessor.from_pretrained(src)
        if getattr(proc, "image_processor", None) is None or getattr(proc, "tokenizer", None) is None:
            raise TypeError(f"it gave a {type(proc).__name__} without an image processor and a tokenizer")
        return proc, "AutoProcessor"
    except Exception as e:  # noqa: BLE001 - the reason is kept in info()["processor"]
        text = " ".join(str(e).split())
        reason = f"{type(e).__name__}: {text if len(text) <= 160 else text[:159] + '…'}"
    tokenizer = load("tokenizer", lambda: AutoTokenizer.from_pretrained(src))
    ip = load("image processor (preprocessor_config.json)",
              lambda: load_image_processor(src, AutoImageProcessor))
    image_id = getattr(config, "image_token_id", None)
    if _qwen_grid(ip) is None or image_id is None:
        raise ModelLoadError(f"hf:{src}: AutoProcessor cannot be built here ({reason}), and the fallback "
                             f"processor handles Qwen-VL-style image processors only (got {type(ip).__name__}, "
                             f"model_type={config.model_type!r})")
    kind = f"{type(ip).__name__} + tokenizer (AutoProcessor failed: {reason})"
    return _QwenPilProcessor(tokenizer, ip, tokenizer.convert_ids_to_tokens(int(image_id))), kind


class _QwenPilProcessor:
    """What Qwen2-VL's processor does for images, without its video half: run the image processor,
    then repeat each image placeholder once per merged patch (grid_t * grid_h * grid_w / merge²)."""

    def __init__(self, tokenizer, image_processor, image_token: str):
        self.tokenizer, self.image_processor, self.image_token = tokenizer, image_processor, image_token
        self.chat_template = None

    def __call__(self, text: list[str], images=None, return_tensors: str = "pt", add_special_tokens: bool = True):
        out = {}
        counts: list[int] = []
        if images:
            out = dict(self.image_processor(images=images, return_tensors=return_tensors))
            merge = int(self.image_processor.merge_size) ** 2
            counts = [int(n) // merge for n in out["image_grid_thw"].prod(-1)]
        expanded = []
        for t in text:
            pieces = t.split(self.image_token)
            if len(pieces) - 1 > len(counts):
                raise ValueError(f"{len(pieces) - 1} image placeholders in the prompt but {len(counts)} images")
            expanded.append(pieces[0] + "".join(self.image_token * counts.pop(0) + rest for rest in pieces[1:]))
        if counts:
            raise ValueError(f"{len(counts)} images have no placeholder in the prompt (does the chat template "
                             f"render image parts?)")
        enc = self.tokenizer(expanded, return_tensors=return_tensors, add_special_tokens=add_special_tokens)
        return {**dict(enc), **out}


def _qwen_grid(ip) -> tuple[int, int, int] | None:
    """(patch * merge, min_pixels, max_pixels) of a Qwen-VL-style image processor, else None."""
    if ip is None or not all(hasattr(ip, a) for a in ("patch_size", "merge_size", "temporal_patch_size")):
        return None
    lo, hi = size_bounds(ip)
    return int(ip.patch_size) * int(ip.merge_size), lo, hi


def _image_text(config, processor) -> str | None:
    """What one image is in the plain template: Qwen's <|vision_start|><|image_pad|><|vision_end|>,
    else the processor's image token."""
    tok = processor.tokenizer
    ids = [getattr(config, a, None) for a in ("vision_start_token_id", "image_token_id", "vision_end_token_id")]
    if all(i is not None for i in ids):
        return "".join(tok.convert_ids_to_tokens(int(i)) for i in ids)
    return getattr(processor, "image_token", None)


def _special_pattern(tokenizer):
    """A regex matching the tokenizer's special tokens as literal text, longest first (None: none)."""
    specials = set(getattr(tokenizer, "all_special_tokens", ()) or ())
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    specials |= {str(t) for t in decoder.values() if getattr(t, "special", False)}
    specials = sorted((s for s in specials if len(s) > 1), key=len, reverse=True)
    return re.compile("|".join(map(re.escape, specials))) if specials else None


def _eos_ids(model, tokenizer) -> list[int]:
    """Token ids that end a reply: the generation config's, the tokenizer's eos, ChatML's <|im_end|>."""
    ids = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
    for t in (tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>")):
        if isinstance(t, int) and t != tokenizer.unk_token_id and t not in ids:
            ids.append(t)
    if not ids:
        raise ModelLoadError("the model's generation config and tokenizer name no end-of-sequence token")
    return ids


def _token_types(model) -> tuple[int, int | None] | None:
    """(image id, video id) when the model reads ``mm_token_type_ids`` (Qwen-VL's 3-D positions:
    without them Qwen2.5-VL silently falls back to 1-D positions), else None."""
    cfg = model.config
    if getattr(cfg, "image_token_id", None) is None:
        return None
    if "mm_token_type_ids" not in inspect.signature(model.forward).parameters:
        return None
    vid = getattr(cfg, "video_token_id", None)
    return int(cfg.image_token_id), None if vid is None else int(vid)
