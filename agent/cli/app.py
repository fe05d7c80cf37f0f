"""The ``embodia`` Typer app, its shared options and the few helpers every verb uses to talk to a
person (errors, progress, tables). The verbs live beside it, one module each."""
from __future__ import annotations

import re
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from embodia.agent.cli.validate import InputError, OneLineErrors, check, printable

app = typer.Typer(add_completion=False, no_args_is_help=True, cls=OneLineErrors,   # usage errors in one line
                  help="One agent runtime for many bodies: MuJoCo robots, desktops and phones.")
console = Console(stderr=True)

DEFAULT_DEVICE = "sim:twogap-push"
DEFAULT_POLICY = "embodia-tiny"

DeviceOpt = typer.Option(DEFAULT_DEVICE, "--device", "-d", help="device URI (see `embodia devices`)")
PolicyOpt = typer.Option(DEFAULT_POLICY, "--policy", "-p",
                         help="embodia-tiny | path/to/checkpoint | expert | random | replay:<dataset>[#episode] "
                              "| actions:<file.json> (GUI actions, in order) | openai:<model> (a VLM behind an "
                              "OpenAI-compatible endpoint, see --base-url) | remote:ws://HOST:PORT (`embodia serve`)")
BaseUrlOpt = typer.Option(None, "--base-url", help="openai:<model>: the endpoint's base URL, e.g. "
                          "http://127.0.0.1:8000/v1 (default: $OPENAI_BASE_URL)")
ApiKeyEnvOpt = typer.Option("OPENAI_API_KEY", "--api-key-env", help="openai:<model>: the environment variable "
                            "holding the API key (unset: no key is sent, as a local vLLM wants); "
                            "remote:ws://...: default EMBODIA_API_KEY")
CoordsOpt = typer.Option("norm1000", "--coords", help="openai:<model>: the coordinate convention of the model's "
                         "replies: norm1000 (GUI-Owl-1.5, UI-TARS v1), image_px (Qwen2.5-VL, UI-TARS-1.5), "
                         "screen_px, unit")
SamplesOpt = typer.Option(1, "--samples", min=1, help="openai:<model>, hf:<path>: candidate replies sampled "
                          "per decision (test-time scaling; 1: one greedy reply)")
SelectOpt = typer.Option("vote", "--select", help="with --samples > 1: vote (the most common candidate) | judge "
                         "(the model picks one of the distinct candidates; a non-number falls back to vote)")
AllowOpt = typer.Option(None, "--allow", help="run risky GUI actions of this class without asking "
                        "(send, delete, pay, purchase, install, password, all; repeatable). Without it a "
                        "risky action asks on the terminal, and is refused when nobody can answer")
ShiftOpt = typer.Option(None, "--shift", help="named distribution shift of a sim task, e.g. blocked-left")
SeedOpt = typer.Option(0, "--seed", help="episode i runs with seed SEED+i")
SizeOpt = typer.Option(None, "--size", help="camera size WxH (default: the device's)")
ModalityOpt = typer.Option(None, "--modality", help="a mapping file (GR00T's meta/modality.json form) naming the "
                           "dataset's state/action entries, cameras and body; default: the dataset's own, if any")
AsyncOpt = typer.Option(False, "--async", help="compute the next action chunk while the current one executes, "
                        "paced to the control rate (continuous-control bodies)")
SmoothOpt = typer.Option("none", "--smooth", help="with --async, the switch between chunks: none | inpaint (the "
                         "new chunk continues the old one's unexecuted actions; VLA policies) | ensemble "
                         "(blend overlapping chunks)")
WorkersOpt = typer.Option(None, "--workers", min=1, help="fan episodes out over N Ray actors, each with its own "
                          "device and policy (simulators only; pip install 'embodia\\[ray]'); same per-episode "
                          "outcomes as one process at one torch thread")
TorchDeviceOpt = typer.Option(None, "--torch-device", help="where models run (not --device, which names the "
                              "body): auto (CUDA when present, else MPS, else CPU) | cpu | cuda[:N] | mps; "
                              "default: $EMBODIA_TORCH_DEVICE, else auto")
