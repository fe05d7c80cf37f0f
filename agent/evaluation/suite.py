"""Evaluation suites: every task of `sim:metaworld/<suite>` (mt50, mt10, easy, medium, hard, very_hard)
or of `sim:miniwob/<suite>` (experts, wge-original, wge-additional, synapse-exemplars: see
`embodia.sim.miniwob.SUITES`), the same seeds on every task, success per task, per group and overall
with Wilson intervals.

>>> parse_suite("sim:metaworld/mt10?size=64x64")
('mt10', {'size': '64x64'})
>>> parse_suite("sim:metaworld/reach-v3") is None     # one task: an ordinary device
True
>>> parse_suite("sim:miniwob/wge-additional"), parse_suite("sim:miniwob/click-button")
(('wge-additional', {}), None)
>>> policy_reads("expert")                             # state only: the device renders nothing
{'render': '0'}

Protocol on Meta-World (as LeRobot's Meta-World environment, see docs/metaworld.md "Meta-World suites"): each episode runs
at most 500 steps and ends at the first step whose `info["success"]` is set; episode i of every task
uses seed `seed + i`, so two policies evaluated with the same `seed` meet the same object and goal
positions, task by task. The device renders only what the policy reads (`policy_reads`). On MiniWoB
the task's own protocol holds (its time limit, success = raw reward > 0, the device's step budget)
and episode i of every task also uses seed `seed + i`; a suite's tasks the package lacks, or that
have no scripted expert when the expert runs, are reported under ``not_run`` with the reason.
"""
from __future__ import annotations

import datetime as _dt
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from embodia.agent.evaluation.evaluate import machine, run_episodes
from embodia.agent.evaluation.stats import mean_of_rates, wilson
from embodia.agent.evaluation.suite_resume import PartialRun, run_identity
from embodia.agent.evaluation.workers import in_processes
from embodia.agent.loop.factory import BUNDLED, device_namespace, make_device, make_policy, with_memory
from embodia.sim import miniwob
from embodia.sim.metaworld import AGENT_POS, GROUPS, SUITE_MAX_STEPS, SUITES, group_of, state_channels
from embodia.sim.metaworld import suite_tasks as metaworld_tasks

PREFIX = "sim:metaworld/"


@dataclass(frozen=True)
class Family:
    """One simulator's suites: its URI prefix, suites, groups and the episode length every task gets
    (None: the device's own)."""
    prefix: str
    suites: dict
    tasks: Callable[[str], tuple]
    group_of: Callable[[str], str]
    max_steps: int | None


FAMILIES = (Family(PREFIX, SUITES, metaworld_tasks, group_of, SUITE_MAX_STEPS),
            Family("sim:miniwob/", miniwob.SUITES, miniwob.suite_tasks, miniwob.group_of, None))


def family(suite: str) -> Family:
    """The family a suite name belongs to (the names are distinct across families)."""
    for fam in FAMILIES:
        if suite in fam.suites:
            return fam
    known = ", ".join(n for fam in FAMILIES for n in fam.suites)
    raise ValueError(f"unknown suite {suite!r}; suites: {known}")


def suite_tasks(suite: str) -> tuple[str, ...]:
    return family(suite).tasks(suite)


def _family_of_uri(uri: str) -> Family:
    return next(fam for fam in FAMILIES if uri.startswith(fam.prefix))


def not_run(suite: str, policy_spec: str) -> dict[str, str]:
    """Tasks of ``suite`` that cannot run, each with why: not in the miniwob package, or no scripted
    expert when the expert is the policy. Empty for Meta-World (every listed task is installed)."""
    if family(suite).prefix != "sim:miniwob/":
        return {}
    cov = miniwob.suite_coverage(suite)
    out = {t: "not in the miniwob package" for t in cov["missing"]}
    if policy_spec == "expert":
        out.update({t: "no scripted expert" for t in cov["no_expert"]})
    return out
