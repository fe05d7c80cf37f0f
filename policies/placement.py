"""Where a model runs: the torch device and dtype of every model this process loads.

One choice per process, made once (``--torch-device`` / ``--dtype`` on every verb that loads a model,
or ``$EMBODIA_TORCH_DEVICE`` / ``$EMBODIA_DTYPE``), and read by `embodia.agent.loop.factory.make_policy`
and every other loader (the success detector, a ``judge:hf:`` model, the trainer), so that no verb
carries its own copy of the rule. ``--torch-device`` is not ``--device``: that one names the body.

* ``auto`` (the default): CUDA when torch sees a GPU, else Apple's MPS when present, else the CPU.
* the dtype ``auto``: bfloat16 on CUDA (launch-bound models gain nothing from fp32 there, bigger
  ones halve their weight traffic), float32 elsewhere, so that a CPU run without the option is the
  CPU run it always was, bit for bit.

>>> Placement.resolve("cpu", "auto")
Placement(device=device(type='cpu'), dtype=torch.float32)
>>> Placement.resolve("cpu", "bfloat16").describe()
'cpu bfloat16'
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch

TORCH_DEVICE_ENV = "EMBODIA_TORCH_DEVICE"
DTYPE_ENV = "EMBODIA_DTYPE"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DEVICE_CHOICES = "auto | cpu | cuda[:N] | mps"


class PlacementError(ValueError):
    """A --torch-device or --dtype this machine cannot honour; one line naming which and why."""


def _auto_device() -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def parse_device(spec: str | None) -> torch.device:
    """``auto``/None, ``cpu``, ``cuda``, ``cuda:N``, ``mps`` (also the env var's value) -> a device
    that is present here; PlacementError otherwise."""
    text = (spec or "auto").strip().lower()
    if text == "auto":
        return _auto_device()
    kind, _, index = text.partition(":")
    if kind not in ("cpu", "cuda", "mps") or (index and (kind != "cuda" or not index.isdigit())):
        raise PlacementError(f"--torch-device {spec!r}: expected {DEVICE_CHOICES}")
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise PlacementError(f"--torch-device {spec}: torch sees no CUDA device here "
                                 f"(torch.cuda.is_available() is False); use cpu or auto")
        if index and int(index) >= torch.cuda.device_count():
            raise PlacementError(f"--torch-device {spec}: only {torch.cuda.device_count()} CUDA device(s) here")
    if kind == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise PlacementError(f"--torch-device {spec}: MPS is not available here; use cpu or auto")
    return torch.device(text)


def parse_dtype(spec: str | None, device: torch.device) -> torch.dtype:
    """``auto``/None: bfloat16 on CUDA, float32 elsewhere; else one of DTYPES."""
    text = (spec or "auto").strip().lower()
    if text == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if text not in DTYPES:
        raise PlacementError(f"--dtype {spec!r}: expected auto | {' | '.join(DTYPES)}")
    return DTYPES[text]


@dataclass(frozen=True)
class Placement:
    """A torch device and the dtype of the weights and activations there."""

    device: torch.device
    dtype: torch.dtype

    @classmethod
    def resolve(cls, device: str | None = None, dtype: str | None = None) -> "Placement":
        """The explicit choice, else ``$EMBODIA_TORCH_DEVICE`` / ``$EMBODIA_DTYPE``, else ``auto``."""
        dev = parse_device(device if device is not None else os.environ.get(TORCH_DEVICE_ENV))
        return cls(dev, parse_dtype(dtype if dtype is not None else os.environ.get(DTYPE_ENV), dev))

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def describe(self) -> str:
        """``cuda:0 bfloat16``: what a report and `embodia eval` print."""
        return f"{self.device} {str(self.dtype).removeprefix('torch.')}"

    def as_dict(self) -> dict:
        return {"torch_device": str(self.device), "dtype": str(self.dtype).removeprefix("torch.")}


def choose(device: str | None, dtype: str | None) -> Placement:
    """A verb's ``--torch-device`` / ``--dtype``, checked, and made this process's choice: written to
    ``$EMBODIA_TORCH_DEVICE`` / ``$EMBODIA_DTYPE`` so that every loader in it, and the worker
    processes it starts (``--jobs``, Ray actors), load their models there too. None keeps what the
    environment says."""
    placement = Placement.resolve(device, dtype)
    if device is not None:
        os.environ[TORCH_DEVICE_ENV] = device
    if dtype is not None:
        os.environ[DTYPE_ENV] = dtype
    return placement


def to_device(batch: dict, device: torch.device, *, pin: bool = False) -> dict:
    """A dict of tensors (a collated batch) moved to ``device``; other values as they are. ``pin``:
    through page-locked host memory, so that the copy to a GPU overlaps the host's next work."""
    def move(v):
        if not isinstance(v, torch.Tensor) or v.device == device:
            return v
        if pin and device.type == "cuda" and v.device.type == "cpu":
            v = v.pin_memory()
        return v.to(device, non_blocking=pin)
    return {k: move(v) for k, v in batch.items()}


def parse_args(parser, argv=None):
    """A script's ``parser`` (the benchmarks') with ``--torch-device`` and ``--dtype`` added, parsed,
    and the choice made for the process (`choose`): the models the script loads, through
    `make_policy` or directly, load there. A device this machine lacks is the parser's one-line error."""
    parser.add_argument("--torch-device", default=None, help=f"where models run: {DEVICE_CHOICES} "
                        f"(default: ${TORCH_DEVICE_ENV}, else auto)")
    parser.add_argument("--dtype", default=None, help=f"auto | {' | '.join(DTYPES)} (default: ${DTYPE_ENV}, else auto)")
    args = parser.parse_args(argv)
    try:
        choose(args.torch_device, args.dtype)
    except PlacementError as e:
        parser.error(str(e))
    return args
