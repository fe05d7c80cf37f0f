"""GUI episodes on disk: a JSON-lines step log with the screenshots beside it.

Screens come at native resolution and their size can change between steps (a rotated phone, a
resized desktop), so GUI episodes are not LeRobot video datasets. The layout::

    <root>/info.json                                  format, version, the first embodiment
    <root>/episodes/<NNNNNN>-<id>/steps.jsonl          header, one line per step, end line
    <root>/episodes/<NNNNNN>-<id>/screens/<t>.png      the screen before step t (final.png: after)

A step line holds the action as JSON (`GuiAction.to_dict`, 0..1000 coordinates), the screen size and
pixel ratio it was executed on, the coordinate space, the screenshot file, timing, the UI tree when
the device gave one, and the safety gate's decision. The screenshot is written (and renamed into
place) before its step line, and every line is flushed: a killed process loses at most the step in
flight, and `read_gui_episode` recovers every complete line before it.

>>> rec = GuiRecorder("runs/desktop", device.embodiment)          # doctest: +SKIP
>>> ep = rec.begin_episode(task="fill the form", seed=0)           # doctest: +SKIP
"""
from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

import numpy as np

from embodia.agent.recording.files import jsonable, resolved_inside, write_json
from embodia.agent.recording.steplog import RecordingError
from embodia.devices import GuiAction
from embodia.devices.gui import SCREEN
from embodia.shared.files import write_atomic
from embodia.shared.images import image_bytes, image_from_bytes

GUI_FORMAT = "embodia-gui-episodes"
GUI_VERSION = 1
IMAGE_FORMATS = ("png", "jpeg")


def _screen_dict(screen) -> dict | None:
    if screen is None:
        return None
    return {"width": int(screen.width), "height": int(screen.height),
            "pixel_ratio": float(getattr(screen, "pixel_ratio", 1.0) or 1.0)}


def is_gui_recording(path) -> bool:
    p = Path(path)
    try:
        return json.loads((p / "info.json").read_text()).get("format") == GUI_FORMAT
    except (OSError, ValueError, AttributeError, RecursionError):     # a nesting json cannot hold: not ours
        return False


def _encode(img: np.ndarray, path: Path, fmt: str) -> None:
    """Write the image under a temporary name, then rename it into place (no fsync per frame: a
    killed process never leaves a torn screenshot; the OS crashing is not what a step log guards)."""
    data = image_bytes(img, fmt, level=1)
    write_atomic(path, lambda f: f.write(data), sync=False)


class GuiEpisode:
    """A running GUI episode; `add_step` writes the screenshot and appends the step line."""

    def __init__(self, recorder: "GuiRecorder", path: Path, header: dict):
        self.recorder, self.path, self.header = recorder, path, header
        self.episode_id = header["episode_id"]
        (path / "screens").mkdir(parents=True, exist_ok=True)
        self._f = open(path / "steps.jsonl", "a", encoding="utf-8")
        self._line(header)
        self._n = 0
        self.closed = False

    @property
    def num_steps(self) -> int:
        return self._n

    def _line(self, rec: dict, sync: bool = False) -> None:
        self._f.write(json.dumps(rec, default=jsonable, ensure_ascii=False, allow_nan=False) + "\n")
        self._f.flush()
        if sync:
            os.fsync(self._f.fileno())

    def _screenshot(self, obs, name: str) -> dict | None:
        img = (obs.images or {}).get(SCREEN) if obs is not None else None
        if img is None:
            return None
        ext = "jpg" if self.recorder.image_format == "jpeg" else "png"
        rel = f"screens/{name}.{ext}"
        _encode(img, self.path / rel, self.recorder.image_format)
        return {"file": rel, "width": int(img.shape[1]), "height": int(img.shape[0])}

    def step(self, obs, action, timing: dict | None = None, extra: dict | None = None) -> int:
        """`Recorder`'s step (the same as ``add_step``)."""
        return self.add_step(obs, action, timing, extra)

    def add_step(self, obs, action, timing: dict | None = None, extra: dict | None = None) -> int:
        """Record step t: the screen before the action, the action (executed unless ``extra`` says
        otherwise), timing, and ``extra`` (safety decision, parse errors...). Returns t."""
        if self.closed:
            raise RecordingError(f"episode {self.episode_id} has ended; begin a new one")
        if not isinstance(action, GuiAction):
            raise RecordingError(f"a GUI episode records GuiAction, got {type(action).__name__}")
        t = self._n
        rec = {"type": "step", "t": t, "wall_time": time.time(),
               "obs_time": float(getattr(obs, "timestamp", 0.0) or 0.0),
               "action": action.to_dict(), "coord_space": "norm1000",
               "screen": _screen_dict(getattr(obs, "screen", None)),
               "image": self._screenshot(obs, f"{t:06d}"), "executed": True}
        if getattr(obs, "ui_tree", None) is not None:
            rec["ui_tree"] = obs.ui_tree
        if timing:
            rec["timing"] = timing
        if extra:
            rec.update(extra)
        self._line(rec)
        self._n = t + 1
        return t

    def finish(self, end: dict, final_obs=None) -> None:
        try:
            if final_obs is not None:
                end = {**end, "final_image": self._screenshot(final_obs, "final"),
                       "final_screen": _screen_dict(getattr(final_obs, "screen", None))}
                if getattr(final_obs, "ui_tree", None) is not None:    # what a success detector reads
                    end["final_ui_tree"] = final_obs.ui_tree
            self._line(end, sync=True)
        finally:
            self._f.close()
            self.closed = True


