"""The backbone's image resize for a whole episode at once, as a small picklable value: a trainer
hands it to worker processes that decode and resize datasets' frames, and those workers import
neither torch nor transformers (the target sizes are computed by the `Backbone` in the parent).

The frames come out bit-identical to `Backbone.preprocess_images` on each frame (PIL bicubic):
PIL resizes in two separable passes (one per axis, each depending only on the input and output
sizes of its own axis), so a whole episode stacked into one tall image takes the row pass in one
call, and laid side by side into one wide image the column pass in another, instead of two passes
and a Python round-trip per frame. The order of the passes is PIL's choice, so it is found once per
change of size on a random image (`_first_pass`); where neither order gives PIL's bytes the frames
are resized one by one (tests/test_frame_loading.py checks the equality).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np


@dataclass(frozen=True)
class FrameResize:
    """uint8 [T, H, W, 3] -> [T, h, w, 3] for the frame sizes in ``targets`` ((H, W) -> (h, w));
    ``resample``: the PIL filter of the backbone's image processor.

    >>> r = FrameResize(targets=(((4, 6), (2, 3)),), resample=3)
    >>> r(np.zeros((5, 4, 6, 3), np.uint8)).shape
    (5, 2, 3, 3)
    """
    targets: tuple[tuple[tuple[int, int], tuple[int, int]], ...]
    resample: int

    def target(self, height: int, width: int) -> tuple[int, int]:
        """(h, w) frames of this size are resized to; ValueError for a size the backbone was not asked about."""
        for size, out in self.targets:
            if size == (height, width):
                return out
        known = ", ".join(f"{w}x{h}" for (h, w), _ in self.targets) or "none"
        raise ValueError(f"frames of {width}x{height}: the cameras are {known}")

    def __call__(self, frames: np.ndarray) -> np.ndarray:
        """The episode's frames resized (a fresh contiguous array; the input is left alone)."""
        if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[3] != 3:
            raise ValueError(f"FrameResize: frames must be uint8 [T, H, W, 3], got {frames.dtype} {frames.shape}")
        T, H, W, C = frames.shape
        h, w = self.target(H, W)
        if T == 0:
            return np.zeros((0, h, w, C), np.uint8)
        if (h, w) == (H, W):
            return frames.copy()
        first = _first_pass(H, W, h, w, self.resample)
        if first is None:
            return _each(frames, h, w, self.resample)
        return _two_passes(np.ascontiguousarray(frames), h, w, self.resample, first)


@lru_cache(maxsize=256)
def _first_pass(H: int, W: int, h: int, w: int, resample: int) -> str | None:
    """Which axis PIL resizes first for this change of size ("rows" or "columns"; None when neither
    order gives PIL's bytes), found on a random image: PIL picks the order itself (columns first
    when a frame grows wider and shorter, in Pillow 13) and the rounding between passes depends on it."""
    probe = np.random.default_rng(0).integers(0, 256, (2, H, W, 3), dtype=np.uint8)
    want = _each(probe, h, w, resample)
    for first in ("rows", "columns"):
        if np.array_equal(_two_passes(probe, h, w, resample, first), want):
            return first
    return None


def _each(frames: np.ndarray, h: int, w: int, resample: int) -> np.ndarray:
    from PIL import Image
    return np.stack([np.asarray(Image.fromarray(f).resize((w, h), resample=resample)) for f in frames])


def _two_passes(frames: np.ndarray, h: int, w: int, resample: int, first: str) -> np.ndarray:
    """Every frame resized by two PIL calls: the rows of all frames stacked into one tall image, the
    columns of all frames laid side by side into one wide image, in the order ``first`` says."""
    T, H, W, C = frames.shape
    if first == "rows":
        rows = _axis(frames.reshape(T * H, W, C), (w, T * H), resample)
        wide = rows.reshape(T, H, w, C).transpose(1, 0, 2, 3).reshape(H, T * w, C)
        cols = _axis(wide, (T * w, h), resample)
        return np.ascontiguousarray(cols.reshape(h, T, w, C).transpose(1, 0, 2, 3))
    wide = frames.transpose(1, 0, 2, 3).reshape(H, T * W, C)
    cols = _axis(wide, (T * W, h), resample)
    tall = cols.reshape(h, T, W, C).transpose(1, 0, 2, 3).reshape(T * h, W, C)
    return np.ascontiguousarray(_axis(tall, (w, T * h), resample).reshape(T, h, w, C))


def _axis(image: np.ndarray, size: tuple[int, int], resample: int) -> np.ndarray:
    """``image`` resized to ``size`` (W, H), which changes one axis at most (PIL then runs one pass)."""
    from PIL import Image
    if (image.shape[1], image.shape[0]) == size:     # this axis keeps its size: PIL would copy
        return image
    return np.asarray(Image.fromarray(np.ascontiguousarray(image)).resize(size, resample=resample))
