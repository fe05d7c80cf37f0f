"""Success memory for screens: the discrete (GUI) form of retrieve-then-steer.

A verified successful GUI episode is cut into one entry per step: the KEY is a hashed text-feature
vector of (instruction template, visible UI elements, page name); the VALUE is the action executed
there as an ELEMENT REFERENCE (role, text, resource id, content description) rather than an index
or a pixel, so that it survives layout changes, plus a precondition (the referenced element must be
on the current screen), the progress t/T, the previous action's canonical form and the source
episode. Slot values of the task instance (``{"setting": "Wi-Fi"}``) are replaced by placeholders
(``{setting}``) in the instruction, in element texts and ids, and in typed text, so one success
teaches every instance of its template.

A query keeps the neighbours that are consistent with the current screen and trajectory (their
element is present, their previous action matches, their progress is close), takes a weighted
majority vote on the first action's canonical form, and returns the winner BOUND to the current
tree: the element's current index, its centre in 0..1000, and the placeholders filled from the
current slots. The caller (``embodia.policies.gui.screen_memory``) executes it when the confidence is high,
re-ranks its policy's candidates with the vote otherwise, and reports the verified outcome.

Leaf module: numpy, faiss and the standard library; elements and actions are plain dicts (a UI tree
element as ``embodia.devices.gui`` describes it; an action as ``GuiAction.to_dict()``).

>>> mem = ScreenMemory()
>>> tree = [{"index": 0, "role": "Switch", "text": "Wi-Fi", "id": "setting_wi_fi", "bounds": [0, 100, 540, 200]},
...         {"index": 1, "role": "Switch", "text": "NFC", "id": "setting_nfc", "bounds": [0, 200, 540, 300]}]
>>> for ep in range(3):
...     _ = mem.add_episode("phone/turn-on", [(tree, "Turn on Wi-Fi", {"type": "click", "element": 0})],
...                         success=True, slots={"setting": "Wi-Fi"})
>>> moved = [dict(tree[1], index=0), dict(tree[0], index=1, bounds=[0, 300, 540, 400])]
>>> r = mem.query("phone/turn-on", moved, "Turn on Wi-Fi", [], slots={"setting": "Wi-Fi"}, screen=(540, 960))
>>> r.action, round(r.confidence, 2)
({'type': 'click', 'element': 1, 'point': (500.0, 364.6)}, 1.0)

A query (candidates, the consistency filter, the vote, the binding) is in `memory/screen_query.py`.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

from embodia.memory import persist
from embodia.memory.errors import MemoryFileError, MemoryMismatch
from embodia.memory.files import read_json
from embodia.memory.index import KeyIndex
from embodia.memory.screen_config import ScreenMemoryConfig
from embodia.memory.screen_keys import Featurizer
from embodia.memory.screen_query import START, ScreenQueryMixin, ScreenRetrieval
from embodia.memory.screen_refs import (
    MAX_VALS,
    canon,
    action_value,
    field_state,
    slot_values,
)

__all__ = ["ScreenMemory", "ScreenRetrieval", "SCREEN_SCHEMA_VERSION", "START"]

SCREEN_SCHEMA_VERSION = 1


# ------------------------------------------------------------------------------------------------
# storage
# ------------------------------------------------------------------------------------------------
_NUM = {"ids": np.int64, "progress": np.float32, "episode_id": np.int64, "step": np.int32,
        "ep_len": np.int32, "created_clock": np.int64, "last_used_clock": np.int64,
        "n_support": np.int32, "n_used": np.int32, "n_used_fail": np.int32}
_NS_STATE = ("clock", "episodes", "merges", "evictions", "deleted_credit", "deleted_episodes",
             "queries", "next_id")


class _Space:
    """One namespace: keys [n, dim], numeric columns, JSON-able values, a FAISS inner-product index.
    Ids only grow and rows stay sorted by id."""

    def __init__(self, name: str, cfg: ScreenMemoryConfig):
        self.name = name
        self._keys = np.zeros((0, cfg.dim), np.float32)       # capacity-doubling buffer
        self.num = {k: np.zeros(0, dt) for k, dt in _NUM.items()}
        self.values: List[dict] = []
        self.index = KeyIndex(cfg.dim, "cosine", cfg.ivf_threshold)
        self.success_lengths: List[int] = []
        self.source_credit: Dict[int, List[float]] = {}       # source episode -> [w_succ, w_fail, n_fail]
        for k in _NS_STATE:
            setattr(self, k, 0)

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def keys(self) -> np.ndarray:
        return self._keys[: self.n]

    def set_keys(self, keys: np.ndarray) -> None:
        self._keys = np.ascontiguousarray(keys, np.float32)

    def rows(self, ids) -> np.ndarray:
        """Rows of entry ids (-1 for ids that are gone)."""
        ids = np.asarray(ids, np.int64).reshape(-1)
        all_ids = self.num["ids"]
        if self.n == 0:
            return np.full(ids.shape, -1, np.int64)
        r = np.minimum(np.searchsorted(all_ids, ids), self.n - 1)
        return np.where(all_ids[r] == ids, r, -1)

    def append(self, key: np.ndarray, value: dict, num: dict) -> None:
        i = self.next_id
        self.next_id += 1
        n = self.n
        if n >= self._keys.shape[0]:
            buf = np.zeros((max(64, 2 * n), self._keys.shape[1]), np.float32)
            buf[:n] = self._keys[:n]
            self._keys = buf
        self._keys[n] = key
        for k, dt in _NUM.items():
            self.num[k] = np.append(self.num[k], np.asarray(i if k == "ids" else num[k], dt))
        self.values.append(value)
        if not self.index.maybe_rebuild(self.keys, self.num["ids"]):
            self.index.add(key[None], np.asarray([i], np.int64))

    def delete(self, rows) -> int:
        rows = np.unique(np.asarray(list(rows), np.int64))
        if rows.size == 0:
            return 0
        self.index.remove(self.num["ids"][rows])
        keep = np.ones(self.n, bool)
        keep[rows] = False
        self._keys = np.ascontiguousarray(self.keys[keep])
        self.num = {k: v[keep] for k, v in self.num.items()}
        self.values = [v for v, ok in zip(self.values, keep) if ok]
        self.index.maybe_rebuild(self.keys, self.num["ids"])
        return int(rows.size)


# ------------------------------------------------------------------------------------------------
# the memory
# ------------------------------------------------------------------------------------------------
class ScreenMemory(ScreenQueryMixin):
    """Success memory for GUI screens, one FAISS inner-product index per namespace (device profile
    and task, e.g. ``"gui-sim:phone/turn-on"``). Not thread-safe: one per control loop."""

    def __init__(self, config: Optional[ScreenMemoryConfig] = None):
        self.config = config if config is not None else ScreenMemoryConfig()
        c = self.config
        self.featurizer = Featurizer(c.dim, c.hash_seed, (c.w_instruction, c.w_screen, c.w_page))
        self._ns: Dict[str, _Space] = {}
        self._uses: Dict[str, Dict[int, float]] = {}       # namespace -> entry id -> vote weight
        self.next_episode = 0
        self.reviewed: set = set()      # pending episodes a person decided (as SuccessMemory.reviewed)

    # -- introspection ---------------------------------------------------------------------------
    def namespaces(self) -> List[str]:
        return sorted(self._ns)

    def __len__(self) -> int:
        return sum(s.n for s in self._ns.values())

    def __contains__(self, namespace: str) -> bool:
        return namespace in self._ns

    def size(self, namespace: str) -> int:
        s = self._ns.get(namespace)
        return 0 if s is None else s.n

    def entries(self, namespace: str) -> List[dict]:
        """Copies of a namespace's entries: the value plus the numeric columns, one dict each."""
        s = self._ns.get(namespace)
        if s is None:
            return []
        return [{**json.loads(json.dumps(v)), **{k: s.num[k][r].item() for k in _NUM}}
                for r, v in enumerate(s.values)]

    def stats(self) -> Dict[str, dict]:
        return {name: {"entries": s.n, "supports": int(s.num["n_support"].sum()),
                       **{k: getattr(s, k) for k in _NS_STATE if k != "next_id"},
                       "median_success_len": float(np.median(s.success_lengths)) if s.success_lengths else None}
                for name, s in sorted(self._ns.items())}

    def key(self, elements, instruction: str, slots=None, page=None) -> np.ndarray:
        return self.featurizer.key(elements, instruction, slots, page)

    # -- insertion -------------------------------------------------------------------------------
    def _space(self, namespace: str) -> _Space:
        if not isinstance(namespace, str) or not namespace:
            raise ValueError("namespace must be a non-empty string")
        s = self._ns.get(namespace)
        if s is None:
            s = self._ns[namespace] = _Space(namespace, self.config)
        return s

    @staticmethod
    def _step(step) -> Tuple[list, str, dict, Optional[tuple], Optional[str]]:
        """A step as (elements, instruction, action) or a dict with those keys plus optional
        ``screen`` (width, height of the bounds' pixels) and ``page``."""
        if isinstance(step, dict):
            return (step["elements"], step["instruction"], step["action"], step.get("screen"),
                    step.get("page"))
        elements, instruction, action = step[:3]
        return elements, instruction, action, None, None

    def add_episode(self, namespace: str, steps, success: bool, episode_id: Optional[int] = None,
                    slots: Optional[dict] = None, support: int = 1) -> int:
        """Store a verified SUCCESSFUL episode, one entry per step; ``success=False`` stores nothing
        (returns 0), so the caller may call it after every episode. ``steps``: a list of (UI tree
        elements, instruction, action dict) or of dicts with keys elements, instruction, action and
        optional screen (width, height) and page. ``episode_id`` None: a fresh one. ``support``: how
        many successes this one counts for (a person's demonstration counts for
        ``config.demo_support``). Returns the number of steps stored or merged into identical entries
        (after loop erasure)."""
        if not success or not steps:
            return 0
        if episode_id is None:
            episode_id = self.next_episode
        self.next_episode = max(self.next_episode, int(episode_id) + 1)
        cfg = self.config
        s = self._space(namespace)
        parsed = [self._step(raw) for raw in steps]
        for t, (_, _, action, _, _) in enumerate(parsed):
            if not isinstance(action, dict) or "type" not in action:
                raise ValueError(f"step {t}: the action must be a dict with a 'type', got {action!r}")
        keys = [self.key(el, ins, slots, page) for el, ins, _, _, page in parsed]
        path = self._erase_loops(keys) if cfg.erase_loops else list(range(len(parsed)))
        T = len(path)
        s.clock += 1
        s.episodes += 1
        s.success_lengths = (s.success_lengths + [T])[-1000:]
        prev = START
        for t, i in enumerate(path):
            elements, _, action, screen, _ = parsed[i]
            key = keys[i]
            value = action_value(action, elements, slots, screen)
            value["canon"] = canon(value["type"], value["ref"], value["fields"], value["point"], cfg.point_grid)
            value["hist"] = prev
            value["vals"] = [slot_values(slots)]         # the slot values it was stored with
            value["state"] = field_state(elements, slots)  # the form state it was taken in
            prev = value["canon"]
            num = {"progress": t / T, "episode_id": int(episode_id), "step": i, "ep_len": T,
                   "created_clock": s.clock, "last_used_clock": -1, "n_support": int(support), "n_used": 0,
                   "n_used_fail": 0}
            r = self._dedup_row(s, key, value) if cfg.dedup else -1
            if r >= 0:
                s.num["n_support"][r] += int(support)
                merged = s.values[r].setdefault("vals", [])
                if value["vals"][0] not in merged and len(merged) < MAX_VALS:
                    merged.append(value["vals"][0])
                s.num["created_clock"][r] = s.clock        # refresh: ageing restarts
                s.num["ep_len"][r] = min(int(s.num["ep_len"][r]), T)
                s.merges += 1
            else:
                s.append(key, value, num)
        self._enforce_capacity(s)
        return T

    def _erase_loops(self, keys: List[np.ndarray]) -> List[int]:
        """Indices of the steps left after removing every return to an earlier screen."""
        K = np.stack(keys)
        S = K @ K.T
        path, i = [], 0
        while i < len(keys):
            again = np.flatnonzero(S[i, i + 1:] >= self.config.loop_cos)
            if again.size:
                i += 1 + int(again[-1])        # continue from the last visit of this screen
                continue
            path.append(i)
            i += 1
        return path

    def _dedup_row(self, s: _Space, key: np.ndarray, value: dict) -> int:
        if s.n == 0:
            return -1
        score, ids = s.index.search(key[None], min(8, s.n))
        for sc, r in zip(score[0], s.rows(ids[0])):
            if r >= 0 and sc >= self.config.dedup_cos and s.values[r]["canon"] == value["canon"] \
                    and s.values[r]["hist"] == value["hist"] and s.values[r].get("state") == value["state"]:
                return r
        return -1

    def _enforce_capacity(self, s: _Space) -> int:
        cap = self.config.capacity
        if cap is None or s.n <= cap:
            return 0
        age = (s.clock - s.num["created_clock"]).astype(np.float64)
        score = s.num["n_support"] * 0.5 ** (age / self.config.half_life) - \
            self.config.fail_penalty * s.num["n_used_fail"]
        order = np.lexsort((s.num["ids"], score))            # lowest score first, then oldest
        n = s.delete(order[: s.n - cap])
        s.evictions += n
        return n

    # -- failure credit --------------------------------------------------------------------------
    def detach_uses(self) -> dict:
        """The current episode's noted uses as JSON-able data, cleared here (an unverified episode
        keeps them in `embodia.memory.pending` until a person decides)."""
        out = {"ids": {ns: {str(i): float(w) for i, w in used.items()} for ns, used in self._uses.items()}}
        self._uses = {}
        return out

    def attach_uses(self, uses: dict) -> None:
        """Make ``detach_uses``'s data the current episode's, for ``end_episode`` to credit."""
        self._uses = {ns: {int(i): float(w) for i, w in used.items()} for ns, used in (uses.get("ids") or {}).items()}

    def record_use(self, namespace: str, retrieval: ScreenRetrieval) -> int:
        """Note that the entries that voted for ``retrieval``'s winner decided an executed action of
        the current episode; ``end_episode`` credits them with its outcome. Returns entries noted."""
        if retrieval is None or retrieval.empty:
            return 0
        if retrieval.namespace != namespace:
            raise ValueError(f"retrieval is from {retrieval.namespace!r}, not {namespace!r}")
        used = self._uses.setdefault(namespace, {})
        for i, w in zip(retrieval.elite_ids, retrieval.elite_weights):
            used[i] = used.get(i, 0.0) + w
        return len(retrieval.elite_ids)

    def end_episode(self, success: bool, namespace: Optional[str] = None) -> Dict[str, int]:
        """Close the episode: the entries noted by ``record_use`` get n_used += 1 (and n_used_fail
        on failure); an entry that keeps failing is deleted, and so is every entry of a source
        episode whose entries keep steering failures (``episode_credit``). A failure ticks the
        ageing clock of the namespaces involved. Returns {"credited", "deleted"}."""
        cfg = self.config
        names = set(self._uses) | ({namespace} if namespace else set())
        credited = deleted = 0
        for name in sorted(names):
            s = self._ns.get(name)
            if s is None:
                continue
            if not success:
                s.clock += 1
            used = self._uses.get(name, {})
            ids = np.array(sorted(used), np.int64)
            rows = s.rows(ids)
            sources: Dict[int, float] = {}
            for i, r in zip(ids.tolist(), rows.tolist()):
                if r >= 0:
                    ep = int(s.num["episode_id"][r])
                    sources[ep] = sources.get(ep, 0.0) + used[i]
            rows = rows[rows >= 0]
            if rows.size:
                s.num["n_used"][rows] += 1
                s.num["last_used_clock"][rows] = s.clock
                credited += int(rows.size)
            bad_rows: List[int] = []
            if not success and rows.size:
                s.num["n_used_fail"][rows] += 1
                nf, nu = s.num["n_used_fail"][rows], s.num["n_used"][rows]
                bad_rows += rows[(nf >= cfg.fail_delete_min) & (nf > cfg.fail_delete_ratio * nu)].tolist()
            bad_eps = []
            if cfg.episode_credit:
                for ep, w in sources.items():
                    rec = s.source_credit.setdefault(ep, [0.0, 0.0, 0])
                    rec[0 if success else 1] += w
                    if not success:
                        rec[2] += 1
                        if rec[2] >= cfg.episode_fail_min and rec[1] > cfg.episode_fail_ratio * (rec[0] + rec[1]):
                            bad_eps.append(ep)
            if bad_eps:
                bad_rows += np.flatnonzero(np.isin(s.num["episode_id"], bad_eps)).tolist()
                s.deleted_episodes += len(bad_eps)
                for ep in bad_eps:
                    s.source_credit.pop(ep, None)
            n = s.delete(bad_rows)
            s.deleted_credit += n
            deleted += n
        self._uses = {}
        return {"credited": credited, "deleted": deleted}

    def drop_namespace(self, namespace: str) -> bool:
        return self._ns.pop(namespace, None) is not None

    # -- persistence -----------------------------------------------------------------------------
    def save(self, path) -> Path:
        """Write to directory ``path`` atomically: per namespace ``entries-<gen>.npz`` (keys and
        numeric columns) and ``values-<gen>.json``, then ``meta.json`` (schema, featurizer id,
        config, file sizes and sha256) by atomic rename: the commit point. Older generations are
        removed afterwards; a crash leaves the old memory or the new one, never a mix. Under the
        folder's writer lock (`embodia.memory.lock`), like ``SuccessMemory.save``."""
        path = Path(path)
        w = persist.writer(path)
        try:
            return self._save(path)
        finally:
            w.release()

    def _save(self, path: Path) -> Path:
        from embodia.memory.files import sha256_file
        from embodia.memory.persist import ns_dirname
        from embodia.shared.files import fsync_dir, write_atomic
        persist.check_not_orphaned(path)
        gen = persist.new_generation(path)
        recs = []
        for name in self.namespaces():
            s = self._ns[name]
            d = path / "ns" / ns_dirname(name)
            d.mkdir(parents=True, exist_ok=True)
            arrays = {"keys": s.keys, **{f"col_{k}": v for k, v in s.num.items()},
                      "state": np.array([getattr(s, k) for k in _NS_STATE], np.int64),
                      "success_lengths": np.asarray(s.success_lengths, np.int64),
                      "source_credit": np.asarray([[ep, *v] for ep, v in sorted(s.source_credit.items())],
                                                  np.float64).reshape(-1, 4)}
            f_np, f_js = d / f"entries-{gen}.npz", d / f"values-{gen}.json"
            write_atomic(f_np, lambda f: np.savez(f, **arrays))
            text = json.dumps({"name": name, "values": s.values}, sort_keys=True).encode("utf-8")
            write_atomic(f_js, lambda f: f.write(text))
            fsync_dir(d)
            recs.append({"name": name, "dir": f"ns/{d.name}", "n": s.n,
                         "files": {fn.name: {"bytes": fn.stat().st_size, "sha256": sha256_file(fn)}
                                   for fn in (f_np, f_js)},
                         "entries": f_np.name, "values": f_js.name})
        meta = {"format": "embodia.screen_memory", "schema_version": SCREEN_SCHEMA_VERSION,
                "featurizer": self.featurizer.id, "config": self.config.to_dict(), "generation": gen,
                "next_episode": self.next_episode, "saved_at": time.time(), "namespaces": recs,
                "reviewed": sorted(self.reviewed)}
        text = json.dumps(meta, indent=1, sort_keys=True).encode("utf-8")
        write_atomic(path / "meta.json", lambda f: f.write(text))
        fsync_dir(path)
        persist.collect(path, {(r["dir"], f) for r in recs for f in r["files"]})
        return path

    @classmethod
    def load(cls, path, *, config: Optional[ScreenMemoryConfig] = None,
             missing_ok: bool = False, lock: bool = False) -> "ScreenMemory":
        """Load a memory written by ``save``. A missing/corrupted/truncated file, another schema or
        a meta.json field out of range: ``MemoryFileError`` naming the file and field
        (``missing_ok``: no meta.json -> an empty memory). A memory keyed by another featurizer
        (``config`` changing dim, seed or block weights): ``MemoryMismatch``. ``lock``: take the
        folder's writer lock first and hold it while this memory lives (as ``SuccessMemory.load``).
        No pickle: ``np.load(allow_pickle=False)`` and JSON."""
        path = Path(path)
        w = persist.writer(path) if lock else None
        try:
            mem = persist.read_consistently(path, lambda: cls._read(path, config, missing_ok))
        except BaseException:
            if w is not None:
                w.release()
            raise
        if w is not None:
            persist.hold_with(mem, w)
        return mem

    @classmethod
    def _read(cls, path: Path, config: Optional[ScreenMemoryConfig], missing_ok: bool) -> "ScreenMemory":
        mp = path / "meta.json"
        if missing_ok and not mp.exists():
            return cls(config)
        meta = read_json(mp, "missing (no screen memory saved here)")
        if meta.get("format") != "embodia.screen_memory":
            raise MemoryFileError(mp, "not a screen memory")
        if meta.get("schema_version") != SCREEN_SCHEMA_VERSION:
            raise MemoryFileError(mp, f"unsupported schema_version {meta.get('schema_version')!r} "
                                      f"(this code reads {SCREEN_SCHEMA_VERSION})")
        persist.check_screen_meta(mp, meta)
        try:
            cfg = config if config is not None else ScreenMemoryConfig.from_dict(meta["config"])
        except (KeyError, TypeError, ValueError) as e:
            raise MemoryFileError(mp, f"invalid config ({e})") from e
        mem = cls(cfg)
        if meta.get("featurizer") != mem.featurizer.id:
            raise MemoryMismatch(f"{mp}: keys from featurizer {meta.get('featurizer')!r}, this memory "
                                 f"uses {mem.featurizer.id!r}; re-key instead of mixing key spaces")
        mem.next_episode = meta.get("next_episode", 0)
        mem.reviewed = set(meta.get("reviewed") or ())
        for rec in meta.get("namespaces", []):
            s = _read_space(path, rec, cfg)
            mem._ns[s.name] = s
        return mem


