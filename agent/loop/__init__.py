"""The control loop: one episode of one policy on one device.

Owns: the synchronous loop (``run_episode``) and the asynchronous one (``run_async``), which share
their setup, per-step and shutdown code (``core``); the safety gate for GUI actions; replay of
recorded actions; and the factory that turns ``--device`` and ``--policy`` strings into objects.
May import: ``embodia.devices``, ``embodia.policies``, ``embodia.memory``, ``embodia.sim`` (through
device URIs) and ``embodia.agent.recording``.
"""
from embodia.agent.loop.asynchronous import run_async
from embodia.agent.loop.core import EpisodeResult
from embodia.agent.loop.episode import run_episode
from embodia.agent.loop.factory import PolicyError, make_device, make_policy

__all__ = ["EpisodeResult", "run_episode", "run_async", "make_device", "make_policy", "PolicyError"]
