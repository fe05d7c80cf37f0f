"""Memory on vs memory off over a whole suite, in paired streams (ARCHITECTURE.md section 8).

A stream is one pass over every task of the suite, ``episodes`` per task: stream s uses the seeds
``seed + s * episodes ..`` on every task, in both arms. The "on" arm steers the checkpoint with ONE
fresh success memory for the whole stream (it grows task after task; each task has its own
namespace, the instruction and the body are in the key); the "off" arm is the checkpoint alone on
the same seeds. The report: overall and per-group success of each arm (Wilson), the gain with its
Newcombe 95% interval, paired discordant counts, and per task whether memory did better or worse
(over all streams), plus each stream's own gain.

>>> rep = suite_memory_gain("mt50", "ckpt/embodia-mt50", episodes=10, streams=2,      # doctest: +SKIP
...                         workdir="/tmp/mt50-mem")
>>> rep["gain"]["newcombe95"]                                                            # doctest: +SKIP
"""
from __future__ import annotations

import json
from pathlib import Path

from embodia.agent.evaluation.evaluate import write_json
from embodia.agent.evaluation.stats import newcombe
from embodia.agent.evaluation.suite import cell as rate
from embodia.agent.evaluation.suite import run_suite
from embodia.sim.metaworld import GROUPS


def suite_memory_gain(suite: str, policy_spec: str, *, episodes: int, streams: int, workdir, seed: int = 0,
                      tasks: list[str] | None = None, query: dict | None = None, on_stream=None,
                      off_reports: list[dict] | None = None, on_task=None) -> dict:
    """Run both arms on every stream and compare. ``workdir`` holds one memory per stream
    (``stream<s>``; one that is not a stopped run's is refused: a stream starts empty), and each
    arm's report (``stream<s>-<arm>.json``) or, while it runs, its finished tasks
    (``stream<s>-<arm>.partial``): the same call after a stop goes on from there. ``off_reports``:
    "off" arm reports already run on exactly these seeds (e.g. the checkpoint's own evaluation),
    reused. ``on_task(arm, stream, task, row)`` after each task of each arm (progress)."""
    workdir = Path(workdir)
    arms: dict[str, list[dict]] = {"off": [], "on": []}
    for s in range(streams):
        mem = workdir / f"stream{s}"
        if mem.exists() and not any((workdir / f"stream{s}-on{x}").exists() for x in (".json", ".partial")):
            raise ValueError(f"{mem} exists: each stream starts with an empty memory; use a fresh --workdir")
        kw = dict(episodes=episodes, seed=seed + s * episodes, tasks=tasks, query=query)

        def arm(name, **extra):
            done = workdir / f"stream{s}-{name}.json"
            if done.is_file():             # finished by a run that stopped later on
                rep = json.loads(done.read_text())
                if (rep["policy"], rep["seed"], rep["episodes_per_task"]) != (policy_spec, kw["seed"], episodes):
                    raise ValueError(f"{done}: a report of another run ({rep['policy']}, seed {rep['seed']} x "
                                     f"{rep['episodes_per_task']}); use a fresh --workdir")
                return rep
            partial = workdir / f"stream{s}-{name}.partial"
            rep = run_suite(suite, policy_spec, resume=partial,
                            on_task=(lambda task, row: on_task(name, s, task, row)) if on_task else None,
                            **kw, **extra)
            write_json(rep, done)
            partial.unlink(missing_ok=True)
            return rep
        workdir.mkdir(parents=True, exist_ok=True)
        off = off_reports[s] if off_reports and s < len(off_reports) else arm("off")
        if off["seed"] != kw["seed"] or off["episodes_per_task"] != episodes:
            raise ValueError(f"off report {s} ran seed {off['seed']} x {off['episodes_per_task']}, "
                             f"not {kw['seed']} x {episodes}")
        on = arm("on", memory=str(mem))
        arms["off"].append(off)
        arms["on"].append(on)
        if on_stream:
            on_stream(s, off, on)
    return compare(arms["on"], arms["off"])


def compare(on: list[dict], off: list[dict]) -> dict:
    """The gain of ``on`` over ``off`` from paired suite reports (same tasks and seeds, stream by stream)."""
    names = list(on[0]["tasks"])
    pairs = {t: ([o for r in on for o in r["tasks"][t]["outcomes"]],
                 [o for r in off for o in r["tasks"][t]["outcomes"]]) for t in names}
    for t, (a, b) in pairs.items():
        if len(a) != len(b):
            raise ValueError(f"{t}: {len(a)} episodes with memory, {len(b)} without: not paired")

    def arms(task_names) -> dict:
        a = [o for t in task_names for o in pairs[t][0]]
        b = [o for t in task_names for o in pairs[t][1]]
        d, lo, hi = newcombe(sum(a), len(a), sum(b), len(b))
        return {"on": rate(a), "off": rate(b), "gain": d, "newcombe95": [lo, hi],
                "on_only": sum(x and not y for x, y in zip(a, b)), "off_only": sum(y and not x for x, y in zip(a, b))}
    groups = {g: arms([t for t in ts if t in pairs]) for g, ts in GROUPS.items() if any(t in pairs for t in ts)}
    diffs = {t: sum(a) - sum(b) for t, (a, b) in pairs.items()}
    overall = arms(names)
    return {"streams": len(on), "episodes_per_task": on[0]["episodes_per_task"], "tasks": len(names),
            "overall": overall, "gain": {"diff": overall["gain"], "newcombe95": overall["newcombe95"]},
            "groups": groups,
            "tasks_better": sorted(t for t, d in diffs.items() if d > 0),
            "tasks_worse": sorted(t for t, d in diffs.items() if d < 0),
            "per_task_diff": diffs,
            "per_stream_gain": [r_on["overall"]["success_rate"] - r_off["overall"]["success_rate"]
                                for r_on, r_off in zip(on, off)]}
