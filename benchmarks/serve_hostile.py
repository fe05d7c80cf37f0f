"""`embodia serve` under hostile clients: a well-formed client's request latency alone and while
other connections send what an attacker would (1 MB prompts, a 50 MB frame, wrong shapes and
dtypes, NaN and 1e300 states, fabricated episode_end outcomes with made-up steps, a flood of
valid requests with the longest allowed prompt from several connections at once, a flood of
2,000-emoji prompts (8,000 tokens), and 32 idle connections from one address).

Every address is on loopback: the good client connects from 127.0.0.2, the floods from
127.0.0.1, the idle connections from 127.0.0.3 (all of 127.0.0.0/8 is loopback on Linux). The
server takes turns between addresses, so the good client should wait at most about one other
decision: its p99 under load within 2x its p99 alone (``p99_ratio``); the flooding address's
own connections wait their turns.

Prints one JSON line: p50/p99/max of the good client's round trip alone and under load, how many
hostile messages got an error / a closed connection / anything else (must be 0), how many emoji
prompts were refused, how many idle connections were accepted and refused (the per-address cap),
and the memory's size before and after (fabricated outcomes must not change it). Server and
clients share this machine (the tiny policy, one torch thread).

    OMP_NUM_THREADS=1 python benchmarks/serve_hostile.py --requests 300 --flooders 4 --emoji 4 --idle 32
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import threading
import time
import warnings

import numpy as np
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from embodia.agent.evaluation.memory_eval import device_namespace
from embodia.agent.loop.factory import make_device, make_policy
from embodia.agent.serving.server import Limits, PolicyServer
from embodia.policies.robot.steered import memory_for
from embodia.policies.wire import packb, unpackb

PROMPT = "push the puck onto the goal"


# bare connections, closed by hand (not in a with block): websockets asks for a with block
warnings.filterwarnings("ignore", message=r"connect\(\) must be used", category=DeprecationWarning)


GOOD, FLOOD, IDLE = "127.0.0.2", "127.0.0.1", "127.0.0.3"     # source addresses, all loopback


def _connect(url, source: str = FLOOD):
    ws = connect(url, max_size=None, open_timeout=10, close_timeout=2, source_address=(source, 0))
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


def attack(url: str, seconds: float, flooders: int, big_frames: int, emoji: int = 0, idle: int = 0) -> dict:
    """The hostile load, from its own process (as an attacker would be): prints "ready" once every
    attacker runs, stops at a line (or EOF) on stdin or after ``seconds``; returns the tally."""
    dev = make_device("sim:twogap-push")
    emb = dev.embodiment
    good = {**dev.reset(0).features(), "prompt": PROMPT}
    dev.close()
    stop, lock = threading.Event(), threading.Lock()
    tally = {"error": 0, "closed": 0, "other": 0, "flood": 0, "emoji_refused": 0, "idle_open": 0, "idle_refused": 0}

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
            if "tokens" in r.get("error", ""):        # over the token limit: the longest prompt allowed
                heavy["prompt"] = heavy["prompt"][:len(heavy["prompt"]) // 2]
                count("error")
                continue
            count("flood" if "actions" in r or "busy" in r.get("error", "") else "other")
        ws.close()

    def emoji_flooder():
        ws = _connect(url)
        heavy = {**good, "prompt": "\U0001F600" * Limits().max_prompt_chars}      # 2,000 emoji: 8,000 tokens
        while not stop.is_set():
            ws.send(packb(heavy))
            r = unpackb(ws.recv(timeout=60))
            count("emoji_refused" if "tokens" in r.get("error", "") else "other")
        ws.close()

    def idler():
        held = []
        for _ in range(idle + 1):              # one more than the per-address cap allows
            try:
                held.append(_connect(url, IDLE))      # the client library answers pings by itself
                count("idle_open")
            except InvalidStatus as e:
                count("idle_refused" if e.response.status_code == 503 else "other")
        stop.wait()
        for ws in held:
            ws.close()

    threads = [threading.Thread(target=attacker)] + [threading.Thread(target=big_frame) for _ in range(big_frames)] \
        + [threading.Thread(target=flooder) for _ in range(flooders)] \
        + [threading.Thread(target=emoji_flooder) for _ in range(emoji)] \
        + ([threading.Thread(target=idler)] if idle else [])
    for t in threads:
        t.start()
    time.sleep(1.0)                            # every attacker connected and under way
    print("ready", flush=True)
    threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
    stop.wait(seconds)
    stop.set()
    for t in threads:
        t.join(120)
    return tally


def good_client(url: str, n: int, warmup: int = 20) -> list[list[float]]:
    """A well-formed client from its own address: [round trip, server's queue_ms, infer_ms] of ``n``
    decisions, in milliseconds."""
    dev = make_device("sim:twogap-push")
    good = {**dev.reset(0).features(), "prompt": PROMPT}
    dev.close()
    ws, lat = _connect(url, GOOD), []
    for i in range(warmup + n):
        t = time.perf_counter()
        ws.send(packb({**good, "seed": i} if i % 20 == 0 else good))
        r = unpackb(ws.recv(timeout=60))
        assert "actions" in r, r
        lat.append([(time.perf_counter() - t) * 1e3, r["server_timing"]["queue_ms"], r["server_timing"]["infer_ms"]])
    ws.close()
    return lat[warmup:]


def _good_process(url: str, n: int) -> np.ndarray:
    """`good_client` in a process of its own, as a robot would be (not sharing the server's GIL)."""
    out = subprocess.run([sys.executable, __file__, "--good", url, "--requests", str(n)], capture_output=True,
                         text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return np.array(json.loads(out.stdout.strip().splitlines()[-1]))


def run(requests: int = 300, flooders: int = 4, big_frames: int = 2, emoji: int = 4, idle: int = 32,
        token: str = "TOKEN") -> dict:
    """Serve the tiny policy here; measure a good client alone, then under the hostile load of a
    second process (`attack`) started against the same server."""
    dev = make_device("sim:twogap-push")
    pol = make_policy("embodia-tiny", dev)
    emb = dev.embodiment
    mem = memory_for(pol)
    tmp = tempfile.mkdtemp(prefix="serve-hostile-")
    server = PolicyServer(pol, emb, spec="embodia-tiny", memory=mem, memory_path=tmp, memory_token=token,
                          namespace=device_namespace("sim:twogap-push", emb), limits=Limits())
    out = {"bench": "serve_hostile", "requests": requests, "flooders": flooders, "big_frames": big_frames,
           "emoji": emoji, "idle": idle}
    with server.running() as url:
        t0 = time.perf_counter()
        alone = _good_process(url, requests)
        seconds = 60.0 + 10.0 * (time.perf_counter() - t0)     # a bound; the attack stops when told
        proc = subprocess.Popen([sys.executable, __file__, "--attack", url, "--seconds", f"{seconds:.1f}",
                                 "--flooders", str(flooders), "--big-frames", str(big_frames), "--emoji", str(emoji),
                                 "--idle", str(idle)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if proc.stdout.readline().strip() != "ready":      # measured only once the attack is under way
            raise RuntimeError("the attacking process did not start")
        loaded = _good_process(url, requests)
        stdout, _ = proc.communicate("stop\n", timeout=600)
        tally = json.loads(stdout.strip().splitlines()[-1])
    dev.close()
    q = lambda a, p: round(float(np.percentile(a, p)), 2)   # noqa: E731

    def summary(a):       # the round trip; where it went on the server: waiting for the model, the model
        return {"p50": q(a[:, 0], 50), "p99": q(a[:, 0], 99), "max": round(float(a[:, 0].max()), 2),
                "queue_p50": q(a[:, 1], 50), "queue_p99": q(a[:, 1], 99), "infer_p50": q(a[:, 2], 50),
                "infer_p99": q(a[:, 2], 99)}
    out.update(alone_ms=summary(alone), hostile_ms=summary(loaded), p99_ratio=round(q(loaded[:, 0], 99) /
                                                                                   q(alone[:, 0], 99), 2),
               hostile=tally, memory_entries_after=len(mem), memory_writes_logged=os.path.exists(f"{tmp}/writes.jsonl"),
               machine=f"{platform.machine()} {os.cpu_count()}-core", date=time.strftime("%Y-%m-%d"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--flooders", type=int, default=4)
    ap.add_argument("--big-frames", type=int, default=2)
    ap.add_argument("--emoji", type=int, default=4, help="connections flooding 2,000-emoji prompts")
    ap.add_argument("--idle", type=int, default=32, help="idle connections held from one address")
    ap.add_argument("--attack", help=argparse.SUPPRESS)       # internal: be the hostile process
    ap.add_argument("--good", help=argparse.SUPPRESS)         # internal: be the measured client
    ap.add_argument("--seconds", type=float, default=10.0, help=argparse.SUPPRESS)
    from embodia.policies.placement import parse_args
    a = parse_args(ap)         # with --torch-device / --dtype (embodia.policies.placement)
    if a.good:
        print(json.dumps(good_client(a.good, a.requests)))
    elif a.attack:
        print(json.dumps(attack(a.attack, a.seconds, a.flooders, a.big_frames, a.emoji, a.idle)))
    else:
        print(json.dumps(run(a.requests, a.flooders, a.big_frames, a.emoji, a.idle)))


if __name__ == "__main__":
    main()
