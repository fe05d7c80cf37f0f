"""Vision-language backbone: camera images + embodiment prompt + instruction -> context tokens.

A transformers vision-language model (Qwen2.5-VL by default) reads, for one sample, one sequence:

    for each camera image:  <|vision_start|> <|image_pad|> * n <|vision_end|>
    then the embodiment prompt (`Embodiment.prompt()`), a newline, the instruction

so the instruction words and the body description attend to each other and to the images. The
hidden states of one chosen decoder layer (default: the middle one) are returned as context tokens
`ctx [B, T, hidden]` with a boolean mask `ctx_mask [B, T]` (False on right padding, where `ctx` is 0);
an action decoder cross-attends to them.

Layer index semantics (`Backbone.layer`) follow transformers' `output_hidden_states` tuple of
`num_hidden_layers + 1` tensors: 0 = the input embeddings (image features already scattered in),
`i` in 1..L-1 = the residual stream after decoder layer `i` (no final norm), `L` = the last layer
after the final norm (`last_hidden_state`). Default `L // 2`; negative values count from the end as
Python indices do (-1 = L). For `layer < L` the forward stops right after that layer, so the later
layers cost nothing (they stay in the checkpoint, which remains a standard transformers model).

The work is split so that training can cache:

* `preprocess_images(list of uint8 HxWx3)` -> uint8 [N, h, w, 3]: resized exactly as the Qwen image
  processor resizes (PIL bicubic to `smart_resize`'s size, or to a fixed `image_size`). Cache this.
* `patchify(uint8 batch)` -> `(pixel_values, image_grid_thw)` in torch, identical to
  `Qwen2VLImageProcessorPil` (a per-channel lookup table reproduces its float64-rescale /
  float32-normalize arithmetic bit for bit).
* `tokenize(texts)` -> padded `input_ids, attention_mask` (right padding); `prompt_text(...)` builds
  the text with the right number of image placeholders.
* `forward(input_ids, attention_mask, pixel_values, image_grid_thw)` -> `(ctx, ctx_mask)`; it builds
  `mm_token_type_ids` itself (without them Qwen2.5-VL silently falls back to 1-D positions and
  Qwen2-VL raises).
* `encode(images_per_sample, texts)` does all of the above for a batch (inference). It respects the
  caller's grad mode: wrap it in `torch.inference_mode()` at inference.

Images are ordered sample-major: the rows of `image_grid_thw` (and the patches of `pixel_values`)
follow the order in which the image placeholders appear in the batch's texts.

Supported architectures: models whose image processor is Qwen2-VL style (`Qwen2VLImageProcessor`,
PIL backend, no torchvision needed) and whose config names `image_token_id` and
`vision_start_token_id`: **Qwen2.5-VL** (tested, the default) and **Qwen2-VL** (same processor and
prompt format; it requires `mm_token_type_ids`, which is always passed). Qwen3-VL uses the same
processor and is likely to work through `from_pretrained`, but is untested here.
Not supported: Idefics3 / SmolVLM (their `Idefics3ImageProcessorPil` works offline, but it pads and
splits images, uses `<fake_token_around_image><global-img><image>*k` prompts and a
`pixel_attention_mask` instead of `image_grid_thw`), PaliGemma (SigLIP processor, image tokens
first, prefix-LM mask) and others: constructing a `Backbone` around them raises
`NotImplementedError` naming the processor and model type. Model loading itself is generic
(`AutoModelForImageTextToText`), so adding one means writing its preprocess/patchify/prompt.

`Backbone.from_pretrained(dir)` reads a folder written by `save_pretrained` (config.json,
model.safetensors, tokenizer files, preprocessor_config.json, embodia_backbone.json) fully offline;
a missing or unreadable folder/file raises `FileNotFoundError` / `BackboneLoadError` (both
`OSError`) naming it.

Tiny models for tests and CPU training come from `train_tokenizer` + `tiny_config` +
`Backbone.build` (random init; `seed=` or the global torch RNG). The tokenizer and config live in
`backbone_tiny.py`, the image resize and patches (a mixin of `Backbone`) in `backbone_images.py`.
"""
from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import nn

