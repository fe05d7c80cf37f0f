"""The `embodia` command: run, record, eval, replay, devices."""
from __future__ import annotations

import json
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from embodia.agent.cli.validate import OneLineErrors  # noqa: E402  (usage errors in one line)

app = typer.Typer(add_completion=False, no_args_is_help=True, cls=OneLineErrors,
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
AsyncOpt = typer.Option(False, "--async", help="compute the next action chunk while the current one executes, "
                        "paced to the control rate (continuous-control bodies)")
SmoothOpt = typer.Option("none", "--smooth", help="with --async, the switch between chunks: none | inpaint (the "
                         "new chunk continues the old one's unexecuted actions; VLA policies) | ensemble "
                         "(blend overlapping chunks)")
WorkersOpt = typer.Option(None, "--workers", min=1, help="fan episodes out over N Ray actors, each with its own "
                          "device and policy (simulators only; pip install 'embodia\\[ray]'); same per-episode "
                          "outcomes as one process at one torch thread")
RayAddressOpt = typer.Option(None, "--ray-address", help="with --workers: join this Ray cluster (default: start "
                             "a local one with N CPUs)")


def _fail(msg: str, code: int = 2):
    console.print(f"[red]error:[/red] {msg}", soft_wrap=True, markup=True, highlight=False)
    raise typer.Exit(code)


def _check_inputs(opts: dict) -> None:
    """Every option checked before any work (`embodia.agent.cli.validate`); a bad one exits 2."""
    from embodia.agent.cli.validate import InputError, check
    try:
        check(opts)
    except InputError as e:
        _fail(str(e))


@contextmanager
def _session(device_uri: str, policy_spec: str, shift: Optional[str], size: Optional[str], **policy_kw):
    """Open device and policy with clear errors; always close the device, and the policy when it
    holds something (a websocket client's connection)."""
    from embodia.agent.loop.factory import PolicyError, make_device, make_policy
    from embodia.devices import DeviceLost
    try:
        device = make_device(device_uri, shift=shift, size=size)
    except (ValueError, FileNotFoundError, ImportError, DeviceLost) as e:
        _fail(f"cannot open device {device_uri!r}: {e}")
    policy = None
    try:
        try:
            policy = make_policy(policy_spec, device, **policy_kw)
        except (PolicyError, ValueError, FileNotFoundError) as e:
            _fail(f"cannot load policy {policy_spec!r}: {e}")
        yield device, policy
    finally:
        try:
            if callable(getattr(policy, "close", None)):
                policy.close()
        finally:
            device.close()


def _writer(out: Optional[Path], device):
    if out is None:
        return None
    from embodia.agent.recording.gui_log import GuiRecorder
    from embodia.agent.recording.writer import DatasetWriter
    try:
        if device.embodiment.is_gui:    # screenshots at native size + JSON actions, not video
            return GuiRecorder(out, device.embodiment)
        return DatasetWriter(out, device.embodiment)
    except (ValueError, OSError) as e:      # RecordingError is a ValueError
        _fail(f"cannot record to {out}: {e}")


def _progress():
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[status]}"), TimeRemainingColumn(), console=console)


def _gate(allow: Optional[list[str]], device=None):
    """The safety gate for GUI runs: the allow-list, and a terminal prompt when there is one (a
    sandbox device such as gui-sim allows everything, still recording each decision)."""
    import sys

    from embodia.agent.loop.safety import console_confirm, default_gate
    try:
        return default_gate(device, allow or (), confirm=console_confirm if sys.stdin.isatty() else None)
    except ValueError as e:
        _fail(str(e))


def _episodes(device, policy, *, episodes, seed, writer, meta, label, max_steps=None, gate=None,
              instruction=None, async_exec=False, smooth="none"):
    """Run `episodes` episodes with a progress bar showing the running success rate."""
    from embodia.agent.evaluation.evaluate import summarize
    from embodia.agent.loop.episode import run_episode
    if smooth != "none" and not async_exec:
        _fail("--smooth applies with --async")
    if async_exec:
        from embodia.agent.loop.asynchronous import check_async
        try:
            check_async(device, policy, smooth)
        except ValueError as e:
            _fail(f"--async: {e}")
    results = []
    with _progress() as bar:
        task = bar.add_task(label, total=episodes, status="")
        for i in range(episodes):
            r = run_episode(device, policy, seed=seed + i, recorder=writer, episode_meta=meta,
                            instruction=instruction,
                            max_steps=max_steps, gate=gate, async_exec=async_exec, smooth=smooth)
            results.append(r)
            ok = sum(bool(x.success) for x in results)
            verified = [x for x in results if x.success is not None]
            bar.update(task, advance=1, status=f"success {ok}/{len(verified)}" if verified else "")
            if r.error:
                console.print(f"[yellow]episode {i} (seed {r.seed}) ended with an error:[/yellow] {r.error}")
            if r.interrupted:
                console.print("[yellow]interrupted: the episode was closed"
                              + (" and saved" if writer else "") + "[/yellow]")
                break
    return results, summarize


