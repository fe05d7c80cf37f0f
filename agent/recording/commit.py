"""Committing an episode: its step log read back and checked, its frames written to the data
parquet and its camera streams to the video files, its row, the tasks and the statistics written
to the dataset's metadata (LeRobotDataset v3). A mixin of `DatasetWriter`, so `writer.py` keeps
opening, the episode handle and closing, and the commit reads on its own here."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from embodia.agent.recording.dataset import (
    EMBODIA,
    EPISODES_DIR,
    EPISODES_PATH,
    INFO_PATH,
    STATS_PATH,
    TASKS_PATH,
    list_column_to_numpy,
    read_table,
)
from embodia.agent.recording.feature_stats import (
    QUANTILES,
    c11,
    ImageStats,
    pool_image_stats,
    timing_summary,
    vector_stats,
)
from embodia.agent.recording.files import dumps, jsonable, normalized, write_json, write_parquet
from embodia.agent.recording.steplog import (
    BadLog,
    iter_steplog,
)
from embodia.agent.recording.video import VideoEncoder
from embodia.devices.embodiment import Embodiment
from embodia.devices.observation import ACTION, STATE, image_key
from embodia.shared.files import fsync_dir
from embodia.shared.images import png_bytes

INTERVENTION = "intervention"   # frame column: a person chose this action (take over and hand back)
CHUNKS_SIZE = 1000


def _tasks_table(tasks: list[str]):
    """task_index + task; pandas metadata makes pandas.read_parquet index the frame by task, as LeRobot does."""
    import pyarrow as pa
    table = pa.table({"task_index": pa.array(np.arange(len(tasks), dtype=np.int64)),
                      "task": pa.array(tasks, pa.string())})
    pandas_meta = {
        "index_columns": ["task"],
        "column_indexes": [{"name": None, "field_name": None, "pandas_type": "unicode", "numpy_type": "object",
                            "metadata": {"encoding": "UTF-8"}}],
        "columns": [
            {"name": "task_index", "field_name": "task_index", "pandas_type": "int64", "numpy_type": "int64",
             "metadata": None},
            {"name": "task", "field_name": "task", "pandas_type": "unicode", "numpy_type": "object",
             "metadata": None}],
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.0",
    }
    return table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})


def short(v, n: int = 120) -> str:
    s = json.dumps(v, default=jsonable)
    return s if len(s) <= n else s[: n - 3] + "..."


class _Log:
    """One step log as read for its commit: header, steps, end, and the videos being encoded."""

    def __init__(self, emb: Embodiment):
        self.header: dict | None = None
        self.end: dict | None = None
        self.states, self.actions, self.obs_times, self.timings = [], [], [], []
        self.interventions: list[bool] = []
        self.encoders: dict[str, VideoEncoder] = {}
        self.pngs: dict[str, list[bytes]] = {c.name: [] for c in emb.cameras}
        self.img_stats = {c.name: ImageStats(c.height, c.width) for c in emb.cameras}
        self.state_dim = emb.state_dim

    @property
    def length(self) -> int:
        return len(self.states)

    def finish(self) -> None:
        for enc in self.encoders.values():
            enc.finish()
        self.state = (np.stack(self.states).astype(np.float32) if self.state_dim
                      else np.zeros((self.length, 0), np.float32))
        self.action = np.stack(self.actions).astype(np.float32)

    def abort(self) -> None:
        for enc in self.encoders.values():
            enc.abort()


class Committing:
    """Reading a step log back and committing it to the dataset (over a `DatasetWriter`'s
    ``root``, ``_info``, episodes and statistics)."""

    # -- commit -------------------------------------------------------------------------------------
    def _load_arrays(self) -> dict[str, list[np.ndarray]]:
        if self._arrays is None:
            arrays: dict[str, list[np.ndarray]] = {STATE: [], ACTION: []}
            cols = [k for k in (STATE, ACTION) if k in self._info["features"]]
            cache: dict[Path, Any] = {}
            import pyarrow.compute as pc
            for r in self._episodes:
                path = self._data_path(r["data/chunk_index"], r["data/file_index"])
                if path not in cache:
                    cache = {path: read_table(path, columns=cols + ["episode_index"])}
                t = cache[path]
                t = t.filter(pc.equal(t.column("episode_index"), r["episode_index"]))
                for k in cols:
                    arrays[k].append(list_column_to_numpy(t.column(k), np.float32))
            self._arrays = arrays
        return self._arrays

    def _commit_log(self, path: Path) -> int | None:
        """Convert one step log into the next episode (streaming; images never all in memory):
        frames and videos, the episode's row, then the metadata with info.json last."""
        n = int(self._info["total_episodes"])
        chunk, file = divmod(n, int(self._info.get("chunks_size", CHUNKS_SIZE)))
        log = self._read_log(path, chunk, file)
        if log is None:
            path.unlink(missing_ok=True)
            return None
        task = log.header.get("task", "")
        tasks = self._tasks + ([task] if task not in self._tasks else [])
        start = int(self._info["total_frames"])
        self._write_frames(log, n, chunk, file, tasks.index(task), start)
        episodes = self._episodes + [self._episode_row(log, n, chunk, file, task, start)]
        # global stats (exact for state/action: every frame is kept in memory, float32)
        arrays = self._load_arrays()
        new_arrays = {STATE: arrays[STATE] + [log.state], ACTION: arrays[ACTION] + [log.action]}
        info = json.loads(json.dumps(self._info))
        info["total_episodes"] = n + 1
        info["total_frames"] = start + log.length
        info["total_tasks"] = len(tasks)
        info["splits"] = {"train": f"0:{n + 1}"}
        self._write_metadata(episodes, tasks, info, new_arrays)

        self._episodes, self._tasks, self._info, self._arrays = episodes, tasks, info, new_arrays
        path.unlink(missing_ok=True)
        fsync_dir(path.parent)
        return n

    def _read_log(self, path: Path, chunk: int, file: int) -> "_Log | None":
        """Read a step log, encoding its frames into the episode's videos as they come; None for a
        log already committed (a crash after its commit) or with no step."""
        log = _Log(self.embodiment)
        committed_ids = {r.get(f"{EMBODIA}/episode_id") for r in self._episodes}
        try:
            for rec in iter_steplog(path):
                if rec["type"] == "header":
                    if rec.get("episode_id") in committed_ids:
                        log.abort()
                        return None
                    if normalized(rec.get("embodiment")) != self._emb_dict:
                        raise BadLog(f"{path}: recorded with another embodiment "
                                      f"({(rec.get('embodiment') or {}).get('name')!r})")
                    log.header = rec
                elif rec["type"] == "step":
                    self._read_step(log, rec, path, chunk, file)
                else:
                    log.end = rec
            if log.header is None or not log.states:     # nothing was recorded
                log.abort()
                return None
            log.finish()
        except BaseException:
            log.abort()
            raise
        return log

    def _read_step(self, log: "_Log", rec: dict, path: Path, chunk: int, file: int) -> None:
        emb = self.embodiment
        if len(rec["state"]) != emb.state_dim or len(rec["action"]) != emb.action_dim:
            raise BadLog(f"{path}: frame {rec['frame_index']}: state/action sizes "
                          f"{len(rec['state'])}/{len(rec['action'])} do not match {emb.name!r}")
        log.states.append(rec["state"])
        log.actions.append(rec["action"])
        log.obs_times.append(rec.get("obs_time"))
        log.timings.append(rec.get("timing") or {})
        log.interventions.append(bool(rec.get("intervention", False)))
        for cam in emb.cameras:
            img = rec["images"].get(cam.name)
            if img is None or img.shape != (cam.height, cam.width, 3):
                raise BadLog(f"{path}: frame {rec['frame_index']}: camera {cam.name!r} missing "
                              "or of the wrong size")
            log.img_stats[cam.name].add(img)
            if not self.video:
                log.pngs[cam.name].append(png_bytes(img, level=3))
                continue
            enc = log.encoders.get(cam.name)
            if enc is None:
                enc = log.encoders[cam.name] = VideoEncoder(
                    self._video_path(image_key(cam.name), chunk, file), cam.width, cam.height, self._fps_frac,
                    self._encoder, self._pix_fmts[cam.name], self._video_options)
            enc.add(img)

    def _write_frames(self, log: "_Log", n: int, chunk: int, file: int, task_index: int, start: int) -> None:
        """The episode's data file: state, action, images (without video), indices."""
        import pyarrow as pa
        emb, length = self.embodiment, log.length
        cols = {}
        if emb.state_dim:
            cols[STATE] = pa.FixedSizeListArray.from_arrays(pa.array(log.state.ravel(), pa.float32()), emb.state_dim)
        cols[ACTION] = pa.FixedSizeListArray.from_arrays(pa.array(log.action.ravel(), pa.float32()), emb.action_dim)
        if not self.video:
            img_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
            for cam in emb.cameras:
                cols[image_key(cam.name)] = pa.array([{"bytes": b, "path": None} for b in log.pngs[cam.name]],
                                                     type=img_type)
        frame_index = np.arange(length, dtype=np.int64)
        cols["timestamp"] = pa.array((frame_index / self.fps).astype(np.float32))
        cols["frame_index"] = pa.array(frame_index)
        cols["episode_index"] = pa.array(np.full(length, n, np.int64))
        cols["index"] = pa.array(start + frame_index)
        cols["task_index"] = pa.array(np.full(length, task_index, np.int64))
        if INTERVENTION in self._info["features"]:      # datasets begun before the column lack it
            cols[INTERVENTION] = pa.array(np.asarray(log.interventions, bool))
        write_parquet(self._data_path(chunk, file), pa.table(cols))

    def _episode_row(self, log: "_Log", n: int, chunk: int, file: int, task: str, start: int) -> dict:
        """The episode's row of meta/episodes: LeRobot's columns, its statistics, and ours."""
        length, header, end = log.length, log.header, log.end
        interrupted = end is None
        success = False if interrupted else end.get("success")
        ep_info = {"interrupted": True} if interrupted else (end.get("info") or {})
        final_state = None if interrupted else end.get("final_state")
        row: dict[str, Any] = {
            "episode_index": n, "tasks": [task], "length": length,
            "data/chunk_index": chunk, "data/file_index": file,
            "dataset_from_index": start, "dataset_to_index": start + length,
        }
        for key in self._video_keys():
            row.update({f"videos/{key}/chunk_index": chunk, f"videos/{key}/file_index": file,
                        f"videos/{key}/from_timestamp": 0.0, f"videos/{key}/to_timestamp": length / self.fps})
        row.update({"meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0})
        for key, x in ((STATE, log.state), (ACTION, log.action)):
            if key in self._info["features"]:
                for s, v in vector_stats(x).items():
                    row[f"stats/{key}/{s}"] = np.asarray(v).tolist()
        for cam in self.embodiment.cameras:
            for s, v in log.img_stats[cam.name].result().items():
                row[f"stats/{image_key(cam.name)}/{s}"] = v.tolist() if s == "count" else c11(v)
        row.update({
            f"{EMBODIA}/episode_id": header.get("episode_id"),
            f"{EMBODIA}/seed": header.get("seed"),
            f"{EMBODIA}/success": None if success is None else bool(success),
            f"{EMBODIA}/interrupted": interrupted,
            f"{EMBODIA}/final_state": None if final_state is None else np.asarray(final_state, np.float32).tolist(),
            f"{EMBODIA}/info": dumps(ep_info),
            f"{EMBODIA}/meta": dumps(header.get("meta") or {}),
            f"{EMBODIA}/timing": dumps(timing_summary(log.timings, [t for t in log.obs_times if t is not None])),
            f"{EMBODIA}/start_time": header.get("start_time"),
        })
        return row

    def _episodes_schema(self):
        import pyarrow as pa
        i64, f64, lf64 = pa.int64(), pa.float64(), pa.list_(pa.float64())
        fields = [("episode_index", i64), ("tasks", pa.list_(pa.string())), ("length", i64),
                  ("data/chunk_index", i64), ("data/file_index", i64),
                  ("dataset_from_index", i64), ("dataset_to_index", i64)]
        for key in self._video_keys():
            fields += [(f"videos/{key}/chunk_index", i64), (f"videos/{key}/file_index", i64),
                       (f"videos/{key}/from_timestamp", f64), (f"videos/{key}/to_timestamp", f64)]
        fields += [("meta/episodes/chunk_index", i64), ("meta/episodes/file_index", i64)]
        for key in (STATE, ACTION):
            if key in self._info["features"]:
                fields += [(f"stats/{key}/{s}", lf64) for s in ("min", "max", "mean", "std")]
                fields += [(f"stats/{key}/count", pa.list_(i64))]
                fields += [(f"stats/{key}/{q}", lf64) for q, _ in QUANTILES]
        for cam in self.embodiment.cameras:
            key = image_key(cam.name)
            fields += [(f"stats/{key}/{s}", pa.list_(pa.list_(lf64))) for s in ("min", "max", "mean", "std")]
            fields += [(f"stats/{key}/count", pa.list_(i64))]
        fields += [(f"{EMBODIA}/episode_id", pa.string()), (f"{EMBODIA}/seed", i64),
                   (f"{EMBODIA}/success", pa.bool_()), (f"{EMBODIA}/interrupted", pa.bool_()),
                   (f"{EMBODIA}/final_state", pa.list_(pa.float32())), (f"{EMBODIA}/info", pa.string()),
                   (f"{EMBODIA}/meta", pa.string()), (f"{EMBODIA}/timing", pa.string()),
                   (f"{EMBODIA}/start_time", f64)]
        return pa.schema(fields)

    def _write_metadata(self, episodes: list[dict], tasks: list[str], info: dict,
                        arrays: dict[str, list[np.ndarray]] | None = None) -> None:
        """tasks -> episodes -> stats -> info.json (the commit point), each atomic."""
        import pyarrow as pa
        write_parquet(self.root / TASKS_PATH, _tasks_table(tasks))
        write_parquet(self.root / EPISODES_PATH.format(chunk_index=0, file_index=0),
                       pa.Table.from_pylist(episodes, schema=self._episodes_schema()))
        for extra in sorted((self.root / EPISODES_DIR).glob("chunk-*/file-*.parquet")):
            if extra != self.root / EPISODES_PATH.format(chunk_index=0, file_index=0):
                extra.unlink()
        if arrays is None and episodes:
            arrays = self._load_arrays()
        stats = {}
        if episodes:
            for key in (STATE, ACTION):
                if key in info["features"] and arrays[key]:
                    stats[key] = {s: np.asarray(v).tolist()
                                  for s, v in vector_stats(np.concatenate(arrays[key])).items()}
            for cam in self.embodiment.cameras:
                pooled = pool_image_stats(episodes, image_key(cam.name))
                if pooled:
                    stats[image_key(cam.name)] = pooled
            write_json(self.root / STATS_PATH, stats)
        else:
            (self.root / STATS_PATH).unlink(missing_ok=True)
        write_json(self.root / INFO_PATH, info)