# MT50 success in % per difficulty group, as the SmolVLA paper publishes it (arXiv 2506.01844, its
# Meta-World table: LeRobot's environment, 10 trials per task, a `corner2` image and a 4-dim
# agent_pos; LeRobot's MT50 demos). "avg" is the paper's Avg. column: the plain mean of the four
# group figures, not the rate over all 500 episodes (compare it with a report's "mean_of_groups").
# Entered from the table as three independent public notes reproduce it, figure for figure (the
# paper's own PDF could not be read where this was written); docs/metaworld.md "Meta-World suites" lists how
# our protocol differs.
PUBLISHED_MT50 = {
    "SmolVLA (0.45B)": {"easy": 82.5, "medium": 41.8, "hard": 45.0, "very_hard": 60.0, "avg": 57.3},
    "pi0 (3.5B)": {"easy": 71.8, "medium": 48.2, "hard": 41.7, "very_hard": 30.0, "avg": 47.9},
    "TinyVLA": {"easy": 77.6, "medium": 21.5, "hard": 11.4, "very_hard": 15.8, "avg": 31.6},
    "Diffusion Policy": {"easy": 23.1, "medium": 10.7, "hard": 1.9, "very_hard": 6.1, "avg": 10.5},
}
STATE_ONLY = ("expert", "random")          # policies that read obs.state and never an image
RENDER_MODES = ("policy", "default")       # what the device renders: what the policy reads | as a lone task


def parse_suite(uri: str) -> tuple[str, dict] | None:
    """(suite, query) for `sim:metaworld/<suite>[?k=v&...]`; None for anything else (one task, other devices)."""
    fam = next((f for f in FAMILIES if uri.startswith(f.prefix)), None)
    if fam is None:
        return None
    name, _, q = uri[len(fam.prefix):].partition("?")
    if name not in fam.suites:
        return None
    query = dict(kv.split("=", 1) if "=" in kv else (kv, "1") for kv in q.split("&") if kv)
    return name, query


def policy_reads(policy_spec: str) -> dict[str, str]:
    """The device query that renders only what `policy_spec` reads: nothing for state-only policies
    (scripted expert, random, replayed actions); a checkpoint's own cameras at its own size (read from
    its config.json, no weights loaded); the device's default camera otherwise (a remote policy)."""
    if policy_spec in STATE_ONLY or policy_spec.startswith("replay:"):
        return {"render": "0"}
    if policy_spec.startswith("lerobot:"):
        from embodia.policies.robot.lerobot import lerobot_dir
        return lerobot_reads(lerobot_dir(policy_spec[len("lerobot:"):]))
    path = BUNDLED.get(policy_spec) or Path(policy_spec).expanduser()
    cfg = path / "config.json"
    if cfg.is_file():
        emb = json.loads(cfg.read_text()).get("embodiments", {}).get("sawyer", {}).get("embodiment", {})
        cams = emb.get("cameras") or []
        # a checkpoint trained under obs=lerobot knows only the hand and gripper: open it that way
        lerobot = [c["name"] for c in emb.get("state") or []] == [c.name for c in state_channels()[:AGENT_POS]]
        reads = {"obs": "lerobot"} if lerobot else {}
        if not cams:
            return {**reads, "render": "0"}
        return {**reads, "camera": ",".join(c["name"] for c in cams),
                "size": f"{cams[0]['width']}x{cams[0]['height']}"}
    return {}


def lerobot_reads(path: Path) -> dict[str, str]:
    """What a LeRobot policy directory reads (its config.json's input features): LeRobot's view of
    Meta-World (``obs=lerobot``) for a 4-number state, and its cameras at their size."""
    cfg = path / "config.json"
    if not cfg.is_file():
        return {}
    feats = json.loads(cfg.read_text()).get("input_features") or {}
    state = (feats.get("observation.state") or {}).get("shape") or []
    cams = [(k.removeprefix("observation.images."), f.get("shape") or []) for k, f in feats.items()
            if k.startswith("observation.images.")]
    reads = {"obs": "lerobot"} if state == [AGENT_POS] else {}
    if cams and len(cams[0][1]) == 3:
        reads |= {"camera": ",".join(c for c, _ in cams), "size": f"{cams[0][1][2]}x{cams[0][1][1]}"}
    return reads


LEAN_DEVICES = ("sim:twogap-push", PREFIX)   # simulators whose URI takes render=0


