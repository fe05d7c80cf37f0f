"""Atomic, pickle-free persistence of a SuccessMemory.

Layout of a memory directory::

    meta.json                                   commit point, written last (atomic rename)
    ns/<slug>-<hash8>/entries-<gen>.npz         one per namespace: all columns + counters
    ns/<slug>-<hash8>/index-<gen>.faiss         optional cache (IVF namespaces only)

``meta.json`` holds schema_version, encoder_id, normalizer_hash, dims, the config, and for each
namespace its file names, byte sizes and sha256. Files are written under temporary names, fsynced
and renamed; meta.json is renamed last, then files of older generations are removed. Loading
checks size and sha256 before ``np.load(allow_pickle=False)``, so a truncated or corrupted file is
reported by name (``MemoryFileError``) instead of failing somewhere inside numpy (the loading of a
whole robot memory is in `memory/loading.py`).

meta.json carries ``meta_sha256``, the SHA-256 of its own canonical JSON without that field, so an
edited config (``capacity: 1`` would evict all but one entry), file name or count is reported
instead of obeyed. File names in meta.json must be the ones ``save`` writes (``ns/<slug>-<hash8>``,
``entries-<gen>.npz``) and resolve inside the memory folder. A folder whose meta.json is missing or
unreadable but which still holds namespace files is an error for ``load`` and for ``save``: it is
never read as an empty memory whose next save would delete what is there.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import time
import warnings
from pathlib import Path
from typing import Dict

import numpy as np

from embodia.memory.errors import MemoryFileError
from embodia.memory.files import read_json, sha256_file
from embodia.shared.files import fsync_dir, temp_owner, write_atomic

SCHEMA_VERSION = 1
META = "meta.json"
STATE = ("clock", "episodes", "merges", "evictions", "deleted_credit", "queries", "next_id",
          "action_dim")








def entry_columns(key_dim: int, horizon: int, hist_len: int, action_dim: int) -> Dict[str, tuple]:
    """The columns of a namespace's entries: name -> (shape per entry, dtype), as stored on disk."""
    return {
        "ids": ((), np.int64),
        "keys": ((key_dim,), np.float32),
        "chunks": ((horizon, action_dim), np.float32),
        "chunk_mask": ((horizon,), np.bool_),
        "hist": ((hist_len, action_dim), np.float32),
        "hist_n": ((), np.int16),            # valid preceding actions (right-aligned in hist)
        "progress": ((), np.float32),
        "episode_id": ((), np.int64),
        "step": ((), np.int32),
        "ep_len": ((), np.int32),            # steps to success of the (shortest) source episode
        "created_clock": ((), np.int64),     # namespace episode clock at insert / last merge
        "last_used_clock": ((), np.int64),   # -1: never used
        "n_support": ((), np.int32),
        "n_used": ((), np.int32),
        "n_used_fail": ((), np.int32),
        "created_at": ((), np.float64),
        "last_used_at": ((), np.float64),
    }


def ns_dirname(name: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:48].strip("._") or "ns"
    return f"{slug}-{hashlib.sha1(name.encode('utf-8')).hexdigest()[:8]}"


_DIR = re.compile(r"ns/[A-Za-z0-9_.-]{1,48}-[0-9a-f]{8}")
_FILES = {"entries": re.compile(r"entries-[0-9a-f]{1,32}\.npz"), "index": re.compile(r"index-[0-9a-f]{1,32}\.faiss"),
          "values": re.compile(r"values-[0-9a-f]{1,32}\.json")}