@contextmanager
def _fleet(dev, spec, workers: int, address: Optional[str], on_done, record: bool = False, **kw):
    """A running `embodia.agent.fleet.runner.Fleet` of copies of `dev`: finished units go to `on_done(unit, result)`
    (None for a lost unit); deaths and lost units are printed as they happen."""
    from embodia.agent.fleet.runner import Fleet, FleetError, check_device

    def on_unit(fleet, ev):
        what = (f"unit {ev.unit.id} (" + (f"{ev.unit.arm} stream {ev.unit.stream}, " if ev.unit.arm else "")
                + f"seeds {ev.unit.seeds[0]}..{ev.unit.seeds[-1]})")
        if ev.kind == "done":
            on_done(ev.unit, ev.result)
        elif ev.kind == "died":
            console.print(f"[yellow]worker {ev.worker} died running {what}; rerunning it on a fresh "
                          f"worker:[/yellow] {ev.error}", soft_wrap=True)
        else:
            on_done(ev.unit, None)
            console.print(f"[red]{what} lost: its worker died {fleet.retries + 1} times; these episodes did "
                          f"not run:[/red] {ev.error}", soft_wrap=True)
    try:
        check_device(dev, record=record)
        with Fleet(spec, workers, address, on_unit=on_unit, **kw) as fleet:
            yield fleet
    except FleetError as e:
        from rich.markup import escape
        _fail(escape(str(e)))     # (the message has "embodia[ray]" in it)


def _fleet_episodes(dev, pol, spec, *, episodes, seed, writer, meta, label, workers, address, memory=None):
    """`_episodes` over Ray workers: (results in seed order, the report's "fleet" section)."""
    from embodia.agent.fleet.runner import memory_load_args
    kw = {}
    if memory:
        _with_memory(pol, memory, spec.device)      # the file fits this policy, or a clear error now
        kw = dict(memory=memory, memory_load=memory_load_args(pol))
    wins: list[bool] = []
    with _progress() as bar:
        task = bar.add_task(f"{label} ({workers} workers)", total=episodes, status="starting workers")

        def on_done(unit, rows):
            wins.extend(bool(r["success"]) for r in rows or ())
            bar.update(task, advance=len(unit.seeds), status=f"success {sum(wins)}/{len(wins)}")
        with _fleet(dev, spec, workers, address, on_done, record=writer is not None, **kw) as fleet:
            bar.update(task, status="")
            results = fleet.episodes(episodes=episodes, seed=seed, record=writer, meta=meta)
    return results, fleet.report()


def _lost_exit(rep: dict) -> None:
    """Exit 1 when a fleet lost units (the report lists them under fleet.lost)."""
    lost = (rep.get("fleet") or {}).get("lost")
    if lost:
        console.print(f"[red]{sum(len(u['seeds']) for u in lost)} episodes did not run (fleet.lost)[/red]")
        raise typer.Exit(1)


def _meta(device, shift, size, policy) -> dict:
    """What each recorded episode says about how it was made (replay reopens the device from it)."""
    return {"device": device, "shift": shift, "size": size, "policy": policy}


def _slug(uri: str) -> str:
    scheme, _, target = uri.partition(":")
    return re.sub(r"[^A-Za-z0-9._-]+", "-", target).strip("-") or scheme or "device"