def policy_uri(uri: str, policy_spec: str, record: bool = False) -> str:
    """`uri` opened the way `policy_spec` reads it, where the URI leaves it open: a single Meta-World
    task gets ``obs=lerobot`` for a checkpoint trained on LeRobot's view (its body is the hand and
    gripper), and a simulator that can skip rendering gets ``render=0`` for a policy that reads no
    image (not when recording: a dataset wants the images whoever acts). What the URI says is kept.

    >>> policy_uri("sim:twogap-push?shift=heavy", "expert"), policy_uri("sim:twogap-push", "embodia-tiny")
    ('sim:twogap-push?shift=heavy&render=0', 'sim:twogap-push')
    >>> policy_uri("sim:metaworld/reach-v3", "embodia-mt50-pixels")
    'sim:metaworld/reach-v3?obs=lerobot'
    """
    add = {}
    if uri.startswith(PREFIX) and parse_suite(uri) is None and "obs=" not in uri:
        add.update({k: v for k, v in policy_reads(policy_spec).items() if k == "obs"})
    state_only = policy_spec in STATE_ONLY or policy_spec.startswith("replay:")
    if state_only and not record and uri.startswith(LEAN_DEVICES) and "render=" not in uri:
        add["render"] = "0"
    if not add:
        return uri
    return uri + ("&" if "?" in uri else "?") + "&".join(f"{k}={v}" for k, v in add.items())


def task_uri(task: str, query: dict, prefix: str = PREFIX) -> str:
    """`sim:metaworld/<task>?k=v&...` (keys sorted, so the URI is stable)."""
    q = "&".join(f"{k}={v}" for k, v in sorted(query.items()))
    return prefix + task + ("?" + q if q else "")


def cell(outcomes: list[bool]) -> dict:
    """Episodes, successes, rate and 95% Wilson interval of a list of outcomes.

    >>> cell([True, False, True, True])["successes"], cell([])["success_rate"]
    (3, None)
    """
    k, n = sum(map(bool, outcomes)), len(outcomes)
    return {"episodes": n, "successes": k, "success_rate": k / n if n else None,
            "wilson95": list(wilson(k, n)) if n else None}


class Policies:
    """One policy per task: a fresh scripted expert per task; a checkpoint loaded once and re-bound.
    With ``memory`` (a persistent memory file) the checkpoint is steered by ONE success memory for
    the whole suite, each task in its own namespace (embodiment/task), saved by `save_memory`."""

    def __init__(self, spec: str, threads: int | None, memory: str | None = None, per_task: bool = False):
        self.spec, self.threads, self.loaded, self.memory, self.steered = spec, threads, None, memory, None
        self.per_task = per_task    # the memory is saved as of each finished task only (a resumable run)

    def for_device(self, dev, uri: str = ""):
        if self.spec in STATE_ONLY or self.spec.startswith("replay:"):
            if self.memory:
                raise ValueError(f"--memory steers a VLA checkpoint, not {self.spec!r}")
            return make_policy(self.spec, dev, threads=self.threads)
        if self.loaded is not None and self.loaded.rebinds:     # loaded once, bound to this task's body
            self.loaded.bind(dev.embodiment)
        else:
            self.loaded = make_policy(self.spec, dev, threads=self.threads)
        if not self.memory:
            return self.loaded
        if self.steered is None:
            self.steered = with_memory(self.loaded, self.memory, uri, dev)
            if self.per_task:
                self.steered.autosave = None    # not after every episode: a task cut short runs again
        self.steered.namespace = device_namespace(uri, dev.embodiment)
        return self.steered

    def save_memory(self) -> None:
        if self.steered is not None:
            self.steered.memory.save(self.memory)


