"""`embodia serve --success`: for clients that send no outcome, the server labels each episode
itself when it ends (episode_end without __success__, a new episode, the connection closing)."""
import json
import os
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner
from websockets.sync.client import connect

from embodia.agent.cli.app import app
from embodia.agent.loop.factory import device_namespace, make_device, make_policy
from embodia.agent.loop.success import SuccessSourceError
from embodia.agent.serving.connections import server_labeler
from embodia.agent.serving.server import PolicyServer
from embodia.memory import SuccessMemory, pending
from embodia.policies.robot.steered import KEY_ENCODER, memory_for, normalizer_hash
from embodia.policies.wire import packb, unpackb

pytest_plugins = ("fake_openai",)
REPO = Path(__file__).resolve().parents[1]
PROMPT = "push the puck onto the goal"
ALWAYS = "check:state.puck_y > -100"


@pytest.fixture(scope="module")
def body():
    dev = make_device("sim:twogap-push")
    yield dev
    dev.close()


@pytest.fixture(scope="module")
def tiny(body):
    return make_policy("embodia-tiny", body)


def served(tiny, body, path, spec, **kw):
    emb = body.embodiment
    return PolicyServer(tiny, emb, memory=memory_for(tiny), memory_path=path,
                        namespace=device_namespace("sim:twogap-push", emb), labeler=server_labeler(spec, emb, **kw))


def saved(tiny, path) -> int:
    if not (path / "meta.json").is_file():
        return 0
    return len(SuccessMemory.load(path, encoder_id=KEY_ENCODER, normalizer_hash=normalizer_hash(tiny)))


def drive(ws, body, seed, steps=3):
    """An openpi-style client: observations only, a seed on the first; no outcome is ever sent."""
    obs = body.reset(seed)
    for i in range(steps):
        reply = unpackb(_call(ws, {**obs.features(), "prompt": PROMPT, **({"seed": seed} if i == 0 else {})}))
        body.act(reply["actions"][0])
        obs = body.observe()


def _call(ws, msg):
    ws.send(packb(msg))
    return ws.recv(timeout=60)


def test_the_server_labels_episodes_the_client_never_ends(tiny, body, tmp_path):
    path = tmp_path / "mem"
    with served(tiny, body, path, ALWAYS).running() as url:
        with connect(url, max_size=None, open_timeout=10) as ws:
            meta = unpackb(ws.recv(timeout=10))
            assert meta["labels"] == "server"
            drive(ws, body, 1)
            assert saved(tiny, path) == 0            # the episode is still open
            drive(ws, body, 2)                        # a new seed: the first episode ended, labelled, stored
            n = saved(tiny, path)
            assert n > 0
            ack = unpackb(_call(ws, {"__ctrl__": "episode_end"}))     # no __success__: the server's check
            assert ack["label"]["source"] == "check" and ack["label"]["verified"] and ack["label"]["success"]
            assert ack["memory_entries"] == saved(tiny, path) > n
            n = saved(tiny, path)
            drive(ws, body, 3)
        # the connection closed mid-episode: labelled and stored on the way out
    assert saved(tiny, path) > n
    writes = [json.loads(line) for line in (path / "writes.jsonl").read_text().splitlines()]
    assert [w["client"] for w in writes] == ["--success check"] * 3 and all(w["success"] for w in writes)


def test_an_unsure_judge_keeps_the_episode_pending(tiny, body, tmp_path, fake_openai):
    path = tmp_path / "mem"
    fake_openai.script('{"success": true, "confidence": 0.5, "reason": "the puck may be on the goal"}')
    with served(tiny, body, path, "judge:openai:test", base_url=fake_openai.url, api_key_env=None).running() as url:
        with connect(url, max_size=None, open_timeout=10) as ws:
            unpackb(ws.recv(timeout=10))
            drive(ws, body, 1, steps=5)
            ack = unpackb(_call(ws, {"__ctrl__": "episode_end"}))
    assert ack["label"]["verified"] is False and ack["label"]["confidence"] == 0.5
    assert saved(tiny, path) == 0
    (rec,) = pending.pending(path)
    assert rec["kind"] == "robot" and rec["label"]["reason"] == "the puck may be on the goal"
    assert Path(rec["frame_path"]).read_bytes()[:4] == b"\x89PNG"         # the client's last camera frame
    assert len(fake_openai.chats[0].image_sizes()) == 5                    # first, 3 between, last


