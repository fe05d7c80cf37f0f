"""`embodia serve` under hostile clients: a well-formed client's request latency alone and while
other connections send what an attacker would (1 MB prompts, a 50 MB frame, wrong shapes and
dtypes, NaN and 1e300 states, fabricated episode_end outcomes with made-up steps, a flood of
valid requests with the longest allowed prompt from several connections at once, a flood of
2,000-emoji prompts (8,000 tokens), and 32 idle connections from one address).

Every address is on loopback (all of 127.0.0.0/8 is loopback on Linux): the floods come from
127.0.0.1, the idle connections from 127.0.0.3, and with ``--spread N`` the floods come from N
addresses (127.0.0.2 to 127.0.0.N+1), each of which also tries ``--per-address`` connections that
send junk every ``--junk-every`` seconds. The server counts all of loopback as one client, so every
hostile connection shares one client's places and turns; the good client (127.0.0.1 too) names
itself with its own token (``X-Embodia-Client``, the server's ``client_tokens``). It should wait at
most about one other decision: its p99 under load within 2x its p99 alone (``p99_ratio``), and none
of its requests refused (``refused``), even with ``--max-queue`` below the floods' connections
(a full queue sheds the client holding most of it).

Prints one JSON line: p50/p99/max of the good client's round trip alone and under load, how many
hostile messages got an error / a closed connection / anything else (must be 0), how many emoji
prompts were refused, how many idle connections were accepted and refused (the per-address cap),
and the memory's size before and after (fabricated outcomes must not change it). Server and
clients share this machine (the tiny policy, one torch thread).

    OMP_NUM_THREADS=1 python benchmarks/serve_hostile.py --requests 300 --flooders 4 --emoji 4 --idle 32
    OMP_NUM_THREADS=1 python benchmarks/serve_hostile.py --requests 300 --spread 8 --per-address 32 --flooders 24 \
        --big-frames 0 --emoji 0 --idle 0 --max-queue 16
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

from embodia.agent.loop.factory import device_namespace
from embodia.agent.loop.factory import make_device, make_policy
from embodia.agent.serving.messages import Limits
from embodia.agent.serving.server import PolicyServer
from embodia.policies.robot.steered import memory_for
from embodia.policies.wire import packb, unpackb

PROMPT = "push the puck onto the goal"


# bare connections, closed by hand (not in a with block): websockets asks for a with block
warnings.filterwarnings("ignore", message=r"connect\(\) must be used", category=DeprecationWarning)


GOOD, FLOOD, IDLE = "127.0.0.1", "127.0.0.1", "127.0.0.3"     # source addresses, all loopback
GOOD_TOKEN = "the-good-robot-token-0123456789"                 # the good client's own token


def _connect(url, source: str = FLOOD, token: str | None = None):
    ws = connect(url, max_size=None, open_timeout=10, close_timeout=2, source_address=(source, 0),
                 additional_headers={"X-Embodia-Client": token} if token else None)
    unpackb(ws.recv(timeout=10))
    return ws


def _place(url, source: str, count, wait: threading.Event):
    """A connection from ``source``, waiting for a place while every place of loopback is held
    (503, counted as ``place_refused``); None once ``wait`` is set."""
    while not wait.is_set():
        try:
            return _connect(url, source)
        except InvalidStatus as e:
            count("place_refused" if e.response.status_code == 503 else "other")
            wait.wait(0.5)
    return None


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


def attack(url: str, seconds: float, flooders: int, big_frames: int, emoji: int = 0, idle: int = 0,
           spread: int = 0, per_address: int = 0, junk_every: float = 5.0) -> dict:
    """The hostile load, from its own process (as an attacker would be): prints "ready" once every
    attacker runs, stops at a line (or EOF) on stdin or after ``seconds``; returns the tally."""
    sources = [f"127.0.0.{2 + i}" for i in range(spread)] or [FLOOD]
    dev = make_device("sim:twogap-push")
    emb = dev.embodiment
    good = {**dev.reset(0).features(), "prompt": PROMPT}
    dev.close()
    stop, lock = threading.Event(), threading.Lock()
    tally = {"error": 0, "closed": 0, "other": 0, "flood": 0, "flood_busy": 0, "emoji_refused": 0, "idle_open": 0,
             "idle_refused": 0, "place_refused": 0, "junk_open": 0, "junk_refused": 0, "junk_closed_idle": 0}

    def count(k):
        with lock:
            tally[k] += 1

    def attacker():
        msgs = hostile_messages(good, emb)
        while (ws := _place(url, FLOOD, count, stop)) is not None:
            for name, m in msgs:
                ws.send(packb(m))
                r = unpackb(ws.recv(timeout=60))
                count("error" if "error" in r else "other")
                if "error" not in r:
                    print("NOT REFUSED:", name, r, flush=True)
            ws.close()

    def big_frame():
        blob = packb({**good, "observation.images.top": np.zeros((50 * 2 ** 20,), np.uint8)})   # 50 MB
        while (ws := _place(url, FLOOD, count, stop)) is not None:
            try:
                ws.send(blob)
                ws.recv(timeout=60)
                count("other")
            except ConnectionClosed as e:
                count("closed" if e.rcvd and e.rcvd.code == 1009 else "other")
            time.sleep(0.2)

    def flooder(i):
        ws = _place(url, sources[i % len(sources)], count, stop)
        heavy = {**good, "prompt": "p" * Limits().max_prompt_chars}
        while ws is not None and not stop.is_set():
            ws.send(packb(heavy))
            r = unpackb(ws.recv(timeout=60))
            if "tokens" in r.get("error", ""):        # over the token limit: the longest prompt allowed
                heavy["prompt"] = heavy["prompt"][:len(heavy["prompt"]) // 2]
                count("error")
                continue
            count("flood" if "actions" in r else "flood_busy" if "busy" in r.get("error", "") else "other")
        if ws is not None:
            ws.close()

    def emoji_flooder():
        ws = _place(url, FLOOD, count, stop)
        heavy = {**good, "prompt": "\U0001F600" * Limits().max_prompt_chars}      # 2,000 emoji: 8,000 tokens
        while ws is not None and not stop.is_set():
            ws.send(packb(heavy))
            r = unpackb(ws.recv(timeout=60))
            count("emoji_refused" if "tokens" in r.get("error", "") else "other")
        if ws is not None:
            ws.close()

    def idler():
        held = []
        time.sleep(0.5)                        # after the floods took their places
        for _ in range(idle + 1):              # one more than loopback's places
            try:
                held.append(_connect(url, IDLE))      # the client library answers pings by itself
                count("idle_open")
            except InvalidStatus as e:
                count("idle_refused" if e.response.status_code == 503 else "other")
        stop.wait()
        for ws in held:
            ws.close()

    def junk_sender(source):
        """``per_address`` connections from ``source`` that send junk (refused) every ``junk_every`` s."""
        time.sleep(0.5)                        # after the floods took their places
        held = []
        for _ in range(per_address):
            try:
                held.append(_connect(url, source))
                count("junk_open")
            except InvalidStatus as e:
                count("junk_refused" if e.response.status_code == 503 else "other")
        while held and not stop.wait(junk_every):
            for ws in list(held):
                try:
                    ws.send(b"junk")
                    count("error" if "error" in unpackb(ws.recv(timeout=60)) else "other")
                except ConnectionClosed as e:            # closed as idle: junk is not a request
                    count("junk_closed_idle" if e.rcvd and "idle" in e.rcvd.reason else "other")
                    held.remove(ws)
        for ws in held:
            ws.close()

    threads = [threading.Thread(target=attacker)] + [threading.Thread(target=big_frame) for _ in range(big_frames)] \
        + [threading.Thread(target=flooder, args=(i,)) for i in range(flooders)] \
        + [threading.Thread(target=emoji_flooder) for _ in range(emoji)] \
        + ([threading.Thread(target=idler)] if idle else []) \
        + [threading.Thread(target=junk_sender, args=(src,)) for src in (sources if spread and per_address else [])]
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


def good_client(url: str, n: int, warmup: int = 20) -> dict:
    """A well-formed client named by its own token: {"lat": [round trip, server's queue_ms,
    infer_ms] of its answered decisions among ``n``, in milliseconds, "refused": how many of the
    ``n`` got an error instead}."""
    dev = make_device("sim:twogap-push")
    good = {**dev.reset(0).features(), "prompt": PROMPT}
    dev.close()
    ws, lat, refused = _connect(url, GOOD, GOOD_TOKEN), [], 0
    for i in range(warmup + n):
        t = time.perf_counter()
        ws.send(packb({**good, "seed": i} if i % 20 == 0 else good))
        r = unpackb(ws.recv(timeout=60))
        if "actions" not in r:
            refused += i >= warmup
            continue
        if i >= warmup:
            lat.append([(time.perf_counter() - t) * 1e3, r["server_timing"]["queue_ms"],
                        r["server_timing"]["infer_ms"]])
    ws.close()
    return {"lat": lat, "refused": refused}


def _good_process(url: str, n: int) -> tuple[np.ndarray, int]:
    """`good_client` in a process of its own, as a robot would be (not sharing the server's GIL)."""
    out = subprocess.run([sys.executable, __file__, "--good", url, "--requests", str(n)], capture_output=True,
                         text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    got = json.loads(out.stdout.strip().splitlines()[-1])
    return np.array(got["lat"]), got["refused"]


ATTACK = ("flooders", "big_frames", "emoji", "idle", "spread", "per_address", "junk_every")   # attack()'s load


def run(requests: int = 300, flooders: int = 4, big_frames: int = 2, emoji: int = 4, idle: int = 32,
        token: str = "TOKEN", spread: int = 0, per_address: int = 0, junk_every: float = 5.0,
        max_queue: int = Limits().max_queue, idle_s: float = Limits().idle_s) -> dict:
    """Serve the tiny policy here; measure a good client alone, then under the hostile load of a
    second process (`attack`) started against the same server."""
    load = {k: v for k, v in locals().items() if k in ATTACK}
    dev = make_device("sim:twogap-push")
    pol = make_policy("embodia-tiny", dev)
    emb = dev.embodiment
    mem = memory_for(pol)
    tmp = tempfile.mkdtemp(prefix="serve-hostile-")
    server = PolicyServer(pol, emb, spec="embodia-tiny", memory=mem, memory_path=tmp, memory_token=token,
                          namespace=device_namespace("sim:twogap-push", emb), client_tokens={GOOD_TOKEN: "good"},
                          limits=Limits(max_queue=max_queue, idle_s=idle_s))
    out = {"bench": "serve_hostile", "requests": requests, **load, "max_queue": max_queue, "idle_s": idle_s}
    with server.running() as url:
        t0 = time.perf_counter()
        alone, refused_alone = _good_process(url, requests)
        seconds = 60.0 + 10.0 * (time.perf_counter() - t0)     # a bound; the attack stops when told
        flags = [x for k, v in load.items() for x in (f"--{k.replace('_', '-')}", str(v))]
        proc = subprocess.Popen([sys.executable, __file__, "--attack", url, "--seconds", f"{seconds:.1f}", *flags],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if proc.stdout.readline().strip() != "ready":      # measured only once the attack is under way
            raise RuntimeError("the attacking process did not start")
        loaded, refused = _good_process(url, requests)
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
               refused=refused + refused_alone, hostile=tally, memory_entries_after=len(mem),
               memory_writes_logged=os.path.exists(f"{tmp}/writes.jsonl"),
               machine=f"{platform.machine()} {os.cpu_count()}-core", date=time.strftime("%Y-%m-%d"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--flooders", type=int, default=4)
    ap.add_argument("--big-frames", type=int, default=2)
    ap.add_argument("--emoji", type=int, default=4, help="connections flooding 2,000-emoji prompts")
    ap.add_argument("--idle", type=int, default=32, help="idle connections held from one address")
    ap.add_argument("--spread", type=int, default=0, help="hostile loopback addresses (127.0.0.2 on) the "
                    "floods come from, each also opening --per-address junk-sending connections")
    ap.add_argument("--per-address", type=int, default=0, help="connections each --spread address tries")
    ap.add_argument("--junk-every", type=float, default=5.0, help="seconds between junk messages")
    ap.add_argument("--max-queue", type=int, default=Limits().max_queue, help="the server's Limits.max_queue")
    ap.add_argument("--idle-s", type=float, default=Limits().idle_s, help="the server's Limits.idle_s")
    ap.add_argument("--attack", help=argparse.SUPPRESS)       # internal: be the hostile process
    ap.add_argument("--good", help=argparse.SUPPRESS)         # internal: be the measured client
    ap.add_argument("--seconds", type=float, default=10.0, help=argparse.SUPPRESS)
    from embodia.policies.placement import parse_args
    a = parse_args(ap)         # with --torch-device / --dtype (embodia.policies.placement)
    load = {k: getattr(a, k) for k in ATTACK}
    if a.good:
        print(json.dumps(good_client(a.good, a.requests)))
    elif a.attack:
        print(json.dumps(attack(a.attack, a.seconds, **load)))
    else:
        print(json.dumps(run(a.requests, **load, max_queue=a.max_queue, idle_s=a.idle_s)))


if __name__ == "__main__":
    main()
