"""Offline evaluation: run a policy on recorded observations and score its actions against the recorded ones.

No device is opened. The policy reads each recorded observation with the recorded instruction and
embodiment, and its prediction is compared with what was recorded (teacher forcing: whatever it
predicted, the next step shows it the recorded next observation, and policies that keep a history
are told the recorded action).

Robots (LeRobot v3 datasets, ours or LeRobot's): at every ``stride``-th step the predicted chunk
is compared with the recorded actions from that step on: the first action (what a loop executes
first) and the whole chunk (against as many recorded future actions as the episode still has).
Errors are mean absolute errors per action channel, in the embodiment's units and normalized by
the channel's half range (q01..q99 of the dataset's stats, the range the VLA normalizes to
[-1, 1]), per episode and overall, beside a baseline that always predicts the dataset's mean action.

>>> from embodia.agent.recording.dataset import LocalDataset                     # doctest: +SKIP
>>> ds = LocalDataset("runs/pusher")                                            # doctest: +SKIP
>>> rep = score_robot(ds, RecordedPolicy(ds.embodiment))                        # doctest: +SKIP
>>> rep["overall"]["first"]["nmae"], rep["overall"]["chunk"]["nmae"]            # doctest: +SKIP
(0.0, 0.0)

Screens (our GUI step logs; the scorer is in `offline_gui.py`): per executed step, action-type accuracy, grounding accuracy (the
predicted point, or the centre of the predicted element, falls inside the recorded target element:
the element the recorded action names, else the smallest clickable element under its point, else
a box of +-50/1000 around it), typed-text exact match and step success (type, location, text and
the remaining arguments all right), each with a Wilson interval, split by app and by recorded
action type, beside the rates a uniformly random click would get on the same steps (``chance``).

>>> rep = score_gui("runs/phone", RecordedGuiPolicy())                          # doctest: +SKIP
>>> rep["overall"]["step_success"]["rate"], rep["chance"]["step_success"]       # doctest: +SKIP
(1.0, 0.013)

Memory (``memory=True``): each episode is scored twice, by the policy alone and by the policy
steered by a success memory built from the OTHER successful episodes of the data (leave one
out), so the memory's effect is measured on the same steps; robots need a VLA policy (the memory
keys are its normalized states), screens any GUI policy (`ScreenMemoryPolicy`, replace mode).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

import numpy as np

from embodia.agent.evaluation.offline_common import Cued, check_episodes, cue_step, policy_info
from embodia.agent.evaluation.offline_gui import GUI_METRICS, RandomClickPolicy, RecordedGuiPolicy, score_gui
from embodia.agent.recording.dataset_checks import DatasetError
from embodia.devices import Device, Observation
from embodia.policies.base import as_policy, exec_steps


# -- policies that need no model: the scorer's own sanity checks --------------------------------------
class RecordedPolicy(Cued):
    """The recorded actions as a robot policy: at step t it returns ``action[t:t+chunk]`` of the
    episode being scored (told by the scorer through ``cue``). ``shuffle=True`` permutes the actions
    across the episode's steps first: the same numbers at the wrong times, which a scorer must punish.

    >>> from embodia.devices.embodiment import Embodiment, Channel
    >>> p = RecordedPolicy(Embodiment("p", "pusher", actions=(Channel("vx"),), chunk=2, exec_horizon=1))
    >>> p.cue({"action": np.arange(3, dtype=np.float32)[:, None]}, 1); p.act(None, "").ravel().tolist()
    [1.0, 2.0]
    """

    def __init__(self, embodiment, *, shuffle: bool = False, seed: int = 0):
        self.embodiment, self.shuffle, self.seed = embodiment, shuffle, seed
        self.actions, self.t = np.zeros((0, embodiment.action_dim), np.float32), 0

    def reset(self, seed: int | None = None) -> None:
        self.t = 0

    def cue(self, episode: dict, t: int) -> None:
        if t == 0 or len(self.actions) != len(episode["action"]):
            a = np.asarray(episode["action"], np.float32)
            if self.shuffle:
                a = a[np.random.default_rng(self.seed + episode.get("episode_index", 0)).permutation(len(a))]
            self.actions = a
        self.t = t

    def act(self, obs, instruction: str) -> np.ndarray:
        return self.actions[self.t:self.t + max(1, self.embodiment.chunk)]


# -- robots -----------------------------------------------------------------------------------------
def action_scale(ds) -> np.ndarray:
    """Per-channel half range of the recorded actions (q01..q99, else min..max, else the
    embodiment's limits, else 1), the unit of normalized errors."""
    st = ds.stats.get("action", {})
    d = ds.embodiment.action_dim
    for lo, hi in (("q01", "q99"), ("min", "max")):
        if lo in st and hi in st and np.shape(st[lo]) == (d,):
            half = (np.asarray(st[hi], np.float64) - np.asarray(st[lo], np.float64)) / 2
            break
    else:
        low, high = ds.embodiment.action_bounds()
        half = np.where(np.isfinite(high - low), (high - low) / 2, 1.0)
    return np.where(half > 1e-8, half, 1.0)


def _robot_obs(ds, ep: dict, frames: dict, t: int) -> Observation:
    return Observation(images={c: f[t] for c, f in frames.items()}, state=ep["state"][t],
                       timestamp=float(t) / ds.fps)


class _Acc:
    """Running sums of absolute errors per channel."""

    def __init__(self, d: int):
        self.sum, self.n = np.zeros(d), 0

    def add(self, err: np.ndarray) -> None:
        err = np.abs(np.atleast_2d(err))
        self.sum += err.sum(0)
        self.n += len(err)

    def report(self, scale: np.ndarray, names: list[str]) -> dict:
        mae = self.sum / max(self.n, 1)
        nmae = mae / scale
        return {"n": self.n, "mae": dict(zip(names, mae.round(6).tolist())),
                "nmae": dict(zip(names, nmae.round(6).tolist())), "mae_mean": float(mae.mean()),
                "nmae_mean": float(nmae.mean()) if self.n else None}


def score_robot(ds, policy, *, episodes: list[int] | None = None, stride: int | None = None,
                seed: int = 0, plot_dir=None, plot_episodes: int = 3, memory: bool = False,
                progress: Callable[[int, int], None] | None = None) -> dict:
    """Score ``policy`` on the recorded episodes of a `LocalDataset` (see the module doc).

    ``stride``: score every stride-th step (default: the steps at which a loop asks this policy for
    a new chunk, `exec_steps`). ``plot_dir``: PNGs of predicted against recorded actions per channel
    for the first ``plot_episodes`` episodes. ``progress(done, total)``: after each episode.
    """
    emb = ds.embodiment
    if emb.action_dim == 0:
        raise ValueError(f"{ds.root}: no action feature to score against")
    names = [c.name for c in emb.actions]
    stride = max(1, exec_steps(as_policy(policy), emb, stride))
    scoreable(ds)
    eps = list(range(ds.num_episodes)) if episodes is None else check_episodes(episodes, ds.num_episodes, ds.root)
    scale = action_scale(ds)
    mean_action = np.asarray(ds.stats.get("action", {}).get("mean", np.zeros(emb.action_dim)), np.float64)
    arms = {"off": policy}
    if memory:
        arms["memory"] = None          # built per episode, leave one out
    overall = {arm: {"first": _Acc(emb.action_dim), "chunk": _Acc(emb.action_dim)} for arm in arms}
    by_offset: dict[str, list[_Acc]] = {arm: [] for arm in arms}
    baseline = _Acc(emb.action_dim)
    rows, plots = [], []
    for k, i in enumerate(eps):
        ep = ds.episode(i)
        T = len(ep["action"])
        frames = {c.name: ds.frames(i, c.name) for c in emb.cameras}
        row = {"episode": i, "task": ep["task"], "length": T, "success": ep["success"]}
        for arm in arms:
            pol = policy if arm == "off" else _steered_robot(ds, policy, i, ep)
            first, chunk = _Acc(emb.action_dim), _Acc(emb.action_dim)
            trace = []
            pol.reset(seed + i)
            for t in range(T):
                obs = _robot_obs(ds, ep, frames, t)
                if t % stride == 0:
                    cue_step(policy, ep, t)
                    pred = np.asarray(pol.act(obs, ep["task"]), np.float64).reshape(-1, emb.action_dim)
                    if len(pred) == 0:
                        raise ValueError(f"policy returned an empty chunk at episode {i} step {t}")
                    n = min(len(pred), T - t)
                    err = pred[:n] - ep["action"][t:t + n]
                    first.add(err[0])
                    chunk.add(err)
                    overall[arm]["first"].add(err[0])
                    overall[arm]["chunk"].add(err)
                    offs = by_offset[arm]
                    while len(offs) < n:
                        offs.append(_Acc(emb.action_dim))
                    for j in range(n):
                        offs[j].add(err[j])
                    trace.append((t, pred))
                as_policy(pol).after_step(obs, ep["action"][t])   # a steered policy's history: the record
            row[arm] = {"first": first.report(scale, names), "chunk": chunk.report(scale, names)}
            if arm == "memory":
                row[arm]["memory"] = policy_info(pol)
            if arm == "off" and plot_dir is not None and k < plot_episodes:
                plots.append(str(plot_robot_episode(Path(plot_dir) / f"episode_{i:04d}.png", ep, trace, names,
                                                    title=f"episode {i}: {ep['task']}")))
        baseline.add(ep["action"][::stride] - mean_action)
        rows.append(row)
        if progress:
            progress(k + 1, len(eps))
    out = {"kind": "robot", "dataset": str(ds.root), "embodiment": emb.name, "episodes": len(eps),
           "stride": stride, "channels": names, "scale": dict(zip(names, scale.round(6).tolist())),
           "units": {c.name: c.unit for c in emb.actions},
           "overall": _robot_overall(overall["off"], by_offset["off"], scale, names),
           "baseline_mean_action": {"first": baseline.report(scale, names)},
           "per_episode": rows, "plots": plots}
    if memory:
        out["memory"] = _robot_overall(overall["memory"], by_offset["memory"], scale, names)
        out["memory_effect"] = {k: out["memory"][k]["nmae_mean"] - out["overall"][k]["nmae_mean"]
                                for k in ("first", "chunk")}
    return out


def scoreable(ds):
    """``ds``, or DatasetError when it holds no episodes: an empty report would print None where
    its numbers go."""
    if ds.num_episodes == 0:
        raise DatasetError(f"{ds.root}: no episodes to score (meta/info.json total_episodes=0)")
    return ds




def _robot_overall(acc: dict, offs: list, scale, names) -> dict:
    rep = {k: a.report(scale, names) for k, a in acc.items()}
    rep["chunk_nmae_by_offset"] = [round(float((a.sum / max(a.n, 1) / scale).mean()), 6) for a in offs]
    return rep






def _steered_robot(ds, policy, scored: int, ep: dict):
    """The VLA steered by a frozen memory of every other successful episode of ``ds``."""
    from embodia.agent.loop.factory import device_namespace
    from embodia.policies.robot.steered import SteeredPolicy, memory_for
    if not as_policy(policy).steer_local:
        raise ValueError("memory=True on a robot dataset needs a VLA policy (embodia-tiny or a checkpoint)")
    ns = device_namespace((ep.get("meta") or {}).get("device") or "dataset:task", ds.embodiment)
    steered = SteeredPolicy(policy, memory_for(policy), namespace=ns, learn=False)
    for j, row in enumerate(ds.episodes):
        if j == scored or not row.get("success"):
            continue
        other = ds.episode(j)
        steered.namespace = device_namespace((other.get("meta") or {}).get("device") or "dataset:task", ds.embodiment)
        steered.remember(other["state"], other["action"], episode_id=j)
    steered.namespace = ns
    return steered


def plot_robot_episode(path, ep: dict, trace: list, names: list[str], *, title: str = "") -> Path:
    """A PNG with one panel per action channel: the recorded actions over the episode, each
    scored step's predicted chunk (thin line) and its first action (dot)."""
    try:
        import matplotlib
    except ImportError:
        raise ImportError("plots need matplotlib: pip install 'embodia[plots]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    d = len(names)
    fig, axes = plt.subplots(d, 1, figsize=(7, 1.8 * d + 0.6), sharex=True, squeeze=False)
    T = len(ep["action"])
    for c, ax in enumerate(axes[:, 0]):
        ax.plot(np.arange(T), ep["action"][:, c], color="black", lw=1.5, label="recorded")
        for t, pred in trace:
            n = min(len(pred), T - t)
            ax.plot(np.arange(t, t + n), pred[:n, c], color="tab:orange", lw=0.6, alpha=0.5)
        ax.scatter([t for t, _ in trace], [p[0, c] for _, p in trace], s=6, color="tab:red",
                   label="predicted (first action)", zorder=3)
        ax.set_ylabel(names[c])
    axes[0, 0].legend(loc="upper right", fontsize=7)
    axes[-1, 0].set_xlabel("step")
    fig.suptitle(title[:90], fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


# -- screens ----------------------------------------------------------------------------------------


# -- one entry point --------------------------------------------------------------------------------
def is_gui(path) -> bool:
    from embodia.agent.recording.gui_log import is_gui_recording
    return is_gui_recording(path)


class _Body(Device):
    """What `make_policy` needs of a device to bind a policy: the embodiment and capabilities."""

    def __init__(self, embodiment, capabilities=()):
        self.embodiment, self.capabilities = embodiment, frozenset(capabilities)


OFFLINE_POLICIES = {
    "recorded": "the recorded actions themselves (the scorer's ceiling: zero error, accuracy 1.0)",
    "shuffled": "the recorded actions permuted across each episode's steps (a scorer must punish it)",
    "random-click": "screens: a click at a uniformly random point (the report's chance column)",
}


def embodiment_of(path):
    """The embodiment a dataset or GUI recording was made with."""
    if is_gui(path):
        import json

        from embodia.devices.embodiment import Embodiment
        info = json.loads((Path(path) / "info.json").read_text())
        return Embodiment.from_dict(info["embodiment"])
    from embodia.agent.recording.dataset import LocalDataset
    return scoreable(LocalDataset(path)).embodiment      # refused before any policy loads or bar shows


def offline_policy(spec: str, path, *, seed: int = 0, threads: int | None = None, **policy_kw):
    """A policy for ``spec`` bound to the recording's embodiment: one of `OFFLINE_POLICIES`, or any
    `embodia.agent.loop.factory.make_policy` spec that needs no live device (a checkpoint, random,
    openai:<model>, hf:<path>)."""
    emb = embodiment_of(path)
    gui = is_gui(path)
    if spec in ("recorded", "shuffled"):
        return RecordedGuiPolicy(shuffle=spec == "shuffled", seed=seed) if gui else \
            RecordedPolicy(emb, shuffle=spec == "shuffled", seed=seed)
    if spec == "random-click":
        if not gui:
            raise ValueError("random-click is a GUI policy; on a robot dataset use --policy random")
        return RandomClickPolicy(seed)
    from embodia.agent.loop.factory import make_policy
    caps = ("ui_tree", "screenshot") if gui else ()
    return make_policy(spec, _Body(emb, caps), threads=threads, **policy_kw)


def score(path, policy, **kw) -> dict:
    """`score_gui` for a GUI recording, else `score_robot` on the `LocalDataset` at ``path``."""
    if is_gui(path):
        kw = {k: v for k, v in kw.items() if k not in ("stride", "plot_dir", "plot_episodes")}
        return score_gui(path, policy, **kw)
    from embodia.agent.recording.dataset import LocalDataset
    return score_robot(LocalDataset(path), policy, **kw)


def parse_episodes(text: str | None) -> list[int] | None:
    """Episode indices from ``"0-4,7"``; None (all) for an empty string.

    >>> parse_episodes("0-2,7"), parse_episodes(None)
    ([0, 1, 2, 7], None)
    """
    if not text:
        return None
    out = []
    for part in text.split(","):
        a, _, b = part.strip().partition("-")
        if not a.isdigit() or (b and not b.isdigit()):
            raise ValueError(f"episodes must look like 0-9,12; got {text!r}")
        out.extend(range(int(a), int(b or a) + 1))
    return out


def summary_lines(rep: dict) -> list[str]:
    """The report in a few lines of text."""
    if rep["kind"] == "robot":
        o, b = rep["overall"], rep["baseline_mean_action"]["first"]
        lines = [f"{rep['episodes']} episodes of {rep['embodiment']}, every {rep['stride']} steps "
                 f"({o['first']['n']} decisions)",
                 f"first action: MAE {o['first']['mae_mean']:.4f} (units), normalized {o['first']['nmae_mean']:.4f}"
                 f"  [mean-action baseline {b['nmae_mean']:.4f}]",
                 f"whole chunk : MAE {o['chunk']['mae_mean']:.4f} (units), normalized {o['chunk']['nmae_mean']:.4f}"]
        lines += [f"  {c}: first {o['first']['nmae'][c]:.4f}, chunk {o['chunk']['nmae'][c]:.4f} "
                  f"(normalized; scale {rep['scale'][c]:g} {rep['units'].get(c, '')})".rstrip() for c in rep["channels"]]
        if "memory" in rep:
            m = rep["memory"]
            lines.append(f"with memory (leave one out): first {m['first']['nmae_mean']:.4f}, chunk "
                         f"{m['chunk']['nmae_mean']:.4f} (normalized; change {rep['memory_effect']['first']:+.4f}, "
                         f"{rep['memory_effect']['chunk']:+.4f})")
        lines += [f"plot: {p}" for p in rep["plots"]]
        return lines

    def row(name, t, chance=None):
        r = t[name]
        rate = "n/a" if r["rate"] is None else f"{r['rate']:.3f} [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}]"
        ch = "" if chance is None or chance.get(name) is None else f"   chance {chance[name]:.3f}"
        return f"{name:>12}: {rate} ({r['k']}/{r['n']}){ch}"
    lines = [f"{rep['episodes']} episodes, {rep['steps']} steps"]
    lines += [row(m, rep["overall"], rep["chance"]) for m in GUI_METRICS]
    for split in ("by_app", "by_action"):
        for key, t in rep[split].items():
            lines.append(f"  {split[3:]} {key}: " + ", ".join(
                f"{m} {t[m]['k']}/{t[m]['n']}" for m in GUI_METRICS if t[m]["n"]))
    if "memory" in rep:
        lines.append("with memory (leave one out): " + ", ".join(
            f"{m} {rep['memory'][m]['rate']:.3f} ({rep['memory_effect'][m]:+.3f})" for m in GUI_METRICS
            if rep["memory"][m]["rate"] is not None) + f"; {rep['memory_replaced_steps']} steps decided by the memory")
    return lines


def spearman(a, b) -> float | None:
    """Spearman's rank correlation (average ranks for ties); None when either side is constant.

    >>> spearman([1, 2, 3], [10, 20, 30]), spearman([1, 2, 3], [3, 2, 1])
    (1.0, -1.0)
    """
    ra, rb = _ranks(a), _ranks(b)
    if np.std(ra) == 0 or np.std(rb) == 0:
        return None
    return float(np.corrcoef(ra, rb)[0, 1])


def kendall(a, b) -> float | None:
    """Kendall's tau-b; None when either side is constant.

    >>> kendall([1, 2, 3], [1, 3, 2])
    0.3333333333333333
    """
    n, conc, ta, tb = len(a), 0, 0, 0
    for i in range(n):
        for j in range(i + 1, n):
            da, db = np.sign(a[i] - a[j]), np.sign(b[i] - b[j])
            conc += da * db
            ta += da != 0
            tb += db != 0
    return None if ta == 0 or tb == 0 else float(conc / math.sqrt(ta * tb))


def _ranks(x) -> np.ndarray:
    x = np.asarray(x, np.float64)
    order = np.argsort(x, kind="stable")
    r = np.empty(len(x))
    r[order] = np.arange(len(x), dtype=np.float64)
    for v in np.unique(x):           # ties share their mean rank
        r[x == v] = r[x == v].mean()
    return r