@app.command()
def run(device: str = DeviceOpt, policy: str = PolicyOpt, shift: Optional[str] = ShiftOpt,
        episodes: int = typer.Option(1, "--episodes", "-n", min=1), seed: int = SeedOpt,
        record: Optional[Path] = typer.Option(None, "--record", help="dataset directory "
                                              "(default: runs/<device>)"),
        no_record: bool = typer.Option(False, "--no-record", help="do not record"),
        max_steps: Optional[int] = typer.Option(None, "--max-steps", min=1), size: Optional[str] = SizeOpt,
        memory: Optional[str] = typer.Option(None, "--memory", help="success memory directory: steer with "
                                             "it and add every verified success (saved at the end)"),
        allow: Optional[list[str]] = AllowOpt, base_url: Optional[str] = BaseUrlOpt,
        api_key_env: str = ApiKeyEnvOpt, coords: str = CoordsOpt, samples: int = SamplesOpt,
        select: str = SelectOpt, async_exec: bool = AsyncOpt, smooth: str = SmoothOpt,
        instruction: Optional[str] = typer.Option(None, "--instruction", "-i", help="the task in words "
                                                  "(default: the device's own, for simulated tasks)")):
    """Run a policy on a device, recording every episode (LeRobotDataset v3 layout; GUI devices:
    step log + screenshots + JSON actions)."""
    _check_inputs(locals())
    out = None if no_record else (record or Path("runs") / _slug(device))
    with _session(device, policy, shift, size, base_url=base_url, api_key_env=api_key_env,
                  coords=coords, samples=samples, select=select) as (dev, pol):
        writer = _writer(out, dev)
        steered = _with_memory(pol, memory, device, dev) if memory else None
        meta = _meta(device, shift, size, policy)
        try:
            results, _ = _episodes(dev, steered or pol, episodes=episodes, seed=seed, writer=writer, meta=meta,
                                   label="run", max_steps=max_steps, instruction=instruction,
                                   async_exec=async_exec, smooth=smooth,
                                   gate=_gate(allow, dev) if dev.embodiment.is_gui else None)
        finally:
            if steered is not None:
                steered.memory.save(memory)
    for r in results:
        outcome = {True: "[green]success[/green]", False: "[red]failure[/red]", None: "done"}[r.success]
        console.print(f"seed {r.seed}: {outcome} in {r.steps} steps; {r.instruction!r}; "
                      f"policy {r.timing['policy_s'] * 1e3:.0f} ms, device {r.timing['device_s'] * 1e3:.0f} ms"
                      + _async_note(r.timing.get("async"))
                      + (f"; recorded as episode {r.episode_index} in {out}" if writer else ""))
    if any(r.error for r in results):
        raise typer.Exit(1)


@app.command()
def record(out: Path = typer.Option(..., "--out", "-o", help="dataset directory (created or appended to)"),
           device: str = DeviceOpt, policy: str = PolicyOpt, shift: Optional[str] = ShiftOpt,
           episodes: int = typer.Option(20, "--episodes", "-n", min=1), seed: int = SeedOpt,
           only_success: bool = typer.Option(False, "--only-success",
                                             help="keep recording until EPISODES successes"),
           size: Optional[str] = SizeOpt, workers: Optional[int] = WorkersOpt,
           ray_address: Optional[str] = RayAddressOpt):
    """Record episodes into a LeRobotDataset v3 directory."""
    _check_inputs(locals())
    from embodia.agent.evaluation.evaluate import summarize
    fleet = None
    with _session(device, policy, shift, size) as (dev, pol):
        writer = _writer(out, dev)
        meta = _meta(device, shift, size, policy)
        if workers:
            from embodia.agent.fleet.runner import WorkerSpec
            results, fleet = _fleet_episodes(dev, pol, WorkerSpec(device, policy, shift, size), episodes=episodes,
                                             seed=seed, writer=writer, meta=meta, label="record",
                                             workers=workers, address=ray_address)
        else:
            results, _ = _episodes(dev, pol, episodes=episodes, seed=seed, writer=writer,
                                   meta=meta, label="record")
        writer.close()
    rep = summarize(results)
    rate = f"{rep['success_rate']:.2f}" if rep["success_rate"] is not None else "n/a"
    console.print(f"recorded {len(results)} episodes ({rep['successes']} successful, rate {rate}) to {out}")
    _lost_exit({"fleet": fleet})