def run_suite(suite: str, policy_spec: str, *, episodes: int, seed: int = 0, query: dict | None = None,
              render: str = "policy", threads: int | None = None, on_episode=None, on_task=None,
              tasks: list[str] | None = None, jobs: int = 1, memory: str | None = None, pool=None,
              resume=None, on_resumed=None) -> dict:
    """Evaluate `policy_spec` on every task of `suite` (or the given subset `tasks`), `episodes` per task
    with seeds `seed .. seed + episodes - 1`. ``render``: "policy" renders only what the policy reads,
    "default" renders as a lone task does (one 96x96 camera; the benchmark's baseline). ``query`` goes
    into every task's device URI (e.g. shift=heavy). ``on_episode(task, i, result)`` after each episode
    (one process only), ``on_task(task, row)`` after each task. ``jobs`` > 1 runs tasks in that many
    worker processes (one torch thread each; the same outcomes as one process at one thread, tasks
    reported in suite order). ``memory``: a persistent memory file that steers the checkpoint across the
    whole suite, in one process, in task order (see `Policies`). ``pool``: runs the tasks elsewhere,
    ``pool(names, uris, policy_spec, episodes, seed, on_task) -> {task: row}`` (Ray actors:
    `embodia.agent.fleet.suite_pool.ray_suite_pool`). ``resume``: a partial file (`suite_resume`) that
    keeps every finished task, so the same call after a stop goes on where it stopped (with ``memory``,
    the memory is saved as of each finished task, and a stop mid-task leaves it there: that task runs
    again from its first episode); ``on_resumed(tasks)`` names the tasks read back, once, before any
    runs. The report: per task, per group, overall (Wilson 95%), protocol, timing."""
    if memory and (jobs > 1 or pool):
        raise ValueError("--memory runs the suite in one process (one memory grows task after task); "
                         "drop --jobs/--workers")
    if render not in RENDER_MODES:
        raise ValueError(f"render={render!r}; one of {RENDER_MODES}")
    run = suite_run(suite, policy_spec, episodes=episodes, seed=seed, tasks=tasks, query=query, render=render,
                    memory=memory)
    skipped = {t: why for t, why in not_run(suite, policy_spec).items() if t in run["tasks"]}
    names, q, prefix = [t for t in run["tasks"] if t not in skipped], suite_query(policy_spec, render, query, suite), \
        family(suite).prefix
    partial = PartialRun(resume, run) if resume is not None else None
    done = dict(partial.done) if partial else {}
    todo = [t for t in names if t not in done]
    if done and on_resumed:
        on_resumed([t for t in names if t in done])

    def finished(task, row):
        if partial is not None:
            partial.add(task, row)
        if on_task:
            on_task(task, row)
    t0 = time.perf_counter()
    if pool is not None:
        rows = pool(todo, [task_uri(t, q, prefix) for t in todo], policy_spec, episodes, seed, finished)
    elif jobs > 1:
        rows = _run_parallel(todo, q, policy_spec, episodes, seed, jobs, finished, prefix)
    else:
        policies = Policies(policy_spec, threads, memory, per_task=partial is not None)
        rows = {}
        try:
            for task in todo:
                rows[task] = _run_task(task, task_uri(task, q, prefix), policies, episodes, seed, on_episode)
                if partial is not None:
                    policies.save_memory()     # the memory as of this task, before the task counts as done
                finished(task, rows[task])
        finally:
            if partial is None:     # a resumable run saved it as of its last finished task
                policies.save_memory()
    wall = time.perf_counter() - t0
    ran = sum(r["episodes"] for r in rows.values())
    rows = {t: dict(done[t]) if t in done else rows[t] for t in names}
    per_task = [r.pop("_timing") for r in rows.values()]
    timing = {k: sum(t[k] for t in per_task) for k in ("policy_s", "device_s", "steps")}
    rep = _report(suite, policy_spec, rows, seed=seed, episodes=episodes, query=q, render=render,
                   timing={**timing, "wall_s": wall, "jobs": jobs,
                           "episodes_per_s": ran / wall if wall and ran else None,
                           "resumed_tasks": len(done)})
    rep["not_run"] = skipped
    rep["memory"] = memory
    rep["run"] = run         # what a later call compares to reuse this report (suite_resume.run_diff)
    return rep


def suite_run(suite: str, policy_spec: str, *, episodes: int, seed: int, tasks: list[str] | None = None,
              query: dict | None = None, render: str = "policy", memory: str | None = None) -> dict:
    """The identity of `run_suite` called with these arguments (`suite_resume.run_identity`): what its
    partial file's first line and its report's ``run`` hold, for checking saved work against."""
    return run_identity(suite=suite, policy=policy_spec, episodes=episodes, seed=seed,
                        query=suite_query(policy_spec, render, query, suite), render=render, memory=memory,
                        tasks=list(tasks) if tasks else list(suite_tasks(suite)))


