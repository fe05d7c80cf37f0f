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

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="One agent runtime for many bodies: MuJoCo robots, desktops and phones.")
console = Console(stderr=True)

DEFAULT_DEVICE = "sim:twogap-push"
DEFAULT_POLICY = "embodia-tiny"

DeviceOpt = typer.Option(DEFAULT_DEVICE, "--device", "-d", help="device URI (see `embodia devices`)")
PolicyOpt = typer.Option(DEFAULT_POLICY, "--policy", "-p",
                         help="embodia-tiny | path/to/checkpoint | expert | random | replay:<dataset>[#episode] "
                              "| actions:<file.json> (GUI actions, in order) | openai:<model> (a VLM behind an "
                              "OpenAI-compatible endpoint, see --base-url)")
BaseUrlOpt = typer.Option(None, "--base-url", help="openai:<model>: the endpoint's base URL, e.g. "
                          "http://127.0.0.1:8000/v1 (default: $OPENAI_BASE_URL)")
ApiKeyEnvOpt = typer.Option("OPENAI_API_KEY", "--api-key-env", help="openai:<model>: the environment variable "
                            "holding the API key (unset: no key is sent, as a local vLLM wants)")
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


def _fail(msg: str, code: int = 2):
    console.print(f"[red]error:[/red] {msg}")
    raise typer.Exit(code)


@contextmanager
def _session(device_uri: str, policy_spec: str, shift: Optional[str], size: Optional[str], **policy_kw):
    """Open device and policy with clear errors, and always close the device."""
    from .factory import PolicyError, make_device, make_policy
    from devices import DeviceLost
    try:
        device = make_device(device_uri, shift=shift, size=size)
    except (ValueError, FileNotFoundError, ImportError, DeviceLost) as e:
        _fail(f"cannot open device {device_uri!r}: {e}")
    try:
        try:
            policy = make_policy(policy_spec, device, **policy_kw)
        except (PolicyError, ValueError, FileNotFoundError) as e:
            _fail(f"cannot load policy {policy_spec!r}: {e}")
        yield device, policy
    finally:
        device.close()


def _writer(out: Optional[Path], device):
    if out is None:
        return None
    from .gui_record import GuiRecorder
    from .recording import DatasetWriter
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

    from .safety import console_confirm, default_gate
    try:
        return default_gate(device, allow or (), confirm=console_confirm if sys.stdin.isatty() else None)
    except ValueError as e:
        _fail(str(e))


def _episodes(device, policy, *, episodes, seed, writer, meta, label, max_steps=None, gate=None,
              instruction=None):
    """Run `episodes` episodes with a progress bar showing the running success rate."""
    from .evaluate import summarize
    from .loop import run_episode
    results = []
    with _progress() as bar:
        task = bar.add_task(label, total=episodes, status="")
        for i in range(episodes):
            r = run_episode(device, policy, seed=seed + i, recorder=writer, episode_meta=meta,
                            instruction=instruction,
                            max_steps=max_steps, gate=gate)
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
        select: str = SelectOpt,
        instruction: Optional[str] = typer.Option(None, "--instruction", "-i", help="the task in words "
                                                  "(default: the device's own, for simulated tasks)")):
    """Run a policy on a device, recording every episode (LeRobotDataset v3 layout; GUI devices:
    step log + screenshots + JSON actions)."""
    out = None if no_record else (record or Path("runs") / _slug(device))
    with _session(device, policy, shift, size, base_url=base_url, api_key_env=api_key_env,
                  coords=coords, samples=samples, select=select) as (dev, pol):
        writer = _writer(out, dev)
        steered = _with_memory(pol, memory, device) if memory else None
        meta = _meta(device, shift, size, policy)
        try:
            results, _ = _episodes(dev, steered or pol, episodes=episodes, seed=seed, writer=writer, meta=meta,
                                   label="run", max_steps=max_steps, instruction=instruction,
                                   gate=_gate(allow, dev) if dev.embodiment.is_gui else None)
        finally:
            if steered is not None:
                steered.memory.save(memory)
    for r in results:
        outcome = {True: "[green]success[/green]", False: "[red]failure[/red]", None: "done"}[r.success]
        console.print(f"seed {r.seed}: {outcome} in {r.steps} steps; {r.instruction!r}; "
                      f"policy {r.timing['policy_s'] * 1e3:.0f} ms, device {r.timing['device_s'] * 1e3:.0f} ms"
                      + (f"; recorded as episode {r.episode_index} in {out}" if writer else ""))
    if any(r.error for r in results):
        raise typer.Exit(1)