@app.command("eval")
def eval_(device: str = DeviceOpt, policy: str = PolicyOpt, shift: Optional[str] = ShiftOpt,
          episodes: int = typer.Option(100, "--episodes", "-n", min=1, help="episodes (per stream with --streams)"),
          seed: int = SeedOpt,
          json_out: Optional[Path] = typer.Option(None, "--json", help="write the report here"),
          record: Optional[Path] = typer.Option(None, "--record", help="also record to this dataset"),
          memory: str = typer.Option("off", "--memory", help="off | online (a fresh memory per stream, "
                                     "compared with off on paired seeds) | PATH (a persistent memory file)"),
          streams: int = typer.Option(1, "--streams", min=1, help="independent streams with --memory online"),
          ablations: str = typer.Option("", "--ablations", help="extra memory arms, comma-separated: "
                                        "no-filter,no-mode-selection,fixed-confidence,replay (robots); no-values (screens)"),
          plot: Optional[Path] = typer.Option(None, "--plot", help="learning-curve PNG (--memory online)"),
          jobs: int = typer.Option(1, "--jobs", min=1, help="worker processes for --memory online (streams "
                                   "run in parallel, one torch thread each; same results as one process)"),
          size: Optional[str] = SizeOpt, base_url: Optional[str] = BaseUrlOpt,
          api_key_env: str = ApiKeyEnvOpt, coords: str = CoordsOpt, samples: int = SamplesOpt,
          select: str = SelectOpt, workers: Optional[int] = WorkersOpt, ray_address: Optional[str] = RayAddressOpt,
          async_exec: bool = AsyncOpt, smooth: str = SmoothOpt):
    """Evaluate a policy: success rate with a 95% Wilson interval, splits, timing; JSON report."""
    _check_inputs(locals())
    from embodia.agent.evaluation.evaluate import write_json
    if async_exec and (memory == "online" or workers):
        _fail("--async runs the episodes in this process: it does not combine with --memory online or --workers")
    if workers and jobs > 1:
        _fail("--jobs and --workers both fan out; use one (--workers: Ray actors, --jobs: local processes)")
    with _session(device, policy, shift, size, base_url=base_url, api_key_env=api_key_env,
                  coords=coords, samples=samples, select=select) as (dev, pol):
        if memory == "online":
            rep = _eval_memory_streams(dev, pol, device, episodes=episodes, seed=seed, streams=streams,
                                       ablations=[a for a in ablations.split(",") if a], plot=plot,
                                       jobs=jobs, spec=dict(policy=policy, shift=shift, size=size),
                                       workers=workers, ray_address=ray_address)
            rep.update(device=device, policy=policy, shift=shift)
        elif workers:
            from embodia.agent.fleet.runner import WorkerSpec, fleet_summary
            spec = WorkerSpec(device, policy, shift, size, dict(base_url=base_url, api_key_env=api_key_env,
                                                                coords=coords, samples=samples, select=select))
            results, fleet = _fleet_episodes(dev, pol, spec, episodes=episodes,
                                             seed=seed, writer=_writer(record, dev), label="eval",
                                             meta=_meta(device, shift, size, policy), workers=workers,
                                             address=ray_address, memory=None if memory == "off" else memory)
            rep = fleet_summary(results, fleet, seed=seed, device=device, policy=policy, shift=shift,
                                embodiment=dev.embodiment.name)
            _print_report(rep)
        else:
            writer = _writer(record, dev)
            steered = _with_memory(pol, memory, device, dev) if memory != "off" else None
            meta = _meta(device, shift, size, policy)
            try:
                results, summarize = _episodes(dev, steered or pol, episodes=episodes, seed=seed,
                                               writer=writer, meta=meta, label="eval",
                                               async_exec=async_exec, smooth=smooth)
            finally:
                if steered is not None:
                    steered.memory.save(memory)
            rep = summarize(results, device=device, policy=policy, shift=shift, seed=seed,
                            embodiment=dev.embodiment.name)
            _print_report(rep)
            if async_exec:
                rep["async"] = _async_report(results, smooth)
    if json_out:
        write_json(rep, json_out)
        console.print(f"report written to {json_out}")
    _lost_exit(rep)


def _async_note(a: Optional[dict]) -> str:
    """One episode's asynchronous execution in words (empty for a synchronous one)."""
    if not a:
        return ""
    rate = f"{a['achieved_hz']:.1f} of {a['target_hz']:.1f} Hz" if a["achieved_hz"] else "rate n/a"
    delay = a["delay_steps"].get("mean")
    return (f"; async ({a['smooth']}): {rate}, {a['stall_steps']} stalls"
            + (f", delay {delay:.1f} steps" if delay is not None else ""))


def _async_report(results, smooth: str) -> dict:
    """Control rate, stalls and inference delays over the episodes of an --async eval."""
    rows = [r.timing["async"] for r in results if "async" in r.timing]
    fracs = [a["rate_frac"] for a in rows if a["rate_frac"]]
    delays = [d for a in rows for d in a["delays"]]
    rep = {"smooth": smooth, "rate_frac_mean": sum(fracs) / len(fracs) if fracs else None,
           "stall_steps": sum(a["stall_steps"] for a in rows),
           "delay_steps_mean": sum(delays) / len(delays) if delays else None}
    console.print(f"async ({smooth}): {100 * (rep['rate_frac_mean'] or 0):.0f}% of the control rate held, "
                  f"{rep['stall_steps']} stall steps"
                  + (f", delay {rep['delay_steps_mean']:.1f} steps" if delays else ""))
    return rep


