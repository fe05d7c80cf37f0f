"""The ``embodia`` command: parses options and calls the runtime; no work of its own.

May import anything in ``embodia``; nothing imports it.
"""
from embodia.agent.cli.app import app, main

__all__ = ["app", "main"]
