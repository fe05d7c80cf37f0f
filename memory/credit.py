"""Failure credit and the noise of successes: the part of `SuccessMemory` that runs after an
episode (which entries steered it, what they earn for its outcome, which seeds succeed, pruning).
A mixin, so `memory/store.py` keeps the insertion and the storage and this file reads on its own
(ARCHITECTURE.md 5.6)."""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Dict, Optional

import numpy as np

from embodia.memory import persist
from embodia.memory.namespace import Namespace
from embodia.memory.retrieval import Retrieval, tau0_from_confidence


class CreditMixin:
    """Failure credit, seed recall and pruning of a `SuccessMemory` (its ``_ns``, ``config``, ``_delete_rows``)."""

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

    def _credit_sources(self, ns: Namespace, used: Dict[int, float], success: bool) -> int:
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

    def origins(self, namespace: str, ids) -> list:
        """(source episode id, step) of each entry id (None for one that is gone): where in which
        stored success a retrieved chunk began."""
        ns = self._ns.get(namespace)
        if ns is None:
            return [None] * len(ids)
        rows = ns.rows_of(np.asarray(ids, np.int64))
        return [None if r < 0 else (int(ns.cols["episode_id"][r]), int(ns.cols["step"][r])) for r in rows.tolist()]

    def stored_origins(self, namespace: str) -> set:
        """(source episode id, step) of every entry still stored in ``namespace``: what a cache keyed
        by origin (the steering policy's noise bank) may keep once entries were evicted or deleted."""
        ns = self._ns.get(namespace)
        if ns is None:
            return set()
        return set(zip(ns.cols["episode_id"].tolist(), ns.cols["step"].tolist()))

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