def _with_memory(pol, path: str, device_uri: str, dev=None):
    """Wrap a VLA policy with a persistent success memory stored at `path`; on a GUI device, any
    GUI policy with a screen memory (`ScreenMemoryPolicy`, replace mode)."""
    from embodia.memory import MemoryFileError, MemoryMismatch, SuccessMemory
    from embodia.policies.robot.steered import KEY_ENCODER, SteeredPolicy, memory_for, normalizer_hash

    from embodia.agent.evaluation.memory_eval import device_namespace
    from embodia.memory.persist import check_not_orphaned
    try:
        check_not_orphaned(path)       # a deleted meta.json never becomes an empty memory saved over the old
    except MemoryFileError as e:
        _fail(str(e))
    if dev is not None and dev.embodiment.is_gui:
        from embodia.memory import ScreenMemory
        from embodia.policies.gui.screen_memory import ScreenMemoryPolicy
        try:
            mem = ScreenMemory.load(path, missing_ok=True)
        except (MemoryFileError, MemoryMismatch) as e:
            _fail(f"{e} (move the file away to start from an empty memory)")
        steered = ScreenMemoryPolicy(pol, mem, device=dev)
        steered.autosave = path         # saved after every episode: a kill loses at most the one in flight
        return steered
    if not hasattr(pol, "norms"):
        _fail("--memory needs a VLA policy (embodia-tiny or a checkpoint)")
    fresh = memory_for(pol)
    try:
        mem = SuccessMemory.load(path, encoder_id=KEY_ENCODER, normalizer_hash=normalizer_hash(pol),
                                 missing_ok=True, key_dim=fresh.key_dim, horizon=fresh.horizon,
                                 action_dim=fresh.action_dim, hist_len=fresh.hist_len)
    except (MemoryFileError, MemoryMismatch) as e:
        _fail(f"{e} (move the file away to start from an empty memory)")
    import faiss       # one search per decision on a small index: OpenMP threads only contend
    faiss.omp_set_num_threads(1)   # (measured under load: 15 ms a search with 2 threads, 0.13 ms with 1)
    steered = SteeredPolicy(pol, mem, namespace=device_namespace(device_uri, pol.embodiment))
    steered.autosave = path             # saved after every episode: a kill loses at most the one in flight
    return steered


def _eval_memory_streams(dev, pol, device_uri, *, episodes, seed, streams, ablations, plot, jobs=1, spec=None,
                         workers=None, ray_address=None):
    from embodia.agent.evaluation.memory_eval import (ARMS, SCREEN_ARMS, arm_factory, build_report, device_namespace, evaluate_memory,
                              learning_curve_png, run_streams_parallel, screen_arm_factory)
    gui = dev.embodiment.is_gui
    known = SCREEN_ARMS if gui else ARMS
    unknown = [a for a in ablations if a not in known or known[a] is None]
    if unknown:
        _fail(f"unknown ablation(s) {unknown}; known: {[a for a in known if known[a] is not None]}")
    if gui and (workers or jobs > 1):
        _fail("--memory online on a GUI device runs its streams in this process (no --jobs or --workers yet)")
    if not gui and not hasattr(pol, "norms"):
        _fail("--memory online needs a VLA policy (embodia-tiny or a checkpoint)")
    arms = ["off", "online"] + [a for a in ablations if a not in ("off", "online")]

    with _progress() as bar:
        task = bar.add_task("memory eval", total=len(arms) * streams * episodes, status="")
        wins: dict = {}

        def tick(arm, s, i, r):
            wins.setdefault(arm, []).append(bool(r.success))
            bar.update(task, advance=1, status=f"{arm}: {sum(wins[arm])}/{len(wins[arm])}")

        def done(arm, s, res, cached):
            wins.setdefault(arm, []).extend(res["outcomes"])
            bar.update(task, advance=len(res["outcomes"]), status=f"{arm}: {sum(wins[arm])}/{len(wins[arm])}")
        if workers:
            from embodia.agent.fleet.runner import WorkerSpec, complete_streams
            spec = WorkerSpec(device_uri, spec["policy"], spec["shift"], spec["size"])
            with _fleet(dev, spec, workers, ray_address,
                        lambda u, res: res and done(u.arm, u.stream, res, False)) as fleet:
                runs = fleet.streams(arms=arms, streams=streams, episodes=episodes, seed=seed)
            runs, kept = complete_streams(runs, arms, streams)     # streams every arm finished
            rep = (build_report(runs, arms=arms, streams=len(kept), episodes=episodes, seed=seed) if kept
                   else {"streams": 0, "episodes_per_stream": episodes, "seed": seed, "arms": {}, "comparisons": {}})
            rep.update(streams_kept=kept, fleet=fleet.report())
        elif jobs > 1:
            runs = run_streams_parallel(device_uri, spec["policy"], arms=arms, streams=streams, episodes=episodes,
                                        seed=seed, shift=spec["shift"], size=spec["size"], jobs=jobs, on_stream=done)
            rep = build_report(runs, arms=arms, streams=streams, episodes=episodes, seed=seed)
        else:
            make = (screen_arm_factory(pol, dev) if gui
                    else arm_factory(pol, device_namespace(device_uri, pol.embodiment)))
            rep = evaluate_memory(dev, make, arms=arms, streams=streams, episodes=episodes, seed=seed,
                                  on_episode=tick)
    for arm, row in rep["arms"].items():
        lo, hi = row["wilson95"]
        console.print(f"{arm:>18}: {row['success_rate']:.3f} [{lo:.3f}, {hi:.3f}], second half "
                      f"{row['second_half']['success_rate']:.3f}")
        if row.get("poison") and row["poison"]["entries_stored"]:
            p = row["poison"]
            kinds = ", ".join(f"{k} {v['removed']} of {v['sources']}" for k, v in p["by_kind"].items())
            console.print(f"{'':>18}  {p['false_positives']} false successes; failure credit removed "
                          f"{p['entries_stored'] - p['entries_left']} of their {p['entries_stored']} entries"
                          f" (whole sources: {kinds})")
    for name, row in rep["comparisons"].items():
        lo, hi = row["second_half"]["newcombe95"]
        console.print(f"{name:>24}: second half {row['second_half']['diff']:+.3f} [{lo:+.3f}, {hi:+.3f}] "
                      f"(Newcombe 95%), streams {['%+.2f' % d for d in row['second_half']['per_stream_diff']]}")
    if plot:
        learning_curve_png(rep, plot)
        rep["plot"] = str(plot)
    return rep


