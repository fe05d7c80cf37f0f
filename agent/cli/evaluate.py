"""`embodia eval`: success rate with a Wilson interval, splits, timing; memory-on vs memory-off streams."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from embodia.agent.cli.app import (
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
    lost_exit,
    policy_with_settings_and_horizon,
    opened_as,
    policy_options,
    print_report,
    print_unit,
    progress,
    recorder,
    run_meta,
    session,
)
from embodia.agent.cli.run import (
    SuccessOpt,
    episodes_with_progress,
    fleet_with_progress,
    labeler_for,
    pending_note,
    steered_by,
)


@app.command("eval")
def eval_(device: str = DeviceOpt, policy: str = PolicyOpt, shift: Optional[str] = ShiftOpt,
          episodes: int = typer.Option(100, "--episodes", "-n", min=1, help="episodes (per stream with --streams)"),
          seed: int = SeedOpt,
          json_out: Optional[Path] = typer.Option(None, "--json", help="write the report here (a suite "
                                                 "keeps finished tasks in <file>.partial: run again to "
                                                 "resume)"),
          record: Optional[Path] = typer.Option(None, "--record", help="also record to this dataset"),
          memory: str = typer.Option("off", "--memory", help="off | online (a fresh memory per stream, "
                                     "compared with off on paired seeds) | PATH (a persistent memory file)"),
          memory_settings: Optional[str] = MemorySettingsOpt,
          exec_horizon: Optional[int] = ExecHorizonOpt,
          streams: int = typer.Option(1, "--streams", min=1, help="independent streams with --memory online"),
          ablations: str = typer.Option("", "--ablations", help="extra memory arms, comma-separated: "
                                        "no-filter,no-mode-selection,fixed-confidence,replay,seed-recall-only,seed-recall,noise-recall (robots); "
                                        "no-values (screens)"),
          plot: Optional[Path] = typer.Option(None, "--plot", help="learning-curve PNG (--memory online)"),
          jobs: int = typer.Option(1, "--jobs", min=1, help="worker processes for --memory online (streams "
                                   "run in parallel, one torch thread each; same results as one process) "
                                   "and for suites (tasks in parallel)"),
          size: Optional[str] = SizeOpt, base_url: Optional[str] = BaseUrlOpt,
          api_key_env: str = ApiKeyEnvOpt, coords: str = CoordsOpt, samples: int = SamplesOpt,
          select: str = SelectOpt, workers: Optional[int] = WorkersOpt, ray_address: Optional[str] = RayAddressOpt,
          async_exec: bool = AsyncOpt, smooth: str = SmoothOpt, success: Optional[str] = SuccessOpt,
          torch_device: Optional[str] = TorchDeviceOpt, dtype: Optional[str] = DtypeOpt):
    """Evaluate a policy: success rate with a 95% Wilson interval, splits, timing; JSON report."""
    check_inputs(locals())
    from embodia.agent.evaluation.evaluate import write_json
    from embodia.agent.fleet.dispatch import check_execution
    try:
        check_execution(async_exec=async_exec, memory_online=memory == "online", workers=workers, jobs=jobs)
    except ValueError as e:
        fail(str(e))
    if success and (memory == "online" or workers):
        fail("--success labels episodes in this process; it does not combine with --memory online or --workers")
    opts = policy_options(base_url, api_key_env, coords, samples, select)
    header = dict(device=device, policy=policy, shift=shift)
    policy = policy_with_settings_and_horizon(policy, memory_settings, memory, exec_horizon)
    from embodia.agent.evaluation.suite import parse_suite
    suite = parse_suite(device)
    if suite:   # sim:metaworld/mt50, sim:miniwob/experts and friends: every task of the suite
        if memory == "online" or async_exec or record:
            from embodia.agent.evaluation.suite import family, suite_tasks
            one = family(suite[0]).prefix + suite_tasks(suite[0])[0]
            fail(f"{device} is a suite: --memory online, --async and --record apply to one task "
                 f"(e.g. {one}) for now; --memory PATH steers the whole suite")
        _eval_suite(device, policy, shift=shift, size=size, episodes=episodes, seed=seed, jobs=jobs,
                    memory=memory, workers=workers, ray_address=ray_address, json_out=json_out)
        return
    uri = opened_as(device, policy, record=bool(record))   # rendered and observed as the policy reads it
    if uri != device:     # the report names what ran, so its URI reopens the same cell; and what was typed
        header.update(device=uri, device_typed=device)
    with session(uri, policy, shift, size, **opts) as (dev, pol):
        say_threads(pol)
        if memory == "online":
            rep = memory_report(dev, pol, uri, ablations=[a for a in ablations.split(",") if a], plot=plot,
                                episodes=episodes, seed=seed, streams=streams, jobs=jobs, policy_spec=policy,
                                shift=shift, size=size, workers=workers, ray_address=ray_address)
            rep.update(header)
        elif workers:
            from embodia.agent.fleet.runner import WorkerSpec, fleet_summary
            results, fleet = fleet_with_progress(
                dev, pol, WorkerSpec(uri, policy, shift, size, opts), episodes=episodes, seed=seed,
                writer=recorder(record, dev), meta=run_meta(uri, shift, size, policy), label="eval",
                workers=workers, address=ray_address, memory=None if memory == "off" else memory)
            rep = fleet_summary(results, fleet, seed=seed, embodiment=dev.embodiment.name, **header)
            print_report(rep)
        else:
            rep = _eval_here(dev, pol, header, uri, size=size, episodes=episodes, seed=seed, memory=memory,
                             record=record, success=success, base_url=base_url, api_key_env=api_key_env, async_exec=async_exec,
                             smooth=smooth)
    if memory_settings is not None:
        rep["memory_settings"] = memory_settings
    if exec_horizon is not None:
        rep["exec_horizon"] = exec_horizon
    if json_out:
        write_json(rep, json_out)
        console.print(f"report written to {json_out}")
    lost_exit(rep)


def _eval_suite(device: str, policy: str, *, shift, size, episodes: int, seed: int, jobs: int, memory: str,
                workers, ray_address, json_out: Optional[Path]) -> None:
    """Every task of a suite (its report kept in <json>.partial as tasks finish, so a rerun resumes)."""
    from embodia.agent.evaluation.evaluate import write_json
    partial = Path(f"{json_out}.partial") if json_out else None
    rep = suite_eval(device, policy, shift=shift, size=size, episodes=episodes, seed=seed, jobs=jobs,
                     memory=None if memory == "off" else memory, workers=workers, ray_address=ray_address,
                     resume=partial)
    if json_out:
        write_json(rep, json_out)
        partial.unlink(missing_ok=True)
        console.print(f"report written to {json_out}")


def _eval_here(dev, pol, header: dict, uri: str, *, size, episodes: int, seed: int, memory: str, record, success,
               base_url, api_key_env: str, async_exec: bool, smooth: str) -> dict:
    """Episodes in this process (labelled by ``--success``, steered by a memory PATH); the report.
    ``uri`` is the device as opened, what a recorded episode keeps for replay."""
    from embodia.agent.evaluation.evaluate import async_summary, summarize
    device, shift, policy = header["device"], header["shift"], header["policy"]
    labeler = labeler_for(success, dev, base_url, api_key_env)
    steered = steered_by(pol, None if memory == "off" else memory, device, dev)
    try:
        results = episodes_with_progress(dev, steered, episodes=episodes, seed=seed, label="eval",
                                         labeler=labeler,
                                         writer=recorder(record, dev), async_exec=async_exec, smooth=smooth,
                                         episode_meta=run_meta(uri, shift, size, policy))
    finally:
        if steered is not pol:
            steered.memory.save(memory)
    rep = summarize(results, seed=seed, embodiment=dev.embodiment.name, **header)
    print_report(rep)
    if rep["unverified_episodes"]:
        console.print(f"{rep['unverified_episodes']} of {rep['episodes']} episodes unverified (--success "
                      f"{success}): not counted in the rate, not stored in a memory")
        pending_note(None if memory == "off" else memory)
    if async_exec:
        rep["async"] = async_summary(results, smooth)
        print_async(rep["async"])
    return rep


def suite_eval(device: str, policy: str, *, shift, size, episodes: int, seed: int, jobs: int = 1,
               memory: Optional[str] = None, workers: Optional[int] = None, ray_address: Optional[str] = None,
               resume: Optional[Path] = None) -> dict:
    """Every task of a suite with a progress bar; the per-task, per-group and overall table printed.
    ``resume``: the partial file that keeps finished tasks (``--json F`` -> ``F.partial``): the same
    command after a stop goes on from there."""
    from embodia.agent.evaluation.suite import not_run, parse_suite, run_suite, suite_table, suite_tasks
    name, query = parse_suite(device)
    query.update({k: v for k, v in (("shift", shift), ("size", size)) if v})
    with progress() as bar:
        runnable = len(suite_tasks(name)) - len(not_run(name, policy))    # the rest are listed, not run
        task = bar.add_task(f"eval {name}", total=runnable * episodes, status="")
        wins: list[bool] = []

        def on_episode(t, i, r):
            wins.append(bool(r.success))
            bar.update(task, advance=1, status=f"{t}: {sum(wins)}/{len(wins)}")

        def on_task(t, row):   # with --jobs/--workers: whole tasks come back from the workers
            if jobs > 1 or workers:
                wins.extend(row["outcomes"])
                bar.update(task, advance=row["episodes"], status=f"{t}: {sum(wins)}/{len(wins)}")

        def on_resumed(tasks):
            bar.update(task, advance=len(tasks) * episodes)
            console.print(f"resuming: {len(tasks)} of {len(suite_tasks(name))} tasks were finished by a stopped "
                          f"run ({resume}); the rest run now")
        try:
            pool = None
            if workers:
                from embodia.agent.fleet.suite_pool import ray_suite_pool
                pool = ray_suite_pool(workers, ray_address)
            rep = run_suite(name, policy, episodes=episodes, seed=seed, query=query, on_episode=on_episode,
                            on_task=on_task, jobs=jobs, memory=memory, pool=pool, resume=resume,
                            on_resumed=on_resumed)
        except (ValueError, ImportError, FileNotFoundError, RuntimeError) as e:   # FleetError is a RuntimeError
            fail(str(e))
    console.print(suite_table(rep), markup=False, highlight=False)
    t = rep["timing"]
    console.print(f"{sum(r['episodes'] for r in rep['tasks'].values())} episodes in {t['wall_s']:.1f} s "
                  f"({t['episodes_per_s']:.2f} episodes/s); render: {rep['protocol']['device_query']}")
    return rep


def say_threads(pol) -> None:
    """One line naming the torch threads a bundled-size model runs with, and why that many; one
    naming the torch device and dtype it runs on."""
    import sys
    if "torch" not in sys.modules:      # no model loaded (scripted expert, ...): nothing to say
        return
    from embodia.agent.loop.factory import policy_threads
    from embodia.policies.base import as_policy
    pol = as_policy(pol)
    if pol.loop_threads:
        import torch
        console.print(f"torch threads: {torch.get_num_threads()} ({policy_threads()[1]})")
    if pol.placement is not None:      # it holds a model
        console.print(f"torch device: {pol.placement.describe()} ({placement_source()})")


def placement_source() -> str:
    """Where the process's torch device comes from, in words."""
    import os

    from embodia.policies.placement import TORCH_DEVICE_ENV
    return f"${TORCH_DEVICE_ENV} / --torch-device" if os.environ.get(TORCH_DEVICE_ENV) else \
        "auto: CUDA when present, else the CPU"


