"""embodia: one agent runtime for many bodies (desktops, Android phones, MuJoCo robots).

The source folders sit at the top of the repository (``agent/``, ``devices/``, ``memory/``,
``policies/``, ``sim/``, ``action_heads/``) and install as ``embodia.agent``, ``embodia.devices``, ...
through ``[tool.setuptools] package-dir`` in pyproject.toml. The names a user needs first are
here, loaded on first use so that ``import embodia`` stays cheap:

>>> from embodia import open_device, make_policy, run_episode          # doctest: +SKIP
>>> with open_device("sim:twogap-push") as dev:                         # doctest: +SKIP
...     result = run_episode(dev, make_policy("expert", dev), seed=0)
"""
from __future__ import annotations

import importlib
from pathlib import Path

# Run from a source checkout (the repository root on sys.path before any installed copy), this
# folder holds only the package root: its subpackages are the folders beside it.
_here = Path(__file__).resolve().parent
if not (_here / "agent").is_dir() and (_here.parent / "agent" / "__init__.py").is_file():
    __path__.append(str(_here.parent))   # noqa: F821  (a package's __path__)

__version__ = "0.1.0"

# public name -> module that defines it
_PUBLIC = {
    "Device": "embodia.devices", "DeviceLost": "embodia.devices", "open_device": "embodia.devices",
    "Embodiment": "embodia.devices", "Observation": "embodia.devices", "GuiAction": "embodia.devices",
    "Policy": "embodia.policies",
    "run_episode": "embodia.agent.loop", "run_async": "embodia.agent.loop", "make_policy": "embodia.agent.loop",
    "make_device": "embodia.agent.loop",
    "SuccessMemory": "embodia.memory", "ScreenMemory": "embodia.memory", "MemoryConfig": "embodia.memory",
    "DatasetWriter": "embodia.agent.recording", "LocalDataset": "embodia.agent.recording",
    "evaluate": "embodia.agent.evaluation",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'embodia' has no attribute {name!r}")