def _print_report(rep: dict) -> None:
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


@app.command()
def replay(dataset: Path = typer.Argument(..., help="dataset directory, GUI recording, or a JSON file of GUI actions"),
           episode: str = typer.Option("0", "--episode", "-e", help="episode index or 'all'"),
           device: Optional[str] = typer.Option(None, "--device", "-d",
                                                help="device URI (default: the one in the record)"),
           stop_on_divergence: Optional[float] = typer.Option(
               None, "--stop-on-divergence", help="stop when |state - recorded| exceeds this (GUI: when "
               "the screen differs from the recorded one by more than this fraction, 0..1)"),
           record: Optional[Path] = typer.Option(None, "--record", help="GUI: record the replay here"),
           allow: Optional[list[str]] = AllowOpt,
           json_out: Optional[Path] = typer.Option(None, "--json")):
    """Re-execute recorded actions open loop; report final-state difference and outcome."""
    _check_inputs(locals())
    from embodia.agent.evaluation.evaluate import write_json
    from embodia.agent.recording.gui_log import is_gui_recording
    if dataset.is_file() or is_gui_recording(dataset):
        return _replay_gui(dataset, episode, device, stop_on_divergence, record, allow, json_out)
    from embodia.agent.recording.dataset import LocalDataset
    from embodia.agent.loop.replay import replay_episode
    try:
        ds = LocalDataset(dataset)
    except (ValueError, FileNotFoundError) as e:
        _fail(str(e))
    indices = range(ds.num_episodes) if episode == "all" else [int(episode)]
    if not indices:
        _fail(f"{dataset}: no episodes to replay (the dataset holds none)", code=1)
    rows = []
    for i in indices:
        if not 0 <= i < ds.num_episodes:
            _fail(f"episode {i} not in {dataset} ({ds.num_episodes} episodes)")
        r = replay_episode(ds, i, device_uri=device, stop_on_divergence=stop_on_divergence)
        rows.append(r)
        diff = r["final_state_max_abs_diff"]
        console.print(f"episode {i} (seed {r['seed']}): replayed {r['steps']}/{r['recorded_steps']} steps, "
                      f"success {r['success']} (recorded {r['recorded_success']}), final state max abs diff "
                      f"{'n/a' if diff is None else f'{diff:.3g}'}"
                      + (f", diverged at step {r['diverged_at']}" if r["diverged_at"] is not None else ""))
    if json_out:
        write_json({"dataset": str(dataset), "episodes": rows}, json_out)
    if not all(r["same_outcome"] for r in rows):
        raise typer.Exit(1)


def _replay_gui(source: Path, episode: str, device: Optional[str], stop: Optional[float],
                record: Optional[Path], allow, json_out: Optional[Path]):
    """`embodia replay` of a GUI recording or an actions file; exit 1 unless every action ran."""
    from embodia.agent.evaluation.evaluate import write_json
    from embodia.agent.recording.gui_log import is_gui_recording, list_gui_episodes
    from embodia.agent.loop.replay import replay_gui
    n = len(list_gui_episodes(source)) if is_gui_recording(source) else 1
    indices = range(n) if episode == "all" else [int(episode)]
    if not indices:
        _fail(f"{source}: no episodes to replay (the recording holds none)", code=1)
    rows = []
    for i in indices:
        try:
            r = replay_gui(source, episode=i, device_uri=device, stop_on_divergence=stop,
                           gate=(lambda dev: _gate(allow, dev)), record_to=record)
        except (ValueError, OSError, ImportError) as e:
            _fail(f"cannot replay {source}: {e}")
        rows.append(r)
        console.print(f"episode {i}: replayed {r['steps']}/{r['recorded_steps']} actions"
                      + (f", diverged before action {r['diverged_at']}" if r["diverged_at"] is not None else "")
                      + (f"; [red]{r['error']}[/red]" if r["error"] else ""))
    if json_out:
        write_json({"source": str(source), "episodes": rows}, json_out)
    if not all(r["completed"] for r in rows):
        raise typer.Exit(1)


