"""benchmarks/metaworld_memory_pool.py: memory-on vs memory-off reports of several runs, pooled and checked."""
import json

import bench_module
import pytest

from embodia.memory import SuccessMemory


def _report(seed, outcomes, memory=None):
    tasks = {t: {"outcomes": o, "successes": sum(o), "episodes": len(o)} for t, o in outcomes.items()}
    n = sum(len(o) for o in outcomes.values())
    rep = {"seed": seed, "episodes_per_task": 4, "tasks": tasks,
           "overall": {"success_rate": sum(sum(o) for o in outcomes.values()) / n}}
    if memory:
        rep["run"] = {"memory": str(memory)}
    return rep


def test_reports_of_several_runs_pool_into_one_paired_comparison_and_the_pairing_is_checked(tmp_path):
    m = bench_module.load("metaworld_memory_pool")
    T, F = True, False
    mem = tmp_path / "mem30"
    saved = SuccessMemory(None, 1, 1, 1, encoder_id="e", normalizer_hash="h")
    # seed 12 ran 3 episodes: its own, then recalled twice; seed 30 only its own
    for seed, success in ((12, True), (12, False), (12, True), (30, True)):
        saved.credit_seed("sawyer/reach-v3", seed, success)
    saved.save(mem)
    files = {"on30": _report(30, {"reach-v3": [F, T, T, T], "assembly-v3": [F, F, F, F]}, mem),
             "off30": _report(30, {"reach-v3": [F, T, F, T], "assembly-v3": [F, F, F, F]}),
             "on40": _report(40, {"reach-v3": [T, T, T, T], "assembly-v3": [F, T, F, F]}),
             "off40": _report(40, {"reach-v3": [T, T, F, T], "assembly-v3": [T, F, F, F]})}
    for name, rep in files.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(rep))
    p = {k: str(tmp_path / f"{k}.json") for k in files}
    r = m.pool([(p["on30"], p["off30"]), (p["on40"], p["off40"])])
    o = r["overall"]
    assert r["seeds"] == [30, 40] and o["on_only"] == 3 and o["off_only"] == 1
    assert o["gain"] == pytest.approx(2 / 16) and r["tasks_better"] == ["reach-v3"]
    assert r["groups"]["hard"]["on_only"] == 1 and r["groups"]["hard"]["off_only"] == 1
    lo, hi = o["newcombe95_paired"]
    assert lo < 2 / 16 < hi
    # stream 40's assembly: the on arm's first success is episode 1, and it and episode 0 (nothing
    # stored yet) differ from the off arm's: that pair did not run the same episodes
    assert r["unpaired_before_first_success"] == [f"{p['on40']} vs {p['off40']} assembly-v3 episode {i}"
                                                  for i in (0, 1)]
    assert r["recalled_seed_episodes"] is None        # stream 40 names no memory folder
    assert m.pool([(p["on30"], p["off30"])])["recalled_seed_episodes"] == 2
    with pytest.raises(ValueError, match="on ran seed 30 x 4, off seed 40 x 4: not one stream"):
        m.pool([(p["on30"], p["off40"])])
    # a workdir of metaworld_suite.py --memory-streams: every stream that kept both arms
    w = tmp_path / "w"
    w.mkdir()
    for s, seed in ((0, 30), (1, 40)):
        (w / f"stream{s}-on.json").write_text(json.dumps(files[f"on{seed}"]))
    (w / "stream1-off.json").write_text(json.dumps(files["off40"]))
    assert m.workdir_pairs(w) == [(str(w / "stream1-on.json"), str(w / "stream1-off.json"))]
