"""Loading a robot memory (`SuccessMemory.load`): meta.json checked, each namespace's entries and
FAISS index read and verified against it, or an empty memory where the caller allows one. The file
format and the writer are in `memory/persist.py`; this is its read side for a whole memory.
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Dict

import numpy as np

from embodia.memory.config import MemoryConfig
from embodia.memory.errors import MemoryFileError, MemoryMismatch
from embodia.memory.files import sha256_file
from embodia.memory.persist import (
    META,
    STATE,
    inside,
    orphans_error,
    read_meta,
    read_seeds,
    check_file,
    entry_columns,
    hold_with,
    read_consistently,
    stored_files,
    whole,
    writer,
)


def _load_namespace(mem, path: Path, rec: dict):
    if not isinstance(rec, dict):
        raise MemoryFileError(path / META, f"bad namespace record {rec!r}")
    f = inside(path, rec, "entries")
    check_file(f, rec.get("bytes"), rec.get("sha256"))
    try:
        with np.load(f, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except Exception as e:                       # zipfile.BadZipFile, ValueError, OSError, ...
        raise MemoryFileError(f, f"unreadable npz ({type(e).__name__}: {e})") from e
    try:
        name = str(data["ns_name"])
        state = dict(zip(STATE, (int(x) for x in data["ns_state"])))
        action_dim = state["action_dim"]
        if not 1 <= action_dim <= mem.action_dim:
            raise ValueError(f"action_dim {action_dim} outside [1, {mem.action_dim}]")
        ns = mem.new_namespace(name, action_dim)
        schema = entry_columns(mem.key_dim, mem.horizon, mem.hist_len, action_dim)
        cols = {}
        n = int(data["col_ids"].shape[0])
        for k, (shp, dt) in schema.items():
            a = data[f"col_{k}"]
            if a.shape != (n,) + shp:
                raise ValueError(f"column {k} has shape {a.shape}, expected {(n,) + shp}")
            cols[k] = a.astype(dt, copy=False)
        if n and np.any(np.diff(cols["ids"]) <= 0):
            raise ValueError("ids not strictly increasing")
    except (KeyError, ValueError, TypeError) as e:
        raise MemoryFileError(f, f"invalid content ({e})") from e
    if name != rec.get("name"):
        raise MemoryFileError(f, f"holds namespace {name!r}, meta.json says {rec.get('name')!r}")
    if n != rec.get("n"):
        raise MemoryFileError(f, f"holds {n} entries, meta.json says {rec.get('n')}")
    for k in STATE:
        whole(f, f"ns_state.{k}", state[k])
    if n:
        ns.cols.append(cols)
    for k in STATE:
        if k != "action_dim":
            setattr(ns, k, state[k])
    ns.success_lengths = [int(x) for x in data["success_lengths"]]
    ns.sigma_hist.extend(float(x) for x in data["sigma_hist"])
    if "source_credit" in data:       # absent in memories written before episode credit
        ns.source_credit = {int(r[0]): [float(r[1]), float(r[2]), int(r[3])] for r in data["source_credit"]}
        ns.deleted_episodes = int(data["deleted_episodes"])
    for ep, parent, w in data["source_parents"] if "source_parents" in data else ():   # credit_cascade
        ns.parents.setdefault(int(ep), {})[int(parent)] = float(w)
    # FAISS: the cache when it is intact, else rebuild from the keys (the source of truth)
    loaded = False
    if rec.get("index") and n:
        fi = inside(path, rec, "index")
        try:
            if fi.is_file() and sha256_file(fi) == rec.get("index_sha256"):
                ns.index.load_serialized(np.fromfile(fi, dtype=np.uint8), rec.get("index_kind", "ivf"),
                                         rec.get("index_n_trained", n))
                loaded = ns.index.ntotal == n
        except Exception:                         # a bad cache is only a cache
            loaded = False
        if not loaded:
            warnings.warn(f"{fi}: index cache unusable, rebuilding from entries", RuntimeWarning)
    if not loaded:
        ns.index.rebuild(ns.cols["keys"], ns.cols["ids"])
    return ns


def load(cls, path: Path, *, encoder_id: str, normalizer_hash: str, on_error: str = "raise",
         missing_ok: bool = False, config=None, dims: Dict[str, int], lock: bool = False):
    """``SuccessMemory.load``. With ``lock`` the folder's writer lock is taken first and held by the
    memory (released when it is garbage-collected or its process ends)."""
    if on_error not in ("raise", "empty"):
        raise ValueError("on_error must be 'raise' or 'empty'")
    w = writer(path) if lock else None
    try:
        kw = dict(encoder_id=encoder_id, normalizer_hash=normalizer_hash, missing_ok=missing_ok, config=config,
                  dims=dims)
        try:
            mem = read_consistently(path, lambda: _load(cls, path, on_error="raise", **kw))
        except MemoryFileError:
            if on_error == "raise":
                raise
            mem = _load(cls, path, on_error="empty", **kw)
    except BaseException:
        if w is not None:
            w.release()
        raise
    if w is not None:
        hold_with(mem, w)
    return mem


def _load(cls, path: Path, *, encoder_id: str, normalizer_hash: str, on_error: str, missing_ok: bool,
          config, dims: Dict[str, int]):
    meta = None

    def empty(err: Exception, warn: bool = True):
        d = {k: v for k, v in dims.items() if v is not None}
        if meta is not None:
            d = {k: meta[k] for k in ("key_dim", "horizon", "action_dim", "hist_len")}
        if not all(k in d for k in ("key_dim", "horizon", "action_dim")):
            raise MemoryFileError(getattr(err, "path", path),
                                  f"{getattr(err, 'reason', err)}; cannot start an empty memory "
                                  "without key_dim, horizon and action_dim") from err
        cfg = config
        if cfg is None and meta is not None:
            try:
                cfg = MemoryConfig.from_dict(meta["config"])
            except Exception:
                cfg = None
        if warn:
            warnings.warn(f"{err}; starting with an empty success memory", RuntimeWarning)
        return cls(cfg, d["key_dim"], d["horizon"], d["action_dim"], d.get("hist_len", 8),
                   encoder_id=encoder_id, normalizer_hash=normalizer_hash)

    try:
        meta = read_meta(path)
    except MemoryFileError as e:
        if stored_files(path):      # a deleted or broken meta.json: never an empty memory over real data
            if getattr(e, "meta_read", False):
                raise
            raise orphans_error(path, e.reason) from e
        if missing_ok and not (path / META).exists():
            return empty(e, warn=False)
        if on_error == "empty":
            return empty(e)
        raise
    if meta["encoder_id"] != encoder_id:
        raise MemoryMismatch(f"{path / META}: key encoder {meta['encoder_id']!r} != {encoder_id!r}; "
                             "re-key the memory instead of mixing key spaces")
    if meta["normalizer_hash"] != normalizer_hash:
        raise MemoryMismatch(f"{path / META}: action normalizer {meta['normalizer_hash']!r} != "
                             f"{normalizer_hash!r}; stored chunks are in other units")
    for k, v in dims.items():
        if v is not None and int(meta[k]) != int(v):
            raise MemoryMismatch(f"{path / META}: {k} = {meta[k]}, expected {v}")
    try:
        stored = MemoryConfig.from_dict(meta["config"])
        cfg = config if config is not None else stored
    except (TypeError, ValueError) as e:
        err = MemoryFileError(path / META, f"invalid config ({e})")
        if on_error == "empty":
            return empty(err)
        raise err from e
    changed = sorted(k for k, v in cfg.to_dict().items() if stored.to_dict().get(k) != v)
    if changed:
        warnings.warn(f"{path / META}: loading with another config than the stored one ({', '.join(changed)}); "
                      "the next save stores it", RuntimeWarning)
    mem = cls(cfg, int(meta["key_dim"]), int(meta["horizon"]), int(meta["action_dim"]),
              int(meta["hist_len"]), encoder_id=encoder_id, normalizer_hash=normalizer_hash)
    try:
        for rec in meta["namespaces"]:
            ns = _load_namespace(mem, path, rec)
            mem._ns[ns.name] = ns
    except MemoryFileError as e:
        if on_error == "empty":
            return empty(e)
        raise
    mem.reviewed = {str(i) for i in meta.get("reviewed") or ()}
    mem.seeds = read_seeds(path, meta.get("seeds") or {})
    return mem
