"""Can a small learned policy imitate the twogap-push expert? One JSON line.

Records expert demos in memory (no files), trains a *state-only* DiT flow head (the decoder of the
VLA without the backbone: d=64, 3 blocks, H=16) for a few thousand steps on one thread, and runs it
closed loop. It isolates the task and the demonstrations from the vision-language part, which is
what decided the scene's contact friction, gap width and the demo noise of `embodia train tiny`:

    python benchmarks/twogap_imitability.py --pair-friction 0.05 --gap-width 0.16 --noise 0.05
    python benchmarks/twogap_imitability.py --noise 0.25 --demos 400 --steps 3000 --batch 128

Success has a 95% Wilson interval; `--exec 4,8` evaluates several replanning intervals on the same
trained head.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np
import torch

from embodia.action_heads import ActionDiT, QuantileNormalizer, flow_loss, sample
from embodia.agent.evaluation.stats import wilson
from embodia.agent.loop.episode import run_episode
from embodia.sim.twogap import GAP_WIDTH, PAIR_FRICTION, TwoGapPush

H = 16


def demos(dev: TwoGapPush, n: int, noise: float, seed: int):
    """(states, actions) of the successful ones among n expert episodes, and the expert's rate."""
    out = []
    for i in range(n):
        states, actions = [], []
        r = run_episode(dev, dev.expert(noise=noise), seed=seed + i,
                        on_step=lambda step: states.append(step.obs.state) or actions.append(step.action) and False)
        if r.success:
            out.append((np.stack(states), np.stack(actions)))
    return out, len(out) / n


class StateOnlyPolicy:
    """The trained head as a Policy: normalized state -> K=10 Euler steps -> chunk in m/s units."""

    def __init__(self, head: ActionDiT, sn: QuantileNormalizer, an: QuantileNormalizer):
        self.head, self.sn, self.an = head.eval(), sn, an

    def reset(self, seed=None):
        self.gen = torch.Generator().manual_seed(0 if seed is None else int(seed))

    def act(self, obs, instruction):
        s = torch.tensor(self.sn.normalize(obs.state), dtype=torch.float32)[None]
        x = sample(self.head, torch.zeros(1, 1, 64), s, torch.ones(1, s.shape[1]), torch.zeros(1, dtype=torch.long),
                   torch.ones(1, H, 2), steps=10, generator=self.gen, ctx_mask=torch.zeros(1, 1))
        return np.asarray(self.an.unnormalize(x[0].numpy()), np.float32)


def train_head(data, steps: int, batch: int, seed: int = 0):
    states = np.concatenate([s for s, _ in data])
    actions = np.concatenate([a for _, a in data])
    ends = np.concatenate([np.full(len(s), e) for (s, _), e in zip(data, np.cumsum([len(s) for s, _ in data]))])
    sn, an = QuantileNormalizer.fit(states), QuantileNormalizer.fit(actions)
    S = torch.tensor(sn.normalize(states), dtype=torch.float32)
    A = torch.tensor(an.normalize(actions), dtype=torch.float32)
    torch.manual_seed(seed)
    head = ActionDiT(action_dim=2, state_dim=S.shape[1], horizon=H, dim=64, depth=3, heads=4, ctx_dim=64)
    opt = torch.optim.AdamW(head.parameters(), lr=1e-3, weight_decay=1e-4)
    ema = {k: v.detach().clone() for k, v in head.named_parameters()}
    rng, gen = np.random.default_rng(seed), torch.Generator().manual_seed(seed)
    n, loss = len(S), torch.tensor(0.0)
    for step in range(steps):
        j = rng.integers(n, size=batch)
        act, am = torch.zeros(batch, H, 2), torch.zeros(batch, H, 2)
        for b, i in enumerate(j):
            k = min(H, int(ends[i]) - i)
            act[b, :k], am[b, :k] = A[i:i + k], 1
        for g in opt.param_groups:
            g["lr"] = 1e-3 * min(1.0, (step + 1) / 200) * 0.5 * (1 + np.cos(np.pi * step / steps))
        loss = flow_loss(head, act, am, torch.zeros(batch, 1, 64), S[j], torch.ones_like(S[j]),
                         torch.zeros(batch, dtype=torch.long), ctx_mask=torch.zeros(batch, 1), generator=gen)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        decay = min(0.999, (1 + step) / (10 + step))
        with torch.no_grad():
            for k, p in head.named_parameters():
                ema[k].lerp_(p.detach(), 1 - decay)
    with torch.no_grad():
        for k, p in head.named_parameters():
            p.copy_(ema[k])
    return StateOnlyPolicy(head, sn, an), float(loss.detach())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair-friction", type=float, default=PAIR_FRICTION)
    ap.add_argument("--gap-width", type=float, default=GAP_WIDTH)
    ap.add_argument("--noise", type=float, default=0.25, help="expert action noise while recording demos")
    ap.add_argument("--demos", type=int, default=200)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--exec", default="4,8", help="replanning intervals to evaluate")
    ap.add_argument("--episodes", type=int, default=40)
    args = ap.parse_args()
    torch.set_num_threads(1)

    dev = TwoGapPush(render=False, scene={"pair_friction": args.pair_friction,
                                          "gap_widths": (args.gap_width, args.gap_width)})
    t0 = time.perf_counter()
    data, expert_rate = demos(dev, args.demos, args.noise, seed=1000)
    t1 = time.perf_counter()
    policy, loss = train_head(data, args.steps, args.batch)
    t2 = time.perf_counter()
    out = {"benchmark": "twogap_imitability", **{k: v for k, v in vars(args).items()},
           "expert_success": expert_rate, "demo_frames": int(sum(len(s) for s, _ in data)),
           "final_loss": round(loss, 4), "record_s": round(t1 - t0, 1), "train_s": round(t2 - t1, 1)}
    for h in [int(x) for x in args.exec.split(",")]:
        wins = sum(bool(run_episode(dev, policy, seed=s, exec_horizon=h).success) for s in range(args.episodes))
        out[f"exec{h}"] = {"success": wins / args.episodes, "wilson95": list(wilson(wins, args.episodes))}
    out.update(machine=f"{platform.machine()} {os.cpu_count()} cpus, torch {torch.__version__}",
               date=time.strftime("%Y-%m-%d"))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