def test_a_client_outcome_wins_and_sources_a_server_cannot_use_are_refused(tiny, body, tmp_path):
    emb = body.embodiment
    for spec, why in (("ask", "nobody at its terminal"), ("oracle", "not a simulation here"),
                      ("check:body.puck.y > 0", "body.NAME positions are not sent")):
        with pytest.raises(SuccessSourceError, match=why):
            server_labeler(spec, emb)
    r = CliRunner().invoke(app, ["serve", "-d", "sim:twogap-push", "-p", "random", "--success", "ask"])
    assert r.exit_code == 2 and "nobody at its terminal" in " ".join(r.output.split())
    path = tmp_path / "mem"
    server = served(tiny, body, path, ALWAYS)
    server.memory_token = "t0ken"
    with server.running() as url:
        with connect(url, max_size=None, open_timeout=10) as ws:
            unpackb(ws.recv(timeout=10))
            drive(ws, body, 1)
            ack = unpackb(_call(ws, {"__ctrl__": "episode_end", "__success__": False, "__token__": "t0ken"}))
            assert "label" not in ack and ack["memory_entries"] == 0        # the client's failure, not the check
    assert saved(tiny, path) == 0 and pending.pending(path) == []


def test_openpi_client_from_pypi_gets_its_episodes_labelled(tiny, body, tmp_path):
    python = os.environ.get("EMBODIA_OPENPI_PYTHON") or REPO / ".venv-openpi" / "bin" / "python"
    if not Path(python).exists():
        pytest.skip("no openpi-client interpreter: create it with `python3 -m venv .venv-openpi && "
                    ".venv-openpi/bin/pip install openpi-client typing_extensions` (or set $EMBODIA_OPENPI_PYTHON)")
    script = """
import sys
import numpy as np
from openpi_client.websocket_client_policy import WebsocketClientPolicy
client = WebsocketClientPolicy("127.0.0.1", int(sys.argv[1]))
for seed in (0, 1):
    for t in range(3):
        obs = {"observation.state": np.full(10, 0.1 * t, np.float32),
               "observation.images.top": np.zeros((96, 96, 3), np.uint8), "prompt": "push the puck onto the goal"}
        client.infer({**obs, "seed": seed} if t == 0 else obs)
print("done")
"""
    path = tmp_path / "mem"
    with served(tiny, body, path, "check:state.puck_y >= 0.1").running() as url:
        res = subprocess.run([str(python), "-c", script, url.rsplit(":", 1)[1]], capture_output=True, text=True,
                             timeout=120)
        assert res.returncode == 0 and "done" in res.stdout, res.stderr
    # both episodes ended without an outcome (a new seed, then the closed connection) and the check
    # read the last state the client sent: 0.2 on every channel, puck_y included
    assert saved(tiny, path) > 0
    writes = [json.loads(line) for line in (path / "writes.jsonl").read_text().splitlines()]
    assert [(w["client"], w["success"]) for w in writes] == [("--success check", True)] * 2


class SlowJudge:
    """A label that takes as long as the test wants (a judge's HTTP call stands behind it)."""

    def __init__(self, inner):
        self.inner, self.release, self.asked = inner, threading.Event(), threading.Event()

    def __call__(self, *args):
        self.asked.set()
        assert self.release.wait(30), "the test never released the judge"
        return self.inner(*args)


def test_a_slow_judge_holds_up_only_the_connection_it_labels(tiny, body, tmp_path):
    path = tmp_path / "mem"
    emb = body.embodiment
    judge = SlowJudge(server_labeler(ALWAYS, emb))
    server = PolicyServer(tiny, emb, memory=memory_for(tiny), memory_path=path,
                          namespace=device_namespace("sim:twogap-push", emb), labeler=judge)
    with server.running() as url:
        with connect(url, max_size=None, open_timeout=10) as a, connect(url, max_size=None, open_timeout=10) as b:
            unpackb(a.recv(timeout=10)), unpackb(b.recv(timeout=10))
            drive(a, body, 1)
            a.send(packb({"__ctrl__": "episode_end"}))          # a's label is now being asked ...
            assert judge.asked.wait(20)
            obs = body.reset(7)
            reply = unpackb(_call(b, {**obs.features(), "prompt": PROMPT, "seed": 7}))   # ... b is served meanwhile
            assert np.asarray(reply["actions"]).shape[1] == emb.action_dim
            judge.release.set()
            ack = unpackb(a.recv(timeout=30))
    assert ack["label"]["source"] == "check" and ack["label"]["verified"] and ack["memory_entries"] > 0
