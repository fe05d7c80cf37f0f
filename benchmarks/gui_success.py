"""Multi-step task success of a GUI policy on held-out gui-sim instances; one JSON line.

    python benchmarks/gui_success.py --policy embodia-tiny --episodes 200

Settings: ``test`` (split=test: slot values never seen in training, on new layouts: shift=layout)
and ``train`` (split=train, shift=layout, seeds the demonstrations never used: the same task
families with trained labels, for comparison). Every row gives the success rate with a 95% Wilson
interval beside the mean chance rate of its instances (a uniformly random agent along the expert's
path, `embodia.sim.gui.chance_rate`), and splits it by template, by whether the expert's plan needs an
icon that is absent from the UI tree (``needs_absent``), and by whether the instruction names a
label that only test instances show (``heldout_label``). ``--sanity`` adds the scripted expert and
the uniform chance policy on the first setting.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections import defaultdict

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch

from embodia.agent.evaluation.stats import wilson
from embodia.agent.loop.episode import run_episode
from embodia.agent.loop.factory import make_policy
from embodia.policies.placement import parse_args
from embodia.sim.gui import ChancePolicy, GuiSimDevice, heldout_labels

SETTINGS = {"test": ("test", "layout"), "train": ("train", "layout")}


def cell(ok: list[bool], chance: list[float]) -> dict:
    k, n = int(sum(ok)), len(ok)
    return {"episodes": n, "successes": k, "success_rate": round(k / n, 4) if n else None,
            "wilson95": [round(v, 4) for v in wilson(k, n)],
            "mean_chance": float(f"{np.mean(chance):.3g}") if n else None}


def names_heldout(value: str, held: set) -> bool:
    """A slot value only test instances show: a held-out label, or a name with a held-out part."""
    return value in held or any(w in held for w in value.split())


def run_setting(policy_spec: str, split: str, shift: str, episodes: int, seed: int, threads: int) -> dict:
    dev = GuiSimDevice("all", split=split, shift=shift)
    policy = ChancePolicy(dev) if policy_spec == "chance" else make_policy(policy_spec, dev, threads=threads)
    held = heldout_labels()
    rows = []
    t0 = time.perf_counter()
    for i in range(episodes):
        r = run_episode(dev, policy, seed=seed + i)
        info = r.info
        rows.append({"ok": bool(r.success), "chance": float(info.get("chance", 0.0)), "template": info.get("task", "?"),
                     "absent": bool(info.get("needs_absent")), "steps": r.steps, "error": r.error,
                     "heldout": any(names_heldout(str(v), held) for v in (info.get("slots") or {}).values()),
                     "policy_ms": r.timing["policy_ms"].get("mean", 0.0)})
    by = defaultdict(lambda: defaultdict(lambda: ([], [])))
    for row in rows:
        for key, value in (("template", row["template"]), ("needs_absent", row["absent"]),
                           ("heldout_label", row["heldout"])):
            ok, ch = by[key][str(value).lower()]
            ok.append(row["ok"])
            ch.append(row["chance"])
    out = {"split": split, "shift": shift, **cell([r["ok"] for r in rows], [r["chance"] for r in rows]),
           "mean_steps": round(float(np.mean([r["steps"] for r in rows])), 2),
           "errors": sum(r["error"] is not None for r in rows),
           "decision_ms": round(float(np.mean([r["policy_ms"] for r in rows])), 1),
           "seconds": round(time.perf_counter() - t0, 1)}
    for key, cells in by.items():
        out[key] = {v: cell(*cells[v]) for v in sorted(cells)}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default="embodia-tiny")
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--sanity", action="store_true", help="also the expert and the chance policy (first setting)")
    ap.add_argument("--threads", type=int, default=1)
    args = parse_args(ap)      # with --torch-device / --dtype (embodia.policies.placement)
    torch.set_num_threads(args.threads)

    out = {"benchmark": "gui_success", "policy": args.policy, "device": "gui-sim:all (phone)",
           "episodes": args.episodes, "seed": args.seed}
    names = args.settings.split(",")
    for name in names:
        out[name] = run_setting(args.policy, *SETTINGS[name], args.episodes, args.seed, args.threads)
    if args.sanity:
        for spec in ("expert", "chance"):
            row = run_setting(spec, *SETTINGS[names[0]], args.episodes, args.seed, args.threads)
            out[f"{names[0]}_{spec}"] = {k: row[k] for k in ("episodes", "successes", "success_rate", "wilson95",
                                                              "mean_chance", "mean_steps")}
    out["machine"] = f"{platform.machine()} {os.cpu_count()} cpus, torch {torch.__version__}"
    out["date"] = time.strftime("%Y-%m-%d")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
