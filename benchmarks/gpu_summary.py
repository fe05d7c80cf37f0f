"""The rows of `gpu_latency.py` reports, one line each (what `gpu_checks.sh` prints from a GPU run).

    python benchmarks/gpu_summary.py gpu-out/gpu_latency_cuda.json gpu-out/gpu_latency_cpu.json
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def summary(rep: dict) -> list[str]:
    lines = [f"{rep['card']} wall {rep['wall_s']} s"]
    for r in rep["decisions"]:
        head = f"{r['size']:8s} {r['cameras']}cam {r['dtype']:8s} {r['sampler']:11s}"
        if "decision_ms" not in r:
            lines.append(f"{head} {r.get('error') or r.get('skipped')}")
            continue
        lines.append(f"{head} decision {r['decision_ms']} prep {r['prepare_ms']['p50']} prefix {r['prefix_ms']['p50']} "
                     f"sampler {r['sampler_ms']['p50']} {r.get('prefix_graph', '')} {r.get('sampler_graph', '')}")
    lines.append(f"train {rep['train_step']}")
    return lines


def main(paths: list[str]) -> None:
    for path in paths:
        try:
            rep = json.loads(Path(path).read_text())
        except (OSError, ValueError) as e:
            print(f"{path}: unreadable ({e})")
            continue
        print(path)
        print("\n".join(summary(rep)))


if __name__ == "__main__":
    main(sys.argv[1:])
