"""Record episodes: a crash-safe step log while an episode runs, LeRobotDataset v3.0 files when it ends.

    w = DatasetWriter("runs/pusher", embodiment)          # creates, or resumes (same embodiment)
    ep = w.begin_episode(task="push the puck", seed=3, meta={"device": "sim:twogap-push"})
    ep.add_step(obs, action, timing={"policy_ms": 4.1, "device_ms": 0.3})   # appended + in the kernel
    w.end_episode(ep, success=True, final_state=obs.state, info={})         # -> episode_index
    w.close()

The step log every episode writes first is `steplog`'s (crash-safe, one JSON line per step).

Dataset (LeRobotDataset v3.0, written with pyarrow and PyAV only):
    meta/info.json                 schema, counters, path templates; `embodia` section = embodiment dict
    meta/stats.json                min/max/mean/std/count (+ q01/q10/q50/q90/q99 for state and action,
                                   exact over all frames); images per channel in 0..1, shape [3][1][1]
    meta/tasks.parquet             task_index, task
    meta/episodes/chunk-000/file-000.parquet   one row per episode (LeRobot columns, per-episode
                                   stats/..., our embodia/... columns); rewritten atomically per episode
    data/chunk-CCC/file-FFF.parquet            one file per episode (parquet cannot be appended to):
                                   file sequence number = episode_index, chunk = n // chunks_size,
                                   file = n % chunks_size (LeRobot numbers files within a chunk);
                                   besides state, action and the indices, a bool ``intervention``
                                   column: True where a person took over (datasets begun before it
                                   lack the column)
    videos/<key>/chunk-CCC/file-FFF.mp4        one mp4 per episode and camera, pts = frame_index / fps

Commit order per episode: videos, data file, tasks, episodes, stats, then info.json last (the commit
point), then the step log is deleted. Every file is written to a temp file in its directory, fsynced
and `os.replace`d. Readers trust info.json's counters, so a crash anywhere leaves a consistent dataset:
episode rows past `total_episodes` and unreferenced data/video files are uncommitted leftovers that the
next writer removes; a step log whose episode_id is already committed is deleted, not re-added.
One writer per dataset at a time (an flock on `.steplogs/writer.lock`, released by the OS on a crash).
The commit of one episode (its step log read back, frames, videos, metadata) is in `commit.py`.
"""
from __future__ import annotations

import json
import math
import os
import threading
import time
import uuid
import warnings
from fractions import Fraction
from pathlib import Path

import numpy as np

from embodia.agent.recording.commit import CHUNKS_SIZE, INTERVENTION, Committing, short
from embodia.agent.recording.dataset import (
    CODEBASE_VERSION,
    DATA_PATH,
    EMBODIA,
    EPISODES_DIR,
    INFO_PATH,
    STEPLOG_DIR,
    TASKS_PATH,
    VIDEO_PATH,
    read_table,
)
from embodia.agent.recording.dataset_checks import DatasetError, load_json
from embodia.agent.recording.dataset_checks import check_info, check_rows
from embodia.agent.recording.feature_stats import (
    IMAGE_STATS_MAX_SIDE,
)
from embodia.agent.recording.files import dumps, normalized, write_json
from embodia.agent.recording.steplog import (
    STEPLOG_FORMAT,
    STEPLOG_VERSION,
    RecordingError,
    StepLogWriter,
    BadLog,
    image_json,
)
from embodia.agent.recording.video import CODECS, fps_value
from embodia.devices.embodiment import Embodiment
from embodia.devices.observation import ACTION, STATE, image_key

FORMAT_VERSION = 1          # of our `embodia` section / columns


class EmbodimentMismatch(RecordingError):
    """The dataset on disk was recorded with another embodiment (or fps / video settings)."""


