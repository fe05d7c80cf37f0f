"""What a LeRobot v3 dataset must hold before `LocalDataset` trusts it: every claim of
``meta/info.json`` (fps, counts, feature shapes, path templates) is checked against bounds and
against the files, so a dataset that lies is refused in one line naming the file and the field
(`DatasetError`) instead of ending in a ZeroDivisionError, a MemoryError, a RecursionError, a read
outside the dataset or a report full of NaN.

>>> check_fps("meta/info.json", {"fps": 0})         # doctest: +IGNORE_EXCEPTION_DETAIL
Traceback (most recent call last):
DatasetError: meta/info.json: fps must be a number in (0, 10000], got 0
>>> json_safe({"mae": float("nan"), "n": [1.0, float("inf")]})
{'mae': None, 'n': [1.0, None]}
"""
from __future__ import annotations

import json
import math
import string
from pathlib import Path
from typing import Any

import numpy as np

from embodia.devices.observation import ACTION, IMAGES, STATE

MAX_JSON_BYTES = 64 * 2 ** 20   # info.json of a 10,000-feature dataset is ~5 MB; more is not metadata
MAX_FPS = 10_000
MAX_COUNT = 10 ** 9             # episodes, frames, tasks: far past any real dataset, never allocated
MAX_VECTOR = 4096               # state/action width: a humanoid has a few hundred
MAX_SIDE = 8192                 # image height/width
MAX_DIMS = 4
TEMPLATE_FIELDS = {"data_path": {"chunk_index", "file_index"},
                   "video_path": {"video_key", "chunk_index", "file_index"}}


class DatasetError(ValueError):
    """A dataset that is missing, corrupt or inconsistent; the message names the file."""


def show(v: Any, width: int = 60) -> str:
    """A value quoted in an error, cut short: a lying field may hold megabytes."""
    text = repr(v)
    return text if len(text) <= width else text[:width] + "..."


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


# -- bounded reads -----------------------------------------------------------------------------------
def parse_json(text: str, where: str) -> Any:
    """JSON whose NaN/Infinity become None (a report must stay valid JSON) and whose nesting or
    oversized numbers are a DatasetError naming ``where``, never a RecursionError."""
    try:
        return json.loads(text, parse_constant=lambda _: None)
    except RecursionError:
        raise DatasetError(f"{where}: JSON nested too deeply") from None
    except ValueError as e:          # JSONDecodeError, or an integer of more than 4300 digits
        raise DatasetError(f"{where}: corrupt JSON ({e})") from None


def load_json(path: Path, root: Path | None = None) -> Any:
    """A JSON file of at most `MAX_JSON_BYTES`, inside ``root`` when given, or DatasetError."""
    path = Path(path)
    if root is not None:
        inside(root, path, path)
    try:
        size = path.stat().st_size
        if size > MAX_JSON_BYTES:
            raise DatasetError(f"{path}: {size} bytes, more than the {MAX_JSON_BYTES} a metadata file may hold")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DatasetError(f"{path}: missing") from None
    except (OSError, UnicodeDecodeError) as e:
        raise DatasetError(f"{path}: unreadable ({e})") from None
    return parse_json(text, str(path))


def inside(root: Path, path: Path, field: Any) -> Path:
    """``path`` if it resolves inside the dataset ``root`` (symlinks followed), else DatasetError:
    a dataset may only make a reader open its own files."""
    real = Path(path).resolve()
    if not real.is_relative_to(Path(root).resolve()):
        raise DatasetError(f"{field}: resolves to {real}, outside the dataset {Path(root).resolve()}")
    return Path(path)


# -- meta/info.json -----------------------------------------------------------------------------------
def check_fps(where, info: dict) -> float:
    fps = info.get("fps")
    if not (isinstance(fps, (int, float)) and not isinstance(fps, bool) and math.isfinite(fps)
            and 0 < fps <= MAX_FPS):
        raise DatasetError(f"{where}: fps must be a number in (0, {MAX_FPS}], got {show(fps)}")
    return float(fps)


