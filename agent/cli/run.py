"""`embodia run` and `embodia record`: episodes of a policy on a device, recorded."""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from embodia.agent.cli.app import (
    AllowOpt,
    ApiKeyEnvOpt,
    AsyncOpt,
    BaseUrlOpt,
    CoordsOpt,
    DeviceOpt,
    DtypeOpt,
    ExecHorizonOpt,
    MemorySettingsOpt,
    PolicyOpt,
    RayAddressOpt,
    SamplesOpt,
    SeedOpt,
    SelectOpt,
    ShiftOpt,
    SizeOpt,
    SmoothOpt,
    TorchDeviceOpt,
    WorkersOpt,
    app,
    check_inputs,
    console,
    fail,
    gate,
    lost_exit,
    policy_with_settings_and_horizon,
    opened_as,
    policy_options,
    print_unit,
    progress,
    recorder,
    run_meta,
    session,
    slug,
)
from embodia.agent.cli.validate import one_line

SuccessOpt = typer.Option(None, "--success", help="who says an episode succeeded: oracle (the simulator's "
                          "check; default where there is one) | ask (a person, on the terminal) | "
                          "check:<predicate> (e.g. 'element(role=Switch, text=\"Wi-Fi\", checked=true)' or "
                          "'state.puck_y > 0.3') | judge:openai:<model> (with --base-url) | judge:hf:<path> (a local "
                          "model folder) | learned (embodia-tiny's learned success detector, offline; "
                          "learned:<checkpoint> for another). Only verified labels "
                          "teach --memory")


TakeoverOpt = typer.Option(False, "--takeover", help="a person may take the device over between two decisions, "
                           "act, and hand it back: keys t (take over), r (resume), d (done: the task is "
                           "finished); scripts: kill -USR1 <pid> (take over / hand back), -USR2 (done). On "
                           "desktop: the person's clicks and keys are recorded; their steps are flagged as "
                           "interventions, and a verified success (--success) teaches --memory")


def takeover_for(enabled: bool, device, async_exec: bool):
    """(the `Takeover` for ``--takeover``, listening to the terminal's keys and to SIGUSR1/SIGUSR2,
    and the function that puts the signal handlers back); (None, None) without it. Said once how."""
    if not enabled:
        return None, None
    if async_exec:
        fail("--takeover hands the device over between decisions of the synchronous loop; drop --async")
    from embodia.agent.loop.takeover import Takeover
    takeover = Takeover(keys=True, say=lambda m: console.print(f"[cyan]{escape(m)}[/cyan]", soft_wrap=True))
    restore = takeover.listen_to_signals()
    how = "press t to take over" if takeover.keys.active else "no terminal: send SIGUSR1 to take over"
    console.print(f"[cyan]takeover: {how} (pid {os.getpid()}), then r to hand back or d when done[/cyan]")
    return takeover, restore


def labeler_for(spec: Optional[str], device, base_url: Optional[str] = None, api_key_env: str = "OPENAI_API_KEY"):
    """The episode labeler for ``--success`` (`embodia.agent.loop.success`), or a one-line error."""
    from embodia.agent.loop.success import SuccessSourceError, make_labeler
    try:
        return make_labeler(spec, device, base_url=base_url, api_key_env=api_key_env,
                            say=lambda m: console.print(f"[yellow]{escape(m)}[/yellow]", soft_wrap=True))
    except SuccessSourceError as e:
        fail(str(e))


def label_note(r) -> str:
    """How an episode's success was labelled, in words (empty when no label was made)."""
    lab = r.info.get("success_label")
    if not lab:
        return ""
    conf = f", confidence {lab['confidence']:.2f}" if lab.get("confidence") is not None else ""
    state = "verified" if lab["verified"] else "unverified, not stored"     # (a memory keeps it pending)
    said = {True: "success", False: "failure", None: "unknown"}[lab["success"]]
    reason = f": {one_line(lab['reason'])}" if lab.get("reason") else ""      # a judge's reason costs one line at most
    return f"; label {said} by {one_line(lab['source'], 80)} ({state}{conf}{reason})"