# -- episodes ----------------------------------------------------------------------------------------
class Episode:
    """A running episode: `add_step` appends one frame to its step log. Made by `begin_episode`."""

    def __init__(self, writer: "DatasetWriter", episode_id: str, path: Path, header: dict):
        self.writer = writer
        self.episode_id = episode_id
        self.path = path
        self.task = header["task"]
        self.seed = header["seed"]
        self.meta = header["meta"]
        self._emb = writer.embodiment
        self._fps = writer.fps
        self._enc = writer.steplog_images
        self._cam_keys = [json.dumps(c.name).encode("ascii") + b":" for c in self._emb.cameras]
        self._log = StepLogWriter(path, header, fsync=writer.fsync_steps)
        self._n = 0
        self.closed = False

    @property
    def num_steps(self) -> int:
        return self._n

    def step(self, obs, action, timing: dict | None = None, extra: dict | None = None) -> int:
        """`Recorder`'s step: of ``extra`` a dataset frame keeps only ``intervention`` (LeRobot's
        columns are fixed; the loop never recorded a robot step's other notes)."""
        return self.add_step(obs, action, timing, intervention=bool((extra or {}).get("intervention")))

    def add_step(self, obs, action, timing: dict | None = None, intervention: bool = False) -> int:
        """Record frame t = (observation before the action, action actually executed); returns t.
        ``intervention``: a person (or their stand-in) chose this action, not the policy."""
        if self.closed:
            raise RecordingError(f"episode {self.episode_id} has ended; begin a new one")
        emb = self._emb
        obs.validate(emb)
        a = np.asarray(action, dtype=np.float32)
        if a.shape != (emb.action_dim,):
            raise ValueError(f"{ACTION}: expected shape ({emb.action_dim},) for {emb.name!r}, got {a.shape}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{ACTION}: non-finite values {a.tolist()} cannot have been executed")
        i = self._n
        rec = {"type": "step", "frame_index": i, "timestamp": i / self._fps,
               "obs_time": float(obs.timestamp), "wall_time": time.time(),
               "state": np.asarray(obs.state, np.float32).tolist(), "action": a.tolist()}
        if timing:
            rec["timing"] = timing
        if intervention:
            rec["intervention"] = True
        line = dumps(rec).encode("ascii")
        if emb.cameras:
            parts = [line[:-1], b',"images":{']
            for k, c in enumerate(emb.cameras):
                parts += [b"," if k else b"", self._cam_keys[k], image_json(obs.images[c.name], self._enc)]
            parts.append(b"}}\n")
            line = b"".join(parts)
        else:
            line += b"\n"
        self._log.append_line(line)
        self._n = i + 1
        return i

    def _finish(self, end: dict | None) -> None:
        try:
            if end is not None:
                self._log.append(end, sync=True)
        finally:
            self._log.close()
            self.closed = True

    def __repr__(self) -> str:
        return f"Episode({self.episode_id}, task={self.task!r}, steps={self._n}, closed={self.closed})"


