"""Persistent-deployment evaluation of the success memory: memory on vs off over paired streams.

Stream s, episode i runs with seed `seed + s * episodes + i` in every arm, so arms are paired
episode by episode. Each memory arm starts every stream with an empty memory that grows online
from its own verified successes. Because episodes within a stream share the memory they are not
independent; the report therefore adds stream-level differences (sign test and bootstrap over
streams) beside the episode-level Wilson and Newcombe intervals.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from embodia.agent.evaluation.stats import newcombe, wilson
from embodia.agent.loop.episode import run_episode
from embodia.agent.loop.factory import device_namespace
from embodia.shared.files import write_atomic

# failure credit switched off, both rules (pooled per source episode, and per entry)
NO_CREDIT = {"episode_credit": False, "fail_delete_min": 2 ** 31 - 1}
# arm name -> MemoryConfig overrides (None: memory off); the ablations of the issue
ARMS = {
    "off": None,
    "online": {},
    "no-filter": {"consistency": False},
    "no-mode-selection": {"mode_selection": False},
    "fixed-confidence": {"fixed_confidence": 1.0},
    "replay": {"replay": True},
    # retrieve-then-select: the policy's own chunk nearest the prior, of 8 (the spec's select-N)
    "select": {"select": 8},
    # the noise of a stored success, no steering: what seed recall alone buys (a confidence held at
    # 0, below any confidence floor, never steers)
    "seed-recall-only": {"recall_seed": True, "fixed_confidence": 0.0},
    # the same recalled noise with the steering on top: what steering adds to a recalled seed
    "seed-recall": {"recall_seed": True},
    # the noise that began a retrieved success's chunk, the policy's whole flow from it (no prior)
    "noise-recall": {"recall_noise": True},
    "noisy-labels": {},      # 10% of episodes falsely reported successful: failure credit must clean up
    # the same false labels with failure credit switched off: what the credit itself buys
    "noisy-no-credit": NO_CREDIT,
    "noisy-burst": {},
    "noisy-burst-no-credit": NO_CREDIT,
    "noisy-stuck": {},
    "noisy-stuck-no-credit": NO_CREDIT,
    # clean labels, failure credit off (both rules): under drift (--then-shift) what credit buys
    "no-credit": NO_CREDIT,
    # the memory fed by a success source instead of the simulator's check (LABEL_ARMS)
    "learned": {},
}
# arms whose labels come from a success source (`embodia.agent.loop.success`), never from the device
LABEL_ARMS = {"learned": "learned"}
NOISY_RATE = 0.1
# the false-label arms: arm -> (when the faulty detector errs, which failures it reports as successes)
#   "spread": whenever fewer than NOISY_RATE of the episodes so far carry a false label;
#   "burst": every failure from the start of the stream until NOISY_RATE of the stream's episodes
#            carry one, then never (a detector that is broken at deployment and then fixed);
#   "any": any failure; "stuck": only failures where the puck never got through a gap (the device's
#          info `gap` is None): a detector that takes a puck wedged in the blocked gap for one that
#          went through, so its false successes are the harmful kind, steering into the wall.
NOISY = {"noisy-labels": ("spread", "any"), "noisy-no-credit": ("spread", "any"),
         "noisy-burst": ("burst", "any"), "noisy-burst-no-credit": ("burst", "any"),
         "noisy-stuck": ("burst", "stuck"), "noisy-stuck-no-credit": ("burst", "stuck")}
# each false-label arm and its twin without failure credit
NO_CREDIT_TWIN = {"noisy-labels": "noisy-no-credit", "noisy-burst": "noisy-burst-no-credit",
                  "noisy-stuck": "noisy-stuck-no-credit"}


class NoisyLabels:
    """A faulty success detector: it reports failed episodes as successes (see `NOISY` for the
    `schedule` and `which` failures) until `rate` of the episodes carry a false label. It counts the
    entries those false successes put into the memory, so the report can show how many failure
    credit removed. `stream_length` (episodes in the stream, for "burst") and `device` (read for "stuck")
    are set by `run_stream`."""

    def __init__(self, policy, rate: float, schedule: str = "spread", which: str = "any"):
        if schedule not in ("spread", "burst") or which not in ("any", "stuck"):
            raise ValueError(f"unknown detector {schedule!r}/{which!r}")
        self.policy, self.rate, self.schedule, self.which = policy, rate, schedule, which
        self.stream_length = None
        self.device = None
        self.episodes = 0
        self.poisoned: list[dict] = []     # per false success: id, entries stored, what the device measured
        self._flipped = False

    @property
    def false_positives(self) -> int:
        return len(self.poisoned)

    @property
    def poisoned_ids(self) -> list[int]:
        """The ids the false successes were stored under."""
        return [p["id"] for p in self.poisoned]

    def __getattr__(self, name):
        return getattr(self.policy, name)

    def _poisoned_in_memory(self, ids, used_only: bool = False) -> int:
        e = self.policy.memory.entries(self.policy.namespace)
        if not e:
            return 0
        hit = np.isin(e["episode_id"], ids)
        return int((hit & (e["n_used"] > 0)).sum() if used_only else hit.sum())

    def end_episode(self, success: bool) -> None:
        self.episodes += 1
        if self.schedule == "burst" and not self.stream_length:
            raise ValueError("a burst detector needs the stream's length (stream_length)")
        budget = self.rate * (self.stream_length if self.schedule == "burst" else self.episodes)
        flipped = not success and self.false_positives < round(budget, 9) and self._mislabels()
        self.policy.end_episode(success or flipped)
        self._flipped = flipped
        if flipped:
            ep = self.policy.episodes                           # the id the episode was stored under
            self.poisoned.append({"id": ep, "stored": self._poisoned_in_memory([ep])})

    def _mislabels(self) -> bool:
        if self.which == "any":
            return True
        info = self.device.info() if self.device is not None else {}
        if "gap" not in info:
            raise ValueError("the 'stuck' detector reads the device's info['gap'] (sim:twogap-push)")
        return info["gap"] is None

    def annotate(self, info: dict) -> None:
        """Attach what the device measured about the episode just ended, if it was falsely labelled
        (for twogap: which gap the puck passed, if any, and how far from the goal it stopped)."""
        if self._flipped and self.poisoned:
            self.poisoned[-1]["info"] = {k: v for k, v in info.items() if k != "policy"}

    def poison_report(self) -> dict:
        """Poisoned entries stored, still in the memory, and of those the ones that ever steered a
        decision (the others lost every vote to the successful mode and never acted)."""
        for p in self.poisoned:
            p["left"] = self._poisoned_in_memory([p["id"]])
        return {"false_positives": self.false_positives, "episodes": self.episodes,
                "entries_stored": sum(p["stored"] for p in self.poisoned),
                "entries_left": self._poisoned_in_memory(self.poisoned_ids),
                "entries_left_that_steered": self._poisoned_in_memory(self.poisoned_ids, used_only=True),
                "false_successes": self.poisoned}


def poison_summary(per_stream: list) -> dict:
    """Totals over streams of `NoisyLabels.poison_report()`: entries stored and left, and the false
    successes split by what the device measured (twogap: `gap` None = stuck before the wall, the
    kind that steers into failures; else it passed a gap and stopped short of the goal), with how
    many of each lost every entry."""
    rows = [p for p in per_stream if p is not None]
    out = {k: sum(p[k] for p in rows) for k in ("false_positives", "entries_stored", "entries_left",
                                                  "entries_left_that_steered")}
    out["entries_removed_share"] = (1 - out["entries_left"] / out["entries_stored"]) if out["entries_stored"] else None
    kinds: dict = {}
    for p in rows:
        for f in p["false_successes"]:
            info = f.get("info") or {}
            kind = ("stuck" if info.get("gap") is None else "passed_a_gap") if "gap" in info else "all"
            k = kinds.setdefault(kind, {"sources": 0, "removed": 0, "entries_stored": 0, "entries_left": 0})
            k["sources"] += 1
            k["removed"] += int(f.get("left", f["stored"]) == 0 and f["stored"] > 0)
            k["entries_stored"] += f["stored"]
            k["entries_left"] += f.get("left", f["stored"])
    out["by_kind"] = kinds
    return out


def arm_factory(policy, namespace: str) -> Callable[..., object]:
    """`make(arm, stream=0)`: the plain policy for "off", else a policy steered by a fresh memory
    with the checkpoint's own memory settings (its memory.json; the defaults without one) and the
    arm's changes on top, so "online" is the memory as the checkpoint ships it and each ablation
    differs from it in one thing. A stream's result depends only on the arm, the stream index and
    the seeds, so it is the same whether streams run in one process or many."""
    from embodia.memory import MemoryConfig
    from embodia.policies.robot.steered import SteeredPolicy, memory_for

    def make(arm: str, stream: int = 0):
        if arm not in ARMS:
            raise ValueError(f"unknown arm {arm!r}; known: {', '.join(ARMS)}")
        if ARMS[arm] is None:
            return policy
        own = {k: v for k, v in policy.memory_settings.items() if k != "key"}     # a VLAPolicy's
        config = MemoryConfig(**{**own, **ARMS[arm]})
        steered = SteeredPolicy(policy, memory_for(policy, config), namespace=namespace)
        return NoisyLabels(steered, NOISY_RATE, *NOISY[arm]) if arm in NOISY else steered
    return make


# the same for screens: arm name -> ScreenMemoryConfig overrides (None: memory off)
SCREEN_ARMS = {"off": None, "online": {}, "no-values": {"values": "off"}, "learned": {}}


class NoOracle:
    """The device with its simulator check hidden from the loop (no "success" capability): the loop
    does not stop an episode when the task is done. ``success()`` stays callable for the
    benchmark's own scoring after the episode."""

    def __init__(self, device):
        self.inner = device

    @property
    def capabilities(self):
        return frozenset(self.inner.capabilities) - {"success"}

    def __getattr__(self, name):
        return getattr(self.inner, name)


