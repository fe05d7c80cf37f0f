"""Retrieval: one query of `SuccessMemory` (neighbours, similarities, progress, the consistency
filter, one mode, the elite prior; ARCHITECTURE.md 5.2 - 5.5) and the guidance it gives the action
decoder. A mixin, so `memory/store.py` keeps the insertion and the storage, and the steps of a
query read together here."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

import numpy as np

from embodia.memory.config import MemoryConfig
from embodia.memory.namespace import Namespace

TINY = 1e-12


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



class RetrievalMixin:
    """One query and its guidance, over a `SuccessMemory`'s namespaces (``_ns``, ``config``, ``_prep_keys``)."""

    # -- retrieval -------------------------------------------------------------------------------
    def _sigma(self, ns: Namespace) -> float:
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
    def _neighbours(self, ns: Namespace, key) -> Tuple[np.ndarray, np.ndarray]:
        """Rows and FAISS scores of the k nearest stored keys (ARCHITECTURE.md 5.3)."""
        q = self._prep_keys(np.asarray(key, dtype=np.float32).reshape(1, -1))
        score, ids = ns.index.search(q, min(self.config.k, ns.n))
        ok = ids[0] >= 0
        score, ids = score[0][ok], ids[0][ok]
        rows = ns.rows_of(ids)
        good = rows >= 0
        return rows[good], score[good]

    def _similarities(self, ns: Namespace, score: np.ndarray) -> Tuple[np.ndarray, Optional[float]]:
        """Similarities in (0, 1] and the sigma used (L2: a kernel on distances, sigma calibrated on
        this query's distance to its sigma_rank-th neighbour); cosine scores as they are."""
        cfg = self.config
        if cfg.metric != "l2":
            return np.clip(score.astype(np.float64), -1.0, 1.0), None
        if cfg.sigma is None:
            ns.sigma_hist.append(float(score[min(cfg.sigma_rank, score.size) - 1]))
        sigma = self._sigma(ns)
        return np.exp(-(score.astype(np.float64) ** 2) / (2.0 * sigma * sigma)), sigma

    def _progress_estimate(self, ns: Namespace, rows, sim, t, progress) -> Optional[float]:
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

    def _consistent(self, ns: Namespace, rows, hist, p_hat, prev_tail) -> Tuple[np.ndarray, str]:
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

    def _elite_prior(self, ns: Namespace, e_rows, e_sim, mass, elite):
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
        c_sim = float(np.clip(((w * e_sim).sum() - s_min) / max(1.0 - s_min, TINY), 0.0, 1.0))
        # spread: RMS deviation of the elite chunks from the prior (chunk-RMSE units, like mode_radius)
        var = std[valid] ** 2 if valid.any() else std ** 2
        spread = float(np.sqrt(var.mean()))
        share = float(mass[elite].sum() / max(mass.sum(), TINY))
        c_agree = share * math.exp(-0.5 * (spread / cfg.chunk_kernel_width) ** 2)
        c_n = min(1.0, e_sup.sum() / cfg.min_support)
        conf = c_sim * c_agree * c_n
        if cfg.fixed_confidence is not None:
            conf = float(cfg.fixed_confidence)
        components = {"c_sim": float(c_sim), "c_agree": float(c_agree), "c_n": float(c_n), "spread": spread,
                      "share": share}
        return w, prior, std, valid, conf, components

    @staticmethod
    def _actions_arg(x, ns: Namespace, what: str) -> np.ndarray:
        a = np.asarray(x, dtype=np.float32)
        if a.ndim == 1 and a.size == 0:
            a = a.reshape(0, ns.action_dim)
        if a.ndim != 2 or a.shape[1] != ns.action_dim:
            raise ValueError(f"{what} must be [n, {ns.action_dim}] (namespace {ns.name!r}), got {a.shape}")
        return a

    def _history_ok(self, ns: Namespace, rows: np.ndarray, hist) -> np.ndarray:
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
        wr = np.sqrt((W * err).sum(1) / np.maximum(den, TINY))
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