def meta_checksum(meta: dict) -> str:
    """SHA-256 of meta.json's canonical JSON without its own ``meta_sha256`` field."""
    body = {k: v for k, v in meta.items() if k != "meta_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


def inside(path: Path, rec: dict, field: str) -> Path:
    """The file a namespace record names, refused unless it is a name ``save`` writes and it
    resolves inside the memory folder (no ``..``, no absolute path, no symlink out)."""
    d, name = rec.get("dir"), rec.get(field)
    if not (isinstance(d, str) and _DIR.fullmatch(d) and ".." not in d):
        raise MemoryFileError(path / META, f"namespace dir {d!r} is not a folder this memory writes (ns/<name>-<hash>)")
    if not (isinstance(name, str) and _FILES[field].fullmatch(name)):
        raise MemoryFileError(path / META, f"{field} file {name!r} is not a name this memory writes")
    f = path / d / name
    root = path.resolve()
    if not f.resolve().is_relative_to(root):
        raise MemoryFileError(f, f"resolves outside the memory folder {root}")
    return f


def stored_files(path: Path) -> list:
    """Namespace files (entries/index, any generation) under ``path/ns``: a saved memory's data."""
    root = path / "ns"
    if not root.is_dir():
        return []
    return sorted(f for d in root.iterdir() if d.is_dir() for f in d.iterdir()
                  if any(p.fullmatch(f.name) for p in _FILES.values()))


def check_not_orphaned(path) -> None:
    """Raise MemoryFileError when ``path`` holds namespace files but no meta.json: a memory whose
    commit record is gone (deleted, or a first save cut short), never to be read as empty.

    >>> check_not_orphaned("/nonexistent")
    """
    path = Path(path)
    if not (path / META).is_file() and stored_files(path):
        raise orphans_error(path, "missing")


def orphans_error(path: Path, reason: str) -> MemoryFileError:
    files = stored_files(path)
    return MemoryFileError(path / META, f"{reason}, but {path / 'ns'} holds {len(files)} file(s) of a saved memory; "
                           "refusing to treat it as empty (its next save would delete them): restore meta.json, "
                           "or move the folder away to start afresh")








def save(mem, path: Path) -> Path:
    """Write ``mem`` to ``path`` under the folder's writer lock (held already when the memory was
    loaded with ``lock=True``, else taken for the length of this save)."""
    w = writer(path)
    try:
        return _save(mem, path)
    finally:
        w.release()


def _save(mem, path: Path) -> Path:
    if not (path / META).is_file() and stored_files(path):
        raise orphans_error(path, "missing")
    gen = new_generation(path)
    nss = []
    for name in mem.namespaces():
        ns = mem._ns[name]
        d = path / "ns" / ns_dirname(name)
        d.mkdir(parents=True, exist_ok=True)
        arrays = {f"col_{k}": v for k, v in ns.cols.arrays().items()}
        arrays["ns_name"] = np.array(name)
        arrays["ns_state"] = np.array([getattr(ns, k) for k in STATE], np.int64)
        arrays["success_lengths"] = np.asarray(ns.success_lengths, np.int64)
        arrays["sigma_hist"] = np.asarray(list(ns.sigma_hist), np.float64)
        arrays["source_credit"] = np.asarray([[ep, *v] for ep, v in sorted(ns.source_credit.items())],
                                             np.float64).reshape(-1, 4)
        arrays["deleted_episodes"] = np.int64(ns.deleted_episodes)
        arrays["source_parents"] = np.asarray([[ep, p, w] for ep, ps in sorted(ns.parents.items())
                                               for p, w in sorted(ps.items())], np.float64).reshape(-1, 3)
        f_entries = d / f"entries-{gen}.npz"
        write_atomic(f_entries, lambda f: np.savez(f, **arrays))
        rec = {"name": name, "dir": f"ns/{d.name}", "entries": f_entries.name, "n": ns.n,
               "bytes": f_entries.stat().st_size, "sha256": sha256_file(f_entries)}
        if ns.index.kind != "flat" and ns.n:
            f_index = d / f"index-{gen}.faiss"
            buf = ns.index.serialize()
            write_atomic(f_index, lambda f: f.write(buf.tobytes()))
            rec.update(index=f_index.name, index_sha256=sha256_file(f_index), index_kind=ns.index.kind,
                       index_n_trained=ns.index.n_trained)
        fsync_dir(d)
        nss.append(rec)
    meta = {
        "format": "embodia.success_memory", "schema_version": SCHEMA_VERSION,
        "encoder_id": mem.encoder_id, "normalizer_hash": mem.normalizer_hash,
        "key_dim": mem.key_dim, "horizon": mem.horizon, "action_dim": mem.action_dim,
        "hist_len": mem.hist_len, "config": mem.config.to_dict(), "generation": gen,
        "saved_at": time.time(), "namespaces": nss, "reviewed": sorted(mem.reviewed),
    }
    if any(mem.seeds.values()):
        meta["seeds"] = {name: [[seed, *rec] for seed, rec in sorted(recs.items())]
                         for name, recs in sorted(mem.seeds.items()) if recs}
    meta["meta_sha256"] = meta_checksum(meta)
    text = json.dumps(meta, indent=1, sort_keys=True).encode("utf-8")
    write_atomic(path / META, lambda f: f.write(text))
    fsync_dir(path)
    # the new generation is committed: remove older files (only names this module writes)
    collect(path, {(r["dir"], r["entries"]) for r in nss} | {(r["dir"], r.get("index")) for r in nss})
    return path


_GENERATIONAL = re.compile(r"(entries-[0-9a-f]+\.npz|index-[0-9a-f]+\.faiss|values-[0-9a-f]+\.json)")


def new_generation(path: Path) -> str:
    """A generation name newer than the one meta.json commits (a clock stepped back never reuses an
    older name, which the save's clean-up would then take for a stale file)."""
    gen = time.time_ns()
    try:
        gen = max(gen, int(json.loads((path / META).read_bytes())["generation"], 16) + 1)
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        pass
    return f"{gen:x}"


def collect(path: Path, keep: set | None = None) -> None:
    """Remove what a committed save no longer names: namespace files of other generations than
    ``keep`` ({(dir, name)}; None: keep them all), temp files of processes that are not running,
    emptied folders. Run by the writer lock's holder only, so no save of another process is in flight."""
    root = path / "ns"
    for d in (root.iterdir() if root.is_dir() else ()):
        if not d.is_dir():
            continue
        for f in d.iterdir():
            if keep is not None and _GENERATIONAL.fullmatch(f.name) and (f"ns/{d.name}", f.name) not in keep:
                f.unlink(missing_ok=True)
        remove_dead_temps(d)
        if keep is not None and not any(d.iterdir()):
            d.rmdir()
    remove_dead_temps(path)


def remove_dead_temps(folder: Path) -> int:
    """Delete the temp files (``.<name>.tmp-<pid>[-<thread>]``, `write_atomic`'s) in ``folder`` whose writing
    process is not running: what a kill during a save leaves; returns how many."""
    from embodia.memory.lock import pid_alive
    n = 0
    for f in (folder.iterdir() if folder.is_dir() else ()):
        owner = temp_owner(f.name)
        if owner is not None and f.is_file() and owner != os.getpid() and not pid_alive(owner):
            f.unlink(missing_ok=True)
            n += 1
    return n


def writer(path):
    """This process's writer lock on memory folder ``path`` (`embodia.memory.lock`): `MemoryBusy`
    naming the holder when another live process has it. The first hold also clears what killed
    writers left: temp files of dead processes, pending records cut short or already decided."""
    from embodia.memory import lock, pending
    w = lock.hold(path)
    if w.count == 1:
        collect(Path(path))
        pending.tidy(path)
    return w




def committed_generation(path: Path):
    """The generation meta.json names now (None when unreadable): a reader compares it before and
    after reading the files, to tell a file a newer save removed from a damaged one."""
    try:
        return json.loads((Path(path) / META).read_bytes()).get("generation")
    except (OSError, ValueError, AttributeError, RecursionError):
        return None


READ_TRIES = 5


def read_consistently(path: Path, read):
    """``read()``, again (up to READ_TRIES times) when it failed on a file that a save committed
    meanwhile removed: readers take no lock, so this is how they never see a half-written state."""
    for attempt in range(READ_TRIES):
        before = committed_generation(path)
        try:
            return read()
        except MemoryFileError:
            if attempt + 1 == READ_TRIES or committed_generation(path) == before:
                raise


def read_meta(path: Path) -> dict:
    mp = path / META
    meta = read_json(mp, "missing (no memory saved here)")
    try:
        _check_read_meta(mp, meta)
    except MemoryFileError as e:
        e.meta_read = True      # meta.json is there and parses: its own message says what is wrong
        raise
    return meta


def _check_read_meta(mp: Path, meta: dict) -> None:
    sv = meta.get("schema_version")
    if sv != SCHEMA_VERSION:
        raise MemoryFileError(mp, f"unsupported schema_version {sv!r} (this code reads {SCHEMA_VERSION})")
    for k in ("encoder_id", "normalizer_hash", "key_dim", "horizon", "action_dim", "hist_len",
              "config", "namespaces"):
        if k not in meta:
            raise MemoryFileError(mp, f"field {k!r} missing")
    if "meta_sha256" not in meta:
        warnings.warn(f"{mp}: written before meta.json had a checksum; its config and file list are taken "
                      "as they are (the next save adds one)", RuntimeWarning)
    elif meta["meta_sha256"] != meta_checksum(meta):
        raise MemoryFileError(mp, "edited outside embodia: its checksum does not match its content (config, "
                              "dims or file list changed); pass the config you want at load time instead")
    check_meta(mp, meta)


# -- meta.json's fields, each range-checked on load ---------------------------------------------------
MAX_SEED = 2 ** 64 - 1          # torch.Generator.manual_seed takes 0..2**64-1 (VLAPolicy.reset seeds it)
MAX_SEED_RECORDS = 10_000       # per namespace; credit_seed forgets the worst record beyond it
MAX_NAMESPACES = 100_000
MAX_DIM = 1 << 16
MAX_COUNT = 2 ** 63 - 1         # counters and ids are int64 on disk
MAX_REVIEWED = 1_000_000
_HEX64 = re.compile(r"[0-9a-f]{64}")
_GEN = re.compile(r"[0-9a-f]{1,32}")


def _bad(mp: Path, field: str, v, expected: str) -> MemoryFileError:
    shown = repr(v)
    return MemoryFileError(mp, f"{field} = {shown[:60] + ('...' if len(shown) > 60 else '')}: expected {expected}")


def whole(mp: Path, field: str, v, lo: int = 0, hi: int = MAX_COUNT) -> int:
    """``v`` when it is a whole number in [lo, hi] (not a bool, not a float); else MemoryFileError naming the field."""
    if type(v) is not int or not lo <= v <= hi:
        raise _bad(mp, field, v, f"a whole number {lo}..{hi}")
    return v


def text(mp: Path, field: str, v, pattern: re.Pattern | None = None, limit: int = 4096) -> str:
    """``v`` when it is a string (of ``pattern``, at most ``limit`` characters); else MemoryFileError."""
    if not isinstance(v, str) or len(v) > limit or (pattern is not None and not pattern.fullmatch(v)):
        raise _bad(mp, field, v, "a string" + (f" of the form {pattern.pattern}" if pattern else "")
                   + f" of at most {limit} characters")
    return v


def moment(mp: Path, field: str, v) -> float:
    """A time stamp: a finite number >= 0."""
    if type(v) not in (int, float) or not (math.isfinite(v) and v >= 0):
        raise _bad(mp, field, v, "a finite time >= 0")
    return float(v)


def finite_config(mp: Path, cfg) -> dict:
    """The stored config: a mapping whose numbers are all finite (NaN passes every `<=` check)."""
    if not isinstance(cfg, dict):
        raise _bad(mp, "config", cfg, "a mapping")
    for k, v in cfg.items():
        if isinstance(v, float) and not math.isfinite(v):
            raise _bad(mp, f"config.{k}", v, "a finite number")
    return cfg


def check_common(mp: Path, meta: dict) -> None:
    """The fields both kinds of memory write: generation, saved_at, namespaces, reviewed."""
    if "generation" in meta:
        text(mp, "generation", meta["generation"], _GEN)
    if "saved_at" in meta:
        moment(mp, "saved_at", meta["saved_at"])
    nss = meta.get("namespaces", [])
    if not isinstance(nss, list) or len(nss) > MAX_NAMESPACES:
        raise _bad(mp, "namespaces", type(nss).__name__, f"a list of at most {MAX_NAMESPACES} records")
    for i, rec in enumerate(nss):
        if not isinstance(rec, dict):
            raise _bad(mp, f"namespaces[{i}]", rec, "a record")
        text(mp, f"namespaces[{i}].name", rec.get("name"))
        whole(mp, f"namespaces[{i}].n", rec.get("n"))
    reviewed = meta.get("reviewed", [])
    if not isinstance(reviewed, list) or len(reviewed) > MAX_REVIEWED:
        raise _bad(mp, "reviewed", type(reviewed).__name__, f"a list of at most {MAX_REVIEWED} ids")
    for i, r in enumerate(reviewed):
        text(mp, f"reviewed[{i}]", r, limit=64)


def check_meta(mp: Path, meta: dict) -> None:
    """MemoryFileError naming the first field of a robot memory's meta.json out of its range."""
    if meta.get("format", "embodia.success_memory") != "embodia.success_memory":
        raise _bad(mp, "format", meta.get("format"), "'embodia.success_memory'")
    text(mp, "encoder_id", meta["encoder_id"])
    text(mp, "normalizer_hash", meta["normalizer_hash"])
    for k in ("key_dim", "horizon", "action_dim"):
        whole(mp, k, meta[k], 1, MAX_DIM)
    whole(mp, "hist_len", meta["hist_len"], 0, MAX_DIM)
    finite_config(mp, meta["config"])
    check_common(mp, meta)
    read_seeds(mp.parent, meta.get("seeds") or {})
    for i, rec in enumerate(meta["namespaces"]):
        whole(mp, f"namespaces[{i}].bytes", rec.get("bytes"))
        text(mp, f"namespaces[{i}].sha256", rec.get("sha256"), _HEX64)
        if rec.get("index") is not None:
            text(mp, f"namespaces[{i}].index_sha256", rec.get("index_sha256"), _HEX64)
            whole(mp, f"namespaces[{i}].index_n_trained", rec.get("index_n_trained", 0))


def check_file(f: Path, size: int, sha256: str) -> None:
    """MemoryFileError unless ``f`` is there with the size and sha256 meta.json gives (a file that
    vanishes while it is read is missing too: a newer save removed it)."""
    try:
        if not f.is_file():
            raise MemoryFileError(f, "missing")
        got = f.stat().st_size
        if got != size:
            raise MemoryFileError(f, f"truncated or altered: {got} bytes, meta.json says {size}")
        if sha256_file(f) != sha256:
            raise MemoryFileError(f, "corrupted: sha256 differs from meta.json")
    except OSError as e:
        raise MemoryFileError(f, f"unreadable ({type(e).__name__}: {e})") from None


def check_screen_meta(mp: Path, meta: dict) -> None:
    """MemoryFileError naming the first field of a screen memory's meta.json out of its range (file
    names included: only the ones its save writes, inside the folder)."""
    text(mp, "featurizer", meta.get("featurizer"))
    finite_config(mp, meta.get("config"))
    whole(mp, "next_episode", meta.get("next_episode", 0))
    check_common(mp, meta)
    for i, rec in enumerate(meta.get("namespaces", [])):
        files = rec.get("files")
        names = {rec.get("entries"), rec.get("values")}
        if not isinstance(files, dict) or set(files) != names:
            raise _bad(mp, f"namespaces[{i}].files", files, "the entries and values files, each with bytes and sha256")
        for name, info in files.items():
            if not isinstance(info, dict):
                raise _bad(mp, f"namespaces[{i}].files[{name!r}]", info, "{bytes, sha256}")
            whole(mp, f"namespaces[{i}].files[{name!r}].bytes", info.get("bytes"))
            text(mp, f"namespaces[{i}].files[{name!r}].sha256", info.get("sha256"), _HEX64)
        inside(mp.parent, rec, "entries")
        inside(mp.parent, rec, "values")


def hold_with(mem, w) -> None:
    """Tie writer lock ``w`` to ``mem``: released by `let_go`, or when the memory is collected."""
    import weakref
    mem.writer_lock = weakref.finalize(mem, w.release)     # a finalizer runs once, however it is called
    mem.lock_taken_over = w.took_over                      # the dead holder of a stale lock ({}: none)


def let_go(mem) -> None:
    """Release the writer lock ``mem`` was loaded with (``lock=True``); a no-op for any other memory.
    The memory may still be read; a later ``save`` takes the lock again for its length."""
    unlock = getattr(mem, "writer_lock", None)
    if unlock is not None:
        unlock()


def seed_records(path) -> Dict[str, Dict[int, list]]:
    """The noise-seed records ({namespace: {seed: [successes, episodes, latest]}}) of the memory
    saved in folder ``path``, from its checked meta.json, without loading its entries."""
    path = Path(path)
    return read_seeds(path, read_meta(path).get("seeds") or {})


def read_seeds(path: Path, seeds) -> Dict[str, Dict[int, list]]:
    """meta.json's noise-seed records ({namespace: [[seed, successes, episodes, latest], ...]}), each
    number range-checked: a seed the noise generator cannot take would stop every later run."""
    mp = path / META
    if not isinstance(seeds, dict) or len(seeds) > MAX_NAMESPACES:
        raise _bad(mp, "seeds", type(seeds).__name__, f"a mapping of at most {MAX_NAMESPACES} namespaces")
    out: Dict[str, Dict[int, list]] = {}
    for name, recs in seeds.items():
        where = f"seeds[{name[:40]!r}]"
        if not isinstance(recs, list) or len(recs) > MAX_SEED_RECORDS:
            n = len(recs) if isinstance(recs, list) else type(recs).__name__
            raise _bad(mp, where, n, f"a list of at most {MAX_SEED_RECORDS} seed records")
        for i, rec in enumerate(recs):
            if not isinstance(rec, list) or len(rec) != 4:
                raise _bad(mp, f"{where}[{i}]", rec, "[seed, successes, episodes, latest]")
            seed = whole(mp, f"{where}[{i}].seed", rec[0], 0, MAX_SEED)
            episodes = whole(mp, f"{where}[{i}].episodes", rec[2])
            whole(mp, f"{where}[{i}].successes", rec[1], 0, episodes)
            whole(mp, f"{where}[{i}].latest", rec[3])
            out.setdefault(name, {})[seed] = rec[1:]
    return out