def arm_loop(arm: str, device, blind: bool):
    """(device for the loop, labeler, on_step maker) of an arm. An arm of `LABEL_ARMS` is fed by its
    success source. ``blind``: the memory-off arm and the label-source arms never see the
    simulator's check: the loop runs on `NoOracle`, and the learned detector both labels the
    episode and ends it once it is sure the task is done (``LearnedLabeler.stopper``); oracle-fed
    memory arms stay as they are (the reference)."""
    from embodia.agent.loop.success import make_labeler
    labeler = make_labeler(LABEL_ARMS[arm], device, say=lambda m: None) if arm in LABEL_ARMS else None
    if not blind or not (arm == "off" or arm in LABEL_ARMS):
        return device, labeler, None
    stop_by = labeler or make_labeler("learned", device, say=lambda m: None)
    return NoOracle(device), stop_by, stop_by.stopper(device)


def label_summary(labels: list[dict], truth: list[bool]) -> dict:
    """What a success source told the memory over a stream, against the simulator's check."""
    vs = [bool(lab["verified"] and lab["success"]) for lab in labels]
    vf = [bool(lab["verified"] and lab["success"] is False) for lab in labels]
    return {"episodes": len(labels), "verified_success": sum(vs), "verified_failure": sum(vf),
            "unverified": sum(not lab["verified"] for lab in labels),
            "false_successes": sum(v and not t for v, t in zip(vs, truth)),
            "false_failures": sum(f and t for f, t in zip(vf, truth)),
            "true_successes_missed": sum(t and not v for v, t in zip(vs, truth))}


