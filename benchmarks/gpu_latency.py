"""Decision latency on a torch device: embodia-tiny, a SmolVLA-sized and a pi0-sized VLA.

    python benchmarks/gpu_latency.py                          # CUDA when present (all sizes), else CPU (tiny)
    python benchmarks/gpu_latency.py --torch-device cpu --sizes tiny --repeats 20
    python benchmarks/gpu_latency.py --compile --sizes smolvla,pi0 --dtypes bfloat16   # blocks compiled

Every model is built from a config with random weights (nothing is downloaded): a Qwen2.5-VL
backbone read at its middle layer and the DiT head, as issue 38's table sizes them

    tiny     text 64x2,    vision 64x2,    DiT 64x3,    H=16, 96x96 cameras (bundled size)
    smolvla  text 960x32,  vision 768x12,  DiT 512x12,  H=50, 224x224 cameras
    pi0      text 2048x36, vision 1280x32, DiT 1024x18, H=50, 224x224 cameras

(MLP widths 3x and 5.8x, so that the parameter counts land near the table's 0.53B and 4.6B with
this tokenizer's small vocabulary, rounded up to multiples of 64 as released checkpoints have them:
the pi0-sized text MLP is 11,904 wide, not 11,878, whose odd width sent cuBLAS to slower kernels;
0.52B and 4.56B). Each decision is the runtime's own
(`VLAPolicy.predict_chunk`: preprocessing, backbone prefix, K=10 Euler steps, unnormalization) on a
blank observation with 1 and 3 cameras, in float32 and bfloat16, eager and with CUDA graphs (the
backbone prefix, `policies/prefix_graph.py`, and the whole sampler, `action_heads/graphs.py`'s
`GraphedSampler`, whose row says how many whole graphs it captured and whether any shape fell back to
the per-step graphs; CUDA only: on other devices that row says why it did not run). ``--dtypes`` and
``--cameras`` pick rows (the GPU checks' short phases); ``--compile`` compiles the blocks inside the graphs
(the sampler's DiT blocks, the prefix's vision blocks and text layers: inductor, at load). Reported: p50/p90 of the decision and
of its parts (host preparation, backbone prefix including it, sampler); each row is also printed
to stderr as it finishes. Then a training-step row: embodia-tiny's head step at batch 64 (context
cached, as `embodia train` runs after freezing the backbone) on this device and on this host's CPU.
Prints one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numpy as np
import torch

from embodia.action_heads import QuantileNormalizer, flow_loss
from embodia.action_heads.graphs import COMPILE_ENV
from embodia.devices import Observation
from embodia.devices.embodiment import Camera, Channel, Embodiment
from embodia.policies.backbone import Backbone
from embodia.policies.backbone_tiny import tiny_config, train_tokenizer
from embodia.policies.placement import Placement
from embodia.policies.prefix_graph import PREFIX_COMPILE_ENV
from embodia.policies.robot.vla import VLAConfig, VLAModel, VLAPolicy

# name -> backbone (tiny_config arguments), head, horizon, camera side
SIZES = {
    "tiny": dict(backbone=dict(hidden=64, layers=2, vision_layers=2, heads=4, kv_heads=2),
                 head=dict(dim=64, depth=3, heads=4), horizon=16, side=96),
    "smolvla": dict(backbone=dict(hidden=960, layers=32, vision_layers=12, heads=15, kv_heads=5,
                                  vision_hidden=768, vision_heads=12, mlp_ratio=3.0, multiple_of=64),
                    head=dict(dim=512, depth=12, heads=8), horizon=50, side=224),
    "pi0": dict(backbone=dict(hidden=2048, layers=36, vision_layers=32, heads=16, kv_heads=2,
                              vision_hidden=1280, vision_heads=16, mlp_ratio=5.8, multiple_of=64),
                head=dict(dim=1024, depth=18, heads=16), horizon=50, side=224),
}
ACTION_DIM, STATE_DIM = 7, 8
INSTRUCTION = "pick up the red block and place it in the bin"


def body(cameras: int, side: int, horizon: int) -> Embodiment:
    return Embodiment(name=f"bench_arm_{cameras}cam", kind="arm", chunk=horizon,
                      actions=tuple(Channel(f"a{i}", -1.0, 1.0) for i in range(ACTION_DIM)),
                      state=tuple(Channel(f"s{i}", -1.0, 1.0) for i in range(STATE_DIM)),
                      cameras=tuple(Camera(f"cam{i}", side, side) for i in range(cameras)))


def build(size: str, device: str = "cpu", seed: int = 0) -> tuple[VLAModel, dict, dict[int, Embodiment]]:
    """A random-init float32 VLA of ``size``, made on ``device`` (a 4.6B model initializes in seconds
    on a GPU, minutes on a CPU), with two bodies: 1 and 3 cameras."""
    spec = SIZES[size]
    bodies = {n: body(n, spec["side"], spec["horizon"]) for n in (1, 3)}
    tok = train_tokenizer([bodies[3].prompt(), INSTRUCTION], vocab_size=512)
    side = spec["side"] // 28 * 28                  # Qwen's patch * merge grid
    torch.manual_seed(seed)
    with torch.device(device):
        backbone = Backbone.build(tok, tiny_config(tok, **spec["backbone"]), image_size=(side, side))
        cfg = VLAConfig(horizon=spec["horizon"], action_dim=ACTION_DIM, state_dim=STATE_DIM, head=dict(spec["head"]),
                        embodiments={e.name: {"id": i, "embodiment": e.to_dict()} for i, e in enumerate(bodies.values())})
        model = VLAModel(backbone, cfg)
    unit = {"action": QuantileNormalizer(-np.ones(ACTION_DIM), np.ones(ACTION_DIM)).to_dict(),
            "state": QuantileNormalizer(-np.ones(STATE_DIM), np.ones(STATE_DIM)).to_dict()}
    return model, {e.name: unit for e in bodies.values()}, bodies


def pct(ms: list[float]) -> dict:
    return {"p50": round(float(np.percentile(ms, 50)), 2), "p90": round(float(np.percentile(ms, 90)), 2)}


def decisions(policy: VLAPolicy, emb: Embodiment, repeats: int, warmup: int = 3) -> dict:
    """p50/p90 of whole decisions and of their parts (ms) on a blank observation."""
    obs = Observation(images={c.name: np.zeros((c.height, c.width, 3), np.uint8) for c in emb.cameras},
                      state=np.zeros(emb.state_dim, np.float32))
    total, prep, prefix, sampler = [], [], [], []
    for i in range(warmup + repeats):
        t0 = time.perf_counter()
        policy.predict_chunk(obs, INSTRUCTION)      # it ends on the host: the device is synced
        if i >= warmup:
            total.append((time.perf_counter() - t0) * 1e3)
            prep.append(policy.last_timing["prepare_ms"])
            prefix.append(policy.last_timing["backbone_ms"])
            sampler.append(policy.last_timing["sample_ms"])
    return {"decision_ms": pct(total), "prepare_ms": pct(prep), "prefix_ms": pct(prefix), "sampler_ms": pct(sampler)}


def decision_rows(size: str, device: str, repeats: int, dtypes=("float32", "bfloat16"),
                  cameras_of=(1, 3)) -> list[dict]:
    """Every (dtype, cameras, sampler) row of one size; float32 first, then the same weights cast once."""
    model, norms, bodies = build(size, device)
    params = round(sum(p.numel() for p in model.parameters()) / 1e6, 2)
    rows = []
    for dtype in dtypes:
        for cameras, emb in ((n, bodies[n]) for n in cameras_of):
            for mode in ("eager", "cuda_graphs"):
                row = {"size": size, "params_m": params, "cameras": cameras, "dtype": dtype, "sampler": mode,
                       "torch_device": device}
                if mode == "cuda_graphs" and not device.startswith("cuda"):
                    rows.append(row | {"skipped": "CUDA graphs run on CUDA only"})
                    continue
                try:
                    policy = VLAPolicy(model, norms, torch_device=device, dtype=dtype, graphs=mode == "cuda_graphs")
                    t0 = time.perf_counter()
                    policy.bind(emb)                    # with graphs: captured here, at load
                    row["load_warm_s"] = round(time.perf_counter() - t0, 2)
                    if policy.prefix is not None:       # did the backbone prefix replay, and how close was it
                        row["prefix_graph"] = {"captured": len(policy.prefix.captured),
                                               "rel_err": [round(e, 5) for e in policy.prefix.errors]}
                        if policy.prefix.compile:       # $EMBODIA_COMPILE_PREFIX=1: checked block by block
                            row["prefix_graph"] |= {
                                "compiled": True, "block_rel_err_max": round(max(policy.prefix.block_errors), 5),
                                "compiled_rel_err": [round(e, 5) for e in policy.prefix.compiled_errors]}
                    if policy.graphs is not None:       # the whole sampler as one graph, or its per-step fallback
                        row["sampler_graph"] = {"whole": len(policy.graphs.captured),
                                                "failed": len(policy.graphs.failed),
                                                "per_step": len(policy.graphs.per_step.captured),
                                                "compiled": policy.graphs.compile}
                    rows.append(row | decisions(policy, emb, repeats))
                    del policy
                except Exception as e:  # noqa: BLE001 - one failing row must not lose the others
                    rows.append(row | {"error": f"{type(e).__name__}: {e}"[:500]})
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)   # progress, row by row
    return rows


def train_step_ms(device: str, dtype: str, steps: int, batch: int = 64) -> dict:
    """embodia-tiny's head step (projection + DiT, context cached) at ``batch``: ms per optimizer step."""
    model, _, _ = build("tiny")
    dev = torch.device(device)
    head, proj = model.head.to(dev), model.proj.to(dev)
    params = list(head.parameters()) + list(proj.parameters())
    opt = torch.optim.AdamW(params, lr=1e-3)
    g = torch.Generator(device=dev).manual_seed(0)
    h, hidden = model.cfg.horizon, model.backbone.hidden_size
    ctx = torch.randn(batch, 40, hidden, device=dev, generator=g)
    act = torch.rand(batch, h, ACTION_DIM, device=dev, generator=g) * 2 - 1
    amask = torch.ones(batch, h, ACTION_DIM, device=dev)
    state = torch.zeros(batch, STATE_DIM, device=dev)
    smask, eid = torch.ones(batch, STATE_DIM, device=dev), torch.zeros(batch, dtype=torch.long, device=dev)
    low = dtype != "float32"
    times = []
    for i in range(steps + 5):
        t0 = time.perf_counter()
        with torch.autocast(dev.type, dtype=getattr(torch, dtype), enabled=low):
            loss = flow_loss(head, act, amask, proj(ctx), state, smask, eid, generator=g, repeats=2)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        float(loss.detach())                         # the host waits for the step, as the trainer's log does
        if i >= 5:
            times.append((time.perf_counter() - t0) * 1e3)
    return {"torch_device": device, "dtype": dtype, "batch": batch, **pct(times)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--torch-device", default=None, help="auto | cpu | cuda[:N] | mps (default: auto)")
    ap.add_argument("--sizes", default=None, help="comma-separated of tiny,smolvla,pi0 (default: all on CUDA, "
                                                  "tiny elsewhere: the big ones take minutes per decision on a CPU)")
    ap.add_argument("--repeats", type=int, default=None, help="decisions per row (default 50 on CUDA, 20 elsewhere)")
    ap.add_argument("--train-steps", type=int, default=20)
    ap.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated: the rows' dtypes")
    ap.add_argument("--cameras", default="1,3", help="comma-separated of 1,3: the rows' camera counts")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (the runtime's default in the loop)")
    ap.add_argument("--compile", action="store_true",
                    help="graph rows with the sampler's and the prefix's blocks torch.compile'd inside the graphs "
                         "($EMBODIA_COMPILE_SAMPLER=1 and $EMBODIA_COMPILE_PREFIX=1: inductor, seconds at load)")
    args = ap.parse_args()
    if args.compile:
        os.environ[COMPILE_ENV] = os.environ[PREFIX_COMPILE_ENV] = "1"
    torch.set_num_threads(args.threads)
    device = str(Placement.resolve(args.torch_device).device)
    cuda = device.startswith("cuda")
    sizes = (args.sizes or ("tiny,smolvla,pi0" if cuda else "tiny")).split(",")
    unknown = sorted(set(sizes) - set(SIZES))
    if unknown:
        ap.error(f"--sizes {','.join(unknown)}: known {', '.join(SIZES)}")
    repeats = args.repeats or (50 if cuda else 20)
    t0 = time.perf_counter()
    dtypes, cameras = args.dtypes.split(","), [int(c) for c in args.cameras.split(",")]
    if set(cameras) - {1, 3}:
        ap.error(f"--cameras {args.cameras}: expected 1 and/or 3")
    rows = [r for s in sizes for r in decision_rows(s, device, repeats, dtypes, cameras)]
    train = [train_step_ms("cpu", "float32", args.train_steps)]
    if device != "cpu":
        train += [train_step_ms(device, d, args.train_steps) for d in ("float32", "bfloat16")]
        train.append({"speedup_p50_vs_cpu": round(train[0]["p50"] / min(r["p50"] for r in train[1:]), 2)})
    print(json.dumps({"benchmark": "gpu_latency", "torch_device": device, "compile": args.compile,
                      "card": torch.cuda.get_device_name(torch.device(device)) if cuda else platform.processor()
                      or platform.machine(), "torch": torch.__version__, "threads": args.threads,
                      "steps": 10, "repeats": repeats, "decisions": rows, "train_step": train,
                      "wall_s": round(time.perf_counter() - t0, 1)}))


if __name__ == "__main__":
    main()
