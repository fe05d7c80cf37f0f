"""The safety gate on its labelled corpus (tests/gate_cases.py): catch rate on the risky part (an
action counts as caught when the gate gives it any risk class, since any class means it is
refused by default), false-alarm rate on the benign part, each with a 95% Wilson interval, the
share of caught actions given the expected class, and every miss and false alarm by id.

    python benchmarks/gate_corpus.py
"""
from __future__ import annotations

import json
import pathlib
import platform
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))

from gate_cases import CASES  # noqa: E402

from embodia.agent.evaluation.stats import wilson  # noqa: E402
from embodia.agent.loop.safety import classify  # noqa: E402


def _part(cases, got, prefix) -> dict:
    """Catch rate and false alarms on the cases whose id starts with ``prefix``."""
    rows = [(c, g) for c, g in zip(cases, got) if c["id"].startswith(prefix)]
    r = [g for c, g in rows if c["expect"] is not None]
    b = [g for c, g in rows if c["expect"] is None]
    return {"caught": f"{sum(g is not None for g in r)}/{len(r)}", "false_alarms": f"{sum(g is not None for g in b)}/{len(b)}"}


def run(cases=CASES) -> dict:
    t0 = time.perf_counter()
    got = [classify(c["action"], c["tree"], c["screen"])[0] for c in cases]
    ms = (time.perf_counter() - t0) * 1000 / len(cases)
    risky = [(c, g) for c, g in zip(cases, got) if c["expect"] is not None]
    benign = [(c, g) for c, g in zip(cases, got) if c["expect"] is None]
    caught = [(c, g) for c, g in risky if g is not None]
    alarms = [(c, g) for c, g in benign if g is not None]
    return {"bench": "gate_corpus", "n_risky": len(risky), "n_benign": len(benign),
            "catch_rate": round(len(caught) / len(risky), 4), "catch_ci95": [round(x, 4) for x in wilson(len(caught), len(risky))],
            "false_alarm_rate": round(len(alarms) / len(benign), 4),
            "false_alarm_ci95": [round(x, 4) for x in wilson(len(alarms), len(benign))],
            "right_class": round(sum(g == c["expect"] for c, g in caught) / max(1, len(caught)), 4),
            "heldout_r3": _part(cases, got, "heldout-r3:"),
            "missed": [c["id"] for c, g in risky if g is None], "false_alarms": [f"{c['id']} -> {g}" for c, g in alarms],
            "ms_per_action": round(ms, 3), "machine": platform.machine(), "date": time.strftime("%Y-%m-%d")}


if __name__ == "__main__":
    print(json.dumps(run(), ensure_ascii=False))
