"""How good are the automatic success sources? Precision and recall of their *verified* labels
against the simulator's own check, on held-out episodes; one JSON line.

    python benchmarks/success_labels.py --episodes 60 --seed 300000          # about 15 min on 2 cores

Held-out episodes: seeds the detector never saw (300000 and up; it trained on 200000+), every
shift of twogap-push (none, blocked-left, blocked-right, heavy), Meta-World reach-v3, and gui-sim's
held-out split (labels never seen in training) under the layout and under the theme shift. Each
condition's episodes are played in turn by the bundled policy, the scripted expert with two levels
of noise (robots: Gaussian action noise; screens: a random candidate action instead of the
expert's with that probability) and a random agent, so successes and failures both occur.

Sources, each called on the same episodes:
- ``learned``: embodia-tiny's learned success detector (`--success learned`) at its default threshold
  (`LEARNED_THRESHOLD`); its raw probabilities also give the figures at other thresholds
  (``at_thresholds``), from which the default was chosen;
- ``judge``: `--success judge:openai:<model>` through the loopback OpenAI-compatible server of the
  tests (tests/fake_openai.py), scripted to answer "success, confidence 0.95" every time: a wiring
  test of the judge path only (its precision is the base rate), not a measure of any model.

Per condition and pooled per domain: verified successes, their precision (the share that the
simulator confirms) and recall (the share of true successes labelled verified successes), both
with 95% Wilson intervals; the same for verified failures; the unverified share.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch

from embodia.agent.evaluation.stats import wilson
from embodia.agent.loop.episode import run_episode
from embodia.agent.loop.success import LEARNED_THRESHOLD, JudgeLabeler, LearnedLabeler, probability_label
from embodia.agent.training.success_train import make_agent
from embodia.devices import open_device
from embodia.policies import BUNDLED_CHECKPOINTS

CONDITIONS = [  # (domain, device URI, shift)
    ("twogap-push", "sim:twogap-push", None),
    ("twogap-push", "sim:twogap-push", "blocked-left"),
    ("twogap-push", "sim:twogap-push", "blocked-right"),
    ("twogap-push", "sim:twogap-push", "heavy"),
    ("metaworld-reach", "sim:metaworld/reach-v3?max_steps=150", None),
    ("gui-sim", "gui-sim:all?split=test", "layout"),
    ("gui-sim", "gui-sim:all?split=test", "theme"),
]
AGENTS = {"robot": ["policy", "expert@0.5", "expert@1.0", "random"],
          "gui": ["policy", "expert@0.3", "expert@0.6", "random"]}
THRESHOLDS = (0.5, 0.7, 0.8, 0.9, 0.95, 0.98)
JUDGE_REPLY = '{"success": true, "confidence": 0.95, "reason": "scripted wiring reply"}'


class Sources:
    """The labeler the loop calls: every source labels the same (first, final) observations; the
    labels are kept in ``last``."""

    def __init__(self, sources: dict):
        self.sources, self.last = sources, {}

    def __call__(self, device, first, final, instruction, seed):
        self.last = {name: lab(device, first, final, instruction, seed) for name, lab in self.sources.items()}
        return next(iter(self.last.values()))


def _ci(k: int, n: int) -> dict:
    return {"k": k, "n": n, "rate": k / n if n else None, "wilson95": list(wilson(k, n)) if n else None}


def score(rows: list[dict]) -> dict:
    """Precision / recall of verified success labels and precision of verified failures; rows are
    {"truth", "success", "verified"}."""
    t = np.array([r["truth"] for r in rows], bool)
    vs = np.array([r["verified"] and r["success"] is True for r in rows], bool)
    vf = np.array([r["verified"] and r["success"] is False for r in rows], bool)
    return {"episodes": len(rows), "true_successes": int(t.sum()),
            "success_precision": _ci(int((vs & t).sum()), int(vs.sum())),
            "success_recall": _ci(int((vs & t).sum()), int(t.sum())),
            "failure_precision": _ci(int((vf & ~t).sum()), int(vf.sum())),
            "unverified": _ci(int((~vs & ~vf).sum()), len(rows))}


def at_thresholds(rows: list[dict]) -> dict:
    """The learned detector's success precision and recall if the threshold were each of THRESHOLDS."""
    out = {}
    for th in THRESHOLDS:
        labs = [probability_label(r["probability"], "learned", th) for r in rows]
        s = score([{"truth": r["truth"], "success": lab.success, "verified": lab.verified} for r, lab in zip(rows, labs)])
        out[str(th)] = {"success_precision": s["success_precision"], "success_recall": s["success_recall"],
                        "failure_precision": s["failure_precision"]}
    return out


