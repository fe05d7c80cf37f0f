"""Fan evaluation and data collection out over Ray actors: `embodia eval|record --workers N`.

Each worker is a Ray actor that opens its own device and policy from the spec strings (one torch
thread, one FAISS thread) and runs *units*: a contiguous block of episode seeds (eval, record) or
one (arm, stream) of the memory evaluation. The driver hands units to idle workers and merges what
comes back into the report the serial run writes (`summarize`, `build_report`), plus a `"fleet"`
section. A worker that dies is reported (which worker, which unit, the error) and its unit reruns on
a fresh actor, up to `retries` times; a unit that still cannot run is listed under `fleet.lost` with
its seeds, never silently dropped.

Per-episode outcomes equal the serial run's for the same seeds at the same torch thread count (one):
episode i runs with seed+i, the device resets from the seed and `VLAPolicy.reset(seed)` reseeds the
sampler, so an episode does not depend on what ran before it in that process (memory streams are
independent by construction). A serial run at torch's default two threads rounds some reductions
differently and can end an episode a step earlier or later (measured: 2 of 6 episodes, by one step).

`record` workers write step logs (the recorder's crash-safe format, end record included) into a
shard per unit under `OUT/.steplogs/fleet/`; the driver commits them into the one output dataset in
seed order, through the dataset's own recovery path, as soon as every earlier unit is in. The shard
directory must be on a filesystem every worker sees (local runs, or a shared mount on a cluster).

With `--memory PATH` the workers share ONE success memory: a `MemoryHost` actor owns it (actor calls
run one at a time, so writes are serialized), keeps each worker's episode bookkeeping apart, gives
every stored episode a fresh id, and saves atomically after every stored success (`save_every`) and at
the end. Each worker's `SteeredPolicy` talks to it through a `MemoryProxy` with the memory's methods.
Episodes then see each other's successes, so outcomes depend on timing (unlike the paired runs).

Ray is imported here only, and lazily: without `--workers` nothing imports it.

>>> spec = WorkerSpec("sim:twogap-push", "embodia-tiny")                       # doctest: +SKIP
>>> with Fleet(spec, workers=2) as fleet:                                       # doctest: +SKIP
...     results = fleet.episodes(episodes=40, seed=0)
...     section = fleet.report()          # workers, deaths, retries, lost, wall_s, episodes_per_s
"""
from __future__ import annotations

import json
import math
import os
import secrets
import shutil
import tempfile
import time
from collections import Counter, deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from embodia.agent.fleet.memory_host import MemoryHost, MemoryProxy
from embodia.agent.fleet.threads import one_thread
from embodia.devices.base import environ

INSTALL_HINT = "pip install 'embodia[ray]'"
SHARD_DIR = "fleet"                 # under the output dataset's .steplogs (hidden from LeRobot readers)
_TOKEN = secrets.token_hex(32)     # one per process: Ray caches the token it first reads


class FleetError(RuntimeError):
    """The fleet cannot run (no Ray, a worker that cannot start, an exception inside a unit)."""


def import_ray():
    try:
        import ray
    except ImportError:
        raise FleetError(f"--workers needs Ray: {INSTALL_HINT}") from None
    return ray


@dataclass(frozen=True)
class WorkerSpec:
    """What each worker opens: the same strings as `--device`, `--policy`, `--shift`, `--size`, and
    `make_policy`'s keywords (`--base-url`, `--samples`, ...)."""
    device: str
    policy: str
    shift: Optional[str] = None
    size: Optional[str] = None
    policy_kw: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Unit:
    """One piece of work: a contiguous block of seeds, or (arm, stream) of the memory evaluation."""
    id: int
    seeds: tuple[int, ...]
    arm: Optional[str] = None
    stream: Optional[int] = None

    def describe(self) -> dict:
        where = {"arm": self.arm, "stream": self.stream} if self.arm is not None else {}
        return {"unit": self.id, **where, "seeds": list(self.seeds)}


