"""The backbone prefix as one replayed CUDA graph per camera set-up and prompt length.

A decision's prefix (Qwen2.5-VL's vision tower over every camera, then the decoder up to the layer
the action head reads) is a few thousand small kernels. Run by transformers it cannot be captured:
the vision tower builds its window permutation and sequence lengths on the host at every call and
splits its attention with ``lengths.tolist()`` (issue 38: ``Cannot copy between CPU and CUDA tensors
during CUDA graph capture``). Everything it builds on the host depends only on the image grids and
on where the image placeholders sit in the prompt, so `GraphedPrefix` builds it once per such
layout (a `_Plan`: the window permutation and its inverse, one attention mask per block, the vision
and text rotary tables, the causal mask, the placeholders' positions), keeps the forward on the
device with the model's own modules (a block-diagonal mask in one fused attention call in place of
the per-window split), and captures that forward, projection included, as one CUDA graph. A
decision then copies its token ids and patches into the graph's input buffers and replays it.

Safety: each new layout is first run eagerly both ways and compared (relative error under 1e-3 in
float32, 5e-2 in half precision); a layout that differs, a batch that is not one unpadded sample
with images, or a model that is not Qwen2.5-VL with SDPA attention runs the eager path, as before.
CUDA only, like the sampler's graphs (`embodia.action_heads.graphs`).
"""
from __future__ import annotations

import warnings
from typing import Callable, Optional

import numpy as np
import torch
import torch.nn.functional as F

from embodia.action_heads.graphs import cuda_capture

__all__ = ["GraphedPrefix", "window_index"]


def window_index(grids: list[tuple[int, int, int]], merge: int, window: int, patch: int) -> np.ndarray:
    """Qwen2.5-VL's order of the merged patches for windowed attention: per image, windows of
    ``window // merge // patch`` merged patches a side, row by row, each window's patches row by row
    (images offset one after another). Index i of the result is the merged patch placed i-th."""
    side = window // merge // patch
    out, offset = [], 0
    for t, h, w in grids:
        gh, gw = h // merge, w // merge
        idx = np.arange(t * gh * gw).reshape(t, gh, gw)
        ph, pw = -gh % side, -gw % side
        padded = np.pad(idx, ((0, 0), (0, ph), (0, pw)), constant_values=-1)
        nh, nw = (gh + ph) // side, (gw + pw) // side
        tiles = padded.reshape(t, nh, side, nw, side).transpose(0, 1, 3, 2, 4).reshape(-1)
        out.append(tiles[tiles >= 0] + offset)
        offset += t * gh * gw
    return np.concatenate(out)


def _segments_mask(cu_seqlens: list[int], n: int, device) -> torch.Tensor:
    """Bool [1, 1, n, n]: True where two tokens lie in the same segment of ``cu_seqlens``."""
    seg = np.searchsorted(np.asarray(cu_seqlens[1:]), np.arange(n), side="right")
    s = torch.as_tensor(seg, device=device)
    return (s[:, None] == s[None, :])[None, None]


class _Plan:
    """What one layout (image grids, placeholder positions, prompt length) needs, built once."""

    def __init__(self, backbone, input_ids: torch.Tensor, grid: torch.Tensor, pixel_values: torch.Tensor):
        from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import apply_rotary_pos_emb_vision
        self.rotary = apply_rotary_pos_emb_vision
        base = backbone._base()
        vis, lm = base.visual, base.language_model
        dev = backbone.device
        grids = [tuple(int(v) for v in g) for g in grid.tolist()]
        unit = vis.spatial_merge_size ** 2
        order = window_index(grids, vis.spatial_merge_size, vis.window_size, vis.patch_size)
        self.window = torch.as_tensor(order, device=dev)
        self.reverse = torch.as_tensor(np.argsort(order), device=dev)
        n = int(pixel_values.shape[0])
        if n != len(order) * unit:
            raise ValueError(f"{n} patches but the grids give {len(order) * unit}")
        # the model's own rotary table and per-block sequence bounds, read off one eager call
        seen: dict[int, dict] = {}
        hooks = [blk.register_forward_pre_hook(lambda m, a, kw, i=i: seen.__setitem__(i, kw), with_kwargs=True)
                 for i, blk in enumerate(vis.blocks)]
        try:
            vis(pixel_values, grid_thw=grid)
        finally:
            for h in hooks:
                h.remove()
        if len(seen) != len(vis.blocks) or "position_embeddings" not in seen[0]:
            raise ValueError("the vision blocks were not called with position_embeddings and cu_seqlens")
        self.vis_rope = tuple(t.clone() for t in seen[0]["position_embeddings"])
        masks: dict[tuple, torch.Tensor] = {}
        self.block_masks = []
        for i in range(len(vis.blocks)):
            cu = tuple(int(v) for v in seen[i]["cu_seqlens"].tolist())
            self.block_masks.append(masks.setdefault(cu, _segments_mask(list(cu), n, dev)))
        # the text side: positions (M-RoPE), their rotary table, the causal mask, where images go
        ids = input_ids.to(dev)
        positions = backbone.mrope_positions(ids, torch.ones_like(ids), grid)
        probe = torch.zeros(1, ids.shape[1], backbone.hidden_size, device=dev, dtype=backbone.dtype)
        self.text_rope = tuple(t.clone() for t in lm.rotary_emb(probe, positions))
        t = ids.shape[1]
        self.causal = torch.ones(t, t, dtype=torch.bool, device=dev).tril()[None, None]
        self.image_pos = (ids[0] == backbone.image_token_id).nonzero()[:, 0]
        self.depth = min(backbone.layer, backbone.num_layers)


