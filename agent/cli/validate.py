"""Every `embodia` option checked before any work starts: pure functions that raise `InputError`
(one line, naming the option) for a value the command cannot use. The commands call `check` with
their arguments first thing, so a bad seed, size, URI parameter or output path is a usage error
(exit 2), never a traceback, and never found only after every episode has run.

>>> check({"seed": 3, "episodes": 10, "size": "64x64"})
>>> check({"seed": -1})                       # doctest: +IGNORE_EXCEPTION_DETAIL
Traceback (most recent call last):
embodia.agent.cli.validate.InputError: --seed -1: expected a whole number 0..4294967295 (episode i runs with seed+i)
"""
from __future__ import annotations

import math
import os
from pathlib import Path

MAX_SEED = 2 ** 32 - 1           # numpy's legacy seeding and most simulators take 32-bit seeds


class InputError(ValueError):
    """A command-line value the command cannot use; the message is one line naming the option."""


def _opt(name: str) -> str:
    return "--" + {"json_out": "json", "async_exec": "async"}.get(name, name).replace("_", "-")


def seed(v, episodes: int = 1) -> None:
    if not isinstance(v, int) or not 0 <= v <= MAX_SEED - max(0, (episodes or 1) - 1):
        raise InputError(f"--seed {v}: expected a whole number 0..{MAX_SEED - max(0, (episodes or 1) - 1)} "
                         f"(episode i runs with seed+i)")


def count(name: str, v, low: int = 1, high: int = 10 ** 9) -> None:
    if v is not None and not (isinstance(v, int) and low <= v <= high):
        raise InputError(f"{_opt(name)} {v}: expected a whole number {low}..{high}")


def number(name: str, v, low: float, high: float, *, open_low: bool = False) -> None:
    ok = isinstance(v, (int, float)) and math.isfinite(v) and (v > low if open_low else v >= low) and v <= high
    if v is not None and not ok:
        raise InputError(f"{_opt(name)} {v}: expected a number in {'(' if open_low else '['}{low:g}, {high:g}]")


def size(v) -> None:
    if v is None:
        return
    from embodia.devices.mujoco import parse_size
    try:
        parse_size(v)
    except ValueError as e:
        raise InputError(f"--size: {e}") from None


def device(v, name: str = "device") -> None:
    if v is None:
        return
    from embodia.devices.registry import check_uri
    try:
        check_uri(v)
    except ValueError as e:
        raise InputError(f"{_opt(name)} {v!r}: {e}") from None


_NOUNS = {"coords": "coordinate convention", "select": "selection", "smooth": "smoothing"}


def _choices(name: str) -> tuple:
    """The accepted values, from the modules that define them."""
    if name == "coords":
        from embodia.devices.coords import SPACES
        return tuple(SPACES)
    if name == "select":
        from embodia.policies.gui.prompt import SELECTIONS
        return tuple(SELECTIONS)
    from embodia.agent.loop.asynchronous import SMOOTHING
    return tuple(SMOOTHING)


def choice(name: str, v) -> None:
    if v is not None and v not in _choices(name):
        raise InputError(f"{_opt(name)}: unknown {_NOUNS[name]} {v!r}; known: {', '.join(_choices(name))}")


def allow(v) -> None:
    from embodia.agent.loop.safety import RISK_CLASSES
    bad = [a for a in v or () if a.strip().lower() not in (*RISK_CLASSES, "all")]
    if bad:
        raise InputError(f"--allow {bad[0]!r}: expected one of {', '.join(RISK_CLASSES)}, all")


def _writable_parent(p: Path) -> Path | None:
    """The nearest existing ancestor of ``p``, if it is a writable folder."""
    q = p.absolute().parent
    while not q.exists():
        q = q.parent
    return q if q.is_dir() and os.access(q, os.W_OK | os.X_OK) else None