@app.command()
def train(data: list[Path] = typer.Option(..., "--data", help="dataset directory (repeat for several bodies)"),
          out: Path = typer.Option(..., "--out", "-o", help="checkpoint directory"),
          steps: int = typer.Option(10000, "--steps", min=1), batch_size: int = typer.Option(64, "--batch-size"),
          lr: float = typer.Option(1e-3, "--lr"), seed: int = typer.Option(0, "--seed"),
          save_every: int = typer.Option(1000, "--save-every"), threads: int = typer.Option(2, "--threads"),
          hidden: int = typer.Option(64, "--hidden", help="backbone width of a fresh model"),
          layers: int = typer.Option(2, "--layers", help="backbone text layers of a fresh model"),
          resume: bool = typer.Option(False, "--resume", help="continue the run saved in --out")):
    """Train the VLA (backbone + DiT head) on recorded datasets; EMA checkpoints, resumable."""
    _check_inputs(locals())
    from embodia.agent.recording.dataset import DatasetError
    from embodia.agent.training.train import TrainConfig
    from embodia.agent.training.train import train as run_training
    cfg = TrainConfig(data=[str(d) for d in data], out=str(out), steps=steps, batch_size=batch_size, lr=lr,
                      seed=seed, save_every=save_every, threads=threads, hidden=hidden, layers=layers)
    try:
        run_training(cfg, resume=resume, log=console.print)
    except (DatasetError, FileNotFoundError) as e:
        _fail(str(e))
    console.print(f"checkpoint written to {out}; use it with --policy {out}")


memory_app = typer.Typer(help="Inspect, build and prune success-memory files.", no_args_is_help=True)
app.add_typer(memory_app, name="memory")


def _load_memory_as_saved(path: Path):
    """Open a memory with the hashes its own meta.json names (inspection only, no policy needed)."""
    from embodia.memory import MemoryFileError, SuccessMemory
    try:
        meta = json.loads((path / "meta.json").read_text())
        return SuccessMemory.load(path, encoder_id=meta["encoder_id"], normalizer_hash=meta["normalizer_hash"])
    except (OSError, ValueError, KeyError) as e:
        _fail(f"cannot read memory {path}: {e}")
    except MemoryFileError as e:
        _fail(str(e))


@memory_app.command("stats")
def memory_stats(path: Path = typer.Argument(..., help="memory directory")):
    """Entries, episodes, merges, evictions and deletions per namespace."""
    mem = _load_memory_as_saved(path)
    stats = mem.stats()
    if not stats:
        console.print(f"{path}: empty")
    for ns, row in stats.items():
        Console(soft_wrap=True).print(f"[bold]{ns}[/bold]: " + ", ".join(
            f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))


@memory_app.command("ingest")
def memory_ingest(path: Path = typer.Argument(..., help="memory directory (created or extended)"),
                  data: Path = typer.Option(..., "--data", help="recorded dataset"),
                  policy: str = typer.Option(DEFAULT_POLICY, "--policy", "-p",
                                             help="the VLA whose normalizer defines keys and chunks"),
                  device: Optional[str] = typer.Option(None, "--device", help="namespace's device "
                                                       "(default: the one each episode names)")):
    """Build (or extend) a memory from the successful episodes of a recorded dataset."""
    _check_inputs(locals())
    from embodia.agent.recording.dataset import DatasetError, LocalDataset
    from embodia.agent.loop.factory import make_policy
    from embodia.agent.evaluation.memory_eval import device_namespace
    try:
        ds = LocalDataset(data)
    except (DatasetError, FileNotFoundError) as e:
        _fail(str(e))

    class _Body:   # make_policy needs only the embodiment to bind a checkpoint
        embodiment, capabilities = ds.embodiment, frozenset()
    pol = make_policy(policy, _Body())
    added = episodes = 0
    steered = None
    for i, ep in enumerate(ds.episodes):
        if not ep.get("success"):
            continue
        e = ds.episode(i)
        uri = device or (e.get("meta") or {}).get("device") or "unknown:task"
        steered = _with_memory(pol, str(path), uri) if steered is None else steered
        steered.namespace = device_namespace(uri, ds.embodiment)
        added += steered.remember(e["state"], e["action"], episode_id=i)
        episodes += 1
    if steered is None:
        _fail(f"{data} has no successful episodes to ingest")
    steered.memory.save(path)
    console.print(f"ingested {episodes} successful episodes ({added} entries added or merged) into {path}")


