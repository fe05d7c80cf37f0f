"""`embodia eval`: run a policy over seeded episodes and write a JSON report with Wilson intervals."""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import sys
from collections import defaultdict

import numpy as np

from embodia.agent.evaluation.stats import wilson
from embodia.agent.loop.core import EpisodeResult
from embodia.agent.loop.episode import run_episode
from embodia.shared.files import write_atomic


def _categorical(info: dict, prefix: str = "") -> dict[str, str]:
    """Flatten string-valued facts (e.g. gap=left, policy.mode=right) for the per-category split."""
    out = {}
    for k, v in info.items():
        if k == "success_label" and not prefix:      # its source and reason are no split of the task
            continue
        if isinstance(v, dict):
            out.update(_categorical(v, f"{prefix}{k}."))
        elif isinstance(v, str):
            out[prefix + k] = v
    return out


def summarize(results: list[EpisodeResult], **header) -> dict:
    """The eval report: success rate with a 95% Wilson interval, splits, per-episode rows, timing."""
    verified = [r for r in results if r.success is not None]
    k, n = sum(bool(r.success) for r in verified), len(verified)
    by: dict[str, dict[str, dict]] = defaultdict(lambda: defaultdict(lambda: {"episodes": 0, "successes": 0}))
    for r in verified:
        for key, value in _categorical(r.info).items():
            cell = by[key][value]
            cell["episodes"] += 1
            cell["successes"] += int(bool(r.success))
    for cells in by.values():
        for cell in cells.values():
            cell["success_rate"] = cell["successes"] / cell["episodes"]
            cell["wilson95"] = list(wilson(cell["successes"], cell["episodes"]))
    steps = np.array([r.steps for r in results]) if results else np.zeros(0)
    total = sum(r.timing.get("total_s", 0.0) for r in results)
    timing = {
        "total_s": total,
        "episodes_per_s": len(results) / total if total else None,
        "steps_per_s": float(steps.sum()) / total if total else None,
        "policy_s": sum(r.timing.get("policy_s", 0.0) for r in results),
        "device_s": sum(r.timing.get("device_s", 0.0) for r in results),
        "record_s": sum(r.timing.get("record_s", 0.0) for r in results),
        "overhead_frac": (float(np.mean([r.timing["overhead_frac"] for r in results]))
                          if results else None),
    }
    return {
        **header,
        "episodes": len(results),
        "verified_episodes": n,
        "unverified_episodes": sum(1 for r in results if (r.info.get("success_label") or {}).get("verified") is False),
        "successes": k,
        "success_rate": k / n if n else None,
        "wilson95": list(wilson(k, n)) if n else None,
        "mean_length": float(steps.mean()) if len(steps) else None,
        "interrupted": sum(r.interrupted for r in results),
        "errors": sum(r.error is not None for r in results),
        "by": {key: dict(cells) for key, cells in by.items()},
        "timing": timing,
        "per_episode": [{"episode": i, "seed": r.seed, "success": r.success, "length": r.steps,
                         "info": r.info, "error": r.error, "episode_index": r.episode_index}
                        for i, r in enumerate(results)],
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
    }


def machine() -> dict:
    """Platform, cores, and the torch threads the policy ran with (when torch is loaded)."""
    out = {"platform": platform.platform(), "cpus": os.cpu_count()}
    if "torch" in sys.modules:   # never import torch for a report on a torch-free policy
        out["torch_threads"] = sys.modules["torch"].get_num_threads()
        from embodia.policies.placement import Placement, PlacementError
        try:                     # the process's choice, which every model it loaded followed
            out.update(Placement.resolve().as_dict())
        except PlacementError:
            pass
    return out


def device_lost(result) -> bool:
    """Whether an episode ended because its device went away."""
    return bool(result.error) and result.error.startswith("DeviceLost")


def run_episodes(device, policy, *, episodes: int, seed: int = 0, on_episode=None,
                 until_successes: int | None = None, loop=run_episode, **run_kw) -> list[EpisodeResult]:
    """Episodes ``seed .. seed + episodes - 1`` in order (seeds paired across policies); stops after an
    interrupted one (Ctrl-C), after one whose device was lost (it will not come back by itself: the
    episodes done so far are kept and reported), or once ``until_successes`` episodes succeeded
    (``episodes`` is then the most it tries). ``on_episode(i, result)`` after each; ``run_kw`` go to
    ``loop``: `run_episode` (recorder, episode_meta, instruction, max_steps, gate, ...) or
    `embodia.agent.loop.asynchronous.run_async` (and its ``smooth``)."""
    results = []
    for i in range(episodes):
        r = loop(device, policy, seed=seed + i, **run_kw)
        results.append(r)
        if on_episode:
            on_episode(i, r)
        enough = until_successes is not None and sum(bool(x.success) for x in results) >= until_successes
        if r.interrupted or device_lost(r) or enough:
            break
    return results


def evaluate(device, policy, *, episodes: int, seed: int = 0, recorder=None, episode_meta=None,
             on_episode=None, **header) -> dict:
    """Episode i runs with seed `seed + i`, so two policies compared on the same seeds are paired."""
    results = run_episodes(device, policy, episodes=episodes, seed=seed, on_episode=on_episode,
                           recorder=recorder, episode_meta=episode_meta)
    return summarize(results, embodiment=device.embodiment.name, seed=seed, **header)


def async_summary(results: list[EpisodeResult], smooth: str) -> dict:
    """Control rate held, stall steps and inference delays over the episodes of an --async run."""
    rows = [r.timing["async"] for r in results if "async" in r.timing]
    fracs = [a["rate_frac"] for a in rows if a["rate_frac"]]
    delays = [d for a in rows for d in a["delays"]]
    return {"smooth": smooth, "rate_frac_mean": sum(fracs) / len(fracs) if fracs else None,
            "stall_steps": sum(a["stall_steps"] for a in rows),
            "delay_steps_mean": sum(delays) / len(delays) if delays else None}


def write_json(report: dict, path) -> None:
    """The report as JSON, atomically; a non-finite number (a NaN a policy predicted) is written as
    null: bare NaN/Infinity is not JSON, and a reader of the report would fail on it."""
    from embodia.agent.recording.dataset_checks import json_safe
    text = json.dumps(json_safe(report), indent=2, default=_jsonable, allow_nan=False) + "\n"
    write_atomic(path, lambda f: f.write(text.encode("utf-8")))


def _jsonable(x):
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"not JSON-serializable: {type(x).__name__}")
