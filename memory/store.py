"""Success memory: store verified successful action chunks, retrieve, filter, build an elite prior.

Leaf module: numpy, faiss and the standard library only. Everything action-valued is in the
embodiment's NORMALIZED action units (float32); keys are whatever the caller's key encoder gives
(standardized state for ``metric="l2"``, any embedding for ``metric="cosine"``).

Typical loop (policy side)::

    mem = SuccessMemory(MemoryConfig(), key_dim=dk, horizon=16, action_dim=2,
                        encoder_id="state-zscore-v1", normalizer_hash=stable_hash(norm.to_json()))
    ns = make_namespace("twogap-pusher", "push-through-gap")
    r = mem.query(ns, key, hist=executed[-8:], t=step)
    g = mem.guidance(r, steps=K)                     # None -> sample unchanged
    if g is not None:
        tau0, prior = g                              # prior [H, D_ns]; pad to D_max, mask
        x0 = (1 - tau0) * eps + tau0 * prior
        chunk = sample(..., x0=x0, tau0=tau0)
        mem.record_use(ns, r)
    ...
    mem.end_episode(success, namespace=ns)
    mem.add_episode(ns, keys, actions, success=success, episode_id=i)   # ignored unless success
    mem.save(path)

Not thread-safe: one memory per control loop (or guard it with a lock).
"""
from __future__ import annotations

import hashlib
import json
import math
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

from embodia.memory import persist
from embodia.memory.config import MemoryConfig
from embodia.memory.index import KeyIndex
from embodia.memory.persist import SCHEMA_VERSION, MemoryFileError, MemoryMismatch, MemoryStoreError, entry_columns

__all__ = ["SuccessMemory", "Retrieval", "MemoryStoreError", "MemoryFileError", "MemoryMismatch",
           "make_namespace", "stable_hash", "tau0_from_confidence", "SCHEMA_VERSION"]

_TINY = 1e-12
_MAX_LENGTHS = 1000


# ------------------------------------------------------------------------------------------------
# errors and small helpers
# ------------------------------------------------------------------------------------------------
def make_namespace(embodiment: str, task: str) -> str:
    """The namespace string of an (embodiment, task) pair. Entries never cross namespaces."""
    return f"{embodiment}/{task}"


def stable_hash(obj) -> str:
    """sha256 hex of bytes, of a str (utf-8), or of a JSON-able object (canonical JSON): use it for
    ``encoder_id`` / ``normalizer_hash`` (e.g. ``stable_hash(normalizer.to_json())``)."""
    if isinstance(obj, bytes):
        data = obj
    elif isinstance(obj, str):
        data = obj.encode("utf-8")
    else:
        data = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def tau0_from_confidence(confidence: float, cfg: MemoryConfig, steps: int) -> float:
    """THE guidance formula (kept in one place): g = clip((c - confidence_floor) / (confidence_saturation - confidence_floor), 0, 1),
    tau0 = max_start_time * g snapped to the Euler grid linspace(0, 1, steps + 1) with halves rounding up
    (as ``action_heads.grid_index``). 0.0 means: do not steer."""
    if steps < 1:
        raise ValueError("steps must be >= 1")
    c = float(confidence)
    if not np.isfinite(c) or c < cfg.confidence_floor:
        return 0.0
    g = min(1.0, max(0.0, (c - cfg.confidence_floor) / (cfg.confidence_saturation - cfg.confidence_floor)))
    k0 = int(math.floor(cfg.max_start_time * g * steps + 0.5 + 1e-9))
    return k0 / steps


@dataclass
class Retrieval:
    """Result of one ``SuccessMemory.query``. Arrays are float32, actions normalized."""
    namespace: str
    elite_ids: np.ndarray                       # int64 [m] entry ids of the elite set
    weights: np.ndarray                         # [m], sum 1 (empty when m = 0)
    similarities: np.ndarray                    # [m]
    prior: Optional[np.ndarray]                 # [H, D_ns] weighted mean of the elite chunks
    prior_std: Optional[np.ndarray]             # [H, D_ns] weighted std
    prior_valid: Optional[np.ndarray]           # [H] bool: some elite chunk is real (not padding)
    confidence: float                           # in [0, 1]; 0 when the elite set is empty
    n_retrieved: int = 0                        # neighbours returned by FAISS
    n_candidates: int = 0                       # ... with similarity >= min_similarity
    n_kept: int = 0                             # ... that pass the consistency filter
    progress_hat: Optional[float] = None
    sigma: Optional[float] = None               # similarity scale used (l2)
    components: Dict[str, float] = field(default_factory=dict)   # c_sim, c_agree, c_n
    reason: str = "ok"                          # why the elite set is empty, else "ok"
    timing_ms: float = 0.0

    @property
    def n_elite(self) -> int:
        return int(self.elite_ids.shape[0])

    @property
    def empty(self) -> bool:
        return self.n_elite == 0


# ------------------------------------------------------------------------------------------------
# per-namespace storage
# ------------------------------------------------------------------------------------------------
class _Columns:
    """Growable column arrays (amortised doubling); rows are kept sorted by id."""

    def __init__(self, schema: Dict[str, tuple]):
        self.schema = schema
        self.n = 0
        self.data = {k: np.zeros((0,) + shp, dt) for k, (shp, dt) in schema.items()}

    def __getitem__(self, name: str) -> np.ndarray:
        return self.data[name][: self.n]

    def append(self, rows: Dict[str, np.ndarray]) -> None:
        m = int(np.asarray(rows["ids"]).shape[0])
        need = self.n + m
        cap = self.data["ids"].shape[0]
        if need > cap:
            new_cap = max(need, 2 * cap, 64)
            for k, (shp, dt) in self.schema.items():
                arr = np.zeros((new_cap,) + shp, dt)
                arr[: self.n] = self.data[k][: self.n]
                self.data[k] = arr
        for k in self.schema:
            self.data[k][self.n: need] = rows[k]
        self.n = need

    def keep(self, mask: np.ndarray) -> None:
        for k in self.schema:
            kept = self.data[k][: self.n][mask]
            self.data[k] = np.ascontiguousarray(kept)
        self.n = int(mask.sum())

    def arrays(self) -> Dict[str, np.ndarray]:
        return {k: np.ascontiguousarray(self.data[k][: self.n]) for k in self.schema}