def episodes_with_progress(device, policy, *, episodes: int, seed: int, label: str, writer=None, **run_kw):
    """``run_episodes`` with a progress bar showing the running success rate; errors and Ctrl-C
    are said as they happen."""
    from embodia.agent.evaluation.evaluate import device_lost, run_episodes
    from embodia.agent.loop.asynchronous import check_async, run_async
    smooth = run_kw.pop("smooth", "none")
    if smooth != "none" and not run_kw.get("async_exec"):
        fail("--smooth applies with --async")
    if run_kw.pop("async_exec", False):
        try:
            check_async(device, policy, smooth)
        except ValueError as e:
            fail(f"--async: {e}")
        run_kw.pop("gate", None)        # continuous bodies only (check_async): no GUI action to gate
        run_kw.update(loop=run_async, smooth=smooth)
    from embodia.agent.loop.success import AskLabeler, JudgeLabeler
    lab = run_kw.get("labeler")
    asking = isinstance(lab, AskLabeler) and lab.interactive
    if isinstance(lab, JudgeLabeler):
        run_kw["on_step"] = lab.on_step        # it keeps a few frames in between for the judge
    done: list = []
    with progress() as bar:
        if asking:
            bar.stop()      # a live bar would redraw over the question and the person's answer
        task = bar.add_task(label, total=episodes, status="")

        def on_episode(i, r):
            done.append(r)
            verified = [x for x in done if x.success is not None]
            ok = sum(bool(x.success) for x in verified)
            bar.update(task, advance=1, status=f"success {ok}/{len(verified)}" if verified else "")
            if r.error:
                console.print(f"[yellow]episode {i} (seed {r.seed}) ended with an error:[/yellow] {r.error}")
            if device_lost(r) and i + 1 < episodes:
                console.print(f"[yellow]the device is gone: stopped after {i + 1} of {episodes} episodes"
                              + (", all saved" if writer else "") + "[/yellow]")
            if r.interrupted:
                console.print("[yellow]interrupted: the episode was closed"
                              + (" and saved" if writer else "") + "[/yellow]")
        return run_episodes(device, policy, episodes=episodes, seed=seed, on_episode=on_episode,
                            recorder=writer, **run_kw)


def fleet_with_progress(device, policy, spec, *, episodes: int, seed: int, writer, meta: dict, label: str,
                        workers: int, address: Optional[str], memory: Optional[str] = None):
    """``fleet_episodes`` with a progress bar; dead and lost units are said as they happen."""
    from embodia.agent.fleet.dispatch import fleet_episodes
    from embodia.agent.fleet.runner import FleetError
    from embodia.agent.loop.factory import PolicyError
    wins: list[bool] = []
    with progress() as bar:
        task = bar.add_task(f"{label} ({workers} workers)", total=episodes, status="starting workers")

        def on_unit(fleet, ev):
            if ev.kind == "done":
                wins.extend(bool(r["success"]) for r in ev.result or ())
                bar.update(task, advance=len(ev.unit.seeds), status=f"success {sum(wins)}/{len(wins)}")
            elif ev.kind == "lost":
                bar.update(task, advance=len(ev.unit.seeds))
            print_unit(fleet, ev)
        try:
            return fleet_episodes(device, policy, spec, episodes=episodes, seed=seed, recorder=writer, meta=meta,
                                  workers=workers, address=address, on_unit=on_unit, memory=memory)
        except (FleetError, PolicyError) as e:
            fail(str(e))


def async_note(a: Optional[dict]) -> str:
    """One episode's asynchronous execution in words (empty for a synchronous one)."""
    if not a:
        return ""
    rate = f"{a['achieved_hz']:.1f} of {a['target_hz']:.1f} Hz" if a["achieved_hz"] else "rate n/a"
    delay = a["delay_steps"].get("mean")
    return (f"; async ({a['smooth']}): {rate}, {a['stall_steps']} stalls"
            + (f", delay {delay:.1f} steps" if delay is not None else ""))


def steered_by(policy, memory: Optional[str], device_uri: str, device):
    """The policy wrapped with the memory at ``memory`` (None: the policy itself), or a one-line error."""
    if not memory:
        return policy
    from embodia.agent.loop.factory import PolicyError, with_memory
    try:
        steered = with_memory(policy, memory, device_uri, device)
    except PolicyError as e:
        fail(str(e))
    stale = getattr(steered.memory, "lock_taken_over", None)
    if stale:
        from embodia.memory.lock import describe
        console.print(f"[yellow]{escape(memory)}: took over the writer lock of {escape(describe(stale))}, "
                      "which is no longer running[/yellow]", soft_wrap=True)
    return steered