@app.command()
def record(out: Path = typer.Option(..., "--out", "-o", help="dataset directory (created or appended to)"),
           device: str = DeviceOpt, policy: str = PolicyOpt, shift: Optional[str] = ShiftOpt,
           episodes: int = typer.Option(20, "--episodes", "-n", min=1), seed: int = SeedOpt,
           only_success: bool = typer.Option(False, "--only-success",
                                             help="keep recording until EPISODES successes"),
           size: Optional[str] = SizeOpt):
    """Record episodes into a LeRobotDataset v3 directory."""
    with _session(device, policy, shift, size) as (dev, pol):
        writer = _writer(out, dev)
        meta = _meta(device, shift, size, policy)
        results, summarize = _episodes(dev, pol, episodes=episodes, seed=seed, writer=writer,
                                       meta=meta, label="record")
        writer.close()
    rep = summarize(results)
    rate = f"{rep['success_rate']:.2f}" if rep["success_rate"] is not None else "n/a"
    console.print(f"recorded {len(results)} episodes ({rep['successes']} successful, rate {rate}) to {out}")


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
                                        "no-filter,no-mode-selection,fixed-confidence,replay"),
          plot: Optional[Path] = typer.Option(None, "--plot", help="learning-curve PNG (--memory online)"),
          jobs: int = typer.Option(1, "--jobs", min=1, help="worker processes for --memory online (streams "
                                   "run in parallel, one torch thread each; same results as one process)"),
          size: Optional[str] = SizeOpt, base_url: Optional[str] = BaseUrlOpt,
          api_key_env: str = ApiKeyEnvOpt, coords: str = CoordsOpt, samples: int = SamplesOpt,
          select: str = SelectOpt):
    """Evaluate a policy: success rate with a 95% Wilson interval, splits, timing; JSON report."""
    from .evaluate import write_json
    with _session(device, policy, shift, size, base_url=base_url, api_key_env=api_key_env,
                  coords=coords, samples=samples, select=select) as (dev, pol):
        if memory == "online":
            rep = _eval_memory_streams(dev, pol, device, episodes=episodes, seed=seed, streams=streams,
                                       ablations=[a for a in ablations.split(",") if a], plot=plot,
                                       jobs=jobs, spec=dict(policy=policy, shift=shift, size=size))
            rep.update(device=device, policy=policy, shift=shift)
        else:
            writer = _writer(record, dev)
            steered = _with_memory(pol, memory, device) if memory != "off" else None
            meta = _meta(device, shift, size, policy)
            try:
                results, summarize = _episodes(dev, steered or pol, episodes=episodes, seed=seed,
                                               writer=writer, meta=meta, label="eval")
            finally:
                if steered is not None:
                    steered.memory.save(memory)
            rep = summarize(results, device=device, policy=policy, shift=shift, seed=seed,
                            embodiment=dev.embodiment.name)
            _print_report(rep)
    if json_out:
        write_json(rep, json_out)
        console.print(f"report written to {json_out}")


def _with_memory(pol, path: str, device_uri: str):
    """Wrap a VLA policy with a persistent success memory stored at `path`."""
    from memory import MemoryFileError, MemoryMismatch, SuccessMemory
    from policies.steered import KEY_ENCODER, SteeredPolicy, memory_for, normalizer_hash

    from .memory_eval import device_namespace
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
    return SteeredPolicy(pol, mem, namespace=device_namespace(device_uri, pol.embodiment))


def _eval_memory_streams(dev, pol, device_uri, *, episodes, seed, streams, ablations, plot, jobs=1, spec=None):
    from .memory_eval import (ARMS, arm_factory, build_report, device_namespace, evaluate_memory,
                              learning_curve_png, run_streams_parallel)
    unknown = [a for a in ablations if a not in ARMS or ARMS[a] is None]
    if unknown:
        _fail(f"unknown ablation(s) {unknown}; known: {[a for a in ARMS if ARMS[a] is not None]}")
    if not hasattr(pol, "norms"):
        _fail("--memory online needs a VLA policy (embodia-tiny or a checkpoint)")
    arms = ["off", "online"] + [a for a in ablations if a not in ("off", "online")]

    with _progress() as bar:
        task = bar.add_task("memory eval", total=len(arms) * streams * episodes, status="")
        wins: dict = {}

        def tick(arm, s, i, r):
            wins.setdefault(arm, []).append(bool(r.success))
            bar.update(task, advance=1, status=f"{arm}: {sum(wins[arm])}/{len(wins[arm])}")
        if jobs > 1:
            def done(arm, s, res, cached):
                wins.setdefault(arm, []).extend(res["outcomes"])
                bar.update(task, advance=len(res["outcomes"]), status=f"{arm}: {sum(wins[arm])}/{len(wins[arm])}")
            runs = run_streams_parallel(device_uri, spec["policy"], arms=arms, streams=streams, episodes=episodes,
                                        seed=seed, shift=spec["shift"], size=spec["size"], jobs=jobs, on_stream=done)
            rep = build_report(runs, arms=arms, streams=streams, episodes=episodes, seed=seed)
        else:
            make = arm_factory(pol, device_namespace(device_uri, pol.embodiment))
            rep = evaluate_memory(dev, make, arms=arms, streams=streams, episodes=episodes, seed=seed,
                                  on_episode=tick)
    for arm, row in rep["arms"].items():
        lo, hi = row["wilson95"]
        console.print(f"{arm:>18}: {row['success_rate']:.3f} [{lo:.3f}, {hi:.3f}], second half "
                      f"{row['second_half']['success_rate']:.3f}")
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
    from .evaluate import write_json
    from .gui_record import is_gui_recording
    if dataset.is_file() or is_gui_recording(dataset):
        return _replay_gui(dataset, episode, device, stop_on_divergence, record, allow, json_out)
    from .dataset import LocalDataset
    from .replay import replay_episode
    try:
        ds = LocalDataset(dataset)
    except (ValueError, FileNotFoundError) as e:
        _fail(str(e))
    indices = range(ds.num_episodes) if episode == "all" else [int(episode)]
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
    from .evaluate import write_json
    from .gui_record import is_gui_recording, list_gui_episodes
    from .replay import replay_gui
    n = len(list_gui_episodes(source)) if is_gui_recording(source) else 1
    indices = range(n) if episode == "all" else [int(episode)]
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
    from .dataset import DatasetError
    from .train import TrainConfig
    from .train import train as run_training
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
    from memory import MemoryFileError, SuccessMemory
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
    from .dataset import DatasetError, LocalDataset
    from .factory import make_policy
    from .memory_eval import device_namespace
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
def devices():
    """List device schemes and the targets each can open."""
    from devices import available
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
