"""benchmarks/metaworld_noise_share.py: the crossed set-up x noise design and what it reads from it."""
import json
import os

os.environ.setdefault("MUJOCO_GL", "egl")

import bench_module
import numpy as np
import pytest


def _bench():
    return bench_module.load("metaworld_noise_share")


def _cells(f, n=6):
    return {(a, b): bool(f(a, b)) for a in range(n) for b in range(n)}


def test_the_analysis_tells_the_set_up_from_the_noise_and_only_the_noise_is_recallable():
    m, rng = _bench(), np.random.default_rng(0)
    r = m.analyse({"by-setup": _cells(lambda a, b: a < 3),          # the set-up decides
                   "by-noise": _cells(lambda a, b: b < 3),          # the noise seed decides
                   "by-pair": _cells(lambda a, b: (a + b) % 2)},    # only the pair (checkerboard)
                  rng, perms=400)
    s, n, p = r["tasks"]["by-setup"], r["tasks"]["by-noise"], r["tasks"]["by-pair"]
    assert s["variance_share"]["setup"] == 1.0 and s["p_setup"] < 0.01 and s["p_noise"] == 1.0
    assert n["variance_share"]["noise"] == 1.0 and n["p_noise"] < 0.01 and n["p_setup"] == 1.0
    assert p["variance_share"]["pair"] == 1.0
    # a noise seed that worked once works on every set-up when the noise decides, never otherwise
    assert n["recall"] == 1.0 and n["null"] < 0.6 and s["recall"] == pytest.approx(s["null"], abs=0.02)
    assert n["seed_memory"]["on"] > n["seed_memory"]["off"] + 0.3
    assert s["seed_memory"]["on"] == pytest.approx(s["seed_memory"]["off"], abs=0.02)
    assert p["seed_memory"]["on"] < p["seed_memory"]["off"]     # reusing the seed on the next set-up fails
    pooled = r["pooled"]["variance_share"]           # one task of each kind: a third each, about
    assert all(0.3 < v < 0.4 for v in pooled.values()) and sum(pooled.values()) == pytest.approx(1, abs=0.002)


def test_a_crossed_run_logs_every_pair_and_resumes(tmp_path):
    pytest.importorskip("metaworld")
    m = _bench()
    out = tmp_path / "noise.jsonl"
    done = m.run("expert", ["reach-v3"], 2, 2, out)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert sorted((r["a"], r["b"]) for r in rows) == [(200, 1000), (200, 1001), (201, 1000), (201, 1001)]
    assert all(r["success"] for r in rows) and len(done["reach-v3"]) == 4
    # the scripted expert ignores its noise seed: the same set-up, the same episode
    steps = {(r["a"], r["b"]): r["steps"] for r in rows}
    assert steps[(200, 1000)] == steps[(200, 1001)] and steps[(201, 1000)] == steps[(201, 1001)]
    out.write_text(out.read_text() + '{"task": "reach-v3", "a": 2')      # a line a crash cut short
    m.run("expert", ["reach-v3"], 2, 2, out)                              # nothing left to run
    assert len(out.read_text().splitlines()) == 5
