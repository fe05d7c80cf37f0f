"""Where a command's episodes run: in this process, in local worker processes (``--jobs``) or on Ray
actors (``--workers``). The CLI names the choice; the rules and the three paths live here.

>>> check_execution(async_exec=True, memory_online=True)                      # doctest: +SKIP
ValueError: --async runs the episodes in this process: ...
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Optional

from embodia.agent.evaluation.memory_eval import (
    ARMS,
    SCREEN_ARMS,
    arm_factory,
    build_report,
    evaluate_memory,
    run_streams_parallel,
    screen_arm_factory,
)
from embodia.agent.fleet.memory_host import memory_load_args
from embodia.agent.fleet.runner import Fleet, WorkerSpec, check_device, complete_streams
from embodia.agent.loop.factory import device_namespace, with_memory
from embodia.policies.base import as_policy


def check_execution(*, async_exec: bool = False, memory_online: bool = False, workers: Optional[int] = None,
                    jobs: int = 1) -> None:
    """Refuse option combinations that cannot run together, before anything starts."""
    if async_exec and (memory_online or workers):
        raise ValueError("--async runs the episodes in this process: it does not combine with --memory online "
                         "or --workers")
    if workers and jobs > 1:
        raise ValueError("--jobs and --workers both fan out; use one (--workers: Ray actors, --jobs: local "
                         "processes)")


@contextmanager
def open_fleet(device, spec: WorkerSpec, workers: int, address: Optional[str], on_unit: Callable,
               record: bool = False, **kw):
    """A running Fleet of copies of ``device`` (checked first: simulators only); ``on_unit(fleet,
    event)`` sees every finished, died or lost unit. Raises FleetError."""
    check_device(device, record=record)
    with Fleet(spec, workers, address, on_unit=on_unit, **kw) as fleet:
        yield fleet


def fleet_episodes(device, policy, spec: WorkerSpec, *, episodes: int, seed: int, recorder, meta: dict,
                   workers: int, address: Optional[str], on_unit: Callable, memory: Optional[str] = None):
    """Episodes over Ray workers: (results in seed order, the report's "fleet" section). With
    ``memory`` every worker steers with that one memory file (checked against ``policy`` here)."""
    kw = {}
    if memory:
        from embodia.memory.persist import let_go
        let_go(with_memory(policy, memory, spec.device).memory)   # the file fits this policy and is free, or a
                                                                # clear error now; the memory's actor writes it
        kw = dict(memory=memory, memory_load=memory_load_args(policy))
    with open_fleet(device, spec, workers, address, on_unit, record=recorder is not None, **kw) as fleet:
        results = fleet.episodes(episodes=episodes, seed=seed, record=recorder, meta=meta)
    return results, fleet.report()


def memory_arms(device, policy, ablations: list[str], *, jobs: int = 1, workers: Optional[int] = None) -> list[str]:
    """The arms of a memory evaluation ("off", "online" and the known ablations), or ValueError."""
    gui = device.embodiment.is_gui
    known = SCREEN_ARMS if gui else ARMS
    unknown = [a for a in ablations if a not in known or known[a] is None]
    if unknown:
        raise ValueError(f"unknown ablation(s) {unknown}; known: {[a for a in known if known[a] is not None]}")
    if gui and (workers or jobs > 1):
        raise ValueError("--memory online on a GUI device runs its streams in this process (no --jobs or "
                         "--workers yet)")
    if not gui and not as_policy(policy).steerable:
        raise ValueError("--memory online needs a flow policy the memory can steer (embodia-tiny, a checkpoint, "
                         "lerobot:<dir>, or a remote: server that announces steering)")
    return ["off", "online"] + [a for a in ablations if a not in ("off", "online")]


def memory_streams(device, policy, device_uri: str, *, arms: list[str], streams: int, episodes: int, seed: int,
                   policy_spec: str, shift: Optional[str] = None, size: Optional[str] = None, jobs: int = 1,
                   workers: Optional[int] = None, ray_address: Optional[str] = None,
                   on_episode: Optional[Callable] = None, on_stream: Optional[Callable] = None,
                   on_unit: Optional[Callable] = None) -> dict:
    """Memory-on vs memory-off streams (and ablations) on Ray workers, local processes or here; the
    report of ``build_report``. Progress: ``on_episode(arm, stream, i, result)`` here, else
    ``on_stream(arm, stream, result, cached)`` per finished stream."""
    if workers:
        spec = WorkerSpec(device_uri, policy_spec, shift, size)

        def unit_done(fleet, ev):
            if ev.kind == "done" and ev.result and on_stream:
                on_stream(ev.unit.arm, ev.unit.stream, ev.result, False)
            if on_unit:
                on_unit(fleet, ev)
        with open_fleet(device, spec, workers, ray_address, unit_done) as fleet:
            runs = fleet.streams(arms=arms, streams=streams, episodes=episodes, seed=seed)
        runs, kept = complete_streams(runs, arms, streams)     # streams every arm finished
        rep = (build_report(runs, arms=arms, streams=len(kept), episodes=episodes, seed=seed) if kept
               else {"streams": 0, "episodes_per_stream": episodes, "seed": seed, "arms": {}, "comparisons": {}})
        rep.update(streams_kept=kept, fleet=fleet.report())
        return rep
    if jobs > 1:
        runs = run_streams_parallel(device_uri, policy_spec, arms=arms, streams=streams, episodes=episodes,
                                    seed=seed, shift=shift, size=size, jobs=jobs, on_stream=on_stream)
        return build_report(runs, arms=arms, streams=streams, episodes=episodes, seed=seed)
    make = (screen_arm_factory(policy, device) if device.embodiment.is_gui
            else arm_factory(policy, device_namespace(device_uri, policy.embodiment)))
    return evaluate_memory(device, make, arms=arms, streams=streams, episodes=episodes, seed=seed,
                           on_episode=on_episode)
