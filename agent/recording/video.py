"""Video files of a LeRobot v3 dataset: the codecs we write (PyAV), one encoder per episode and camera
(PNG frames, where a dataset keeps images instead of video, are `embodia.shared.images.png_bytes`)."""
from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np

from embodia.shared.files import commit_file, temp_path

# codec name -> (PyAV encoder, codec name in info.json, default options)
CODECS = {
    "h264": ("libx264", "h264", {"crf": "18", "preset": "veryfast", "g": "2"}),
    "av1": ("libsvtav1", "av1", {"crf": "30", "preset": "10", "g": "2", "svtav1-params": "verbosity=0"}),
    "mpeg4": ("mpeg4", "mpeg4", {"g": "2", "qmin": "2", "qmax": "4"}),
}
CODECS["libx264"], CODECS["libsvtav1"] = CODECS["h264"], CODECS["av1"]


# -- video ---------------------------------------------------------------------------------------------
class VideoEncoder:
    """Streams RGB frames into an mp4 (temp name until `finish`), pts = frame_index / fps."""

    def __init__(self, path: Path, width: int, height: int, fps: Fraction, encoder: str, pix_fmt: str,
                 options: dict):
        import av
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = temp_path(path)
        self.container = av.open(str(self.tmp), "w", format="mp4")
        try:
            self.stream = self.container.add_stream(encoder, rate=fps)
            self.stream.width, self.stream.height, self.stream.pix_fmt = width, height, pix_fmt
            self.stream.time_base = 1 / fps
            self.stream.options = dict(options)
        except BaseException:
            self.abort()
            raise
        self.n = 0

    def add(self, img: np.ndarray) -> None:
        import av
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(img), format="rgb24")
        frame.pts = self.n
        for packet in self.stream.encode(frame):
            self.container.mux(packet)
        self.n += 1

    def finish(self) -> None:
        for packet in self.stream.encode():
            self.container.mux(packet)
        self.container.close()
        commit_file(self.tmp, self.path)

    def abort(self) -> None:
        try:
            self.container.close()
        except Exception:   # noqa: BLE001 - best effort on the error path
            pass
        self.tmp.unlink(missing_ok=True)


def fps_value(fps: float):
    return int(fps) if float(fps).is_integer() else float(fps)

