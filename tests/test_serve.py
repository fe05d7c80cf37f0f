"""`embodia serve` and `--policy remote:ws://...`: openpi's websocket protocol, served and spoken."""
import copy
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from embodia.agent.cli.app import app
from embodia.agent.evaluation.evaluate import evaluate
from embodia.agent.loop.episode import run_episode
from embodia.agent.loop.factory import device_namespace, make_device, make_policy
from embodia.agent.serving.server import PolicyServer
from embodia.devices import Observation
from embodia.memory import SuccessMemory
from embodia.policies.robot.steered import KEY_ENCODER, memory_for, normalizer_hash
from embodia.policies.wire import packb, unpackb
from embodia.policies.ws_policy import PolicyServerError, WebsocketPolicy

REPO = Path(__file__).resolve().parents[1]
PROMPT = "push the puck onto the goal"
runner = CliRunner()


@pytest.fixture(scope="module")
def body():
    dev = make_device("sim:twogap-push")
    yield dev
    dev.close()


@pytest.fixture(scope="module")
def tiny(body):
    return make_policy("embodia-tiny", body)


@pytest.fixture(scope="module")
def url(tiny, body):
    with PolicyServer(tiny, body.embodiment, spec="embodia-tiny").running() as u:
        yield u


@contextmanager
def raw(url, key=None):
    """A bare websocket client: (connection, the server's metadata)."""
    headers = {"Authorization": f"Api-Key {key}"} if key else None
    with connect(url, additional_headers=headers, max_size=None, open_timeout=10, close_timeout=2) as ws:
        yield ws, unpackb(ws.recv(timeout=10))


def call(ws, msg):
    ws.send(msg if isinstance(msg, (bytes, str)) else packb(msg))
    return unpackb(ws.recv(timeout=30))