def check_count(where, info: dict, key: str, required: bool = False) -> int | None:
    v = info.get(key)
    if v is None and not required:
        return None
    if not (_is_int(v) and 0 <= v <= MAX_COUNT):
        raise DatasetError(f"{where}: {key} must be a whole number 0..{MAX_COUNT}, got {show(v)}")
    return int(v)


def check_template(where, info: dict, key: str) -> None:
    """A path template (data_path, video_path) that can only name a file inside the dataset:
    relative, no ``..``, and only LeRobot's placeholders (no attribute or index lookups)."""
    t = info.get(key)
    if not isinstance(t, str) or not t:
        raise DatasetError(f"{where}: {key} must be a path template, got {show(t)}")
    if Path(t).is_absolute() or ".." in Path(t).parts or "\x00" in t:
        raise DatasetError(f"{where}: {key} {show(t)} points outside the dataset (absolute or '..')")
    try:
        fields = {f for _, f, _, _ in string.Formatter().parse(t) if f is not None}
    except ValueError as e:
        raise DatasetError(f"{where}: {key} {show(t)} is not a path template ({e})") from None
    if not fields <= TEMPLATE_FIELDS[key]:
        raise DatasetError(f"{where}: {key} {show(t)} uses {sorted(fields - TEMPLATE_FIELDS[key])}; "
                           f"allowed placeholders: {sorted(TEMPLATE_FIELDS[key])}")


def fill_template(root: Path, where, info: dict, key: str, **fields) -> Path:
    """The file a template names for one episode, refused unless it resolves inside ``root``."""
    try:
        rel = info[key].format(**fields)
    except (KeyError, IndexError, ValueError, TypeError) as e:
        raise DatasetError(f"{where}: {key} {show(info[key])} cannot name a file ({e})") from None
    if ".." in Path(rel).parts or Path(rel).is_absolute():      # a placeholder's value may smuggle them in
        raise DatasetError(f"{where}: {key} names {show(rel)}, outside the dataset")
    return inside(root, Path(root) / rel, f"{where}: {key} {show(rel)}")


def width(feature: dict) -> int:
    """Number of values one frame of a (checked) feature holds."""
    return int(np.prod(feature["shape"], dtype=np.int64))


def check_feature(where, key: str, f) -> None:
    """A feature's dtype and shape are sane and bounded (never allocate from a claimed shape)."""
    at = f"{where}: features.{key}"
    if not isinstance(f, dict) or not isinstance(f.get("dtype"), str):
        raise DatasetError(f"{at}: expected an object with a dtype, got {show(f)}")
    shape = f.get("shape")
    if not (isinstance(shape, list) and 1 <= len(shape) <= MAX_DIMS
            and all(_is_int(d) and 1 <= d <= MAX_SIDE for d in shape)):
        raise DatasetError(f"{at}.shape must be 1..{MAX_DIMS} whole numbers 1..{MAX_SIDE}, got {show(shape)}")
    if f["dtype"] in ("video", "image"):
        if len(shape) != 3 or not {1, 3, 4} & {shape[0], shape[-1]}:
            raise DatasetError(f"{at}.shape {shape}: an image is [height, width, channels] (or channels first)")
    elif len(shape) != 1 or shape[0] > MAX_VECTOR:
        raise DatasetError(f"{at}.shape {show(shape)}: a vector feature holds 1..{MAX_VECTOR} values")
    names = f.get("names")
    if key in (STATE, ACTION):
        if isinstance(names, list) and len(names) != shape[0]:
            raise DatasetError(f"{at}: {len(names)} names for shape {shape}")


def check_info(where, info) -> None:
    """Every claim of info.json that a reader acts on, before it acts."""
    if not isinstance(info, dict) or not isinstance(info.get("features"), dict):
        raise DatasetError(f"{where}: not a LeRobot info.json (no 'features' object)")
    version = str(info.get("codebase_version", ""))
    if not version.startswith("v3"):
        raise DatasetError(f"{where}: codebase_version {show(version)}; only v3.x is supported")
    for key in ("fps", "total_episodes", "data_path"):
        if key not in info:
            raise DatasetError(f"{where}: missing field {key!r}")
    check_fps(where, info)
    if not isinstance(info.get("robot_type"), (str, type(None))):
        raise DatasetError(f"{where}: robot_type must be text, got {show(info.get('robot_type'))}")
    check_count(where, info, "total_episodes", required=True)
    for key in ("total_frames", "total_tasks"):
        check_count(where, info, key)
    check_template(where, info, "data_path")
    for key, f in info["features"].items():
        check_feature(where, key, f)
    if any(f["dtype"] == "video" for f in info["features"].values()):
        check_template(where, info, "video_path")


