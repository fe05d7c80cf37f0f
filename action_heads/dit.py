"""DiT flow-matching action decoder (ARCHITECTURE.md section 4).

Flow convention: tau = 0 is pure noise, tau = 1 is data.

    X_tau = (1 - tau) * eps + tau * A,     target velocity u = A - eps,     Euler X <- X + dt * v

Every embodiment shares one padded tensor interface: actions are [B, H, D_max] with a 0/1
``action_mask`` of the same shape (valid channels x valid timesteps), and the proprio state is
[B, S_max] with a 0/1 ``state_mask``. Pads are zero in the inputs, the noise, the loss and the
sampler's iterates.

The network is a small DiT:

    tokens = [state token (+ embodiment code), R learned registers,
              H action tokens (+ sincos position over the horizon)]
    cvec   = MLP(sincos(tau * 1000)) + EmbTable[emb_id]             -> adaLN-Zero in every block
    block  : z += gate_msa * SelfAttn(modulate(LN z))
             z += CrossAttn(LN z, ctx tokens, key padding mask)       (output projection zero-init)
             z += gate_mlp * MLP(modulate(LN z))
    head   : v = Linear(modulate(LN z[:, -H:]))                       (zero-init)

All modulation weights, the cross-attention output projections and the output head are
zero-initialised, so every block is the identity and v == 0 at initialisation.

Everything that does not depend on (x, tau) -- the context keys/values of every block, the state
token and the embodiment embedding -- is computed once by :meth:`ActionDiT.prepare` and reused by
all the Euler steps of :func:`sample` and by all the ``repeats`` of :func:`flow_loss`.
"""
from __future__ import annotations

import math
from typing import Callable, Dict, Optional

import torch
import torch.nn.functional as F
from diffusers.configuration_utils import ConfigMixin, register_to_config
from diffusers.models.embeddings import (
    TimestepEmbedding,
    Timesteps,
    get_1d_sincos_pos_embed_from_grid,
)
from diffusers.models.modeling_utils import ModelMixin
from torch import nn

from embodia.shared.noise import draw_noise

__all__ = ["ActionDiT", "context_masks", "run_block", "fused_block", "PrefixPin", "euler", "flow_loss", "sample",
           "sample_tau", "grid_index", "TAU_SCALE", "BETA_ALPHA", "TAU_MAX"]

BETA_ALPHA = 1.5     # training time distribution: tau = TAU_MAX * (1 - Beta(BETA_ALPHA, 1))
TAU_MAX = 0.999
TAU_SCALE = 1000.0   # tau is embedded as sincos(tau * 1000), like a diffusion timestep


def _modulate(x: torch.Tensor, shift: torch.Tensor, scale1: torch.Tensor) -> torch.Tensor:
    # x [B, N, d]; shift / scale1 = (1 + scale) broadcast as [B, 1, d]
    return torch.addcmul(shift, x, scale1)


def _norm_modulate(norm: nn.LayerNorm, x: torch.Tensor, shift: torch.Tensor, scale1: torch.Tensor,
                   fused: bool) -> torch.Tensor:
    """``modulate(norm(x))``; ``fused`` with one sample (a policy's decision), the modulation is the
    affine of one layer-norm kernel instead of a second kernel (a GPU kernel may round once where
    eager rounds twice: equal to float rounding, not promised bit for bit, so only the captured GPU
    sampler takes it and the eager path stays as it was)."""
    if fused and x.shape[0] == 1 and not norm.elementwise_affine:
        d = x.shape[-1]
        return F.layer_norm(x, norm.normalized_shape, scale1.reshape(d), shift.reshape(d), norm.eps)
    return _modulate(norm(x), shift, scale1)