def request(body, start=0, **extra):
    """A request with the observation the device starts episode ``start`` with."""
    return {**body.reset(start).features(), "prompt": PROMPT, **extra}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_remote_eval_reproduces_the_in_process_outcomes_and_lengths(tiny, body, url, tmp_path):
    out = tmp_path / "remote.json"
    res = runner.invoke(app, ["eval", "--policy", f"remote:{url}", "--device", "sim:twogap-push", "-n", "3",
                              "--json", str(out)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    remote = json.loads(out.read_text())
    local = evaluate(body, tiny, episodes=3, seed=0)
    rows = [[(e["seed"], e["success"], e["length"]) for e in rep["per_episode"]] for rep in (remote, local)]
    assert rows[0] == rows[1]
    assert remote["errors"] == 0 and len({length for _, _, length in rows[0]}) > 1
    assert remote["per_episode"][0]["info"]["policy"]["server_infer_ms"] > 0


def test_a_checkpoint_deciding_every_k_steps_is_served_and_driven_at_that_rate(tiny, body):
    every4 = copy.copy(tiny)            # the checkpoint's config.json "exec_horizon": 4
    every4.exec_horizon = 4
    with PolicyServer(every4, body.embodiment, spec="embodia-tiny").running() as u:
        with raw(u) as (_, meta):
            assert meta["exec_horizon"] == 4 and body.embodiment.exec_horizon == 1
        remote = make_policy(f"remote:{u}", body)
        calls, act = [], remote.act
        remote.act = lambda obs, instruction: calls.append(1) or act(obs, instruction)
        r = run_episode(body, remote, seed=0, max_steps=12)
        remote.close()
    assert remote.exec_horizon == 4 and r.steps > 4 and len(calls) == -(-r.steps // 4)


@pytest.mark.parametrize("case", ["not msgpack", "text frame", "not a map", "wrong state shape", "nan state",
                                  "missing image", "object dtype", "short array data", "bool seed", "bad success",
                                  "oversized"])
def test_bad_messages_get_an_error_or_a_clean_close_and_the_server_goes_on(body, url, case):
    good = request(body)
    state = good["observation.state"]
    bad, expect = {
        "not msgpack": (b"\xc1\x00\xff", "malformed message"),
        "text frame": ("hello", "binary msgpack frame"),
        "not a map": (packb([1, 2, 3]), "expected a map"),
        "wrong state shape": ({**good, "observation.state": state[:3]}, f"expected shape ({len(state)},)"),
        "nan state": ({**good, "observation.state": np.full_like(state, np.nan)}, "non-finite"),
        "missing image": ({k: v for k, v in good.items() if k != "observation.images.top"},
                          "missing 'observation.images.top'"),
        "object dtype": (packb({"observation.state": {b"__ndarray__": True, b"data": b"\0" * 8, b"dtype": "|O",
                                                      b"shape": [1]}}), "'|O' is not allowed"),
        "short array data": (packb({"observation.state": {b"__ndarray__": True, b"data": b"\0" * 3,
                                                          b"dtype": "<f4", b"shape": [10]}}), "needs 40"),
        "bool seed": ({**good, "seed": True}, "'seed': expected an int"),
        "bad success": ({"__ctrl__": "episode_end", "__success__": "yes"}, "'__success__' must be true or false"),
        "oversized": (b"\x00" * (16 * 2 ** 20 + 1), None),
    }[case]
    with raw(url) as (ws, _):
        if expect is None:
            ws.send(bad)
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=10)
            assert closed.value.rcvd.code == 1009      # message too big
        else:
            reply = call(ws, bad)
            assert expect in reply["error"] and "actions" not in reply
            assert call(ws, good)["actions"].shape == (16, 2)      # the same connection goes on
    with raw(url) as (ws, _):
        assert call(ws, good)["actions"].shape == (16, 2)


def test_every_reply_carries_server_timing_and_the_seed_makes_it_reproducible(body, url):
    with raw(url) as (ws, meta):
        assert meta["embodiment"] == "planar_pusher" and meta["action_horizon"] == 16
        assert meta["observation"]["observation.images.top"] == {"dtype": "uint8", "shape": [96, 96, 3]}
        a, b, c = (call(ws, request(body, 7, seed=s)) for s in (7, 7, 8))
    assert np.array_equal(a["actions"], b["actions"]) and not np.array_equal(a["actions"], c["actions"])
    assert a["actions"].dtype == np.float32 and a["server_timing"]["infer_ms"] > 0
    assert "prev_total_ms" in b["server_timing"] and b["server_timing"]["queue_ms"] >= 0


def test_connections_have_sessions_of_their_own_over_the_shared_model(body, url):
    first = request(body, 5, seed=5)
    rest = [request(body, 5 + t) for t in range(1, 4)]

    def episode(out, i):
        with raw(url) as (ws, _):
            out[i] = [call(ws, m)["actions"] for m in [first, *rest]]
    out = [None] * 4
    threads = [threading.Thread(target=episode, args=(out, i)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(chunks is not None for chunks in out)
    for chunks in out[1:]:      # interleaved, yet each as if alone: its own sampler, one at a time
        assert all(np.array_equal(a, b) for a, b in zip(out[0], chunks))
    assert not np.array_equal(out[0][1], out[0][2])


def test_the_api_key_is_checked_at_the_handshake_and_healthz_needs_none(tiny, body, monkeypatch):
    with PolicyServer(tiny, body.embodiment, api_key="s3cret").running() as url:
        for key in (None, "wrong"):
            with pytest.raises(InvalidStatus) as refused:
                with raw(url, key):
                    pass
            assert refused.value.response.status_code == 401
        with urllib.request.urlopen(url.replace("ws://", "http://") + "/healthz", timeout=5) as r:
            assert r.status == 200 and r.read() == b"OK\n"
        with raw(url, "s3cret") as (ws, meta):
            assert meta["server"] == "embodia"
        monkeypatch.setenv("EMBODIA_API_KEY", "wrong")
        with pytest.raises(PolicyServerError, match="HTTP 401.*EMBODIA_API_KEY, which is set"):
            WebsocketPolicy(url)
        monkeypatch.setenv("EMBODIA_API_KEY", "s3cret")
        pol = make_policy(f"remote:{url}", body)
        pol.reset(0)
        assert pol.act(body.reset(0), PROMPT).shape == (16, 2)
        pol.close()


def test_episode_end_stores_successes_in_the_saved_memory_and_not_failures(tiny, body, tmp_path, monkeypatch):
    path, emb = tmp_path / "mem", body.embodiment
    mem = memory_for(tiny)
    server = PolicyServer(tiny, emb, memory=mem, memory_path=path, memory_token="t0ken",
                          namespace=device_namespace("sim:twogap-push", emb))
    monkeypatch.setenv("EMBODIA_MEMORY_TOKEN", "t0ken")      # what --policy remote: sends

    def saved() -> int:
        return len(SuccessMemory.load(path, encoder_id=KEY_ENCODER, normalizer_hash=normalizer_hash(tiny)))

    def episode(ws, success, **steps):
        obs = body.reset(3)
        for _ in range(4):      # an openpi client: the server assumes the first exec_horizon actions ran
            chunk = call(ws, {**obs.features(), "prompt": PROMPT})["actions"]
            body.act(chunk[0])
            obs = body.observe()
        return call(ws, {"__ctrl__": "episode_end", "__success__": success, "__token__": "t0ken", **steps})

    with server.running() as url:
        with raw(url) as (ws, meta):
            assert meta["memory"] is True
            ack = episode(ws, False)
            assert ack == {"__ack__": "episode_end", "memory_entries": 0, "server_timing": ack["server_timing"]}
            assert saved() == 0
            assert call(ws, {"__ctrl__": "episode_end"})["memory_entries"] == 0      # outcome unknown
            assert episode(ws, True)["memory_entries"] == saved() > 0
            n = saved()
            steps = {"observation.state": np.zeros((3, emb.state_dim), np.float32) + np.arange(3)[:, None],
                     "action": np.zeros((3, emb.action_dim), np.float32)}
            assert episode(ws, True, **steps)["memory_entries"] == saved() > n     # what ran, as sent
        n = saved()
        remote = make_policy(f"remote:{url}", body)     # our client sends the executed steps itself
        r = run_episode(body, remote, seed=0)
        assert r.success and r.steps > 10 and saved() > n
        remote.close()


def test_openpi_client_from_pypi_speaks_to_the_server(tiny, body):
    python = os.environ.get("EMBODIA_OPENPI_PYTHON") or REPO / ".venv-openpi" / "bin" / "python"
    if not Path(python).exists():
        pytest.skip("no openpi-client interpreter: create it with `python3 -m venv .venv-openpi && "
                    ".venv-openpi/bin/pip install openpi-client typing_extensions` (or set $EMBODIA_OPENPI_PYTHON)")
    script = """
import json, sys
import numpy as np
from openpi_client.websocket_client_policy import WebsocketClientPolicy
client = WebsocketClientPolicy("127.0.0.1", int(sys.argv[1]), api_key="k3y")
meta = client.get_server_metadata()
out = client.infer({"observation.state": np.zeros(10, np.float32),
                    "observation.images.top": np.zeros((96, 96, 3), np.uint8),
                    "prompt": "push the puck onto the goal", "seed": 0})
ack = client.infer({"__ctrl__": "episode_end", "__success__": True})
print(json.dumps({"embodiment": meta["embodiment"], "actions": out["actions"].tolist(),
                  "dtype": str(out["actions"].dtype), "infer_ms": out["server_timing"]["infer_ms"],
                  "ack": ack["__ack__"]}))
"""
    with PolicyServer(tiny, body.embodiment, api_key="k3y").running() as url:
        res = subprocess.run([str(python), "-c", script, url.rsplit(":", 1)[1]], capture_output=True, text=True,
                             timeout=60)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got["embodiment"] == "planar_pusher" and got["dtype"] == "float32" and got["ack"] == "episode_end"
    assert got["infer_ms"] > 0
    local = copy.copy(tiny)
    local.reset(0)
    want = local.act(Observation(images={"top": np.zeros((96, 96, 3), np.uint8)}, state=np.zeros(10, np.float32)),
                     PROMPT)
    assert np.array(got["actions"], np.float32).shape == (16, 2)
    assert np.array_equal(np.array(got["actions"], np.float32), want)


def test_a_policy_server_url_with_user_info_is_refused_before_connecting(body):
    """ws://allowed-host@attacker:port/ would connect to the attacker, carrying $EMBODIA_API_KEY."""
    res = runner.invoke(app, ["run", "--policy", "remote:ws://10.0.0.5:8000@127.0.0.1:9/"])
    assert res.exit_code == 2 and "carries user-info" in " ".join(res.output.split())
    with pytest.raises(ValueError, match="must start with ws://"):
        WebsocketPolicy("http://127.0.0.1:9")


def test_a_missing_silent_or_vanished_server_is_a_clear_error_not_a_hang(tiny, body):
    from websockets.sync.server import serve
    port = free_port()
    res = runner.invoke(app, ["eval", "--policy", f"remote:ws://127.0.0.1:{port}", "-n", "1"])
    assert res.exit_code == 2 and "cannot reach the policy server" in " ".join(res.output.split())

    released = threading.Event()

    def mute(ws):           # sends metadata, then never answers
        ws.send(packb({"embodiment": "planar_pusher"}))
        released.wait(10)
    with serve(mute, "127.0.0.1", 0) as srv:
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        pol = WebsocketPolicy(f"ws://127.0.0.1:{srv.socket.getsockname()[1]}", timeout_s=0.5).bind(body.embodiment)
        t0 = time.monotonic()
        with pytest.raises(PolicyServerError, match="no reply within 0.5 s"):
            pol.act(body.reset(0), PROMPT)
        assert time.monotonic() - t0 < 3
        released.set()
        srv.shutdown()

    with PolicyServer(tiny, body.embodiment).running() as url:
        pol = WebsocketPolicy(url).bind(body.embodiment)
        assert pol.act(body.reset(0), PROMPT).shape == (16, 2)
    with pytest.raises(PolicyServerError, match="went away|cannot reach"):
        pol.act(body.reset(0), PROMPT)


def sigint_default():
    """In the child: SIGINT as a terminal delivers it (a shell's background job, e.g. `.ci/run &`,
    starts everything with SIGINT ignored, and Ctrl-C is what the test is about)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_serve_command_prints_its_urls_answers_healthz_and_saves_the_memory_on_ctrl_c(tmp_path):
    port, mem = free_port(), tmp_path / "mem"
    proc = subprocess.Popen([sys.executable, "-m", "embodia", "serve", "--policy", "embodia-tiny",
                             "--port", str(port), "--memory", str(mem)], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=sigint_default)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, "embodia serve did not come up"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    assert r.status == 200
                    break
            except OSError:
                time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert f"ws://127.0.0.1:{port}" in err and f"http://127.0.0.1:{port}/healthz" in err
    assert f"memory saved to {mem}" in err and (mem / "meta.json").exists()
