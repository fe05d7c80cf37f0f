"""The backbone prefix as one replayed CUDA graph per camera set-up and prompt length.

A decision's prefix (Qwen2.5-VL's vision tower over every camera, then the decoder up to the layer
the action head reads) is a few thousand small kernels. Run by transformers it cannot be captured:
the vision tower builds its window permutation and sequence lengths on the host at every call and
splits its attention with ``lengths.tolist()`` (issue 38: ``Cannot copy between CPU and CUDA tensors
during CUDA graph capture``). Everything it builds on the host depends only on the image grids and
on where the image placeholders sit in the prompt, so `GraphedPrefix` builds it once per such
layout (a `_Plan`: the window permutation and its inverse, how each block splits its attention, the
vision and text rotary tables, the placeholders' positions), keeps the forward on the device with the
model's own modules (windows of equal size attend as one batch, in one fused attention call without a
mask, in place of the per-window split; unequal ones through a block-diagonal mask; the text layers
attend causally without a mask, so SDPA can take its flash kernels), and captures that forward,
projection included, as one CUDA graph. A
decision then copies its token ids and patches into the graph's input buffers and replays it.

Safety: each new layout is first run eagerly both ways and compared (relative error under 1e-3 in
float32, 5e-2 in half precision); a layout that differs, a batch that is not one unpadded sample
with images, or a model that is not Qwen2.5-VL with SDPA attention runs the eager path, as before.

Opt-in (``$EMBODIA_COMPILE_PREFIX=1``, or ``compile=True``): each vision block and text layer inside
the graph runs ``torch.compile`` of `vision_block` / `text_layer` (inductor fuses the RMS norms,
rotary embeddings, SiLU gates and residual adds that otherwise cost a kernel each), one compilation
per block kind and segment length. Fused kernels round differently, and a deep half-precision network
grows that end to end (relative error 0.07 on the pi0-sized benchmark model, over the bound), so the
compiled blocks are compared block by block with the uncompiled ones on the same
inputs, under the same bounds; the end-to-end figure is kept in ``compiled_errors``. A compilation
that fails, or a block that differs, is said once and the layout is captured uncompiled.
CUDA only, like the sampler's graphs (`embodia.action_heads.graphs`).
"""
from __future__ import annotations

import warnings
from typing import Callable, Optional

import numpy as np
import torch
import torch.nn.functional as F

from embodia.action_heads.graphs import compile_setting, cuda_capture, one_line

__all__ = ["GraphedPrefix", "window_index", "vision_block", "text_layer", "PREFIX_COMPILE_ENV"]

PREFIX_COMPILE_ENV = "EMBODIA_COMPILE_PREFIX"   # "1": torch.compile the vision blocks and text layers in the graph


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


def _segments(cu_seqlens: list[int], n: int, device):
    """How one block's attention is split: an int (the segment length) where ``cu_seqlens`` cuts the
    n tokens into equal segments (each image's windows of a camera set-up usually are: they then
    attend as a batch, one fused kernel without a mask), else the block-diagonal mask."""
    lengths = np.diff(np.asarray(cu_seqlens))
    lengths = lengths[lengths > 0]
    if len(lengths) and lengths.sum() == n and np.all(lengths == lengths[0]):
        return int(lengths[0])
    return _segments_mask(cu_seqlens, n, device)


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
        splits: dict[tuple, object] = {}
        self.block_masks = []       # per block: a segment length (equal segments) or a [1, 1, n, n] mask
        for i in range(len(vis.blocks)):
            cu = tuple(int(v) for v in seen[i]["cu_seqlens"].tolist())
            self.block_masks.append(splits.setdefault(cu, _segments(list(cu), n, dev)))
        # the text side: positions (M-RoPE), their rotary table, where images go
        ids = input_ids.to(dev)
        positions = backbone.mrope_positions(ids, torch.ones_like(ids), grid)
        probe = torch.zeros(1, ids.shape[1], backbone.hidden_size, device=dev, dtype=backbone.dtype)
        self.text_rope = tuple(t.clone() for t in lm.rotary_emb(probe, positions))
        self.image_pos = (ids[0] == backbone.image_token_id).nonzero()[:, 0]
        self.depth = min(backbone.layer, backbone.num_layers)