def _read_space(path: Path, rec: dict, cfg: ScreenMemoryConfig) -> _Space:
    """One namespace of a saved screen memory, its files checked against meta.json first."""
    f_np, f_js = persist.inside(path, rec, "entries"), persist.inside(path, rec, "values")
    for f in (f_np, f_js):
        info = rec["files"][f.name]
        persist.check_file(f, info["bytes"], info["sha256"])
    try:
        with np.load(f_np, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
        values = json.loads(f_js.read_bytes().decode("utf-8"))
        s = _Space(rec["name"], cfg)
        s.set_keys(np.asarray(data["keys"], np.float32).reshape(-1, cfg.dim))
        s.num = {k: data[f"col_{k}"].astype(dt) for k, dt in _NUM.items()}
        s.values = values["values"]
        if values.get("name") != rec["name"] or not (len(s.values) == s.keys.shape[0] ==
                                                      s.num["ids"].shape[0] == rec["n"]):
            raise ValueError("entry counts or namespace name disagree")
        for k, v in zip(_NS_STATE, data["state"].tolist()):
            setattr(s, k, persist.whole(f_np, f"state.{k}", int(v)))
        s.success_lengths = [int(x) for x in data["success_lengths"]]
        s.source_credit = {int(r[0]): [float(r[1]), float(r[2]), int(r[3])] for r in data["source_credit"]}
    except (KeyError, TypeError, ValueError, OSError, RecursionError) as e:
        raise MemoryFileError(f_np, f"invalid content ({type(e).__name__}: {str(e)[:200]})") from None
    s.index.rebuild(s.keys, s.num["ids"])
    return s