@app.command()
def run(device: str = DeviceOpt, policy: str = PolicyOpt, shift: Optional[str] = ShiftOpt,
        episodes: int = typer.Option(1, "--episodes", "-n", min=1), seed: int = SeedOpt,
        record: Optional[Path] = typer.Option(None, "--record", help="dataset directory "
                                              "(default: runs/<device>)"),
        no_record: bool = typer.Option(False, "--no-record", help="do not record"),
        max_steps: Optional[int] = typer.Option(None, "--max-steps", min=1), size: Optional[str] = SizeOpt,
        memory: Optional[str] = typer.Option(None, "--memory", help="success memory directory: steer with it "
                                             "and add every verified success (saved at the end)"),
        memory_settings: Optional[str] = MemorySettingsOpt, exec_horizon: Optional[int] = ExecHorizonOpt,
        allow: Optional[list[str]] = AllowOpt, base_url: Optional[str] = BaseUrlOpt,
        api_key_env: str = ApiKeyEnvOpt, coords: str = CoordsOpt, samples: int = SamplesOpt,
        select: str = SelectOpt, async_exec: bool = AsyncOpt, smooth: str = SmoothOpt,
        success: Optional[str] = SuccessOpt, takeover: bool = TakeoverOpt,
        torch_device: Optional[str] = TorchDeviceOpt, dtype: Optional[str] = DtypeOpt,
        instruction: Optional[str] = typer.Option(None, "--instruction", "-i", help="the task in words "
                                                  "(default: the device's own, for simulated tasks)")):
    """Run a policy on a device, recording every episode (LeRobotDataset v3 layout; GUI devices:
    step log + screenshots + JSON actions)."""
    check_inputs(locals())
    out = None if no_record else (record or Path("runs") / slug(device))
    spec = policy_with_settings_and_horizon(policy, memory_settings, memory, exec_horizon)
    uri = opened_as(device, policy, record=True)
    with memory_held(memory), session(uri, spec, shift, size, **policy_options(base_url, api_key_env, coords,
                                                                                    samples, select)) as (dev, pol):
        writer = recorder(out, dev)
        labeler = labeler_for(success, dev, base_url, api_key_env)
        steered = steered_by(pol, memory, device, dev)
        person, restore_signals = takeover_for(takeover, dev, async_exec)
        try:
            results = episodes_with_progress(
                dev, steered, episodes=episodes, seed=seed, label="run", writer=writer, labeler=labeler,
                episode_meta=run_meta(uri, shift, size, policy), max_steps=max_steps, instruction=instruction,
                async_exec=async_exec, smooth=smooth, gate=gate(allow, dev) if dev.embodiment.is_gui else None,
                **({"takeover": person} if person is not None else {}))
        finally:
            if person is not None:
                restore_signals()
            if steered is not pol:
                steered.memory.save(memory)
    for r in results:
        outcome = {True: "[green]success[/green]", False: "[red]failure[/red]", None: "done"}[r.success]
        console.print(f"seed {r.seed}: {outcome} in {r.steps} steps; {r.instruction!r}; "
                      f"policy {r.timing['policy_s'] * 1e3:.0f} ms, device {r.timing['device_s'] * 1e3:.0f} ms"
                      + async_note(r.timing.get("async")) + escape(label_note(r))
                      + (f"; {r.info['person_steps']} steps by a person" if r.info.get("person_steps") else "")
                      + (f"; recorded as episode {r.episode_index} in {out}" if writer else ""))
    pending_note(memory)
    if any(r.error for r in results):
        raise typer.Exit(1)


@contextmanager
def memory_held(memory: Optional[str]):
    """The writer lock of the memory folder (`embodia.memory.lock`), taken before the device and
    the policy open, so a second run on the folder is refused at once, naming the first (exit 2)."""
    if not memory:
        yield
        return
    from embodia.memory import MemoryBusy
    from embodia.memory.lock import LockRefused
    from embodia.memory.persist import writer
    try:
        w = writer(Path(memory))
    except (MemoryBusy, LockRefused) as e:       # another writer; a lock that is no file of ours, a read-only folder
        fail(str(e))
    try:
        yield
    finally:
        w.release()


