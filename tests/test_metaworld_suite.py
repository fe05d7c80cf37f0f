"""Meta-World evaluation suites: task groups, rendering only what the policy reads, the report, the CLI."""
import json
import os
import re
import shutil
import signal
from pathlib import Path

import pytest

pytest.importorskip("metaworld")

from typer.testing import CliRunner  # noqa: E402

from embodia.agent.cli.app import app  # noqa: E402
from embodia.agent.evaluation.suite import parse_suite, policy_reads, run_suite, suite_table  # noqa: E402
from embodia.devices import open_device  # noqa: E402
from embodia.sim.metaworld import GROUPS, SUITES, group_of, list_tasks, suite_tasks  # noqa: E402


def test_groups_partition_mt50_as_lerobot_counts_them():
    every = [t for tasks in GROUPS.values() for t in tasks]
    assert sorted(every) == sorted(list_tasks()) == sorted(suite_tasks("mt50"))
    assert {g: len(t) for g, t in GROUPS.items()} == {"easy": 28, "medium": 11, "hard": 6, "very_hard": 5}
    from metaworld.env_dict import MT10_V3
    assert set(SUITES["mt10"]) == set(MT10_V3)
    assert group_of("peg-insert-side-v3") == "medium"
    with pytest.raises(ValueError, match="unknown Meta-World suite"):
        suite_tasks("mt51")


def test_suite_uris_and_what_policies_read():
    assert parse_suite("sim:metaworld/very_hard?shift=heavy") == ("very_hard", {"shift": "heavy"})
    assert parse_suite("sim:metaworld/push-v3") is None and parse_suite("sim:twogap-push") is None
    assert policy_reads("expert") == {"render": "0"} and policy_reads("replay:x") == {"render": "0"}
    # the bundled checkpoint reads the corner camera at 96x96 (from its config, no weights loaded)
    assert policy_reads("embodia-tiny") == {"camera": "corner", "size": "96x96"}
    with open_device("sim:metaworld/reach-v3?render=0") as dev:
        assert dev.reset(seed=0).images == {} and "render" not in dev.capabilities


def test_run_suite_reports_tasks_groups_overall_on_paired_seeds():
    tasks = ["reach-v3", "push-v3"]
    rep = run_suite("mt50", "expert", episodes=3, seed=5, tasks=tasks)
    assert list(rep["tasks"]) == tasks and rep["protocol"]["max_steps"] == 500
    assert rep["protocol"]["device_query"]["render"] == "0"
    for t in tasks:
        row = rep["tasks"][t]
        assert row["episodes"] == 3 and len(row["outcomes"]) == 3 and row["errors"] == []
        lo, hi = row["wilson95"]
        assert lo <= row["success_rate"] <= hi
    assert set(rep["groups"]) == {"easy", "hard"} and rep["groups"]["hard"]["tasks"] == 1
    assert rep["overall"]["episodes"] == 6
    assert rep["overall"]["successes"] == sum(r["successes"] for r in rep["tasks"].values())
    # a policy that cannot do the task fails it within the (shortened) horizon: the report can say 0
    bad = run_suite("mt50", "random", episodes=2, seed=5, tasks=["push-v3"], query={"max_steps": "5"})
    assert bad["overall"]["successes"] == 0 and bad["tasks"]["push-v3"]["mean_length"] == 5
    table = suite_table(rep)
    assert "group hard (1 tasks)" in table and "overall mt50 (2 tasks)" in table


