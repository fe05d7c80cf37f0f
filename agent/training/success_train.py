"""Train a checkpoint's learned success detector (`embodia.policies.success_head`) on recorded
episodes and their oracle labels, calibrate it on held-out episodes, save it beside the heads.

    embodia train --success-head --data data/success/robot-twogap-push --data data/success/gui-all \\
        --out policies/checkpoints/embodia-tiny
    embodia train success-head        # rebuilds the bundled one: records, trains

Robot datasets (LeRobot v3) give each episode's first state, final state, last camera frame and
its recorded success; GUI recordings (step logs) give the first screen and tree and the final
ones. Episodes with no recorded success (unknown) or interrupted are skipped. Calibration is
cross-fitted (`train_success_head`): each episode is scored by a head trained on the other three
quarters, Platt's calibration is fitted on those out-of-fold scores, their figures are printed and
saved in ``success_head.json``, and the head saved is trained on all the episodes.

The bundled detector's episodes (``RECORD``) come from the unshifted tasks, twogap-push's
``heavy`` (its goal moves) and ``blocked-left`` shifts, and the ``train`` split of gui-sim (no shift), played by a mix of agents so that successes and failures both occur, failures
near success included: the bundled policy, the scripted experts with noise or random actions
mixed in, and random agents. Seeds 200000 and up: far from those of every benchmark.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch

from embodia.devices import Embodiment
from embodia.policies.base import Policy

SEED0 = 200_000
MIN_CALIBRATION = 10      # episodes of a body (both outcomes present) to calibrate it on its own
# (name, device URI, agent, episodes): agent "policy" = embodia-tiny, "expert@S" = expert with
# Gaussian action noise S (robots) or a random candidate action with probability S (screens),
# "random" = uniform actions (robots) or candidate actions (screens)
RECORD = [
    ("robot-twogap-push", "sim:twogap-push", [("policy", 40), ("expert@0.3", 25), ("expert@0.7", 25),
                                              ("expert@1.2", 20), ("random", 10)]),
    ("robot-reach", "sim:metaworld/reach-v3?max_steps=150", [("policy", 20), ("expert@0.5", 15),
                                                              ("expert@1.5", 10), ("random", 5)]),
    ("gui-all", "gui-sim:all?split=train", [("policy", 150), ("expert@0.3", 150), ("expert@0.6", 150),
                                            ("random", 80)]),
    ("gui-short", "gui-sim:all?split=train&max_steps=3", [("policy", 80), ("expert@0.2", 80)]),
    # more pusher episodes that end near the goal, on both sides of the success boundary
    ("robot-twogap-push-more", "sim:twogap-push", [("policy", 60), ("expert@0.7", 60)]),
    # the goal moves under `heavy`: without it the head only learns "the puck is at that one spot";
    # blocked-right stays unseen (a shift the detector never met, in benchmarks/success_labels.py)
    ("robot-twogap-push-heavy", "sim:twogap-push?shift=heavy", [("policy", 25), ("expert@0.5", 25)]),
    ("robot-twogap-push-blocked-left", "sim:twogap-push?shift=blocked-left", [("policy", 20), ("expert@0.5", 20)]),
]


class NoisyExpert(Policy):
    """A scripted expert with mistakes: Gaussian noise on robot actions (std ``noise``), or on a
    screen a random candidate action instead of the expert's with probability ``noise``."""

    def __init__(self, device, noise: float):
        self.device, self.noise = device, float(noise)
        self.expert = device.expert()
        self.gui = device.embodiment.is_gui
        if self.gui:
            from embodia.sim.gui import ChancePolicy
            self.chance = ChancePolicy(device)
        self.reset(None)

    def reset(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)
        self.expert.reset(seed)
        if self.gui:
            self.chance.reset(seed)

    def act(self, obs, instruction: str = ""):
        if self.gui:
            return self.chance.act(obs, instruction) if self.rng.random() < self.noise else self.expert.act(obs, instruction)
        a = np.asarray(self.expert.act(obs, instruction), np.float32)
        low, high = self.device.embodiment.action_bounds()
        return np.clip(a + self.rng.normal(0, self.noise, a.shape), low, high).astype(np.float32)


def make_agent(spec: str, device, checkpoint):
    """The agent of a `RECORD` entry on ``device``."""
    if spec == "policy":
        from embodia.agent.loop.factory import make_policy
        return make_policy(str(checkpoint), device, threads=1)
    if spec.startswith("expert@"):
        return NoisyExpert(device, float(spec.split("@", 1)[1]))
    if spec == "random":
        if device.embodiment.is_gui:
            from embodia.sim.gui import ChancePolicy
            return ChancePolicy(device)
        from embodia.policies import RandomPolicy
        return RandomPolicy(device.embodiment)
    raise ValueError(f"unknown agent {spec!r}")


