"""Fan-out throughput: episodes per second in one process and over `--workers 1` and `--workers 2`.

The same seeds run four ways: in this process at torch's default thread count (what `embodia eval`
does) and at one thread (what each worker uses), then over a local Ray fleet of 1 and of 2 worker
actors. A fleet's rate is measured from the first unit handed out to the last result; its start-up
(Ray plus every worker loading its device and policy) is reported apart. `identical_outcomes`
compares every episode's (seed, success, length) of both fleets with the one-thread serial run.
Diagnostics beside the rates: `cpu_probe_2_vs_1`, what two single-threaded matmul processes get
done next to each other relative to one alone (the ceiling for any fan-out at that moment: about 2
on two free cores, 1 when other work holds a core), and `episode_s_in_worker`, the mean episode time
inside the workers (it grows when two workers slow each other down). Also measured: the shared
memory's per-decision cost through a `MemoryProxy` (a Ray call to the `MemoryHost` actor) against
the same query on a local SuccessMemory.

    python benchmarks/scale.py --episodes 40
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MUJOCO_GL", "egl")


def outcomes(rows) -> list:
    return [(r["seed"], r["success"], r["length"]) for r in rows]


def serial(device: str, policy: str, episodes: int, threads: int | None) -> tuple[float, list]:
    import torch

    from embodia.agent.evaluation.evaluate import evaluate
    from embodia.agent.loop.factory import make_device, make_policy
    before = torch.get_num_threads()
    dev = make_device(device)
    try:
        pol = make_policy(policy, dev, threads=threads)
        used = torch.get_num_threads()
        t = time.perf_counter()
        rep = evaluate(dev, pol, episodes=episodes, seed=0)
        rate = episodes / (time.perf_counter() - t)
    finally:
        dev.close()
        torch.set_num_threads(before)
    return rate, outcomes(rep["per_episode"]), used


def fleet(device: str, policy: str, episodes: int, workers: int) -> tuple[float, float, list, dict]:
    from embodia.agent.fleet.runner import Fleet, WorkerSpec
    with Fleet(WorkerSpec(device, policy), workers=workers) as f:
        results = f.episodes(episodes=episodes, seed=0)
    rep = f.report()
    rows = [{"seed": r.seed, "success": r.success, "length": r.steps} for r in results]
    rep["episode_s"] = sum(r.timing["total_s"] for r in results) / len(results)   # inside the workers
    return episodes / rep["wall_s"], rep["startup_s"], outcomes(rows), rep


def _burn(seconds: float = 3.0) -> int:
    import numpy as np
    a = np.random.default_rng(0).random((128, 128), dtype=np.float32)
    n, t = 0, time.perf_counter()
    while time.perf_counter() - t < seconds:
        a @ a
        n += 1
    return n


def cpu_probe() -> float:
    """What two processes get done next to each other, relative to one alone (single-threaded
    128x128 matmuls): the ceiling for any fan-out over this machine's cores at this moment."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    from embodia.devices.base import environ
    # for the children only: this process keeps its defaults
    with environ(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1"), \
            ProcessPoolExecutor(2, mp_context=mp.get_context("spawn")) as ex:
        list(ex.map(_burn, [0.5, 0.5]))                     # both started and warm
        one = ex.submit(_burn).result()
        two = sum(ex.map(_burn, [3.0, 3.0]))
    return two / one


def proxy_cost(device: str, policy: str, n: int = 300) -> dict:
    """ms per decision (query + guidance) through a MemoryProxy vs on a local SuccessMemory holding
    the same 40 synthetic successful episodes of this policy's dimensions."""
    import numpy as np
    import ray

    from embodia.agent.fleet.memory_host import MemoryHost, MemoryProxy, memory_load_args
    from embodia.agent.fleet.runner import ray_session
    from embodia.agent.fleet.threads import one_thread
    from embodia.agent.loop.factory import make_device, make_policy
    from embodia.memory import SuccessMemory
    dev = make_device(device)
    load = memory_load_args(make_policy(policy, dev, threads=1))
    dev.close()
    rng = np.random.default_rng(0)
    ns, T, dk, D = "bench/ns", 130, load["key_dim"], load["action_dim"]
    episodes = [(np.cumsum(0.05 * rng.standard_normal((T, dk)), 0).astype(np.float32),
                 (0.3 + 0.05 * rng.standard_normal((T, D))).astype(np.float32)) for _ in range(40)]
    queries = [(episodes[i % 40][0][t] + 0.01, episodes[i % 40][1][max(0, t - 8):t], t)
               for i, t in enumerate(rng.integers(0, T, n))]
    local = SuccessMemory(None, **load)
    one_thread()                                   # as the host actor runs
    with ray_session(1) as (_, _where):
        import tempfile
        host = ray.remote(num_cpus=0)(MemoryHost).remote(tempfile.mkdtemp(), load, 10 ** 9)
        proxy = MemoryProxy(host, "bench")
        for mem in (local, proxy):
            for i, (k, a) in enumerate(episodes):
                mem.add_episode(ns, k, a, success=True, episode_id=i, stride=8)
        out = {}
        for name, mem in (("local", local), ("proxy", proxy)):
            ms, steered = [], 0
            for key, hist, t in queries:
                t0 = time.perf_counter()
                g = mem.guidance(mem.query(ns, key, hist, t=int(t)), steps=10)
                ms.append((time.perf_counter() - t0) * 1e3)
                steered += g is not None
            out[name] = {"p50_ms": round(float(np.median(ms)), 3), "p95_ms": round(float(np.percentile(ms, 95)), 3),
                         "steered_frac": round(steered / n, 2)}
        ray.kill(host)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="sim:twogap-push")
    ap.add_argument("--policy", default="embodia-tiny")
    ap.add_argument("--episodes", type=int, default=40)
    from embodia.policies.placement import parse_args
    args = parse_args(ap)      # with --torch-device / --dtype (embodia.policies.placement)
    def phase(name, rate):
        print(f"{name}: {rate:.3f} episodes/s, load average {os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
    probe = cpu_probe()
    rate_w2, start_w2, out_w2, rep_w2 = fleet(args.device, args.policy, args.episodes, 2)
    phase("--workers 2", rate_w2)
    rate_w1, start_w1, out_w1, rep_w1 = fleet(args.device, args.policy, args.episodes, 1)
    phase("--workers 1", rate_w1)
    rate_one, serial_one, _ = serial(args.device, args.policy, args.episodes, 1)
    phase("serial, 1 thread", rate_one)
    # last: at two threads any other load on the machine stalls it (stack notes, section 8)
    rate_default, serial_default, default_threads = serial(args.device, args.policy, args.episodes, None)
    phase("serial, default threads", rate_default)
    print(json.dumps({
        "benchmark": "scale", "device": args.device, "policy": args.policy, "episodes": args.episodes,
        "torch_default_threads": default_threads,
        "episodes_per_s": {"serial_default_threads": round(rate_default, 3), "serial_1_thread": round(rate_one, 3),
                           "workers_1": round(rate_w1, 3), "workers_2": round(rate_w2, 3)},
        "speedup_2_vs_1": round(rate_w2 / rate_w1, 2),
        "cpu_probe_2_vs_1": round(probe, 2),
        "episode_s_in_worker": {"workers_1": round(rep_w1["episode_s"], 3), "workers_2": round(rep_w2["episode_s"], 3)},
        "speedup_2_vs_serial_default": round(rate_w2 / rate_default, 2),
        "startup_s": {"workers_1": round(start_w1, 1), "workers_2": round(start_w2, 1)},
        "units": {"workers_1": rep_w1["units"], "workers_2": rep_w2["units"],
                  "per_worker_2": rep_w2["units_per_worker"]},
        "identical_outcomes": out_w1 == serial_one and out_w2 == serial_one,
        "identical_to_serial_default_threads": out_w2 == serial_default,
        "successes": sum(o[1] for o in serial_one),
        "memory_proxy_per_decision": proxy_cost(args.device, args.policy),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, {platform.python_version()}",
        "date": datetime.date.today().isoformat(),
    }))


if __name__ == "__main__":
    main()