@dataclass
class UnitEvent:
    """What `on_unit(fleet, event)` hears: a unit "done", a worker that "died" running one (the unit
    reruns), or a unit "lost" for good. Sent after the idle workers got their next units."""
    kind: str
    worker: int
    unit: Unit
    result: object = None
    error: Optional[str] = None


def blocks(episodes: int, seed: int, workers: int, size: Optional[int] = None) -> list[Unit]:
    """Contiguous seed blocks; by default about 20 per worker, so the workers finish within about
    a block of each other (an episode takes seconds, a unit's Ray round trip a millisecond)."""
    size = size or max(1, math.ceil(episodes / (20 * workers)))
    return [Unit(k, tuple(range(seed + a, seed + min(a + size, episodes))))
            for k, a in enumerate(range(0, episodes, size))]


def stream_units(arms: list[str], streams: int, episodes: int, seed: int) -> list[Unit]:
    """(arm, stream) units, stream-major like `run_streams_parallel`; seeds as in `run_stream`."""
    pairs = [(arm, s) for s in range(streams) for arm in arms]
    return [Unit(k, tuple(seed + s * episodes + i for i in range(episodes)), arm, s)
            for k, (arm, s) in enumerate(pairs)]


# -- Ray session --------------------------------------------------------------------------------------
@contextmanager
def ray_session(num_cpus: int, address: Optional[str] = None):
    """Yields (ray, where). Reuses a Ray already initialized in this process; connects to `address`;
    else starts a local instance with `num_cpus` CPUs, no dashboard, a 200 MB object store, a short
    temp dir and workers at the driver's priority, and shuts it down (removing the temp dir) at the
    end. The local instance keeps Ray's token auth but takes the token from the environment, so
    nothing is written to ~/.ray/auth_token."""
    ray = import_ray()
    if ray.is_initialized():
        yield ray, "existing"
        return
    import logging
    quiet = dict(log_to_driver=False, logging_level=logging.WARNING)
    if address:
        _check_reachable(address)
        try:
            # a cluster's workers do not inherit this shell: what --torch-device / --dtype chose goes along
            ray.init(address=address, runtime_env={"env_vars": placement_env()}, **quiet)
        except (ConnectionError, RuntimeError, ValueError) as e:
            hint = ("; it answers, so if it was started with token authentication, set RAY_AUTH_MODE=token and "
                    "its token in RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) here"
                    if os.environ.get("RAY_AUTH_MODE", "").lower() != "token" else "")
            raise FleetError(f"cannot connect to the Ray cluster at {address}: {e}{hint}") from None
        try:
            yield ray, address
        finally:
            ray.shutdown()
        return
    # Ray runs workers at nice 15; a local fleet is the job itself, so it keeps the driver's priority
    # (at 15 any other process on the machine takes the cores from it: the serial run's rival would not)
    env = {"RAY_worker_niceness": os.environ.get("RAY_worker_niceness", "0")}
    if not (os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")
            or (Path.home() / ".ray" / "auth_token").exists()):
        env["RAY_AUTH_TOKEN"] = _TOKEN     # else Ray would generate one into ~/.ray/auth_token
    logging.getLogger("ray._private.authentication").setLevel(logging.ERROR)   # "token auth is on"
    tmp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")    # Ray's socket paths must stay < 108 chars
    try:
        with environ(**env):               # Ray's processes inherit it
            try:
                ray.init(num_cpus=num_cpus, include_dashboard=False, object_store_memory=200 * 2 ** 20,
                         _temp_dir=tmp, **quiet)
                yield ray, "local"
            finally:
                ray.shutdown()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def placement_env() -> dict[str, str]:
    """The process's model placement ($EMBODIA_TORCH_DEVICE, $EMBODIA_DTYPE, as --torch-device and
    --dtype set them) for the workers of a Ray cluster joined with --ray-address."""
    names = ("EMBODIA_TORCH_DEVICE", "EMBODIA_DTYPE")   # policies.placement's (imports torch: not here)
    return {k: os.environ[k] for k in names if k in os.environ}