def print_async(a: dict) -> None:
    console.print(f"async ({a['smooth']}): {100 * (a['rate_frac_mean'] or 0):.0f}% of the control rate held, "
                  f"{a['stall_steps']} stall steps"
                  + (f", delay {a['delay_steps_mean']:.1f} steps" if a["delay_steps_mean"] is not None else ""))


def memory_report(dev, pol, device_uri: str, *, ablations: list[str], plot: Optional[Path], episodes: int,
                  seed: int, streams: int, **where) -> dict:
    """Memory-on vs memory-off streams with a progress bar; the arms and comparisons printed."""
    from embodia.agent.evaluation.memory_eval import learning_curve_png
    from embodia.agent.fleet.dispatch import memory_arms, memory_streams
    from embodia.agent.fleet.runner import FleetError
    try:
        arms = memory_arms(dev, pol, ablations, jobs=where["jobs"], workers=where["workers"])
    except ValueError as e:
        fail(str(e))
    with progress() as bar:
        task = bar.add_task("memory eval", total=len(arms) * streams * episodes, status="")
        wins: dict = {}

        def on_episode(arm, s, i, r):
            wins.setdefault(arm, []).append(bool(r.success))
            bar.update(task, advance=1, status=f"{arm}: {sum(wins[arm])}/{len(wins[arm])}")

        def on_stream(arm, s, res, cached):
            wins.setdefault(arm, []).extend(res["outcomes"])
            bar.update(task, advance=len(res["outcomes"]), status=f"{arm}: {sum(wins[arm])}/{len(wins[arm])}")
        try:
            rep = memory_streams(dev, pol, device_uri, arms=arms, streams=streams, episodes=episodes, seed=seed,
                                 on_episode=on_episode, on_stream=on_stream, on_unit=print_unit, **where)
        except FleetError as e:
            fail(str(e))
    print_memory_report(rep)
    if plot:
        learning_curve_png(rep, plot)
        rep["plot"] = str(plot)
    return rep


def print_memory_report(rep: dict) -> None:
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
