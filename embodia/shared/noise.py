"""The Gaussian draw every flow sampler starts from: training's, `sample`'s, a VLA's decision and a
steered decision draw it here, so the same generator state gives the same noise bit for bit wherever
it is drawn (an unsteered decision equals a plain one; a recalled seed replays its noise)."""
from __future__ import annotations

from typing import Optional

import torch

__all__ = ["draw_noise"]


def draw_noise(shape, generator: Optional[torch.Generator], device, dtype) -> torch.Tensor:
    """Standard normal noise of ``shape``, drawn from ``generator`` on the generator's own device,
    then moved to ``device``: the draw depends on the generator, not on where the model runs."""
    gdev = generator.device if generator is not None else device
    return torch.randn(shape, generator=generator, device=gdev, dtype=dtype).to(device)
