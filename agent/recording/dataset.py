"""Read a LeRobotDataset v3.0 directory (the layout `embodia.agent.recording.writer.DatasetWriter` writes).

>>> ds = LocalDataset("runs/pusher")                     # doctest: +SKIP
>>> ds.embodiment.name, ds.num_episodes                   # doctest: +SKIP
('planar_pusher', 12)
>>> ep = ds.episode(0); ep["state"].shape, ep["success"] # doctest: +SKIP
((100, 10), True)
>>> ds.frames(0, "top").shape                             # doctest: +SKIP
(100, 96, 96, 3)

Only pyarrow, PyAV, numpy and OpenCV are used, so the reader has no LeRobot dependency. It also reads
plain LeRobot v3 datasets (the embodiment is then rebuilt from the feature names and `fps`).
Errors name the file that is missing or corrupt (`DatasetError`). Nothing info.json claims is
trusted unchecked: counts, shapes, values and paths are held against the files
(`embodia.agent.recording.dataset_checks`), so a dataset that lies is refused in one line.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from embodia.agent.recording.dataset_checks import (
    DatasetError,
    check_arrays,
    check_embodiment,
    check_info,
    check_rows,
    check_stats,
    fill_template,
    inside,
    load_json,
    parse_json,
    show,
)
from embodia.agent.recording.modality import MODALITY_PATH, apply_modality, load_modality
from embodia.devices.embodiment import Camera, Channel, Embodiment
from embodia.devices.observation import ACTION, IMAGES, STATE

CODEBASE_VERSION = "v3.0"
INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"
EPISODES_DIR = "meta/episodes"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
STEPLOG_DIR = ".steplogs"   # crash-safe logs of running episodes (hidden from LeRobot readers)
EMBODIA = "embodia"         # our own section in info.json and prefix of our episode columns


def episode_files(root: Path) -> list[Path]:
    """The episodes parquet files, each folder checked to lie inside ``root`` before it is listed
    (a symlinked meta/episodes or chunk folder is not followed out of the dataset)."""
    top = root / EPISODES_DIR
    if not top.is_dir():
        return []
    inside(root, top, top)
    files = []
    for chunk in sorted(top.glob("chunk-*")):
        if chunk.is_dir():
            inside(root, chunk, chunk)
            files.extend(sorted(chunk.glob("file-*.parquet")))
    return files


def committed_episode_rows(root: Path, n: int, total_frames: int | None = None) -> list[dict]:
    """Episode rows 0..n-1 sorted by index. A writer commits info.json last, so rows past its
    total_episodes belong to an unfinished commit and are ignored. Every episodes file must lie
    inside ``root`` (a symlinked meta/episodes is not followed out)."""
    rows = []
    for f in episode_files(root):
        rows.extend(read_table(f, root=root).to_pylist())
    return check_rows(root / EPISODES_DIR, rows, n, total_frames, root / INFO_PATH)


# -- low-level readers with errors that name the file ------------------------------------------------
def read_table(path: Path, columns: list[str] | None = None, root: Path | None = None):
    """A parquet file as a pyarrow Table, or DatasetError naming the file; inside ``root`` when given."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    path = Path(path)
    if root is not None:
        inside(root, path, path)
    if not path.is_file():
        raise DatasetError(f"{path}: missing")
    try:
        return pq.read_table(path, columns=columns)
    except (pa.ArrowException, OSError, KeyError) as e:
        raise DatasetError(f"{path}: corrupt or unreadable parquet ({e})") from None


