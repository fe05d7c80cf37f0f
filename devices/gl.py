"""Offscreen MuJoCo rendering shared by every MuJoCo-based device.

mujoco reads MUJOCO_GL once, when it is first imported; `devices` imports this module first, so
without a display the EGL backend (no extra packages) is chosen before anything loads mujoco.
"""
from __future__ import annotations

import atexit
import logging
import os
import sys
import weakref

MUJOCO_IMPORTED_WITH = os.environ.get("MUJOCO_GL", "<unset>") if "mujoco" in sys.modules else None
if "MUJOCO_GL" not in os.environ and not os.environ.get("DISPLAY") and sys.platform.startswith("linux"):
    os.environ["MUJOCO_GL"] = "egl"


def route_mujoco_warnings() -> None:
    """Send MuJoCo's warnings ("Nan, Inf or huge value in QACC ...") to the `embodia.mujoco` logger.

    Left alone, MuJoCo prints them on stdout, where they land before a benchmark's JSON line, and
    appends them to a MUJOCO_LOG.TXT in the working directory. Through `logging` they reach stderr
    (or wherever the application sends its logs). A handler set before embodia's is kept.
    """
    import mujoco
    if mujoco.get_mju_user_warning() is None:
        mujoco.set_mju_user_warning(_log_mujoco_warning)


def _log_mujoco_warning(message: str) -> None:
    logging.getLogger("embodia.mujoco").warning("MuJoCo: %s", message)


class CameraRenderer:
    """Renders named cameras of one model at one size; shadows, reflections and MSAA off.

    On software GL those cost ~25 ms a frame (shadows) and ~3x (multisampling); without them a
    96x96 frame of a simple scene takes about 1 ms.
    """

    def __init__(self, model, width: int, height: int, owner: str = "mujoco"):
        import mujoco
        self._mujoco, self.model, self.owner = mujoco, model, owner
        self.width, self.height = width, height
        self._renderer = None
        self.frames = 0

    def _open(self):
        mj, vis = self._mujoco, self.model.vis
        vis.global_.offwidth = max(vis.global_.offwidth, self.width)
        vis.global_.offheight = max(vis.global_.offheight, self.height)
        vis.quality.offsamples = 0
        try:
            self._renderer = mj.Renderer(self.model, height=self.height, width=self.width)
        except Exception as e:
            when = ("" if MUJOCO_IMPORTED_WITH is None else
                    f" mujoco was imported before embodia's devices, with MUJOCO_GL={MUJOCO_IMPORTED_WITH}.")
            raise RuntimeError(f"{self.owner}: no offscreen OpenGL renderer: {e}.{when} Without a display, "
                               "set MUJOCO_GL=egl (or osmesa) before anything imports mujoco, or open "
                               "the device with render=0") from e
        # Free the GL context before interpreter teardown: mujoco terminates the EGL display at exit
        # (an atexit hook made with its first context), and a context freed after that raises
        # EGLError. atexit runs hooks last in, first out, so this one (made after the context) runs
        # before mujoco's; weakref's own exit hook may be older than mujoco's, and run too late.
        self._finalizer = weakref.finalize(self, self._renderer.close)
        atexit.register(self._finalizer)

    def render(self, data, cameras) -> dict:
        if self._renderer is None:
            self._open()
        flags = self._mujoco.mjtRndFlag
        out = {}
        for name in cameras:
            self._renderer.update_scene(data, camera=-1 if name == "free" else name)
            self._renderer.scene.flags[flags.mjRND_SHADOW] = False
            self._renderer.scene.flags[flags.mjRND_REFLECTION] = False
            out[name] = self._renderer.render().copy()
            self.frames += 1
        return out

    def close(self) -> None:
        if self._renderer is not None:
            self._finalizer()
            atexit.unregister(self._finalizer)
            self._renderer = None
