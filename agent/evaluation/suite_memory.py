"""Memory on vs memory off over a whole suite, in paired streams (ARCHITECTURE.md section 8).

A stream is one pass over every task of the suite, ``episodes`` per task: stream s uses the seeds
``seed + s * episodes ..`` on every task, in both arms. The "on" arm steers the checkpoint with ONE
fresh success memory for the whole stream (it grows task after task; each task has its own
namespace, the instruction and the body are in the key); the "off" arm is the checkpoint alone on
the same seeds. The report: overall and per-group success of each arm (Wilson), the gain with three
95% intervals, paired discordant counts, and per task whether memory did better or worse (over all
streams), plus each stream's own gain. The intervals:

- ``newcombe95_paired``: Newcombe's interval for paired data. Each episode runs once per arm on the
  same seed, so the arms agree on most episodes, and only the episodes where they differ carry the
  gain. This is the design's interval (the one the lower bound is read from).
- ``newcombe95``: Newcombe's interval for independent samples, which ignores the pairing: wider,
  kept for comparison with earlier reports.
- ``clustered95``: a check on the independence that both Newcombe intervals assume. With memory on,
  an episode depends on the earlier episodes of its task in its stream (the memory grew from them),
  so each (stream, task) is one cluster of dependent episodes. Tasks do not share retrievals (each
  has its own namespace), so the clusters are independent; the cluster-robust interval holds
  whatever the dependence inside a cluster.

>>> rep = suite_memory_gain("mt50", "ckpt/embodia-mt50", episodes=10, streams=2,      # doctest: +SKIP
...                         workdir="/tmp/mt50-mem")
>>> rep["gain"]["newcombe95_paired"]                                                     # doctest: +SKIP
"""
from __future__ import annotations

import json
from pathlib import Path

from embodia.agent.evaluation.evaluate import write_json
from embodia.agent.evaluation.stats import clustered_gain, newcombe, newcombe_paired, paired_counts
from embodia.agent.evaluation.suite import cell as rate
from embodia.agent.evaluation.suite import run_suite, suite_run
from embodia.agent.evaluation.suite_resume import run_diff
from embodia.shared.files import commit_dir
from embodia.sim.metaworld import GROUPS


def suite_memory_gain(suite: str, policy_spec: str, *, episodes: int, streams: int, workdir, seed: int = 0,
                      tasks: list[str] | None = None, query: dict | None = None, on_stream=None,
                      off_reports: list[dict] | None = None, on_task=None) -> dict:
    """Run both arms on every stream and compare. ``workdir`` holds one memory per stream
    (``stream<s>``; one that is not a stopped run's is refused: a stream starts empty), and each
    arm's report (``stream<s>-<arm>.json``) or, while it runs, its finished tasks
    (``stream<s>-<arm>.partial``): the same call after a stop goes on from there. ``off_reports``:
    "off" arm reports already run on exactly these seeds (e.g. the checkpoint's own evaluation),
    reused, and kept in the workdir as that stream's off report. ``on_task(arm, stream, task, row)``
    after each task of each arm (progress)."""
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
                if not isinstance(rep.get("run"), dict):
                    raise ValueError(f"{done}: a report that does not name its run (written before reports "
                                     "did); use a fresh --workdir")
                differs = run_diff(rep["run"], suite_run(suite, policy_spec, **kw, **extra))
                if differs:
                    raise ValueError(f"{done}: a report of another run ({differs}); use a fresh --workdir")
                return rep
            partial = workdir / f"stream{s}-{name}.partial"
            rep = run_suite(suite, policy_spec, resume=partial,
                            on_task=(lambda task, row: on_task(name, s, task, row)) if on_task else None,
                            **kw, **extra)
            write_json(rep, done)
            partial.unlink(missing_ok=True)
            return rep
        workdir.mkdir(parents=True, exist_ok=True)
        given = bool(off_reports) and s < len(off_reports)
        off = off_reports[s] if given else arm("off")
        if off["seed"] != kw["seed"] or off["episodes_per_task"] != episodes:
            raise ValueError(f"off report {s} ran seed {off['seed']} x {off['episodes_per_task']}, "
                             f"not {kw['seed']} x {episodes}")
        if given and not (workdir / f"stream{s}-off.json").is_file():
            write_json(off, workdir / f"stream{s}-off.json")   # beside the other arms: compare can be redone
        on = arm("on", memory=str(mem))
        arms["off"].append(off)
        arms["on"].append(on)
        if on_stream:
            on_stream(s, off, on)
    return compare(arms["on"], arms["off"])