class _Namespace:
    def __init__(self, name: str, mem: "SuccessMemory", action_dim: int):
        cfg = mem.config
        self.name = name
        self.action_dim = int(action_dim)
        self.cols = _Columns(entry_columns(mem.key_dim, mem.horizon, mem.hist_len, self.action_dim))
        self.index = KeyIndex(mem.key_dim, cfg.metric, cfg.ivf_threshold, cfg.ivf_nlist,
                              cfg.ivf_nprobe)
        self.clock = 0            # episodes of this namespace (successes added + failures reported)
        self.episodes = 0         # successful episodes added
        self.merges = 0
        self.evictions = 0
        self.deleted_credit = 0
        self.queries = 0
        self.next_id = 0
        self.success_lengths: List[int] = []
        self.sigma_hist: deque = deque(maxlen=cfg.sigma_window)
        # episode-level failure credit: source episode id -> [w_succ, w_fail, n_fail]
        self.source_credit: Dict[int, List[float]] = {}
        self.deleted_episodes = 0
        # stored source episode -> {source episode that steered it: weight} (credit_cascade)
        self.parents: Dict[int, Dict[int, float]] = {}

    @property
    def n(self) -> int:
        return self.cols.n

    def rows_of(self, ids: np.ndarray) -> np.ndarray:
        """Rows of existing ids (-1 for ids that are gone)."""
        all_ids = self.cols["ids"]
        ids = np.asarray(ids, dtype=np.int64)
        r = np.searchsorted(all_ids, ids)
        r = np.minimum(r, max(self.n - 1, 0))
        ok = (self.n > 0) & (all_ids[r] == ids) if self.n else np.zeros(ids.shape, bool)
        return np.where(ok, r, -1)


