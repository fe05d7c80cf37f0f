"""Bring your own VLA: a SmolVLA saved by LeRobot's own save_pretrained, served by the LeRobot side in
LeRobot's environment, driven and steered from embodia over the wire.

Needs LeRobot's environment (docs/lerobot.md: `.venv-lerobot`, or $EMBODIA_LEROBOT_PYTHON). Without
it these tests skip saying so, except where $EMBODIA_REQUIRE_LEROBOT is set (CI), where they fail.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from websockets.sync.client import connect

from embodia.devices import Observation, open_device
from embodia.memory import MemoryConfig
from embodia.policies.robot.lerobot import LeRobotSide, LeRobotSideError, lerobot_python, open_lerobot
from embodia.policies.robot.steered import SteeredPolicy, memory_for
from embodia.policies.wire import packb, unpackb
from embodia.policies.ws_policy import PolicyServerError, WebsocketPolicy

REPO = Path(__file__).resolve().parents[1]
DEVICE = "sim:metaworld/push-v3?obs=lerobot"
PROMPT = "push the puck to the goal"
STATE_MEAN, STATE_STD = [0.1, 0.5, 0.2, 0.4], [0.3, 0.2, 0.25, 0.5]
ACT_MEAN, ACT_STD = [0.05, -0.1, 0.0, 0.2], [0.4, 0.5, 0.6, 0.7]


def _python() -> str:
    try:
        return lerobot_python()
    except LeRobotSideError as e:
        if os.environ.get("EMBODIA_REQUIRE_LEROBOT"):
            raise
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def python() -> str:
    return _python()


@pytest.fixture(scope="module")
def smolvla(python, tmp_path_factory) -> Path:
    """A SmolVLA built from a small config and saved with LeRobot's save_pretrained, with
    normalization statistics that are not the identity (so the prior's units are tested)."""
    out = tmp_path_factory.mktemp("lerobot") / "smolvla"
    stats = {"observation.state": {"mean": STATE_MEAN, "std": STATE_STD, "min": [-1.0] * 4, "max": [1.0] * 4},
             "action": {"mean": ACT_MEAN, "std": ACT_STD, "min": [-1.0] * 4, "max": [1.0] * 4},
             "observation.images.corner2": {"mean": [[[0.5]]] * 3, "std": [[[0.25]]] * 3,
                                            "min": [[[0.0]]] * 3, "max": [[[1.0]]] * 3}}
    (out.parent / "stats.json").write_text(json.dumps(stats))
    res = subprocess.run([python, str(REPO / "policies" / "lerobot_build.py"), "smolvla", str(out), "--size", "64",
                          "--stats", str(out.parent / "stats.json")], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert res.returncode == 0, res.stderr[-3000:]
    assert {"config.json", "model.safetensors", "policy_preprocessor.json",
            "policy_postprocessor.json"} <= {p.name for p in out.iterdir()}
    return out


@pytest.fixture(scope="module")
def device():
    with open_device(DEVICE) as dev:
        yield dev


@pytest.fixture(scope="module")
def side(smolvla, device):
    s = LeRobotSide(smolvla, device.embodiment)
    yield s
    s.stop(keep_log=False)


@pytest.fixture
def remote(side, device):
    pol = WebsocketPolicy(side.url).bind(device.embodiment)
    yield pol
    pol.close()


def observation(seed: int = 0) -> Observation:
    rng = np.random.default_rng(seed)
    return Observation(images={"corner2": rng.integers(0, 256, (96, 96, 3), dtype=np.uint8)},
                       state=rng.normal(0, 0.3, 4).astype(np.float32))


def test_served_actions_equal_lerobots_own_method_for_the_same_observation_and_noise(python, smolvla, remote,
                                                                                    tmp_path):
    """No steering fields: the chunk is LeRobot's own predict_action_chunk, computed here by a script
    that loads the directory with LeRobot's API alone (fp32 on the CPU: exactly equal)."""
    obs = observation(1)
    remote.reset(seed=7)
    served = remote.act(obs, PROMPT)
    noise = remote.last_noise
    assert served.shape == (16, 4) and noise.shape == (16, 8)
    np.savez(tmp_path / "in.npz", img=obs.images["corner2"], state=obs.state, noise=noise)
    script = f"""
import numpy as np, torch
from lerobot.configs.policies import PreTrainedConfig
from lerobot.envs.utils import preprocess_observation
from lerobot.policies.factory import get_policy_class, make_pre_post_processors
d = np.load({str(tmp_path / 'in.npz')!r})
cfg = PreTrainedConfig.from_pretrained({str(smolvla)!r})
policy = get_policy_class(cfg.type).from_pretrained({str(smolvla)!r}, config=cfg).eval()
pre, post = make_pre_post_processors(cfg, pretrained_path={str(smolvla)!r})
batch = preprocess_observation({{"pixels": {{"corner2": d["img"]}}, "agent_pos": d["state"]}})
batch["task"] = [{PROMPT!r}]
with torch.inference_mode():
    out = post(policy.predict_action_chunk(pre(batch), noise=torch.from_numpy(d["noise"])[None]))
np.save({str(tmp_path / 'out.npy')!r}, out[0].numpy())
"""
    res = subprocess.run([python, "-c", script], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert res.returncode == 0, res.stderr[-3000:]
    own = np.load(tmp_path / "out.npy")
    assert np.abs(served - own).max() == 0.0


def test_the_same_seed_gives_the_same_chunk_and_another_seed_another(remote):
    obs = observation(2)
    remote.reset(seed=3)
    a = remote.act(obs, PROMPT)
    remote.reset(seed=3)
    b = remote.act(obs, PROMPT)
    remote.reset(seed=4)
    c = remote.act(obs, PROMPT)
    assert np.array_equal(a, b) and np.abs(a - c).max() > 1e-3


def test_steering_from_the_noise_end_is_the_policy_alone_and_from_the_data_end_the_prior(remote):
    obs = observation(3)
    remote.reset(seed=5)
    alone = remote.act(obs, PROMPT)
    norm = remote.body_norms()["action"]
    prior_units = np.random.default_rng(0).uniform(-0.8, 0.8, (16, 4)).astype(np.float32)
    prior = np.asarray(norm.normalize(prior_units), np.float32)
    remote.reset(seed=5)
    at_noise = remote.steer_chunk(obs, PROMPT, prior, tau0=0.0)      # embodia's tau0 = 0: LeRobot's t0 = 1
    assert np.array_equal(at_noise, alone)
    remote.reset(seed=5)
    at_data = remote.steer_chunk(obs, PROMPT, prior, tau0=1.0)       # t0 = 0: the prior itself, in the body's units
    assert np.abs(at_data - prior_units).max() < 1e-5
    remote.reset(seed=5)
    half = remote.steer_chunk(obs, PROMPT, prior, tau0=0.5)
    assert np.abs(half - alone).max() > 1e-3 and np.abs(half - prior_units).max() > 1e-3


def test_seed_recall_gives_back_a_stored_successs_chunk_in_the_same_observation(remote, device):
    """The memory stores a success with its seed; a later episode with another seed starts from the
    stored one and returns the stored success's first chunk exactly."""
    memory = memory_for(remote, MemoryConfig(recall_seed=True, max_start_time=0.0))   # recall; steering starts at noise
    steered = SteeredPolicy(remote, memory, namespace="sawyer/push-v3")
    obs = observation(4)
    steered.reset(seed=21)
    first = steered.act(obs, PROMPT)
    for a in first[:8]:
        steered.after_step(obs, a)
    steered.end_episode(True)
    assert len(memory) > 0
    steered.reset(seed=99)
    assert steered.noise_seed == 21 and steered.recalled_seed
    assert np.array_equal(steered.act(obs, PROMPT), first)
    remote.reset(seed=99)
    assert not np.array_equal(remote.act(obs, PROMPT), first)        # seed 99 alone gives another chunk


def test_the_memory_steers_a_served_policy_toward_a_stored_success(remote):
    """Stored successes from this state: the next decision is steered (tau0 > 0) and lands nearer the
    stored chunk than the policy alone."""
    memory = memory_for(remote, MemoryConfig(min_support=1, confidence_floor=0.0))
    steered = SteeredPolicy(remote, memory, namespace="sawyer/push-v3")
    obs = observation(5)
    stored = np.tile(np.array([[0.3, -0.2, 0.1, 0.5]], np.float32), (16, 1))
    for ep in range(3):
        steered.reset(seed=ep)
        steered.states, steered.actions = [obs.state] * 16, list(stored)
        steered.end_episode(True)
    steered.reset(seed=50)
    chunk = steered.act(obs, PROMPT)
    remote.reset(seed=50)
    alone = remote.act(obs, PROMPT)
    assert steered.steered == 1 and steered.info()["memory_mean_tau0"] > 0
    assert np.abs(chunk[:8] - stored[:8]).mean() < np.abs(alone[:8] - stored[:8]).mean()


def raw(url: str, msg) -> dict:
    with connect(url, open_timeout=10, max_size=2 ** 24) as ws:
        unpackb(ws.recv(timeout=30))
        ws.send(msg if isinstance(msg, (bytes, str)) else packb(msg))
        return unpackb(ws.recv(timeout=60))


@pytest.mark.parametrize("fields, said", [
    ({"noise": np.zeros((3, 8), np.float32)}, "'noise' must be float32 [16, 8]"),
    ({"noise": np.full((16, 8), np.nan, np.float32)}, "'noise' has NaN or inf"),
    ({"prior": np.zeros((16, 4), np.float32), "t0": 1.5}, "'t0' must be a number in [0, 1]"),
    ({"prior": np.zeros((16, 4), np.float32), "t0": float("nan")}, "'t0' must be a number in [0, 1]"),
    ({"prior": np.zeros((16, 4), np.float32)}, "'prior' and 't0' go together"),
    ({"prior": np.zeros((16, 3), np.float32), "t0": 0.5}, "'prior' must be float32 [16, 4]"),
    ({"prior": np.full((16, 4), np.inf, np.float32), "t0": 0.5}, "'prior' has NaN or inf"),
    ({"prior": np.zeros((16, 4), np.int64), "t0": 0.5}, "'prior' must be float32 [16, 4]"),
    ({"prior": "left", "t0": "0.5"}, "'prior' must be float32 [16, 4]"),
])
def test_malformed_steering_fields_get_one_line_errors_and_others_are_served(side, remote, fields, said):
    obs = observation(6)
    reply = raw(side.url, {**obs.features(), "prompt": PROMPT, **fields})
    assert said in reply["error"] and "\n" not in reply["error"] and "Traceback" not in reply["error"]
    remote.reset(seed=1)
    assert remote.act(obs, PROMPT).shape == (16, 4)       # another client, served as before


def test_an_oversized_frame_closes_only_that_connection(side, remote):
    from websockets.exceptions import ConnectionClosed
    with connect(side.url, open_timeout=10, max_size=2 ** 25) as ws:
        meta = unpackb(ws.recv(timeout=30))
        ws.send(b"\x00" * (meta["max_message_bytes"] + 1))
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=30)
    remote.reset(seed=1)
    assert remote.act(observation(7), PROMPT).shape == (16, 4)


def test_a_non_loopback_bind_needs_a_key_and_a_keyed_side_refuses_a_client_without_it(python, smolvla, device,
                                                                                       monkeypatch):
    server = str(REPO / "policies" / "lerobot_server.py")
    res = subprocess.run([python, server, "--policy", str(smolvla), "--host", "0.0.0.0"], capture_output=True,
                         text=True, timeout=120, env={k: v for k, v in os.environ.items() if k != "EMBODIA_API_KEY"})
    assert res.returncode == 2 and res.stderr.strip().startswith("error: --host 0.0.0.0 is not loopback")
    monkeypatch.setenv("EMBODIA_API_KEY", "short")
    res = subprocess.run([python, server, "--policy", str(smolvla)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stderr.strip() == ("error: $EMBODIA_API_KEY has 5 characters; a key needs "
                                                          "at least 16")
    monkeypatch.setenv("EMBODIA_API_KEY", "s3cret-key-for-the-test")
    s = subprocess.Popen([python, server, "--policy", str(smolvla), "--port", "0", "--exit-with-stdin"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = json.loads(s.stdout.readline())["ready"]
        monkeypatch.delenv("EMBODIA_API_KEY")
        with pytest.raises(PolicyServerError, match="HTTP 401"):
            WebsocketPolicy(url)
        monkeypatch.setenv("EMBODIA_API_KEY", "s3cret-key-for-the-test")
        assert WebsocketPolicy(url).bind(device.embodiment).act(observation(8), PROMPT).shape == (16, 4)
        side = LeRobotSide(smolvla, device.embodiment)      # embodia's own child: loopback, no key asked
        try:
            assert WebsocketPolicy(side.url, api_key_env=None).bind(device.embodiment).horizon == 16
        finally:
            side.stop(keep_log=False)
    finally:
        s.terminate()
        s.wait(30)


@pytest.mark.parametrize("what, said", [
    ("empty", "not a LeRobot policy (no config.json"),
    ("pi0", "a LeRobot 'pi0' policy; served here: smolvla"),
    ("embodia", "not a LeRobot policy config (no 'type'"),
])
def test_a_directory_that_is_not_a_served_lerobot_policy_is_refused_in_one_line(python, what, said, tmp_path):
    d = tmp_path / what
    d.mkdir()
    if what == "pi0":
        (d / "config.json").write_text(json.dumps({"type": "pi0"}))
    if what == "embodia":
        (d / "config.json").write_text(json.dumps({"horizon": 16, "embodiments": {}}))
    res = subprocess.run([sys.executable, "-m", "embodia", "run", "--device", DEVICE, "--policy", f"lerobot:{d}"],
                         capture_output=True, text=True, timeout=180, cwd=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode == 2 and said in " ".join(out.split()) and "Traceback" not in out


def test_lerobot_ws_connects_to_a_running_side_and_says_so(side, device, capsys):
    pol = open_lerobot(side.url, device.embodiment)
    try:
        assert pol.steerable and pol.horizon == 16 and pol.process is None
    finally:
        pol.close()
    assert f"connected to the LeRobot side at {side.url}" in capsys.readouterr().err


def test_the_real_openpi_client_talks_to_the_lerobot_side_without_steering_fields(side, remote):
    python = os.environ.get("EMBODIA_OPENPI_PYTHON") or REPO / ".venv-openpi" / "bin" / "python"
    if not Path(python).exists():
        pytest.skip("no openpi-client interpreter: create it with `python3 -m venv .venv-openpi && "
                    ".venv-openpi/bin/pip install openpi-client typing_extensions` (or set $EMBODIA_OPENPI_PYTHON)")
    obs = observation(9)
    script = f"""
import json, sys
import numpy as np
from openpi_client.websocket_client_policy import WebsocketClientPolicy
client = WebsocketClientPolicy("127.0.0.1", int(sys.argv[1]))
meta = client.get_server_metadata()
rng = np.random.default_rng(9)
img = rng.integers(0, 256, (96, 96, 3), dtype=np.uint8)
state = rng.normal(0, 0.3, 4).astype(np.float32)
out = client.infer({{"observation.state": state, "observation.images.corner2": img, "prompt": {PROMPT!r}, "seed": 2}})
print(json.dumps({{"server": meta["server"], "actions": out["actions"].tolist(), "dtype": str(out["actions"].dtype)}}))
"""
    res = subprocess.run([str(python), "-c", script, side.url.rsplit(":", 1)[1]], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout)
    assert got["server"] == "embodia-lerobot" and got["dtype"] == "float32"
    remote.reset(seed=2)
    assert np.array_equal(np.array(got["actions"], np.float32), remote.act(obs, PROMPT))


def embodia_run(smolvla: Path, cwd: Path, *, episodes: int, stdout) -> tuple[subprocess.Popen, int]:
    """A real `embodia run --policy lerobot:<dir>`, and the pid of the LeRobot side it started."""
    proc = subprocess.Popen([sys.executable, "-m", "embodia", "run", "--device", DEVICE, "--policy",
                             f"lerobot:{smolvla}", "--episodes", str(episodes)], cwd=cwd, text=True,
                            stdout=stdout, stderr=subprocess.PIPE)
    line = proc.stderr.readline()
    while line and "started the LeRobot side" not in line:
        line = proc.stderr.readline()
    if not line:
        proc.kill()
        pytest.fail(f"embodia run did not start the LeRobot side: {proc.stderr.read()[-2000:]}")
    return proc, int(re.search(r"pid (\d+)", line).group(1))


@pytest.mark.slow
def test_kill_9_of_the_lerobot_side_ends_the_run_in_one_line_with_the_record_kept(smolvla, tmp_path):
    """A real `embodia run --policy lerobot:<dir>`; its LeRobot side is SIGKILLed mid-episode."""
    proc, pid = embodia_run(smolvla, tmp_path, episodes=3, stdout=subprocess.PIPE)
    try:
        logs = tmp_path / "runs" / "metaworld-push-v3-obs-lerobot" / ".steplogs"
        deadline, first = time.monotonic() + 120, None

        def written() -> int:
            return sum(f.stat().st_size for f in logs.glob("*") if f.is_file() and f.name != "writer.lock")
        while first is None or written() <= first:      # the episode's header, then steps after it
            assert time.monotonic() < deadline and proc.poll() is None, "the first episode did not start"
            first = first if first is not None or not written() else written()
            time.sleep(0.1)
        os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = " ".join((out + err).split())
    assert "Traceback" not in out + err
    assert re.search(r"went away|cannot reach the policy server", text), text[-2000:]
    from embodia.agent.recording.dataset import LocalDataset
    data = LocalDataset(tmp_path / "runs" / "metaworld-push-v3-obs-lerobot")
    assert data.num_episodes >= 1


@pytest.mark.slow
def test_the_lerobot_side_exits_when_the_embodia_process_that_started_it_dies(smolvla, tmp_path):
    proc, pid = embodia_run(smolvla, tmp_path, episodes=20, stdout=subprocess.DEVNULL)
    try:
        proc.kill()
        proc.wait(30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            os.kill(pid, signal.SIGKILL)
            pytest.fail("the LeRobot side outlived the embodia process that started it")
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_lerobot_directory_opens_meta_world_the_way_its_config_reads(tmp_path):
    """No LeRobot environment needed: the suite and the persistent benchmark read the directory's
    config.json (a 4-number state: LeRobot's view; its camera at its size)."""
    from embodia.agent.evaluation.suite import policy_reads, policy_uri
    d = tmp_path / "pol"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"type": "smolvla", "input_features": {
        "observation.state": {"type": "STATE", "shape": [4]},
        "observation.images.corner2": {"type": "VISUAL", "shape": [3, 96, 80]}}}))
    assert policy_reads(f"lerobot:{d}") == {"obs": "lerobot", "camera": "corner2", "size": "80x96"}
    assert policy_uri("sim:metaworld/push-v3", f"lerobot:{d}") == "sim:metaworld/push-v3?obs=lerobot"
    assert policy_reads(f"lerobot:{tmp_path / 'missing'}") == {}


def test_the_training_recipe_counts_the_episodes_each_task_already_has(tmp_path):
    """`embodia train smolvla` records only what is missing after a stop."""
    from embodia.agent.recording import DatasetWriter
    from embodia.agent.training.smolvla import recorded
    from embodia.devices import open_device as od
    assert recorded(tmp_path / "none") == {}
    with od("sim:twogap-push") as dev:
        w = DatasetWriter(tmp_path / "d", dev.embodiment)
        for task, n in (("push left", 2), ("push right", 1)):
            for _ in range(n):
                obs = dev.reset(0)
                ep = w.begin_episode(task)
                ep.add_step(obs, np.zeros(dev.embodiment.action_dim, np.float32))
                w.end_episode(ep, success=True)
        w.close()
    assert recorded(tmp_path / "d") == {"push left": 2, "push right": 1}


OPENPI_STAND_IN = """
import sys
import numpy as np
sys.path.insert(0, {policies!r})
import openpi_server

class StandIn:
    '''openpi's Policy as far as a server sees it: infer(obs, *, noise=None) and metadata.'''
    metadata = {{"policy": "stand-in"}}

    def infer(self, obs, *, noise=None):
        assert noise is not None and noise.shape == (10, 7), noise
        s = float(np.asarray(obs["observation/state"]).sum())
        return {{"actions": (noise * 0.5 + s).astype(np.float32)}}

openpi_server.serve(StandIn(), action_horizon=10, action_dim=7, port=0, idle_s=2.0)
"""


@pytest.fixture(scope="module")
def openpi_side():
    proc = subprocess.Popen([sys.executable, "-c", OPENPI_STAND_IN.format(policies=str(REPO / "policies"))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield json.loads(proc.stdout.readline())["ready"]
    finally:
        proc.terminate()
        proc.wait(30)


def test_the_openpi_wrapper_passes_the_seeded_or_given_noise_to_infer_and_returns_it(openpi_side):
    obs = {"observation/state": np.ones(3, np.float32), "prompt": "x"}
    a = raw(openpi_side, {**obs, "seed": 5})
    b = raw(openpi_side, {**obs, "seed": 5})
    c = raw(openpi_side, {**obs, "seed": 6})
    assert np.array_equal(a["actions"], b["actions"]) and not np.array_equal(a["actions"], c["actions"])
    assert np.allclose(a["actions"], a["noise"] * 0.5 + 3.0)            # infer got the noise it returned
    given = np.full((10, 7), 0.25, np.float32)
    d = raw(openpi_side, {**obs, "noise": given})
    assert np.array_equal(d["noise"], given) and np.allclose(d["actions"], 3.125)
    meta_then_err = raw(openpi_side, {**obs, "prior": np.zeros((10, 7), np.float32), "t0": 0.5})
    assert "takes no prior or start time" in meta_then_err["error"] and "\n" not in meta_then_err["error"]
    assert "'noise' must be float32 [10, 7]" in raw(openpi_side, {**obs, "noise": np.zeros(3, np.float32)})["error"]


def test_junk_does_not_keep_a_connection_open_but_valid_requests_do(openpi_side):
    """The sides' idle rule (as embodia serve's): no valid request for idle_s (2 s here) closes it."""
    from websockets.exceptions import ConnectionClosed
    obs = {"observation/state": np.ones(3, np.float32), "prompt": "x"}
    with connect(openpi_side, open_timeout=10) as junk, connect(openpi_side, open_timeout=10) as good:
        unpackb(junk.recv(timeout=10))
        unpackb(good.recv(timeout=10))
        t0 = time.monotonic()
        with pytest.raises(ConnectionClosed):
            while time.monotonic() - t0 < 10:
                junk.send(b"junk")
                assert "error" in unpackb(junk.recv(timeout=10))
                good.send(packb({**obs, "seed": 1}))
                assert "actions" in unpackb(good.recv(timeout=10))
                time.sleep(0.3)
        assert 1.5 < time.monotonic() - t0 < 6
        good.send(packb({**obs, "seed": 1}))
        assert "actions" in unpackb(good.recv(timeout=10))      # the one that asked properly stays


def test_a_noise_only_server_is_not_offered_to_the_memory(openpi_side):
    pol = WebsocketPolicy(openpi_side)
    try:
        assert pol.metadata["steering"]["fields"] == ["noise"] and not pol.steerable
        with pytest.raises(ValueError, match="cannot be steered"):
            SteeredPolicy(pol, None, namespace="x")
    finally:
        pol.close()