from embodia.policies.backbone_images import DEFAULT_MAX_PIXELS, DEFAULT_MIN_PIXELS, ImageInput, size_bounds
from embodia.policies.backbone_tiny import IMAGE_PAD, VISION_END, VISION_START

__all__ = [
    "Backbone", "BackboneLoadError", "prompt_text", "text_body", "META_FILE",
]

META_FILE = "embodia_backbone.json"
TOKEN_CACHE = 32        # lone texts `Backbone.tokenize` keeps tokenized (a run's prompts)
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "pytorch_model.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "tokenizer.model")


class BackboneLoadError(OSError):
    """A backbone folder (or hub id) exists but something in it cannot be read."""


# ------------------------------------------------------------------------------------------------
# prompt and image geometry
# ------------------------------------------------------------------------------------------------

def prompt_text(embodiment_prompt: str, instruction: str, n_images: int,
                tokens_per_image: int | Sequence[int], *, vision_start: str = VISION_START,
                image_pad: str = IMAGE_PAD, vision_end: str = VISION_END) -> str:
    """The full text of one sample: image placeholders, then the body description, then the task.

    `tokens_per_image` is one count for every image or one per image (cameras of different sizes).
    >>> prompt_text("<embodiment> name=a </embodiment>", "push", 1, 2)
    '<|vision_start|><|image_pad|><|image_pad|><|vision_end|><embodiment> name=a </embodiment>\\npush'
    """
    counts = [int(tokens_per_image)] * n_images if isinstance(tokens_per_image, (int, np.integer)) \
        else [int(c) for c in tokens_per_image]
    if len(counts) != n_images:
        raise ValueError(f"prompt_text: {n_images} images but {len(counts)} token counts")
    vision = "".join(vision_start + image_pad * c + vision_end for c in counts)
    return vision + text_body(embodiment_prompt, instruction)


def text_body(embodiment_prompt: str, instruction: str) -> str:
    """Body description and instruction, newline-separated (an empty part is left out)."""
    return "\n".join(p for p in (embodiment_prompt, instruction) if p)


@contextlib.contextmanager
def quiet_progress():
    """transformers' save/load progress bars off for the duration (restored afterwards)."""
    from transformers.utils import logging as hf_logging
    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def step_loader(error_cls, local: bool, head):
    """``load(what, fn)``: run one loading step (config, tokenizer, model...) with the hub's progress
    bars quiet; a failure is re-raised as ``error_cls`` whose message starts with ``head(what,
    hint)`` and names the cause (the hint says HF_HUB_OFFLINE is set when a hub id was given)."""
    def load(what, fn):
        try:
            with quiet_progress():
                return fn()
        except Exception as e:  # noqa: BLE001 - re-raised with the path named
            offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
            hint = " (HF_HUB_OFFLINE is set: pass a local folder)" if offline and not local else ""
            raise error_cls(f"{head(what, hint)}: {type(e).__name__}: {e}") from e
    return load


class _EarlyExit(Exception):
    def __init__(self, hidden: torch.Tensor):
        super().__init__()
        self.hidden = hidden


# ------------------------------------------------------------------------------------------------
# the backbone
# ------------------------------------------------------------------------------------------------