# ------------------------------------------------------------------------------------------------
# the memory
# ------------------------------------------------------------------------------------------------
class SuccessMemory:
    """Online memory of action chunks from verified successful episodes, one FAISS index per
    namespace (= (embodiment, task), see ``make_namespace``).

    ``key_dim``, ``horizon`` H and ``hist_len`` h are global; the action dimension is fixed per
    namespace by its first episode (at most ``action_dim``), so every embodiment's chunks keep their
    own channels and RMSE thresholds mean the same thing everywhere. ``encoder_id`` and
    ``normalizer_hash`` identify the key encoder and the action normalizer: ``load`` refuses a
    memory written under other ones.
    """

    def __init__(self, config: Optional[MemoryConfig], key_dim: int, horizon: int, action_dim: int,
                 hist_len: int = 8, *, encoder_id: str, normalizer_hash: str):
        self.config = config if config is not None else MemoryConfig()
        if min(key_dim, horizon, action_dim) < 1 or hist_len < 0:
            raise ValueError("key_dim, horizon and action_dim must be >= 1, hist_len >= 0")
        self.key_dim = int(key_dim)
        self.horizon = int(horizon)
        self.action_dim = int(action_dim)
        self.hist_len = int(hist_len)
        self.encoder_id = str(encoder_id)
        self.normalizer_hash = str(normalizer_hash)
        self._ns: Dict[str, _Namespace] = {}
        self._uses: Dict[str, set] = {}       # namespace -> ids that steered the current episode
        self._src_uses: Dict[str, Dict[int, float]] = {}   # namespace -> source episode -> weight
        # namespace -> the sources that steered the success just reported, until add_episode stores it
        self._parents: Dict[str, Dict[int, float]] = {}
        # ids of pending episodes a person decided (memory/pending.py): saved with the memory, so a
        # record whose removal a crash cut short is dropped, not applied a second time
        self.reviewed: set = set()
        # namespace -> noise seed -> [successes, episodes, order of its latest success] (recall_seed)
        self.seeds: Dict[str, Dict[int, List[int]]] = {}

    # -- introspection ---------------------------------------------------------------------------
    def namespaces(self) -> List[str]:
        return sorted(self._ns)

    def __len__(self) -> int:
        return sum(ns.n for ns in self._ns.values())

    def __contains__(self, namespace: str) -> bool:
        return namespace in self._ns

    def size(self, namespace: str) -> int:
        ns = self._ns.get(namespace)
        return 0 if ns is None else ns.n

    def entries(self, namespace: str) -> Dict[str, np.ndarray]:
        """Copies of a namespace's columns (plus the derived ``efficiency`` = T_min / ep_len)."""
        ns = self._ns.get(namespace)
        if ns is None:
            return {}
        out = ns.cols.arrays()
        t_min = min(ns.success_lengths) if ns.success_lengths else 1
        out["efficiency"] = (t_min / np.maximum(out["ep_len"], 1)).astype(np.float32)
        return out

    def last_episode_id(self) -> int:
        """The highest source episode id the memory knows (stored entries, failure credit, who steered
        whom), 0 when none: a control loop that reopens a saved memory numbers its episodes after it,
        so credit for a new episode never lands on an old one that had the same number."""
        ids = [0]
        for ns in self._ns.values():
            if ns.n:
                ids.append(int(ns.cols["episode_id"].max()))
            ids.extend(ns.source_credit)
            ids.extend(ns.parents)
            ids.extend(p for ps in ns.parents.values() for p in ps)
        return max(ids)

    def stats(self) -> Dict[str, dict]:
        out = {}
        for name, ns in sorted(self._ns.items()):
            sup = ns.cols["n_support"]
            sl = ns.success_lengths
            out[name] = {
                "entries": ns.n, "episodes": ns.episodes, "clock": ns.clock,
                "supports": int(sup.sum()), "dedup_merges": ns.merges,
                "evictions": ns.evictions, "deleted_by_credit": ns.deleted_credit,
                "episodes_deleted_by_credit": ns.deleted_episodes,
                "queries": ns.queries, "action_dim": ns.action_dim, "index": ns.index.kind,
                "median_success_len": float(np.median(sl)) if sl else None,
                "sigma": self._sigma(ns) if self.config.metric == "l2" and
                (self.config.sigma is not None or ns.sigma_hist) else None,
            }
            if self.seeds.get(name):     # seed recall: the successful noise seeds kept, the one next in line
                out[name].update(noise_seeds=len(self.seeds[name]), recalled_seed=self.recall_seed(name))
        return out

    # -- insertion -------------------------------------------------------------------------------
    def new_namespace(self, name: str, action_dim: int) -> "_Namespace":
        """An empty namespace of this memory, not yet registered (the loader fills it first)."""
        return _Namespace(name, self, action_dim)

    def _namespace(self, name: str, action_dim: int) -> _Namespace:
        if not isinstance(name, str) or not name:
            raise ValueError("namespace must be a non-empty string")
        ns = self._ns.get(name)
        if ns is None:
            if action_dim > self.action_dim:
                raise ValueError(f"action dim {action_dim} > the memory's action_dim {self.action_dim}")
            ns = self._ns[name] = _Namespace(name, self, action_dim)
        elif ns.action_dim != action_dim:
            raise ValueError(f"namespace {name!r} holds {ns.action_dim}-d actions, got {action_dim}-d "
                             "(one namespace per embodiment)")
        return ns

    def _prep_keys(self, keys: np.ndarray) -> np.ndarray:
        keys = np.asarray(keys, dtype=np.float32)
        if keys.ndim != 2 or keys.shape[1] != self.key_dim:
            raise ValueError(f"keys must be [n, {self.key_dim}], got {keys.shape}")
        if not np.all(np.isfinite(keys)):
            raise ValueError("keys must be finite")
        if self.config.metric == "cosine":
            keys = keys / np.maximum(np.linalg.norm(keys, axis=1, keepdims=True), _TINY)
        return np.ascontiguousarray(keys, dtype=np.float32)

    def add_episode(self, namespace: str, keys, actions, *, success: bool, episode_id: int = -1,
                    stride: Optional[int] = None, ep_len: Optional[int] = None,
                    progress=None) -> int:
        """Cut a verified SUCCESSFUL episode into segments and store them.

        keys [T, d_k]: the key at each control step (before executing action t); actions [T, D]:
        the executed actions, normalized. A segment every ``stride`` steps (default H_exec =
        horizon // 2): key at t, chunk a[t:t+H] (padded with the last action, ``chunk_mask`` marks
        the real steps), hist = the h actions before t (right-aligned, ``hist_n`` valid), progress
        t / ep_len (or ``progress[t]`` for multi-stage tasks), ep_len = steps to success (default T).

        ``success=False`` is ignored (returns 0, nothing stored): only verified successes enter the
        memory, so the loop may call this after every episode. Failures are reported through
        ``end_episode``. Returns the number of segments stored or merged into near-identical
        entries (dedup).
        """
        if not success:
            return 0
        parents = self._parents.pop(namespace, None)       # who steered it (credit_cascade)
        if parents and episode_id >= 0 and namespace in self._ns:
            self._ns[namespace].parents[int(episode_id)] = parents
        actions = np.asarray(actions, dtype=np.float32)
        if actions.ndim != 2 or actions.shape[0] < 1:
            raise ValueError(f"actions must be [T, D] with T >= 1, got {actions.shape}")
        keys = np.asarray(keys, dtype=np.float32)
        if keys.shape[0] != actions.shape[0]:
            raise ValueError(f"keys ({keys.shape[0]}) and actions ({actions.shape[0]}) differ in length")
        if not np.all(np.isfinite(actions)):
            raise ValueError("actions must be finite")
        T, D = actions.shape
        H, h = self.horizon, self.hist_len
        stride = int(stride or self.config.stride or max(1, H // 2))
        L = int(ep_len) if ep_len is not None else T
        if L < 1:
            raise ValueError("ep_len must be >= 1")
        if progress is not None:
            progress = np.asarray(progress, dtype=np.float32).reshape(-1)
            if progress.shape[0] != T:
                raise ValueError("progress must have one value per step")
        ns = self._namespace(namespace, D)
        keys = self._prep_keys(keys)
        ts = np.arange(0, T, stride)
        m = ts.shape[0]
        idx = np.minimum(ts[:, None] + np.arange(H)[None, :], T - 1)            # pad with the last action
        chunks = actions[idx]                                                     # [m, H, D]
        cmask = (ts[:, None] + np.arange(H)[None, :]) < T
        hist = np.zeros((m, h, D), np.float32)
        hist_n = np.minimum(ts, h).astype(np.int16)
        for i, t in enumerate(ts):
            n = int(hist_n[i])
            if n:
                hist[i, h - n:] = actions[t - n:t]
        prog = progress[ts] if progress is not None else np.minimum(ts / L, 1.0)
        ns.clock += 1
        ns.episodes += 1
        ns.success_lengths.append(L)
        del ns.success_lengths[:-_MAX_LENGTHS]          # the recent successes set T~ and T_min
        now = time.time()
        rows = {
            "keys": keys[ts], "chunks": chunks, "chunk_mask": cmask, "hist": hist, "hist_n": hist_n,
            "progress": prog.astype(np.float32), "episode_id": np.full(m, episode_id, np.int64),
            "step": ts.astype(np.int32), "ep_len": np.full(m, L, np.int32),
            "created_clock": np.full(m, ns.clock, np.int64), "last_used_clock": np.full(m, -1, np.int64),
            "n_support": np.ones(m, np.int32), "n_used": np.zeros(m, np.int32),
            "n_used_fail": np.zeros(m, np.int32), "created_at": np.full(m, now),
            "last_used_at": np.zeros(m),
        }
        self._insert(ns, rows, dedup=self.config.dedup)
        return m

    def add_entries(self, namespace: str, keys, chunks, *, hist=None, hist_n=None, progress,
                    chunk_mask=None, episode_id=None, step=None, ep_len=None,
                    dedup: bool = False) -> int:
        """Bulk insert of ready-made entries (import, benchmarks); no segmentation, no episode
        clock tick. keys [n, d_k], chunks [n, H, D], progress [n]; optional hist [n, h, D] with
        hist_n [n], chunk_mask [n, H], episode_id/step/ep_len [n]."""
        chunks = np.asarray(chunks, dtype=np.float32)
        if chunks.ndim != 3 or chunks.shape[1] != self.horizon:
            raise ValueError(f"chunks must be [n, {self.horizon}, D], got {chunks.shape}")
        n, _, D = chunks.shape
        ns = self._namespace(namespace, D)
        keys = self._prep_keys(keys)
        if keys.shape[0] != n:
            raise ValueError("keys and chunks differ in length")

        def col(x, shape, dt, default):
            return np.full(shape, default, dt) if x is None else np.asarray(x, dt).reshape(shape)

        rows = {
            "keys": keys, "chunks": chunks,
            "chunk_mask": col(chunk_mask, (n, self.horizon), np.bool_, True),
            "hist": col(hist, (n, self.hist_len, D), np.float32, 0.0),
            "hist_n": col(hist_n, (n,), np.int16, 0 if hist is None else self.hist_len),
            "progress": col(progress, (n,), np.float32, 0.0),
            "episode_id": col(episode_id, (n,), np.int64, -1), "step": col(step, (n,), np.int32, 0),
            "ep_len": col(ep_len, (n,), np.int32, 1),
            "created_clock": np.full(n, ns.clock, np.int64), "last_used_clock": np.full(n, -1, np.int64),
            "n_support": np.ones(n, np.int32), "n_used": np.zeros(n, np.int32),
            "n_used_fail": np.zeros(n, np.int32), "created_at": np.full(n, time.time()),
            "last_used_at": np.zeros(n),
        }
        if not ns.success_lengths and ep_len is not None:
            ns.success_lengths.append(int(np.median(rows["ep_len"])))
        self._insert(ns, rows, dedup=dedup)
        return n

    def _dedup_match(self, ns: _Namespace, key: np.ndarray, chunk: np.ndarray) -> int:
        """Row of a near-identical entry (key and chunk), or -1."""
        if ns.n == 0:
            return -1
        cfg = self.config
        score, ids = ns.index.search(key[None], min(4, ns.n))
        score, ids = score[0], ids[0]
        ok = ids >= 0
        if cfg.metric == "l2":
            ok &= score / math.sqrt(self.key_dim) <= cfg.dedup_key_rms
        else:
            ok &= score >= cfg.dedup_cos
        if not ok.any():
            return -1
        rows = ns.rows_of(ids[ok])
        rows = rows[rows >= 0]
        if rows.size == 0:
            return -1
        rmse = np.sqrt(((ns.cols["chunks"][rows] - chunk[None]) ** 2).mean(axis=(1, 2)))
        j = int(np.argmin(rmse))
        return int(rows[j]) if rmse[j] <= cfg.dedup_chunk_rmse else -1

    def _append(self, ns: _Namespace, rows: Dict[str, np.ndarray]) -> None:
        m = rows["keys"].shape[0]
        rows["ids"] = np.arange(ns.next_id, ns.next_id + m, dtype=np.int64)
        ns.next_id += m
        ns.cols.append(rows)
        if not ns.index.maybe_rebuild(ns.cols["keys"], ns.cols["ids"]):
            ns.index.add(rows["keys"], rows["ids"])

    def _insert(self, ns: _Namespace, rows: Dict[str, np.ndarray], dedup: bool) -> None:
        m = rows["keys"].shape[0]
        if not dedup:
            self._append(ns, rows)
        else:
            for i in range(m):
                r = self._dedup_match(ns, rows["keys"][i], rows["chunks"][i])
                if r >= 0:
                    c = ns.cols
                    c.data["n_support"][r] += 1
                    c.data["created_clock"][r] = ns.clock          # refresh: ageing restarts
                    c.data["created_at"][r] = rows["created_at"][i]
                    c.data["ep_len"][r] = min(int(c.data["ep_len"][r]), int(rows["ep_len"][i]))
                    ns.merges += 1
                else:
                    self._append(ns, {k: v[i:i + 1] for k, v in rows.items()})
        self._enforce_capacity(ns)

    # -- removal ---------------------------------------------------------------------------------
    def _delete_rows(self, ns: _Namespace, rows: np.ndarray) -> int:
        rows = np.unique(np.asarray(rows, dtype=np.int64))
        if rows.size == 0:
            return 0
        ns.index.remove(ns.cols["ids"][rows])
        keep = np.ones(ns.n, bool)
        keep[rows] = False
        ns.cols.keep(keep)
        ns.index.maybe_rebuild(ns.cols["keys"], ns.cols["ids"])
        return int(rows.size)

    def _enforce_capacity(self, ns: _Namespace) -> int:
        cap = self.config.capacity
        if cap is None or ns.n <= cap:
            return 0
        c = ns.cols
        age = (ns.clock - c["created_clock"]).astype(np.float64)
        score = c["n_support"] * 0.5 ** (age / self.config.half_life) - \
            self.config.fail_penalty * c["n_used_fail"]
        order = np.lexsort((c["ids"], c["created_clock"], score))   # lowest score, then oldest
        n = self._delete_rows(ns, order[: ns.n - cap])
        ns.evictions += n
        return n

    # -- retrieval -------------------------------------------------------------------------------
    def _sigma(self, ns: _Namespace) -> float:
        if self.config.sigma is not None:
            return float(self.config.sigma)
        if not ns.sigma_hist:
            return 1.0
        return max(self.config.sigma_min, float(np.median(np.asarray(ns.sigma_hist))))

    def _empty(self, namespace: str, t0: float, reason: str, **kw) -> Retrieval:
        z = np.zeros(0, np.float32)
        return Retrieval(namespace, np.zeros(0, np.int64), z, z, None, None, None, 0.0,
                         reason=reason, timing_ms=(time.perf_counter() - t0) * 1e3, **kw)

    def query(self, namespace: str, key, hist=None, *, t: Optional[int] = None,
              progress: Optional[float] = None, prev_tail=None) -> Retrieval:
        """Retrieve, filter, and build the elite prior for the current decision.

        key [d_k]: the current key. hist [n, D]: the actions executed before now, most recent LAST,
        normalized (n = 0..; only the last h are used; ``None`` skips the history filter).
        t: control steps since the episode start -> p_hat = t / median success length, capped by
        median(progress of the top-8 neighbours) + 0.1 (ARCHITECTURE.md 5.2); ``progress`` overrides p_hat
        (multi-stage tasks); neither -> no progress filter. prev_tail [L, D]: the not-yet-executed
        part of the current chunk when replanning mid-chunk (continuity filter).

        Side effect (``metric="l2"``, no fixed sigma): the query's distance to its sigma_rank-th
        neighbour enters the namespace's running sigma calibration.
        """
        t0 = time.perf_counter()
        cfg = self.config
        ns = self._ns.get(namespace)
        if ns is None or ns.n == 0:
            return self._empty(namespace, t0, "empty namespace")
        ns.queries += 1
        rows, score = self._neighbours(ns, key)
        if rows.size == 0:
            return self._empty(namespace, t0, "no neighbours")
        sim, sigma = self._similarities(ns, score)
        p_hat = self._progress_estimate(ns, rows, sim, t, progress)
        kw = dict(n_retrieved=int(rows.size), progress_hat=p_hat, sigma=sigma)
        keep = sim >= cfg.min_similarity_value
        kw["n_candidates"] = int(keep.sum())
        if not keep.any():
            return self._empty(namespace, t0, "no candidate above min_similarity", **kw)
        rows, sim = rows[keep], sim[keep]
        reason = "filtered out"
        if cfg.consistency:
            keep, reason = self._consistent(ns, rows, hist, p_hat, prev_tail)
            rows, sim = rows[keep], sim[keep]
        kw["n_kept"] = int(rows.size)
        if rows.size == 0:
            return self._empty(namespace, t0, reason, **kw)
        # a merged (deduplicated) entry counts as n_support identical entries everywhere below
        mass = sim * ns.cols["n_support"][rows]
        elite = self._one_mode(ns.cols["chunks"][rows], mass)
        w, prior, std, valid, conf, kw["components"] = self._elite_prior(ns, rows[elite], sim[elite], mass, elite)
        return Retrieval(namespace, ns.cols["ids"][rows[elite]].copy(), w.astype(np.float32),
                         sim[elite].astype(np.float32), prior.astype(np.float32), std.astype(np.float32),
                         valid.copy(), float(min(1.0, max(0.0, conf))), reason="ok",
                         timing_ms=(time.perf_counter() - t0) * 1e3, **kw)

    # -- the steps of a query (ARCHITECTURE.md 5.2 - 5.5) -----------------------------------------
    def _neighbours(self, ns: _Namespace, key) -> Tuple[np.ndarray, np.ndarray]:
        """Rows and FAISS scores of the k nearest stored keys (ARCHITECTURE.md 5.3)."""
        q = self._prep_keys(np.asarray(key, dtype=np.float32).reshape(1, -1))
        score, ids = ns.index.search(q, min(self.config.k, ns.n))
        ok = ids[0] >= 0
        score, ids = score[0][ok], ids[0][ok]
        rows = ns.rows_of(ids)
        good = rows >= 0
        return rows[good], score[good]

    def _similarities(self, ns: _Namespace, score: np.ndarray) -> Tuple[np.ndarray, Optional[float]]:
        """Similarities in (0, 1] and the sigma used (L2: a kernel on distances, sigma calibrated on
        this query's distance to its sigma_rank-th neighbour); cosine scores as they are."""
        cfg = self.config
        if cfg.metric != "l2":
            return np.clip(score.astype(np.float64), -1.0, 1.0), None
        if cfg.sigma is None:
            ns.sigma_hist.append(float(score[min(cfg.sigma_rank, score.size) - 1]))
        sigma = self._sigma(ns)
        return np.exp(-(score.astype(np.float64) ** 2) / (2.0 * sigma * sigma)), sigma

    def _progress_estimate(self, ns: _Namespace, rows, sim, t, progress) -> Optional[float]:
        """p_hat (ARCHITECTURE.md 5.2): the caller's progress, else t over the median success length capped
        by the neighbours' progress; None without either."""
        cfg = self.config
        if progress is not None:
            return float(progress)
        if t is None or not ns.success_lengths:
            return None
        p_hat = min(1.0, float(t) / float(np.median(ns.success_lengths)))
        if rows.size >= cfg.p_knn_k:
            top = np.argsort(-sim, kind="stable")[: cfg.p_knn_k]
            p_hat = min(p_hat, float(np.median(ns.cols["progress"][rows[top]])) + cfg.p_knn_margin)
        return p_hat

    def _consistent(self, ns: _Namespace, rows, hist, p_hat, prev_tail) -> Tuple[np.ndarray, str]:
        """The trajectory-level filter (ARCHITECTURE.md 5.4): same recent actions, same phase, continuing the
        current chunk's tail. Returns the mask and, when it keeps nothing, which test failed last."""
        cfg, C = self.config, ns.cols
        keep, reason = np.ones(rows.size, bool), "filtered out"
        if hist is not None and self.hist_len > 0:
            keep &= self._history_ok(ns, rows, hist)
            if not keep.any():
                reason = "history mismatch"
        if p_hat is not None and keep.any():
            keep &= np.abs(C["progress"][rows] - p_hat) <= cfg.progress_tolerance
            if not keep.any():
                reason = "progress mismatch"
        if prev_tail is not None and keep.any():
            tail = self._actions_arg(prev_tail, ns, "prev_tail")[: self.horizon]
            if tail.shape[0]:
                err = np.sqrt(((C["chunks"][rows, : tail.shape[0]] - tail[None]) ** 2).mean(axis=(1, 2)))
                keep &= err <= cfg.continuity_tolerance
                if not keep.any():
                    reason = "tail mismatch"
        return keep, reason

    def _one_mode(self, chunks: np.ndarray, mass: np.ndarray) -> np.ndarray:
        """The elite mask (ARCHITECTURE.md 5.4): the densest chunk and those within mode_radius of it, so a
        left and a right path are never averaged; everything when mode selection is off."""
        cfg, n = self.config, chunks.shape[0]
        if not cfg.mode_selection or n <= 1:
            return np.ones(n, bool)
        flat = chunks.reshape(n, -1).astype(np.float64)
        sq = (flat * flat).sum(1)
        d2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * flat @ flat.T, 0.0) / flat.shape[1]
        dens = (np.exp(-d2 / (2.0 * cfg.chunk_kernel_width ** 2)) * mass[None, :]).sum(1)
        return np.sqrt(d2[int(np.argmax(dens))]) <= cfg.mode_radius

    def _elite_prior(self, ns: _Namespace, e_rows, e_sim, mass, elite):
        """Elite weights, the prior (their weighted mean chunk), its spread, the valid horizon and
        the confidence c_sim x c_agree x c_n with its components (ARCHITECTURE.md 5.5)."""
        cfg, C = self.config, ns.cols
        e_chunks = C["chunks"][e_rows].astype(np.float64)
        e_sup = C["n_support"][e_rows].astype(np.float64)
        w = np.exp((e_sim - e_sim.max()) / cfg.elite_temperature) * e_sup
        if cfg.efficiency_exponent:
            t_min = float(min(ns.success_lengths)) if ns.success_lengths else 1.0
            eff = np.minimum(1.0, t_min / np.maximum(C["ep_len"][e_rows].astype(np.float64), 1.0))
            w = w * eff ** cfg.efficiency_exponent
        w = w * (1.0 - C["n_used_fail"][e_rows] / (C["n_used"][e_rows] + 2.0))
        if not np.all(np.isfinite(w)) or w.sum() <= 0:
            w = np.ones_like(e_sim)
        w = w / w.sum()
        prior = np.tensordot(w, e_chunks, axes=1)                               # [H, D]
        std = np.sqrt(np.maximum(np.tensordot(w, (e_chunks - prior[None]) ** 2, axes=1), 0.0))
        valid = C["chunk_mask"][e_rows].any(axis=0)
        s_min = cfg.min_similarity_value
        c_sim = float(np.clip(((w * e_sim).sum() - s_min) / max(1.0 - s_min, _TINY), 0.0, 1.0))
        # spread: RMS deviation of the elite chunks from the prior (chunk-RMSE units, like mode_radius)
        var = std[valid] ** 2 if valid.any() else std ** 2
        spread = float(np.sqrt(var.mean()))
        share = float(mass[elite].sum() / max(mass.sum(), _TINY))
        c_agree = share * math.exp(-0.5 * (spread / cfg.chunk_kernel_width) ** 2)
        c_n = min(1.0, e_sup.sum() / cfg.min_support)
        conf = c_sim * c_agree * c_n
        if cfg.fixed_confidence is not None:
            conf = float(cfg.fixed_confidence)
        components = {"c_sim": float(c_sim), "c_agree": float(c_agree), "c_n": float(c_n), "spread": spread,
                      "share": share}
        return w, prior, std, valid, conf, components

    @staticmethod
    def _actions_arg(x, ns: _Namespace, what: str) -> np.ndarray:
        a = np.asarray(x, dtype=np.float32)
        if a.ndim == 1 and a.size == 0:
            a = a.reshape(0, ns.action_dim)
        if a.ndim != 2 or a.shape[1] != ns.action_dim:
            raise ValueError(f"{what} must be [n, {ns.action_dim}] (namespace {ns.name!r}), got {a.shape}")
        return a

    def _history_ok(self, ns: _Namespace, rows: np.ndarray, hist) -> np.ndarray:
        """Decayed RMSE (weight hist_decay**j, j steps back) over the steps both histories have."""
        h = self.hist_len
        cur = self._actions_arg(hist, ns, "hist")[-h:] if h else None
        n_now = 0 if cur is None else cur.shape[0]
        if n_now == 0:
            return np.ones(rows.size, bool)
        padded = np.zeros((h, ns.action_dim), np.float32)
        padded[h - n_now:] = cur
        hc = ns.cols["hist"][rows]                                              # [m, h, D]
        ov = np.minimum(ns.cols["hist_n"][rows].astype(np.int64), n_now)        # [m]
        j = np.arange(h)
        w = self.config.hist_decay ** (h - 1 - j)                               # most recent: 1
        W = w[None, :] * (j[None, :] >= (h - ov)[:, None])
        err = ((hc - padded[None]) ** 2).mean(-1)                               # [m, h]
        den = W.sum(1)
        wr = np.sqrt((W * err).sum(1) / np.maximum(den, _TINY))
        return (den <= 0) | (wr <= self.config.history_tolerance)

    # -- guidance --------------------------------------------------------------------------------
    def guidance(self, retrieval: Retrieval, steps: int = 10) -> Optional[Tuple[float, np.ndarray]]:
        """(tau0, prior [H, D_ns]) to start the flow sampler from ``(1 - tau0) eps + tau0 prior`` at
        grid time tau0, or None (sample unchanged): empty elite set, confidence below confidence_floor, or
        tau0 snapping to 0 on a grid of ``steps`` Euler steps. See ``tau0_from_confidence``.
        With ``config.replay`` the same decisions return tau0 = 1.0: execute the prior itself."""
        if retrieval is None or retrieval.empty or retrieval.prior is None:
            return None
        tau0 = tau0_from_confidence(retrieval.confidence, self.config, steps)
        if tau0 <= 0.0:
            return None
        if self.config.replay:
            tau0 = 1.0
        return tau0, retrieval.prior.copy()

    # -- failure credit --------------------------------------------------------------------------
    @contextmanager
    def lend_episode(self, uses: dict):
        """For one of several episodes that run at once over this memory (a server's connections, a
        fleet's workers): inside the block, ``record_use`` and ``end_episode`` track and credit the
        entries that steered the episode whose bookkeeping ``uses`` holds (a dict the caller keeps per
        episode, empty at first) instead of the memory's own current episode. Not thread-safe: hold
        the caller's lock for the whole block."""
        own = self._uses, self._src_uses, self._parents
        self._uses, self._src_uses, self._parents = (uses.setdefault("ids", {}), uses.setdefault("sources", {}),
                                                     uses.setdefault("parents", {}))
        try:
            yield self
        finally:      # end_episode starts them afresh
            uses["ids"], uses["sources"], uses["parents"] = self._uses, self._src_uses, self._parents
            self._uses, self._src_uses, self._parents = own

    def detach_uses(self) -> dict:
        """The current episode's noted uses (what ``record_use`` saw), as JSON-able data, and the
        episode's bookkeeping cleared: an episode whose outcome nobody verified yet keeps them
        (`embodia.memory.pending`) instead of lending them to the next episode's outcome."""
        out = {"ids": {ns: sorted(int(i) for i in ids) for ns, ids in self._uses.items()},
               "sources": {ns: {str(ep): float(w) for ep, w in src.items()} for ns, src in self._src_uses.items()}}
        self._uses, self._src_uses = {}, {}
        return out

    def attach_uses(self, uses: dict) -> None:
        """Make ``detach_uses``'s data the current episode's, for ``end_episode`` to credit."""
        self._uses = {ns: set(int(i) for i in ids) for ns, ids in (uses.get("ids") or {}).items()}
        self._src_uses = {ns: {int(ep): float(w) for ep, w in src.items()}
                          for ns, src in (uses.get("sources") or {}).items()}

    def record_use(self, namespace: str, retrieval: Retrieval) -> int:
        """Note that ``retrieval``'s prior steered a decision of the current episode. Elites with
        weight >= credit_min_weight are credited when ``end_episode`` reports the outcome. A
        retrieval below the confidence floor did not steer and is ignored (returns 0)."""
        if retrieval is None or retrieval.empty:
            return 0
        if retrieval.namespace != namespace:
            raise ValueError(f"retrieval is from {retrieval.namespace!r}, not {namespace!r}")
        if tau0_from_confidence(retrieval.confidence, self.config, 1000) <= 0.0:
            return 0
        ids = retrieval.elite_ids[retrieval.weights >= self.config.credit_min_weight]
        self._uses.setdefault(namespace, set()).update(int(i) for i in ids)
        ns = self._ns.get(namespace)
        if self.config.episode_credit and ns is not None:
            rows = ns.rows_of(retrieval.elite_ids)
            ok = rows >= 0
            src = self._src_uses.setdefault(namespace, {})
            for ep, w in zip(ns.cols["episode_id"][rows[ok]].tolist(), retrieval.weights[ok].tolist()):
                if ep >= 0:
                    src[ep] = src.get(ep, 0.0) + float(w)
        return int(ids.size)

    def end_episode(self, success: bool, namespace: Optional[str] = None) -> Dict[str, int]:
        """Close the current episode: every entry recorded by ``record_use`` gets n_used += 1 and,
        on failure, n_used_fail += 1; entries with n_used_fail >= fail_delete_min and
        n_used_fail / n_used > fail_delete_ratio are deleted. A failed episode also ticks the
        ageing clock of its namespaces (the ones used, plus ``namespace`` if given); successes tick
        it through ``add_episode``. Returns {"credited", "deleted"}."""
        cfg = self.config
        names = set(self._uses) | set(self._src_uses)
        if namespace is not None:
            names.add(namespace)
        credited = deleted = 0
        now = time.time()
        for name in sorted(names):
            ns = self._ns.get(name)
            if ns is None:
                continue
            if not success:
                ns.clock += 1
            used = self._src_uses.get(name, {})
            self._parents.pop(name, None)
            if success and cfg.credit_cascade > 0 and cfg.episode_credit:
                total = sum(used.values())
                self._parents[name] = {int(ep): float(w) for ep, w in used.items()
                                       if total > 0 and w >= cfg.credit_cascade * total}
            deleted += self._credit_sources(ns, used, success)
            ids = np.fromiter(sorted(self._uses.get(name, ())), dtype=np.int64)
            rows = ns.rows_of(ids) if ids.size else ids
            rows = rows[rows >= 0]
            if rows.size == 0:
                continue
            c = ns.cols.data
            c["n_used"][rows] += 1
            c["last_used_clock"][rows] = ns.clock
            c["last_used_at"][rows] = now
            credited += int(rows.size)
            if not success:
                c["n_used_fail"][rows] += 1
                nf, nu = c["n_used_fail"][rows], c["n_used"][rows]
                bad = rows[(nf >= cfg.fail_delete_min) & (nf > cfg.fail_delete_ratio * nu)]
                n = self._delete_rows(ns, bad)
                ns.deleted_credit += n
                deleted += n
        self._uses, self._src_uses = {}, {}
        return {"credited": credited, "deleted": deleted}

    def _credit_sources(self, ns: _Namespace, used: Dict[int, float], success: bool) -> int:
        """Episode-level failure credit (see MemoryConfig.episode_credit and credit_cascade);
        returns entries deleted."""
        cfg = self.config
        bad = []

        def judge(ep: int, rec: list) -> None:
            if rec[2] >= cfg.episode_fail_min and rec[1] > cfg.episode_fail_ratio * (rec[0] + rec[1]):
                bad.append(ep)
        for ep, w in used.items():
            rec = ns.source_credit.setdefault(int(ep), [0.0, 0.0, 0])
            if success:
                rec[0] += w
            else:
                rec[1] += w
                rec[2] += 1
                judge(int(ep), rec)
        gone: set = set()
        while bad:                          # the judged-false sources, then what steered them (cascade)
            ep = bad.pop()
            if ep in gone:
                continue
            gone.add(ep)
            ns.source_credit.pop(ep, None)
            for parent, w in ns.parents.pop(ep, {}).items():
                rec = ns.source_credit.get(parent)
                if rec is None or parent in gone:
                    continue                # deleted or never credited: nothing to move
                rec[0], rec[1], rec[2] = max(0.0, rec[0] - w), rec[1] + w, rec[2] + 1
                judge(parent, rec)
        if not gone:
            return 0
        rows = np.flatnonzero(np.isin(ns.cols["episode_id"], np.asarray(sorted(gone), np.int64)))
        n = self._delete_rows(ns, rows)
        ns.deleted_credit += n
        ns.deleted_episodes += len(gone)
        return n

    def drop_namespace(self, namespace: str) -> bool:
        seeds = self.seeds.pop(namespace, None)
        return self._ns.pop(namespace, None) is not None or bool(seeds)

    # -- the noise of successes (MemoryConfig.recall_seed) -----------------------------------------
    def recall_seed(self, namespace: str) -> Optional[int]:
        """The noise seed an episode of ``namespace`` starts from: among the stored seeds that have
        succeeded at least as often as they failed, the best record (successes + 1) / (episodes + 2),
        ties to the latest success; ``None`` when there is none (the episode keeps its own).

        >>> mem = SuccessMemory(None, 1, 1, 1, encoder_id="e", normalizer_hash="h")
        >>> mem.credit_seed("b/t", 7, True); mem.credit_seed("b/t", 9, True); mem.recall_seed("b/t")
        9
        >>> mem.credit_seed("b/t", 9, False); mem.credit_seed("b/t", 9, False); mem.recall_seed("b/t")
        7
        >>> mem.credit_seed("b/t", 7, False); mem.credit_seed("b/t", 7, False); mem.recall_seed("b/t") is None
        True
        """
        good = [((w + 1) / (n + 2), last, seed) for seed, (w, n, last) in self.seeds.get(namespace, {}).items()
                if 2 * w >= n]
        return max(good)[2] if good else None

    def credit_seed(self, namespace: str, seed: int, success: bool) -> None:
        """Count an episode of ``namespace`` run from noise ``seed``: a success stores the seed or
        adds to its record; a failure counts against a stored seed and is otherwise forgotten. Seeds
        outside the noise generator's range (0..2**64-1) are refused (ValueError): saved, they would
        stop every later run; beyond ``persist.MAX_SEED_RECORDS`` seeds the worst record is forgotten."""
        if not (isinstance(seed, (int, np.integer)) and 0 <= int(seed) <= persist.MAX_SEED):
            raise ValueError(f"noise seed {seed!r}: expected a whole number 0..{persist.MAX_SEED}")
        recs = self.seeds.get(namespace, {})
        rec = recs.get(int(seed))
        if rec is None:
            if not success:
                return
            if len(recs) >= persist.MAX_SEED_RECORDS:       # the lowest (successes + 1) / (episodes + 2), oldest
                del recs[min(recs, key=lambda s: ((recs[s][0] + 1) / (recs[s][1] + 2), recs[s][2]))]
            rec = self.seeds.setdefault(namespace, {}).setdefault(int(seed), [0, 0, 0])
        rec[1] += 1
        if success:
            rec[0] += 1
            rec[2] = 1 + max(r[2] for r in self.seeds[namespace].values())

    def prune(self, namespace: Optional[str] = None, *, max_fail_ratio: float = 0.5,
              min_fail: int = 1) -> int:
        """Delete entries that steered failures: n_used_fail >= min_fail and
        n_used_fail / n_used > max_fail_ratio (a stricter, offline version of failure credit).
        Returns the number deleted."""
        deleted = 0
        for name in ([namespace] if namespace else sorted(self._ns)):
            ns = self._ns.get(name)
            if ns is None:
                continue
            c = ns.cols.data
            nf, nu = c["n_used_fail"][:ns.n], c["n_used"][:ns.n]
            bad = np.flatnonzero((nf >= min_fail) & (nf > max_fail_ratio * np.maximum(nu, 1)))
            n = self._delete_rows(ns, bad)
            ns.deleted_credit += n
            deleted += n
        return deleted

    # -- persistence -----------------------------------------------------------------------------
    def save(self, path) -> Path:
        """Write the memory to directory ``path`` atomically, under the folder's writer lock
        (`embodia.memory.lock`: `MemoryBusy` when another process holds it): every namespace's ``entries-<gen>.npz``
        (source of truth) and, for IVF namespaces, an ``index-<gen>.faiss`` cache are written to
        temp files, fsynced and renamed; ``meta.json`` (schema, hashes, dims, config, file list
        with sha256) is written last by an atomic rename: the commit point. Files of older
        generations are removed afterwards. A crash at any moment leaves the previous memory or the
        new one, never a mix."""
        return persist.save(self, Path(path))

    @classmethod
    def load(cls, path, *, encoder_id: str, normalizer_hash: str, on_error: str = "raise",
             missing_ok: bool = False, config: Optional[MemoryConfig] = None,
             key_dim: Optional[int] = None, horizon: Optional[int] = None,
             action_dim: Optional[int] = None, hist_len: Optional[int] = None,
             lock: bool = False) -> "SuccessMemory":
        """Load a memory saved by ``save``.

        * ``lock``: to save it again, take the folder's writer lock first (before reading) and keep
          it while this memory lives: another writer gets `MemoryBusy` naming this process instead
          of overwriting (or losing) this one's episodes. Readers leave it False and never wait.
        * Every field of meta.json is range-checked (`persist.check_meta`): MemoryFileError naming it.

        * Another ``encoder_id`` / ``normalizer_hash`` (or dims that differ from the ones given):
          ``MemoryMismatch``, whatever ``on_error`` says (re-key instead of mixing key spaces).
        * A missing, truncated or corrupted ``meta.json`` / ``entries-*.npz`` (sha256 checked), or
          an unsupported schema: ``MemoryFileError`` naming the file; with ``on_error="empty"`` a
          warning and an empty memory (dims from meta.json, or from the keyword arguments when
          meta.json itself is unreadable).
        * ``missing_ok``: a directory without meta.json gives an empty memory, silently (first run).
        * ``config`` overrides the stored config (e.g. ablation flags at evaluation time).
        No pickle anywhere (``np.load(allow_pickle=False)``, JSON meta).
        """
        return persist.load(cls, Path(path), encoder_id=encoder_id, normalizer_hash=normalizer_hash,
                            on_error=on_error, missing_ok=missing_ok, config=config,
                            dims=dict(key_dim=key_dim, horizon=horizon, action_dim=action_dim,
                                      hist_len=hist_len), lock=lock)