# -- the writer ----------------------------------------------------------------------------------------
class DatasetWriter(Committing):
    """Creates or resumes a LeRobotDataset v3.0 directory and turns step logs into its episodes.

    fps, video, codec default to the existing dataset's (resume) or embodiment.hz, True, "h264" (new).
    codec: "h264" (libx264), "av1" (libsvtav1) or "mpeg4"; video_options override the encoder options.
    Odd camera sizes: h264 switches to yuv444p (4:2:0 needs even sizes); other codecs refuse them.
    video=False stores frames as PNG bytes in the data parquet (LeRobot dtype "image").
    steplog_images: "raw" (fast, big) or "png"; fsync_steps: fsync the step log every step.
    recover: turn step logs left by a crashed process into episodes when the writer opens.
    """

    def __init__(self, root, embodiment: Embodiment, *, fps: float | None = None,
                 robot_type: str | None = None, video: bool | None = None, codec: str | None = None,
                 video_options: dict | None = None, steplog_images: str = "raw",
                 fsync_steps: bool = False, recover: bool = True, lock: bool = True):
        if embodiment.action_dim == 0:
            raise RecordingError(f"embodiment {embodiment.name!r} has no continuous action channels; "
                                 "DatasetWriter records float action vectors (GUI actions are not supported yet)")
        if steplog_images not in ("raw", "png"):
            raise ValueError(f"steplog_images must be 'raw' or 'png', got {steplog_images!r}")
        self.root = Path(root)
        self.embodiment = embodiment
        self.steplog_images = steplog_images
        self.fsync_steps = fsync_steps
        self._emb_dict = normalized(embodiment.to_dict())
        self._commit_lock = threading.RLock()
        self._open: dict[str, Episode] = {}
        self._closed = False
        self._lock_file = None
        self.steplog_dir = self.root / STEPLOG_DIR
        if self.root.exists() and not self.root.is_dir():
            raise RecordingError(f"{self.root} exists and is not a directory")
        created = not self.root.exists()
        self.steplog_dir.mkdir(parents=True, exist_ok=True)
        if lock:
            self._acquire_lock()
        try:
            if (self.root / INFO_PATH).exists():
                self._open_existing(fps, robot_type, video, codec, video_options)
            else:
                self._create(fps, robot_type, video, codec, video_options)
            self._reconcile()
            if recover:
                self.recover()
        except BaseException:
            self._release_lock()
            if created and not (self.root / INFO_PATH).exists():   # leave no half-made directory behind
                import shutil
                shutil.rmtree(self.root, ignore_errors=True)
            raise

    # -- opening ------------------------------------------------------------------------------------
    def _acquire_lock(self) -> None:
        try:
            import fcntl
        except ImportError:     # not POSIX: no inter-process lock
            return
        path = self.steplog_dir / "writer.lock"
        f = open(path, "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "?"
            f.close()
            raise RecordingError(f"{self.root} is being written by another process (pid {holder}); "
                                 "one DatasetWriter per dataset at a time") from None
        f.seek(0)
        f.truncate()
        f.write(str(os.getpid()))
        f.flush()
        self._lock_file = f

    def _release_lock(self) -> None:
        if self._lock_file is not None:
            self._lock_file.close()     # closing releases the flock
            self._lock_file = None

    def _codec_setup(self, codec: str, video_options: dict | None, video: bool = True):
        if codec not in CODECS:
            raise ValueError(f"unknown codec {codec!r}; choose one of {sorted(CODECS)}")
        encoder, name, options = CODECS[codec]
        options = {**options, **{str(k): str(v) for k, v in (video_options or {}).items()}}
        pix_fmts = {}
        for cam in self.embodiment.cameras if video else ():
            if cam.width % 2 or cam.height % 2:
                if name != "h264":
                    raise ValueError(f"camera {cam.name!r} is {cam.width}x{cam.height}: {name} with yuv420p "
                                     "needs even sizes; use codec='h264' (switches to yuv444p) or video=False")
                pix_fmts[cam.name] = "yuv444p"
            else:
                pix_fmts[cam.name] = "yuv420p"
        return encoder, name, options, pix_fmts

    def _features(self, fps, video: bool, codec_name: str, pix_fmts: dict) -> dict:
        emb = self.embodiment
        feats: dict[str, dict] = {}
        if emb.state_dim:
            feats[STATE] = {"dtype": "float32", "shape": [emb.state_dim], "names": [c.name for c in emb.state]}
        feats[ACTION] = {"dtype": "float32", "shape": [emb.action_dim], "names": [c.name for c in emb.actions]}
        for cam in emb.cameras:
            f = {"dtype": "video" if video else "image", "shape": [cam.height, cam.width, 3],
                 "names": ["height", "width", "channels"]}
            if video:
                f["info"] = {"video.height": cam.height, "video.width": cam.width, "video.codec": codec_name,
                             "video.pix_fmt": pix_fmts[cam.name], "video.is_depth_map": False,
                             "video.fps": fps_value(fps), "video.channels": 3, "has_audio": False}
            feats[image_key(cam.name)] = f
        for key, dtype in (("timestamp", "float32"), ("frame_index", "int64"), ("episode_index", "int64"),
                           ("index", "int64"), ("task_index", "int64")):
            feats[key] = {"dtype": dtype, "shape": [1], "names": None}
        # True where a person took over (embodia.agent.loop.takeover): their frames are demonstrations
        feats[INTERVENTION] = {"dtype": "bool", "shape": [1], "names": None}
        return feats

    def _create(self, fps, robot_type, video, codec, video_options) -> None:
        others = [p.name for p in self.root.iterdir() if p.name != STEPLOG_DIR]
        if others:
            raise RecordingError(f"{self.root} is not empty and has no {INFO_PATH}; refusing to write a "
                                 f"dataset into it (found {sorted(others)[:5]})")
        fps = float(fps or self.embodiment.hz)
        if not fps > 0:
            raise ValueError(f"fps must be > 0, got {fps}")
        video = True if video is None else bool(video)
        codec = codec or "h264"
        encoder, name, options, pix_fmts = self._codec_setup(codec, video_options, video)
        info = {
            "codebase_version": CODEBASE_VERSION,
            "robot_type": robot_type or self.embodiment.name,
            "total_episodes": 0, "total_frames": 0, "total_tasks": 0,
            "chunks_size": CHUNKS_SIZE, "data_files_size_in_mb": 100, "video_files_size_in_mb": 200,
            "fps": fps_value(fps), "splits": {"train": "0:0"},
            "data_path": DATA_PATH,
            "video_path": VIDEO_PATH if (video and self.embodiment.cameras) else None,
            "features": self._features(fps, video, name, pix_fmts),
            EMBODIA: {"format_version": FORMAT_VERSION, "embodiment": self._emb_dict,
                      "video": {"codec": codec, "encoder": encoder, "options": options} if video else None,
                      "files": "one data file and one video file per camera per episode",
                      "stats": "state/action exact over all frames (numpy linear quantiles); images "
                               f"per channel in 0..1 on frames strided to <= {IMAGE_STATS_MAX_SIDE} px"},
        }
        (self.root / "meta").mkdir(parents=True, exist_ok=True)
        write_json(self.root / INFO_PATH, info)
        self._set_config(info, fps, video, codec, encoder, options, pix_fmts)

    def _open_existing(self, fps, robot_type, video, codec, video_options) -> None:
        path = self.root / INFO_PATH
        info = load_json(path)
        version = info.get("codebase_version") if isinstance(info, dict) else None
        if version != CODEBASE_VERSION:
            raise DatasetError(f"{path}: not a LeRobot {CODEBASE_VERSION} info.json (codebase_version={version!r})")
        check_info(path, info)            # appending trusts its counts no more than a reader does
        section = info.get(EMBODIA)
        if not isinstance(section, dict) or "embodiment" not in section:
            raise RecordingError(f"{path}: no '{EMBODIA}' section; appending to datasets not written by "
                                 "embodia is not supported")
        stored = section["embodiment"]
        if stored != self._emb_dict:
            diffs = [k for k in sorted(set(stored) | set(self._emb_dict)) if stored.get(k) != self._emb_dict.get(k)]
            detail = "; ".join(f"{k}: dataset {short(stored.get(k))} vs given {short(self._emb_dict.get(k))}"
                               for k in diffs)
            raise EmbodimentMismatch(f"{self.root} was recorded with another embodiment "
                                     f"({stored.get('name')!r}); differs in {detail}")
        have_fps = float(info["fps"])
        if fps is not None and not math.isclose(float(fps), have_fps):
            raise EmbodimentMismatch(f"{path}: dataset fps is {have_fps:g}, writer asked for {fps:g}")
        if robot_type is not None and robot_type != info.get("robot_type"):
            raise EmbodimentMismatch(f"{path}: robot_type is {info.get('robot_type')!r}, writer asked for "
                                     f"{robot_type!r}")
        vsec = section.get("video")
        if self.embodiment.cameras:
            dtypes = {info["features"].get(image_key(c.name), {}).get("dtype") for c in self.embodiment.cameras}
            have_video = dtypes == {"video"}
            if video is not None and bool(video) != have_video:
                raise EmbodimentMismatch(f"{path}: dataset stores images as "
                                         f"{'video' if have_video else 'image'}; writer asked for video={video}")
        else:
            have_video = vsec is not None
        have_codec = (vsec or {}).get("codec", "h264")
        if have_codec not in CODECS:
            raise DatasetError(f"{path}: unknown video codec {have_codec!r} in the {EMBODIA} section")
        if codec is not None and have_video and CODECS.get(codec, (None, codec))[1] != CODECS[have_codec][1]:
            raise EmbodimentMismatch(f"{path}: dataset videos use {have_codec!r}, writer asked for {codec!r}")
        encoder, name, options, pix_fmts = self._codec_setup(
            have_codec, {**(vsec or {}).get("options", {}), **(video_options or {})}, have_video)
        for cam in self.embodiment.cameras if have_video else ():
            fi = info["features"].get(image_key(cam.name), {}).get("info") or {}
            pix_fmts[cam.name] = fi.get("video.pix_fmt", pix_fmts[cam.name])
        self._set_config(info, have_fps, have_video, have_codec, encoder, options, pix_fmts)

    def _set_config(self, info, fps, video, codec, encoder, options, pix_fmts) -> None:
        self._info = info
        self.fps = float(fps)
        self._fps_frac = Fraction(repr(float(fps))).limit_denominator(1_000_000)
        self.video = bool(video)
        self.codec = codec
        self._encoder = encoder
        self._video_options = options
        self._pix_fmts = pix_fmts
        self._episodes: list[dict] = []
        self._tasks: list[str] = []
        self._arrays: dict[str, list[np.ndarray]] | None = None   # loaded on the first commit

    def _reconcile(self) -> None:
        """Load committed episodes/tasks; drop what a crashed commit left past info.json's counters."""
        n = int(self._info["total_episodes"])
        rows = []
        files = sorted((self.root / EPISODES_DIR).glob("chunk-*/file-*.parquet"))
        for f in files:
            rows.extend(read_table(f).to_pylist())
        self._episodes = check_rows(self.root / EPISODES_DIR, rows, n, None, self.root / INFO_PATH)
        tasks_path = self.root / TASKS_PATH
        all_tasks = 0
        if tasks_path.exists():
            t = read_table(tasks_path)
            if not {"task_index", "task"} <= set(t.column_names):
                raise DatasetError(f"{tasks_path}: needs columns task_index and task, has {t.column_names}")
            pairs = sorted(zip(t.column("task_index").to_pylist(), t.column("task").to_pylist()))
            all_tasks = len(pairs)
            self._tasks = [s for _, s in pairs][: int(self._info.get("total_tasks", len(pairs)))]
        elif n:
            raise DatasetError(f"{tasks_path}: missing, but {self.root / INFO_PATH} has {n} episodes")
        if len(self._tasks) != int(self._info.get("total_tasks", len(self._tasks))):
            raise DatasetError(f"{tasks_path}: {len(self._tasks)} tasks, {self.root / INFO_PATH} says "
                               f"{self._info.get('total_tasks')}")
        dirty = len(rows) != n or len(files) > 1 or all_tasks != len(self._tasks)
        self._remove_leftovers()
        if dirty:   # a commit died after writing episodes/tasks but before info.json: roll back
            with self._commit_lock:
                self._write_metadata(self._episodes, self._tasks, self._info)

    def _remove_leftovers(self) -> None:
        keep = {self._data_path(r["data/chunk_index"], r["data/file_index"]) for r in self._episodes}
        for r in self._episodes:
            for key in self._video_keys():
                keep.add(self._video_path(key, r[f"videos/{key}/chunk_index"], r[f"videos/{key}/file_index"]))
        for sub, pattern in (("data", "chunk-*/*"), ("videos", "*/chunk-*/*"), ("meta", "**/.*.tmp-*")):
            base = self.root / sub
            if not base.is_dir():
                continue
            for p in base.glob(pattern):
                if p.is_file() and p not in keep and (p.suffix in (".parquet", ".mp4") or ".tmp-" in p.name):
                    if sub == "meta" or p.parent.name.startswith("chunk-"):
                        p.unlink(missing_ok=True)

    # -- paths --------------------------------------------------------------------------------------
    def _data_path(self, chunk: int, file: int) -> Path:
        return self.root / DATA_PATH.format(chunk_index=chunk, file_index=file)

    def _video_path(self, key: str, chunk: int, file: int) -> Path:
        return self.root / VIDEO_PATH.format(video_key=key, chunk_index=chunk, file_index=file)

    def _video_keys(self) -> list[str]:
        return [image_key(c.name) for c in self.embodiment.cameras] if self.video else []

    @property
    def num_episodes(self) -> int:
        return int(self._info["total_episodes"])

    @property
    def info(self) -> dict:
        return json.loads(json.dumps(self._info))

    # -- episodes -----------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RecordingError(f"DatasetWriter({self.root}) is closed")

    def begin_episode(self, task: str = "", seed: int | None = None, meta: dict | None = None) -> Episode:
        """Open a step log for a new episode; returns the Episode handle the loop calls add_step on."""
        self._check_open()
        if seed is not None:
            if isinstance(seed, (bool, float)) or not isinstance(seed, (int, np.integer)):
                raise TypeError(f"seed must be an int or None, got {seed!r}")
            seed = int(seed)
        episode_id = uuid.uuid4().hex
        header = {"type": "header", "format": STEPLOG_FORMAT, "version": STEPLOG_VERSION,
                  "episode_id": episode_id, "embodiment": self._emb_dict, "task": str(task or ""),
                  "seed": seed, "meta": normalized(meta or {}), "start_time": time.time(),
                  "fps": self.fps, "image_encoding": self.steplog_images}
        path = self.steplog_dir / f"episode_{episode_id}.jsonl"
        ep = Episode(self, episode_id, path, header)
        self._open[episode_id] = ep
        return ep

    def _own(self, ep: Episode) -> None:
        if ep.writer is not self:
            raise RecordingError(f"episode {ep.episode_id} belongs to another DatasetWriter")
        if ep.closed:
            raise RecordingError(f"episode {ep.episode_id} has already ended")

    def end_episode(self, ep: Episode, success: bool | None = None, final_state=None,
                    info: dict | None = None, final_obs=None) -> int | None:
        """Commit the episode to the dataset; returns its episode_index (None for an episode with no steps).
        ``final_obs`` (the `Recorder` call): its state is the final state unless ``final_state`` is given.
        ``success`` is stored as a bool: an episode nobody could verify (None) is stored as a failure,
        so a dataset's success column never claims what no check saw (a GUI step log keeps the None)."""
        if final_state is None and final_obs is not None and getattr(final_obs, "state", None) is not None:
            final_state = final_obs.state
        self._check_open()
        self._own(ep)
        end = {"type": "end", "success": bool(success),
               "final_state": None if final_state is None else np.asarray(final_state, np.float32).tolist(),
               "info": normalized(info or {}), "end_time": time.time()}
        try:
            ep._finish(end)
        finally:
            self._open.pop(ep.episode_id, None)
        if ep.num_steps == 0:
            ep.path.unlink(missing_ok=True)
            return None
        with self._commit_lock:
            return self._commit_log(ep.path)

    def discard_episode(self, ep: Episode) -> None:
        """Drop a running episode (e.g. the operator rejects it): its step log is deleted."""
        self._own(ep)
        ep._finish(None)
        self._open.pop(ep.episode_id, None)
        ep.path.unlink(missing_ok=True)

    def recover(self) -> list[int]:
        """Turn step logs of crashed processes into episodes (success False, info {"interrupted": True}
        unless the log has its end record); returns their episode indices. Unusable logs are renamed
        *.jsonl.unrecoverable with a warning."""
        self._check_open()
        out = []
        with self._commit_lock:
            mine = {ep.path for ep in self._open.values()}
            logs = []
            for p in self.steplog_dir.glob("episode_*.jsonl"):
                if p in mine:
                    continue
                start = p.stat().st_mtime
                try:
                    with open(p, "rb") as f:
                        first = f.readline()
                    start = float(json.loads(first).get("start_time", start))
                except (ValueError, OSError, AttributeError):
                    pass
                logs.append((start, p.name, p))
            for _, _, p in sorted(logs):
                try:
                    idx = self._commit_log(p)
                except BadLog as e:
                    bad = p.with_name(p.name + ".unrecoverable")
                    os.replace(p, bad)
                    warnings.warn(f"step log not recovered, kept as {bad}: {e}", RuntimeWarning, stacklevel=2)
                    continue
                if idx is not None:
                    out.append(idx)
        return out

    # -- closing ------------------------------------------------------------------------------------
    def close(self) -> None:
        """Release the dataset. Episodes still open keep their step logs (recovered on the next open)."""
        if self._closed:
            return
        if self._open:
            warnings.warn(f"{len(self._open)} episode(s) still open at close; their step logs stay in "
                          f"{self.steplog_dir} and are recovered when the dataset is next opened",
                          RuntimeWarning, stacklevel=2)
            for ep in list(self._open.values()):
                ep._finish(None)
            self._open.clear()
        self._closed = True
        self._release_lock()

    def __enter__(self) -> "DatasetWriter":
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False

    def __repr__(self) -> str:
        return (f"DatasetWriter({str(self.root)!r}, embodiment={self.embodiment.name!r}, "
                f"episodes={self.num_episodes}, video={self.video})")