def suite_query(policy_spec: str, render: str = "policy", query: dict | None = None, suite: str = "mt50") -> dict:
    """The device query every task of a suite evaluation opens with: the suite's episode length,
    what the policy reads (``render="policy"``), then the caller's ``query``, which wins (e.g.
    ``?max_steps=200`` for a quick look). A MiniWoB page keeps its own step budget and always renders."""
    if family(suite).max_steps is None:
        return dict(query or {})
    return {"max_steps": str(SUITE_MAX_STEPS), **(policy_reads(policy_spec) if render == "policy" else {}),
            **(query or {})}


_WORKER: dict = {}   # per worker process: its policy loader (a checkpoint loads once per process)


def _worker_task(task: str, uri: str, policy_spec: str, episodes: int, seed: int) -> tuple[str, dict]:
    if "policies" not in _WORKER:
        _WORKER["policies"] = Policies(policy_spec, 1)
    return task, _run_task(task, uri, _WORKER["policies"], episodes, seed, None)


class TaskRunner:
    """Runs whole tasks of a suite in a worker (a process or a Ray actor): the policy loads once,
    one torch thread, the same outcomes as one process at one thread."""

    def __init__(self, policy_spec: str):
        self.policies = Policies(policy_spec, 1)

    def run(self, task: str, uri: str, episodes: int, seed: int) -> tuple[str, dict]:
        return task, _run_task(task, uri, self.policies, episodes, seed, None)


def _run_parallel(names, q, policy_spec, episodes, seed, jobs, on_task, prefix=PREFIX) -> dict:
    calls = [(t, task_uri(t, q, prefix), policy_spec, episodes, seed) for t in names]
    rows = in_processes(_worker_task, calls, jobs, on_task, "evaluating")
    return {t: rows[t] for t in names}


def _run_task(task, uri, policies, episodes, seed, on_episode) -> dict:
    dev = make_device(uri)
    try:
        pol = policies.for_device(dev, uri)
        results = run_episodes(dev, pol, episodes=episodes, seed=seed,
                               on_episode=(lambda i, r: on_episode(task, i, r)) if on_episode else None)
    finally:
        dev.close()
    outcomes = [bool(r.success) for r in results]
    return {"group": _family_of_uri(uri).group_of(task), **cell(outcomes), "outcomes": outcomes,
            "mean_length": sum(r.steps for r in results) / len(results) if results else None,
            "errors": [r.error for r in results if r.error is not None],
            "_timing": {"policy_s": sum(r.timing.get("policy_s", 0.0) for r in results),
                        "device_s": sum(r.timing.get("device_s", 0.0) for r in results),
                        "steps": sum(r.steps for r in results)}}


def record_suite(suite: str, policy_spec: str, out, *, episodes: int, seed: int = 0, only_success: bool = False,
                 query: dict | None = None, on_task=None, tasks: list[str] | None = None, jobs: int = 1) -> dict:
    """Record ``episodes`` per task of ``suite`` into ``out/<task>/``, one LeRobotDataset per task
    (Meta-World's state bounds differ from task to task, so each task describes its own body). The
    device renders as a lone task does (a dataset wants the images whoever acts). Episode i of every
    task uses seed ``seed + i``; with ``only_success`` each task records until ``episodes`` succeeded
    (at most 10x as many tries; failures are recorded too, marked as such). ``jobs`` > 1 records
    tasks in that many worker processes, one task per worker at a time (each task owns its dataset,
    so the datasets are the ones one process writes; ``on_task`` then runs as tasks finish). Returns
    per-task counts, tasks in suite order.

    >>> rep = record_suite("mt50", "expert", "/tmp/demos", episodes=50, seed=1000)   # doctest: +SKIP
    """
    names = list(tasks) if tasks else list(suite_tasks(suite))
    fam = family(suite)
    names = [t for t in names if t not in not_run(suite, policy_spec)]
    q = {**({"max_steps": str(fam.max_steps)} if fam.max_steps else {}), **(query or {})}
    plan = RecordPlan(policy_spec, str(out), episodes, seed, only_success, q)
    if jobs > 1:
        rows = in_processes(_worker_record, [(t, plan, fam.prefix) for t in names], jobs, on_task, "recording")
    else:
        policies, rows = Policies(policy_spec, None), {}
        for task in names:
            rows[task] = _record_task(task, plan, fam.prefix, policies)
            if on_task:
                on_task(task, rows[task])
    rows = {t: rows[t] for t in names}
    return {"suite": suite, "policy": policy_spec, "out": str(out), "seed": seed, "tasks": rows,
            "recorded": sum(r["recorded"] for r in rows.values()),
            "successes": sum(r["successes"] for r in rows.values())}


