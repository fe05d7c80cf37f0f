"""One FAISS index per namespace: exact flat search while small, IVF when large.

Ids are the namespace's stable entry ids (int64). The numpy columns in ``store.py`` are the source
of truth; the index can always be rebuilt from them (``rebuild``).

* ``metric="l2"``: ``IndexIDMap2(IndexFlatL2)``; ``search`` returns Euclidean distances (not squared).
* ``metric="cosine"``: ``IndexIDMap2(IndexFlatIP)`` on L2-normalised keys (the caller normalises);
  ``search`` returns inner products (= cosine similarities).
* Above ``ivf_threshold`` entries: ``IndexIVFFlat`` with the same metric, nlist = min(1024,
  2 sqrt(N)), trained on at most 64 * nlist keys, ``nprobe`` lists probed; retrained when the
  namespace doubles. IVF supports ``remove_ids`` (eviction, failure credit), HNSW does not.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import faiss
import numpy as np

__all__ = ["KeyIndex"]


class KeyIndex:
    def __init__(self, dim: int, metric: str = "l2", ivf_threshold: int = 200_000,
                 ivf_nlist: Optional[int] = None, ivf_nprobe: int = 32, seed: int = 0):
        self.dim = int(dim)
        self.metric = metric
        self.ivf_threshold = int(ivf_threshold)
        self.ivf_nlist = ivf_nlist
        self.ivf_nprobe = int(ivf_nprobe)
        self.seed = int(seed)
        self.kind = "flat"
        self.n_trained = 0
        self._index = self._flat()

    # -- construction ----------------------------------------------------------------------------
    def _faiss_metric(self):
        return faiss.METRIC_L2 if self.metric == "l2" else faiss.METRIC_INNER_PRODUCT

    def _flat(self):
        base = faiss.IndexFlatL2(self.dim) if self.metric == "l2" else faiss.IndexFlatIP(self.dim)
        return faiss.IndexIDMap2(base)

    def _ivf(self, keys: np.ndarray):
        n = keys.shape[0]
        nlist = self.ivf_nlist or int(min(1024, max(16, 2 * math.sqrt(n))))
        quant = faiss.IndexFlatL2(self.dim) if self.metric == "l2" else faiss.IndexFlatIP(self.dim)
        index = faiss.IndexIVFFlat(quant, self.dim, nlist, self._faiss_metric())
        n_train = min(n, 64 * nlist)
        rng = np.random.default_rng(self.seed)
        sample = keys if n_train == n else keys[rng.choice(n, n_train, replace=False)]
        index.cp.seed = self.seed
        index.train(np.ascontiguousarray(sample, dtype=np.float32))
        index.nprobe = min(self.ivf_nprobe, nlist)
        self.n_trained = n
        return index

    def rebuild(self, keys: np.ndarray, ids: np.ndarray) -> None:
        """Rebuild from the source-of-truth columns (picks flat or IVF by size)."""
        keys = np.ascontiguousarray(keys, dtype=np.float32).reshape(-1, self.dim)
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if keys.shape[0] >= self.ivf_threshold:
            self._index = self._ivf(keys)
            self.kind = "ivf"
        else:
            self._index = self._flat()
            self.kind = "flat"
            self.n_trained = 0
        if keys.shape[0]:
            self._index.add_with_ids(keys, ids)

    def maybe_rebuild(self, keys: np.ndarray, ids: np.ndarray) -> bool:
        """Switch flat -> IVF past the threshold, IVF -> flat below half of it, retrain IVF when
        the namespace doubled since training. Returns True when it rebuilt."""
        n = keys.shape[0]
        if (self.kind == "flat" and n >= self.ivf_threshold) or \
           (self.kind == "ivf" and (n < self.ivf_threshold // 2 or n > 2 * self.n_trained)):
            self.rebuild(keys, ids)
            return True
        return False

    # -- operations --------------------------------------------------------------------------------
    @property
    def ntotal(self) -> int:
        return int(self._index.ntotal)

    def add(self, keys: np.ndarray, ids: np.ndarray) -> None:
        self._index.add_with_ids(np.ascontiguousarray(keys, dtype=np.float32).reshape(-1, self.dim),
                                 np.ascontiguousarray(ids, dtype=np.int64))

    def remove(self, ids: np.ndarray) -> int:
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if ids.size == 0:
            return 0
        return int(self._index.remove_ids(faiss.IDSelectorBatch(ids)))

    def search(self, queries: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
        """-> (scores [m, k], ids [m, k]); missing results have id -1. Scores: Euclidean distance
        (l2, ascending) or inner product (cosine, descending)."""
        q = np.ascontiguousarray(queries, dtype=np.float32).reshape(-1, self.dim)
        k = max(1, min(int(k), max(self.ntotal, 1)))
        d, i = self._index.search(q, k)
        if self.metric == "l2":
            d = np.sqrt(np.maximum(d, 0.0))
        return d, i

    # -- cache -----------------------------------------------------------------------------------
    def serialize(self) -> np.ndarray:
        return faiss.serialize_index(self._index)

    def load_serialized(self, buf: np.ndarray, kind: str, n_trained: int) -> None:
        index = faiss.deserialize_index(np.ascontiguousarray(buf, dtype=np.uint8))
        if index.d != self.dim:
            raise ValueError(f"cached index has dim {index.d}, expected {self.dim}")
        if kind == "ivf":
            faiss.extract_index_ivf(index).nprobe = self.ivf_nprobe
        self._index, self.kind, self.n_trained = index, kind, int(n_trained)
