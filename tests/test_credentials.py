"""The credentials `embodia mcp --transport http` and `embodia serve` require beyond loopback, read
through the real CLI (issue 56): a token file is a regular file of its owner's alone, read boundedly
(``--token-file /dev/zero`` ran out of memory), and a credential is at least 16 characters; anything
else is one line and exit 2 before the server starts."""
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from test_mcp import _env, _free_port, _http

REPO = Path(__file__).resolve().parents[1]
GOOD = "f3a9c2d4e5b60718293a4b5c6d7e8f90"


def _limited():
    # a reader that slurps /dev/zero fails here in seconds instead of taking the machine's memory
    resource.setrlimit(resource.RLIMIT_AS, (2 * 2 ** 30, 2 * 2 ** 30))


def refused(args, env=None) -> str:
    try:
        out = subprocess.run([sys.executable, "-m", "embodia", *args], env={**_env(), **(env or {})}, cwd=str(REPO),
                             capture_output=True, text=True, timeout=60, preexec_fn=_limited)
    except subprocess.TimeoutExpired:
        pytest.fail(f"embodia {' '.join(args)} started serving instead of refusing the credential")
    lines = (out.stdout + out.stderr).strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and "Traceback" not in out.stderr, out
    return " ".join(lines[0].split())


def token_file(tmp_path: Path, text: str = GOOD, mode: int = 0o600) -> Path:
    f = tmp_path / "token"
    f.write_text(text + "\n")
    f.chmod(mode)
    return f


def _fifo(tmp_path):
    os.mkfifo(tmp_path / "fifo", 0o600)
    return tmp_path / "fifo"


def _symlink(tmp_path):
    (tmp_path / "link").symlink_to(token_file(tmp_path))
    return tmp_path / "link"


BAD_FILES = {
    "/dev/zero": (lambda t: Path("/dev/zero"), "is not a regular file"),
    "a fifo": (_fifo, "is not a regular file"),
    "a symlink": (_symlink, "symbolic link"),
    "world-readable": (lambda t: token_file(t, mode=0o644), "chmod 600"),
    "group-readable": (lambda t: token_file(t, mode=0o640), "chmod 600"),
    "one character": (lambda t: token_file(t, "x"), "at least 16"),
    "over 4 KiB": (lambda t: token_file(t, "y" * 10_000), "over 4096 bytes"),
}


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_a_bad_token_file_is_refused_in_one_line(tmp_path, name):
    make, words = BAD_FILES[name]
    line = refused(["mcp", "--transport", "http", "--port", str(_free_port()), "--token-file", str(make(tmp_path)),
                    "--record", str(tmp_path / "rec")])
    assert words in line, line


def test_a_short_credential_is_refused_wherever_it_comes_from(tmp_path):
    line = refused(["mcp", "--transport", "http", "--host", "0.0.0.0", "--allow-host", "lab-pc",
                    "--port", str(_free_port())], env={"EMBODIA_MCP_TOKEN": "x"})
    assert "$EMBODIA_MCP_TOKEN is 1 characters long" in line and "at least 16" in line, line
    line = refused(["serve", "--host", "0.0.0.0", "--port", str(_free_port())], env={"EMBODIA_API_KEY": "s3cret"})
    assert "$EMBODIA_API_KEY" in line and "at least 16" in line, line
    line = refused(["serve", "--host", "0.0.0.0", "--port", str(_free_port()), "--api-key-file",
                    str(token_file(tmp_path, mode=0o604))])
    assert "chmod 600" in line, line


def test_a_good_token_file_guards_the_server(tmp_path):
    import httpx2
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    hdrs = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    with _http(tmp_path, "--token-file", str(token_file(tmp_path))) as url:
        assert httpx2.post(url, json=init, headers=hdrs, timeout=10).status_code == 401
        r = httpx2.post(url, json=init, headers={**hdrs, "Authorization": f"Bearer {GOOD}"}, timeout=10)
        assert r.status_code == 200, r.text