class _DiTBlock(nn.Module):
    """adaLN-Zero transformer block: gated self-attention, cross-attention, gated MLP.

    The modulation vectors (6 x dim) are produced outside the block (one batched Linear for all
    blocks) and passed in, so the block itself holds no conditioning weights.
    """

    def __init__(self, dim: int, heads: int, mlp_ratio: float):
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim={dim} must be divisible by heads={heads}")
        self.heads = heads
        self.head_dim = dim // heads
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.attn_out = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.q_cross = nn.Linear(dim, dim)
        self.kv_cross = nn.Linear(dim, 2 * dim)    # applied to the (projected) context in prepare()
        self.cross_out = nn.Linear(dim, dim)
        self.norm3 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        hidden = int(dim * mlp_ratio)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def _heads(self, t: torch.Tensor) -> torch.Tensor:      # [B, N, d] -> [B, h, N, hd]
        b, n, _ = t.shape
        return t.view(b, n, self.heads, self.head_dim).transpose(1, 2)

    def context_kv(self, ctx: torch.Tensor):
        k, v = self.kv_cross(ctx).chunk(2, dim=-1)
        return self._heads(k), self._heads(v)

    def forward(self, z, mod, k_ctx, v_ctx, attn_mask, has_ctx, fused: bool = False):
        # mod: [B, 6, 1, d] = shift, 1 + scale, gate for attention, then the same for the MLP
        sh1, sc1, g1, sh2, sc2, g2 = mod.unbind(1)
        b, n, d = z.shape
        h = _norm_modulate(self.norm1, z, sh1, sc1, fused)
        q, k, v = self.qkv(h).view(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v)
        z = torch.addcmul(z, g1, self.attn_out(a.transpose(1, 2).reshape(b, n, d)))

        q = self._heads(self.q_cross(self.norm2(z)))
        a = F.scaled_dot_product_attention(q, k_ctx, v_ctx, attn_mask=attn_mask)
        a = self.cross_out(a.transpose(1, 2).reshape(b, n, d))
        if has_ctx is not None:          # samples whose context is entirely masked get no cross-attn
            a = a * has_ctx
        z = z + a

        h = _norm_modulate(self.norm3, z, sh2, sc2, fused)
        return torch.addcmul(z, g2, self.fc2(F.gelu(self.fc1(h), approximate="tanh")))


def run_block(blk: _DiTBlock, z, mod, k_ctx, v_ctx, attn_mask, has_ctx) -> torch.Tensor:
    """One block as a function of the block: compiled once, it serves every block of that shape (the
    block's weights are the compiled graph's inputs), so a deep head compiles as fast as one block."""
    return blk(z, mod, k_ctx, v_ctx, attn_mask, has_ctx)


def fused_block(blk: _DiTBlock, z, mod, k_ctx, v_ctx, attn_mask, has_ctx) -> torch.Tensor:
    """One block with its layer norms and modulations in single kernels (`_norm_modulate`)."""
    return blk(z, mod, k_ctx, v_ctx, attn_mask, has_ctx, fused=True)


def context_masks(ctx: torch.Tensor, ctx_mask: Optional[torch.Tensor]):
    """(attn_mask [B, 1, 1, Nc] or None, any_real [B] bool or None) for cross-attention.

    SDPA yields NaN for a fully masked row: such a sample attends anywhere and ``any_real`` (given
    only when some sample has no real token) zeroes its cross-attention. With every token real no
    mask is needed. The checks read the mask on the host, so this stays outside captured graphs."""
    if ctx_mask is None:
        return None, None
    m = ctx_mask.to(device=ctx.device).bool() if ctx_mask.dtype == torch.bool else ctx_mask > 0.5
    any_real = m.any(dim=1)                                    # [B]
    if bool(any_real.all()):
        any_real = None
    else:
        m = m | ~any_real[:, None]
    return (None if bool(m.all()) else m[:, None, None, :]), any_real