# HTTP/2's client preface and an empty SETTINGS frame: a gRPC server (Ray's GCS, a Ray Client
# server) answers with a SETTINGS frame of its own (frame type 4, the 4th byte of a frame header)
_H2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """Fail in seconds on a HOST:PORT nobody listens on, or where something other than a gRPC server
    answers (a plain HTTP server held ray.init for over 3 minutes of retries). With RAY_USE_TLS the
    handshake is TLS's, so only the connection is checked."""
    import socket
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    if not host or not port.isdigit():
        return          # "auto" and the like: Ray resolves them
    try:
        sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
    except OSError as e:      # refused, unreachable, or no answer for `timeout` seconds
        raise FleetError(f"cannot reach the Ray cluster at {address}: {e}") from None
    with sock:
        if os.environ.get("RAY_USE_TLS", "").lower() in ("1", "true"):
            return
        head = _answer(sock, _H2_HELLO)
    if len(head) < 9 or head[3] != 4:
        said = " ".join(head.decode("ascii", "replace").split())[:60] if head else "nothing"
        raise FleetError(f"{address} is not a Ray cluster: it answered {said!r}, not as a gRPC server (the Ray "
                         f"head's GCS port, 6379 by default) does")


def _answer(sock, hello: bytes) -> bytes:
    """What a server says to ``hello`` within the socket's timeout: a frame header (9 bytes) and, when
    it is not a SETTINGS frame, a little more to name it by; b"" or less when it says nothing."""
    head = b""
    try:
        sock.sendall(hello)
        while len(head) < 9:
            chunk = sock.recv(9 - len(head))
            if not chunk:
                break
            head += chunk
        if len(head) == 9 and head[3] != 4:
            sock.settimeout(0.5)
            head += sock.recv(60)
    except OSError:             # silent, or closed on us: what came so far is the answer
        pass
    return head


# -- the worker actor -----------------------------------------------------------------------------------
class Worker:
    """A Ray actor: its own device and policy, running units. With `memory` (a MemoryHost handle)
    its policy is steered by the fleet's shared memory."""

    def __init__(self, spec: WorkerSpec, memory=None, client: str = ""):
        os.environ.setdefault("MUJOCO_GL", "egl")
        from embodia.agent.loop.factory import device_namespace, make_device, make_policy
        self.device = make_device(spec.device, shift=spec.shift, size=spec.size)
        self.policy = make_policy(spec.policy, self.device, **{**spec.policy_kw, "threads": 1})
        one_thread()
        self.namespace = device_namespace(spec.device, self.device.embodiment)
        if memory is not None:
            from embodia.policies.robot.steered import SteeredPolicy
            self.policy = SteeredPolicy(self.policy, MemoryProxy(memory, client), namespace=self.namespace)

    def pid(self) -> int:
        return os.getpid()

    def episodes(self, seeds, shard: Optional[str] = None, meta: Optional[dict] = None) -> list[dict]:
        """Run the seeds in order; with `shard`, record each episode's step log there."""
        from embodia.agent.loop.episode import run_episode
        writer = _step_log_shard(shard, self.device.embodiment) if shard else None
        try:
            return [run_episode(self.device, self.policy, seed=s, recorder=writer, episode_meta=meta).to_dict()
                    for s in seeds]
        finally:
            if writer is not None:
                writer.close()

    def stream(self, arm: str, stream: int, episodes: int, seed: int) -> dict:
        from embodia.agent.evaluation.memory_eval import arm_factory, run_stream
        return run_stream(self.device, arm_factory(self.policy, self.namespace), arm, stream,
                          episodes=episodes, seed=seed)

    def close(self) -> None:
        self.device.close()       # its GL context, before the process goes


