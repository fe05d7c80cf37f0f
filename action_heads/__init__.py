"""action_heads: the DiT flow-matching action decoder and action/state normalisation.

Leaf package: depends only on torch, diffusers and numpy.
"""
from .dit import ActionDiT, flow_loss, grid_index, sample, sample_tau
from .normalize import QuantileNormalizer, make_action_mask, pad_to

__all__ = [
    "ActionDiT",
    "flow_loss",
    "sample",
    "sample_tau",
    "grid_index",
    "QuantileNormalizer",
    "pad_to",
    "make_action_mask",
]