def screen_arm_factory(policy, device) -> Callable[..., object]:
    """`make(arm, stream=0)` for a GUI policy: the policy for "off", else a `ScreenMemoryPolicy`
    (replace mode) with a fresh `ScreenMemory` configured by `SCREEN_ARMS[arm]`."""
    from embodia.memory import ScreenMemory, ScreenMemoryConfig
    from embodia.policies.gui.screen_memory import ScreenMemoryPolicy

    def make(arm: str, stream: int = 0):
        if arm not in SCREEN_ARMS:
            raise ValueError(f"unknown arm {arm!r}; known for screens: {', '.join(SCREEN_ARMS)}")
        if SCREEN_ARMS[arm] is None:
            return policy
        return ScreenMemoryPolicy(policy, ScreenMemory(ScreenMemoryConfig(**SCREEN_ARMS[arm])), device=device)
    return make


def run_stream(device, make_arm_policy: Callable[..., object], arm: str, stream: int, *, episodes: int,
               seed: int = 0, on_episode=None, drift=None, blind: bool = False) -> dict:
    """One stream of one arm: a fresh policy (and memory), `episodes` episodes with the stream's
    seeds. `drift=(k, other_device)`: episodes k and later run on `other_device` (the world changes
    under a memory that keeps what it learned: drift, ARCHITECTURE.md section 8). An arm of
    `LABEL_ARMS` is fed by its success source; `blind`: see `arm_loop`. The outcome is always the
    simulator's check at the episode's end. Returns {"outcomes", "steered" (decisions per episode),
    "steps", "memory_stats", "poison", "labels"} (JSON-able)."""
    policy = make_arm_policy(arm, stream)
    if isinstance(policy, NoisyLabels):
        policy.stream_length, policy.device = episodes, device
    outcomes, steered, steps, labels = [], [], [], []
    for i in range(episodes):
        dev = drift[1] if drift is not None and i >= drift[0] else device
        if i == 0 or (drift is not None and i == drift[0]):
            loop_dev, labeler, on_step = arm_loop(arm, dev, blind)
        extra = {k: v for k, v in (("labeler", labeler), ("on_step", on_step)) if v is not None}
        r = run_episode(loop_dev, policy, seed=seed + stream * episodes + i, **extra)
        if r.interrupted:
            raise KeyboardInterrupt
        if isinstance(policy, NoisyLabels):
            policy.annotate(r.info)
        truth = bool(r.success) if labeler is None and not blind else (r.error is None and bool(dev.success()))
        if "success_label" in r.info:
            labels.append(r.info["success_label"])
        outcomes.append(truth)
        pinfo = r.info.get("policy", {})      # SteeredPolicy: memory_steered; ScreenMemoryPolicy: the two below
        steered.append(float(pinfo.get("memory_steered", pinfo.get("memory_replaced", 0) + pinfo.get("memory_reranked", 0))))
        steps.append(int(r.steps))
        if on_episode:
            on_episode(arm, stream, i, r)
    mem = policy.memory
    return {"outcomes": outcomes, "steered": steered, "steps": steps,
            "memory_stats": mem.stats() if mem is not None else None,
            "poison": policy.poison_report() if isinstance(policy, NoisyLabels) else None,
            "labels": label_summary(labels, outcomes) if labels else None}


