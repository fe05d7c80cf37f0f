"""Success of a VLA checkpoint on the tasks it was trained on, the shift it was not, and with a
wrong embodiment prompt; one JSON line with Wilson intervals.

    python benchmarks/policy_success.py --policy embodia-tiny --episodes 200

Settings: `twogap` (sim:twogap-push), `twogap-blocked-left` (never trained on), `reach`
(sim:metaworld/reach-v3), and `twogap-wrong-prompt`: twogap-push while the backbone reads the
Sawyer arm's embodiment prompt instead of the pusher's; the report gives its success and how far
its first decisions move from the right-prompt ones (same observations, same noise).
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

from embodia.agent.evaluation.evaluate import evaluate
from embodia.agent.loop.factory import make_policy
from embodia.devices import open_device
from embodia.policies.placement import parse_args

SETTINGS = {
    "twogap": ("sim:twogap-push", None),
    "twogap-blocked-left": ("sim:twogap-push", "blocked-left"),
    "reach": ("sim:metaworld/reach-v3", None),
    "twogap-wrong-prompt": ("sim:twogap-push", None),
}


def prompt_effect(policy, device, seeds, wrong_prompt: str) -> float:
    """Mean |a_wrong - a_right| over the first decision of each seed (same noise both times)."""
    diffs = []
    for s in seeds:
        obs = device.reset(s)
        policy.prompt_override = None
        policy.reset(s)
        right = policy.act(obs, device.instruction)
        policy.prompt_override = wrong_prompt
        policy.reset(s)
        wrong = policy.act(obs, device.instruction)
        diffs.append(float(np.abs(right - wrong).mean()))
    policy.prompt_override = None
    return float(np.mean(diffs))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default="embodia-tiny")
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--threads", type=int, default=2)
    args = parse_args(ap)      # with --torch-device / --dtype (embodia.policies.placement)
    torch.set_num_threads(args.threads)

    out = {"benchmark": "policy_success", "policy": args.policy, "episodes": args.episodes, "seed": args.seed}
    for name in args.settings.split(","):
        uri, shift = SETTINGS[name]
        t0 = time.perf_counter()
        with open_device(uri, shift=shift) as dev:
            policy = make_policy(args.policy, dev, threads=args.threads)
            row = {}
            if name == "twogap-wrong-prompt":
                with open_device("sim:metaworld/reach-v3", render="0") as other:
                    wrong = other.embodiment.prompt()
                row["mean_abs_action_change_first_decision"] = prompt_effect(
                    policy, dev, range(args.seed, args.seed + 20), wrong)
                policy.prompt_override = wrong
            rep = evaluate(dev, policy, episodes=args.episodes, seed=args.seed)
        row.update({"device": uri, "shift": shift, "success_rate": rep["success_rate"],
                    "successes": rep["successes"], "episodes": rep["episodes"], "wilson95": rep["wilson95"],
                    "mean_length": rep["mean_length"], "seconds": round(time.perf_counter() - t0, 1)})
        if "gap" in rep["by"]:
            row["gap"] = {k: v["successes"] for k, v in rep["by"]["gap"].items()}
        out[name] = row
    out["machine"] = f"{platform.machine()} {os.cpu_count()} cpus, torch {torch.__version__}"
    out["date"] = time.strftime("%Y-%m-%d")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
