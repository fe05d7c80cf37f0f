"""Per-channel quantile normalisation to [-1, 1] and padding to the shared D_max interface.

Works on numpy arrays and torch tensors (the output has the input's type, dtype and device).
The channel axis is the last one; any leading shape broadcasts.
"""
from __future__ import annotations

import json
from typing import Optional, Sequence, Tuple, Union

import numpy as np
import torch

__all__ = ["QuantileNormalizer", "pad_to", "make_action_mask"]

ArrayLike = Union[np.ndarray, torch.Tensor]


def _like(stat: np.ndarray, x: ArrayLike):
    if isinstance(x, torch.Tensor):
        dtype = x.dtype if x.is_floating_point() else torch.float32
        return torch.as_tensor(stat, dtype=dtype, device=x.device)
    return stat.astype(x.dtype if np.issubdtype(np.asarray(x).dtype, np.floating) else np.float64)


def _float(x: ArrayLike):
    if isinstance(x, torch.Tensor):
        return x if x.is_floating_point() else x.float()
    x = np.asarray(x)
    return x if np.issubdtype(x.dtype, np.floating) else x.astype(np.float64)


class QuantileNormalizer:
    """x -> 2 (x - q01) / (q99 - q01) - 1, clipped to [-1, 1]; inverse maps back.

    Channels with ``q99 - q01 <= eps`` are constant: they normalise to 0 and unnormalise to
    ``(q01 + q99) / 2``. Binary channels (a gripper in {0, 1}) map to {-1, 1} and back exactly.
    """

    def __init__(self, q01: Sequence[float], q99: Sequence[float], eps: float = 1e-6):
        self.q01 = np.asarray(q01, dtype=np.float64).reshape(-1)
        self.q99 = np.asarray(q99, dtype=np.float64).reshape(-1)
        if self.q01.shape != self.q99.shape:
            raise ValueError(f"q01 {self.q01.shape} and q99 {self.q99.shape} differ")
        if not (np.all(np.isfinite(self.q01)) and np.all(np.isfinite(self.q99))):
            raise ValueError("quantiles must be finite")
        if np.any(self.q99 < self.q01 - eps):
            raise ValueError("q99 < q01 on some channel")
        self.eps = float(eps)
        rng = self.q99 - self.q01
        self.constant = rng <= self.eps                              # [D] bool
        self._center = 0.5 * (self.q01 + self.q99)
        self._half = np.where(self.constant, 1.0, 0.5 * rng)         # avoid /0 on constant channels
        self._scale = np.where(self.constant, 0.0, 1.0)              # constant channels -> 0

    @property
    def dim(self) -> int:
        return int(self.q01.shape[0])

    @classmethod
    def from_data(cls, x: ArrayLike, lo: float = 0.01, hi: float = 0.99, eps: float = 1e-6):
        """Fit per-channel quantiles on data [..., D] (all leading axes pooled)."""
        if isinstance(x, torch.Tensor):
            x = x.detach().cpu().numpy()
        x = np.asarray(x, dtype=np.float64).reshape(-1, np.shape(x)[-1])
        return cls(np.quantile(x, lo, axis=0), np.quantile(x, hi, axis=0), eps=eps)

    fit = from_data      # alias

    def _check(self, x: ArrayLike):
        if x.shape[-1] != self.dim:
            raise ValueError(f"last axis is {x.shape[-1]}, the normaliser has {self.dim} channels")

    def normalize(self, x: ArrayLike, clip: bool = True) -> ArrayLike:
        x = _float(x)
        self._check(x)
        y = (x - _like(self._center, x)) / _like(self._half, x) * _like(self._scale, x)
        if clip:
            y = y.clamp(-1.0, 1.0) if isinstance(y, torch.Tensor) else np.clip(y, -1.0, 1.0)
        return y

    def unnormalize(self, y: ArrayLike, clip: bool = True) -> ArrayLike:
        y = _float(y)
        self._check(y)
        if clip:
            y = y.clamp(-1.0, 1.0) if isinstance(y, torch.Tensor) else np.clip(y, -1.0, 1.0)
        return y * _like(self._half * self._scale, y) + _like(self._center, y)

    __call__ = normalize

    def to_dict(self) -> dict:
        return {"q01": [float(v) for v in self.q01], "q99": [float(v) for v in self.q99], "eps": self.eps}

    @classmethod
    def from_dict(cls, d: dict) -> "QuantileNormalizer":
        return cls(d["q01"], d["q99"], eps=float(d.get("eps", 1e-6)))

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, s: str) -> "QuantileNormalizer":
        return cls.from_dict(json.loads(s))

    def __repr__(self) -> str:
        return f"QuantileNormalizer(dim={self.dim}, constant={int(self.constant.sum())})"

    def __eq__(self, other) -> bool:
        return (isinstance(other, QuantileNormalizer) and np.array_equal(self.q01, other.q01)
                and np.array_equal(self.q99, other.q99) and self.eps == other.eps)


def pad_to(x: ArrayLike, d_max: int, value: float = 0.0) -> Tuple[ArrayLike, ArrayLike]:
    """Pad the last axis of x [..., D] to d_max. Returns (padded [..., d_max], mask [..., d_max])
    where mask is 1.0 on the D real channels and 0.0 on pads (same type/dtype family as x)."""
    d = x.shape[-1]
    if d > d_max:
        raise ValueError(f"dim {d} exceeds d_max {d_max}")
    if isinstance(x, torch.Tensor):
        xf = x if x.is_floating_point() else x.float()
        out = torch.full((*x.shape[:-1], d_max), value, dtype=xf.dtype, device=x.device)
        out[..., :d] = xf
        mask = torch.zeros((*x.shape[:-1], d_max), dtype=xf.dtype, device=x.device)
        mask[..., :d] = 1.0
        return out, mask
    xf = _float(x)
    out = np.full((*xf.shape[:-1], d_max), value, dtype=xf.dtype)
    out[..., :d] = xf
    mask = np.zeros((*xf.shape[:-1], d_max), dtype=xf.dtype)
    mask[..., :d] = 1.0
    return out, mask


def make_action_mask(dim: int, horizon: int, d_max: int, valid_steps: Optional[int] = None,
                     torch_out: bool = True, dtype=torch.float32):
    """[horizon, d_max] 0/1 mask: the first ``dim`` channels x the first ``valid_steps`` timesteps."""
    if dim > d_max:
        raise ValueError(f"dim {dim} exceeds d_max {d_max}")
    vs = horizon if valid_steps is None else max(0, min(int(valid_steps), horizon))
    m = np.zeros((horizon, d_max), dtype=np.float32)
    m[:vs, :dim] = 1.0
    return torch.as_tensor(m, dtype=dtype) if torch_out else m