class ActionDiT(ModelMixin, ConfigMixin):
    """Flow-matching action decoder v(X_tau, tau | ctx, state, embodiment).

    ``action_dim`` / ``state_dim`` are the padded maxima D_max / S_max; ``horizon`` is H.
    """

    config_name = "config.json"

    @register_to_config
    def __init__(
        self,
        action_dim: int = 8,
        state_dim: int = 48,
        horizon: int = 16,
        dim: int = 64,
        depth: int = 3,
        heads: int = 4,
        ctx_dim: int = 64,
        num_registers: int = 4,
        num_embodiments: int = 8,
        mlp_ratio: float = 4.0,
    ):
        super().__init__()
        self.depth = depth
        # --- conditioning vector: time + embodiment
        self.time_proj = Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=0)
        self.time_emb = TimestepEmbedding(256, dim)
        self.emb_table = nn.Embedding(num_embodiments, dim)
        # all blocks' adaLN modulation in one matmul: cvec -> [depth, 6, dim]; plus the head's 2 x dim
        self.adaln = nn.Linear(dim, depth * 6 * dim + 2 * dim)
        # --- tokens
        self.state_enc = nn.Linear(2 * state_dim, dim)           # [state * smask, smask]
        self.registers = nn.Parameter(torch.zeros(num_registers, dim))
        self.action_enc = nn.Linear(2 * action_dim, dim)         # [x * amask, amask]
        pos = get_1d_sincos_pos_embed_from_grid(
            dim, torch.arange(horizon, dtype=torch.float32), output_type="pt"
        )
        self.register_buffer("pos", pos.float().unsqueeze(0), persistent=False)   # [1, H, dim]
        # --- context
        self.ctx_proj = nn.Linear(ctx_dim, dim)
        self.ctx_norm = nn.LayerNorm(dim)
        self.blocks = nn.ModuleList([_DiTBlock(dim, heads, mlp_ratio) for _ in range(depth)])
        # --- head
        self.norm_out = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.proj_out = nn.Linear(dim, action_dim)
        self._init_weights()

    def _init_weights(self):
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        nn.init.normal_(self.registers, std=0.02)
        # unit-scale embodiment codes (nn.Embedding's default): with a 0.02 init the embodiment
        # signal is drowned by the time embedding and embodiments that share masks are learned late
        nn.init.normal_(self.emb_table.weight, std=1.0)
        for lin in (self.time_emb.linear_1, self.time_emb.linear_2):
            nn.init.normal_(lin.weight, std=0.02)
        # adaLN-Zero: shift = scale = gate = 0 -> every block is the identity at init
        nn.init.zeros_(self.adaln.weight)
        nn.init.zeros_(self.adaln.bias)
        for blk in self.blocks:
            nn.init.zeros_(blk.cross_out.weight)
            nn.init.zeros_(blk.cross_out.bias)
        nn.init.zeros_(self.proj_out.weight)
        nn.init.zeros_(self.proj_out.bias)

    # ------------------------------------------------------------------ conditioning cache
    def prepare(
        self,
        ctx: torch.Tensor,
        state: torch.Tensor,
        state_mask: torch.Tensor,
        emb_id: torch.Tensor,
        ctx_mask: Optional[torch.Tensor] = None,
    ) -> Dict[str, object]:
        """Everything that does not depend on (x, tau); reused across Euler steps / tau repeats."""
        attn_mask, any_real = context_masks(ctx, ctx_mask)
        return self.prepare_masked(ctx, state, state_mask, emb_id, attn_mask, any_real)

    def prepare_masked(self, ctx, state, state_mask, emb_id, attn_mask, any_real) -> Dict[str, object]:
        """:meth:`prepare` given the masks of :func:`context_masks`: no host synchronisation and
        no branch on the data, so a CUDA graph can capture it (`GraphedSampler`)."""
        b = ctx.shape[0]
        c = self.ctx_norm(self.ctx_proj(ctx))
        kv = [blk.context_kv(c) for blk in self.blocks]
        has_ctx = None if any_real is None else any_real.to(c.dtype)[:, None, None]
        if attn_mask is not None and attn_mask.dtype == torch.bool and not torch.is_autocast_enabled(c.device.type):
            # SDPA turns a boolean mask into this additive one on every call (a few kernels per block
            # and step on a GPU): once per decision here. Same values, so the same attention; under
            # autocast the queries' dtype is not c's, and the mask stays boolean.
            attn_mask = torch.zeros(attn_mask.shape, dtype=c.dtype, device=c.device).masked_fill(
                ~attn_mask, float("-inf"))
        sm = state_mask.to(state.dtype)
        emb = self.emb_table(emb_id.long())                              # [B, d]
        # the embodiment code enters the adaLN conditioning and (additively) the state token
        state_tok = (self.state_enc(torch.cat([state * sm, sm], dim=-1)) + emb).unsqueeze(1)  # [B, 1, d]
        return {
            "kv": kv,
            "attn_mask": attn_mask,
            "has_ctx": has_ctx,
            "state_tok": state_tok,
            "emb": emb,
            "batch": b,
        }

    @staticmethod
    def repeat_prepared(prep: Dict[str, object], r: int) -> Dict[str, object]:
        """Repeat a prepared conditioning r times along the batch (sample i -> rows i*r..i*r+r-1)."""
        if r == 1:
            return prep
        rep = lambda t: None if t is None else t.repeat_interleave(r, dim=0)
        return {
            "kv": [(rep(k), rep(v)) for k, v in prep["kv"]],
            "attn_mask": rep(prep["attn_mask"]),
            "has_ctx": rep(prep["has_ctx"]),
            "state_tok": rep(prep["state_tok"]),
            "emb": rep(prep["emb"]),
            "batch": prep["batch"] * r,
        }

    def modulations(self, tau: torch.Tensor, emb: torch.Tensor):
        """adaLN parameters from cvec = MLP(sincos(tau * 1000)) + EmbTable[e].

        tau [N], emb [N, d] -> (block modulation [N, depth, 6, 1, d], head modulation [N, 2, 1, d]);
        the scale slots hold 1 + scale (so they are 1 at init)."""
        n, d = emb.shape
        temb = self.time_emb(self.time_proj(tau * TAU_SCALE).to(emb.dtype))
        mods = self.adaln(F.silu(temb + emb))
        split = self.depth * 6 * d
        blk = mods[:, :split].view(n, self.depth, 2, 3, 1, d)
        blk = torch.cat([blk[:, :, :, :1], blk[:, :, :, 1:2] + 1.0, blk[:, :, :, 2:]], dim=3)
        head = mods[:, split:].view(n, 2, 1, d)
        head = torch.cat([head[:, :1], head[:, 1:] + 1.0], dim=1)
        return blk.reshape(n, self.depth, 6, 1, d), head

    def forward_prepared(self, x: torch.Tensor, tau: Optional[torch.Tensor], action_mask: torch.Tensor,
                         prep: Dict[str, object], mods=None, block=None) -> torch.Tensor:
        """v for x [B,H,Da] given a :meth:`prepare` cache; ``mods`` (from :meth:`modulations`)
        replaces ``tau`` when given. ``block`` (default :func:`run_block`) runs each block: a
        compiled one fuses its elementwise work (`GraphedSampler`'s opt-in compile)."""
        b, h, _ = x.shape
        if mods is None:
            tau = torch.as_tensor(tau, dtype=x.dtype, device=x.device).reshape(-1).expand(b)
            mods = self.modulations(tau, prep["emb"])
        blk_mod, head_mod = mods

        am = action_mask.to(x.dtype)
        act = self.action_enc(torch.cat([x * am, am], dim=-1)) + self.pos[:, :h]
        reg = self.registers.unsqueeze(0).expand(b, -1, -1)
        z = torch.cat([prep["state_tok"], reg, act], dim=1)
        for i, blk in enumerate(self.blocks):
            k, v = prep["kv"][i]
            z = (block or run_block)(blk, z, blk_mod[:, i], k, v, prep["attn_mask"], prep["has_ctx"])
        out = _norm_modulate(self.norm_out, z[:, -h:], head_mod[:, 0], head_mod[:, 1], block is fused_block)
        return self.proj_out(out)

    def forward(self, x, tau, ctx, state, state_mask, emb_id, action_mask, ctx_mask=None):
        """x [B,H,Da], tau [B] in [0,1], ctx [B,Nc,ctx_dim], state/state_mask [B,Sd], emb_id [B] long,
        action_mask [B,H,Da] (0/1), ctx_mask [B,Nc] (True = real token) -> v [B,H,Da]."""
        prep = self.prepare(ctx, state, state_mask, emb_id, ctx_mask)
        return self.forward_prepared(x, tau, action_mask, prep)


