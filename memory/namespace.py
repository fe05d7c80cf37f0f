"""One namespace of a `SuccessMemory`: its entry columns (growable, sorted by id), its FAISS
index and its counters; what `store.py` inserts into and `retrieval.py` / `credit.py` read."""
from __future__ import annotations

from collections import deque
from typing import Dict, List

import numpy as np

from embodia.memory.index import KeyIndex
from embodia.memory.persist import entry_columns


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


class Namespace:
    """One namespace of a `SuccessMemory`: its entry columns, FAISS index and counters."""
    def __init__(self, name: str, mem, action_dim: int):
        """``mem``: the `SuccessMemory` whose dimensions and config the namespace takes."""
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