def pending_note(memory: Optional[str]) -> None:
    """Say how many unverified episodes wait beside the memory, and how to decide them."""
    if not memory:
        return
    from embodia.memory.pending import pending
    n = len(pending(memory))
    if n:
        console.print(f"{n} unverified episode(s) kept in {memory}/pending, not steering: confirm or reject them "
                      f"with `embodia memory review {memory}`", soft_wrap=True)


@app.command()
def record(out: Path = typer.Option(..., "--out", "-o", help="dataset directory (created or appended to)"),
           device: str = DeviceOpt, policy: str = PolicyOpt, shift: Optional[str] = ShiftOpt,
           episodes: int = typer.Option(20, "--episodes", "-n", min=1), seed: int = SeedOpt,
           only_success: bool = typer.Option(False, "--only-success", help="keep recording until EPISODES "
                                             "episodes succeeded (at most 10x as many tries; failures are "
                                             "recorded too, marked as such)"),
           size: Optional[str] = SizeOpt, workers: Optional[int] = WorkersOpt,
           ray_address: Optional[str] = RayAddressOpt, success: Optional[str] = SuccessOpt,
           jobs: int = typer.Option(1, "--jobs", min=1, help="a suite: record N tasks at a time in worker "
                                    "processes (the datasets are those of one process)"),
           torch_device: Optional[str] = TorchDeviceOpt, dtype: Optional[str] = DtypeOpt):
    """Record episodes into a LeRobotDataset v3 directory."""
    check_inputs(locals())
    from embodia.agent.evaluation.evaluate import summarize
    from embodia.agent.evaluation.suite import parse_suite
    if parse_suite(device):   # sim:metaworld/mt50 and friends: one dataset per task under --out
        if workers:
            fail(f"{device} is a suite: --workers applies to one task for now (--jobs records tasks in parallel)")
        return record_suite_cli(out, device, policy, shift, size, episodes, seed, only_success, jobs)
    if jobs > 1:
        fail("--jobs records the tasks of a suite in parallel; for one task use --workers")
    fleet = None
    if only_success and workers:
        fail("--only-success records in this process; it does not combine with --workers")
    if success and workers:
        fail("--success labels episodes in this process; it does not combine with --workers")
    with session(device, policy, shift, size) as (dev, pol):
        writer = recorder(out, dev)
        meta = run_meta(device, shift, size, policy)
        if workers:
            from embodia.agent.fleet.runner import WorkerSpec
            results, fleet = fleet_with_progress(dev, pol, WorkerSpec(device, policy, shift, size), episodes=episodes,
                                                 seed=seed, writer=writer, meta=meta, label="record",
                                                 workers=workers, address=ray_address)
        else:
            results = episodes_with_progress(dev, pol, episodes=10 * episodes if only_success else episodes,
                                             seed=seed, writer=writer, episode_meta=meta, label="record",
                                             labeler=labeler_for(success, dev),
                                             until_successes=episodes if only_success else None)
        writer.close()
    rep = summarize(results)
    rate = f"{rep['success_rate']:.2f}" if rep["success_rate"] is not None else "n/a"
    console.print(f"recorded {len(results)} episodes ({rep['successes']} successful, rate {rate}) to {out}")
    lost_exit({"fleet": fleet})


def record_suite_cli(out, device, policy, shift, size, episodes, seed, only_success, jobs: int = 1) -> None:
    """`embodia record` on a suite: every task into ``out/<task>/``, a line per task."""
    from embodia.agent.evaluation.suite import parse_suite, record_suite
    name, query = parse_suite(device)
    query.update({k: v for k, v in (("shift", shift), ("size", size)) if v})

    def on_task(task, row):
        again = f", {row['resumed_from']} of them from a stopped run" if row.get("resumed_from") else ""
        console.print(f"{task}: recorded {row['recorded']} episodes ({row['successes']} successful{again}) "
                      f"to {out / task}")
    try:
        rep = record_suite(name, policy, out, episodes=episodes, seed=seed, only_success=only_success,
                           query=query, on_task=on_task, jobs=jobs)
    except (ValueError, ImportError, FileNotFoundError, OSError) as e:
        fail(str(e))
    console.print(f"recorded {rep['recorded']} episodes ({rep['successes']} successful) of "
                  f"{len(rep['tasks'])} tasks under {out}")