# ---------------------------------------------------------------------- training
def sample_tau(n: int, generator: Optional[torch.Generator] = None, device=None,
               dtype=torch.float32) -> torch.Tensor:
    """tau = 0.999 * (1 - b), b ~ Beta(1.5, 1): mass near tau = 0 (the noisy end).

    Beta(a, 1) has CDF b^a, so b = U^(1/a) by inversion: deterministic for a given generator.
    """
    gdev = generator.device if generator is not None else (device or "cpu")
    u = torch.rand(n, generator=generator, device=gdev, dtype=torch.float64)
    b = u.pow(1.0 / BETA_ALPHA)
    tau = TAU_MAX * (1.0 - b)
    return tau.to(device=device or gdev, dtype=dtype)


def flow_loss(model: ActionDiT, actions, action_mask, ctx, state, state_mask, emb_id,
              ctx_mask=None, generator: Optional[torch.Generator] = None, repeats: int = 1,
              return_parts: bool = False):
    """Masked flow-matching loss (scalar).

    actions [B,H,Da] in normalised space; pads are forced to 0 in A and eps; the squared error is
    multiplied by the mask and divided by the mask sum. ``repeats`` draws r (tau, eps) pairs per
    sample while encoding the context once.
    """
    am = action_mask.to(actions.dtype)
    prep = model.prepare(ctx, state, state_mask, emb_id, ctx_mask)
    if repeats > 1:
        prep = model.repeat_prepared(prep, repeats)
        am = am.repeat_interleave(repeats, dim=0)
        actions = actions.repeat_interleave(repeats, dim=0)
    a = actions * am
    n = a.shape[0]
    tau = sample_tau(n, generator, device=a.device, dtype=a.dtype)
    eps = draw_noise(a.shape, generator, a.device, a.dtype) * am
    t = tau[:, None, None]
    x = (1.0 - t) * eps + t * a
    v = model.forward_prepared(x, tau, am, prep)
    err = (v - (a - eps)).pow(2) * am
    loss = err.sum() / am.sum().clamp_min(1.0)
    if return_parts:
        return loss, {"tau": tau, "eps": eps, "x": x, "v": v}
    return loss