def check_embodiment(where, info: dict, emb) -> None:
    """The stored embodiment agrees with the features it describes (a state of 10 channels is not
    shape [3]), and its rate and chunk are sane."""
    _check_types(where, emb)
    feats = info["features"]
    for key, channels in ((STATE, emb.state), (ACTION, emb.actions)):
        if key in feats and width(feats[key]) != len(channels):
            raise DatasetError(f"{where}: features.{key}.shape {feats[key]['shape']} but the embodiment "
                               f"has {len(channels)} {'action' if key == ACTION else 'state'} channels")
    if not (math.isfinite(emb.hz) and 0 < emb.hz <= MAX_FPS) or not 1 <= emb.chunk <= MAX_VECTOR:
        raise DatasetError(f"{where}: embodia.embodiment hz {show(emb.hz)} / chunk {show(emb.chunk)} out of range")
    for cam in emb.cameras:
        f = feats.get(f"{IMAGES}.{cam.name}")
        if not f or f["dtype"] not in ("video", "image"):
            raise DatasetError(f"{where}: the embodiment's camera {cam.name!r} has no image feature")


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)


def _check_types(where, emb) -> None:
    """The stored embodiment's fields have the types every consumer assumes (a name is text, a
    limit a number, a camera a bounded size): a dataclass built from JSON checks none of them."""
    texts = [emb.name, emb.kind, emb.action_kind, emb.convention] + [c.name for c in emb.actions + emb.state]
    if not all(isinstance(t, str) for t in texts):
        raise DatasetError(f"{where}: embodia.embodiment: names, kind and convention must be text")
    if not all(_number(c.low) and _number(c.high) for c in emb.actions + emb.state):
        raise DatasetError(f"{where}: embodia.embodiment: channel limits must be numbers or null")
    if not (_number(emb.hz) and _is_int(emb.chunk) and _is_int(emb.exec_horizon)):
        raise DatasetError(f"{where}: embodia.embodiment: hz must be a number, chunk and exec_horizon whole numbers")
    for cam in emb.cameras:
        if not (isinstance(cam.name, str) and all(_is_int(d) and 1 <= d <= MAX_SIDE for d in (cam.width, cam.height))):
            raise DatasetError(f"{where}: embodia.embodiment: camera {show(cam)} is not a name and a size")


# -- episode rows, arrays, stats ---------------------------------------------------------------------
def check_rows(where, rows: list, n: int, total_frames: int | None, info_path) -> list[dict]:
    """Rows 0..n-1 of the episodes parquet, sorted; their lengths add up to total_frames. Compares
    counts before building anything of size n, so a claimed 10^12 episodes allocates nothing."""
    if not all(isinstance(r, dict) and _is_int(r.get("episode_index")) for r in rows):
        raise DatasetError(f"{where}: episode rows without a whole-number episode_index")
    kept = sorted((r for r in rows if 0 <= r["episode_index"] < n), key=lambda r: r["episode_index"])
    if len(kept) != n or [r["episode_index"] for r in kept] != list(range(n)):
        raise DatasetError(f"{where}: episode rows do not cover 0..{n - 1} as {info_path} says "
                           f"(total_episodes={n}, {len(kept)} rows found)")
    for r in kept:
        if not (_is_int(r.get("length")) and 0 <= r["length"] <= MAX_COUNT):
            raise DatasetError(f"{where}: episode {r['episode_index']} length {show(r.get('length'))} "
                               f"is not a whole number")
        seed = r.get("embodia/seed")
        if seed is not None and not (_is_int(seed) and seed >= 0):
            raise DatasetError(f"{where}: episode {r['episode_index']} embodia/seed {show(seed)} is not a seed")
        for key in ("embodia/success", "embodia/interrupted"):    # "no" is a true string: it taught a success
            if r.get(key) is not None and not isinstance(r[key], (bool, np.bool_)):
                raise DatasetError(f"{where}: episode {r['episode_index']} {key} {show(r[key])} is not true, "
                                   f"false or null")
    frames = sum(r["length"] for r in kept)
    if total_frames is not None and frames != total_frames:
        raise DatasetError(f"{info_path}: total_frames={total_frames} but the episode rows in {where} "
                           f"hold {frames} frames")
    return kept


