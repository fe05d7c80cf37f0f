"""`embodia serve` under hostile clients: a well-formed client's request latency alone and while
other connections send what an attacker would (1 MB prompts, a 50 MB frame, wrong shapes and
dtypes, NaN and 1e300 states, fabricated episode_end outcomes with made-up steps, and a flood of
valid requests with the longest allowed prompt from several connections at once).

Prints one JSON line: p50/p99/max of the good client's round trip alone and under load, how many
hostile messages got an error / a closed connection / anything else (must be 0), and the memory's
size before and after (fabricated outcomes must not change it). Server and clients share this
machine (the tiny policy, one torch thread).

    OMP_NUM_THREADS=1 python benchmarks/serve_hostile.py --requests 300 --flooders 4
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import platform
import tempfile
import threading
import time
import warnings

import numpy as np
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from embodia.agent.evaluation.memory_eval import device_namespace
from embodia.agent.loop.factory import make_device, make_policy
from embodia.agent.serving.server import Limits, PolicyServer
from embodia.policies.robot.steered import memory_for
from embodia.policies.ws_policy import packb, unpackb

PROMPT = "push the puck onto the goal"


# bare connections, closed by hand (not in a with block): websockets asks for a with block
warnings.filterwarnings("ignore", message=r"connect\(\) must be used", category=DeprecationWarning)


def _connect(url):
    ws = connect(url, max_size=None, open_timeout=10, close_timeout=2)
    unpackb(ws.recv(timeout=10))
    return ws


def hostile_messages(good: dict, emb) -> list[tuple[str, object]]:
    """(name, frame) of everything an attacker sends; each must be refused."""
    state = good["observation.state"]
    T = 50
    fake = {"observation.state": np.full((T, emb.state_dim), 1e300), "action": np.full((T, emb.action_dim), 1e39)}
    sane = {"observation.state": np.zeros((T, emb.state_dim), np.float32),
            "action": np.zeros((T, emb.action_dim), np.float32)}
    return [
        ("1MB prompt", {**good, "prompt": "x" * 2 ** 20}),
        ("wrong state shape", {**good, "observation.state": np.zeros(3, np.float32)}),
        ("2-D state", {**good, "observation.state": np.zeros((4, len(state)), np.float32)}),
        ("wrong image shape", {**good, "observation.images.top": np.zeros((400, 400, 3), np.uint8)}),
        ("float image", {**good, "observation.images.top": good["observation.images.top"].astype(np.float32)}),
        ("bool state", {**good, "observation.state": np.zeros(len(state), bool)}),
        ("NaN state", {**good, "observation.state": np.full_like(state, np.nan)}),
        ("1e300 state", {**good, "observation.state": np.full(len(state), 1e300)}),
        ("negative seed", {**good, "seed": -5}),
        ("episode_end success, no token", {"__ctrl__": "episode_end", "__success__": True, **sane}),
        ("episode_end failure, no token", {"__ctrl__": "episode_end", "__success__": False}),
        ("episode_end wrong token", {"__ctrl__": "episode_end", "__success__": True, "__token__": "guess", **sane}),
        ("episode_end 1e39 steps, token", {"__ctrl__": "episode_end", "__success__": True, "__token__": "TOKEN", **fake}),
    ]


def attack(url: str, seconds: float, flooders: int, big_frames: int) -> dict:
    """The hostile load, from its own process (as an attacker would be): returns the tally."""
    dev = make_device("sim:twogap-push")
    emb = dev.embodiment
    good = {**dev.reset(0).features(), "prompt": PROMPT}
    dev.close()
    stop, tally, lock = threading.Event(), {"error": 0, "closed": 0, "other": 0, "flood": 0}, threading.Lock()

    def count(k):
        with lock:
            tally[k] += 1

    def attacker():
        msgs = hostile_messages(good, emb)
        while not stop.is_set():
            ws = _connect(url)
            for name, m in msgs:
                ws.send(packb(m))
                r = unpackb(ws.recv(timeout=60))
                count("error" if "error" in r else "other")
                if "error" not in r:
                    print("NOT REFUSED:", name, r, flush=True)
            ws.close()

    def big_frame():
        blob = packb({**good, "observation.images.top": np.zeros((50 * 2 ** 20,), np.uint8)})   # 50 MB
        while not stop.is_set():
            ws = _connect(url)
            try:
                ws.send(blob)
                ws.recv(timeout=60)
                count("other")
            except ConnectionClosed as e:
                count("closed" if e.rcvd and e.rcvd.code == 1009 else "other")
            time.sleep(0.2)

    def flooder():
        ws = _connect(url)
        heavy = {**good, "prompt": "p" * Limits().max_prompt_chars}
        while not stop.is_set():
            ws.send(packb(heavy))
            r = unpackb(ws.recv(timeout=60))
            count("flood" if "actions" in r or "busy" in r.get("error", "") else "other")
        ws.close()

    threads = [threading.Thread(target=attacker)] + [threading.Thread(target=big_frame) for _ in range(big_frames)] \
        + [threading.Thread(target=flooder) for _ in range(flooders)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(120)
    return tally


def run(requests: int = 300, flooders: int = 4, big_frames: int = 2, token: str = "TOKEN") -> dict:
    """Serve the tiny policy here; measure a good client alone, then under the hostile load of a
    second process (`attack`) started against the same server."""
    import subprocess
    import sys
    dev = make_device("sim:twogap-push")
    pol = make_policy("embodia-tiny", dev)
    emb = dev.embodiment
    mem = memory_for(pol)
    tmp = tempfile.mkdtemp(prefix="serve-hostile-")
    server = PolicyServer(pol, emb, spec="embodia-tiny", memory=mem, memory_path=tmp, memory_token=token,
                          namespace=device_namespace("sim:twogap-push", emb), limits=Limits())
    good = {**dev.reset(0).features(), "prompt": PROMPT}
    out = {"bench": "serve_hostile", "requests": requests, "flooders": flooders, "big_frames": big_frames}
    with server.running() as url:
        def good_client(n):
            ws, lat = _connect(url), []
            for i in range(n):
                t = time.perf_counter()
                ws.send(packb({**good, "seed": i} if i % 20 == 0 else good))
                r = unpackb(ws.recv(timeout=60))
                lat.append((time.perf_counter() - t) * 1e3)
                assert "actions" in r, r
            ws.close()
            return np.array(lat)

        good_client(20)                                   # warm up
        t0 = time.perf_counter()
        alone = good_client(requests)
        seconds = 3.0 + 1.5 * (time.perf_counter() - t0)  # the attack outlasts the loaded measurement
        proc = subprocess.Popen([sys.executable, __file__, "--attack", url, "--seconds", f"{seconds:.1f}",
                                 "--flooders", str(flooders), "--big-frames", str(big_frames)],
                                stdout=subprocess.PIPE, text=True)
        time.sleep(2.0)                                   # the attack is under way
        loaded = good_client(requests)
        stdout, _ = proc.communicate(timeout=600)
        tally = json.loads(stdout.strip().splitlines()[-1])
    dev.close()
    q = lambda a, p: round(float(np.percentile(a, p)), 2)   # noqa: E731
    out.update(alone_ms={"p50": q(alone, 50), "p99": q(alone, 99), "max": round(float(alone.max()), 2)},
               hostile_ms={"p50": q(loaded, 50), "p99": q(loaded, 99), "max": round(float(loaded.max()), 2)},
               hostile=tally, memory_entries_after=len(mem), memory_writes_logged=os.path.exists(f"{tmp}/writes.jsonl"),
               machine=f"{platform.machine()} {os.cpu_count()}-core", date=time.strftime("%Y-%m-%d"))
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--flooders", type=int, default=4)
    ap.add_argument("--big-frames", type=int, default=2)
    ap.add_argument("--attack", help=argparse.SUPPRESS)       # internal: be the hostile process
    ap.add_argument("--seconds", type=float, default=10.0, help=argparse.SUPPRESS)
    from embodia.policies.placement import parse_args
    a = parse_args(ap)         # with --torch-device / --dtype (embodia.policies.placement)
    if a.attack:
        print(json.dumps(attack(a.attack, a.seconds, a.flooders, a.big_frames)))
    else:
        print(json.dumps(run(a.requests, a.flooders, a.big_frames)))