# ---------------------------------------------------------------------- sampling
def grid_index(tau: float, steps: int) -> int:
    """Nearest point of the Euler grid linspace(0, 1, steps + 1) (halves round up)."""
    return int(math.floor(float(tau) * steps + 0.5 + 1e-9))


class PrefixPin:
    """The guidance hook that pins a chunk's first positions (prefix inpainting, real-time chunking's
    hard-prefix variant): it rewrites the velocity so that the Euler step lands on
    ``(1 - w) * (x + dt * v) + w * goal``, with ``goal = (1 - end) * eps + end * target`` the target
    noised to the step's end time along the path that starts at ``eps``.

    A class rather than a closure so that a captured sampler (`GraphedSampler`) can hold static
    copies of its tensors (``buffers``) and load a new decision's into them."""

    def __init__(self, eps: torch.Tensor, target: torch.Tensor, weight: torch.Tensor, steps: int):
        self.eps, self.target, self.weight, self.steps = eps, target, weight, steps

    @property
    def buffers(self) -> Dict[str, torch.Tensor]:
        return {"eps": self.eps, "target": self.target, "weight": self.weight}

    def rebind(self, buffers: Dict[str, torch.Tensor]) -> "PrefixPin":
        """The same hook over other tensors (a captured graph's static ones)."""
        return PrefixPin(buffers["eps"], buffers["target"], buffers["weight"], self.steps)

    @property
    def key(self) -> tuple:
        return ("pin", self.steps)

    def __call__(self, x: torch.Tensor, tau: float, v: torch.Tensor) -> torch.Tensor:
        k = int(round(tau * self.steps))
        dt = (k + 1) / self.steps - k / self.steps          # the very step sample() takes
        end = (k + 1) / self.steps
        goal = (1.0 - end) * self.eps + end * self.target
        return v + self.weight * ((goal - x) / dt - v)