def check_arrays(where, i: int, ep: dict, features: dict) -> None:
    """An episode's state/action widths match the features, and every value is finite."""
    for key, name in ((STATE, "state"), (ACTION, "action")):
        a = ep[name]
        if key in features and a.shape[1] != width(features[key]):
            raise DatasetError(f"{where}: episode {i} {key} holds {a.shape[1]} values per frame, "
                               f"info.json's features.{key}.shape says {features[key]['shape']}")
        bad = ~np.isfinite(a)
        if bad.any():
            t = int(np.argwhere(bad)[0][0])
            raise DatasetError(f"{where}: episode {i} {key} has a non-finite value (NaN/inf) at frame {t}")
    check_clock(where, i, ep)
    fs = ep.get("final_state")
    if fs is not None and not np.isfinite(fs).all():
        raise DatasetError(f"{where}: episode {i} embodia/final_state has a non-finite value (NaN/inf)")
    seed = ep.get("seed")
    if seed is not None and not (_is_int(seed) and seed >= 0):
        raise DatasetError(f"{where}: episode {i} seed {show(seed)} is not a seed")


def check_clock(where, i: int, ep: dict) -> None:
    """frame_index (whole numbers) and timestamp (finite) rise strictly from frame to frame: a
    repeated frame, or a time going backwards, is not a recording of one episode."""
    for key in ("frame_index", "timestamp"):
        v = ep.get(key)
        if v is None or len(v) == 0:
            continue
        v = np.asarray(v)
        if key == "frame_index" and not np.issubdtype(v.dtype, np.integer):
            raise DatasetError(f"{where}: episode {i} frame_index holds {v.dtype} values, not whole numbers")
        if key == "timestamp" and not (np.issubdtype(v.dtype, np.number) and np.isfinite(v).all()):
            t = int(np.argmax(~np.isfinite(v))) if np.issubdtype(v.dtype, np.number) else 0
            raise DatasetError(f"{where}: episode {i} timestamp is not a finite number at frame {t}")
        back = np.flatnonzero(np.diff(v) <= 0)
        if back.size:
            t = int(back[0]) + 1
            raise DatasetError(f"{where}: episode {i} {key} does not rise at frame {t} ({show(v[t - 1].item())} "
                               f"then {show(v[t].item())})")


def check_stats(where, raw, features: dict) -> dict[str, dict[str, np.ndarray]]:
    """stats.json as arrays; state/action statistics have one finite value per channel (they
    scale every error an offline report prints)."""
    if not isinstance(raw, dict) or not all(isinstance(d, dict) for d in raw.values()):
        raise DatasetError(f"{where}: expected {{feature: {{stat: values}}}}")
    out = {}
    for k, d in raw.items():
        try:
            out[k] = {s: np.asarray(v, dtype=np.int64 if s == "count" else np.float64) for s, v in d.items()}
        except (TypeError, ValueError, OverflowError) as e:
            raise DatasetError(f"{where}: {k} is not numeric ({e})") from None
        if k in (STATE, ACTION) and k in features:
            for s, v in out[k].items():
                if s != "count" and (v.shape != (width(features[k]),) or not np.isfinite(v).all()):
                    raise DatasetError(f"{where}: {k}.{s} must be {width(features[k])} finite numbers, "
                                       f"got shape {v.shape}")
    return out


def json_safe(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by None, so a report written with
    ``allow_nan=False`` stays valid JSON (bare NaN/Infinity is not JSON)."""
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return json_safe(obj.tolist())
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, np.generic):
        return obj.item()
    return obj