DtypeOpt = typer.Option(None, "--dtype", help="the models' precision: auto (bfloat16 on CUDA, float32 elsewhere) | "
                        "float32 | bfloat16 | float16; default: $EMBODIA_DTYPE, else auto")
MemorySettingsOpt = typer.Option(None, "--memory-settings", help="settings of a fresh success memory for a "
                                 "checkpoint: a profile of its memory.json by name (embodia-mt50: "
                                 "fixed-setup, steering) or a JSON object of MemoryConfig fields; "
                                 "default: the memory.json's own")
ExecHorizonOpt = typer.Option(None, "--exec-horizon", min=1, help="a checkpoint decides every N actions of its "
                              "chunk (1 to the chunk's length) instead of its config's rate; runs a cached copy")
RayAddressOpt = typer.Option(None, "--ray-address", help="with --workers: join this Ray cluster (default: start "
                             "a local one with N CPUs)")


def fail(msg: str, code: int = 2):
    """One line on stderr and exit ``code`` (2: bad input); whatever the message quotes from the user
    (a name with a newline in it) cannot break it."""
    console.print(f"[red]error:[/red] {escape(printable(msg))}", soft_wrap=True, highlight=False)
    raise typer.Exit(code)


def policy_with_settings_and_horizon(policy: str, settings: Optional[str], memory,
                                     exec_horizon: Optional[int] = None) -> str:
    """The policy to load under ``--memory-settings`` and ``--exec-horizon``: ``policy`` unchanged
    without them, else a copy of the checkpoint whose memory.json holds the settings named and/or
    whose config.json decides every ``exec_horizon`` actions (kept under the user's cache,
    `suite_memory.cached_copy`). Settings without a memory to use them, or what the checkpoint
    refuses: exit 2."""
    if settings is None and exec_horizon is None:
        return policy
    if settings is not None and memory in (None, "off"):
        fail("--memory-settings sets up a success memory: use it with --memory")
    from embodia.agent.evaluation.suite_memory import cached_copy
    try:
        return cached_copy(policy, settings, exec_horizon)
    except ValueError as e:          # not a checkpoint, an unknown profile, settings the loader refuses
        given = [name for name, v in (("--memory-settings", settings), ("--exec-horizon", exec_horizon)) if v is not None]
        fail(f"{' / '.join(given)}: {e}")


def check_inputs(opts: dict) -> None:
    """Every option checked before any work (`embodia.agent.cli.validate`); a bad one exits 2.
    ``--torch-device`` / ``--dtype`` also become the process's choice here (`use_placement`)."""
    try:
        check(opts)
    except InputError as e:
        fail(str(e))
    use_placement(opts.get("torch_device"), opts.get("dtype"))


def use_placement(torch_device: Optional[str], dtype: Optional[str]) -> None:
    """Check ``--torch-device`` / ``--dtype`` on this machine and make them the process's choice, so
    that every model this command loads, here or in its worker processes, loads there
    (`embodia.policies.placement.choose`); a device this machine lacks exits 2 in one line. Without
    either option nothing is imported (a torch-free policy stays torch-free)."""
    if torch_device is None and dtype is None:
        return
    from embodia.policies.placement import PlacementError, choose
    try:
        choose(torch_device, dtype)
    except PlacementError as e:
        fail(str(e))


def policy_options(base_url=None, api_key_env="OPENAI_API_KEY", coords="norm1000", samples=1, select="vote") -> dict:
    """The options that reach ``make_policy``, gathered once per command."""
    return dict(base_url=base_url, api_key_env=api_key_env, coords=coords, samples=samples, select=select)


@contextmanager
def session(device_uri: str, policy_spec: str, shift: Optional[str], size: Optional[str], **policy_kw):
    """``open_session`` with its errors as one line and exit code 2."""
    from embodia.agent.loop.factory import SessionError, open_session
    try:
        with open_session(device_uri, policy_spec, shift, size, **policy_kw) as (device, policy):
            yield device, policy
    except SessionError as e:
        fail(str(e))