def euler(model: ActionDiT, x: torch.Tensor, am: torch.Tensor, prep: Dict[str, object], k0: int, k1: int,
          steps: int, guidance=None, graphs=None, block=None) -> torch.Tensor:
    """Grid points k0 -> k1 of :func:`sample`'s integration from ``x`` (already masked). One
    function for the eager loop, the per-step graphs (``graphs.bind``, a `GraphedVelocity`) and the
    whole captured sampler (`GraphedSampler` captures this call, ``block`` optionally a compiled
    :func:`run_block`), so all of them compute the same."""
    b, n = x.shape[0], k1 - k0
    # the adaLN modulations of all the steps in one batched call (they depend on tau and e only);
    # the grid in float32 whatever the weights' dtype (bfloat16 would shift 0.1 to 0.1001)
    taus = torch.arange(k0, k1, device=x.device, dtype=torch.float32) / steps
    blk_all, head_all = model.modulations(taus.repeat_interleave(b), prep["emb"].repeat(n, 1))
    blk_all = blk_all.view(n, b, *blk_all.shape[1:])
    head_all = head_all.view(n, b, *head_all.shape[1:])
    replay = graphs.bind(model, x, am, prep, (blk_all[0], head_all[0])) if graphs is not None else None
    for j, k in enumerate(range(k0, k1)):
        t0, t1 = k / steps, (k + 1) / steps
        if replay is not None:
            v = replay(x, (blk_all[j], head_all[j]))
        else:
            v = model.forward_prepared(x, None, am, prep, mods=(blk_all[j], head_all[j]), block=block)
        if guidance is not None:
            v = guidance(x, t0, v)
        x = (x + (t1 - t0) * v) * am
    return x


@torch.no_grad()
def sample(model: ActionDiT, ctx, state, state_mask, emb_id, action_mask, steps: int = 10,
           x0: Optional[torch.Tensor] = None, tau0: float = 0.0, generator: Optional[torch.Generator] = None,
           ctx_mask=None, tau1: float = 1.0,
           guidance: Optional[Callable[[torch.Tensor, float, torch.Tensor], torch.Tensor]] = None,
           return_nfe: bool = False, graphs=None):
    """K-step Euler integration of dX/dtau = v on the grid linspace(0, 1, steps + 1).

    * tau0 == 0 and x0 is None: start from Gaussian noise times the mask (plain sampling).
    * otherwise start from ``x0`` (the caller builds ``x0 = (1 - tau0) * eps + tau0 * prior``) at the
      grid point k0 = grid_index(tau0, steps) (round half up); ``steps - k0`` network evaluations
      follow. tau0 = 1 returns ``x0 * action_mask`` untouched (0 evaluations).
    * ``tau1`` < 1 stops early at grid point grid_index(tau1, steps), e.g. to blend at an
      intermediate state and continue with a second call.
    * ``guidance(x, tau, v) -> v'`` may modify the velocity of every step (RTC-style soft pulls).
    * ``graphs``: on CUDA, a `GraphedSampler` replays the whole integration (context keys/values,
      every step and the updates between them) as one CUDA graph per shape and start step, a
      `GraphedVelocity` the network as one graph per step (also `GraphedSampler`'s fallback, and
      the path of a guidance hook it cannot capture); elsewhere, or without it, all runs eagerly.

    Pads are reset to 0 after every step. Returns [B, H, Da] (and the NFE count if ``return_nfe``).
    """
    if not 0.0 <= tau0 <= 1.0 or not 0.0 <= tau1 <= 1.0:
        raise ValueError(f"tau0={tau0}, tau1={tau1} must lie in [0, 1]")
    if x0 is None and tau0 > 0.0:
        raise ValueError("tau0 > 0 needs the intermediate state x0")
    was_training = model.training
    model.eval()
    try:
        p = next(model.parameters())
        am = action_mask.to(device=p.device, dtype=p.dtype)
        if x0 is None:
            x = draw_noise(am.shape, generator, p.device, p.dtype) * am
        else:
            x = x0.to(device=p.device, dtype=p.dtype) * am
        k0, k1 = grid_index(tau0, steps), grid_index(tau1, steps)
        if k0 < k1:
            whole = getattr(graphs, "run", None)
            out = whole(model, x, am, (ctx, state, state_mask, emb_id, ctx_mask), k0, k1, steps,
                        guidance) if whole is not None else None
            if out is not None:
                x = out
            else:
                prep = model.prepare(ctx, state, state_mask, emb_id, ctx_mask)
                x = euler(model, x, am, prep, k0, k1, steps, guidance, graphs)
    finally:
        model.train(was_training)
    nfe = max(k1 - k0, 0)
    return (x, nfe) if return_nfe else x

