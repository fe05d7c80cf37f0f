"""Where one decision's time goes on a GPU: the parts timed with the device synchronized, and a
profiler's view of a few decisions of one size.

    python benchmarks/gpu_profile.py --size pi0 --cameras 3          # bfloat16, CUDA graphs

Builds the size as `gpu_latency.py` does (random weights from config), warms the policy (graphs
captured at bind), then times the parts with the device synchronized after each: host
preparation, backbone prefix, sampler (`gpu_latency.py` times without synchronizing, so there the
prefix's device work shows up in the sampler's share). Then `torch.profiler` over 5 decisions: the
operations that took the most device and host time, and how many kernels ran. Prints the tables,
then one JSON line.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

import gpu_latency as gl
from embodia.devices import Observation
from embodia.policies.robot.vla import VLAPolicy


def synced_parts(policy: VLAPolicy, obs, repeats: int) -> dict:
    """p50 (ms) of each part with the device synchronized at its end."""
    bb, parts = policy.model.backbone, {"prepare": [], "prefix": [], "sampler": [], "decision": []}
    emb = policy.embodiment
    real_context = policy.model.context
    for i in range(repeats + 3):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        batch = bb.prepare([[obs.images[c.name] for c in emb.cameras]], [emb.prompt()], [gl.INSTRUCTION])
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        with torch.inference_mode():
            out = policy.prefix(batch) if policy.prefix is not None else None
            if out is None:
                real_context(**batch)
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        policy.predict_chunk(obs, gl.INSTRUCTION)
        t3 = time.perf_counter()
        if i >= 3:
            parts["prepare"].append((t1 - t0) * 1e3)
            parts["prefix"].append((t2 - t1) * 1e3)
            parts["decision"].append((t3 - t2) * 1e3)
            parts["sampler"].append(policy.last_timing["sample_ms"])
    return {k: round(float(np.median(v)), 2) for k, v in parts.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="pi0", choices=sorted(gl.SIZES))
    ap.add_argument("--cameras", type=int, default=3, choices=(1, 3))
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--eager", action="store_true", help="no CUDA graphs")
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    model, norms, bodies = gl.build(args.size, "cuda")
    emb = bodies[args.cameras]
    policy = VLAPolicy(model, norms, torch_device="cuda", dtype=args.dtype, graphs=not args.eager).bind(emb)
    obs = Observation(images={c.name: np.zeros((c.height, c.width, 3), np.uint8) for c in emb.cameras},
                      state=np.zeros(emb.state_dim, np.float32))
    parts = synced_parts(policy, obs, args.repeats)
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            policy.predict_chunk(obs, gl.INSTRUCTION)
    events = prof.key_averages()
    for key in ("self_device_time_total", "self_cuda_time_total", "cpu_time_total"):
        try:
            print(events.table(sort_by=key, row_limit=15, max_name_column_width=60))
        except Exception as e:  # noqa: BLE001 - the sort keys' names moved between torch versions
            print(f"(no table by {key}: {e})")
    try:
        kernels = sum(e.count for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    except Exception:  # noqa: BLE001
        kernels = -5
    print(json.dumps({"benchmark": "gpu_profile", "size": args.size, "cameras": args.cameras, "dtype": args.dtype,
                      "graphs": not args.eager, "card": torch.cuda.get_device_name(), "synced_p50_ms": parts,
                      "device_events_per_decision": kernels // 5}))


if __name__ == "__main__":
    main()
