"""action_heads: the DiT flow-matching action decoder and action/state normalisation.

Leaf package: depends only on torch, diffusers and numpy.
"""
if __name__ != "embodia.action_heads":     # the folder is the source of embodia.action_heads, never a package of its own
    raise ModuleNotFoundError(f"no module named {__name__!r}: import embodia.action_heads", name=__name__)
from embodia.action_heads.dit import ActionDiT, flow_loss, grid_index, sample, sample_tau
from embodia.action_heads.normalize import QuantileNormalizer, make_action_mask, pad_to

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