def run_condition(uri: str, shift, episodes: int, seed: int, judge_url: str | None, log) -> list[dict]:
    rows = []
    with open_device(uri, shift=shift) as dev:
        kind = "gui" if dev.embodiment.is_gui else "robot"
        sources = {"learned": LearnedLabeler(dev)}
        if judge_url:
            sources["judge"] = JudgeLabeler("test", judge_url, api_key_env=None, middle=0)
        labeler = Sources(sources)
        agents = [make_agent(a, dev, BUNDLED_CHECKPOINTS / "embodia-tiny") for a in AGENTS[kind]]
        for i in range(episodes):
            k = i % len(agents)
            r = run_episode(dev, agents[k], seed=seed + i, labeler=labeler)
            truth = r.error is None and bool(dev.success())
            row = {"agent": AGENTS[kind][k], "truth": truth, "steps": r.steps}
            for name, lab in labeler.last.items():
                row[name] = {"success": lab.success, "verified": lab.verified,
                             "probability": lab.extra.get("probability")}
            rows.append(row)
        log(f"{uri} shift={shift}: {episodes} episodes, {sum(r['truth'] for r in rows)} successes")
    return rows


def report(rows: list[dict], sources: list[str]) -> dict:
    out = {"agents": {a: {"episodes": sum(r["agent"] == a for r in rows),
                          "successes": sum(r["truth"] for r in rows if r["agent"] == a)}
                      for a in dict.fromkeys(r["agent"] for r in rows)}}
    for s in sources:
        out[s] = score([{"truth": r["truth"], **r[s]} for r in rows])
    out["learned"]["at_thresholds"] = at_thresholds(
        [{"truth": r["truth"], "probability": r["learned"]["probability"]} for r in rows])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=60, help="per condition")
    ap.add_argument("--seed", type=int, default=300000)
    ap.add_argument("--no-judge", action="store_true", help="skip the judge wiring test")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    t0 = time.perf_counter()
    server = None
    if not args.no_judge:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from fake_openai import FakeOpenAI
        server = FakeOpenAI().start()
        server.script(*[JUDGE_REPLY] * (args.episodes * len(CONDITIONS)))
    sources = ["learned"] + ([] if args.no_judge else ["judge"])
    per, by_domain = {}, {}
    try:
        for j, (domain, uri, shift) in enumerate(CONDITIONS):
            rows = run_condition(uri, shift, args.episodes, args.seed + 1000 * j,
                                 server.url if server else None,
                                 lambda m: print(f"[{time.perf_counter() - t0:5.0f} s] {m}", file=sys.stderr, flush=True))
            per[f"{domain}/{shift or 'none'}"] = report(rows, sources)
            by_domain.setdefault(domain, []).extend(rows)
    finally:
        if server:
            server.stop()
    domains = {d: report(rows, sources) for d, rows in by_domain.items()}
    acceptance = {d: {"success_precision": domains[d]["learned"]["success_precision"]["rate"],
                      "met": (domains[d]["learned"]["success_precision"]["rate"] or 0) >= 0.95}
                  for d in ("twogap-push", "gui-sim") if d in domains}
    print(json.dumps({"benchmark": "success_labels", "detector": "embodia-tiny", "threshold": LEARNED_THRESHOLD,
                      "episodes_per_condition": args.episodes, "seed": args.seed,
                      "acceptance_precision_at_least_0.95": acceptance, "domains": domains, "conditions": per,
                      "judge": "loopback scripted server, constant 'success 0.95' reply: wiring only"
                      if server else None,
                      "seconds": round(time.perf_counter() - t0),
                      "machine": f"{platform.machine()} {os.cpu_count()} cpus, torch {torch.__version__}",
                      "date": datetime.date.today().isoformat()}, default=float))


if __name__ == "__main__":
    main()
