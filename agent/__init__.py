"""embodia.agent: the runtime on top of devices, policies and memory.

Subpackages, each a thing a user does (imports point down this list, never up):

- ``recording``: datasets on disk: LeRobotDataset v3 (write, read) and the GUI step log.
- ``loop``: one episode on one device with one policy (sync and async), the safety gate, replay,
  and the factory that turns ``--device``/``--policy`` strings into objects.
- ``evaluation``: many episodes, statistics (Wilson, Newcombe), the success-memory evaluation.
- ``training``: the VLA and the GUI head, and the command that rebuilds ``embodia-tiny``.
- ``serving``: the policy server (openpi's websocket protocol).
- ``fleet``: evaluation and recording fanned out over Ray actors.
- ``cli``: the ``embodia`` command, a thin layer that parses options and calls the above.
"""
if __name__ != "embodia.agent":     # the folder is the source of embodia.agent, never a package of its own
    raise ModuleNotFoundError(f"no module named {__name__!r}: import embodia.agent", name=__name__)