@memory_app.command("prune")
def memory_prune(path: Path = typer.Argument(..., help="memory directory"),
                 namespace: Optional[str] = typer.Option(None, "--namespace", help="only this namespace"),
                 drop: bool = typer.Option(False, "--drop", help="drop the whole namespace"),
                 max_fail_ratio: float = typer.Option(0.5, "--max-fail-ratio"),
                 min_fail: int = typer.Option(1, "--min-fail")):
    """Delete entries that steered failures (or a whole namespace with --drop)."""
    _check_inputs(locals())
    mem = _load_memory_as_saved(path)
    if drop:
        if not namespace:
            _fail("--drop needs --namespace")
        if not mem.drop_namespace(namespace):
            _fail(f"no namespace {namespace!r} in {path}; it has {mem.namespaces()}")
        console.print(f"dropped namespace {namespace}")
    else:
        n = mem.prune(namespace, max_fail_ratio=max_fail_ratio, min_fail=min_fail)
        console.print(f"deleted {n} entries that steered failures")
    mem.save(path)


@app.command()
def serve(policy: str = PolicyOpt, device: str = typer.Option(DEFAULT_DEVICE, "--device", "-d", help="device URI "
                                                             "naming the body served (opened for its embodiment)"),
          port: int = typer.Option(8000, "--port"),
          host: str = typer.Option("127.0.0.1", "--host", help="0.0.0.0 serves other machines (set a key)"),
          api_key_env: Optional[str] = typer.Option(None, "--api-key-env", help="require the key in this "
                                                    "environment variable (default: $EMBODIA_API_KEY if set)"),
          memory: Optional[str] = typer.Option(None, "--memory", help="success memory directory: steer with it "
                                               "and add every reported success (saved at once and at exit)"),
          max_message_mb: float = typer.Option(16.0, "--max-message-mb", help="larger messages close the "
                                               "connection"),
          threads: int = typer.Option(2, "--threads", min=1, help="torch CPU threads (calls run one at a time)"),
          size: Optional[str] = SizeOpt):
    """Serve a robot policy over websocket + msgpack (openpi's protocol; `openpi-client` works as is)."""
    _check_inputs(locals())
    import asyncio
    import logging
    import os
    import signal

    from rich.logging import RichHandler

    from embodia.policies.ws_policy import DEFAULT_KEY_ENV

    from embodia.agent.serving.server import PolicyServer
    key = os.environ.get(api_key_env or DEFAULT_KEY_ENV)
    if api_key_env and not key:
        _fail(f"--api-key-env {api_key_env}: ${api_key_env} is not set")
    log = logging.getLogger("embodia")     # connections and refusals; websockets' own chatter stays off
    if not log.handlers:
        log.addHandler(RichHandler(console=console, show_path=False))
    log.setLevel(logging.INFO)
    with _session(device, policy, None, size, threads=threads) as (dev, pol):
        steered = _with_memory(pol, memory, device) if memory else None
        try:
            from embodia.agent.serving.server import MEMORY_TOKEN_ENV
            server = PolicyServer(pol, dev.embodiment, spec=policy, api_key=key, memory_path=memory,
                                  memory_token=os.environ.get(MEMORY_TOKEN_ENV),
                                  memory=steered.memory if steered else None,
                                  namespace=steered.namespace if steered else None,
                                  max_message_bytes=int(max_message_mb * 2 ** 20))
        except ValueError as e:
            _fail(str(e))

        def ready(s):
            # a service manager's stop (SIGTERM) stops as cleanly as Ctrl-C
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, s.stop)
            console.print(f"serving {policy} for {dev.embodiment.name} on ws://{host}:{s.port} "
                          f"(health: http://{host}:{s.port}/healthz; "
                          + ("API key required" if key else "no API key")
                          + ("" if not memory else "; memory writes " + ("need the memory token" if s.memory_token
                             else f"off (set ${MEMORY_TOKEN_ENV} to accept outcomes)"))
                          + "); Ctrl-C stops", soft_wrap=True)
        try:
            asyncio.run(server.serve(host, port, on_ready=ready))
        except OSError as e:
            _fail(f"cannot serve on {host}:{port}: {e}")
        except KeyboardInterrupt:
            pass
    console.print("stopped" + (f"; memory saved to {memory}" if memory else ""), soft_wrap=True)


@app.command()
def devices():
    """List device schemes and the targets each can open."""
    from embodia.devices import available
    t = Table(title="devices")
    t.add_column("scheme")
    t.add_column("targets / usage")
    for row in available():
        detail = "\n".join(row["targets"]) or row["description"]
        if row["error"]:
            detail += f"\n[yellow]unavailable: {row['error']}[/yellow]"
        t.add_row(row["scheme"] + ":", detail)
    Console().print(t)


def main():
    app()


if __name__ == "__main__":
    main()
