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

This file holds the storage and insertion; a query and its guidance are in `memory/retrieval.py`,
failure credit, seeds and pruning in `memory/credit.py` (mixins of `SuccessMemory`), one namespace's
columns and index in `memory/namespace.py`, the file format
in `memory/persist.py`.
"""
from __future__ import annotations

import hashlib
import json
import math
import time
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from embodia.memory import persist
from embodia.memory.config import MemoryConfig
from embodia.memory.credit import CreditMixin
from embodia.memory.namespace import Namespace
from embodia.memory.retrieval import TINY, RetrievalMixin

__all__ = ["SuccessMemory", "make_namespace", "stable_hash"]

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


# ------------------------------------------------------------------------------------------------
# the memory
# ------------------------------------------------------------------------------------------------
class SuccessMemory(RetrievalMixin, CreditMixin):
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
        self._ns: Dict[str, Namespace] = {}
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
    def new_namespace(self, name: str, action_dim: int) -> "Namespace":
        """An empty namespace of this memory, not yet registered (the loader fills it first)."""
        return Namespace(name, self, action_dim)

    def _namespace(self, name: str, action_dim: int) -> Namespace:
        if not isinstance(name, str) or not name:
            raise ValueError("namespace must be a non-empty string")
        ns = self._ns.get(name)
        if ns is None:
            if action_dim > self.action_dim:
                raise ValueError(f"action dim {action_dim} > the memory's action_dim {self.action_dim}")
            ns = self._ns[name] = Namespace(name, self, action_dim)
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
            keys = keys / np.maximum(np.linalg.norm(keys, axis=1, keepdims=True), TINY)
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

    def _dedup_match(self, ns: Namespace, key: np.ndarray, chunk: np.ndarray) -> int:
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

    def _append(self, ns: Namespace, rows: Dict[str, np.ndarray]) -> None:
        m = rows["keys"].shape[0]
        rows["ids"] = np.arange(ns.next_id, ns.next_id + m, dtype=np.int64)
        ns.next_id += m
        ns.cols.append(rows)
        if not ns.index.maybe_rebuild(ns.cols["keys"], ns.cols["ids"]):
            ns.index.add(rows["keys"], rows["ids"])

    def _insert(self, ns: Namespace, rows: Dict[str, np.ndarray], dedup: bool) -> None:
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
    def _delete_rows(self, ns: Namespace, rows: np.ndarray) -> int:
        rows = np.unique(np.asarray(rows, dtype=np.int64))
        if rows.size == 0:
            return 0
        ns.index.remove(ns.cols["ids"][rows])
        keep = np.ones(ns.n, bool)
        keep[rows] = False
        ns.cols.keep(keep)
        ns.index.maybe_rebuild(ns.cols["keys"], ns.cols["ids"])
        return int(rows.size)

    def _enforce_capacity(self, ns: Namespace) -> int:
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
        from embodia.memory.loading import load
        return load(cls, Path(path), encoder_id=encoder_id, normalizer_hash=normalizer_hash,
                            on_error=on_error, missing_ok=missing_ok, config=config,
                            dims=dict(key_dim=key_dim, horizon=horizon, action_dim=action_dim,
                                      hist_len=hist_len), lock=lock)