def _step_log_shard(root, embodiment):
    """A DatasetWriter that stops at the step log: each finished episode's log (end record
    included) stays in `<root>/.steplogs` for the driver to commit into the real dataset."""
    from embodia.agent.recording.writer import DatasetWriter

    class StepLogShard(DatasetWriter):
        def _commit_log(self, path):
            return None
    return StepLogShard(root, embodiment, recover=False)


def merge_shard(writer, shard: Path) -> dict[int, int]:
    """Commit a shard's step logs into `writer`'s dataset in seed order; returns {seed: episode_index}.
    Uses the dataset's recovery path: a log moved into its .steplogs becomes the next episode."""
    logs = []
    for p in (shard / ".steplogs").glob("episode_*.jsonl"):
        with open(p, "rb") as f:
            logs.append((json.loads(f.readline())["seed"], p))
    out = {}
    for seed, p in sorted(logs, key=lambda x: x[0]):
        os.replace(p, writer.steplog_dir / p.name)
        committed = writer.recover()
        if len(committed) != 1:
            raise FleetError(f"{p.name} (seed {seed}) did not become exactly one episode: {committed}")
        out[seed] = committed[0]
    shutil.rmtree(shard, ignore_errors=True)
    return out


# -- the driver -----------------------------------------------------------------------------------------
@dataclass
class Fleet:
    """N worker actors and the scheduler that feeds them units. Use as a context manager: entering
    starts (or joins) Ray and waits until every worker has opened its device and policy."""
    spec: WorkerSpec
    workers: int
    address: Optional[str] = None
    retries: int = 2
    memory: Optional[str] = None           # a memory file shared by every worker (MemoryHost)
    memory_load: dict = field(default_factory=dict)
    save_every: int = 1              # memory saved after every stored success
    on_unit: Optional[Callable[["Fleet", UnitEvent], None]] = None

    def __enter__(self) -> "Fleet":
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        t0 = time.perf_counter()
        self._session = ray_session(self.workers, self.address)
        self.ray, self.where = self._session.__enter__()
        try:
            self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        self.startup_s = time.perf_counter() - t0
        return self

    def _start(self) -> None:
        ray = self.ray
        self.deaths: list[dict] = []
        self.lost: list[dict] = []
        self.retries_used = 0
        self.units_per_worker = [0] * self.workers
        self.unit_count = 0
        self.wall_s = 0.0
        self.episodes_run = 0
        self.memory_summary = None
        self._generation = Counter()
        self.host = None
        if self.memory is not None:       # on the driver's node: the memory file is the driver's
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
            here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
            self.host = ray.remote(num_cpus=0, max_restarts=0, scheduling_strategy=here)(MemoryHost).remote(
                self.memory, self.memory_load, self.save_every)
        self._actor_cls = ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0)(Worker)
        self._actors, self._pids = [None] * self.workers, [None] * self.workers
        for k in range(self.workers):
            self._spawn(k)
        try:
            ray.get(self._pids)
        except ray.exceptions.RayActorError as e:
            raise FleetError(f"a worker could not open {self.spec.device} / {self.spec.policy}: "
                             f"{_first_lines(e)}") from None

    def _spawn(self, k: int) -> None:
        self._generation[k] += 1
        client = f"worker-{k}.{self._generation[k]}"
        self._actors[k] = self._actor_cls.remote(self.spec, self.host, client)
        self._pids[k] = self._actors[k].pid.remote()

    def pid(self, k: int) -> Optional[int]:
        """The process id of worker k (waits until it has started; None if it never did)."""
        try:
            return self.ray.get(self._pids[k]) if self._pids[k] is not None else None
        except self.ray.exceptions.RayActorError:
            return None

    def __exit__(self, *exc) -> bool:
        ray = self.ray
        try:
            actors = [a for a in getattr(self, "_actors", []) if a is not None]
            closing = [a.close.remote() for a in actors]
            if closing:
                ray.wait(closing, num_returns=len(closing), timeout=10)
            for a in actors:
                ray.kill(a)
            if getattr(self, "host", None) is not None:
                try:
                    self.memory_summary = ray.get(self.host.close.remote())
                except ray.exceptions.RayActorError as e:
                    raise FleetError(f"the shared memory's actor died: {_first_lines(e)}; {self.memory} holds "
                                     f"what it saved last (every {self.save_every} stored successes)") from None
                ray.kill(self.host)
        finally:
            self._session.__exit__(*exc)
        return False

    # -- scheduling ------------------------------------------------------------------------------------
    def _run(self, units: list[Unit], submit, on_result=None) -> dict[int, object]:
        """Hand units to idle workers until all are done or lost; returns {unit id: result}."""
        ray = self.ray
        todo, inflight, results, tries = deque(units), {}, {}, Counter()
        idle = deque(range(self.workers))
        events: list[UnitEvent] = []
        t0 = time.perf_counter()
        self.unit_count += len(units)
        while todo or inflight:
            while todo and idle:
                k, u = idle.popleft(), todo.popleft()
                if self._actors[k] is None:              # replaces one that died
                    self._spawn(k)
                tries[u.id] += 1
                inflight[submit(self._actors[k], u, tries[u.id])] = (k, u)
            for ev in events:
                self._emit(ev)
            events.clear()
            [ref], _ = ray.wait(list(inflight), num_returns=1)
            k, u = inflight.pop(ref)
            idle.append(k)
            try:
                out = ray.get(ref)
            except ray.exceptions.RayTaskError as e:     # an exception in our code: a rerun repeats it
                raise FleetError(f"unit {u.describe()} failed on worker {k}: {e}") from None
            except ray.exceptions.RayActorError as e:
                err = _first_lines(e)
                if e.actor_init_failed:
                    raise FleetError(f"worker {k} could not start: {err}") from None
                self.deaths.append({"worker": k, "pid": self.pid(k), "unit": u.id, "attempt": tries[u.id],
                                    "error": err})
                ray.kill(self._actors[k])
                self._actors[k] = self._pids[k] = None
                if tries[u.id] <= self.retries:
                    self.retries_used += 1
                    todo.appendleft(u)
                    events.append(UnitEvent("died", k, u, error=err))
                else:
                    self.lost.append({**u.describe(), "error": err})
                    events.append(UnitEvent("lost", k, u, error=err))
                continue
            self.units_per_worker[k] += 1
            results[u.id] = out
            if on_result is not None:
                on_result(u, out)
            events.append(UnitEvent("done", k, u, out))
        for ev in events:
            self._emit(ev)
        self.wall_s += time.perf_counter() - t0
        return results

    def _emit(self, ev: UnitEvent) -> None:
        if self.on_unit is not None:
            self.on_unit(self, ev)

    # -- work ----------------------------------------------------------------------------------------
    def episodes(self, *, episodes: int, seed: int = 0, unit_size: Optional[int] = None, record=None,
                 meta: Optional[dict] = None) -> list:
        """Episodes seed..seed+episodes-1 over the workers; returns their EpisodeResults in seed
        order (a lost unit's seeds are missing: see `self.lost`). With `record` (the driver's
        DatasetWriter) every episode is committed into it, in seed order, while the rest run."""
        from embodia.agent.loop.core import EpisodeResult
        units = blocks(episodes, seed, self.workers, unit_size)
        shards = Path(record.steplog_dir) / SHARD_DIR if record is not None else None
        if shards is not None:
            shutil.rmtree(shards, ignore_errors=True)     # a killed driver's uncommitted shards
        shard_of: dict[int, Path] = {}
        committed: dict[int, int] = {}                   # seed -> episode_index
        order, done, n_lost = deque(u.id for u in units), set(), len(self.lost)

        def submit(actor, u, attempt):
            if shards is None:
                return actor.episodes.remote(list(u.seeds))
            shard_of[u.id] = shards / f"unit-{u.id:04d}-try-{attempt}"
            return actor.episodes.remote(list(u.seeds), str(shard_of[u.id]), meta)

        def commit_in_order(u=None, rows=None):
            if u is not None:
                done.add(u.id)
            lost = {x["unit"] for x in self.lost[n_lost:]}
            while order and (order[0] in done or order[0] in lost):
                uid = order.popleft()
                if uid in done:
                    committed.update(merge_shard(record, shard_of[uid]))

        results = self._run(units, submit, on_result=commit_in_order if shards is not None else None)
        if shards is not None:
            commit_in_order()                             # the units after a lost one
            shutil.rmtree(shards, ignore_errors=True)     # what workers that died had written
        out = [EpisodeResult(**r) for rows in results.values() for r in rows]
        for r in out:
            r.episode_index = committed.get(r.seed, r.episode_index)
        self.episodes_run += len(out)
        return sorted(out, key=lambda r: r.seed)

    def streams(self, *, arms: list[str], streams: int, episodes: int, seed: int = 0) -> dict:
        """Every (arm, stream) of the memory evaluation; returns {(arm, stream): run_stream(...)}
        without the lost ones (see `self.lost`)."""
        units = stream_units(arms, streams, episodes, seed)
        results = self._run(units, lambda actor, u, attempt: actor.stream.remote(u.arm, u.stream, episodes, seed))
        by_id = {u.id: u for u in units}
        self.episodes_run += len(results) * episodes
        return {(by_id[i].arm, by_id[i].stream): res for i, res in results.items()}

    def report(self) -> dict:
        """The report's "fleet" section."""
        return {"workers": self.workers, "address": self.where, "startup_s": self.startup_s,
                "wall_s": self.wall_s, "episodes_per_s": self.episodes_run / self.wall_s if self.wall_s else None,
                "units": self.unit_count, "units_per_worker": self.units_per_worker, "retries_allowed": self.retries,
                "deaths": self.deaths, "retries": self.retries_used, "lost": self.lost,
                **({"memory": self.memory_summary} if self.memory is not None else {})}


