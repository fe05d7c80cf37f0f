"""Viewing: `embodia view`, a self-contained HTML report of what an agent did.

Owns: turning a GUI recording (step log + screenshots), a LeRobot v3 dataset (robot episodes with
videos) or an eval report (JSON) into a folder with ``index.html`` and its assets that a browser
opens with no network: episodes as scrubbable step sequences or videos, every GUI action drawn on
its screen, the gate's decisions, the policy's reply, memory retrievals, success and its source,
timing; eval reports as plots (success per split with Wilson intervals, memory learning curves).
May import: ``embodia.agent.recording`` (the readers), ``embodia.agent.loop.safety`` (which element
an action targets), ``embodia.devices``; nothing that runs a device or a policy.
"""
from embodia.agent.viewing.report import ViewError, build_view

__all__ = ["build_view", "ViewError"]
