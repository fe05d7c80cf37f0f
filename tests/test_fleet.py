"""`--workers N`: Ray fan-out of eval and record, worker deaths, and the fleet's shared memory."""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

ray = pytest.importorskip("ray")

from embodia.agent.cli.app import app  # noqa: E402
from embodia.agent.fleet import runner as fleet_mod  # noqa: E402
from embodia.agent.fleet.memory_host import MemoryHost, MemoryProxy  # noqa: E402
from embodia.agent.fleet.runner import Fleet, WorkerSpec, ray_session  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TOKEN = Path.home() / ".ray" / "auth_token"


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray instance (2 CPUs) for the module, started the way the CLI starts it."""
    had_token = TOKEN.exists()
    with ray_session(2) as (r, where):
        assert where == "local"
        yield r
    assert not ray.is_initialized()
    assert had_token or not TOKEN.exists(), "the local instance wrote ~/.ray/auth_token"


def _kill_first_finisher(monkeypatch, killed: list):
    """When the first unit finishes, SIGKILL the worker that ran it: by then it holds its next
    unit (events are sent after idle workers get new units), so that unit dies in flight."""
    emit = Fleet._emit

    def kill_after(self, ev):
        emit(self, ev)
        if ev.kind == "done" and not killed:
            killed.append((ev.worker, self.pid(ev.worker)))
            os.kill(killed[0][1], signal.SIGKILL)
    monkeypatch.setattr(Fleet, "_emit", kill_after)


def _run(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MUJOCO_GL": "egl"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=300)


def test_plain_eval_never_imports_ray():
    out = _run("import sys\n"
               "import embodia.agent.fleet.runner\n"
               "assert 'ray' not in sys.modules, 'importing embodia.agent.fleet.runner imported ray'\n"
               "from typer.testing import CliRunner\n"
               "from embodia.agent.cli.app import app\n"
               "r = CliRunner().invoke(app, ['eval', '--policy', 'expert', '-n', '2'])\n"
               "assert r.exit_code == 0, r.output\n"
               "print('RAY_IMPORTED', 'ray' in sys.modules)\n")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "RAY_IMPORTED False" in out.stdout


def test_workers_without_ray_says_what_to_install():
    out = _run("import sys\n"
               "sys.modules['ray'] = None      # as if not installed\n"
               "from typer.testing import CliRunner\n"
               "from embodia.agent.cli.app import app\n"
               "r = CliRunner().invoke(app, ['eval', '--policy', 'expert', '-n', '2', '--workers', '2'])\n"
               "print('EXIT', r.exit_code)\n"
               "print(r.output)\n")
    assert "EXIT 2" in out.stdout, out.stdout + out.stderr[-2000:]
    assert "pip install 'embodia[ray]'" in out.stdout


def test_blocks_cover_every_seed_once():
    units = fleet_mod.blocks(episodes=23, seed=5, workers=2)
    seeds = [s for u in units for s in u.seeds]
    assert seeds == list(range(5, 28)) and len(units) >= 20
    assert [u.id for u in units] == list(range(len(units)))
    su = fleet_mod.stream_units(["off", "online"], streams=2, episodes=3, seed=1)
    assert [(u.arm, u.stream, u.seeds) for u in su[:3]] == [("off", 0, (1, 2, 3)), ("online", 0, (1, 2, 3)),
                                                           ("off", 1, (4, 5, 6))]


# -- the shared memory ------------------------------------------------------------------------------------
DIMS = dict(key_dim=4, horizon=4, action_dim=2, hist_len=2)
LOAD = dict(encoder_id="test-keys", normalizer_hash="test-norm", **DIMS)


@ray.remote
class _Writer:
    """A stand-in worker: stores `n` successful episodes through a MemoryProxy, keys marked by `sign`."""

    def __init__(self, host, client):
        self.mem = MemoryProxy(host, client)

    def write(self, n: int, sign: float) -> int:
        rng = np.random.default_rng(int(sign > 0))
        stored = 0
        for i in range(n):
            keys = sign * (1.0 + rng.random((6, 4), dtype=np.float32))     # this writer's half of key space
            actions = rng.standard_normal((6, 2)).astype(np.float32)
            stored += self.mem.add_episode("body/task", keys, actions, success=True, episode_id=i, stride=2) > 0
            self.mem.end_episode(True, namespace="body/task")
        return stored


def test_two_workers_writing_one_memory_leave_a_memory_with_both(local_ray, tmp_path):
    from embodia.memory import SuccessMemory
    path = tmp_path / "mem"
    host = ray.remote(num_cpus=0)(MemoryHost).remote(str(path), LOAD, 3)
    a, b = _Writer.remote(host, "worker-0.1"), _Writer.remote(host, "worker-1.1")
    assert ray.get([a.write.remote(10, 1.0), b.write.remote(10, -1.0)]) == [10, 10]   # concurrently
    summary = ray.get(host.close.remote())
    assert summary["stored_successes"] == {"worker-0.1": 10, "worker-1.1": 10}
    assert summary["saves"] >= 6                       # every 3 stored successes, and at the end
    mem = SuccessMemory.load(path, encoder_id="test-keys", normalizer_hash="test-norm")
    e = mem.entries("body/task")
    assert mem.stats()["body/task"]["episodes"] == 20
    assert len(set(e["episode_id"].tolist())) == 20, "each stored episode gets its own id"
    signs = np.sign(e["keys"].mean(1))
    assert (signs > 0).sum() == 30 and (signs < 0).sum() == 30   # 3 segments per episode, both writers


def test_one_workers_failure_never_credits_entries_another_worker_used(local_ray, tmp_path):
    from embodia.memory import MemoryConfig
    host = ray.remote(num_cpus=0)(MemoryHost).remote(str(tmp_path / "mem"), LOAD, 100)
    a, b = MemoryProxy(host, "a"), MemoryProxy(host, "b")
    rng = np.random.default_rng(0)
    keys, actions = np.ones((8, 4), np.float32), rng.standard_normal((8, 2)).astype(np.float32) * 0.01
    for i in range(4):
        a.add_episode("body/task", keys, actions, success=True, episode_id=i, stride=2)
    r = a.query("body/task", keys[0], np.zeros((0, 2), np.float32), t=0)
    assert not r.empty and a.guidance(r, steps=10) is not None
    assert a.config == MemoryConfig()
    a.record_use("body/task", r)                       # a's episode used these entries...
    b.end_episode(False, namespace="body/task")        # ...b's failure must not touch them
    assert int(b.entries("body/task")["n_used"].sum()) == 0
    a.end_episode(True, namespace="body/task")         # a's success credits them
    assert int(a.entries("body/task")["n_used"].sum()) == r.n_elite
    ray.get(host.close.remote())


# -- workers that die --------------------------------------------------------------------------------------
def test_lost_unit_is_listed_with_its_seeds_never_dropped(local_ray, monkeypatch):
    killed = []
    _kill_first_finisher(monkeypatch, killed)
    with Fleet(WorkerSpec("sim:twogap-push", "expert"), workers=2, retries=0) as f:
        results = f.episodes(episodes=6, seed=10, unit_size=1)
    rep = fleet_mod.fleet_summary(results, f.report(), seed=10)
    fl = rep["fleet"]
    assert len(fl["deaths"]) == 1 and fl["deaths"][0]["worker"] == killed[0][0]
    assert fl["deaths"][0]["pid"] == killed[0][1] and fl["retries"] == 0
    (lost,) = fl["lost"]
    assert lost["unit"] == fl["deaths"][0]["unit"] and len(lost["seeds"]) == 1 and lost["error"]
    ran = [row["seed"] for row in rep["per_episode"]]
    assert sorted(ran + lost["seeds"]) == list(range(10, 16))       # every seed: run or listed as lost
    assert [row["episode"] for row in rep["per_episode"]] == [s - 10 for s in ran]


@pytest.mark.slow
def test_record_with_a_killed_worker_commits_every_episode_once_in_seed_order(local_ray, monkeypatch, tmp_path):
    from embodia.agent.recording.dataset import LocalDataset
    killed = []
    _kill_first_finisher(monkeypatch, killed)
    out = tmp_path / "ds"
    res = CliRunner().invoke(app, ["record", "--out", str(out), "--policy", "expert", "-n", "5", "--seed", "3",
                                   "--workers", "2"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert killed and "died running unit" in res.output
    ds = LocalDataset(out)
    rows = ds.episodes
    assert [r["seed"] for r in rows] == [3, 4, 5, 6, 7]               # once each, in seed order
    assert all(r["success"] for r in rows)
    assert not (out / ".steplogs" / "fleet").exists()                 # shards merged or removed


@pytest.mark.slow
def test_memory_streams_survive_a_killed_worker(local_ray, monkeypatch, tmp_path):
    """eval --memory online --streams 2 --workers 2: one worker is SIGKILLed mid-run; the report has
    every stream of every arm with all its episodes, and records the death and the retry."""
    killed = []
    _kill_first_finisher(monkeypatch, killed)
    out = tmp_path / "rep.json"
    res = CliRunner().invoke(app, ["eval", "--memory", "online", "--streams", "2", "-n", "2", "--workers", "2",
                                   "--json", str(out)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    rep = json.loads(out.read_text())
    fl = rep["fleet"]
    assert killed and len(fl["deaths"]) == 1 and fl["retries"] == 1 and fl["lost"] == []
    assert fl["deaths"][0]["worker"] == killed[0][0] and "died" in fl["deaths"][0]["error"].lower()
    assert sum(fl["units_per_worker"]) == 4 == fl["units"]
    assert rep["streams_kept"] == [0, 1]
    for arm in ("off", "online"):
        assert rep["arms"][arm]["episodes"] == 4 and len(rep["arms"][arm]["per_stream"]) == 2


@pytest.mark.slow
def test_workers_give_the_serial_per_episode_outcomes(local_ray, tmp_path):
    """Same seeds, same sampling: `eval --workers 2` equals one process at one torch thread."""
    import torch

    from embodia.agent.evaluation.evaluate import evaluate
    from embodia.agent.loop.factory import make_device, make_policy
    out = tmp_path / "rep.json"
    res = CliRunner().invoke(app, ["eval", "-n", "4", "--workers", "2", "--json", str(out)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    fleet_rows = json.loads(out.read_text())["per_episode"]
    threads = torch.get_num_threads()
    dev = make_device("sim:twogap-push")
    try:
        serial = evaluate(dev, make_policy("embodia-tiny", dev, threads=1), episodes=4, seed=0)["per_episode"]
    finally:
        dev.close()
        torch.set_num_threads(threads)
    assert [(r["seed"], r["success"], r["length"]) for r in fleet_rows] == \
           [(r["seed"], r["success"], r["length"]) for r in serial]


def test_workers_steer_with_a_persistent_memory_file(local_ray, tmp_path):
    """eval --workers --memory PATH: each worker's SteeredPolicy talks to the fleet's memory through a
    MemoryProxy (its key encoder and episode numbering come from the host), twice on one file."""
    from embodia.memory import SuccessMemory
    from embodia.policies.robot.steered import KEY_ENCODER
    mem = tmp_path / "mem"
    for seed in ("0", "2"):
        res = CliRunner().invoke(app, ["eval", "-d", "sim:twogap-push", "-p", "embodia-tiny", "-n", "2", "--seed",
                                       seed, "--workers", "1", "--memory", str(mem)], catch_exceptions=False)
        assert res.exit_code == 0, res.output
    meta = json.loads((mem / "meta.json").read_text())
    assert meta["encoder_id"] == KEY_ENCODER
    stored = SuccessMemory.load(mem, encoder_id=KEY_ENCODER, normalizer_hash=meta["normalizer_hash"])
    ids = [int(i) for ns in stored.namespaces() for i in set(stored.entries(ns)["episode_id"].tolist())]
    assert ids and len(ids) == len(set(ids))          # the second run's successes numbered after the first's


def test_a_joined_cluster_gets_the_model_placement_this_process_chose(monkeypatch):
    """--ray-address: the cluster's workers were not started from this shell, so --torch-device /
    --dtype travel in the job's runtime_env (a local instance's workers inherit the environment)."""
    import embodia.agent.fleet.runner as runner
    seen = {}
    fake = type("FakeRay", (), {"is_initialized": staticmethod(lambda: False),
                                "init": staticmethod(lambda **kw: seen.update(kw)),
                                "shutdown": staticmethod(lambda: None)})
    monkeypatch.setattr(runner, "import_ray", lambda: fake)
    monkeypatch.setattr(runner, "_check_reachable", lambda address: None)
    for name in ("EMBODIA_TORCH_DEVICE", "EMBODIA_DTYPE"):
        monkeypatch.setenv(name, "")          # recorded, so the teardown restores what was there
        monkeypatch.delenv(name)
    with runner.ray_session(2, address="10.0.0.5:6379") as (_, where):
        assert where == "10.0.0.5:6379" and seen["runtime_env"] == {"env_vars": {}}
    monkeypatch.setenv("EMBODIA_TORCH_DEVICE", "cpu")     # what --torch-device cpu --dtype bfloat16 set
    monkeypatch.setenv("EMBODIA_DTYPE", "bfloat16")
    with runner.ray_session(2, address="10.0.0.5:6379"):
        assert seen["address"] == "10.0.0.5:6379"
        assert seen["runtime_env"] == {"env_vars": {"EMBODIA_TORCH_DEVICE": "cpu", "EMBODIA_DTYPE": "bfloat16"}}


def test_a_ray_address_where_a_plain_http_server_listens_fails_in_seconds(tmp_path):
    """Before: ray.init retried against an HTTP server for over 3 minutes. Now the address is asked
    to speak gRPC (HTTP/2) first, and anything else is one line naming what answered."""
    import http.server
    import threading
    import time
    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    t0 = time.monotonic()
    try:
        res = subprocess.run([sys.executable, "-m", "embodia", "eval", "--device", "sim:twogap-push", "--policy",
                              "expert", "-n", "2", "--workers", "2", "--ray-address",
                              f"127.0.0.1:{web.server_address[1]}"], env=env, cwd=str(tmp_path), capture_output=True,
                             text=True, timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail("--ray-address at an HTTP server still hangs")
    finally:
        web.shutdown()
    said = res.stdout + res.stderr
    errors = [ln for ln in said.splitlines() if "error:" in ln]      # beside the progress bar's line
    assert res.returncode == 2 and len(errors) == 1 and "Traceback" not in said, said
    assert "is not a Ray cluster" in " ".join(said.split()), said
    assert time.monotonic() - t0 < 60


@pytest.mark.slow
def test_eval_joins_a_running_ray_cluster_by_its_address(tmp_path):
    """--ray-address against a real Ray head started with `ray start` (token authentication, as Ray
    starts one now): a client without the cluster's auth mode is refused in one line that says what
    to set; with it, the cluster's workers run every episode, with the outcomes of one process."""
    import secrets
    import shutil
    import socket
    import time
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "RAY_AUTH_TOKEN": secrets.token_hex(16), "RAY_AUTH_MODE": "token"}
    temp = Path("/tmp") / f"rh-{port}"          # Ray's socket paths must stay short
    ray_cli = Path(sys.executable).with_name("ray")
    if not ray_cli.exists():
        pytest.skip("the ray command is not beside this Python (pip install 'embodia[ray]' in its environment)")
    head = subprocess.Popen([str(ray_cli), "start", "--head", "--block", "--port", str(port), "--num-cpus", "2",
                             "--include-dashboard=false", "--temp-dir", str(temp)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    embodia = [sys.executable, "-m", "embodia", "eval", "--device", "sim:twogap-push", "--policy", "expert", "-n", "4",
               "--seed", "7", "--workers", "2", "--ray-address", f"127.0.0.1:{port}"]
    try:
        for _ in range(120):                    # the head answers within seconds
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert head.poll() is None, "ray start --head exited"
                time.sleep(0.5)
        no_mode = {k: v for k, v in env.items() if k != "RAY_AUTH_MODE"}
        res = subprocess.run(embodia, env=no_mode, capture_output=True, text=True, timeout=300)
        said = " ".join((res.stdout + res.stderr).split())
        assert res.returncode == 2 and "error: cannot connect to the Ray cluster" in said, said[-2000:]
        assert "set RAY_AUTH_MODE=token" in said and "Traceback" not in said
        out = tmp_path / "rep.json"
        res = subprocess.run(embodia + ["--json", str(out)], env=env, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        head.wait(timeout=60)
        shutil.rmtree(temp, ignore_errors=True)
    rep = json.loads(out.read_text())
    assert rep["fleet"]["address"] == f"127.0.0.1:{port}" and rep["fleet"]["lost"] == []
    serial = CliRunner().invoke(app, ["eval", "--device", "sim:twogap-push", "--policy", "expert", "-n", "4", "--seed",
                                      "7", "--json", str(tmp_path / "serial.json")], catch_exceptions=False)
    assert serial.exit_code == 0
    one = json.loads((tmp_path / "serial.json").read_text())
    assert [(r["seed"], r["success"]) for r in rep["per_episode"]] == [(r["seed"], r["success"]) for r in one["per_episode"]]