def with_memory_settings(policy_spec: str, settings, folder, *, exec_horizon: int | None = None) -> str:
    """A copy of the checkpoint ``policy_spec`` (a bundled name or a folder) in ``folder`` whose
    ``memory.json`` holds ``settings`` (checked as the checkpoint loader checks it); returns the
    copy's path, to pass as the policy. The weights are the same; only what a fresh memory steering
    it starts with changes (e.g. ``{"key": "offsets", "sigma": 1.0}``). ``settings`` may also be a
    string: a JSON object, or the name of one of the checkpoint's profiles (`memory_settings_for`);
    ``None`` keeps the checkpoint's own. ``exec_horizon``: the copy decides every that many actions
    (its ``config.json``'s ``exec_horizon``, 1 to the chunk's length). A copy already there made
    otherwise is refused, so two runs never share a name for two set-ups.

    >>> with_memory_settings("embodia-mt50", {"key": "offsets", "sigma": 1.0}, "/tmp/w/policy")  # doctest: +SKIP
    '/tmp/w/policy'
    """
    import os
    import shutil

    from embodia.policies.robot.vla import MEMORY, check_exec_horizon, check_memory_settings, read_memory_settings
    src, dst = _checkpoint_folder(policy_spec), Path(folder)
    if isinstance(settings, str):
        settings = memory_settings_for(policy_spec, settings)
    if settings is not None:
        check_memory_settings(settings, f"memory settings {json.dumps(settings)}", profiles=False)    # before anything is copied
    config = json.loads((src / "config.json").read_text())
    if exec_horizon is not None:
        check_exec_horizon(exec_horizon, int(config.get("horizon", 16)))      # before anything is copied
        config["exec_horizon"] = exec_horizon
    if dst.exists():
        there = (read_memory_settings(dst), json.loads((dst / "config.json").read_text()).get("exec_horizon"))
        wanted = (read_memory_settings(src) if settings is None else settings, config.get("exec_horizon"))
        if there != wanted:
            raise ValueError(f"{dst} holds a copy with memory settings {there[0]} and exec_horizon {there[1]}, "
                             f"not {wanted[0]} and {wanted[1]}; use a fresh folder")
        return str(dst)
    tmp = dst.with_name(f"{dst.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp, ignore=shutil.ignore_patterns("train_state", *([MEMORY] if settings is not None else [])))
    if settings is not None:
        (tmp / MEMORY).write_text(json.dumps(settings, indent=1) + "\n")
    (tmp / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    try:
        commit_dir(tmp, dst, replace=False)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not dst.exists():
            raise
        return with_memory_settings(policy_spec, settings, dst, exec_horizon=exec_horizon)   # another process made it first
    return str(dst)


COPIES = "checkpoint-copies"      # copies with other memory settings and/or another exec horizon
OLD_COPIES = "memory-settings"     # the folder's earlier name, still read: users' copies are not made twice


def cached_copy(policy_spec: str, text: str | None, exec_horizon: int | None = None) -> str:
    """`with_memory_settings` for the CLI's ``--memory-settings`` and ``--exec-horizon``: the copy
    lives under ``$XDG_CACHE_HOME/embodia/checkpoint-copies`` (default ``~/.cache``), named by the
    checkpoint, its weights (size and time) and what changes, so the same command finds it again and
    a retrained checkpoint gets a fresh copy. A copy made before the folder's rename (under
    ``memory-settings``, same name, same content) is used where it is, not made again."""
    import os

    from embodia.memory.store import stable_hash
    settings = None if text is None else memory_settings_for(policy_spec, text)
    src = _checkpoint_folder(policy_spec)
    w = (src / "model.safetensors").stat()
    what = {"src": str(src.resolve()), "weights": [w.st_size, w.st_mtime_ns], "settings": settings}
    if exec_horizon is not None:
        what["exec_horizon"] = exec_horizon
    tag = stable_hash(what)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "embodia"
    name = f"{src.name}-{tag[:12]}"
    folder = cache / COPIES / name
    if not folder.exists() and (cache / OLD_COPIES / name).is_dir():
        folder = cache / OLD_COPIES / name
    return with_memory_settings(policy_spec, settings, folder, exec_horizon=exec_horizon)


def memory_settings_for(policy_spec: str, text: str) -> dict:
    """What ``--memory-settings`` names: a JSON object of MemoryConfig fields (and ``"key"``), or
    the name of a profile in the checkpoint's ``memory.json`` (``fixed-setup``, ...). ValueError,
    listing the profiles there, for anything else."""
    from embodia.policies.robot.vla import read_memory_profiles
    text = text.strip()
    if text.startswith("{"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"memory settings {text!r}: not valid JSON ({e})") from None
    profiles = read_memory_profiles(_checkpoint_folder(policy_spec))
    if text not in profiles:
        known = ", ".join(profiles) or "none"
        raise ValueError(f"{policy_spec} has no memory profile {text!r} (its memory.json's profiles: {known}); "
                         f"or pass a JSON object of memory settings")
    return dict(profiles[text])


def _checkpoint_folder(policy_spec: str) -> Path:
    from embodia.agent.loop.factory import BUNDLED
    src = Path(BUNDLED.get(policy_spec) or Path(policy_spec).expanduser())
    if not (src / "config.json").is_file():
        raise ValueError(f"{policy_spec}: not a checkpoint folder (no config.json); memory settings apply to one")
    return src


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
        both, on_only, off_only, neither = paired_counts(a, b)
        d, lo, hi = newcombe(sum(a), len(a), sum(b), len(b))
        _, plo, phi = newcombe_paired(both, on_only, off_only, neither)
        row = {"on": rate(a), "off": rate(b), "gain": d, "newcombe95_paired": [plo, phi], "newcombe95": [lo, hi],
               "on_only": on_only, "off_only": off_only}
        clusters = [(sum(r_on["tasks"][t]["outcomes"]), sum(r_off["tasks"][t]["outcomes"]),
                     len(r_on["tasks"][t]["outcomes"])) for r_on, r_off in zip(on, off) for t in task_names]
        if len(clusters) >= 2:
            row["clustered95"] = list(clustered_gain(clusters)[1:])
        return row
    groups = {g: arms([t for t in ts if t in pairs]) for g, ts in GROUPS.items() if any(t in pairs for t in ts)}
    diffs = {t: sum(a) - sum(b) for t, (a, b) in pairs.items()}
    overall = arms(names)
    gain = {"diff": overall["gain"], **{k: overall[k] for k in ("newcombe95_paired", "newcombe95", "clustered95")
                                        if k in overall}}
    return {"streams": len(on), "episodes_per_task": on[0]["episodes_per_task"], "tasks": len(names),
            "overall": overall, "gain": gain, "clusters": "stream x task",
            "groups": groups,
            "tasks_better": sorted(t for t, d in diffs.items() if d > 0),
            "tasks_worse": sorted(t for t, d in diffs.items() if d < 0),
            "per_task_diff": diffs,
            "per_stream_gain": [r_on["overall"]["success_rate"] - r_off["overall"]["success_rate"]
                                for r_on, r_off in zip(on, off)]}
