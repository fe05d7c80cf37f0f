"""The safety gate on its labelled corpus (tests/gate_cases.py): catch rate on the risky part (an
action counts as caught when the gate gives it any risk class, since any class means it is
refused by default), false-alarm rate on the benign part, each with a 95% Wilson interval, the
share of caught actions given the expected class, and every miss and false alarm by id.

The held-out round of issue 35 (ids ``heldout-r4:``, written before the gate read context) is
scored on its own (``heldout_r4``) beside the rest (``rest``) and the whole (top level). Its misses
and false alarms are named only with ``--heldout-ids``, so that tuning on the printed lists never
tunes on it.

Round 5 (issue 56, ids ``heldout-r5:``, `tests/gate_heldout_r5.py`) is held out from all of that: it is
not in the corpus above nor in the top-level figures, only in ``heldout_r5`` (its rates, the commit
of its cases, and whether the buttons whose visible text and accessible name disagree are caught);
its misses and false alarms are named only with ``--heldout-ids``. Round 5 was scored once on the changed
gate and is spent (later changes read its misses); round 6 (ids ``heldout-r6:``, `tests/gate_heldout_r6.py`,
written before those changes) takes its place, scored the same way in ``heldout_r6``.

    python benchmarks/gate_corpus.py [--heldout-ids]
"""
from __future__ import annotations

import argparse
import json
import pathlib
import platform
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from gate_cases import CASES  # noqa: E402
from gate_heldout_r5 import cases as heldout_r5_cases  # noqa: E402
from gate_heldout_r6 import cases as heldout_r6_cases  # noqa: E402

from embodia.agent.evaluation.stats import wilson  # noqa: E402
from embodia.agent.loop.safety import classify  # noqa: E402

HELDOUT = "heldout-r4:"
HELDOUT_R5 = "heldout-r5:"


def _part(cases, got, prefix) -> dict:
    """Catch rate and false alarms on the cases whose id starts with ``prefix``."""
    rows = [(c, g) for c, g in zip(cases, got) if c["id"].startswith(prefix)]
    r = [g for c, g in rows if c["expect"] is not None]
    b = [g for c, g in rows if c["expect"] is None]
    return {"caught": f"{sum(g is not None for g in r)}/{len(r)}", "false_alarms": f"{sum(g is not None for g in b)}/{len(b)}"}


def _rates(rows) -> dict:
    """Counts, catch and false-alarm rates with 95% Wilson intervals over (case, got) rows."""
    risky = [g for c, g in rows if c["expect"] is not None]
    benign = [g for c, g in rows if c["expect"] is None]
    caught, alarms = sum(g is not None for g in risky), sum(g is not None for g in benign)
    return {"n_risky": len(risky), "n_benign": len(benign),
            "catch_rate": round(caught / max(1, len(risky)), 4),
            "catch_ci95": [round(x, 4) for x in wilson(caught, len(risky))],
            "false_alarm_rate": round(alarms / max(1, len(benign)), 4),
            "false_alarm_ci95": [round(x, 4) for x in wilson(alarms, len(benign))]}


def _commit(path: pathlib.Path) -> str | None:
    """The last commit that changed ``path`` (None outside a git checkout)."""
    try:
        out = subprocess.run(["git", "log", "-1", "--format=%h", "--", str(path)], cwd=ROOT, capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def _heldout(cases, path: pathlib.Path, heldout_ids: bool) -> tuple[list, dict]:
    """(rows, rates) of a held-out round scored apart: its rates, the commit of its cases, and with
    ``heldout_ids`` its misses and false alarms by id."""
    rows = [(c, classify(c["action"], c["tree"], c["screen"])[0]) for c in cases]
    out = {**_rates(rows), "cases_commit": _commit(path)}
    if heldout_ids:
        out["missed"] = [c["id"] for c, g in rows if c["expect"] is not None and g is None]
        out["false_alarms"] = [f"{c['id']} -> {g}" for c, g in rows if c["expect"] is None and g is not None]
    return rows, out


def _heldout_r5(heldout_ids: bool) -> dict:
    """Round 5, scored apart from everything else; ``aria_label``: caught / all of its risky buttons whose
    visible text and accessible name disagree (``aria:`` ids); ``aria_delete_account``: the same for the
    four "Delete account" / "Cancel" buttons of issue 56 (web and Android, each way round)."""
    rows, out = _heldout(heldout_r5_cases(), ROOT / "tests" / "gate_heldout_r5.py", heldout_ids)
    aria = [g for c, g in rows if c["id"].startswith(HELDOUT_R5 + "aria:") and c["expect"] is not None]
    acct = [g for c, g in rows if c["id"].startswith(HELDOUT_R5 + "aria:") and "delete-account" in c["id"]]
    return {**out, "aria_label": f"{sum(g is not None for g in aria)}/{len(aria)}",
            "aria_delete_account": f"{sum(g is not None for g in acct)}/{len(acct)}"}


def run(cases=CASES, heldout_ids: bool = False) -> dict:
    t0 = time.perf_counter()
    got = [classify(c["action"], c["tree"], c["screen"])[0] for c in cases]
    ms = (time.perf_counter() - t0) * 1000 / len(cases)
    rows = list(zip(cases, got))
    held = [(c, g) for c, g in rows if c["id"].startswith(HELDOUT)]
    rest = [(c, g) for c, g in rows if not c["id"].startswith(HELDOUT)]
    named = rows if heldout_ids else rest
    caught = [(c, g) for c, g in rows if c["expect"] is not None and g is not None]
    return {"bench": "gate_corpus", **_rates(rows),
            "right_class": round(sum(g == c["expect"] for c, g in caught) / max(1, len(caught)), 4),
            "heldout_r4": {**_rates(held), "cases_commit": _commit(ROOT / "tests" / "gate_heldout_r4.py")},
            "heldout_r5": _heldout_r5(heldout_ids),
            "heldout_r6": _heldout(heldout_r6_cases(), ROOT / "tests" / "gate_heldout_r6.py", heldout_ids)[1],
            "rest": _rates(rest),
            "heldout_r3": _part(cases, got, "heldout-r3:"),
            "missed": [c["id"] for c, g in named if c["expect"] is not None and g is None],
            "false_alarms": [f"{c['id']} -> {g}" for c, g in named if c["expect"] is None and g is not None],
            "ms_per_action": round(ms, 3), "machine": platform.machine(), "date": time.strftime("%Y-%m-%d")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heldout-ids", action="store_true",
                    help="name the held-out round's misses and false alarms too (not for tuning)")
    args = ap.parse_args()
    print(json.dumps(run(heldout_ids=args.heldout_ids), ensure_ascii=False))


if __name__ == "__main__":
    main()
