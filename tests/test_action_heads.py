"""action_heads: DiT flow-matching decoder (masking, sampler, save/load, learning) and normalisation."""
import json

import numpy as np
import pytest
import torch

from embodia.action_heads import (
    ActionDiT,
    QuantileNormalizer,
    flow_loss,
    grid_index,
    make_action_mask,
    pad_to,
    sample,
    sample_tau,
)

torch.set_num_threads(1)

H, D, S, CD, NC = 8, 4, 6, 8, 3          # horizon, D_max, S_max, ctx_dim, context tokens


def small_model(**kw):
    cfg = dict(action_dim=D, state_dim=S, horizon=H, dim=32, depth=2, heads=4, ctx_dim=CD,
               num_registers=2, num_embodiments=3)
    cfg.update(kw)
    return ActionDiT(**cfg)


def randomize(model, std=0.2, seed=0):
    """Give the zero-initialised layers random values, so that the net is a non-trivial function."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if torch.count_nonzero(p) == 0:
                p.copy_(torch.randn(p.shape, generator=g) * std)
    return model


def inputs(b=3, seed=0, d_valid=(2, 4, 3), h_valid=(H, H, 5)):
    """A batch of heterogeneous embodiments: each row has its own valid channels / timesteps."""
    g = torch.Generator().manual_seed(seed)
    am = torch.stack([make_action_mask(d_valid[i % len(d_valid)], H, D, valid_steps=h_valid[i % len(h_valid)])
                      for i in range(b)])
    sm = torch.zeros(b, S)
    for i in range(b):
        sm[i, : 2 + i % 3] = 1
    return dict(
        x=torch.randn(b, H, D, generator=g) * am,
        ctx=torch.randn(b, NC, CD, generator=g),
        state=torch.randn(b, S, generator=g) * sm,
        state_mask=sm,
        emb_id=torch.arange(b) % 2,
        action_mask=am,
    )


def fwd(model, inp, tau=0.3, **kw):
    b = inp["x"].shape[0]
    return model(inp["x"], torch.full((b,), tau), inp["ctx"], inp["state"], inp["state_mask"],
                 inp["emb_id"], inp["action_mask"], **kw)


def cond(inp):
    return dict(ctx=inp["ctx"], state=inp["state"], state_mask=inp["state_mask"], emb_id=inp["emb_id"],
                action_mask=inp["action_mask"])


# ---------------------------------------------------------------------------------------- model
def test_zero_init_output_and_identity_blocks():
    torch.manual_seed(0)
    m = ActionDiT()                      # default config: D_max 8, S_max 48, H 16, dim 64
    b = 2
    v = m(torch.randn(b, 16, 8), torch.rand(b), torch.randn(b, 80, 64), torch.randn(b, 48),
          torch.ones(b, 48), torch.tensor([0, 5]), torch.ones(b, 16, 8))
    assert v.shape == (b, 16, 8)
    assert torch.count_nonzero(v) == 0
    # adaLN-Zero: each block is the identity at init
    inp = inputs()
    m = small_model()
    prep = m.prepare(inp["ctx"], inp["state"], inp["state_mask"], inp["emb_id"])
    blk_mod, _ = m.modulations(torch.full((3,), 0.5), prep["emb"])
    z = torch.randn(3, 1 + 2 + H, 32)
    k, vv = prep["kv"][0]
    assert torch.equal(m.blocks[0](z, blk_mod[:, 0], k, vv, None, None), z)


def test_forward_shapes_and_finite_with_fully_masked_context():
    torch.manual_seed(0)
    m = randomize(small_model())
    inp = inputs()
    cm = torch.tensor([[True, True, False], [False, False, False], [True, False, True]])
    v = fwd(m, inp, ctx_mask=cm)
    assert v.shape == (3, H, D) and torch.isfinite(v).all()
    # a row with no real context token ignores the context entirely
    inp2 = dict(inp, ctx=inp["ctx"].clone())
    inp2["ctx"][1] = torch.randn(NC, CD) * 5
    assert torch.allclose(fwd(m, inp2, ctx_mask=cm)[1], v[1], atol=1e-6)


def test_ctx_mask_hides_masked_tokens():
    torch.manual_seed(0)
    m = randomize(small_model())
    inp = inputs()
    cm = torch.tensor([[True, True, False]] * 3)
    v = fwd(m, inp, ctx_mask=cm)
    changed = dict(inp, ctx=inp["ctx"].clone())
    changed["ctx"][:, 2] = torch.randn(3, CD) * 10
    assert torch.allclose(fwd(m, changed, ctx_mask=cm), v, atol=1e-6)
    assert not torch.allclose(fwd(m, changed), fwd(m, inp), atol=1e-3)      # unmasked: it is used
    changed["ctx"][:, 0] += 1.0                                             # a real token: it matters
    assert not torch.allclose(fwd(m, changed, ctx_mask=cm), v, atol=1e-3)
    # float 0/1 masks behave like bool masks
    assert torch.allclose(fwd(m, inp, ctx_mask=cm.float()), v, atol=1e-6)


def test_the_context_mask_is_made_additive_once_per_decision_with_the_same_attention():
    """SDPA would turn a boolean mask into an additive one in every block at every step (kernels on a
    GPU): prepare does it once, and the velocity is bit for bit the boolean mask's. Under autocast
    (training) the queries' dtype differs from the context's, so the mask stays boolean."""
    torch.manual_seed(0)
    m = randomize(small_model())
    inp = inputs()
    cm = torch.tensor([[True, True, False], [True, False, False], [False, False, False]])
    prep = m.prepare(inp["ctx"], inp["state"], inp["state_mask"], inp["emb_id"], cm)
    mask = prep["attn_mask"]
    assert mask.dtype == torch.float32 and set(mask.unique().tolist()) == {0.0, float("-inf")}
    boolean = dict(prep, attn_mask=mask == 0)
    x, am, tau = torch.randn(3, H, D), inp["action_mask"], torch.full((3,), 0.4)
    assert torch.equal(m.forward_prepared(x, tau, am, prep), m.forward_prepared(x, tau, am, boolean))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert m.prepare(inp["ctx"], inp["state"], inp["state_mask"], inp["emb_id"], cm)["attn_mask"].dtype == torch.bool


def test_the_fused_block_takes_the_modulation_into_the_layer_norm_for_one_sample(monkeypatch):
    """`fused_block` (the captured GPU sampler's): for one sample the modulation is the layer norm's
    affine (no separate modulation kernel), equal to float rounding; a batch runs the block as it is."""
    from embodia.action_heads import dit
    from embodia.action_heads.dit import fused_block

    torch.manual_seed(0)
    m = randomize(small_model())
    inp = inputs()
    prep = m.prepare(inp["ctx"], inp["state"], inp["state_mask"], inp["emb_id"])
    x, am, tau = torch.randn(3, H, D), inp["action_mask"], torch.full((3,), 0.7)
    one = {k: ([(a[:1], b[:1]) for a, b in v] if k == "kv" else v[:1] if torch.is_tensor(v) else v)
           for k, v in prep.items()}
    calls = []
    real = dit._modulate
    monkeypatch.setattr(dit, "_modulate", lambda *a: calls.append(1) or real(*a))
    ref = m.forward_prepared(x[:1], tau[:1], am[:1], one)
    unfused = len(calls)
    fused = m.forward_prepared(x[:1], tau[:1], am[:1], one, block=fused_block)
    assert unfused == 2 * len(m.blocks) + 1 and len(calls) == unfused          # none when fused
    assert torch.allclose(fused, ref, atol=1e-5) and not torch.equal(ref, torch.zeros_like(ref))
    assert torch.equal(m.forward_prepared(x, tau, am, prep, block=fused_block), m.forward_prepared(x, tau, am, prep))
    assert len(calls) == unfused + 2 * unfused                                 # a batch: the block as it is


def test_pads_in_inputs_are_ignored():
    torch.manual_seed(0)
    m = randomize(small_model())
    inp = inputs()
    v = fwd(m, inp)
    noisy = dict(inp)
    noisy["x"] = inp["x"] + torch.randn_like(inp["x"]) * (1 - inp["action_mask"]) * 5
    noisy["state"] = inp["state"] + torch.randn_like(inp["state"]) * (1 - inp["state_mask"]) * 5
    assert torch.equal(fwd(m, noisy), v)
    # a zero-valued real state channel is not the same as a pad
    sm2 = inp["state_mask"].clone()
    sm2[0, 4] = 1.0
    assert not torch.allclose(fwd(m, dict(inp, state_mask=sm2))[0], v[0], atol=1e-4)


def test_embodiment_id_and_tau_condition_the_output():
    torch.manual_seed(0)
    m = randomize(small_model())
    inp = inputs()
    v = fwd(m, inp)
    assert not torch.allclose(fwd(m, dict(inp, emb_id=1 - inp["emb_id"])), v, atol=1e-4)
    assert not torch.allclose(fwd(m, inp, tau=0.8), v, atol=1e-4)


def test_save_pretrained_round_trip(tmp_path):
    torch.manual_seed(0)
    m = randomize(small_model(num_registers=3, mlp_ratio=2.0))
    m.save_pretrained(tmp_path / "dit")
    assert (tmp_path / "dit" / "config.json").exists()
    m2 = ActionDiT.from_pretrained(tmp_path / "dit")
    assert m2.config.num_registers == 3 and m2.config.mlp_ratio == 2.0 and m2.config.horizon == H
    inp = inputs()
    assert torch.equal(fwd(m2.eval(), inp), fwd(m.eval(), inp))
    a = sample(m, **cond(inp), steps=4, generator=torch.Generator().manual_seed(1))
    b = sample(m2, **cond(inp), steps=4, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b)


# ---------------------------------------------------------------------------------------- loss
def test_sample_tau_distribution_and_determinism():
    t1 = sample_tau(20000, torch.Generator().manual_seed(0))
    t2 = sample_tau(20000, torch.Generator().manual_seed(0))
    assert torch.equal(t1, t2)
    assert t1.min() >= 0 and t1.max() <= 0.999
    # tau = 0.999 (1 - b), b ~ Beta(1.5, 1): E[tau] = 0.999 * 0.4, P(tau < 0.5) = 1 - (1 - 0.5/0.999)^1.5
    assert abs(t1.mean().item() - 0.3996) < 0.01
    assert abs((t1 < 0.5).float().mean().item() - (1 - (1 - 0.5 / 0.999) ** 1.5)) < 0.01


def test_loss_ignores_padded_targets_and_no_gradient_from_pads():
    torch.manual_seed(0)
    m = randomize(small_model())
    inp = inputs()
    am = inp["action_mask"]
    A = torch.randn(3, H, D) * am
    A_junk = A + torch.randn(3, H, D) * (1 - am) * 10          # different values only in the pads

    def loss_and_grads(actions):
        m.zero_grad()
        actions = actions.clone().requires_grad_(True)
        loss, parts = flow_loss(m, actions, am, inp["ctx"], inp["state"], inp["state_mask"], inp["emb_id"],
                                generator=torch.Generator().manual_seed(7), return_parts=True)
        parts["v"].retain_grad()
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in m.parameters()], actions.grad, parts

    l1, g1, ga1, p1 = loss_and_grads(A)
    l2, g2, ga2, p2 = loss_and_grads(A_junk)
    assert torch.equal(l1, l2)
    assert all(torch.equal(a, b) for a, b in zip(g1, g2))
    pads = am == 0
    assert torch.count_nonzero(ga2[pads]) == 0 and torch.count_nonzero(ga1[~pads]) > 0
    assert torch.count_nonzero(p1["v"].grad[pads]) == 0          # the model's pad outputs get no gradient
    assert torch.count_nonzero(p1["eps"][pads]) == 0 and torch.count_nonzero(p1["x"][pads]) == 0
    # normalised by the number of valid entries: a hand computation matches
    t = p1["tau"][:, None, None]
    manual = ((p1["v"] - (A - p1["eps"])) ** 2 * am).sum() / am.sum()
    assert torch.allclose(l1, manual.detach())
    assert torch.allclose(p1["x"], (1 - t) * p1["eps"] + t * A)


def test_every_parameter_gets_gradient():
    torch.manual_seed(0)
    m = randomize(small_model())
    inp = inputs()
    cm = torch.tensor([[True, True, False]] * 3)
    A = torch.randn(3, H, D) * inp["action_mask"]
    flow_loss(m, A, inp["action_mask"], inp["ctx"], inp["state"], inp["state_mask"], inp["emb_id"],
              ctx_mask=cm, generator=torch.Generator().manual_seed(0)).backward()
    dead = [n for n, p in m.named_parameters() if p.grad is None or torch.count_nonzero(p.grad) == 0]
    assert dead == []


def test_loss_repeats_equal_repeated_batch():
    torch.manual_seed(0)
    m = randomize(small_model())
    inp = inputs()
    A = torch.randn(3, H, D) * inp["action_mask"]
    r = 3
    la = flow_loss(m, A, inp["action_mask"], inp["ctx"], inp["state"], inp["state_mask"], inp["emb_id"],
                   generator=torch.Generator().manual_seed(3), repeats=r)
    rep = lambda t: t.repeat_interleave(r, 0)
    lb = flow_loss(m, rep(A), rep(inp["action_mask"]), rep(inp["ctx"]), rep(inp["state"]),
                   rep(inp["state_mask"]), rep(inp["emb_id"]), generator=torch.Generator().manual_seed(3))
    assert la.ndim == 0 and torch.allclose(la, lb, atol=1e-6)
    # the generator makes the loss deterministic; another seed draws other (tau, eps)
    lc = flow_loss(m, A, inp["action_mask"], inp["ctx"], inp["state"], inp["state_mask"], inp["emb_id"],
                   generator=torch.Generator().manual_seed(3), repeats=r)
    ld = flow_loss(m, A, inp["action_mask"], inp["ctx"], inp["state"], inp["state_mask"], inp["emb_id"],
                   generator=torch.Generator().manual_seed(4), repeats=r)
    assert torch.equal(la, lc) and not torch.equal(la, ld)


# ---------------------------------------------------------------------------------------- sampler
def test_sampler_from_intermediate_state_counts_steps_and_keeps_pads_zero():
    torch.manual_seed(0)
    m = randomize(small_model())
    inp = inputs()
    am = inp["action_mask"]
    prior = torch.randn(3, H, D) * am
    eps = torch.randn(3, H, D) * am
    # tau0 = 1: no steps, x0 back unchanged
    out, nfe = sample(m, **cond(inp), steps=10, x0=prior, tau0=1.0, return_nfe=True)
    assert nfe == 0 and torch.equal(out, prior)
    for tau0, expect in [(0.0, 10), (0.4, 6), (0.6, 4), (0.35, 6), (0.25, 7), (0.9, 1)]:
        x0 = (1 - tau0) * eps + tau0 * prior
        out, nfe = sample(m, **cond(inp), steps=10, x0=x0, tau0=tau0, return_nfe=True)
        assert nfe == expect == 10 - grid_index(tau0, 10), tau0
        assert torch.count_nonzero(out[am == 0]) == 0
        assert torch.isfinite(out).all() and not torch.equal(out, x0)
    out, nfe = sample(m, **cond(inp), steps=4, generator=torch.Generator().manual_seed(0), return_nfe=True)
    assert nfe == 4 and torch.count_nonzero(out[am == 0]) == 0
    with pytest.raises(ValueError):
        sample(m, **cond(inp), tau0=0.5)                 # an intermediate start needs x0


def test_sampler_is_euler_on_the_grid_and_composes():
    torch.manual_seed(0)
    m = randomize(small_model()).eval()
    inp = inputs()
    am = inp["action_mask"]
    x0 = torch.randn(3, H, D) * am
    tau0, steps = 0.4, 10
    out = sample(m, **cond(inp), steps=steps, x0=x0, tau0=tau0)
    x = x0.clone()
    with torch.no_grad():
        for k in range(4, 10):
            v = m(x, torch.full((3,), k / steps), inp["ctx"], inp["state"], inp["state_mask"],
                  inp["emb_id"], am)
            x = (x + v / steps) * am
    assert torch.allclose(out, x, atol=1e-5)
    # stopping at tau1 and restarting there from the partial state gives the same chunk
    half = sample(m, **cond(inp), steps=steps, x0=x0, tau0=tau0, tau1=0.7)
    assert torch.allclose(sample(m, **cond(inp), steps=steps, x0=half, tau0=0.7), out, atol=1e-5)
    # a guidance hook sees every step and can change the velocity
    seen = []
    ident = lambda x, t, v: (seen.append(t), v)[1]
    assert torch.equal(sample(m, **cond(inp), steps=steps, x0=x0, tau0=tau0, guidance=ident), out)
    assert seen == pytest.approx([k / steps for k in range(4, 10)])
    frozen = sample(m, **cond(inp), steps=steps, x0=x0, tau0=tau0, guidance=lambda x, t, v: v * 0)
    assert torch.equal(frozen, x0)


def test_sampler_deterministic_and_batch_consistent():
    torch.manual_seed(0)
    m = randomize(small_model())
    inp = inputs()
    a = sample(m, **cond(inp), generator=torch.Generator().manual_seed(11))
    b = sample(m, **cond(inp), generator=torch.Generator().manual_seed(11))
    c = sample(m, **cond(inp), generator=torch.Generator().manual_seed(12))
    assert torch.equal(a, b) and not torch.allclose(a, c)
    assert m.training                                     # sampler restores the mode
    # batched == one row at a time (same starting state)
    x0 = torch.randn(3, H, D) * inp["action_mask"]
    full = sample(m, **cond(inp), x0=x0)
    for i in range(3):
        one = {k: v[i:i + 1] for k, v in cond(inp).items()}
        assert torch.allclose(sample(m, **one, x0=x0[i:i + 1])[0], full[i], atol=1e-5)


# ---------------------------------------------------------------------------------------- learning
def toy_batch(n, g):
    """Three embodiments. e=0: D=2, 2 state dims; e=1: D=4, 3 state dims, another mapping;
    e=2: the masks of e=0 but the mirrored mapping (only emb_id tells e=0 and e=2 apart).
    A context token carries a mode c in {-1, 1} (shifts the whole chunk); token 2 is masked junk."""
    e = torch.randint(0, 3, (n,), generator=g)
    s = torch.rand(n, S, generator=g) * 2 - 1
    c = torch.randint(0, 2, (n,), generator=g).float() * 2 - 1
    ctx = torch.randn(n, NC, CD, generator=g) * 0.1
    ctx[:, 0, 0] = c
    ctx[:, 2] = torch.randn(n, CD, generator=g) * 3
    cm = torch.tensor([True, True, False]).expand(n, NC).clone()
    return (*toy_targets(e, s, c), ctx, cm)


def toy_targets(e, s, c):
    n = e.shape[0]
    one = (e != 1)[:, None].float()
    sm = torch.zeros(n, S)
    sm[:, :2] = 1
    sm[:, 2] += 1 - one[:, 0]
    s = s * sm
    am = torch.zeros(n, H, D)
    am[:, :, :2] = 1
    am[:, :, 2:] = (1 - one)[:, :, None]
    ramp = (torch.arange(H).float() + 1) / H
    a0 = 0.5 * c[:, None, None] + 0.8 * s[:, None, :2] * ramp[None, :, None]
    a0 = torch.cat([a0, torch.zeros(n, H, 2)], -1)
    v1 = torch.stack([-s[:, 1], s[:, 0], s[:, 2], -s[:, 0]], -1)
    a1 = 0.5 * c[:, None, None] * torch.tensor([1.0, -1, 1, -1]) + 0.8 * v1[:, None] * (1 - ramp + 1 / H)[None, :, None]
    a2 = a0.clone()
    a2[..., :2] = 0.5 * c[:, None, None] - 0.8 * s[:, None, :2] * ramp[None, :, None]
    A = torch.where((e == 0)[:, None, None], a0, torch.where((e == 1)[:, None, None], a1, a2)) * am
    return A, am, s, sm, e


def masked_mse(x, A, am):
    return (((x - A) ** 2) * am).sum() / am.sum()


@pytest.fixture(scope="module")
def trained():
    torch.manual_seed(0)
    m = small_model()
    val = toy_batch(256, torch.Generator().manual_seed(1))
    A, am, s, sm, e, ctx, cm = val

    def val_loss():
        with torch.no_grad():
            return flow_loss(m, A, am, ctx, s, sm, e, ctx_mask=cm,
                             generator=torch.Generator().manual_seed(3), repeats=2).item()

    losses = [val_loss()]
    steps = 400
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=steps, pct_start=0.1)
    g, gl = torch.Generator().manual_seed(0), torch.Generator().manual_seed(2)
    for _ in range(steps):
        bA, bam, bs, bsm, be, bctx, bcm = toy_batch(64, g)
        loss = flow_loss(m, bA, bam, bctx, bs, bsm, be, ctx_mask=bcm, generator=gl)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        sched.step()
    losses.append(val_loss())
    return m, val, losses


def test_training_lowers_loss_and_samples_hit_targets(trained):
    m, (A, am, s, sm, e, ctx, cm), losses = trained
    assert losses[1] < 0.15 * losses[0], losses
    x = sample(m, ctx, s, sm, e, am, steps=10, ctx_mask=cm, generator=torch.Generator().manual_seed(5))
    var = (((A - (A * am).sum(0) / am.sum(0).clamp_min(1)) ** 2) * am).sum() / am.sum()
    assert masked_mse(x, A, am) < 0.1 * var
    for k in (0, 1, 2):                                       # every embodiment learned
        sel = e == k
        assert masked_mse(x[sel], A[sel], am[sel]) < 0.1 * var
    assert torch.count_nonzero(x[am == 0]) == 0


def test_trained_outputs_depend_on_embodiment_and_context_mode(trained):
    m, _, _ = trained
    n = 64
    g = torch.Generator().manual_seed(9)
    s = torch.rand(n, S, generator=g) * 2 - 1
    c = torch.ones(n)
    ctx = torch.randn(n, NC, CD, generator=g) * 0.1
    ctx[:, 0, 0] = c
    cm = torch.tensor([True, True, False]).expand(n, NC)
    A0, am0, s0, sm0, e0 = toy_targets(torch.zeros(n, dtype=torch.long), s, c)
    A1, am1, s1, sm1, e1 = toy_targets(torch.ones(n, dtype=torch.long), s, c)
    x0 = torch.randn(n, H, D, generator=g)
    out0 = sample(m, ctx, s0, sm0, e0, am0, x0=x0 * am0, ctx_mask=cm)
    out1 = sample(m, ctx, s1, sm1, e1, am1, x0=x0 * am1, ctx_mask=cm)
    assert masked_mse(out0, A0, am0) < 0.03 and masked_mse(out1, A1, am1) < 0.03
    assert masked_mse(out0, out1, am0) > 0.2                  # same noise and state, other embodiment
    # e=2 shares e=0's masks: only the embodiment id selects the mapping
    A2, am2, s2, sm2, e2 = toy_targets(torch.full((n,), 2, dtype=torch.long), s, c)
    assert torch.equal(am2, am0) and torch.equal(sm2, sm0)
    out2 = sample(m, ctx, s2, sm2, e2, am2, x0=x0 * am0, ctx_mask=cm)
    assert masked_mse(out2, A2, am0) < 0.03 and masked_mse(out2, out0, am0) > 0.1
    # the context token's mode moves the chunk: c = -1 -> the other target
    ctx_neg = ctx.clone()
    ctx_neg[:, 0, 0] = -1
    A0n = toy_targets(e0, s, -c)[0]
    out0n = sample(m, ctx_neg, s0, sm0, e0, am0, x0=x0 * am0, ctx_mask=cm)
    assert masked_mse(out0n, A0n, am0) < 0.03 and masked_mse(out0n, out0, am0) > 0.5
    # junk in the masked context slot changes nothing
    ctx_junk = ctx.clone()
    ctx_junk[:, 2] = torch.randn(n, CD, generator=g) * 10
    assert torch.allclose(sample(m, ctx_junk, s0, sm0, e0, am0, x0=x0 * am0, ctx_mask=cm), out0, atol=1e-5)


# ---------------------------------------------------------------------------------------- normalizer
def test_quantile_normalizer_numpy_and_torch():
    q01, q99 = np.array([-2.0, 0.0, 5.0, 0.0]), np.array([2.0, 1.0, 5.0, 10.0])   # channel 2 constant
    nz = QuantileNormalizer(q01, q99)
    x = np.array([[0.0, 0.5, 5.0, 2.5], [-4.0, 2.0, 5.0, 10.0], [2.0, 0.0, 5.0, 0.0]])
    y = nz.normalize(x)
    assert np.allclose(y[0], [0.0, 0.0, 0.0, -0.5])
    assert np.allclose(y[1], [-1.0, 1.0, 0.0, 1.0])              # clipped
    assert np.allclose(y[2], [1.0, -1.0, 0.0, -1.0])
    assert y.min() >= -1 and y.max() <= 1
    back = nz.unnormalize(y)
    assert np.allclose(back[0], x[0]) and np.allclose(back[2], x[2])
    assert np.allclose(back[:, 2], 5.0)                          # constant channel back to its value
    assert np.allclose(back[1], [-2.0, 1.0, 5.0, 10.0])          # clipped values come back at q01/q99
    # torch: same numbers, keeps dtype, works on [B, H, D]
    xt = torch.tensor(x, dtype=torch.float32)[None].repeat(2, 1, 1)
    yt = nz.normalize(xt)
    assert isinstance(yt, torch.Tensor) and yt.dtype == torch.float32 and yt.shape == (2, 3, 4)
    assert torch.allclose(yt[1], torch.tensor(y, dtype=torch.float32))
    assert torch.allclose(nz.unnormalize(yt)[0], torch.tensor(back, dtype=torch.float32))
    # binary gripper channel maps to {-1, 1} and back exactly
    g = QuantileNormalizer([0.0], [1.0])
    assert np.array_equal(g.unnormalize(g.normalize(np.array([[0.0], [1.0]]))), [[0.0], [1.0]])
    with pytest.raises(ValueError):
        nz.normalize(np.zeros((2, 3)))


def test_quantile_normalizer_serialisation_and_fit():
    rng = np.random.default_rng(0)
    data = rng.normal(size=(1000, 3)) * [1.0, 10.0, 0.0] + [0.0, 5.0, 2.0]
    nz = QuantileNormalizer.from_data(data)
    assert QuantileNormalizer.fit(torch.from_numpy(data)) == nz
    assert nz.constant.tolist() == [False, False, True]
    d = json.loads(json.dumps(nz.to_dict()))
    nz2 = QuantileNormalizer.from_dict(d)
    assert nz2 == nz
    assert np.allclose(nz2.normalize(data), nz.normalize(data))
    y = nz.normalize(data)
    assert ((y > -1) & (y < 1)).mean(0)[:2].min() > 0.95 and np.all(y[:, 2] == 0)
    assert np.allclose(QuantileNormalizer.from_json(nz.to_json()).unnormalize(y), nz.unnormalize(y))


def test_pad_to_and_action_mask():
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    p, m = pad_to(x, 4)
    assert p.shape == (3, 4) and np.array_equal(p[:, :2], x) and np.all(p[:, 2:] == 0)
    assert np.array_equal(m, [[1, 1, 0, 0]] * 3)
    pt, mt = pad_to(torch.ones(2, 5, 3), 8)
    assert pt.shape == (2, 5, 8) and mt.sum() == 2 * 5 * 3 and torch.all(pt[..., 3:] == 0)
    with pytest.raises(ValueError):
        pad_to(x, 1)
    am = make_action_mask(3, 6, 8, valid_steps=4)
    assert am.shape == (6, 8) and am.sum() == 12 and am[4:].sum() == 0 and am[:, 3:].sum() == 0
    assert make_action_mask(2, 4, 4, torch_out=False).dtype == np.float32
