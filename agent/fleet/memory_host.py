"""The fleet's shared memory: one `SuccessMemory` owned by a Ray actor (`MemoryHost`), which
serializes writes and keeps each worker's bookkeeping apart, and the stand-in each worker's policy
steers through (`MemoryProxy`). The fleet that starts them is `embodia.agent.fleet.runner`."""
from __future__ import annotations

from collections import Counter

from embodia.agent.fleet.threads import one_thread


class MemoryHost:
    """A Ray actor owning the fleet's one SuccessMemory. Calls run one at a time, so writes are
    serialized. A SuccessMemory tracks the entries that steered *the* current episode; the host keeps
    that bookkeeping per client (worker) and lends it for the client's calls
    (`SuccessMemory.lend_episode`), so one worker's failure never credits entries another used."""

    def __init__(self, path: str, load: dict, save_every: int = 1):   # 1: a kill loses one episode
        from embodia.memory import SuccessMemory
        one_thread()
        self.path, self.save_every = str(path), max(1, int(save_every))
        self.mem = SuccessMemory.load(self.path, missing_ok=True, lock=True, **load)   # the fleet's one writer
        ids = [int(self.mem.entries(ns)["episode_id"].max(initial=0)) for ns in self.mem.namespaces()]
        self._next_id = max(ids, default=0) + 1      # ids stay unique across workers and runs
        self._episode: dict[str, dict] = {}          # client -> SuccessMemory.lend_episode bookkeeping
        self.stored: Counter = Counter()             # client -> successes stored
        self.saves, self._unsaved = 0, 0

    def _as(self, client: str):
        return self.mem.lend_episode(self._episode.setdefault(client, {}))

    def describe(self) -> dict:
        m = self.mem
        return {"config": m.config, "dims": dict(key_dim=m.key_dim, horizon=m.horizon, action_dim=m.action_dim,
                                                 hist_len=m.hist_len),
                "encoder_id": m.encoder_id, "normalizer_hash": m.normalizer_hash}

    def query(self, namespace, key, hist=None, **kw):
        return self.mem.query(namespace, key, hist, **kw)

    def last_episode_id(self) -> int:
        """The highest source episode id given out so far (the host numbers stored episodes itself)."""
        return self._next_id - 1

    def record_use(self, client: str, namespace, retrieval) -> int:
        with self._as(client) as m:
            return m.record_use(namespace, retrieval)

    def end_episode(self, client: str, success: bool, namespace=None) -> dict:
        with self._as(client) as m:
            return m.end_episode(success, namespace=namespace)

    def add_episode(self, client: str, namespace, keys, actions, *, success: bool, episode_id: int = -1,
                    **kw) -> int:
        if not success:
            return 0
        with self._as(client) as m:       # the client's success: the sources that steered it go with it
            n = m.add_episode(namespace, keys, actions, success=True, episode_id=self._next_id, **kw)
        self._next_id += 1
        self.stored[client] += 1
        self._unsaved += 1
        if self._unsaved >= self.save_every:
            self.save()
        return n

    def stats(self) -> dict:
        return self.mem.stats()

    def entries(self, namespace) -> dict:
        return self.mem.entries(namespace)

    def save(self) -> str:
        self.mem.save(self.path)
        self.saves += 1
        self._unsaved = 0
        return self.path

    def close(self) -> dict:
        """Save (every stored success is on disk when this returns), give the writer lock back and summarize."""
        from embodia.memory.persist import let_go
        self.save()
        let_go(self.mem)
        return {"path": self.path, "saves": self.saves, "save_every": self.save_every,
                "stored_successes": dict(self.stored), "stats": self.mem.stats()}


class MemoryProxy:
    """The SuccessMemory methods a SteeredPolicy (and `run_stream`) calls, forwarded to a MemoryHost.
    `query` is one Ray call per decision (~2 ms on one machine, see docs/benchmarks/scale.md); `guidance` is a
    pure function of the retrieval and the config, so it runs here; `record_use` is sent without
    waiting (one caller's calls run in order) and its errors surface at `end_episode`."""

    def __init__(self, host, client: str):
        import ray

        from embodia.memory import SuccessMemory
        self._ray, self.host, self.client = ray, host, client
        d = ray.get(host.describe.remote())
        self._local = SuccessMemory(d["config"], **d["dims"], encoder_id=d["encoder_id"],
                                    normalizer_hash=d["normalizer_hash"])     # empty: for guidance()
        self.config, self.encoder_id = d["config"], d["encoder_id"]
        self._pending: list = []

    def _get(self, ref):
        return self._ray.get(ref)

    def query(self, namespace, key, hist=None, **kw):
        return self._get(self.host.query.remote(namespace, key, hist, **kw))

    def guidance(self, retrieval, steps: int = 10):
        return self._local.guidance(retrieval, steps)

    def last_episode_id(self) -> int:
        return self._get(self.host.last_episode_id.remote())

    def record_use(self, namespace, retrieval) -> None:
        self._pending.append(self.host.record_use.remote(self.client, namespace, retrieval))

    def end_episode(self, success: bool, namespace=None) -> dict:
        pending, self._pending = self._pending, []
        self._ray.get(pending)
        return self._get(self.host.end_episode.remote(self.client, success, namespace))

    def add_episode(self, namespace, keys, actions, **kw) -> int:
        return self._get(self.host.add_episode.remote(self.client, namespace, keys, actions, **kw))

    def stats(self) -> dict:
        return self._get(self.host.stats.remote())

    def entries(self, namespace) -> dict:
        return self._get(self.host.entries.remote(namespace))

    def save(self, path=None) -> str:
        """Saves at the host's own path (the fleet's memory file)."""
        return self._get(self.host.save.remote())


def memory_load_args(policy) -> dict:
    """What MemoryHost needs to load (or start) a memory for this VLA policy's keys and chunks."""
    from embodia.policies.robot.steered import memory_for, normalizer_hash
    fresh = memory_for(policy)
    return dict(encoder_id=fresh.encoder_id, normalizer_hash=normalizer_hash(policy), key_dim=fresh.key_dim,
                horizon=fresh.horizon, action_dim=fresh.action_dim, hist_len=fresh.hist_len)
