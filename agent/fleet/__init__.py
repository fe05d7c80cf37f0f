"""Fleet: evaluation, memory streams and recording fanned out over Ray actors (``--workers N``).

Ray is imported only when a fleet starts. May import: ``embodia.agent.evaluation``,
``embodia.agent.loop``, ``embodia.agent.recording`` and everything below them.
"""