class GraphedPrefix:
    """``prefix(batch)`` -> ``(ctx, ctx_mask)`` of ``project(backbone(**batch))`` by a replayed graph,
    or None where the eager path must run (see the module docstring). ``batch`` is
    `Backbone.prepare`'s dict; ``project`` the VLA's context projection."""

    def __init__(self, backbone, project: Callable[[torch.Tensor], torch.Tensor], *,
                 capture=cuda_capture, devices: tuple[str, ...] = ("cuda",)):
        self.backbone, self.project = backbone, project
        self.capture, self.devices = capture, devices    # (tests replay an eager "capture" on the CPU)
        self.captured: dict = {}
        self.failed: set = set()
        self.errors: list[float] = []        # each captured layout's relative error against transformers
        base = backbone._base()
        self.usable = (backbone._fast_positions and backbone._layers is not None
                       and getattr(backbone.model.config, "model_type", "") == "qwen2_5_vl"
                       and getattr(backbone.model.config, "_attn_implementation", "") == "sdpa"
                       and hasattr(base, "visual") and hasattr(base, "language_model"))

    # -- the forward on the device, with the plan's tables ----------------------------------------
    def _vision_attention(self, plan: _Plan, attn, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        s = x.shape[0]
        q, k, v = attn.qkv(x).reshape(s, 3, attn.num_heads, -1).permute(1, 0, 2, 3).unbind(0)
        q, k = plan.rotary(q, k, *plan.vis_rope)
        q, k, v = (t.transpose(0, 1)[None] for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return attn.proj(out[0].transpose(0, 1).reshape(s, -1))

    def forward(self, plan: _Plan, input_ids: torch.Tensor, pixel_values: torch.Tensor) -> torch.Tensor:
        """The backbone's hidden states [1, T, hidden] at its layer, computed without the host."""
        bb = self.backbone
        base = bb._base()
        vis, lm = base.visual, base.language_model
        n = pixel_values.shape[0]
        unit = vis.spatial_merge_size ** 2
        h = vis.patch_embed(pixel_values)
        h = h.view(n // unit, unit, -1)[plan.window].reshape(n, -1)
        for blk, mask in zip(vis.blocks, plan.block_masks):
            h = h + self._vision_attention(plan, blk.attn, blk.norm1(h), mask)
            h = h + blk.mlp(blk.norm2(h))
        image = vis.merger(h)[plan.reverse]
        x = lm.embed_tokens(input_ids)
        x = x.index_copy(1, plan.image_pos, image[None].to(x.dtype))
        for layer in lm.layers[:plan.depth]:
            out = layer(x, attention_mask=plan.causal, position_embeddings=plan.text_rope)
            x = out[0] if isinstance(out, tuple) else out
        if bb.layer == bb.num_layers:
            x = lm.norm(x)
        return x

    # -- per decision -----------------------------------------------------------------------------
    def __call__(self, batch: dict) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
        ids, am, pix, grid = (batch["input_ids"], batch["attention_mask"], batch["pixel_values"],
                              batch["image_grid_thw"])
        if (not self.usable or pix is None or ids.shape[0] != 1 or not bool(am.all())
                or pix.device.type not in self.devices):
            return None
        ids_host = ids.cpu()
        key = (tuple(ids.shape), tuple(map(tuple, grid.tolist())), tuple(pix.shape), pix.dtype,
               (ids_host[0] == self.backbone.image_token_id).numpy().tobytes())
        if key in self.failed:
            return None
        entry = self.captured.get(key)
        if entry is None:
            entry = self._build(key, ids_host, grid, pix, am)
            if entry is None:
                return None
        ids_buf, pix_buf, replay, out, _ = entry
        ids_buf.copy_(ids_host, non_blocking=True)
        pix_buf.copy_(pix)
        replay()
        ctx = out.clone()                      # the next replay overwrites the static output
        return ctx, torch.ones(ctx.shape[:2], dtype=torch.bool, device=ctx.device)

    def _build(self, key, ids_host, grid, pix, am):
        bb = self.backbone
        try:
            plan = _Plan(bb, ids_host, grid, pix)
            ids_buf = ids_host.to(bb.device).clone()
            pix_buf = pix.clone()
            ref, _ = bb(ids_host, am, pix, grid)
            mine = self.forward(plan, ids_buf, pix_buf)
            err = float((mine.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-12))
            tol = 1e-3 if bb.dtype == torch.float32 else 5e-2
            if not err <= tol:
                raise ValueError(f"the device-side prefix differs from transformers' (relative error {err:.2e})")
            def fn():
                return self.project(self.forward(plan, ids_buf, pix_buf))
            replay, out = self.capture(fn)
        except (RuntimeError, ValueError) as e:      # this layout stays eager
            self.failed.add(key)
            warnings.warn(f"backbone prefix graph not used for this camera set-up: {e}", stacklevel=3)
            return None
        self.errors.append(err)
        # the graph reads the plan's tensors (window order, masks, tables) at every replay but holds no
        # reference to them: the entry keeps them alive, or their memory would be handed out again
        self.captured[key] = entry = (ids_buf, pix_buf, replay, out, (plan, fn))
        return entry