def record(root: Path, checkpoint, plan=RECORD, log=print) -> list[Path]:
    """Record every entry of ``plan`` under ``root/<name>`` (a rerun tops an interrupted one up)."""
    from embodia.agent.loop.episode import run_episode
    from embodia.agent.recording.gui_log import GuiRecorder
    from embodia.agent.recording.writer import DatasetWriter
    from embodia.devices import open_device
    out = []
    for k, (name, uri, agents) in enumerate(plan):
        path = Path(root) / name
        out.append(path)
        with open_device(uri) as dev:
            writer = GuiRecorder(path, dev.embodiment) if dev.embodiment.is_gui else DatasetWriter(path, dev.embodiment)
            have, i, t0 = writer.num_episodes, 0, time.perf_counter()
            for spec, n in agents:
                agent = make_agent(spec, dev, checkpoint)
                for _ in range(n):
                    if i >= have:
                        run_episode(dev, agent, seed=SEED0 + 10_000 * k + i, recorder=writer,
                                    episode_meta={"device": uri, "policy": spec})
                    i += 1
            writer.close()
        log(f"{uri}: {i} episodes in {path} ({time.perf_counter() - t0:.0f} s)")
    return out


# -- examples from recordings -----------------------------------------------------------------------
def examples(paths, reader, log=print) -> list[dict]:
    """One example per labelled episode: {"kind", "x", "y", "where"}."""
    from embodia.agent.recording.gui_log import is_gui_recording
    rows = []
    for p in map(Path, paths):
        before = len(rows)
        rows += gui_examples(p, reader) if is_gui_recording(p) else robot_examples(p, reader)
        log(f"{p}: {len(rows) - before} labelled episodes")
    return rows


def robot_examples(path: Path, reader) -> list[dict]:
    from embodia.agent.recording.dataset import LocalDataset
    ds = LocalDataset(path)
    emb = ds.embodiment
    cam = emb.cameras[0].name if emb.cameras else None
    rows = []
    for i, row in enumerate(ds.episodes):
        if row["success"] is None or row["interrupted"] or row["final_state"] is None:
            continue
        ep = ds.episode(i)
        img = ds.frames(i, cam)[-1] if cam else None
        x = reader.robot(emb, ep["task"], ep["state"][0], row["final_state"], img)
        rows.append({"kind": "robot", "body": emb.name, "x": x, "y": bool(row["success"]), "where": f"{path}#{i}"})
    return rows


def gui_examples(path: Path, reader) -> list[dict]:
    from embodia.agent.recording.gui_log import list_gui_episodes, load_screen, read_gui_episode
    rows = []
    for ep_path in list_gui_episodes(path):
        ep = read_gui_episode(ep_path)
        end, steps = ep["end"], ep["steps"]
        if end is None or end.get("success") is None or not steps or "final_ui_tree" not in end:
            continue
        emb = Embodiment.from_dict(ep["header"]["embodiment"])
        first = (load_screen(ep_path, steps[0].get("image")), steps[0].get("ui_tree"))
        final = (load_screen(ep_path, end.get("final_image")), end["final_ui_tree"])
        x = reader.gui(emb, ep["header"]["task"], first, final)
        rows.append({"kind": "gui", "body": emb.name, "x": x, "y": bool(end["success"]), "where": str(ep_path)})
    return rows


# -- training ---------------------------------------------------------------------------------------
def fit_kind(head, kind: str, x: np.ndarray, y: np.ndarray, *, steps: int = 300, lr: float = 3e-3,
             seed: int = 0) -> None:
    """Full-batch AdamW on one kind's MLP, classes weighted to balance."""
    torch.manual_seed(seed)
    net = head.nets[kind]
    xt, yt = torch.as_tensor(x), torch.as_tensor(y, dtype=torch.float32)
    pos = float(yt.sum())
    w = torch.tensor(max(len(yt) - pos, 1.0) / max(pos, 1.0))
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=1e-2)
    net.train()
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(net(xt).squeeze(-1), yt, pos_weight=w)
        loss.backward()
        opt.step()
    net.eval()


def precision_recall(p: np.ndarray, y: np.ndarray, threshold: float) -> dict:
    """Success labels at ``p >= threshold`` against the truth ``y``."""
    said = p >= threshold
    tp = int((said & y).sum())
    return {"threshold": threshold, "labelled_success": int(said.sum()), "true_positives": tp,
            "precision": tp / said.sum() if said.any() else None, "recall": tp / y.sum() if y.any() else None}


def fold_indices(n: int, k: int, seed: int) -> list[np.ndarray]:
    """``k`` disjoint index sets covering range(n), a seeded draw.

    >>> f = fold_indices(10, 4, 0); sorted(np.concatenate(f).tolist()) == list(range(10)), [len(x) for x in f]
    (True, [3, 3, 2, 2])
    """
    order = np.random.default_rng(seed).permutation(n)
    return [np.sort(order[i::k]) for i in range(k)]