def list_column_to_numpy(col, dtype=np.float32) -> np.ndarray:
    """A list<float> / fixed_size_list<float> column as a 2-D array [rows, width]."""
    import pyarrow as pa
    import pyarrow.compute as pc
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    n = len(col)
    if n == 0:
        width = col.type.list_size if pa.types.is_fixed_size_list(col.type) else 0
        return np.zeros((0, width), dtype)
    if not (pa.types.is_list(col.type) or pa.types.is_large_list(col.type) or pa.types.is_fixed_size_list(col.type)):
        raise DatasetError(f"holds {col.type} values, not a list of numbers per frame")
    if not (pa.types.is_integer(col.type.value_type) or pa.types.is_floating(col.type.value_type)):
        raise DatasetError(f"holds lists of {col.type.value_type}, not of numbers")    # "0.5" would parse
    flat = pc.list_flatten(col).to_numpy(zero_copy_only=False).astype(dtype, copy=False)
    if flat.size % n:
        raise DatasetError(f"list column has ragged rows ({flat.size} values over {n} rows)")
    return flat.reshape(n, flat.size // n)


def _json_field(v, where: str) -> dict:
    """An episode's JSON column (info, meta, timing) as a dict: every reader indexes it as one, and
    its parse is bounded (`parse_json`)."""
    if v is None or v == "":
        return {}
    out = parse_json(v, where) if isinstance(v, str) else v
    if not isinstance(out, dict):
        raise DatasetError(f"{where}: expected a JSON object, got {show(out)}")
    return out


def image_size(feature: dict) -> tuple[int, int]:
    """(height, width) of an image feature, whose names say when channels come first."""
    names = feature.get("names")
    first = names[0] if isinstance(names, list) and names else None
    shape = feature["shape"]
    return tuple(int(d) for d in (shape[1:3] if first == "channels" else shape[:2]))


def embodiment_from_info(info: dict) -> Embodiment:
    """The Embodiment stored in info.json's `embodia` section, else one rebuilt from the features."""
    section = info.get(EMBODIA) or {}
    if "embodiment" in section:
        return Embodiment.from_dict(section["embodiment"])
    feats = info.get("features", {})

    def names(key):
        f = feats.get(key)
        if not f:
            return []
        n = f.get("names")
        if isinstance(n, dict):   # some LeRobot datasets nest names, e.g. {"motors": [...]}
            n = next(iter(n.values()), None)
        width = int(np.prod(f.get("shape") or [0]))
        return list(n) if isinstance(n, list) and len(n) == width else [f"{key}_{i}" for i in range(width)]

    cams = []
    for key, f in feats.items():
        if key.startswith(IMAGES + ".") and f.get("dtype") in ("video", "image"):
            h, w = image_size(f)
            cams.append(Camera(key[len(IMAGES) + 1:], int(w), int(h)))
    return Embodiment(name=info.get("robot_type") or "unknown", kind="lerobot dataset",
                      actions=tuple(Channel(n) for n in names(ACTION)),
                      state=tuple(Channel(n) for n in names(STATE)),
                      cameras=tuple(cams), hz=float(info.get("fps") or 10.0), chunk=1, exec_horizon=1,
                      action_kind="unknown")


class LocalDataset:
    """A LeRobotDataset v3.0 directory on disk: metadata, per-episode arrays and decoded frames."""

    def __init__(self, root, modality=None):
        """``modality``: a mapping file naming the state/action entries and cameras (see
        `embodia.agent.recording.modality`); without it, the dataset's own meta/modality.json if any."""
        self.root = Path(root)
        self.modality = str(modality) if modality else None     # a worker process reopens it the same way
        if not self.root.is_dir():
            raise DatasetError(f"{self.root}: no such dataset directory")
        where = self.root / INFO_PATH
        self.info = load_json(where, root=self.root)
        check_info(where, self.info)
        try:
            self.embodiment = embodiment_from_info(self.info)
        except (TypeError, ValueError, KeyError, AttributeError) as e:
            raise DatasetError(f"{where}: cannot rebuild the embodiment ({e})") from None
        check_embodiment(where, self.info, self.embodiment)
        self._camera_keys: dict[str, str] = {}
        mapping = Path(modality) if modality else self.root / MODALITY_PATH
        if not modality and mapping.is_file():
            inside(self.root, mapping, mapping)     # the dataset's own mapping, not one the user names
        if modality or mapping.is_file():
            self.embodiment, self._camera_keys = apply_modality(
                self.embodiment, load_modality(mapping), self.features, source=str(mapping))
        self._episodes: list[dict] | None = None
        self._tasks: list[str] | None = None
        self._stats: dict | None = None
        self._table_cache: tuple[Path, Any] | None = None
        # each episode's video paths, checked once as the episodes load: `frames` reuses them (the
        # check resolves every folder of the path, about a millisecond an episode and camera)
        self._videos: dict[tuple[int, str], Path] = {}
        self._committed_rows()      # counts, paths, step logs and stats checked now, before a verb works
        self._pending = self.pending
        if (self.root / TASKS_PATH).exists():
            inside(self.root, self.root / TASKS_PATH, self.root / TASKS_PATH)
        if (self.root / STATS_PATH).exists():
            self._stats = self.stats

    # -- metadata ---------------------------------------------------------------------------------
    @property
    def fps(self) -> float:
        return float(self.info["fps"])

    @property
    def features(self) -> dict:
        return self.info["features"]

    @property
    def num_episodes(self) -> int:
        return self.committed_episodes + len(self.pending)

    @property
    def committed_episodes(self) -> int:
        return int(self.info["total_episodes"])

    @property
    def pending(self) -> list[dict]:
        """Episodes a killed writer left in step logs, after the committed ones (`pending`)."""
        if getattr(self, "_pending", None) is None:
            from embodia.agent.recording.pending import complete_logs
            ids = {r.get(f"{EMBODIA}/episode_id") for r in self._committed_rows()}
            self._pending = complete_logs(self.root, ids, self.embodiment)
        return self._pending

    @property
    def num_frames(self) -> int:
        return int(self.info.get("total_frames", 0))

    @property
    def image_keys(self) -> list[str]:
        return [k for k, f in self.features.items() if f.get("dtype") in ("video", "image")]

    @property
    def video_keys(self) -> list[str]:
        return [k for k, f in self.features.items() if f.get("dtype") == "video"]

    @property
    def tasks(self) -> list[str]:
        """Task strings by task_index."""
        if self._tasks is None:
            path = self.root / TASKS_PATH
            if not path.exists() and self.committed_episodes == 0:
                self._tasks = []
            else:
                t = read_table(path, root=self.root)
                if "task_index" not in t.column_names:
                    raise DatasetError(f"{path}: no task_index column")
                tcol = "task" if "task" in t.column_names else "__index_level_0__"
                if tcol not in t.column_names:
                    raise DatasetError(f"{path}: no task column")
                pairs = sorted(zip(t.column("task_index").to_pylist(), t.column(tcol).to_pylist()))
                self._tasks = [s for _, s in pairs][: int(self.info.get("total_tasks", len(pairs)))]
        return self._tasks

    @property
    def episodes(self) -> list[dict]:
        """One dict per episode (episodes parquet rows), with decoded convenience keys:
        task, seed, success, interrupted, final_state (float32 array or None), info, meta, timing."""
        if self._episodes is None:
            self._episodes = self._committed_rows() + [dict(r, episode_index=self.committed_episodes + k)
                                                       for k, r in enumerate(self.pending)]
        return self._episodes

    def _committed_rows(self) -> list[dict]:
        if getattr(self, "_committed", None) is None:
            self._committed = self._load_episodes()
        return self._committed

    def _load_episodes(self) -> list[dict]:
        n = self.committed_episodes
        if not episode_files(self.root):
            if n:
                raise DatasetError(f"{self.root / EPISODES_DIR}: no episodes parquet, "
                                   f"but {self.root / INFO_PATH} says total_episodes={n}")
            return []
        rows = committed_episode_rows(self.root, n, self.info.get("total_frames"))
        where = self.root / EPISODES_DIR
        for r in rows:
            tasks = r.get("tasks") or []
            r["task"] = tasks[0] if tasks else ""
            r["seed"] = r.get(f"{EMBODIA}/seed")
            r["success"] = r.get(f"{EMBODIA}/success")
            fs = r.get(f"{EMBODIA}/final_state")
            r["final_state"] = None if fs is None else np.asarray(fs, np.float32)
            for key in ("info", "meta", "timing"):
                r[key] = _json_field(r.get(f"{EMBODIA}/{key}"), f"{where}: episode {r['episode_index']} "
                                                                  f"{EMBODIA}/{key}")
            # the process died mid-episode (recovered step log), or the loop says it was interrupted
            r["interrupted"] = bool(r.get(f"{EMBODIA}/interrupted")) or r["info"].get("interrupted") is True
            self.data_file(r)
            for key in self.video_keys:
                self._videos[r["episode_index"], key] = self.video_file(r, key)
                self._video_start(r, key)
        return rows

    def data_file(self, row: dict) -> Path:
        """The data parquet of an episode row, refused unless it lies inside the dataset."""
        return fill_template(self.root, self.root / INFO_PATH, self.info, "data_path",
                             chunk_index=self._row_index(row, "data/chunk_index"),
                             file_index=self._row_index(row, "data/file_index"))

    def video_file(self, row: dict, key: str) -> Path:
        """One camera's mp4 of an episode row, refused unless it lies inside the dataset."""
        return fill_template(self.root, self.root / INFO_PATH, self.info, "video_path", video_key=key,
                             chunk_index=self._row_index(row, f"videos/{key}/chunk_index"),
                             file_index=self._row_index(row, f"videos/{key}/file_index"))

    def _video_start(self, row: dict, key: str) -> float:
        t0 = row.get(f"videos/{key}/from_timestamp") or 0.0
        if not (isinstance(t0, (int, float)) and math.isfinite(t0) and t0 >= 0):
            raise DatasetError(f"{self.root / EPISODES_DIR}: episode {row.get('episode_index')} "
                               f"videos/{key}/from_timestamp {show(t0)} is not a time")
        return float(t0)

    def _row_index(self, row: dict, column: str) -> int:
        v = row.get(column)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise DatasetError(f"{self.root / EPISODES_DIR}: episode {row.get('episode_index')} {column} "
                               f"{show(v)} is not a file index")
        return v

    @property
    def stats(self) -> dict[str, dict[str, np.ndarray]]:
        """meta/stats.json as {feature: {stat: array}} ({} for an empty dataset)."""
        if self._stats is None:
            path = self.root / STATS_PATH
            if not path.exists() and self.committed_episodes == 0:
                self._stats = {}
            else:
                self._stats = check_stats(path, load_json(path, root=self.root), self.features)
        return self._stats

    # -- per episode ------------------------------------------------------------------------------
    def _check_index(self, i: int) -> int:
        if not isinstance(i, (int, np.integer)) or not 0 <= i < self.num_episodes:
            raise IndexError(f"episode {i!r} out of range: dataset {self.root} has {self.num_episodes}")
        return int(i)

    def _data_table(self, path: Path):
        if self._table_cache is None or self._table_cache[0] != path:
            self._table_cache = (path, read_table(path, root=self.root))
        return self._table_cache[1]

    def _episode_rows(self, i: int):
        import pyarrow.compute as pc
        row = self.episodes[i]
        path = self.data_file(row)
        table = self._data_table(path)
        if "episode_index" not in table.column_names:
            raise DatasetError(f"{path}: no episode_index column")
        sub = table.filter(pc.equal(table.column("episode_index"), i))
        if sub.num_rows != row["length"]:
            raise DatasetError(f"{path}: episode {i} has {sub.num_rows} rows, episodes metadata says "
                               f"{row['length']}")
        return path, sub

    def episode(self, i: int) -> dict:
        """Arrays and metadata of episode i: state float32[T,S], action float32[T,D], timestamp,
        frame_index, index, task, seed, success, interrupted, final_state, info, meta, length, and
        intervention bool[T] (where a person took over; all False in datasets without the column)."""
        i = self._check_index(i)
        row = self.episodes[i]
        if "steplog" in row:                  # left by a killed writer (`pending`)
            from embodia.agent.recording.pending import episode_from_log
            where, out = row["steplog"], episode_from_log(row, i)
        else:
            where, out = self._episode_arrays(i, row)
        check_arrays(where, i, out, self.features)
        return out

    def _episode_arrays(self, i: int, row: dict) -> tuple[Path, dict]:
        """`episode` of a committed episode: its rows of the data parquet."""
        path, sub = self._episode_rows(i)
        out = {"episode_index": i, "length": int(row["length"]), "task": row["task"], "seed": row["seed"],
               "success": row["success"], "interrupted": row["interrupted"],
               "final_state": row["final_state"], "info": row["info"], "meta": row["meta"],
               "timing": row["timing"]}
        for key, name in ((STATE, "state"), (ACTION, "action")):
            if key in sub.column_names:
                try:
                    out[name] = list_column_to_numpy(sub.column(key), np.float32)
                except DatasetError as e:
                    raise DatasetError(f"{path}: {key}: {e}") from None
            else:
                out[name] = np.zeros((sub.num_rows, 0), np.float32)
        for key in ("timestamp", "frame_index", "index", "task_index"):
            if key in sub.column_names:
                out[key] = sub.column(key).to_numpy()
        out["intervention"] = (sub.column("intervention").to_numpy(zero_copy_only=False).astype(bool)
                               if "intervention" in sub.column_names else np.zeros(sub.num_rows, bool))
        return path, out

    def _camera_key(self, camera: str) -> str:
        if camera in self._camera_keys:        # renamed by the mapping file
            return self._camera_keys[camera]
        key = camera if camera.startswith(IMAGES + ".") else f"{IMAGES}.{camera}"
        if key not in self.image_keys:
            raise KeyError(f"no camera {camera!r} in {self.root}; cameras: "
                           f"{[k[len(IMAGES) + 1:] for k in self.image_keys]}")
        return key

    def frames(self, i: int, camera: str, *, threads: int = 0) -> np.ndarray:
        """The episode's frames of one camera as uint8[T, H, W, 3] (decoded with PyAV; ``threads``:
        the decoder's, 0 for FFmpeg's choice, 1 where each process decodes on one core)."""
        i = self._check_index(i)
        key = self._camera_key(camera)
        row = self.episodes[i]
        if "steplog" in row:                  # left by a killed writer (`pending`)
            from embodia.agent.recording.pending import frames_from_log
            return frames_from_log(row, key)
        length = int(row["length"])
        if self.features[key]["dtype"] == "image":
            from embodia.shared.images import image_from_bytes
            path, sub = self._episode_rows(i)
            out = []
            for j, cell in enumerate(sub.column(key).to_pylist()):
                buf = cell.get("bytes") if isinstance(cell, dict) else None
                try:
                    out.append(image_from_bytes(buf if isinstance(buf, bytes) else b""))
                except ValueError:
                    raise DatasetError(f"{path}: episode {i} frame {j} of {key}: undecodable image") from None
            if not out:
                return np.zeros((0, *self.features[key]["shape"]), np.uint8)
            return self._sized(path, key, np.stack(out))
        path = self._videos.get((i, key)) or self.video_file(row, key)
        frames = decode_video(path, start=self._video_start(row, key), count=length, fps=self.fps, threads=threads)
        return self._sized(path, key, frames)

    def _sized(self, path: Path, key: str, frames: np.ndarray) -> np.ndarray:
        """``frames`` when their size is the one info.json gives the camera (a trainer sizes the model's
        image tokens by it), else DatasetError naming ``path``."""
        if frames.shape[1:3] != image_size(self.features[key]):
            raise DatasetError(f"{path}: frames of {frames.shape[2]}x{frames.shape[1]}, info.json's "
                               f"features.{key}.shape says {self.features[key]['shape']}")
        return frames

    def __len__(self) -> int:
        return self.num_episodes

    def __repr__(self) -> str:
        return (f"LocalDataset({str(self.root)!r}, embodiment={self.embodiment.name!r}, "
                f"episodes={self.num_episodes}, frames={self.num_frames})")


def decode_video(path: Path, *, start: float = 0.0, count: int | None = None, fps: float,
                 threads: int = 0) -> np.ndarray:
    """Frames of an mp4 from timestamp `start` on (`count` of them, or to the end) as uint8[T,H,W,3];
    ``threads``: the decoder's (0: FFmpeg's choice, a pool of about one per core for every file opened;
    1 where the caller runs one process per core)."""
    import av
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: missing")
    from av.video.reformatter import VideoReformatter
    half = 0.5 / fps
    out = []
    # one converter for the file: `frame.to_ndarray(format=...)` builds a fresh one (an FFmpeg
    # scaler) for every frame, which took ~1.4 ms of a ~1.7 ms 96x96 frame, most of a trainer's load
    rgb = VideoReformatter()
    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            if stream.codec_context is None:        # e.g. an SVG named .mp4: a stream FFmpeg cannot decode
                raise DatasetError(f"{path}: not a video this FFmpeg can decode (a {container.format.name} file)")
            stream.codec_context.thread_count = threads
            if start > half:
                container.seek(int(start / stream.time_base), stream=stream, backward=True, any_frame=False)
            for frame in container.decode(stream):
                t = float(frame.time) if frame.time is not None else math.nan
                if t < start - half:
                    continue
                out.append(rgb.reformat(frame, format="rgb24").to_ndarray())
                if count is not None and len(out) == count:
                    break
    except (av.FFmpegError, IndexError) as e:
        raise DatasetError(f"{path}: corrupt or unreadable video ({e})") from None
    if count is not None and len(out) != count:
        raise DatasetError(f"{path}: expected {count} frames from t={start:g}s, decoded {len(out)}")
    if not out:
        raise DatasetError(f"{path}: no frames")
    return np.stack(out)