@dataclass(frozen=True)
class RecordPlan:
    """What every task of a suite recording shares (it travels to worker processes whole)."""
    policy: str
    out: str
    episodes: int
    seed: int
    only_success: bool
    query: dict


def _record_task(task: str, plan: RecordPlan, prefix: str, policies: "Policies") -> dict:
    """Record one task into ``plan.out/<task>/``, going on after what a stopped run left there."""
    from embodia.agent.recording.recorder import open_recorder
    uri, root = task_uri(task, plan.query, prefix), Path(plan.out) / task
    done = _recorded(root)
    todo, first_seed = _still_to_record(done, plan.episodes, plan.seed, plan.only_success)
    if todo <= 0:   # a stopped run already finished this task: resume after it
        return _suite_row(task, _family_of_uri(uri), done, resumed=len(done))
    dev = make_device(uri)
    try:
        pol = policies.for_device(dev, uri)
        writer = open_recorder(root, dev.embodiment)
        try:
            results = run_episodes(dev, pol, episodes=todo, seed=first_seed, recorder=writer,
                                   until_successes=plan.episodes - _successes(done) if plan.only_success else None,
                                   episode_meta={"device": uri, "shift": plan.query.get("shift"),
                                                 "size": plan.query.get("size"), "policy": plan.policy})
        finally:
            writer.close()
    finally:
        dev.close()
    return _suite_row(task, _family_of_uri(uri), done + [{"success": r.success, "steps": r.steps} for r in results],
                      resumed=len(done))


def _worker_record(task: str, plan: RecordPlan, prefix: str) -> tuple[str, dict]:
    key = ("record", plan.policy)
    if key not in _WORKER:
        _WORKER[key] = Policies(plan.policy, 1)
    return task, _record_task(task, plan, prefix, _WORKER[key])


def _recorded(root) -> list[dict]:
    """The episodes an earlier (stopped) run recorded under ``root``: seed, success, steps each."""
    from embodia.agent.recording.dataset import INFO_PATH, LocalDataset
    if not (Path(root) / INFO_PATH).exists():
        return []
    return [{"seed": e.get("seed"), "success": e.get("success"), "steps": int(e.get("length") or 0)}
            for e in LocalDataset(root).episodes]


def _successes(done: list[dict]) -> int:
    return sum(bool(e["success"]) for e in done)


def _still_to_record(done: list[dict], episodes: int, seed: int, only_success: bool) -> tuple[int, int]:
    """(episodes still to try, the seed to start at) for a task with ``done`` already on disk: the
    seeds go on after the last one used, so a resumed run records what one uninterrupted run would.

    >>> _still_to_record([{"seed": 5, "success": True}, {"seed": 6, "success": False}], 3, 5, True)
    (28, 7)
    >>> _still_to_record([{"seed": 5, "success": True}], 1, 5, False)
    (0, 6)
    """
    nxt = max((int(e["seed"]) for e in done if e.get("seed") is not None), default=seed - 1) + 1
    if only_success:
        return (0 if _successes(done) >= episodes else 10 * episodes - len(done)), nxt
    return episodes - len(done), nxt


def _suite_row(task: str, fam: Family, episodes: list[dict], *, resumed: int) -> dict:
    return {"group": fam.group_of(task), "recorded": len(episodes), "successes": _successes(episodes),
            "steps": sum(int(e["steps"] or 0) for e in episodes), "resumed_from": resumed}


