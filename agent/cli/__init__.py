"""The ``embodia`` command: parses options and calls the runtime; no work of its own.

One module per verb (``run`` holds run and record; ``evaluate``, ``replay``, ``train``, ``memory``,
``serve``, ``devices``; ``recipes`` holds the sub-commands of ``train``), each registering on the
Typer ``app`` of ``app``. May import anything in ``embodia``; nothing imports it.
"""
# the verbs register in this order, the order `embodia --help` lists them
from embodia.agent.cli import run, evaluate, offline, replay, train, recipes, memory, serve, mcp, view, devices  # noqa: F401, I001
from embodia.agent.cli.app import app


def main():
    import signal

    from embodia.agent.loop.core import stop_as_ctrl_c
    # a stop from `kill`, `timeout` or a service manager ends as Ctrl-C does: the episode in flight is
    # saved as interrupted and every device closes (a browser or an Xvfb it started goes with it)
    signal.signal(signal.SIGTERM, stop_as_ctrl_c)
    app()


__all__ = ["app", "main"]
