"""The image side of `Backbone`: the size an image is resized to (Qwen2-VL's ``smart_resize``
within the processor's pixel bounds), the resize itself and the patches, computed as
`Qwen2VLImageProcessorPil` would but batched on the GPU. A mixin, so `backbone.py` keeps
construction, text and the model."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from embodia.policies.frame_resize import FrameResize

DEFAULT_MIN_PIXELS = 56 * 56
DEFAULT_MAX_PIXELS = 128 * 128       # 96x96 -> 84x84 (9 tokens); 128x128 -> 112x112 (16); 480x640 -> 84x140 (15)


def smart_resize(height: int, width: int, factor: int = 28, min_pixels: int = DEFAULT_MIN_PIXELS,
                 max_pixels: int = DEFAULT_MAX_PIXELS) -> tuple[int, int]:
    """Qwen2-VL's target (height, width): multiples of `factor`, pixel count within the bounds."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize as _sr
    return _sr(height, width, factor=factor, min_pixels=min_pixels, max_pixels=max_pixels)


def size_bounds(image_processor) -> tuple[int, int]:
    size = image_processor.size
    get = size.get if isinstance(size, dict) else (lambda k, d=None: getattr(size, k, d))
    lo = get("shortest_edge") or getattr(image_processor, "min_pixels", None) or DEFAULT_MIN_PIXELS
    hi = get("longest_edge") or getattr(image_processor, "max_pixels", None) or DEFAULT_MAX_PIXELS
    return int(lo), int(hi)


class ImageInput:
    """Images for a `Backbone` (its ``image_processor``, ``image_size``, patch and merge sizes)."""

    # -- images -----------------------------------------------------------------------------------
    def target_size(self, height: int, width: int) -> tuple[int, int]:
        """(h, w) an image of this size is resized to."""
        if self.image_size is not None:
            return self.image_size[1], self.image_size[0]
        return smart_resize(height, width, self.factor, self.min_pixels, self.max_pixels)

    def image_tokens(self, height: int, width: int) -> int:
        """Image placeholder tokens for a camera of this (raw) size, e.g. 96x96 -> 9 by default."""
        h, w = self.target_size(height, width)
        return (h // self.patch_size) * (w // self.patch_size) // self.merge_size ** 2

    def preprocess_images(self, images: Sequence[np.ndarray]):
        """Resize uint8 HxWx3 images as the Qwen processor would (PIL bicubic); cacheable.

        Returns uint8 [N, h, w, 3] (a list of [h_i, w_i, 3] tensors when target sizes differ).
        """
        from PIL import Image

        out = []
        resample = self._resample()
        for i, img in enumerate(images):
            a = img.numpy() if isinstance(img, torch.Tensor) else np.asarray(img)
            if a.dtype != np.uint8 or a.ndim != 3 or a.shape[2] != 3:
                raise ValueError(f"preprocess_images: image {i} must be uint8 HxWx3, got {a.dtype} {a.shape}")
            h, w = self.target_size(a.shape[0], a.shape[1])
            if (h, w) != a.shape[:2]:
                a = np.asarray(Image.fromarray(a).resize((w, h), resample=resample))
            out.append(torch.from_numpy(np.array(a, copy=True)))
        if out and all(t.shape == out[0].shape for t in out):
            return torch.stack(out)
        return out

    def _resample(self) -> int:
        """The PIL filter of the image processor (bicubic when it names none)."""
        from PIL import Image
        resample = getattr(self.image_processor, "resample", None)
        return int(Image.Resampling.BICUBIC if resample is None else resample)

    def frame_resize(self, sizes) -> FrameResize:
        """`preprocess_images` for whole episodes of frames of the given (height, width) sizes, as a
        value a worker process can run without this backbone (`FrameResize`)."""
        targets = tuple(((int(h), int(w)), tuple(self.target_size(int(h), int(w)))) for h, w in dict.fromkeys(sizes))
        return FrameResize(targets=targets, resample=self._resample())

    def _make_lut(self) -> torch.Tensor:
        """[3, 256] float32: the processor's rescale (float64, then float32) and normalize (float32)."""
        ip = self.image_processor
        v = np.arange(256, dtype=np.float64)
        if getattr(ip, "do_rescale", True):
            v = v * float(ip.rescale_factor)
        v = np.broadcast_to(v.astype(np.float32), (3, 256)).copy()
        if getattr(ip, "do_normalize", True):
            mean = np.array(ip.image_mean, dtype=np.float32).reshape(-1, 1)
            std = np.array(ip.image_std, dtype=np.float32).reshape(-1, 1)
            v = (v - mean) / std
        return torch.from_numpy(v.astype(np.float32))

    def patchify(self, resized) -> tuple[torch.Tensor, torch.Tensor]:
        """uint8 [N, h, w, 3] (or a list of [h_i, w_i, 3]) -> (pixel_values [sum patches, C*T*p*p],
        image_grid_thw [N, 3]); equals `Qwen2VLImageProcessorPil` on the same resized images."""
        if isinstance(resized, torch.Tensor):
            if resized.ndim == 3:
                resized = resized[None]
            return self._patchify_batch(resized)
        parts = [self._patchify_batch(t[None] if t.ndim == 3 else t) for t in resized]
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])

    def _patchify_batch(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if x.dtype != torch.uint8 or x.ndim != 4 or x.shape[-1] != 3:
            raise ValueError(f"patchify: expected uint8 [N, h, w, 3], got {x.dtype} {tuple(x.shape)}")
        n, h, w, c = x.shape
        p, m, t = self.patch_size, self.merge_size, self.temporal_patch_size
        if h % (p * m) or w % (p * m):
            raise ValueError(f"patchify: image size {h}x{w} is not a multiple of patch*merge={p * m}; "
                             f"use preprocess_images first")
        lut = self._pixel_lut
        x = x.to(lut.device)
        idx = x.permute(0, 3, 1, 2).long() + torch.arange(c, device=lut.device).view(1, c, 1, 1) * 256
        v = lut.view(-1)[idx]                                            # [N, C, h, w] float32
        gh, gw = h // p, w // p
        v = v.view(n, c, gh // m, m, p, gw // m, m, p).permute(0, 2, 5, 3, 6, 1, 4, 7)
        v = v.unsqueeze(6).expand(n, gh // m, gw // m, m, m, c, t, p, p)
        pixel_values = v.reshape(n * gh * gw, c * t * p * p).to(self.dtype)
        grid = torch.tensor([[1, gh, gw]], dtype=torch.long, device=lut.device).expand(n, 3).clone()
        return pixel_values, grid
