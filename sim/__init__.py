"""Simulated tasks to train and test on: each has reset(seed), success(), an instruction, a
scripted expert and named distribution shifts. Opened through `sim:<task>` device URIs.

>>> from embodia.devices import open_device
>>> with open_device("sim:twogap-push", shift="blocked-left") as dev:   # doctest: +SKIP
...     obs = dev.reset(seed=0)
"""
from __future__ import annotations

if __name__ != "embodia.sim":     # the folder is the source of embodia.sim, never a package of its own
    raise ModuleNotFoundError(f"no module named {__name__!r}: import embodia.sim", name=__name__)

import importlib

# task name (or prefix ending in "/") -> "module:factory"; modules load on first use.
TASKS: dict[str, str] = {
    "twogap-push": "embodia.sim.twogap:open_twogap",
    "metaworld/": "embodia.sim.metaworld:open_metaworld",
    "miniwob/": "embodia.sim.miniwob:open_miniwob",
}


def open_sim(target: str, **options):
    for name, factory in TASKS.items():
        if target == name or (name.endswith("/") and target.startswith(name)):
            module, _, fn = factory.partition(":")
            rest = target[len(name):] if name.endswith("/") else None
            f = getattr(importlib.import_module(module), fn)
            return f(rest, **options) if rest is not None else f(**options)
    raise ValueError(f"unknown sim task {target!r}; known: {', '.join(list_targets())}")


def list_targets() -> list[str]:
    out = []
    for name, factory in TASKS.items():
        if name.endswith("/"):
            module = factory.partition(":")[0]
            try:
                out += [name + t for t in importlib.import_module(module).list_tasks()]
            except ImportError as e:
                out.append(f"{name}<task> (unavailable: {e})")
        else:
            out.append(name)
    return ["sim:" + t if not t.startswith("sim:") else t for t in out]