def recorder(out: Optional[Path], device):
    """The recorder for ``out`` (None: no recording), or a one-line error."""
    if out is None:
        return None
    from embodia.agent.recording.recorder import open_recorder
    try:
        return open_recorder(out, device.embodiment)
    except (ValueError, OSError) as e:      # RecordingError is a ValueError
        fail(f"cannot record to {out}: {e}")


def progress():
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[status]}"), TimeRemainingColumn(), console=console)


def gate(allow: Optional[list[str]], device=None):
    """The safety gate for GUI runs: the allow-list, and a terminal prompt when there is one (a
    sandbox device such as gui-sim allows everything, still recording each decision)."""
    from embodia.agent.loop.safety import console_confirm, default_gate
    try:
        return default_gate(device, allow or (), confirm=console_confirm if sys.stdin.isatty() else None)
    except ValueError as e:
        fail(str(e))


def opened_as(device: str, policy: str, record: bool) -> str:
    """The device URI as `policy` reads it (`policy_uri`), saying so when that changes what it observes."""
    from embodia.agent.evaluation.suite import policy_uri
    uri = policy_uri(device, policy, record=record)
    if "obs=" in uri and "obs=" not in device:
        console.print(f"{escape(policy)} reads LeRobot's view: opening {escape(uri)}", soft_wrap=True)
    return uri


def run_meta(device, shift, size, policy) -> dict:
    """What each recorded episode says about how it was made (replay reopens the device from it)."""
    return {"device": device, "shift": shift, "size": size, "policy": policy}


def slug(uri: str) -> str:
    scheme, _, target = uri.partition(":")
    return re.sub(r"[^A-Za-z0-9._-]+", "-", target).strip("-") or scheme or "device"


def print_unit(fleet, ev) -> None:
    """A fleet unit that died (and reruns) or was lost, in words."""
    what = (f"unit {ev.unit.id} (" + (f"{ev.unit.arm} stream {ev.unit.stream}, " if ev.unit.arm else "")
            + f"seeds {ev.unit.seeds[0]}..{ev.unit.seeds[-1]})")
    if ev.kind == "died":
        console.print(f"[yellow]worker {ev.worker} died running {what}; rerunning it on a fresh "
                      f"worker:[/yellow] {escape(str(ev.error))}", soft_wrap=True)
    elif ev.kind == "lost":
        console.print(f"[red]{what} lost: its worker died {fleet.retries + 1} times; these episodes did "
                      f"not run:[/red] {escape(str(ev.error))}", soft_wrap=True)


def lost_exit(rep: dict) -> None:
    """Exit 1 when a fleet lost units (the report lists them under fleet.lost)."""
    lost = (rep.get("fleet") or {}).get("lost")
    if lost:
        console.print(f"[red]{sum(len(u['seeds']) for u in lost)} episodes did not run (fleet.lost)[/red]")
        raise typer.Exit(1)


def print_report(rep: dict) -> None:
    t = Table(title=f"{rep['policy']} on {rep['device']}" + (f" (shift {rep['shift']})" if rep["shift"] else ""))
    for col in ("split", "value", "episodes", "successes", "rate", "95% Wilson"):
        t.add_column(col)
    if rep["success_rate"] is not None:
        lo, hi = rep["wilson95"]
        t.add_row("all", "", str(rep["verified_episodes"]), str(rep["successes"]),
                  f"{rep['success_rate']:.3f}", f"[{lo:.3f}, {hi:.3f}]")
    for key, cells in rep["by"].items():
        for value, c in sorted(cells.items()):
            lo, hi = c["wilson95"]
            t.add_row(key, value, str(c["episodes"]), str(c["successes"]), f"{c['success_rate']:.3f}",
                      f"[{lo:.3f}, {hi:.3f}]")
    console.print(t)
    tm = rep["timing"]
    if tm["steps_per_s"]:
        console.print(f"{rep['mean_length']:.1f} steps/episode, {tm['steps_per_s']:.0f} steps/s, "
                      f"runtime overhead {100 * (tm['overhead_frac'] or 0):.1f}% of loop time")
