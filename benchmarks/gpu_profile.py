"""Where one decision's time goes on a GPU: the parts timed with the device synchronized, and a
profiler's view of a few decisions of one size.

    python benchmarks/gpu_profile.py --size pi0 --cameras 3          # bfloat16, CUDA graphs
    python benchmarks/gpu_profile.py --size smolvla,pi0 --samplers whole,step,eager --agree

Builds the size as `gpu_latency.py` does (random weights from config), warms the policy (graphs
captured at bind), then times the parts with the device synchronized after each: host
preparation, backbone prefix, sampler (`gpu_latency.py` times without synchronizing, so there the
prefix's device work shows up in the sampler's share). ``--samplers`` runs the same weights with
each sampler: ``whole`` (the default path on CUDA: the whole K-step sampler as one graph,
`GraphedSampler`), ``unfused`` (the same without the layer norms' fused modulation), ``compiled``
(each block inside it ``torch.compile``d, ``$EMBODIA_COMPILE_SAMPLER=1``), ``allcompiled`` (that, and
the backbone prefix's vision blocks and text layers compiled inside its graph,
``$EMBODIA_COMPILE_PREFIX=1``), ``autotuned`` (mode
max-autotune-no-cudagraphs), ``step`` (one graph per Euler step, `GraphedVelocity`, the fallback)
and ``eager``. Then `torch.profiler` over 5 decisions of the first: the operations that took the most
device and host time, and how many kernels ran (also counted for the others). ``--agree`` first
gives the zero-initialised parts of the DiT (adaLN, cross-attention outputs, head) small random
weights, so that the chunks depend on the whole network, and reports how far each sampler's plain,
steered (tau0 = 0.6) and inpainted chunks lie from the first's. Several sizes run in one process
(one start: the GPU checks are short). Prints the tables, then one JSON line per size.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

import gpu_latency as gl
from embodia.action_heads.graphs import GraphedSampler, GraphedVelocity
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


def make_policy(model, norms, emb, dtype: str, sampler: str) -> VLAPolicy:
    """A policy on CUDA with one of the samplers (whole graph, per-step graphs, eager), warmed."""
    policy = VLAPolicy(model, norms, torch_device="cuda", dtype=dtype, graphs=sampler != "eager")
    if sampler == "step":
        policy.graphs = GraphedVelocity()
    elif sampler in ("whole", "unfused", "compiled", "autotuned", "allcompiled"):
        policy.graphs = GraphedSampler(compile=sampler in ("compiled", "autotuned", "allcompiled"),
                                       fuse=sampler != "unfused",
                                       mode="max-autotune-no-cudagraphs" if sampler == "autotuned" else "default")
    if policy.prefix is not None:       # the prefix's blocks compiled too ($EMBODIA_COMPILE_PREFIX=1)
        policy.prefix.compile = sampler == "allcompiled"
    return policy.bind(emb)


def chunks(policy: VLAPolicy, obs) -> dict:
    """Plain, steered and inpainted chunks of one seed: what the samplers must agree on."""
    emb, cfg, out = policy.embodiment, policy.cfg, {}
    x0 = torch.linspace(-0.5, 0.5, cfg.horizon * cfg.action_dim, device=policy.device).view(1, cfg.horizon, -1)
    prefix = np.full((5, emb.action_dim), 0.25, np.float32)
    for name, kw in (("plain", {}), ("steered", {"x0": x0.to(policy.placement.dtype), "tau0": 0.6}),
                     ("inpainted", {"prefix": prefix})):
        policy.reset(7)
        out[name] = policy.predict_chunk(obs, gl.INSTRUCTION, **kw)
    return out


def kernels_per_decision(policy: VLAPolicy, obs, tables: bool, n: int = 5) -> int:
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            policy.predict_chunk(obs, gl.INSTRUCTION)
    if tables:
        events = prof.key_averages()
        for key in ("self_device_time_total", "self_cuda_time_total", "cpu_time_total"):
            try:
                print(events.table(sort_by=key, row_limit=15, max_name_column_width=60))
            except Exception as e:  # noqa: BLE001 - the sort keys' names moved between torch versions
                print(f"(no table by {key}: {e})")
    try:
        return sum(e.count for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA) // n
    except Exception:  # noqa: BLE001
        return -1


def excite(head) -> None:
    """Small random weights where the DiT is zero-initialised (an untrained head outputs v = 0)."""
    g = torch.Generator(device=next(head.parameters()).device).manual_seed(0)
    with torch.no_grad():
        for lin in [head.adaln, head.proj_out] + [b.cross_out for b in head.blocks]:
            lin.weight.copy_(torch.randn(lin.weight.shape, generator=g, device=lin.weight.device) * 0.02)


def profile_size(size: str, args, samplers: list[str]) -> dict:
    """Every sampler's row for one size (same weights), printed as each finishes."""
    model, norms, bodies = gl.build(size, "cuda")
    if args.agree:
        excite(model.head)
    emb = bodies[args.cameras]
    obs = Observation(images={c.name: np.zeros((c.height, c.width, 3), np.uint8) for c in emb.cameras},
                      state=np.zeros(emb.state_dim, np.float32))
    report, first = {}, None
    for i, sampler in enumerate(samplers):
        t0 = time.perf_counter()
        policy = make_policy(model, norms, emb, args.dtype, sampler)
        row = {"load_warm_s": round(time.perf_counter() - t0, 2), "synced_p50_ms": synced_parts(policy, obs, args.repeats)}
        if isinstance(policy.graphs, GraphedSampler):       # did the whole sampler replay as one graph
            row |= {"whole_graphs": len(policy.graphs.captured), "whole_failed": len(policy.graphs.failed),
                    "step_graphs": len(policy.graphs.per_step.captured), "compiled": policy.graphs.compile}
        if policy.prefix is not None:                        # and the backbone prefix
            row |= {"prefix_graphs": len(policy.prefix.captured), "prefix_compiled": policy.prefix.compile,
                    "prefix_rel_err": [round(e, 5) for e in policy.prefix.errors],
                    "prefix_block_rel_err_max": round(max(policy.prefix.block_errors, default=0.0), 5),
                    "prefix_compiled_rel_err": [round(e, 5) for e in policy.prefix.compiled_errors]}
        if args.agree:
            got = chunks(policy, obs)
            first = first or got
            row["max_abs_diff_vs_" + samplers[0]] = {k: float(np.abs(got[k] - first[k]).max()) for k in got}
            row["chunk_abs_mean"] = {k: round(float(np.abs(v).mean()), 4) for k, v in got.items()}
            if isinstance(policy.graphs, GraphedSampler):
                row["whole_graphs_after_agree"] = len(policy.graphs.captured)
        if args.tables or sampler != "eager":     # (eager's tens of thousands of events take long to read)
            row["device_events_per_decision"] = kernels_per_decision(policy, obs, i == 0 and args.tables,
                                                                     5 if args.tables else 2)
        report[sampler] = row
        print(size, sampler, json.dumps(row), flush=True)
        del policy
    return report


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="pi0", help=f"comma-separated of {', '.join(sorted(gl.SIZES))}")
    ap.add_argument("--cameras", type=int, default=3, choices=(1, 3))
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--samplers", default="whole",
                    help="comma-separated of whole, unfused, compiled, allcompiled, autotuned, step, eager "
                         "(the first is profiled)")
    ap.add_argument("--eager", action="store_true", help="no CUDA graphs (same as --samplers eager)")
    ap.add_argument("--agree", action="store_true", help="compare the samplers' chunks (non-zero head weights)")
    ap.add_argument("--no-tables", dest="tables", action="store_false", help="only count the kernels")
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    samplers = ["eager"] if args.eager else args.samplers.split(",")
    sizes = args.size.split(",")
    known = ("whole", "unfused", "compiled", "allcompiled", "autotuned", "step", "eager")
    if set(samplers) - set(known):
        ap.error(f"--samplers {args.samplers}: expected {', '.join(known)}")
    if set(sizes) - set(gl.SIZES):
        ap.error(f"--size {args.size}: expected {', '.join(sorted(gl.SIZES))}")
    for size in sizes:
        report = profile_size(size, args, samplers)
        print(json.dumps({"benchmark": "gpu_profile", "size": size, "cameras": args.cameras, "dtype": args.dtype,
                          "card": torch.cuda.get_device_name(), "torch": torch.__version__, "samplers": report}),
              flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