def printable(x) -> str:
    """Text as one line: control and separator characters (a newline or a \\x1e in a file name or
    an environment variable's name; str.splitlines breaks at both) shown escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(x))


def one_line(x, limit: int = 160) -> str:
    """Text shown in one line of at most ``limit`` characters (`printable`, then cut with an ellipsis):
    what a model or a file says costs a line to print, whatever its length."""
    s = printable(x) if len(str(x)) <= 4 * limit else printable(str(x)[:4 * limit])
    return s if len(s) <= limit else s[:limit - 1] + "…"


def output_file(name: str, v) -> None:
    if v is None:
        return
    p, shown = Path(v), printable(v)
    if str(v) in ("", ".") or p.is_dir():
        raise InputError(f"{_opt(name)} {shown}: is a folder; expected a file path")
    if p.exists() and not os.access(p, os.W_OK):
        raise InputError(f"{_opt(name)} {shown}: exists and is not writable")
    parent = p.absolute().parent
    if not p.exists() and not parent.is_dir():
        raise InputError(f"{_opt(name)} {shown}: folder {printable(parent)} does not exist")
    if not p.exists() and not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{_opt(name)} {shown}: folder {printable(parent)} is not writable")


def output_dir(name: str, v) -> None:
    if v is None:
        return
    p = Path(v)
    if p.exists() and not p.is_dir():
        raise InputError(f"{_opt(name)} {v}: exists and is not a folder")
    if p.exists() and not os.access(p, os.W_OK | os.X_OK):
        raise InputError(f"{_opt(name)} {v}: folder is not writable")
    if not p.exists() and _writable_parent(p) is None:
        raise InputError(f"{_opt(name)} {v}: cannot create it (no writable folder above it)")


def memory(v) -> None:
    if v is None or v in ("off", "online"):
        return
    output_dir("memory", v)


def episode(v) -> None:
    if v is not None and v != "all" and not (v.isdigit() and int(v) < 10 ** 9):
        raise InputError(f"--episode {v!r}: expected an episode index (0, 1, ...) or 'all'")


def ablations(v) -> None:
    if not v:
        return
    from embodia.agent.evaluation.memory_eval import ARMS, SCREEN_ARMS
    known = sorted(set(ARMS) | set(SCREEN_ARMS))
    bad = [a for a in v.split(",") if a and a not in known]
    if bad:
        raise InputError(f"--ablations {bad[0]!r}: unknown arm; known: {', '.join(known)}")


def base_url(v) -> None:
    if v is not None and not v.startswith(("http://", "https://")):
        raise InputError(f"--base-url {v!r}: expected an http:// or https:// URL")


def success(v) -> None:
    from embodia.agent.loop.success import SuccessSourceError, check_source
    try:
        check_source(v)
    except SuccessSourceError as e:
        raise InputError(str(e)) from None


def text(name: str, v, limit: int = 2000) -> None:
    if v is not None and (not v.strip() or len(v) > limit or "\x00" in v):
        raise InputError(f"{_opt(name)}: expected 1..{limit} characters of text")


# option name -> its check (options of several commands share a name and a meaning)
_CHECKS = {
    "device": device, "size": size, "allow": allow, "memory": memory, "episode": episode,
    "ablations": ablations, "base_url": base_url, "success": success,
    "coords": lambda v: choice("coords", v), "select": lambda v: choice("select", v),
    "smooth": lambda v: choice("smooth", v),
    "episodes": lambda v: count("episodes", v, 1, 10 ** 7), "max_steps": lambda v: count("max_steps", v, 1, 10 ** 7),
    "samples": lambda v: count("samples", v, 1, 64), "streams": lambda v: count("streams", v, 1, 10 ** 4),
    "jobs": lambda v: count("jobs", v, 1, 1024), "workers": lambda v: count("workers", v, 1, 10 ** 4),
    "threads": lambda v: count("threads", v, 1, 1024), "port": lambda v: count("port", v, 0, 65535),
    "steps": lambda v: count("steps", v, 1, 10 ** 9), "batch_size": lambda v: count("batch_size", v, 1, 10 ** 6),
    "save_every": lambda v: count("save_every", v, 1, 10 ** 9), "hidden": lambda v: count("hidden", v, 1, 65536),
    "layers": lambda v: count("layers", v, 1, 1024), "min_fail": lambda v: count("min_fail", v, 0, 10 ** 9),
    "lr": lambda v: number("lr", v, 0, 10, open_low=True),
    "max_message_mb": lambda v: number("max_message_mb", v, 0, 1024, open_low=True),
    "max_fail_ratio": lambda v: number("max_fail_ratio", v, 0, 1),
    "stop_on_divergence": lambda v: number("stop_on_divergence", v, 0, 1e12),
    "json_out": lambda v: output_file("json_out", v), "plot": lambda v: output_file("plot", v),
    "record": lambda v: output_dir("record", v), "out": lambda v: output_dir("out", v),
    "instruction": lambda v: text("instruction", v), "host": lambda v: text("host", v, 255),
}


def check(opts: dict) -> None:
    """Check every option in ``opts`` (a command's ``locals()``) that has a check; InputError on the first bad one."""
    for name, v in opts.items():
        if name == "seed":
            seed(v, opts.get("episodes") or 1)
        elif name in _CHECKS:
            _CHECKS[name](v)


def _one_line_group():
    """A typer group whose usage errors (a value that is not a number, an unknown option) print as
    one line, ``error: embodia run: ... (see embodia run --help)``, exit 2 as before; help for no
    arguments, --help and everything else is unchanged."""
    import sys

    import typer
    from typer.core import TyperGroup
    exc = sys.modules[typer.BadParameter.__module__]     # the click typer uses (it vendors its own)
    no_args = getattr(exc, "NoArgsIsHelpError", ())

    class OneLineErrors(TyperGroup):
        def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
            if not standalone_mode:
                return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            try:
                rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            except no_args as e:
                e.show()
                sys.exit(e.exit_code)
            except exc.ClickException as e:
                where = e.ctx.command_path if getattr(e, "ctx", None) is not None else "embodia"
                msg = " ".join(e.format_message().split())
                typer.echo(f"error: {where}: {msg} (see {where} --help)", err=True)
                sys.exit(e.exit_code)
            except typer.Abort:
                typer.echo("Aborted!", err=True)
                sys.exit(1)
            sys.exit(rv if isinstance(rv, int) else 0)

    return OneLineErrors


OneLineErrors = _one_line_group()
