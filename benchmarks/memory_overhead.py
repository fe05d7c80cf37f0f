"""Success-memory overhead per decision: retrieval + consistency filter + mode selection + prior.

Builds one namespace of N synthetic entries per size (bimodal random-walk "episodes" in key space,
so queries meet realistic candidate sets: two modes, consistent histories, a progress window),
then times ``query`` + ``guidance`` for queries near stored states. Prints one JSON line with
p50/p95 in ms per size, the index kind (exact IndexFlatL2 below ``ivf_threshold`` = 200k, IVF
above: nlist = min(1024, 2 sqrt(N)), nprobe 32), build time, and for IVF the recall of the
exact top-k. One thread (``OMP_NUM_THREADS=1``); the 1M case takes about a minute to build.

    OMP_NUM_THREADS=1 python benchmarks/memory_overhead.py --sizes 10000,100000,1000000
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import platform
import time

import faiss
import numpy as np

from embodia.memory import MemoryConfig, SuccessMemory

SEG = 20          # segments per synthetic episode


def synth(n: int, dk: int, H: int, D: int, hl: int, rng):
    """Entries of n // SEG episodes: keys follow a random walk from one of 50 start regions, chunks
    follow one of two modes (left / right) plus noise, hist = the previous chunk's tail."""
    ne = max(1, n // SEG)
    centers = rng.standard_normal((50, dk)).astype(np.float32)              # 50 start regions
    start = (centers[rng.integers(0, 50, ne)] + 0.1 * rng.standard_normal((ne, dk)))[:, None]
    walk = np.cumsum(0.15 * rng.standard_normal((ne, SEG, dk)).astype(np.float32), axis=1)
    keys = (start + walk).reshape(-1, dk)[:n]
    mode = np.where(rng.random(ne) < 0.5, -0.6, 0.6).astype(np.float32)
    base = np.zeros((ne, SEG, H, D), np.float32)
    base[..., 0] = mode[:, None, None]
    base[..., 1:] = 0.3
    chunks = (base + 0.05 * rng.standard_normal(base.shape).astype(np.float32)).reshape(-1, H, D)[:n]
    hist = np.concatenate([np.zeros((ne, 1, hl, D), np.float32), base[:, :-1, -hl:]], axis=1)
    hist = hist.reshape(-1, hl, D)[:n]
    prog = np.tile(np.arange(SEG, dtype=np.float32) / SEG, ne)[:n]
    hist_n = np.where(prog > 0, hl, 0)
    return keys, chunks, hist, hist_n, prog


def bench(n: int, args, rng) -> dict:
    cfg = MemoryConfig(capacity=None, dedup=False)
    mem = SuccessMemory(cfg, args.key_dim, args.horizon, args.action_dim, args.hist_len,
                        encoder_id="bench", normalizer_hash="bench")
    keys, chunks, hist, hist_n, prog = synth(n, args.key_dim, args.horizon, args.action_dim,
                                             args.hist_len, rng)
    t = time.perf_counter()
    mem.add_entries("bench/ns", keys, chunks, hist=hist, hist_n=hist_n, progress=prog,
                    ep_len=np.full(n, SEG * 8), step=(prog * SEG * 8).astype(np.int32))
    build_s = time.perf_counter() - t
    qi = rng.integers(0, n, args.queries)
    qk = keys[qi] + 0.05 * rng.standard_normal((args.queries, args.key_dim)).astype(np.float32)
    for i in range(min(20, args.queries)):                       # warm-up (also calibrates sigma)
        mem.query("bench/ns", qk[i], hist=hist[qi[i]], progress=float(prog[qi[i]]))
    times, kept, elite, steer = [], [], [], 0
    for i in range(args.queries):
        t = time.perf_counter()
        r = mem.query("bench/ns", qk[i], hist=hist[qi[i]], progress=float(prog[qi[i]]))
        g = mem.guidance(r, steps=10)
        times.append((time.perf_counter() - t) * 1e3)
        kept.append(r.n_kept)
        elite.append(r.n_elite)
        steer += g is not None
    ns = mem._ns["bench/ns"]
    out = {"n": n, "index": ns.index.kind, "build_s": round(build_s, 2),
           "p50_ms": round(float(np.percentile(times, 50)), 3),
           "p95_ms": round(float(np.percentile(times, 95)), 3),
           "mean_kept": round(float(np.mean(kept)), 1), "mean_elite": round(float(np.mean(elite)), 1),
           "steer_frac": round(steer / args.queries, 3)}
    if ns.index.kind != "flat":                                 # recall of the exact top-k
        m, k = min(30, args.queries), cfg.k
        hits = 0
        for i in range(m):
            d = ((keys - qk[i]) ** 2).sum(1)
            exact = set(np.argpartition(d, k)[:k].tolist())     # ids == rows (no deletions here)
            _, ids = ns.index.search(qk[i][None], k)
            hits += len(exact & set(ids[0].tolist()))
        out["recall_at_k"] = round(hits / (m * k), 3)
    del mem
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--key-dim", type=int, default=32)
    ap.add_argument("--horizon", type=int, default=16)
    ap.add_argument("--action-dim", type=int, default=3)
    ap.add_argument("--hist-len", type=int, default=8)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    faiss.omp_set_num_threads(1)
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    results = [bench(int(s), args, rng) for s in args.sizes.split(",")]
    print(json.dumps({"benchmark": "memory_overhead", "key_dim": args.key_dim, "horizon": args.horizon,
                      "action_dim": args.action_dim, "k": MemoryConfig().k, "threads": 1,
                      "faiss": faiss.__version__, "machine": platform.machine(),
                      "cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2),
                      "results": results, "total_s": round(time.perf_counter() - t0, 1)}))


if __name__ == "__main__":
    main()