def _report(suite, policy_spec, rows, *, seed, episodes, query, render, timing) -> dict:
    members: dict[str, list[str]] = {}
    for t, r in rows.items():
        members.setdefault(r["group"], []).append(t)
    order = list(GROUPS) if family(suite).prefix == PREFIX else sorted(members)
    groups = {g: {**cell([o for t in members[g] for o in rows[t]["outcomes"]]), "tasks": len(members[g])}
              for g in order if g in members}
    return {
        "suite": suite, "policy": policy_spec, "seed": seed, "episodes_per_task": episodes,
        "overall": {**cell([o for r in rows.values() for o in r["outcomes"]]), "tasks": len(rows)},
        "mean_of_groups": mean_of_groups(groups), "groups": groups, "tasks": rows,
        "protocol": {"max_steps": int(query["max_steps"]) if "max_steps" in query else None,
                     "success": ("info['success'] at any step ends the episode" if family(suite).prefix == PREFIX
                                 else "the task's raw reward > 0 when it ends (MiniWoB's protocol)"),
                     "seeds": f"episode i of every task: seed {seed} + i", "render": render,
                     "device_query": query},
        "timing": timing,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
    }


def mean_of_groups(groups: dict) -> dict | None:
    """The plain mean of the groups' success rates (each group counts once, whatever its size: the
    "Avg." of the field's MT50 tables), with a 95% interval built from the groups' Wilson intervals
    (`stats.mean_of_rates`; the groups are independent samples). None for fewer than 2 groups.

    >>> mean_of_groups({"a": {"successes": 80, "episodes": 100}, "b": {"successes": 40, "episodes": 100}})
    {'rate': 0.6, 'ci95': [0.5366, 0.6593], 'groups': 2}
    """
    cells = [(c["successes"], c["episodes"]) for c in groups.values() if c["episodes"]]
    if len(cells) < 2:
        return None
    rate, low, high = mean_of_rates(cells)
    return {"rate": round(rate, 4), "ci95": [round(low, 4), round(high, 4)], "groups": len(cells)}


def _fmt(c: dict) -> str:
    if not c["episodes"]:
        return "      -"
    lo, hi = c["wilson95"]
    return f"{c['successes']:>4}/{c['episodes']:<4} {c['success_rate']:.3f} [{lo:.3f}, {hi:.3f}]"


def suite_table(rep: dict, published: bool = False) -> str:
    """The report as a plain-text table: one line per task, then per group, then overall. With
    ``published`` (full MT50 only), the group lines and the mean-of-groups line also carry
    PUBLISHED_MT50's figures (%)."""
    pub = published and rep["suite"] == "mt50" and rep["overall"]["tasks"] == len(SUITES["mt50"])
    names = list(PUBLISHED_MT50) if pub else []
    head = "".join(f"  {n:>17}" for n in names)
    lines = [f"{'task':<30} {'group':<10} {'success':>9}  rate  [Wilson 95%]"]
    for task, r in rep["tasks"].items():
        lines.append(f"{task:<30} {r['group']:<10} {_fmt(r)}")
    for task, why in rep.get("not_run", {}).items():     # listed, never dropped silently
        lines.append(f"{task:<30} {'-':<10} not run: {why}")
    lines.append("")
    if names:
        lines.append(f"{'':<41} {'this run':<28}{head}")
    for g, c in rep["groups"].items():
        cols = "".join(f"  {PUBLISHED_MT50[n][g]:>17.1f}" for n in names)
        lines.append(f"{'group ' + g + ' (' + str(c['tasks']) + ' tasks)':<41} {_fmt(c):<28}{cols}")
    o = rep["overall"]
    of = f"{o['tasks']} of {o['tasks'] + len(rep['not_run'])}" if rep.get("not_run") else str(o["tasks"])
    lines.append(f"{'overall ' + rep['suite'] + ' (' + of + ' tasks)':<41} {_fmt(o)}")
    m = rep.get("mean_of_groups")
    if m:
        cols = "".join(f"  {PUBLISHED_MT50[n]['avg']:>17.1f}" for n in names)
        lines.append(f"{'mean of the ' + str(m['groups']) + ' groups (Avg.)':<41} {'':>9} {m['rate']:.3f} "
                     f"[{m['ci95'][0]:.3f}, {m['ci95'][1]:.3f}]{cols}")
    if names:
        lines.append("published: the SmolVLA paper (arXiv 2506.01844), LeRobot's protocol with images; "
                     "see docs/metaworld.md (Meta-World suites) for how this run's protocol differs")
    return "\n".join(line.rstrip() for line in lines)
