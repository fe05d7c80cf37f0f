"""A suite's tasks on Ray actors (`embodia eval --device sim:metaworld/mt50 --workers N`).

Whole tasks are the unit: each actor loads the policy once (one torch thread), takes the next task
when it finishes one, and sends back the task's row; rows come back in suite order, with the same
outcomes as one process (seeds are per task, not per worker). Ray starts locally with N CPUs, or
joins ``address``.

>>> from embodia.agent.evaluation.suite import run_suite          # doctest: +SKIP
>>> rep = run_suite("mt10", "expert", episodes=5, pool=ray_suite_pool(2))   # doctest: +SKIP
"""
from __future__ import annotations

from typing import Optional

from embodia.agent.evaluation.suite import TaskRunner
from embodia.agent.fleet.runner import FleetError, ray_session
from embodia.agent.fleet.threads import one_thread


class _Actor(TaskRunner):
    def __init__(self, policy_spec: str):
        one_thread()
        super().__init__(policy_spec)


def ray_suite_pool(workers: int, address: Optional[str] = None):
    """A ``pool`` for `run_suite`: the tasks over ``workers`` Ray actors."""
    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")

    def run(names, uris, policy_spec, episodes, seed, on_task) -> dict:
        done: dict[str, dict] = {}
        with ray_session(workers, address) as (ray, _where):
            Actor = ray.remote(num_cpus=1)(_Actor)
            actors = [Actor.remote(policy_spec) for _ in range(min(workers, len(names)))]
            todo = list(zip(names, uris))
            running = {}

            def give(actor):
                task, uri = todo.pop(0)
                running[actor.run.remote(task, uri, episodes, seed)] = (actor, task)
            for actor in actors:
                if todo:
                    give(actor)
            while running:
                ready, _ = ray.wait(list(running), num_returns=1)
                actor, task = running.pop(ready[0])
                try:
                    name, row = ray.get(ready[0])
                except ray.exceptions.RayError as e:
                    raise FleetError(f"task {task} failed on a Ray worker: {str(e).splitlines()[0]}") from None
                done[name] = row
                if on_task:
                    on_task(name, row)
                if todo:
                    give(actor)
            for actor in actors:
                ray.kill(actor)
        return {t: done[t] for t in names}
    return run