def check_device(device, *, record: bool = False) -> None:
    """Every worker opens its own copy of the device: only a simulator can be opened N times."""
    caps = device.capabilities
    if not caps & {"deterministic", "sandbox"}:
        raise FleetError(f"--workers opens the device once per worker; {device.embodiment.name!r} is not a "
                         "simulator (run it without --workers)")
    if record and device.embodiment.is_gui:
        raise FleetError("--workers records robot datasets; record GUI episodes without --workers")


def fleet_summary(results: list, fleet_report: dict, *, seed: int, **header) -> dict:
    """The serial eval report (`summarize`) of a fleet's results plus its "fleet" section; episode
    numbers stay seed - SEED even where a lost unit left a gap."""
    from embodia.agent.evaluation.evaluate import summarize
    rep = summarize(results, seed=seed, **header)
    for row in rep["per_episode"]:
        row["episode"] = row["seed"] - seed
    rep["fleet"] = fleet_report
    return rep


def _first_lines(e: BaseException, n: int = 400) -> str:
    s = " ".join(str(e).split())
    return s if len(s) <= n else s[: n - 3] + "..."


def complete_streams(runs: dict, arms: list[str], streams: int) -> tuple[dict, list[int]]:
    """The runs of the streams every arm finished, renumbered 0..m-1 for `build_report` (arms are
    paired stream by stream, so a stream with a lost arm leaves the comparison), and the original
    indices of the streams kept."""
    kept = [s for s in range(streams) if all((a, s) in runs for a in arms)]
    return {(a, i): runs[a, s] for i, s in enumerate(kept) for a in arms}, kept