def test_cli_eval_on_a_suite_writes_the_report(tmp_path):
    out = tmp_path / "rep.json"
    res = CliRunner().invoke(app, ["eval", "--device", "sim:metaworld/very_hard?max_steps=3", "--policy",
                                   "random", "-n", "1", "--json", str(out)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    rep = json.loads(out.read_text())
    assert rep["overall"]["tasks"] == 5 and rep["overall"]["episodes"] == 5
    assert "overall very_hard" in res.output
    res = CliRunner().invoke(app, ["eval", "--device", "sim:metaworld/mt10", "--policy", "expert",
                                   "--memory", "online"])
    assert res.exit_code != 0 and "is a suite" in res.output and "sim:metaworld/" in res.output
    res = CliRunner().invoke(app, ["eval", "--device", "sim:miniwob/experts", "--policy", "expert",
                                   "--memory", "online"])     # the example names a task of that suite
    assert res.exit_code != 0 and "(e.g. sim:miniwob/" in res.output and "metaworld" not in res.output


def test_a_checkpoint_is_loaded_once_and_sees_the_camera_it_reads():
    rep = run_suite("mt10", "embodia-tiny", episodes=1, tasks=["reach-v3", "push-v3"], query={"max_steps": "8"})
    q = rep["protocol"]["device_query"]
    assert q["camera"] == "corner" and q["size"] == "96x96" and "render" not in q
    for row in rep["tasks"].values():
        assert row["errors"] == [] and row["mean_length"] <= 8
    assert rep["machine"]["torch_threads"] == 1


def test_single_task_eval_renders_nothing_for_state_only_policies():
    from embodia.agent.evaluation.suite import policy_uri
    assert policy_uri("sim:metaworld/reach-v3", "expert") == "sim:metaworld/reach-v3?render=0"
    assert policy_uri("sim:metaworld/reach-v3", "expert", record=True) == "sim:metaworld/reach-v3"
    assert policy_uri("sim:metaworld/reach-v3?render=1", "expert") == "sim:metaworld/reach-v3?render=1"
    assert policy_uri("sim:metaworld/reach-v3", "embodia-tiny") == "sim:metaworld/reach-v3"
    assert policy_uri("gui-sim:settings", "expert") == "gui-sim:settings"


def test_a_single_task_opens_as_a_lerobot_checkpoint_reads_it_unless_the_uri_says_otherwise():
    from embodia.agent.evaluation.suite import policy_uri
    pixels = "embodia-mt50-pixels"
    assert policy_uri("sim:metaworld/reach-v3", pixels) == "sim:metaworld/reach-v3?obs=lerobot"
    assert policy_uri("sim:metaworld/reach-v3?shift=dim", pixels, record=True) == \
        "sim:metaworld/reach-v3?shift=dim&obs=lerobot"
    assert policy_uri("sim:metaworld/reach-v3?obs=state", pixels) == "sim:metaworld/reach-v3?obs=state"
    assert policy_uri("sim:metaworld/mt10", pixels) == "sim:metaworld/mt10"      # a suite does it task by task
    assert policy_uri("sim:metaworld/reach-v3", "embodia-mt50") == "sim:metaworld/reach-v3"


def test_jobs_run_tasks_in_processes_with_the_serial_outcomes():
    tasks = ["reach-v3", "stick-pull-v3", "door-open-v3"]
    serial = run_suite("mt50", "expert", episodes=2, seed=3, tasks=tasks, query={"max_steps": "150"})
    par = run_suite("mt50", "expert", episodes=2, seed=3, tasks=tasks, query={"max_steps": "150"}, jobs=2)
    assert list(par["tasks"]) == tasks and par["timing"]["jobs"] == 2
    assert {t: r["outcomes"] for t, r in par["tasks"].items()} == {t: r["outcomes"] for t, r in serial["tasks"].items()}
    assert par["overall"] == serial["overall"] and par["timing"]["steps"] == serial["timing"]["steps"]


@pytest.mark.slow
def test_workers_run_tasks_on_ray_actors_with_the_serial_outcomes(tmp_path):
    tasks = ["reach-v3", "stick-pull-v3", "door-open-v3"]
    serial = run_suite("mt50", "expert", episodes=2, seed=3, tasks=tasks, query={"max_steps": "150"})
    from embodia.agent.fleet.suite_pool import ray_suite_pool
    seen = []
    ray = run_suite("mt50", "expert", episodes=2, seed=3, tasks=tasks, query={"max_steps": "150"},
                    pool=ray_suite_pool(2), on_task=lambda t, row: seen.append(t))
    assert list(ray["tasks"]) == tasks and sorted(seen) == sorted(tasks)
    assert {t: r["outcomes"] for t, r in ray["tasks"].items()} == {t: r["outcomes"] for t, r in serial["tasks"].items()}
    assert ray["timing"]["steps"] == serial["timing"]["steps"]
    with pytest.raises(ValueError, match="one process"):
        run_suite("mt50", "embodia-tiny", episodes=1, tasks=tasks[:1], memory=str(tmp_path / "m"),
                  pool=ray_suite_pool(2))
    res = CliRunner().invoke(app, ["eval", "--device", "sim:metaworld/hard?max_steps=2", "--policy", "random",
                                   "--workers", "2", "-n", "1"], catch_exceptions=False)
    assert res.exit_code in (0, 1) and "6 episodes" in res.output, res.output


def test_record_a_suite_one_dataset_per_task(tmp_path):
    from embodia.agent.recording.dataset import LocalDataset
    out = tmp_path / "demos"
    res = CliRunner().invoke(app, ["record", "--device", "sim:metaworld/mt10?max_steps=4", "--policy", "random",
                                   "-n", "1", "--seed", "1000", "--out", str(out), "--jobs", "2"],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir()) == sorted(SUITES["mt10"])
    assert res.output.count("recorded 1 episodes (0 successful) to") == 10      # a line per task, from 2 workers
    ds = LocalDataset(out / "push-v3")
    assert len(ds.episodes) == 1 and ds.episodes[0]["success"] is False and ds.episodes[0]["length"] == 4
    ep = ds.episode(0)
    assert ep["meta"]["device"].startswith("sim:metaworld/push-v3?") and ep["seed"] == 1000
    assert len(list(ds.frames(0, "corner"))) == 4          # a dataset keeps the images
    from embodia.agent.training.train import expand_data
    assert expand_data([out]) == [str(out / t) for t in sorted(SUITES["mt10"])]   # train --data <suite folder>
    res = CliRunner().invoke(app, ["record", "--device", "sim:metaworld/push-v3", "--policy", "random", "-n", "1",
                                   "--out", str(tmp_path / "one"), "--jobs", "2"])
    assert res.exit_code == 2 and "for one task use --workers" in res.output, res.output


def test_a_stopped_suite_recording_resumes_where_it_stopped(tmp_path):
    from embodia.agent.evaluation.suite import record_suite
    from embodia.agent.recording.dataset import LocalDataset
    out, two = tmp_path / "demos", ["reach-v3", "push-v3"]
    first = record_suite("mt50", "random", out, episodes=1, seed=1000, query={"max_steps": "3"}, tasks=two[:1])
    assert first["tasks"]["reach-v3"]["resumed_from"] == 0
    # the run "stopped" after one task and one episode; asked again for 2 per task, it adds only the rest
    again = record_suite("mt50", "random", out, episodes=2, seed=1000, query={"max_steps": "3"}, tasks=two)
    assert again["tasks"]["reach-v3"] == {**again["tasks"]["reach-v3"], "recorded": 2, "resumed_from": 1}
    assert [e["seed"] for e in LocalDataset(out / "reach-v3").episodes] == [1000, 1001]
    assert [e["seed"] for e in LocalDataset(out / "push-v3").episodes] == [1000, 1001]
    same = record_suite("mt50", "random", out, episodes=2, seed=1000, query={"max_steps": "3"}, tasks=two)
    assert same["recorded"] == 4 and len(LocalDataset(out / "push-v3").episodes) == 2   # nothing re-recorded


def test_one_memory_steers_the_whole_suite_task_by_task(tmp_path):
    mem = tmp_path / "mem"
    rep = run_suite("mt50", "embodia-tiny", episodes=1, tasks=["reach-v3", "button-press-v3"], memory=str(mem))
    assert rep["memory"] == str(mem) and (mem / "meta.json").is_file()
    res = CliRunner().invoke(app, ["memory", "stats", str(mem)], catch_exceptions=False)
    won = [t for t, r in rep["tasks"].items() if r["successes"]]
    assert won, rep["tasks"]                                # embodia-tiny reaches on seed 0
    for t in won:                                           # each success stored under its own task
        assert f"sawyer/metaworld/{t}:" in res.output
    with pytest.raises(ValueError, match="one process"):
        run_suite("mt10", "embodia-tiny", episodes=1, memory=str(mem), jobs=2)
    with pytest.raises(ValueError, match="steers a VLA"):
        run_suite("mt10", "expert", episodes=1, tasks=["reach-v3"], memory=str(tmp_path / "m2"))


def test_memory_on_vs_off_over_a_suite_pairs_the_seeds_and_compares(tmp_path):
    from embodia.agent.evaluation.suite_memory import compare, suite_memory_gain
    tasks, q = ["reach-v3", "button-press-v3"], {"max_steps": "40"}
    seen = []
    rep = suite_memory_gain("mt50", "embodia-tiny", episodes=2, streams=2, workdir=tmp_path / "w", tasks=tasks,
                            query=q, on_task=lambda arm, s, t, row: seen.append((arm, s, t, row["episodes"])))
    assert sorted(p.name for p in (tmp_path / "w").iterdir()) == [          # one memory per stream, and reports
        "stream0", "stream0-off.json", "stream0-on.json", "stream1", "stream1-off.json", "stream1-on.json"]
    assert seen == [(arm, s, t, 2) for s in (0, 1) for arm in ("off", "on") for t in tasks]   # progress, task by task
    assert rep["overall"]["on"]["episodes"] == rep["overall"]["off"]["episodes"] == 8
    lo, hi = rep["gain"]["newcombe95"]
    assert lo <= rep["gain"]["diff"] <= hi and set(rep["groups"]) == {"easy"}
    assert rep["per_task_diff"].keys() == set(tasks) and len(rep["per_stream_gain"]) == 2
    with pytest.raises(ValueError, match="another run"):            # the reports there are another run's
        suite_memory_gain("mt50", "embodia-tiny", episodes=1, streams=1, workdir=tmp_path / "w", tasks=tasks, query=q)
    with pytest.raises(ValueError, match="max_steps=40 there, 30 now"):           # nor another episode length
        suite_memory_gain("mt50", "embodia-tiny", episodes=2, streams=1, workdir=tmp_path / "w", tasks=tasks,
                          query={"max_steps": "30"})
    with pytest.raises(ValueError, match=r"tasks: 2 there \(button-press-v3 not now\), 1 now"):
        suite_memory_gain("mt50", "embodia-tiny", episodes=2, streams=1, workdir=tmp_path / "w", tasks=tasks[:1],
                          query=q)
    (tmp_path / "w2" / "stream0").mkdir(parents=True)
    with pytest.raises(ValueError, match="empty memory"):           # a stream never starts from an old memory
        suite_memory_gain("mt50", "embodia-tiny", episodes=1, streams=1, workdir=tmp_path / "w2", tasks=tasks, query=q)

    class Stop(Exception):
        pass

    def stop_in_the_on_arm(arm, s, t, row):
        if (arm, s, t) == ("on", 0, tasks[0]):
            raise Stop
    with pytest.raises(Stop):
        suite_memory_gain("mt50", "embodia-tiny", episodes=2, streams=2, workdir=tmp_path / "w3", tasks=tasks,
                          query=q, on_task=stop_in_the_on_arm)
    seen = []
    again = suite_memory_gain("mt50", "embodia-tiny", episodes=2, streams=2, workdir=tmp_path / "w3", tasks=tasks,
                              query=q, on_task=lambda arm, s, t, row: seen.append((arm, s, t)))
    assert seen[0] == ("on", 0, tasks[1]) and len(seen) == 1 + 2 * len(tasks)    # went on where it stopped
    assert {k: again[k] for k in ("overall", "per_task_diff", "per_stream_gain")} == \
        {k: rep[k] for k in ("overall", "per_task_diff", "per_stream_gain")}

    def fake(outcomes):       # the arithmetic on hand-made reports: memory wins 3 episodes, loses 1
        return {"episodes_per_task": 2, "overall": {"success_rate": sum(sum(o) for o in outcomes.values()) / 4},
                "tasks": {t: {"outcomes": o} for t, o in outcomes.items()}}
    on = [fake({"reach-v3": [True, True], "push-v3": [True, False]})]
    off = [fake({"reach-v3": [False, False], "push-v3": [False, True]})]
    c = compare(on, off)
    assert (c["overall"]["on_only"], c["overall"]["off_only"]) == (3, 1) and c["gain"]["diff"] == 0.5
    assert c["tasks_better"] == ["reach-v3"] and c["tasks_worse"] == [] and c["per_task_diff"]["push-v3"] == 0
    assert c["per_stream_gain"] == [0.5]
    assert set(c["gain"]) == {"diff", "newcombe95_paired", "newcombe95", "clustered95"}
    from embodia.agent.evaluation.stats import newcombe_paired
    assert c["gain"]["newcombe95_paired"] == list(newcombe_paired(0, 3, 1, 0)[1:])    # no episode won by both
    assert c["gain"]["clustered95"][0] <= 0.5 <= c["gain"]["clustered95"][1]         # one cluster per task


def test_the_bundled_memory_settings_serve_persistent_deployment_and_name_the_others(tmp_path, monkeypatch):
    from embodia.agent.evaluation.suite_memory import memory_settings_for, with_memory_settings
    from embodia.agent.loop.factory import BUNDLED
    from embodia.agent.training.mt50 import MEMORY_SETTINGS
    from embodia.policies.robot.vla import CheckpointError, read_memory_profiles, read_memory_settings
    for name in ("embodia-mt50", "embodia-mt50-pixels"):
        assert json.loads((BUNDLED[name] / "memory.json").read_text()) == MEMORY_SETTINGS
    # the defaults: seed recall without steering; replay only as a named profile
    assert read_memory_settings(BUNDLED["embodia-mt50"]) == {"recall_seed": True, "fixed_confidence": 0.0}
    assert read_memory_profiles(BUNDLED["embodia-mt50"]) == {"steering": {}, "fixed-setup": {"sigma": 0.1,
                                                                                            "replay": True}}
    assert memory_settings_for("embodia-mt50", "fixed-setup") == {"sigma": 0.1, "replay": True}
    assert memory_settings_for("embodia-mt50", ' {"sigma": 2.0}') == {"sigma": 2.0}
    with pytest.raises(ValueError, match="no memory profile 'replay' .*profiles: steering, fixed-setup"):
        memory_settings_for("embodia-mt50", "replay")
    with pytest.raises(ValueError, match="not valid JSON"):
        memory_settings_for("embodia-mt50", "{sigma: 2}")
    path = with_memory_settings("embodia-mt50", "fixed-setup", tmp_path / "policy")
    assert read_memory_settings(path) == {"sigma": 0.1, "replay": True} and read_memory_profiles(path) == {}
    # a profile is checked like the defaults, and may not hold profiles of its own
    ck = tmp_path / "ck"
    shutil.copytree(BUNDLED["embodia-mt50"], ck)
    for bad, says in (({"profiles": {"x": {"sigmaa": 1}}}, "profile 'x': unknown memory settings ['sigmaa']"),
                      ({"profiles": {"x": {"profiles": {}}}}, "profile 'x': unknown memory settings ['profiles']"),
                      ({"profiles": [1]}, "profiles must map names")):
        (ck / "memory.json").write_text(json.dumps(bad))
        with pytest.raises(CheckpointError, match=re.escape(says)):
            read_memory_settings(ck)
    # the CLI: a fresh memory starts with the settings named; the copy is kept in the user's cache
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cmd = ["run", "--device", "sim:metaworld/reach-v3", "--policy", "embodia-mt50", "-n", "1", "--max-steps", "16",
           "--no-record"]
    configs = {}
    for settings in (None, "steering", '{"sigma": 0.3}'):
        mem = tmp_path / f"mem-{len(configs)}"
        res = CliRunner().invoke(app, cmd + ["--memory", str(mem)] + (["--memory-settings", settings] if settings
                                                                       else []), catch_exceptions=False)
        assert res.exit_code == 0, res.output
        configs[settings] = json.loads((mem / "meta.json").read_text())["config"]
    assert configs[None]["recall_seed"] and configs[None]["fixed_confidence"] == 0.0
    assert not configs["steering"]["recall_seed"] and configs["steering"]["fixed_confidence"] is None
    assert configs['{"sigma": 0.3}']["sigma"] == 0.3 and not configs['{"sigma": 0.3}']["recall_seed"]
    assert len(list((tmp_path / "cache" / "embodia" / "checkpoint-copies").iterdir())) == 2
    for args, says in ((["--memory-settings", "steering"], "use it with --memory"),
                       (["--memory", str(tmp_path / "m"), "--memory-settings", "nope"], "no memory profile 'nope'")):
        res = CliRunner().invoke(app, cmd + args)
        assert res.exit_code == 2 and says in res.output, res.output


def test_exec_horizon_runs_a_cached_copy_that_decides_that_often(tmp_path, monkeypatch):
    """--exec-horizon N: eval and run load a copy of the checkpoint that decides every N actions
    (its memory.json kept); the loop then asks it for a chunk every N steps; a rate the chunk cannot
    give, or a policy that is not a checkpoint, exits 2 before any episode."""
    from embodia.agent.evaluation.suite_memory import cached_copy
    from embodia.agent.loop.episode import run_episode
    from embodia.agent.loop.factory import BUNDLED
    from embodia.policies.robot.vla import VLAPolicy, read_memory_profiles, read_memory_settings
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = cached_copy("embodia-mt50", None, 2)
    assert cached_copy("embodia-mt50", None, 2) == path and cached_copy("embodia-mt50", None, 4) != path
    # a copy under the folder's earlier name (a user's cache from before the rename) is used, not made again
    old = tmp_path / "cache" / "embodia" / "memory-settings" / Path(path).name
    old.parent.mkdir(parents=True)
    Path(path).rename(old)
    assert cached_copy("embodia-mt50", None, 2) == str(old) and not Path(path).exists()
    path = str(old)
    assert read_memory_settings(path) == read_memory_settings(BUNDLED["embodia-mt50"])
    assert read_memory_profiles(path) == read_memory_profiles(BUNDLED["embodia-mt50"])
    dev = open_device("sim:metaworld/reach-v3?max_steps=16")
    try:
        for ckpt, decisions in ((BUNDLED["embodia-mt50"], 2), (path, 8)):
            pol = VLAPolicy.from_pretrained(ckpt, threads=1).bind(dev.embodiment)
            calls = []
            act = pol.act
            pol.act = lambda obs, instruction: calls.append(1) or act(obs, instruction)
            run_episode(dev, pol, seed=0)
            assert len(calls) == decisions, (ckpt, len(calls))
    finally:
        dev.close()
    cmd = ["eval", "--device", "sim:metaworld/reach-v3?max_steps=8", "-n", "1"]
    res = CliRunner().invoke(app, cmd + ["--policy", "embodia-mt50", "--exec-horizon", "4", "--json",
                                         str(tmp_path / "r.json")], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "r.json").read_text())["exec_horizon"] == 4
    for policy, n, says in (("embodia-mt50", "17", "--exec-horizon: exec_horizon must be a whole number of actions from 1 to the chunk's 16, not 17"),
                            ("expert", "2", "not a checkpoint folder")):
        res = CliRunner().invoke(app, cmd + ["--policy", policy, "--exec-horizon", n])
        assert res.exit_code == 2 and says in " ".join(res.output.split()) and "episode 0" not in res.output, res.output


def test_a_checkpoint_copy_carries_other_memory_settings_and_steers_with_them(tmp_path):
    from embodia.agent.evaluation.suite_memory import with_memory_settings
    from embodia.policies.robot.steered import OFFSETS_ENCODER, memory_for
    from embodia.policies.robot.vla import CheckpointError, VLAPolicy
    offsets = {"key": "offsets", "sigma": 1.0}
    path = with_memory_settings("embodia-mt50", offsets, tmp_path / "policy")
    assert not (Path(path) / "train_state").exists() and {p.name for p in Path(path).iterdir()} >= {
        "config.json", "model.safetensors", "memory.json"}
    dev = open_device("sim:metaworld/reach-v3?camera=corner&size=96x96")
    try:
        pol = VLAPolicy.from_pretrained(path).bind(dev.embodiment)
    finally:
        dev.close()
    mem = memory_for(pol)
    assert mem.encoder_id == OFFSETS_ENCODER and mem.config.sigma == 1.0     # the bundle's own: state key
    assert with_memory_settings("embodia-mt50", offsets, tmp_path / "policy") == path    # the same copy again
    with pytest.raises(ValueError, match="use a fresh folder"):
        with_memory_settings("embodia-mt50", {"sigma": 0.5}, tmp_path / "policy")
    with pytest.raises(CheckpointError, match=r'^memory settings \{"sigmaa": 1.0\}: unknown memory settings'):
        with_memory_settings("embodia-mt50", {"sigmaa": 1.0}, tmp_path / "bad")
    with pytest.raises(CheckpointError, match=r"^memory settings \[1\]: expected a JSON object"):
        with_memory_settings("embodia-mt50", [1], tmp_path / "bad")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["policy"]           # nothing half-made left
    with pytest.raises(ValueError, match="not a checkpoint"):
        with_memory_settings(str(tmp_path), offsets, tmp_path / "x")


def test_the_bundled_mt50_checkpoint_solves_easy_tasks_and_stays_small():
    """embodia-mt50 (the step-2,500 checkpoint of docs/benchmarks/metaworld.md) unlocks the door and opens the window
    on held-out seeds, which embodia-tiny (never trained on them) does in 0 of 4; the bundle carries
    no training state and no folder of this machine."""
    from embodia.agent.loop.factory import BUNDLED
    path = BUNDLED["embodia-mt50"]
    files = [p for p in path.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) < 4_000_000 and not (path / "train_state").exists()
    assert "/work/" not in (path / "config.json").read_text()
    rep = run_suite("mt50", "embodia-mt50", episodes=2, seed=0, tasks=["door-unlock-v3", "window-open-v3"])
    assert rep["overall"]["successes"] >= 3, rep["overall"]
    assert all(not r["errors"] for r in rep["tasks"].values())


def test_mt50_build_writes_a_stopped_session_and_bundles_without_training_state(tmp_path, monkeypatch):
    import embodia.agent.evaluation.suite as suite_mod
    from embodia.agent.loop.factory import BUNDLED
    from embodia.agent.training import mt50

    def stopped(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(suite_mod, "record_suite", stopped)
    out = tmp_path / "ckpt" / "m"
    cmd = ["train", "mt50", "--data", str(tmp_path / "d"), "--out", str(out)]
    res = CliRunner().invoke(app, cmd)
    assert res.exit_code == 1 and "run the same command again to go on from the last save" in res.output, res.output
    row = json.loads((tmp_path / "ckpt" / "m.sessions.jsonl").read_text().splitlines()[-1])
    assert row["finished"] is False and "wall_s" in row

    # `kill` (SIGTERM) stops it the same way, and the previous handler is back afterwards
    monkeypatch.setattr(suite_mod, "record_suite", lambda *a, **k: os.kill(os.getpid(), signal.SIGTERM))
    before = signal.getsignal(signal.SIGTERM)
    res = CliRunner().invoke(app, cmd)
    assert res.exit_code == 1 and "run the same command again" in res.output, res.output
    assert len((tmp_path / "ckpt" / "m.sessions.jsonl").read_text().splitlines()) == 2
    assert signal.getsignal(signal.SIGTERM) == before

    src = tmp_path / "src"
    shutil.copytree(BUNDLED["embodia-mt50"], src)
    (src / "train_state").mkdir()
    (src / "train_state" / "optimizer.safetensors").write_bytes(b"x" * 1000)
    cfg = json.loads((src / "config.json").read_text())
    cfg["train_config"]["data"] = ["/home/someone/data/mt50/reach-v3"]
    (src / "config.json").write_text(json.dumps(cfg))
    mt50.bundle(src, tmp_path / "bundle")
    assert not (tmp_path / "bundle" / "train_state").exists()
    assert json.loads((tmp_path / "bundle" / "memory.json").read_text()) == mt50.MEMORY_SETTINGS
    assert json.loads((tmp_path / "bundle" / "config.json").read_text())["train_config"]["data"] == \
        ["data/mt50/reach-v3"]
    with pytest.raises(FileNotFoundError):
        mt50.bundle(tmp_path / "nothing", tmp_path / "b2")


def test_the_mt50_table_stands_beside_the_published_figures():
    from embodia.agent.evaluation.suite import PUBLISHED_MT50, mean_of_groups
    tasks = SUITES["mt50"]
    row = {"successes": 7, "episodes": 10, "success_rate": 0.7, "wilson95": [0.4, 0.9]}
    groups = {"easy": {**row, "tasks": 28}, "medium": {**row, "successes": 3, "success_rate": 0.3, "tasks": 11},
              "hard": {**row, "tasks": 6}, "very_hard": {**row, "tasks": 5}}
    rep = {"suite": "mt50", "tasks": {t: {"group": group_of(t), **row} for t in tasks}, "groups": groups,
           "overall": {**row, "tasks": len(tasks)}, "mean_of_groups": mean_of_groups(groups)}
    assert rep["mean_of_groups"]["rate"] == 0.6      # each group once: (0.7 + 0.3 + 0.7 + 0.7) / 4
    table = suite_table(rep, published=True)
    avg = next(line for line in table.splitlines() if line.startswith("mean of the 4 groups"))
    assert avg.split()[-4:] == ["57.3", "47.9", "31.6", "10.5"] and " 0.600 " in avg
    # the paper's Avg. is the plain mean of its four group figures (not weighted by 28/11/6/5 tasks)
    for name, v in PUBLISHED_MT50.items():
        assert abs(sum(v[g] for g in ("easy", "medium", "hard", "very_hard")) / 4 - v["avg"]) < 0.06, name
    # a subset of the suite stands alone: the paper's figures are for all 50 tasks
    part = dict(rep, tasks=dict(list(rep["tasks"].items())[:3]), overall={**row, "tasks": 3})
    assert "57.3" not in suite_table(part, published=True)


def test_the_mean_of_groups_keeps_an_honest_interval_at_zero_and_one():
    from embodia.agent.evaluation.stats import mean_of_rates, wilson
    from embodia.agent.evaluation.suite import mean_of_groups
    # a 1-episode smoke run: every group at 0 or 1 (a normal approximation gave [x, x] here)
    one = {g: {"successes": k, "episodes": 1} for g, k in (("easy", 1), ("medium", 0), ("hard", 1))}
    m = mean_of_groups(one)
    assert m["ci95"][0] < m["rate"] < m["ci95"][1] and m["ci95"][1] - m["ci95"][0] > 0.5
    zero = mean_of_groups({g: {"successes": 0, "episodes": 20} for g in ("a", "b")})
    assert zero["ci95"][0] == 0.0 and zero["ci95"][1] > 0.1
    # one group alone is its Wilson interval; with equal groups the interval narrows like sqrt(G)
    assert mean_of_rates([(7, 10)])[1:] == wilson(7, 10)
    lo1, hi1 = wilson(30, 60)
    _, lo4, hi4 = mean_of_rates([(30, 60)] * 4)
    assert abs((hi4 - lo4) - (hi1 - lo1) / 2) < 1e-9
    with pytest.raises(ValueError):
        mean_of_rates([(1, 0)])


def test_the_paired_gain_interval_uses_the_pairing_and_the_clustered_one_the_dependence():
    from embodia.agent.evaluation.stats import clustered_gain, newcombe, newcombe_paired
    # the published example (Fagerland, Lydersen & Laake, ch. 8: Cavo et al. 2012, 161 pairs)
    assert [round(x, 4) for x in newcombe_paired(59, 6, 16, 80)] == [-0.0621, -0.1186, -0.0046]
    # our MT50 streams in miniature: the arms agree on 950 of 1000 episodes, memory wins 33, loses 17;
    # ignoring the pairing the gain is not distinguishable from 0, with it it is
    d, lo, hi = newcombe(684 + 33, 1000, 684 + 17, 1000)
    dp, plo, phi = newcombe_paired(684, 33, 17, 266)
    assert abs(d - 0.016) < 1e-12 and abs(dp - 0.016) < 1e-12 and lo < 0 < plo < dp < phi < hi
    # swapping the arms mirrors the interval; no discordant pair at all: the gain is 0 inside it
    _, mlo, mhi = newcombe_paired(684, 17, 33, 266)
    assert abs(mlo + phi) < 1e-12 and abs(mhi + plo) < 1e-12
    d0, lo0, hi0 = newcombe_paired(700, 0, 0, 300)
    assert d0 == 0 and lo0 < 0 < hi0 and hi0 - lo0 < hi - lo
    assert newcombe_paired(0, 3, 0, 0)[0] == 1.0               # degenerate margins: no correlation to use
    with pytest.raises(ValueError):
        newcombe_paired(0, 0, 0, 0)
    # clusters: the same per-cluster gain everywhere is certain; scattered gains are not
    assert clustered_gain([(5, 3, 10)] * 6) == (0.2, 0.2, 0.2)
    g, clo, chi = clustered_gain([(9, 3, 10), (3, 3, 10), (5, 5, 10), (3, 3, 10), (6, 3, 10), (3, 3, 10)])
    assert g == 0.15 and clo < 0 < chi
    with pytest.raises(ValueError):
        clustered_gain([(1, 0, 1)])


def test_a_stopped_suite_evaluation_goes_on_where_it_stopped(tmp_path):
    """Each finished task is kept in the partial file; the same call after a stop runs only the rest,
    and the report is the one an uninterrupted run writes."""
    tasks, q = ["reach-v3", "button-press-v3", "drawer-close-v3", "push-v3"], {"max_steps": "60"}
    whole = run_suite("mt50", "expert", episodes=2, seed=4, tasks=tasks, query=q)
    part = tmp_path / "rep.json.partial"

    class Stop(Exception):
        pass

    def stop_after_two(task, row):
        if task == tasks[1]:
            raise Stop
    with pytest.raises(Stop):
        run_suite("mt50", "expert", episodes=2, seed=4, tasks=tasks, query=q, resume=part, on_task=stop_after_two)
    ran, resumed = [], []
    again = run_suite("mt50", "expert", episodes=2, seed=4, tasks=tasks, query=q, resume=part,
                      on_episode=lambda t, i, r: ran.append(t), on_resumed=resumed.extend)
    assert resumed == tasks[:2] and sorted(set(ran)) == sorted(tasks[2:])      # only the rest ran
    assert again["timing"]["resumed_tasks"] == 2 and list(again["tasks"]) == tasks
    for t in tasks:
        assert again["tasks"][t]["outcomes"] == whole["tasks"][t]["outcomes"], t
    assert again["overall"] == whole["overall"]
    with pytest.raises(ValueError, match="another run .*seed: 4 there, 5 now"):
        run_suite("mt50", "expert", episodes=2, seed=5, tasks=tasks, query=q, resume=part)
    with open(part, "a") as f:
        f.write('{"task": "push-v3", "row": {"outco')          # a line a crash cut short is ignored
    assert len(run_suite("mt50", "expert", episodes=2, seed=4, tasks=tasks, query=q, resume=part)["tasks"]) == 4


def test_cli_suite_eval_resumes_from_its_partial_file_and_removes_it(tmp_path):
    out = tmp_path / "rep.json"

    class Stop(Exception):
        pass

    def stop_after_two(task, row):
        if task == suite_tasks("hard")[1]:
            raise Stop
    with pytest.raises(Stop):      # what `embodia eval ... --json rep.json` leaves when stopped after two tasks
        run_suite("hard", "random", episodes=1, seed=0, query={"max_steps": "3"}, resume=f"{out}.partial",
                  on_task=stop_after_two)
    args = ["eval", "--device", "sim:metaworld/hard?max_steps=3", "--policy", "random", "-n", "1", "--json", str(out)]
    res = CliRunner().invoke(app, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "resuming: 2 of 6 tasks were finished by a stopped run" in " ".join(res.output.split())
    rep = json.loads(out.read_text())
    assert rep["overall"]["tasks"] == 6 and rep["timing"]["resumed_tasks"] == 2
    assert not (tmp_path / "rep.json.partial").exists()
    res = CliRunner().invoke(app, args[:-1] + [str(tmp_path / "b.json"), "--seed", "1"], catch_exceptions=False)
    assert res.exit_code == 0 and "resuming" not in res.output        # another report: a fresh run


def test_a_stopped_memory_run_resumes_with_the_memory_as_of_its_last_finished_task(tmp_path):
    tasks, q = ["reach-v3", "button-press-v3"], {"max_steps": "200"}
    mem, part = tmp_path / "mem", tmp_path / "r.partial"

    class Stop(Exception):
        pass

    def on_episode(task, i, r):
        if task == tasks[1]:
            raise Stop                       # killed inside the second task, after its first episode
    with pytest.raises(Stop):
        run_suite("mt50", "embodia-tiny", episodes=2, tasks=tasks, query=q, memory=str(mem), resume=part,
                  on_episode=on_episode)
    res = CliRunner().invoke(app, ["memory", "stats", str(mem)], catch_exceptions=False)
    assert "sawyer/metaworld/reach-v3:" in res.output and "button-press" not in res.output   # as of task 1
    again = run_suite("mt50", "embodia-tiny", episodes=2, tasks=tasks, query=q, memory=str(mem), resume=part)
    whole = run_suite("mt50", "embodia-tiny", episodes=2, tasks=tasks, query=q, memory=str(tmp_path / "m2"))
    assert {t: r["outcomes"] for t, r in again["tasks"].items()} == \
        {t: r["outcomes"] for t, r in whole["tasks"].items()}


def test_a_given_off_report_is_kept_in_the_workdir_so_the_comparison_can_be_redone(tmp_path, monkeypatch):
    from embodia.agent.evaluation.suite_memory import compare, suite_memory_gain
    tasks, q = ["reach-v3"], {"max_steps": "20"}
    off = run_suite("mt50", "embodia-tiny", episodes=2, seed=3, tasks=tasks, query=q)   # e.g. the evaluation
    rep = suite_memory_gain("mt50", "embodia-tiny", episodes=2, seed=3, streams=1, workdir=tmp_path / "w",
                            tasks=tasks, query=q, off_reports=[off])
    kept = json.loads((tmp_path / "w" / "stream0-off.json").read_text())
    assert kept["tasks"]["reach-v3"]["outcomes"] == off["tasks"]["reach-v3"]["outcomes"]
    on = json.loads((tmp_path / "w" / "stream0-on.json").read_text())
    assert compare([on], [kept])["gain"] == rep["gain"]                 # from the files alone
    assert on["run"]["memory"] == str((tmp_path / "w" / "stream0").resolve())
    monkeypatch.chdir(tmp_path)                     # the same workdir named another way: its reports count
    again = suite_memory_gain("mt50", "embodia-tiny", episodes=2, seed=3, streams=1, workdir="w", tasks=tasks,
                              query=q)
    assert again["gain"] == rep["gain"]
    del on["run"]                                   # a report that does not say which run wrote it
    (tmp_path / "w" / "stream0-on.json").write_text(json.dumps(on))
    with pytest.raises(ValueError, match="does not name its run"):
        suite_memory_gain("mt50", "embodia-tiny", episodes=2, seed=3, streams=1, workdir="w", tasks=tasks, query=q)
    with pytest.raises(ValueError, match="seed 3 x 2, not 4 x 2"):      # a report of other seeds is not kept
        suite_memory_gain("mt50", "embodia-tiny", episodes=2, seed=4, streams=1, workdir=tmp_path / "w2",
                          tasks=tasks, query=q, off_reports=[off])
    assert not (tmp_path / "w2" / "stream0-off.json").exists()


def test_the_bundled_pixel_checkpoint_reads_only_lerobots_view_and_solves_easy_tasks(tmp_path):
    """embodia-mt50-pixels (issue 36: trained on the corner2 image and agent_pos) is opened under
    obs=lerobot by itself, its body is the hand and gripper (4 numbers), and it presses the buttons
    from pixels on seeds no demo used; the bundle is small and names no folder of this machine."""
    from embodia.agent.loop.factory import BUNDLED
    path = BUNDLED["embodia-mt50-pixels"]
    files = [p for p in path.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) < 4_000_000 and not (path / "train_state").exists()
    assert "/work/" not in (path / "config.json").read_text()
    body = json.loads((path / "config.json").read_text())["embodiments"]["sawyer"]["embodiment"]
    assert [c["name"] for c in body["state"]] == ["hand_x", "hand_y", "hand_z", "gripper_open"]
    assert policy_reads("embodia-mt50-pixels") == {"obs": "lerobot", "camera": "corner2", "size": "96x96"}
    # one task asked for with the full 39-number state: refused before any episode, saying how to open it
    res = CliRunner().invoke(app, ["eval", "--device", "sim:metaworld/reach-v3?obs=state", "--policy",
                                   "embodia-mt50-pixels", "-n", "1"])
    assert res.exit_code != 0 and "reads the state of 'sawyer' as 4 numbers" in " ".join(res.output.split())
    assert "?obs=lerobot" in res.output and "episode 0" not in res.output and "Traceback" not in res.output
    # one task named plainly: opened in LeRobot's view, saying so, and the episode runs
    res = CliRunner().invoke(app, ["eval", "--device", "sim:metaworld/button-press-wall-v3", "--policy",
                                   "embodia-mt50-pixels", "-n", "1", "--seed", "3", "--json", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    assert "opening sim:metaworld/button-press-wall-v3?obs=lerobot" in " ".join(res.output.split())
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["successes"] == 1      # and the report names what ran, beside what was typed
    assert (report["device"], report["device_typed"]) == ("sim:metaworld/button-press-wall-v3?obs=lerobot",
                                                          "sim:metaworld/button-press-wall-v3")
    rep = run_suite("mt50", "embodia-mt50-pixels", episodes=2, seed=0,
                    tasks=["button-press-wall-v3", "door-close-v3"])
    assert rep["protocol"]["device_query"]["obs"] == "lerobot"
    assert rep["overall"]["successes"] >= 3, rep["overall"]


@pytest.mark.slow
def test_a_checkpoint_trained_under_obs_lerobot_is_evaluated_under_it(tmp_path):
    """Demos recorded with obs=lerobot train a checkpoint whose body is the hand and gripper only; a
    suite evaluation opens every task that way by itself (read from the checkpoint's config)."""
    from embodia.agent.evaluation.suite import record_suite
    from embodia.agent.training.train import TrainConfig, expand_data, train
    data, ckpt = tmp_path / "demos", tmp_path / "ckpt"
    rep = record_suite("mt50", "expert", data, episodes=2, seed=1000, only_success=True, tasks=["reach-v3"],
                       query={"obs": "lerobot", "size": "32x32", "max_steps": "80"})
    assert rep["tasks"]["reach-v3"]["successes"] == 2
    info = json.loads((data / "reach-v3" / "meta" / "info.json").read_text())
    assert info["features"]["observation.state"]["shape"] == [4]
    assert set(k for k in info["features"] if k.startswith("observation.images.")) == {"observation.images.corner2"}
    train(TrainConfig(data=expand_data([data]), out=str(ckpt), steps=3, threads=1, save_every=3))
    assert policy_reads(str(ckpt)) == {"obs": "lerobot", "camera": "corner2", "size": "32x32"}
    rep = run_suite("mt50", str(ckpt), episodes=1, seed=0, tasks=["reach-v3"], query={"max_steps": "3"})
    assert rep["protocol"]["device_query"]["obs"] == "lerobot"
    assert rep["overall"]["episodes"] == 1 and not rep["tasks"]["reach-v3"]["errors"]
