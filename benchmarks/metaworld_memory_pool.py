"""Pool memory-on vs memory-off suite reports from several runs into one paired comparison; one JSON line.

    python benchmarks/metaworld_memory_pool.py --pair on30.json w20/stream1-off.json \
        --pair on40.json w20/stream2-off.json
    python benchmarks/metaworld_memory_pool.py --workdir /tmp/mt50-offsets-20 --workdir /tmp/mt50-offsets-60

A pair is one stream: an `embodia eval --json` (or `run_suite`) report with memory and one without,
on the same tasks, seeds and episodes per task (refused otherwise). ``--workdir`` takes every
stream of a `metaworld_suite.py --memory-streams` workdir that kept both arms' reports. The line holds
`suite_memory.compare` on the pool (the gain with Newcombe's paired, independent-samples and
clustered intervals, per group, tasks better and worse), plus two checks:

- the pairing: a stream's memory starts empty and each task has its own namespace, so in every task
  the on arm's episodes up to its first success ran as the off arm's did and must repeat them;
  each that does not is listed (`unpaired_before_first_success`), e.g. an off report of other code;
- seed recall: the episodes that started from a recalled noise seed, read from each on arm's memory
  folder (`meta.json`, `seeds`) where it is still there.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from embodia.agent.evaluation.suite_memory import compare
from embodia.memory.persist import seed_records
from embodia.policies.placement import parse_args


def read(path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"{path}: not a readable report ({e})")


def check_pair(on: dict, off: dict, label: str) -> list[str]:
    """Refuse reports that are not one stream; name the episodes before a task's first on-arm success
    that differ from the off arm."""
    if (on.get("seed"), on.get("episodes_per_task")) != (off.get("seed"), off.get("episodes_per_task")):
        raise ValueError(f"{label}: on ran seed {on.get('seed')} x {on.get('episodes_per_task')}, off seed "
                         f"{off.get('seed')} x {off.get('episodes_per_task')}: not one stream")
    if set(on["tasks"]) != set(off["tasks"]):
        raise ValueError(f"{label}: the reports hold other tasks ({sorted(set(on['tasks']) ^ set(off['tasks']))})")
    unpaired = []
    for task, row in on["tasks"].items():
        a, b = row["outcomes"], off["tasks"][task]["outcomes"]
        first = a.index(True) if True in a else len(a) - 1
        unpaired += [f"{label} {task} episode {i}" for i in range(first + 1) if a[i] != b[i]]
    return unpaired


def recalled(on: dict) -> int | None:
    """Episodes of this arm that started from a recalled seed (None: no memory folder to read)."""
    folder = (on.get("run") or {}).get("memory")
    if not folder or not (Path(folder) / "meta.json").is_file():
        return None
    seeds = seed_records(folder)
    return sum(n - 1 for recs in seeds.values() for _, n, _ in recs.values())   # the first of each: its own seed


def workdir_pairs(workdir) -> list[tuple[str, str]]:
    w = Path(workdir)
    found = sorted(w.glob("stream*-on.json"), key=lambda p: int(p.name[6:-8]))
    pairs = [(str(p), str(p.with_name(p.name.replace("-on.", "-off.")))) for p in found]
    kept = [(a, b) for a, b in pairs if Path(b).is_file()]
    for a, b in pairs:
        if not Path(b).is_file():
            print(f"{a}: no off report beside it, left out", file=sys.stderr)
    return kept


def pool(pairs: list[tuple[str, str]]) -> dict:
    if not pairs:
        raise ValueError("no pairs of reports to pool")
    ons, offs, unpaired, recall = [], [], [], []
    for on_path, off_path in pairs:
        on, off = read(on_path), read(off_path)
        unpaired += check_pair(on, off, f"{on_path} vs {off_path}")
        recall.append(recalled(on))
        ons.append(on)
        offs.append(off)
    out = compare(ons, offs)
    out.pop("per_task_diff", None)
    return {"benchmark": "metaworld_memory_pool", "pairs": [list(p) for p in pairs],
            "seeds": [r["seed"] for r in ons], **out,
            "unpaired_before_first_success": unpaired,
            "recalled_seed_episodes": None if None in recall else sum(recall)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", nargs=2, action="append", default=[], metavar=("ON", "OFF"),
                    help="one stream: the memory-on report and the memory-off report")
    ap.add_argument("--workdir", action="append", default=[], help="every stream of a --memory-streams workdir")
    args = parse_args(ap)      # with --torch-device / --dtype (embodia.policies.placement)
    pairs = [tuple(p) for p in args.pair] + [p for w in args.workdir for p in workdir_pairs(w)]
    try:
        print(json.dumps(pool(pairs)))
    except ValueError as e:
        ap.error(str(e))


if __name__ == "__main__":
    main()