def out_of_fold_logits(kind: str, dim: int, state_dims: dict, x: np.ndarray, y: np.ndarray, *, k: int,
                       steps: int, seed: int, hidden: int) -> np.ndarray:
    """Each episode's logit from a head trained on the other folds (never on it)."""
    from embodia.policies.success_head import SuccessHead
    z = np.zeros(len(y))
    for i, te in enumerate(fold_indices(len(y), k, seed)):
        if not len(te):
            continue
        tr = np.setdiff1d(np.arange(len(y)), te)
        torch.manual_seed(seed + 1 + i)
        h = SuccessHead({kind: dim}, hidden, state_dims=state_dims)
        fit_kind(h, kind, x[tr], y[tr], steps=steps, seed=seed)
        with torch.inference_mode():
            z[te] = h.logits(kind, torch.as_tensor(x[te])).numpy()
    return z


def train_success_head(paths, out, *, folds: int = 4, steps: int = 300, seed: int = 0,
                       hidden: int = 64, log=print) -> dict:
    """Read ``paths``, train and calibrate, save into checkpoint ``out``; returns the out-of-fold figures.

    Calibration is cross-fitted: ``folds`` heads, each trained without one fold, score the episodes
    of that fold; Platt's (a, b) is fitted on all those out-of-fold logits (per kind, and per robot
    body with enough of them), and the head saved is trained on every episode. Every episode thus
    calibrates and is scored by a head that never saw it (a held-out quarter alone left the
    pusher's calibration to ~80 episodes and flattened it: recall at 0.9 of 0.4 instead of 0.6)."""
    from embodia.policies.success_head import Reader, SuccessHead, fit_platt, platt, save_success_head
    t0 = time.perf_counter()
    reader = Reader(out)
    rows = examples(paths, reader, log=log)
    t1 = time.perf_counter()
    kinds = sorted({r["kind"] for r in rows})
    if not kinds:
        raise ValueError("no labelled episodes in " + ", ".join(map(str, paths)))
    torch.manual_seed(seed)         # the head's initial weights: a rerun on the same recordings gives the same head
    head = SuccessHead({k: reader.dims()[k] for k in kinds}, hidden, state_dims=reader.state_dims())
    report = {}
    for kind in kinds:
        xs = np.stack([r["x"] for r in rows if r["kind"] == kind])
        ys = np.array([r["y"] for r in rows if r["kind"] == kind])
        bodies = np.array([r["body"] for r in rows if r["kind"] == kind])
        k = max(2, min(folds, len(ys)))
        z = out_of_fold_logits(kind, xs.shape[1], reader.state_dims(), xs, ys, k=k, steps=steps, seed=seed, hidden=hidden)
        fit_kind(head, kind, xs, ys, steps=steps, seed=seed)
        head.calibration[kind] = fit_platt(z, ys)
        p = platt(z, head.calibration[kind])
        by_body = {}
        if kind == "robot":         # bodies share the MLP, each gets its own calibration where it can
            for b in sorted(set(bodies)):
                m = bodies == b
                if m.sum() >= MIN_CALIBRATION and 0 < ys[m].sum() < m.sum():
                    head.calibration[f"{kind}/{b}"] = fit_platt(z[m], ys[m])
                    p[m] = platt(z[m], head.calibration[f"{kind}/{b}"])
                    by_body[b] = [precision_recall(p[m], ys[m], t) for t in (0.5, 0.8, 0.9, 0.95)]
        report[kind] = {"episodes": len(ys), "successes": int(ys.sum()), "folds": k,
                        "calibration": {c: list(v) for c, v in head.calibration.items() if c.split("/")[0] == kind},
                        "out_of_fold_at": [precision_recall(p, ys, t) for t in (0.5, 0.8, 0.9, 0.95)],
                        **({"out_of_fold_by_body": by_body} if by_body else {})}
        log(f"{kind}: {json.dumps(report[kind], default=float)}")
    save_success_head(head, out, extra={"trained_on": [str(p) for p in paths], "calibration_fit": "cross-fitted",
                                        "folds": folds, "steps": steps, "seed": seed, "report": report,
                                        "seconds": {"features": round(t1 - t0), "train": round(time.perf_counter() - t1)}})
    return report


def rebuild(data: Path, out: Path, *, steps: int, seed: int, log=print) -> None:
    """Record ``RECORD``'s episodes into ``data`` (with the checkpoint ``out`` playing its part),
    then train and calibrate ``out``'s success head on them."""
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    dirs = record(data, out)
    t1 = time.perf_counter()
    train_success_head(dirs, out, steps=steps, seed=seed, log=log)
    log(f"episodes {t1 - t0:.0f} s, training {time.perf_counter() - t1:.0f} s; success head in {out}")
