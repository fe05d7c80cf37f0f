"""Which source episodes does failure credit see steering failures? One noisy-labels stream,
instrumented: for every stored source episode, the elite weight its segments carried in steered
decisions, summed over target episodes that succeeded and that failed. One JSON line.

    python benchmarks/credit_probe.py --seed 30000 --episodes 100
    python benchmarks/credit_probe.py --arm noisy-burst-no-credit --seed 40000 --dump burst-0.jsonl

`--dump` writes, per target episode, its outcome, whether the detector mislabelled it, the id it
was stored under, and the weight of every source that steered it: with a `-no-credit` arm (nothing
deleted) that is the raw evidence against which a credit rule can be replayed offline.

The weighted failure share w_fail / (w_succ + w_fail) separates real successes from false ones that
got stuck (the harmful kind), which is what `MemoryConfig.episode_credit` thresholds; false
successes that passed a gap but stopped short of the goal look like real ones. The stream runs with
the committed defaults (pooled credit on), so sources deleted by credit stop accumulating evidence.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections import defaultdict

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np
import torch

from embodia.agent.evaluation.memory_eval import NOISY, NoisyLabels, arm_factory  # noqa: E402
from embodia.agent.loop.episode import run_episode  # noqa: E402
from embodia.agent.loop.factory import (  # noqa: E402
    device_namespace,  # noqa: E402
    make_device,
    make_policy,
)
from embodia.policies.placement import parse_args  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="sim:twogap-push")
    ap.add_argument("--shift", default="blocked-left")
    ap.add_argument("--policy", default="embodia-tiny")
    ap.add_argument("--seed", type=int, default=30000)
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--arm", default="noisy-labels", choices=sorted(NOISY),
                    help="a false-label arm of embodia.agent.evaluation.memory_eval.NOISY; the -no-credit ones delete nothing "
                    "(raw evidence per source)")
    ap.add_argument("--dump", default=None, help="JSONL: per target episode, its outcome, the label the "
                    "memory got, and the elite weight of every source episode that steered it")
    args = parse_args(ap)      # with --torch-device / --dtype (embodia.policies.placement)
    torch.set_num_threads(1)
    import faiss
    faiss.omp_set_num_threads(1)
    t0 = time.time()
    dev = make_device(args.device, shift=args.shift)
    pol = make_policy(args.policy, dev, threads=1)
    noisy = arm_factory(pol, device_namespace(args.device, dev.embodiment))(args.arm, 0)
    assert isinstance(noisy, NoisyLabels)
    noisy.stream_length, noisy.device = args.episodes, dev
    mem = noisy.policy.memory
    weight = defaultdict(float)            # source episode -> weight in the current target episode
    record_use = mem.record_use

    def spy(namespace, r):
        if r is not None and not r.empty:
            e = mem._ns[namespace]
            rows = e.rows_of(r.elite_ids)
            for ep, w in zip(e.cols["episode_id"][rows[rows >= 0]].tolist(), r.weights[rows >= 0].tolist()):
                weight[int(ep)] += float(w)
        return record_use(namespace, r)
    mem.record_use = spy
    src = defaultdict(lambda: {"used": 0, "failed": 0, "w_succ": 0.0, "w_fail": 0.0})
    outcomes, infos = [], {}
    dump = open(args.dump, "w") if args.dump else None
    for i in range(args.episodes):
        weight.clear()
        n_false = noisy.false_positives
        r = run_episode(dev, noisy, seed=args.seed + i)
        outcomes.append(bool(r.success))
        infos[noisy.policy.episodes] = {k: v for k, v in r.info.items() if k != "policy"}
        if dump:
            dump.write(json.dumps({"i": i, "success": bool(r.success), "stored_as": noisy.policy.episodes,
                                   "false_label": noisy.false_positives > n_false,
                                   "gap": r.info.get("gap"), "sources": {str(k): v for k, v in weight.items()}}) + "\n")
            dump.flush()
        for ep, w in weight.items():
            s = src[ep]
            s["used"] += 1
            s["failed"] += int(not r.success)
            s["w_fail" if not r.success else "w_succ"] += w
    dev.close()
    if dump:
        dump.close()
    false = set(noisy.poisoned_ids)

    def share(s):
        tot = s["w_succ"] + s["w_fail"]
        return s["w_fail"] / tot if tot > 0 else None

    groups = {"real": [], "false_stuck": [], "false_passed_a_gap": []}
    for ep, s in src.items():
        if ep not in false:
            kind = "real"
        else:
            kind = "false_stuck" if infos.get(ep, {}).get("gap") is None else "false_passed_a_gap"
        if share(s) is not None:
            groups[kind].append(share(s))
    summary = {k: {"sources": len(v), "mean": float(np.mean(v)) if v else None,
                   "p99": float(np.percentile(v, 99)) if v else None,
                   "min": float(min(v)) if v else None, "max": float(max(v)) if v else None}
               for k, v in groups.items()}
    print(json.dumps({"benchmark": "credit_probe", "device": args.device, "shift": args.shift,
                      "policy": args.policy, "seed": args.seed, "episodes": args.episodes,
                      "success": float(np.mean(outcomes)), "poison": {k: v for k, v in noisy.poison_report().items()
                                                                       if k != "false_successes"},
                      "weighted_failure_share": summary, "seconds": round(time.time() - t0),
                      "machine": f"{platform.machine()} {os.cpu_count()} cpus, torch {torch.__version__}",
                      "date": time.strftime("%Y-%m-%d")}))


if __name__ == "__main__":
    main()