def _vision_attention(attn, x: torch.Tensor, split, rotary, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``split``: a segment length (the segments attend as a batch) or a block-diagonal mask."""
    s = x.shape[0]
    q, k, v = attn.qkv(x).reshape(s, 3, attn.num_heads, -1).permute(1, 0, 2, 3).unbind(0)
    q, k = rotary(q, k, cos, sin)
    if isinstance(split, int):          # [s, h, d] -> [s / L segments, h, L, d]
        q, k, v = (t.reshape(s // split, split, *t.shape[1:]).transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v)
        return attn.proj(out.transpose(1, 2).reshape(s, -1))
    q, k, v = (t.transpose(0, 1)[None] for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=split)
    return attn.proj(out[0].transpose(0, 1).reshape(s, -1))


def vision_block(blk, h: torch.Tensor, split, rotary, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """One vision block with the plan's split and rotary table (a function of the block, so that one
    compilation serves them all)."""
    h = h + _vision_attention(blk.attn, blk.norm1(h), split, rotary, cos, sin)
    return h + blk.mlp(blk.norm2(h))


def text_layer(layer, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """One decoder layer of one unpadded sample: causal attention without a mask."""
    out = layer(x, attention_mask=None, position_embeddings=(cos, sin))
    return out[0] if isinstance(out, tuple) else out


def _relative_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    return float((got.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-12))


def _probed(plain: Callable, fast: Callable, errors: list) -> Callable:
    """``plain``, also running ``fast`` on the same input and noting its relative error."""
    def run(*args):
        out = plain(*args)
        errors.append(_relative_error(fast(*args), out))
        return out
    return run


class GraphedPrefix:
    """``prefix(batch)`` -> ``(ctx, ctx_mask)`` of ``project(backbone(**batch))`` by a replayed graph,
    or None where the eager path must run (see the module docstring). ``batch`` is
    `Backbone.prepare`'s dict; ``project`` the VLA's context projection."""

    def __init__(self, backbone, project: Callable[[torch.Tensor], torch.Tensor], *,
                 capture=cuda_capture, devices: tuple[str, ...] = ("cuda",), compile: Optional[bool] = None,
                 compiler: Optional[Callable[[Callable], Callable]] = None):
        self.backbone, self.project = backbone, project
        self.capture, self.devices = capture, devices    # (tests replay an eager "capture" on the CPU)
        env_compile, mode = compile_setting(PREFIX_COMPILE_ENV)
        self.compile = env_compile if compile is None else compile
        self.compiler = compiler or (lambda fn: torch.compile(fn, dynamic=False, mode=mode))
        self.compiled: Optional[tuple[Callable, Callable]] = None
        self.block_errors: list[float] = []  # the compiled blocks' relative errors at the last capture
        self.compiled_errors: list[float] = []   # each compiled layout's end-to-end error against transformers
        self.captured: dict = {}
        self.failed: set = set()
        self.errors: list[float] = []        # each captured layout's relative error against transformers
        base = backbone._base()
        self.usable = (backbone._fast_positions and backbone._layers is not None
                       and getattr(backbone.model.config, "model_type", "") == "qwen2_5_vl"
                       and getattr(backbone.model.config, "_attn_implementation", "") == "sdpa"
                       and hasattr(base, "visual") and hasattr(base, "language_model"))

    # -- the forward on the device, with the plan's tables ----------------------------------------
    def forward(self, plan: _Plan, input_ids: torch.Tensor, pixel_values: torch.Tensor, *,
                compiled: bool = True, probe: Optional[list] = None) -> torch.Tensor:
        """The backbone's hidden states [1, T, hidden] at its layer, computed without the host; with
        the compiled blocks when asked and ``compiled``. ``probe`` (a list): run the uncompiled blocks
        and append each compiled block's relative error on the same input (`_capture_layout`)."""
        bb = self.backbone
        base = bb._base()
        vis, lm = base.visual, base.language_model
        vblock, tlayer = self.blocks(compiled and probe is None)
        if probe is not None:
            vblock, tlayer = (_probed(plain, fast, probe) for plain, fast in zip(self.blocks(False), self.blocks()))
        n = pixel_values.shape[0]
        unit = vis.spatial_merge_size ** 2
        h = vis.patch_embed(pixel_values)
        h = h.view(n // unit, unit, -1)[plan.window].reshape(n, -1)
        for blk, split in zip(vis.blocks, plan.block_masks):
            h = vblock(blk, h, split, plan.rotary, *plan.vis_rope)
        image = vis.merger(h)[plan.reverse]
        x = lm.embed_tokens(input_ids)
        x = x.index_copy(1, plan.image_pos, image[None].to(x.dtype))
        for layer in lm.layers[:plan.depth]:
            x = tlayer(layer, x, *plan.text_rope)
        if bb.layer == bb.num_layers:
            x = lm.norm(x)
        return x

    def blocks(self, compiled: bool = True) -> tuple[Callable, Callable]:
        """(vision block, text layer): compiled once each when asked (one compilation serves every
        block of a kind, their weights being its inputs; a vision block recompiles per segment length)."""
        if not (self.compile and compiled):
            return vision_block, text_layer
        if self.compiled is None:
            self.compiled = (self.compiler(vision_block), self.compiler(text_layer))
        return self.compiled

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
        """Plan, check and capture one layout, else None and one warning (the layout then stays eager)."""
        try:
            entry, err = self._capture_layout(ids_host, grid, pix, am)
        except (RuntimeError, ValueError) as e:      # this layout stays eager
            self.failed.add(key)
            warnings.warn(f"backbone prefix graph not used for this camera set-up: {e}", stacklevel=3)
            return None
        self.errors.append(err)
        self.captured[key] = entry
        return entry

    def _capture_layout(self, ids_host, grid, pix, am):
        """The layout checked against transformers, then captured: with the compiled blocks when asked
        and they pass their check, else (said once, compiling off from then on) uncompiled."""
        bb = self.backbone
        plan = _Plan(bb, ids_host, grid, pix)
        ids_buf = ids_host.to(bb.device).clone()
        pix_buf = pix.clone()
        ref, _ = bb(ids_host, am, pix, grid)
        tol = 1e-3 if bb.dtype == torch.float32 else 5e-2
        err = _relative_error(self.forward(plan, ids_buf, pix_buf, compiled=False), ref)
        if not err <= tol:
            raise ValueError(f"the device-side prefix differs from transformers' (relative error {err:.2e})")
        if self.compile:
            try:
                self._check_compiled(plan, ids_buf, pix_buf, ref, tol)
                return self._capture(plan, ids_buf, pix_buf), err
            except Exception as e:  # noqa: BLE001 - a compiler's failure or a block that differs: uncompiled
                self.compile, self.compiled = False, None
                warnings.warn(f"backbone prefix: compiled blocks not used, capturing it uncompiled: {one_line(e)}",
                              stacklevel=4)
        return self._capture(plan, ids_buf, pix_buf), err

    def _check_compiled(self, plan: _Plan, ids_buf, pix_buf, ref: torch.Tensor, tol: float) -> None:
        """Block by block against the uncompiled blocks: fused kernels round differently, and a deep
        network in half precision grows that end to end (see the module's docstring)."""
        probe: list[float] = []
        self.forward(plan, ids_buf, pix_buf, probe=probe)
        if not max(probe) <= tol:
            raise ValueError(f"a compiled block differs from the uncompiled one (relative error {max(probe):.2e})")
        self.block_errors = probe
        self.compiled_errors.append(_relative_error(self.forward(plan, ids_buf, pix_buf), ref))

    def _capture(self, plan: _Plan, ids_buf, pix_buf) -> tuple:
        def fn():
            return self.project(self.forward(plan, ids_buf, pix_buf))
        replay, out = self.capture(fn)
        # the graph reads the plan's tensors (window order, masks, tables) at every replay but holds no
        # reference to them: the entry keeps them alive, or their memory would be handed out again
        return ids_buf, pix_buf, replay, out, (plan, fn)