class Backbone(ImageInput, nn.Module):
    """A transformers VLM + tokenizer + image processor -> context tokens of one layer.

    Use `Backbone.build(tokenizer, config)` (fresh random init) or `Backbone.from_pretrained(dir)`.
    See the module docstring for the prompt layout, layer semantics and supported architectures.
    """

    def __init__(self, model, tokenizer, image_processor, layer: int | None = None,
                 image_size: tuple[int, int] | None = None):
        super().__init__()
        cfg = model.config
        model_type = getattr(cfg, "model_type", type(model).__name__)
        proc_name = type(image_processor).__name__
        if not proc_name.startswith("Qwen2VLImageProcessor"):
            raise NotImplementedError(
                f"Backbone supports Qwen2-VL-style image processors (Qwen2.5-VL, Qwen2-VL); got {proc_name} "
                f"for model_type={model_type!r}. Idefics3/SmolVLM/PaliGemma need their own "
                f"preprocess/patchify/prompt and are not implemented.")
        for attr in ("image_token_id", "vision_start_token_id"):
            if getattr(cfg, attr, None) is None:
                raise NotImplementedError(f"Backbone: model_type={model_type!r} config has no {attr}; "
                                          f"only Qwen-VL-style models are supported")
        self.model = model
        self.tokenizer = tokenizer
        self._token_cache: dict = {}      # `tokenize`'s lone texts
        self.image_processor = image_processor
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side = "right"

        self.text_config = cfg.get_text_config()
        self.num_layers = int(self.text_config.num_hidden_layers)
        self.layer = self.num_layers // 2 if layer is None else int(layer)
        if not -(self.num_layers + 1) <= self.layer <= self.num_layers:
            raise ValueError(f"Backbone: layer={layer} out of range for {self.num_layers} decoder layers "
                             f"(hidden_states indices 0..{self.num_layers})")
        self.layer %= self.num_layers + 1

        self.image_token_id = int(cfg.image_token_id)
        vid = getattr(cfg, "video_token_id", None)
        self.video_token_id = None if vid is None else int(vid)
        self.vision_start = tokenizer.convert_ids_to_tokens(int(cfg.vision_start_token_id))
        end_id = getattr(cfg, "vision_end_token_id", None)
        self.vision_end = tokenizer.convert_ids_to_tokens(int(end_id)) if end_id is not None else ""
        self.image_pad = tokenizer.convert_ids_to_tokens(self.image_token_id)

        ip = image_processor
        self.patch_size = int(ip.patch_size)
        self.merge_size = int(ip.merge_size)
        self.temporal_patch_size = int(ip.temporal_patch_size)
        self.factor = self.patch_size * self.merge_size
        self.min_pixels, self.max_pixels = size_bounds(ip)
        vc = cfg.vision_config
        if (vc.patch_size, vc.spatial_merge_size) != (self.patch_size, self.merge_size):
            raise ValueError(f"Backbone: image processor patch/merge {self.patch_size}/{self.merge_size} "
                             f"!= model {vc.patch_size}/{vc.spatial_merge_size}")
        if image_size is not None:
            w, h = (int(v) for v in image_size)
            if w % self.factor or h % self.factor or w <= 0 or h <= 0:
                raise ValueError(f"Backbone: image_size={image_size} (W, H) must be positive multiples of "
                                 f"patch*merge={self.factor}")
            image_size = (w, h)
        self.image_size = image_size
        self.register_buffer("_pixel_lut", self._make_lut(), persistent=False)
        self._layers = self._find_layers()
        # Qwen2/2.5-VL's M-RoPE is reproduced by `mrope_positions` (vectorized); other models get
        # `mm_token_type_ids` and compute their own positions.
        self._fast_positions = model_type in ("qwen2_vl", "qwen2_5_vl")

    # -- construction -----------------------------------------------------------------------------
    @classmethod
    def build(cls, tokenizer, config, *, layer: int | None = None, image_size: tuple[int, int] | None = None,
              min_pixels: int = DEFAULT_MIN_PIXELS, max_pixels: int = DEFAULT_MAX_PIXELS, seed: int | None = None,
              attn_implementation: str = "sdpa") -> "Backbone":
        """A fresh random-init model from `config` (e.g. `tiny_config(tokenizer)`).

        `seed`: initialize from `torch.manual_seed(seed)` without touching the global RNG; None
        draws from the global torch RNG (so an earlier `torch.manual_seed` decides).

        Images are resized to `image_size=(W, H)` when given (multiples of patch*merge, 28 for
        Qwen), else with Qwen's `smart_resize` within [min_pixels, max_pixels] (default: a 96x96
        camera becomes 84x84, 9 image tokens).
        """
        from transformers import AutoModelForImageTextToText
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

        with torch.random.fork_rng(devices=[], enabled=seed is not None):
            if seed is not None:
                torch.manual_seed(seed)
            model = AutoModelForImageTextToText.from_config(config, attn_implementation=attn_implementation)
        model.eval()
        vc = config.vision_config
        ip = Qwen2VLImageProcessorPil(min_pixels=min_pixels, max_pixels=max_pixels, patch_size=vc.patch_size,
                                      temporal_patch_size=vc.temporal_patch_size,
                                      merge_size=vc.spatial_merge_size)
        return cls(model, tokenizer, ip, layer=layer, image_size=image_size)

    _UNSET = object()

    @classmethod
    def from_pretrained(cls, path_or_id: str | os.PathLike, layer: int | None = None, *,
                        image_size=_UNSET, dtype: torch.dtype = torch.float32,
                        attn_implementation: str = "sdpa") -> "Backbone":
        """Load model, tokenizer and image processor from a folder (offline) or a hub id.

        `layer` / `image_size` default to what `embodia_backbone.json` says, else the middle layer
        and Qwen's smart_resize. Raises FileNotFoundError (missing folder/file) or BackboneLoadError
        (unreadable file) naming the path.
        """
        from transformers import AutoImageProcessor, AutoModelForImageTextToText, AutoTokenizer

        src = os.fspath(path_or_id)
        p = Path(src).expanduser()
        local = p.exists() or os.path.isabs(src) or src.startswith((".", "~")) or src.count("/") != 1
        meta: dict = {}
        if local:
            if not p.is_dir():
                raise FileNotFoundError(f"Backbone.from_pretrained: {src!r} is not a directory")
            missing = []
            if not (p / "config.json").is_file():
                missing.append("config.json")
            if not any((p / f).is_file() for f in WEIGHT_FILES):
                missing.append("model weights (" + " or ".join(WEIGHT_FILES[:2]) + ")")
            if not any((p / f).is_file() for f in TOKENIZER_FILES):
                missing.append("tokenizer files (" + " or ".join(TOKENIZER_FILES) + ")")
            if not (p / "preprocessor_config.json").is_file():
                missing.append("preprocessor_config.json")
            if missing:
                raise FileNotFoundError(f"Backbone.from_pretrained: {str(p)!r} lacks " + ", ".join(missing))
            for f in ("config.json", "preprocessor_config.json", META_FILE):
                if (p / f).is_file():
                    try:
                        d = json.loads((p / f).read_text())
                    except (OSError, ValueError, UnicodeDecodeError) as e:
                        raise BackboneLoadError(f"Backbone.from_pretrained: {str(p / f)!r} is not valid JSON "
                                                f"({e})") from e
                    if f == META_FILE:
                        meta = d
            src = str(p)

        load = step_loader(BackboneLoadError, local,
                           lambda what, hint: f"Backbone.from_pretrained: cannot load the {what} from {src!r}{hint}")

        model = load("model", lambda: AutoModelForImageTextToText.from_pretrained(
            src, dtype=dtype, attn_implementation=attn_implementation))
        model.eval()
        tokenizer = load("tokenizer", lambda: AutoTokenizer.from_pretrained(src))
        image_processor = load("image processor", lambda: load_image_processor(src, AutoImageProcessor))
        if layer is None:
            layer = meta.get("layer")
        if image_size is cls._UNSET:
            image_size = meta.get("image_size")
        return cls(model, tokenizer, image_processor, layer=layer,
                   image_size=tuple(image_size) if image_size is not None else None)

    def save_pretrained(self, directory: str | os.PathLike) -> Path:
        """Write config.json, model.safetensors, tokenizer files, preprocessor_config.json and
        embodia_backbone.json (layer, image_size) with transformers' own save methods."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        with quiet_progress():
            self.model.save_pretrained(d)
        self.tokenizer.save_pretrained(d)
        self.image_processor.save_pretrained(d)
        meta = {"format": 1, "layer": self.layer, "num_hidden_layers": self.num_layers,
                "image_size": list(self.image_size) if self.image_size else None,
                "hidden_size": self.hidden_size}
        (d / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
        return d

    # -- properties -------------------------------------------------------------------------------
    @property
    def hidden_size(self) -> int:
        return int(self.text_config.hidden_size)

    @property
    def device(self) -> torch.device:
        return self._pixel_lut.device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def default_image_tokens(self) -> int:
        """Placeholders of one image at `image_size` (fixed) or of a 96x96 camera."""
        if self.image_size is not None:
            return self.image_tokens(self.image_size[1], self.image_size[0])
        return self.image_tokens(96, 96)

    # -- text -------------------------------------------------------------------------------------
    def prompt_text(self, embodiment_prompt: str, instruction: str, n_images: int,
                    tokens_per_image: int | Sequence[int] | None = None) -> str:
        """Image placeholders (this model's tokens), then the body description, then the task.

        `tokens_per_image`: one count, or one per image; get them with `image_tokens(h, w)` of each
        camera. None means `default_image_tokens`: an image at `image_size` when that is fixed,
        else a 96x96 camera (9 tokens with the default bounds); other camera sizes need the count.
        """
        if tokens_per_image is None:
            tokens_per_image = self.default_image_tokens
        return prompt_text(embodiment_prompt, instruction, n_images, tokens_per_image,
                           vision_start=self.vision_start, image_pad=self.image_pad, vision_end=self.vision_end)

    def tokenize(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Padded batch (right padding): input_ids [B, T] long, attention_mask [B, T] long.

        A lone text (a decision's prompt, the same step after step) is tokenized once: the last
        `TOKEN_CACHE` of them are kept, and each call gets its own copy."""
        if len(texts) != 1:
            enc = self.tokenizer(list(texts), padding=True, return_tensors="pt")
            return enc["input_ids"], enc["attention_mask"]
        cache, key = self._token_cache, (id(self.tokenizer), texts[0])
        hit = cache.pop(key, None)
        if hit is None:
            enc = self.tokenizer(list(texts), padding=True, return_tensors="pt")
            hit = (enc["input_ids"], enc["attention_mask"])
            while len(cache) >= TOKEN_CACHE:
                cache.pop(next(iter(cache)))          # the least recently used
        cache[key] = hit
        return hit[0].clone(), hit[1].clone()

    def token_types(self, input_ids: torch.Tensor) -> torch.Tensor:
        """`mm_token_type_ids`: 0 text, 1 image placeholder, 2 video placeholder."""
        types = (input_ids == self.image_token_id).int()
        if self.video_token_id is not None:
            types = types + 2 * (input_ids == self.video_token_id).int()
        return types

    def mrope_positions(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                        image_grid_thw: torch.Tensor) -> torch.Tensor:
        """3-D M-RoPE position ids [3, B, T] for images + text, vectorized.

        Equal to Qwen2/2.5-VL's `get_rope_index` (which loops in Python over samples and token
        groups, ~18 ms at batch 64): text tokens count up on all three axes; an image block starts
        at the running position p and its merged token (row r, col c) gets (p, p + r, p + c); the
        count then advances by max(rows, cols). Padding gets 0.
        """
        mask = attention_mask.bool()
        is_img = (input_ids == self.image_token_id) & mask
        b, t = input_ids.shape
        prev = torch.zeros_like(is_img)
        prev[:, 1:] = is_img[:, :-1]
        start = is_img & ~prev
        block = torch.cumsum(start.reshape(-1).long(), 0).reshape(b, t) - 1    # global image index, sample-major
        n_blocks = int(start.sum())
        if n_blocks != image_grid_thw.shape[0]:
            raise ValueError(f"Backbone: {n_blocks} image placeholder runs in the text but "
                             f"{image_grid_thw.shape[0]} images")
        expected = int((image_grid_thw.prod(-1) // self.merge_size ** 2).sum())
        if int(is_img.sum()) != expected:
            raise ValueError(f"Backbone: {int(is_img.sum())} image placeholder tokens in the text but the images "
                             f"give {expected}; build the text with prompt_text(..., tokens_per_image="
                             f"[image_tokens(h, w) per camera])")
        block = block.clamp(min=0)
        grid = image_grid_thw.to(input_ids.device)
        rows = (grid[:, 1] // self.merge_size)[block]
        cols = (grid[:, 2] // self.merge_size)[block]
        idx = torch.arange(t, device=input_ids.device).expand(b, t)
        first = torch.cummax(torch.where(start, idx, torch.zeros_like(idx)), dim=1).values
        k = idx - first                                                       # index inside the block
        nxt = torch.zeros_like(is_img)
        nxt[:, :-1] = is_img[:, 1:]
        last = is_img & ~nxt
        adv = torch.where(is_img, torch.where(last, torch.maximum(rows, cols), 0), mask.long())
        base = torch.cumsum(adv, 1) - adv
        r = torch.where(is_img, k // cols, 0)
        c = torch.where(is_img, k % cols, 0)
        pos = torch.stack([base, base + r, base + c])
        return torch.where(mask, pos, 0)

    # -- model ------------------------------------------------------------------------------------
    def _find_layers(self):
        try:
            dec = self.model.get_decoder()
        except Exception:  # noqa: BLE001 - fall back to a full forward
            return None
        layers = getattr(dec, "layers", None)
        return layers if isinstance(layers, nn.ModuleList) and len(layers) == self.num_layers else None

    def _base(self):
        base = getattr(self.model, "model", None)
        return base if isinstance(base, nn.Module) else self.model.base_model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                pixel_values: torch.Tensor | None = None,
                image_grid_thw: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """-> (ctx [B, T, hidden], ctx_mask [B, T] bool); ctx is 0 where the mask is False."""
        dev = self.device
        input_ids = input_ids.to(dev)
        attention_mask = attention_mask.to(dev)
        kwargs = dict(input_ids=input_ids, attention_mask=attention_mask,
                      mm_token_type_ids=self.token_types(input_ids), use_cache=False)
        if pixel_values is not None:
            if image_grid_thw is None:
                raise ValueError("Backbone.forward: pixel_values given without image_grid_thw")
            image_grid_thw = image_grid_thw.to(dev)
            kwargs.update(pixel_values=pixel_values.to(dev, self.dtype), image_grid_thw=image_grid_thw)
            if self._fast_positions and not (kwargs["mm_token_type_ids"] == 2).any():
                kwargs["position_ids"] = self.mrope_positions(input_ids, attention_mask, image_grid_thw)
        ctx = self._hidden(kwargs)
        mask = attention_mask.bool()
        ctx = torch.where(mask[..., None], ctx, ctx.new_zeros(()))
        return ctx, mask

    def _hidden(self, kwargs: dict) -> torch.Tensor:
        base = self._base()
        if self.layer == self.num_layers:
            return base(**kwargs).last_hidden_state
        if self._layers is None:   # generic fallback: all layers, pick one
            return base(**kwargs, output_hidden_states=True).hidden_states[self.layer]

        def after(module, args, output):
            raise _EarlyExit(output[0] if isinstance(output, tuple) else output)

        def before(module, args, kw):
            raise _EarlyExit(args[0] if args else kw["hidden_states"])

        if self.layer == 0:
            handle = self._layers[0].register_forward_pre_hook(before, with_kwargs=True)
        else:
            handle = self._layers[self.layer - 1].register_forward_hook(after)
        try:
            base(**kwargs)
        except _EarlyExit as stop:
            return stop.hidden
        finally:
            handle.remove()
        raise RuntimeError(f"Backbone: decoder layer {self.layer} was never reached")

    def encode(self, images_per_sample: Sequence[Sequence[np.ndarray]], texts: Sequence[str],
               instructions: Sequence[str] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Images (uint8 HxWx3, per sample) + texts -> (ctx, ctx_mask) for a batch.

        `texts` are the text part after the images (usually `text_body(embodiment.prompt(),
        instruction)`); when `instructions` is given, `texts` are embodiment prompts and each is
        joined with its instruction. Respects the grad mode: use `torch.inference_mode()` to act.
        """
        return self.forward(**self.prepare(images_per_sample, texts, instructions))

    def prepare(self, images_per_sample: Sequence[Sequence[np.ndarray]], texts: Sequence[str],
                instructions: Sequence[str] | None = None) -> dict:
        """`encode`'s inputs as a dict for `forward(**batch)`: input_ids, attention_mask,
        pixel_values, image_grid_thw (the last two None when the batch has no image)."""
        if len(images_per_sample) != len(texts):
            raise ValueError(f"encode: {len(images_per_sample)} image lists but {len(texts)} texts")
        if instructions is not None:
            if len(instructions) != len(texts):
                raise ValueError(f"encode: {len(texts)} texts but {len(instructions)} instructions")
            texts = [text_body(t, i) for t, i in zip(texts, instructions)]
        flat = [img for imgs in images_per_sample for img in imgs]
        pixel_values = grid = None
        if flat:
            resized = self.preprocess_images(flat)
            pixel_values, grid = self.patchify(resized)
            # from the cameras' sizes on the host: reading the grid back would wait for the device
            counts = [self.image_tokens(*img.shape[:2]) for img in flat]
        full, k = [], 0
        for imgs, text in zip(images_per_sample, texts):
            n = len(imgs)
            full.append(self.prompt_text("", text, n, counts[k:k + n] if n else []))
            k += n
        input_ids, attention_mask = self.tokenize(full)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "pixel_values": pixel_values,
                "image_grid_thw": grid}


def load_image_processor(src: str, auto_cls):
    try:
        return auto_cls.from_pretrained(src, backend="pil")
    except TypeError:
        return auto_cls.from_pretrained(src)


# -- heads saved beside a checkpoint's backbone (the GUI head, the success head) ------------------------
def backbone_sha256(checkpoint) -> str:
    """The hash that ties a head to the backbone it was trained on."""
    from embodia.memory.files import sha256_file
    return sha256_file(Path(checkpoint) / "backbone" / "model.safetensors")


def read_head_files(checkpoint, weights_name: str, config_name: str, fmt: str, error, *, what: str,
                    retrain: str) -> tuple[dict, dict]:
    """(meta, weights) of a head saved as ``weights_name`` + ``config_name`` in ``checkpoint``;
    ``error(message)`` (an exception class) names the file that is missing, corrupt, of another
    format or trained on another backbone; ``retrain`` says how to make a new one."""
    from safetensors.torch import load_file
    p = Path(checkpoint)
    if not ((p / weights_name).is_file() and (p / config_name).is_file()):
        raise error(f"checkpoint {p}: no {what} ({weights_name} + {config_name}); train one with {retrain}")
    try:
        meta = json.loads((p / config_name).read_text())
    except (OSError, ValueError) as e:
        raise error(f"{p / config_name}: corrupt ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != fmt:
        raise error(f"{p / config_name}: not a {what} (format {meta.get('format') if isinstance(meta, dict) else None!r})")
    if meta.get("backbone_sha256") != backbone_sha256(p):
        raise error(f"{p / config_name}: trained on another backbone than {p / 'backbone'} (weights hash "
                    f"differs); retrain it with {retrain}")
    try:
        weights = load_file(p / weights_name)
    except Exception as e:  # noqa: BLE001 - safetensors raises several types
        raise error(f"{p / weights_name}: corrupt ({e})") from None
    return meta, weights

