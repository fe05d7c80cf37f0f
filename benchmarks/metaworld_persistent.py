"""Persistent deployment on Meta-World: a frozen policy in one cell under a local shift, its success
memory on vs off, paired episode by episode; one JSON line.

    # does exactly replaying a stored success pass the task by itself? (decides --jitter; 20 minutes)
    python benchmarks/metaworld_persistent.py replay-check --tasks hard,very_hard --repeat 3 \\
        --jitter 0,0.02,0.04 --streams 3 --episodes 9 --seed 1008

    # the evaluation: clean and shifted cells, memory arms, per axis and pooled (hours; resumable)
    python benchmarks/metaworld_persistent.py eval --policy embodia-mt50 --tasks hard,very_hard \\
        --axes gain,delay,pose --severity gain=1,delay=1,pose=1 --streams 4 --episodes 30 \\
        --seed 40000 --arms off,online,replay --memory-settings '{"sigma": 1.0}' \\
        --workdir runs/persistent --jobs 2 --plot-dir runs/persistent/plots

A *cell* is a task, K base set-ups (`repeat`), a jitter of the object and goal positions around
them in every episode (`jitter`, metres, so no set-up comes back identical) and a shift at a
severity (sim/metaworld_shifts.py); a *stream* is `--episodes` episodes in one cell from an empty
memory, and each stream is a cell of its own (`cell_span`: stream s shows other base set-ups than
stream s + 1). Episode i of stream s has the same seed in every arm, so arms are paired; the claim is
read off the second half of the streams (after the memory had time to fill).

`eval` runs, per task: the clean cell (what the policy does without the shift; with every memory arm
unless `--no-clean-memory`, so that do-no-harm is measured there too), and
per axis every arm (`off`, `online` = the memory with the checkpoint's settings, or
`--memory-settings` on top; `replay` = the same memory executing the stored chunks, no generative
refinement; `seed-recall-only`; `no-filter`; ...; see memory_eval.ARMS). Each finished stream is
kept in `--workdir`, so a stopped run goes on where it stopped (the workdir may be moved or copied
first: its streams name the policy copy inside it by its place there). The report: per axis and per
group, clean vs shifted success (what the axis costs), each arm against off and online against
replay with the paired Newcombe interval, the recovery (on - off) / (clean - off), per cell the
paired interval of each arm - off (``harmed_arms``: those whose interval lies wholly below 0), and
the cost: episodes run, wall time and episodes per second with the worker counts, summed over every
invocation that ran streams in the workdir (its `cost.jsonl`), so a run split over sessions reports
its whole cost.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np

SUITE_STEPS = 500


def expand_tasks(spec: str) -> list[str]:
    """Task names from a comma list of tasks and group or suite names (hard, very_hard, mt10, ...)."""
    from embodia.sim.metaworld import SUITES
    out: list[str] = []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        for t in (SUITES[part] if part in SUITES else (part,)):
            if t not in out:
                out.append(t)
    return out


def cell_uri(task: str, *, repeat: int, jitter: float, span: int, shift: str | None = None,
             severity: float = 1.0, drift: int = 0, extra: dict | None = None, max_steps: int = SUITE_STEPS) -> str:
    """The device URI of a persistent-deployment cell (stream-sized blocks of seeds, one cell each)."""
    q = {"max_steps": str(max_steps), "repeat": str(repeat), "jitter": f"{jitter:g}", "cell_span": str(span),
         **(extra or {})}
    if shift:
        q.update(shift=shift, severity=f"{severity:g}")
        if drift:
            q["drift"] = str(drift)
    return f"sim:metaworld/{task}?" + "&".join(f"{k}={v}" for k, v in q.items())


# -- replay-check ------------------------------------------------------------------------------------
def replay_check(tasks: list[str], *, repeat: int, jitters: list[float], streams: int, episodes: int,
                 seed: int) -> dict:
    """Per jitter: the scripted expert's success on the cell's episodes, and the success of replaying,
    open loop, the expert's stored success on the same base set-up (the first K episodes of a stream
    store one success per base; the rest replay it)."""
    from embodia.devices import open_device
    out = {}
    for j in jitters:
        expert_k = replay_k = replay_n = expert_n = 0
        per_task = {}
        for task in tasks:
            tk = tn = 0
            with open_device(cell_uri(task, repeat=repeat, jitter=j, span=episodes, extra={"render": "0"})) as dev:
                pol = dev.expert()
                for s in range(streams):
                    stored: dict[int, list] = {}
                    for i in range(episodes):
                        ep_seed = seed + s * episodes + i
                        base = ep_seed % repeat
                        if base in stored:
                            tk += _run(dev, ep_seed, actions=stored[base])
                            tn += 1
                        ok, acts = _run(dev, ep_seed, policy=pol)
                        expert_k, expert_n = expert_k + ok, expert_n + 1
                        if ok and base not in stored:
                            stored[base] = acts
            per_task[task] = {"replay_successes": tk, "replays": tn}
            replay_k, replay_n = replay_k + tk, replay_n + tn
        out[f"{j:g}"] = {"expert": _rate(expert_k, expert_n), "replay": _rate(replay_k, replay_n),
                         "per_task": per_task}
    return out


def _run(dev, seed: int, policy=None, actions=None):
    """One episode: the expert (returns (success, its actions)) or a replay of `actions` (success)."""
    obs = dev.reset(seed)
    done: list = []
    for t in range(dev.max_steps):
        if actions is not None:
            if t >= len(actions):
                break
            a = actions[t]
        else:
            a = policy.act(obs, dev.instruction)[0]
        dev.act(a)
        done.append(np.asarray(a, np.float32))
        if dev.success():
            break
        obs = dev.observe()
    return bool(dev.success()) if actions is not None else (bool(dev.success()), done)


def _rate(k: int, n: int) -> dict:
    from embodia.agent.evaluation.memory_eval import rate_of
    return rate_of(k, n)


# -- eval --------------------------------------------------------------------------------------------
def run_cells(args, policy: str, tasks: list[str], axes: list[str], severity: dict, arms: list[str],
              progress) -> dict:
    """{(task, axis): {(arm, stream): run_stream(...)}}; axis None is the clean cell (every arm with
    ``--clean-memory``, the default, so that do-no-harm is measured there too; else memory off). All
    cells share one pool of ``--jobs`` workers (`run_cells_parallel`)."""
    from embodia.agent.evaluation.memory_eval import run_cells_parallel
    from embodia.agent.evaluation.suite import policy_reads
    reads = {k: v for k, v in policy_reads(policy).items() if k != "render"}
    keys, cells = [], []
    for task in tasks:
        for axis in [None, *axes]:
            uri = cell_uri(task, repeat=args.repeat, jitter=args.jitter, span=args.episodes, shift=axis,
                           severity=severity.get(axis, 1.0), drift=args.drift, extra=reads,
                           max_steps=args.max_steps)
            keys.append((task, axis))
            cells.append(dict(device_uri=uri, policy_spec=policy, streams=args.streams, episodes=args.episodes,
                              seed=args.seed, arms=arms if axis is not None or args.clean_memory else ["off"]))
    progress(f"{len(cells)} cells, {sum(len(c['arms']) for c in cells) * args.streams} streams, "
             f"{args.jobs} workers")

    def on_stream(i, arm, s, res, cached):
        task, axis = keys[i]
        args.on_stream(f"{task} {axis or 'clean'}", arm, s, res, cached)
    runs = run_cells_parallel(cells, jobs=args.jobs, threads=1, cache_dir=Path(args.workdir) / "streams",
                              on_stream=on_stream)
    return dict(zip(keys, runs))


def paired(a: np.ndarray, b: np.ndarray) -> dict:
    """a - b on the same episodes: the rates, the paired Newcombe interval and the discordant counts."""
    from embodia.agent.evaluation.stats import newcombe_paired, paired_counts
    counts = paired_counts(a.ravel(), b.ravel())
    d, lo, hi = newcombe_paired(*counts)
    return {"diff": d, "newcombe_paired95": [lo, hi], "a_only": counts[1], "b_only": counts[2],
            "episodes": sum(counts)}


def second_half(runs: dict, arm: str, streams: int, episodes: int) -> np.ndarray:
    return np.array([runs[arm, s]["outcomes"][episodes // 2:] for s in range(streams)], bool)


def summarize(cells: dict, tasks: list[str], axes: list[str], arms: list[str], streams: int, episodes: int) -> dict:
    """Per axis (pooled over tasks) and per task x axis: clean, off, each arm; comparisons; recovery."""
    from embodia.sim.metaworld import group_of

    def half(task, axis, arm):
        return second_half(cells[task, axis], arm, streams, episodes)
    out = {"axes": {}, "cells": {}, "groups": {}}
    for axis in axes:
        row = {"clean": _pool([half(t, None, "off") for t in tasks])}
        for arm in arms:
            row[arm] = _pool([half(t, axis, arm) for t in tasks])
        row["cost"] = row["clean"]["success_rate"] - row["off"]["success_rate"]
        comps = _vs_off(half, tasks, axis, arms)
        if {"online", "replay"} <= set(arms):
            comps["online - replay"] = paired(np.concatenate([half(t, axis, "online") for t in tasks]),
                                              np.concatenate([half(t, axis, "replay") for t in tasks]))
        if "online" in arms and row["cost"] > 0:
            row["recovery"] = (row["online"]["success_rate"] - row["off"]["success_rate"]) / row["cost"]
        row["comparisons"] = comps
        out["axes"][axis] = row
        for t in tasks:
            out["cells"][f"{t}|{axis}"] = {"clean": _pool([half(t, None, "off")]), **_cell(half, t, axis, arms)}
    if all((arm, 0) in cells[t, None] for t in tasks for arm in arms):
        out["clean"] = _clean_row(half, tasks, arms)
    for group in sorted({group_of(t) for t in tasks}):
        members = [t for t in tasks if group_of(t) == group]
        out["groups"][group] = {axis: {a: _pool([half(t, axis, a) for t in members]) for a in arms}
                                for axis in axes}
    return out


def _clean_row(half, tasks: list[str], arms: list[str]) -> dict:
    """The memory arms on the clean cells: do they cost a working policy anything? Pooled and per task,
    each arm against off with the paired interval (``harmed``: the interval lies wholly below 0)."""
    row = {arm: _pool([half(t, None, arm) for t in tasks]) for arm in arms}
    row["comparisons"] = _vs_off(half, tasks, None, arms)
    row["cells"] = {t: _cell(half, t, None, arms) for t in tasks}
    return row


def _vs_off(half, tasks: list[str], axis, arms: list[str]) -> dict:
    """Each memory arm against off on ``axis`` (None: the clean cells), pooled over ``tasks``, paired."""
    return {f"{arm} - off": paired(np.concatenate([half(t, axis, arm) for t in tasks]),
                                   np.concatenate([half(t, axis, "off") for t in tasks]))
            for arm in arms if arm != "off"}


def _cell(half, task: str, axis, arms: list[str]) -> dict:
    """One task x axis cell: each arm's rate; every memory arm against off, ``harmed_arms`` those
    whose paired interval lies wholly below 0, and ``harmed`` whether online is one of them."""
    cell = {a: _pool([half(task, axis, a)]) for a in arms}
    if "off" in arms:
        for arm in (a for a in arms if a != "off"):
            cell[f"{arm} - off"] = paired(half(task, axis, arm), half(task, axis, "off"))
        cell["harmed_arms"] = [a for a in arms if a != "off" and cell[f"{a} - off"]["newcombe_paired95"][1] < 0]
    if "online" in arms:
        cell["harmed"] = "online" in cell["harmed_arms"]
    return cell


def _pool(halves: list[np.ndarray]) -> dict:
    x = np.concatenate([h.ravel() for h in halves])
    return _rate(int(x.sum()), int(x.size))


def curves_png(cells: dict, tasks: list[str], axis: str, arms: list[str], streams: int, episodes: int,
               path: Path) -> None:
    """The learning curve of every arm on one axis: success by episode of the stream (windows of
    ``episodes // 10``), the mean over tasks and streams, with the clean cells' policy beside them."""
    from embodia.agent.evaluation.memory_eval import learning_curve_png
    window = max(1, episodes // 10)
    rep = {"arms": {}}
    curves = [(arm, axis, arm) for arm in arms]
    if all((t, None) in cells and ("off", 0) in cells[t, None] for t in tasks):
        curves.append(("clean (off)", None, "off"))
    for name, ax, arm in curves:
        o = np.concatenate([np.array([cells[t, ax][arm, s]["outcomes"] for s in range(streams)], float)
                            for t in tasks])
        rep["arms"][name] = {"success_rate": float(o.mean()),
                             "learning_curve": [float(o[:, w * window:(w + 1) * window].mean())
                                                for w in range(max(1, episodes // window))]}
    learning_curve_png(rep, path, title=f"Meta-World persistent deployment, shift {axis}")


def print_table(summary: dict, arms: list[str]) -> None:
    """Success per axis and arm, and the first memory arm against off with its paired interval."""
    first = next((a for a in arms if a != "off"), None)
    print(f"{'axis':10s} {'clean':>7s} " + " ".join(f"{a:>9s}" for a in arms)
          + (f"  {first}-off [paired 95%]" if first else ""), file=sys.stderr)
    for axis, row in summary["axes"].items():
        c = row["comparisons"].get(f"{first} - off")
        tail = f"  {c['diff']:+.3f} [{c['newcombe_paired95'][0]:+.3f}, {c['newcombe_paired95'][1]:+.3f}]" if c else ""
        print(f"{axis:10s} {row['clean']['success_rate']:7.3f} "
              + " ".join(f"{row[a]['success_rate']:9.3f}" for a in arms) + tail, file=sys.stderr)


def parse_severity(spec: str) -> dict:
    out = {}
    for part in (p for p in spec.split(",") if p):
        k, _, v = part.partition("=")
        out[k] = float(v)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    rc = sub.add_parser("replay-check", help="does replaying a stored success pass a jittered set-up?")
    ev = sub.add_parser("eval", help="clean vs shifted cells, memory arms, per axis and pooled")
    for p in (rc, ev):
        p.add_argument("--tasks", default="hard,very_hard")
        p.add_argument("--repeat", type=int, default=3, help="base set-ups per cell")
        p.add_argument("--streams", type=int, default=4)
        p.add_argument("--episodes", type=int, default=30, help="episodes per stream (one cell each)")
        p.add_argument("--seed", type=int, default=40000, help="a multiple of --episodes")
    rc.add_argument("--jitter", default="0,0.01,0.02,0.03", help="comma list of jitters to measure (metres)")
    ev.add_argument("--jitter", type=float, default=0.04,
                    help="metres; at 4 cm a replayed success passes 0.21 of hard set-ups "
                         "(docs/benchmarks/persistent.md)")
    ev.add_argument("--policy", default="embodia-mt50")
    ev.add_argument("--axes", default="gain,delay,pose")
    ev.add_argument("--severity", default="", help="axis=severity,... (default 1 each)")
    ev.add_argument("--exec-horizon", type=int, default=None,
                    help="the checkpoint decides every N actions (a copy in the workdir; default: its own rate)")
    ev.add_argument("--drift", type=int, default=0, help="grow each shift over the first N episodes of a stream")
    ev.add_argument("--arms", default="off,online,replay")
    ev.add_argument("--memory-settings", default=None, help="the memory settings under test: a JSON object (a memory.json) or the name of "
                    "one of the checkpoint's memory profiles")
    ev.add_argument("--clean-memory", action=argparse.BooleanOptionalAction, default=True,
                    help="run the memory arms on the clean cells too (do no harm where nothing is shifted)")
    ev.add_argument("--workdir", default="runs/persistent")
    ev.add_argument("--jobs", type=int, default=2)
    ev.add_argument("--plot-dir", default=None)
    ev.add_argument("--max-steps", type=int, default=SUITE_STEPS, help="episode length (LeRobot's 500)")
    args = ap.parse_args(argv)
    if args.seed % args.episodes:
        ap.error("--seed must be a multiple of --episodes (each stream is one cell)")
    t0 = time.perf_counter()
    tasks = expand_tasks(args.tasks)
    head = {"benchmark": "metaworld_persistent", "verb": args.verb, "tasks": tasks, "repeat": args.repeat,
            "streams": args.streams, "episodes": args.episodes, "seed": args.seed}

    def progress(msg):
        print(f"[{time.perf_counter() - t0:6.0f} s] {msg}", file=sys.stderr, flush=True)
    if args.verb == "replay-check":
        jitters = [float(j) for j in args.jitter.split(",")]
        body = {"jitter": replay_check(tasks, repeat=args.repeat, jitters=jitters, streams=args.streams,
                                       episodes=args.episodes, seed=args.seed)}
    else:
        body = run_eval(args, tasks, progress)
    print(json.dumps({**head, **body, "seconds": round(time.perf_counter() - t0),
                      "machine": f"{platform.machine()} {os.cpu_count()} cpus", "date": time.strftime("%Y-%m-%d")},
                     default=float))


def run_eval(args, tasks: list[str], progress) -> dict:
    from embodia.agent.evaluation.suite_memory import memory_settings_for, with_memory_settings
    axes, arms = args.axes.split(","), args.arms.split(",")
    if "off" not in arms:
        arms = ["off", *arms]
    severity = parse_severity(args.severity)
    policy, settings = args.policy, None
    if args.memory_settings or args.exec_horizon is not None:      # a copy of the checkpoint in the workdir, made once
        settings = memory_settings_for(policy, args.memory_settings) if args.memory_settings else None
        policy = with_memory_settings(policy, settings, Path(args.workdir) / "policy", exec_horizon=args.exec_horizon)

    ledger = CostLedger(Path(args.workdir) / "cost.jsonl", jobs=args.jobs)

    def on_stream(cell, arm, s, res, cached):
        progress(f"{cell}: {arm} stream {s}: {sum(res['outcomes'])}/{len(res['outcomes'])}"
                 f"{' (kept)' if cached else ''}")
        if not cached:
            ledger.add(len(res["outcomes"]))
    args.on_stream = on_stream
    cells = run_cells(args, policy, tasks, axes, severity, arms, progress)
    summary = summarize(cells, tasks, axes, arms, args.streams, args.episodes)
    print_table(summary, arms)
    if args.plot_dir:
        Path(args.plot_dir).mkdir(parents=True, exist_ok=True)
        for axis in axes:
            curves_png(cells, tasks, axis, arms, args.streams, args.episodes, Path(args.plot_dir) / f"{axis}.png")
    return {"policy": args.policy, "memory_settings": settings, "exec_horizon": args.exec_horizon,
            "jitter": args.jitter, "axes": axes, "severity": {a: severity.get(a, 1.0) for a in axes},
            "drift": args.drift, "arms": arms, **summary, "cost": ledger.total()}


class CostLedger:
    """What the episodes of a workdir cost, over every invocation that ran some (a run stopped and
    resumed over several sessions included): one line per finished stream in ``path``
    (``cost.jsonl``), so a kill loses only the streams in flight."""

    def __init__(self, path: Path, jobs: int):
        self.path, self.jobs, self.start = path, jobs, time.time()

    def add(self, episodes: int) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps({"start": self.start, "t": time.time(), "episodes": episodes, "jobs": self.jobs}) + "\n")

    def total(self) -> dict:
        """Episodes run, wall seconds (each invocation from its start to its last finished stream),
        episodes per second and the worker counts used."""
        rows = [json.loads(line) for line in self.path.read_text().splitlines()] if self.path.exists() else []
        runs = {}
        for r in rows:
            runs[r["start"]] = max(runs.get(r["start"], r["start"]), r["t"])
        wall = sum(end - start for start, end in runs.items())
        episodes = sum(r["episodes"] for r in rows)
        return {"episodes": episodes, "wall_s": round(wall), "invocations": len(runs),
                "episodes_per_s": round(episodes / wall, 3) if wall else None,
                "jobs": sorted({r["jobs"] for r in rows})}


if __name__ == "__main__":
    main()