def rate_of(k: int, n: int) -> dict:
    """k successes of n episodes: the counts, the rate and its Wilson interval (None for none)."""
    k, n = int(k), int(n)
    return {"successes": k, "episodes": n, "success_rate": k / n if n else None,
            "wilson95": list(wilson(k, n)) if n else None}


def _rate(xs) -> dict:
    return rate_of(sum(xs), len(xs))


def _sign_test(diffs) -> float:
    """Two-sided exact sign test p-value over non-zero stream differences."""
    pos, neg = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
    n = pos + neg
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(0, min(pos, neg) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def _bootstrap(diffs, reps: int = 10000, seed: int = 0) -> list[float]:
    d = np.asarray(diffs, float)
    means = np.random.default_rng(seed).choice(d, size=(reps, len(d))).mean(1)
    return [float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))]


def evaluate_memory(device, make_arm_policy: Callable[..., object], *, arms: list[str], streams: int,
                    episodes: int, seed: int = 0, window: int = 10, on_episode=None) -> dict:
    """`make_arm_policy(arm, stream)` returns a fresh policy (with a fresh memory for memory arms).
    Runs every stream of every arm in this process; see `build_report`."""
    runs = {(arm, s): run_stream(device, make_arm_policy, arm, s, episodes=episodes, seed=seed,
                                 on_episode=on_episode)
            for arm in arms for s in range(streams)}
    return build_report(runs, arms=arms, streams=streams, episodes=episodes, seed=seed, window=window)


