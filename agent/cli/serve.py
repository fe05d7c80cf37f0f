"""`embodia serve`: a robot policy over websocket + msgpack (openpi's protocol)."""
from __future__ import annotations

from typing import Optional

import typer

from embodia.agent.cli.app import (
    DEFAULT_DEVICE,
    DtypeOpt,
    PolicyOpt,
    SizeOpt,
    TorchDeviceOpt,
    app,
    check_inputs,
    console,
    fail,
    session,
)
from embodia.agent.cli.run import steered_by


@app.command()
def serve(policy: str = PolicyOpt, device: str = typer.Option(DEFAULT_DEVICE, "--device", "-d", help="device URI "
                                                             "naming the body served (opened for its embodiment)"),
          port: int = typer.Option(8000, "--port"),
          host: str = typer.Option("127.0.0.1", "--host", help="0.0.0.0 serves other machines (needs a key)"),
          api_key_env: Optional[str] = typer.Option(None, "--api-key-env", help="require the key in this "
                                                    "environment variable (default: $EMBODIA_API_KEY if set)"),
          api_key_file: Optional[str] = typer.Option(None, "--api-key-file", help="require the key in this file "
                                                     "(its first line) instead"),
          client_tokens_file: Optional[str] = typer.Option(None, "--client-tokens-file", help="clients' own "
                                                           "tokens, 'NAME TOKEN' a line: a client sending its "
                                                           "token in X-Embodia-Client counts as itself, not as "
                                                           "its host range (all of loopback is one)"),
          memory: Optional[str] = typer.Option(None, "--memory", help="success memory directory: steer with it "
                                               "and add every reported success (saved at once and at exit)"),
          max_message_mb: float = typer.Option(16.0, "--max-message-mb", help="larger messages close the "
                                               "connection"),
          threads: int = typer.Option(2, "--threads", min=1, help="torch CPU threads (calls run one at a time)"),
          success: Optional[str] = typer.Option(None, "--success", help="label episodes whose client sends no "
                                                "outcome: check:<predicate> (state channels of the last "
                                                "observation) or judge:<model>; ask and oracle are refused"),
          base_url: Optional[str] = typer.Option(None, "--base-url", help="a judge:openai: endpoint"),
          size: Optional[str] = SizeOpt, torch_device: Optional[str] = TorchDeviceOpt,
          dtype: Optional[str] = DtypeOpt):
    """Serve a robot policy over websocket + msgpack (openpi's protocol; `openpi-client` works as is)."""
    check_inputs(locals())
    import asyncio
    import os
    import signal

    from embodia.agent.serving.access import read_client_tokens, read_secret, require_credential
    from embodia.agent.serving.connections import server_labeler
    from embodia.agent.serving.server import PolicyServer
    from embodia.policies.ws_policy import MEMORY_TOKEN_ENV
    from embodia.policies.ws_policy import DEFAULT_KEY_ENV
    try:
        key = read_secret(api_key_env or DEFAULT_KEY_ENV, api_key_file)
        if api_key_env and not key:
            fail(f"--api-key-env {api_key_env}: ${api_key_env} is not set")
        require_credential(host, key, f"an API key in ${DEFAULT_KEY_ENV}, --api-key-env or --api-key-file")
        clients = read_client_tokens(client_tokens_file) if client_tokens_file else None
    except ValueError as e:
        fail(str(e))
    log_connections()
    with session(device, policy, None, size, threads=threads) as (dev, pol):
        steered = steered_by(pol, memory, device, None)
        try:
            labeler = server_labeler(success, dev.embodiment, base_url=base_url) if success else None
            server = PolicyServer(pol, dev.embodiment, spec=policy, api_key=key, memory_path=memory, labeler=labeler,
                                  memory_token=os.environ.get(MEMORY_TOKEN_ENV),
                                  memory=steered.memory if memory else None,
                                  namespace=steered.namespace if memory else None,
                                  max_message_bytes=int(max_message_mb * 2 ** 20), client_tokens=clients)
        except ValueError as e:
            fail(str(e))

        def ready(s):
            # a service manager's stop (SIGTERM) stops as cleanly as Ctrl-C
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, s.stop)
            console.print(f"serving {policy} for {dev.embodiment.name} on ws://{host}:{s.port} "
                          f"(health: http://{host}:{s.port}/healthz; "
                          + ("API key required" if key else "no API key")
                          + (f"; episodes without an outcome labelled by --success {success}" if success else "")
                          + ("" if not memory else "; memory writes " + ("need the memory token" if s.memory_token
                             else f"off (set ${MEMORY_TOKEN_ENV} to accept outcomes)"))
                          + "); Ctrl-C stops", soft_wrap=True)
        try:
            asyncio.run(server.serve(host, port, on_ready=ready))
        except OSError as e:
            fail(f"cannot serve on {host}:{port}: {e}")
        except KeyboardInterrupt:
            pass
    console.print("stopped" + (f"; memory saved to {memory}" if memory else ""), soft_wrap=True)


def log_connections() -> None:
    """Connections and refusals on the console; websockets' own chatter stays off."""
    import logging

    from rich.logging import RichHandler
    log = logging.getLogger("embodia")
    if not log.handlers:
        log.addHandler(RichHandler(console=console, show_path=False))
    log.setLevel(logging.INFO)
