"""A suite evaluation that can stop and go on: every finished task is appended to a partial file.

A full MT50 evaluation runs for half an hour or more here. With a partial file (``embodia eval
--json F`` keeps it at ``F.partial``), each finished task's row is written as one JSON line and
synced, after the memory (with ``--memory PATH``) was saved as of that task. Run the same command
again after a stop and the finished tasks are read back instead of run again; the report is the
one an uninterrupted run writes (episode i of every task always uses seed ``seed + i``). The first
line names the run (suite, policy, episodes, seed, query, render, memory, tasks): a file of another
run is refused, not mixed in. A line cut short by a crash is ignored (that task runs again).

>>> import tempfile, pathlib
>>> f = pathlib.Path(tempfile.mkdtemp()) / "r.json.partial"
>>> run = PartialRun(f, {"suite": "mt10", "seed": 0})
>>> run.done
{}
>>> run.add("reach-v3", {"outcomes": [True]})
>>> PartialRun(f, {"suite": "mt10", "seed": 0}).done
{'reach-v3': {'outcomes': [True]}}
>>> PartialRun(f, {"suite": "mt10", "seed": 1})      # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: ... holds a stopped evaluation of another run (seed: 0 there, 1 now); delete it to start over
"""
from __future__ import annotations

import json
import os
from pathlib import Path


class PartialRun:
    """The finished tasks of one suite evaluation, in ``path`` (JSON lines); ``done``: task -> row."""

    def __init__(self, path, run: dict):
        self.path, self.run = Path(path), json.loads(json.dumps(run))     # JSON-equal form, for comparing
        self.done: dict[str, dict] = {}
        if self.path.is_file():
            self._read()
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._append({"run": self.run})

    def _read(self) -> None:
        lines = self.path.read_bytes().decode("utf-8", errors="replace").splitlines()
        try:
            head = json.loads(lines[0])["run"] if lines else None
        except (ValueError, KeyError, TypeError):
            head = None
        if not isinstance(head, dict):
            raise ValueError(f"{self.path}: not a partial suite evaluation (its first line does not name a run); "
                             "delete it to start over")
        diff = run_diff(head, self.run)
        if diff:
            raise ValueError(f"{self.path}: holds a stopped evaluation of another run ({diff}); "
                             "delete it to start over")
        for line in lines[1:]:
            try:
                rec = json.loads(line)
                self.done[str(rec["task"])] = dict(rec["row"])
            except (ValueError, KeyError, TypeError):
                continue            # a line a crash cut short: that task runs again

    def add(self, task: str, row: dict) -> None:
        """Keep one finished task (synced to disk before this returns)."""
        self._append({"task": task, "row": row})
        self.done[task] = row

    def _append(self, rec: dict) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def finish(self) -> None:
        """The whole run is reported: the partial file goes."""
        self.path.unlink(missing_ok=True)


def run_identity(*, suite: str, policy: str, episodes: int, seed: int, query: dict, render: str,
                 memory: str | None, tasks: list[str]) -> dict:
    """What makes two suite evaluations the same run, in JSON-equal form: a partial file's first line
    and a finished report's ``run`` field. The memory folder is named by its absolute path, and the
    query's values as the device URI spells them (strings)."""
    mem = str(Path(memory).expanduser().resolve()) if memory else None
    return json.loads(json.dumps({"suite": suite, "policy": policy, "episodes": episodes, "seed": seed,
                                  "query": {k: str(v) for k, v in query.items()}, "render": render,
                                  "memory": mem, "tasks": list(tasks)}))


def run_diff(there: dict, now: dict) -> str:
    """What in ``there`` (a saved run's identity) is not ``now`` ("" when it is the same run).

    >>> run_diff({"seed": 0, "query": {"max_steps": "40"}, "tasks": ["a", "b"]},
    ...          {"seed": 1, "query": {"max_steps": "30"}, "tasks": ["a"]})
    'query: max_steps=40 there, 30 now; seed: 0 there, 1 now; tasks: 2 there (b not now), 1 now'
    """
    out = []
    for k in sorted(set(there) | set(now)):
        a, b = there.get(k), now.get(k)
        if a == b:
            continue
        if k == "query" and isinstance(a, dict) and isinstance(b, dict):
            out.append("query: " + ", ".join(f"{q}={a.get(q)} there, {b.get(q)} now"
                                              for q in sorted(set(a) | set(b)) if a.get(q) != b.get(q)))
        elif k == "tasks" and isinstance(a, list) and isinstance(b, list):
            gone = ", ".join(sorted(set(a) - set(b))[:3])
            out.append(f"tasks: {len(a)} there" + (f" ({gone} not now)" if gone else "") + f", {len(b)} now")
        else:
            out.append(f"{k}: {_short(a)} there, {_short(b)} now")
    return "; ".join(out)


def _short(v) -> str:
    s = json.dumps(v)
    return s if len(s) <= 60 else s[:57] + "..."