def build_report(runs: dict, *, arms: list[str], streams: int, episodes: int, seed: int = 0,
                 window: int = 10) -> dict:
    """The report from `{(arm, stream): run_stream(...)}`: per-arm Wilson intervals (all episodes
    and the second half of each stream), learning curves, and for every arm against "off" (and for
    each false-label arm against clean labels, "online", and against its twin without failure
    credit, and for "online" against "no-credit", when they ran) the Newcombe interval, McNemar discordant counts and the stream-level
    sign test and bootstrap."""
    outcomes = {a: np.array([runs[a, s]["outcomes"] for s in range(streams)], bool).reshape(streams, episodes)
                for a in arms}
    steered = {a: np.array([runs[a, s]["steered"] for s in range(streams)], float) for a in arms}
    half = episodes // 2
    report = {"streams": streams, "episodes_per_stream": episodes, "seed": seed, "arms": {}, "comparisons": {}}
    for arm in arms:
        o = outcomes[arm]
        n_win = max(1, episodes // window)
        stats = [runs[arm, s]["memory_stats"] for s in range(streams) if runs[arm, s]["memory_stats"] is not None]
        poison = [runs[arm, s].get("poison") for s in range(streams)]
        report["arms"][arm] = {
            **_rate(o.ravel()),
            "second_half": _rate(o[:, half:].ravel()),
            "per_stream": o.mean(1).tolist(),
            "per_stream_second_half": o[:, half:].mean(1).tolist(),
            "learning_curve": [float(o[:, w * window:(w + 1) * window].mean()) for w in range(n_win)],
            "steered_decisions_per_episode": float(steered[arm].mean()),
            "mean_steps": float(np.mean([runs[arm, s]["steps"] for s in range(streams)])),
            "memory_stats_per_stream": stats,
            "quarters": ([float(o[:, q * episodes // 4:(q + 1) * episodes // 4].mean()) for q in range(4)]
                         if episodes >= 4 else None),       # success per quarter of the streams
            **({"poison_per_stream": poison, "poison": poison_summary(poison)}
               if any(p is not None for p in poison) else {}),
        }
        labs = [runs[arm, s].get("labels") for s in range(streams) if runs[arm, s].get("labels")]
        if labs:
            report["arms"][arm]["labels"] = {k: sum(d[k] for d in labs) for k in labs[0]}
    todo = [(arm, "off") for arm in arms if "off" in arms and arm != "off"]
    todo += [(arm, base) for arm in arms if arm in NO_CREDIT_TWIN
             for base in ("online", NO_CREDIT_TWIN[arm]) if base in arms]
    todo += [("online", "no-credit")] if {"online", "no-credit"} <= set(arms) else []
    todo += [(arm, "online") for arm in arms if arm in LABEL_ARMS and "online" in arms]
    for arm, base in todo:
        a, b = outcomes[arm], outcomes[base]
        row = {}
        for part, sl in (("all", slice(None)), ("second_half", slice(half, None))):
            ka, na = int(a[:, sl].sum()), a[:, sl].size
            kb, nb = int(b[:, sl].sum()), b[:, sl].size
            d, lo, hi = newcombe(ka, na, kb, nb)
            stream_d = (a[:, sl].mean(1) - b[:, sl].mean(1)).tolist()
            row[part] = {"diff": d, "newcombe95": [lo, hi], "per_stream_diff": stream_d,
                         "stream_sign_test_p": _sign_test(stream_d), "stream_bootstrap95": _bootstrap(stream_d),
                         # paired discordant counts (McNemar): arm succeeded where base failed, and back
                         "arm_only": int((a[:, sl] & ~b[:, sl]).sum()),
                         "base_only": int((~a[:, sl] & b[:, sl]).sum())}
        report["comparisons"][f"{arm} - {base}"] = row
    return report


# -- streams in parallel processes ------------------------------------------------------------------
_WORKER: dict = {}


def _worker_init(device_uri: str, shift, size, policy_spec: str, threads: int, drift=None,
                 blind: bool = False) -> None:
    import os
    os.environ.setdefault("MUJOCO_GL", "egl")
    import torch
    torch.set_num_threads(threads)
    try:
        import faiss
        faiss.omp_set_num_threads(1)
    except ImportError:
        pass
    from multiprocessing.util import Finalize

    from embodia.agent.loop.factory import make_device, make_policy
    dev = make_device(device_uri, shift=shift, size=size)
    # close the device (its GL context) when the worker exits, before MuJoCo's atexit hook
    # terminates the EGL display (or when the worker moves on to another cell)
    closers = [Finalize(dev, dev.close, exitpriority=10)]
    pol = make_policy(policy_spec, dev, threads=threads)
    make = screen_arm_factory(pol, dev) if dev.embodiment.is_gui else \
        arm_factory(pol, device_namespace(device_uri, dev.embodiment))
    _WORKER.update(device=dev, make=make, drift=None, blind=blind, closers=closers)
    if drift is not None:                 # (k, shift): the same device under another shift from episode k
        other = make_device(device_uri, shift=drift[1], size=size)
        closers.append(Finalize(other, other.close, exitpriority=10))
        _WORKER["drift"] = (drift[0], other)


def _worker_run(arm: str, stream: int, episodes: int, seed: int) -> tuple:
    return arm, stream, run_stream(_WORKER["device"], _WORKER["make"], arm, stream, episodes=episodes, seed=seed,
                                   drift=_WORKER["drift"], blind=_WORKER["blind"])


def _worker_run_cell(init: tuple, arm: str, stream: int, episodes: int, seed: int) -> tuple:
    """One stream of the cell ``init`` in a shared worker: it opens that cell's device and policy
    unless it holds them already (cells are handed out in order, so it rarely switches)."""
    if _WORKER.get("init") != init:
        for close in _WORKER.pop("closers", []):
            close()
        _WORKER.clear()
        _worker_init(*init)
        _WORKER["init"] = init
    return _worker_run(arm, stream, episodes, seed)


def run_streams_parallel(device_uri: str, policy_spec: str, *, arms: list[str], streams: int, episodes: int,
                         seed: int = 0, shift=None, size=None, jobs: int = 2, threads: int = 1,
                         cache_dir=None, on_stream=None, drift=None, blind: bool = False) -> dict:
    """Every (arm, stream) in one of `jobs` worker processes (each opens its own device and
    policy, `threads` torch threads). Results are the same as in one process: a stream depends only
    on its arm, index and seeds. With `cache_dir`, each finished stream is written there as JSON at
    once and a rerun with the same settings skips it, so a crash loses at most the streams in
    flight. `drift=(k, shift)`: from episode k of every stream the device runs under `shift` (see
    `run_stream`). Returns `{(arm, stream): run_stream(...)}` for `build_report`."""
    cell = dict(device_uri=device_uri, policy_spec=policy_spec, arms=arms, streams=streams, episodes=episodes,
                seed=seed, shift=shift, size=size, drift=drift, blind=blind)
    each = None if on_stream is None else (lambda i, *a, **kw: on_stream(*a, **kw))
    return run_cells_parallel([cell], jobs=jobs, threads=threads, cache_dir=cache_dir, on_stream=each)[0]


def run_cells_parallel(cells: list[dict], *, jobs: int = 2, threads: int = 1, cache_dir=None,
                       on_stream=None) -> list[dict]:
    """`run_streams_parallel` for several cells (each a dict of its keywords: device_uri, policy_spec,
    arms, streams, episodes, seed, and optionally shift, size, drift, blind) in ONE pool of `jobs`
    workers: no worker start-up per cell and no worker idle at a cell's end while another cell waits.
    Streams are handed out cell by cell, so a worker opens another cell's device and policy only when
    it moves on. ``on_stream(cell_index, arm, stream, result, cached=)``. One runs dict per cell."""
    import json
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from pathlib import Path

    cache = Path(cache_dir) if cache_dir else None
    out: list[dict] = [{} for _ in cells]
    inits, tags, todo = [], [], []

    def cache_file(i, arm, s, tag=None):
        return cache / f"{tag or tags[i]}|{arm}|{s}.json".replace("|", "__").replace(":", "-")

    def cell_tag(c, policy):
        shift, size, drift, blind = c.get("shift"), c.get("size"), c.get("drift"), c.get("blind", False)
        tag = f"{c['device_uri']}|{shift}|{size}|{policy}|seed{c['seed']}|ep{c['episodes']}".replace("/", "_")
        return tag + (f"|then-{drift[1]}-at{drift[0]}" if drift is not None else "") + ("|blind" if blind else "")
    for i, c in enumerate(cells):
        shift, size, drift, blind = c.get("shift"), c.get("size"), c.get("drift"), c.get("blind", False)
        tags.append(cell_tag(c, _policy_key(c["policy_spec"], cache)))
        inits.append((c["device_uri"], shift, size, c["policy_spec"], threads, drift, blind))
        legacy = cell_tag(c, c["policy_spec"]) if cache is not None else tags[i]   # the absolute path's name
        for s in range(c["streams"]):           # stream-major: early streams of every arm finish first
            for arm in c["arms"]:
                if legacy != tags[i] and cache_file(i, arm, s, legacy).exists():
                    cache_file(i, arm, s, legacy).replace(cache_file(i, arm, s))     # kept under the old name
                if cache is not None and cache_file(i, arm, s).exists():
                    out[i][arm, s] = json.loads(cache_file(i, arm, s).read_text())
                    if on_stream:
                        on_stream(i, arm, s, out[i][arm, s], cached=True)
                else:
                    todo.append((i, arm, s))
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
    if not todo:
        return out
    if jobs == 1:      # one worker: this process, without a pool's start-up (the same streams)
        left = {i: [(a, s) for j, a, s in todo if j == i] for i in dict.fromkeys(j for j, _, _ in todo)}
        results = ((i, *r) for i, streams in left.items()     # cells read back whole open nothing
                   for r in _streams_here(inits[i], streams, cells[i]["episodes"], cells[i]["seed"]))
    else:
        from embodia.agent.evaluation.workers import idle_workers_ignore_ctrl_c, interruptible
        pool = ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn"),
                                   initializer=idle_workers_ignore_ctrl_c)
        futures = {pool.submit(interruptible, _worker_run_cell, inits[i], arm, s, cells[i]["episodes"],
                               cells[i]["seed"]): i for i, arm, s in todo}
        results = ((futures[f], *f.result()) for f in as_completed(futures))
    try:
        for i, arm, s, res in results:
            out[i][arm, s] = res
            if cache is not None:
                text = json.dumps(res, default=float).encode()
                write_atomic(cache_file(i, arm, s), lambda f: f.write(text))
            if on_stream:
                on_stream(i, arm, s, res, cached=False)
    finally:
        if jobs > 1:
            pool.shutdown(cancel_futures=True)
    return out


def _policy_key(policy_spec: str, cache) -> str:
    """How a stream's file names its policy: a checkpoint inside the cache's parent folder (the
    workdir's own copy) by its place there, so a workdir moved or copied elsewhere reads its streams
    back; anything else (a bundled name, a path outside) as given."""
    from pathlib import Path
    if cache is None or not Path(policy_spec).is_dir():
        return policy_spec
    try:
        return "workdir:" + Path(policy_spec).resolve().relative_to(Path(cache).resolve().parent).as_posix()
    except ValueError:
        return policy_spec


def _streams_here(init: tuple, todo: list, episodes: int, seed: int):
    """The streams of `todo` in this process, one at a time, as a worker would run them (its torch
    thread count restored afterwards); yields (arm, stream, result)."""
    import torch
    before = torch.get_num_threads()
    try:
        _worker_init(*init)
        for arm, s in todo:
            yield _worker_run(arm, s, episodes, seed)
    finally:
        for close in _WORKER.pop("closers", []):      # the device (and the drift's), closed once
            close()
        _WORKER.clear()
        torch.set_num_threads(before)


def learning_curve_png(report: dict, path, title: str = "") -> None:
    """Success per window of episodes (mean over streams) for every arm, drawn with Pillow (written
    as a PNG by `embodia.shared.images`)."""
    from PIL import Image, ImageDraw
    W, H, m = 640, 400, 50
    img = Image.new("RGB", (W, H), "white")
    d = ImageDraw.Draw(img)
    d.rectangle([m, m, W - m, H - m], outline="black")
    colors = ["black", "tab:blue", "red", "green", "orange", "purple", "brown"]
    palette = {"tab:blue": (31, 119, 180)}
    for y in (0.0, 0.25, 0.5, 0.75, 1.0):
        yy = H - m - y * (H - 2 * m)
        d.line([m - 4, yy, m, yy], fill="black")
        d.text((8, yy - 6), f"{y:.2f}", fill="black")
    d.text((m, 15), title or "success per window (mean over streams)", fill="black")
    for j, (arm, row) in enumerate(report["arms"].items()):
        curve = row["learning_curve"]
        if not curve:
            continue
        col = palette.get(colors[j % len(colors)], colors[j % len(colors)])
        pts = [(m + (k + 0.5) / len(curve) * (W - 2 * m), H - m - v * (H - 2 * m)) for k, v in enumerate(curve)]
        if len(pts) > 1:
            d.line(pts, fill=col, width=2)
        for x, y in pts:
            d.ellipse([x - 3, y - 3, x + 3, y + 3], fill=col)
        d.text((W - m - 150, m + 8 + 14 * j), f"{arm}: {row['success_rate']:.2f}", fill=col)
    d.text((W // 2 - 60, H - m + 15), "episode window within stream", fill="black")
    from embodia.shared.images import png_bytes
    data = png_bytes(np.asarray(img))
    write_atomic(path, lambda f: f.write(data))