class GuiRecorder:
    """Records GUI episodes under ``root`` (created or appended to); a `Recorder`, as DatasetWriter."""

    def __init__(self, root, embodiment, *, image_format: str = "png"):
        if image_format not in IMAGE_FORMATS:
            raise ValueError(f"image_format must be one of {sorted(IMAGE_FORMATS)}, got {image_format!r}")
        self.root = Path(root)
        self.embodiment = embodiment
        self.image_format = image_format
        info = self.root / "info.json"
        if info.exists():
            if not is_gui_recording(self.root):
                raise RecordingError(f"{self.root} holds something else than GUI episodes ({info})")
        elif self.root.exists() and any(self.root.iterdir()):
            raise RecordingError(f"{self.root} exists and is not a GUI recording; choose another directory")
        else:
            self.root.mkdir(parents=True, exist_ok=True)
            write_json(info, {"format": GUI_FORMAT, "version": GUI_VERSION,
                               "embodiment": embodiment.to_dict(), "created": time.time()})
        (self.root / "episodes").mkdir(exist_ok=True)

    @property
    def num_episodes(self) -> int:
        return len(list((self.root / "episodes").iterdir()))

    def begin_episode(self, task: str = "", seed: int | None = None, meta: dict | None = None) -> GuiEpisode:
        episode_id = uuid.uuid4().hex[:12]
        index = self.num_episodes
        header = {"type": "header", "format": GUI_FORMAT, "version": GUI_VERSION, "episode_id": episode_id,
                  "index": index, "task": str(task or ""), "seed": seed, "meta": meta or {},
                  "embodiment": self.embodiment.to_dict(), "start_time": time.time()}
        return GuiEpisode(self, self.root / "episodes" / f"{index:06d}-{episode_id}", header)

    def end_episode(self, ep: GuiEpisode, success: bool | None = None, final_state=None,
                    info: dict | None = None, final_obs=None) -> int:
        """Close the step log; ``final_obs``'s screen is saved unless ``info`` names an error (a lost
        device's last screen is not a final one); ``final_state`` (a dataset's) has no place here."""
        if (info or {}).get("error") is not None:
            final_obs = None
        ep.finish({"type": "end", "success": success, "steps": ep.num_steps, "info": info or {},
                   "end_time": time.time()}, final_obs=final_obs)
        return int(ep.header["index"])

    def close(self) -> None:
        pass


def list_gui_episodes(root) -> list[Path]:
    return sorted(p for p in (Path(root) / "episodes").iterdir() if (p / "steps.jsonl").exists())


def read_gui_episode(path, *, load_images: bool = False) -> dict:
    """Read one episode directory: {"header", "steps", "end" (None if it never ended), "path"}.
    A torn last line (killed mid-write) is dropped; everything before it is returned."""
    path = Path(path)
    header, steps, end = None, [], None
    with open(path / "steps.jsonl", encoding="utf-8") as f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:
                break             # the step in flight when the process died
            kind = rec.get("type")
            if kind == "header":
                header = rec
            elif kind == "step":
                steps.append(rec)
            elif kind == "end":
                end = rec
    if header is None:
        raise RecordingError(f"{path / 'steps.jsonl'} has no header line; not a GUI episode")
    if load_images:
        for s in steps:
            s["screenshot"] = load_screen(path, s.get("image"))
    return {"header": header, "steps": steps, "end": end, "path": path}


def executed_steps(episode: dict) -> tuple[list[dict], list[GuiAction]]:
    """The steps of a read episode that ran (a refused action did not), and their GuiActions."""
    steps = [s for s in episode["steps"] if s.get("executed", True)]
    return steps, [GuiAction.from_dict(s["action"]) for s in steps]


def screen_file(episode_path, image: dict | None) -> Path | None:
    """The file an image record of an episode names, resolved, if it is a file inside the episode's
    folder (where the recorder writes it); None otherwise, so that a recording from someone else
    ("file": "/etc/passwd", "../../x", a symlink out) never makes a reader follow it out."""
    name = (image or {}).get("file")
    if not isinstance(name, str) or not name:
        return None
    p = resolved_inside(Path(episode_path) / name, [episode_path])
    return p if p is not None and p.is_file() else None


def load_screen(episode_path, image: dict | None) -> np.ndarray | None:
    p = screen_file(episode_path, image)
    if p is None:
        return None
    return image_from_bytes(p.read_bytes())


def load_actions(path) -> list[GuiAction]:
    """GuiActions from a JSON list, a JSON-lines file of actions, or `{"actions": [...]}`.
    Every entry is validated; the first bad one raises with its position."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        data = json.loads(text)
        items = data.get("actions") if isinstance(data, dict) else data
    except ValueError:
        items = [json.loads(line) for line in text.splitlines() if line.strip()]
    if not isinstance(items, list):
        raise ValueError(f"{path}: expected a list of GUI actions")
    out = []
    for i, d in enumerate(items):
        if not isinstance(d, dict):
            raise ValueError(f"{path}: action {i} is not an object: {d!r}")
        try:
            out.append(GuiAction.from_dict(d))
        except (ValueError, TypeError) as e:
            raise ValueError(f"{path}: action {i} is invalid: {e}") from None
    return out
