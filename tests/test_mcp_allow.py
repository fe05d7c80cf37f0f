"""What an MCP client may name, driven by the MCP SDK's own client over stdio: policy servers compared
parsed (never as string prefixes; the operator's key goes only to the servers it names) and the
files, pages and sizes a device URI opens."""
import json
import socket
import threading
from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp")
from mcp import Client  # noqa: E402
from test_mcp import _json, _stdio  # noqa: E402

from embodia.devices.cdp import find_chromium  # noqa: E402

KEY = "s3cret-operator-key"


class Listener:
    """A TCP server on loopback that keeps the first bytes of each connection (a would-be policy
    server or web page: what a client's request carried there) and closes it."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.requests: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                data = b""
                while b"\r\n\r\n" not in data:
                    try:
                        chunk = conn.recv(4096)
                    except OSError:
                        break
                    if not chunk:
                        break
                    data += chunk
                self.requests.append(data)

    def close(self):
        self.sock.close()


@pytest.fixture
def listeners():
    made = [Listener(), Listener()]
    yield made
    for ln in made:
        ln.close()


def _env_with_key(params):
    params.env["EMBODIA_API_KEY"] = KEY
    return params


def _one_line_error(result, *words) -> str:
    text = result.content[0].text
    assert result.is_error and "\n" not in text, text
    for w in words:
        assert w in text, text
    return text


def test_an_allowed_policy_server_is_compared_parsed_and_the_key_goes_only_to_it(tmp_path, listeners):
    named, other = listeners
    params = _env_with_key(_stdio(tmp_path / "rec", "--allow-policy", "remote:ws://10.0.0.5:8000",
                                  "--allow-policy", f"remote:ws://127.0.0.1:{named.port}", "--allow-policy", "remote:"))

    async def main():
        async with Client(params) as c:
            _json(await c.call_tool("open_device", {"uri": "sim:twogap-push"}))
            # the allowed address as user-info: once a prefix match that sent the key to the listener
            r = await c.call_tool("run_task", {"policy": f"remote:ws://10.0.0.5:8000@127.0.0.1:{other.port}/"})
            _one_line_error(r, "user-info")
            # the named server, written another way (a trailing slash): it gets the key
            r = await c.call_tool("run_task", {"policy": f"remote:ws://127.0.0.1:{named.port}/"})
            assert r.is_error and "not allowed" not in r.content[0].text     # tried: the listener is no server
            # `remote:` allows any other server, but the operator's key is not sent there
            r = await c.call_tool("run_task", {"policy": f"remote:ws://127.0.0.1:{other.port}"})
            assert r.is_error and "not allowed" not in r.content[0].text
    anyio.run(main)
    assert len(named.requests) == 1 and f"Api-Key {KEY}".encode() in named.requests[0], named.requests
    assert len(other.requests) == 1 and b"GET" in other.requests[0], other.requests
    assert KEY.encode() not in other.requests[0] and b"Authorization" not in other.requests[0]


def test_an_allow_policy_entry_with_user_info_is_refused_at_start(tmp_path):
    import subprocess
    p = _stdio(tmp_path / "rec", "--allow-policy", "remote:ws://a@10.0.0.5:8000")
    out = subprocess.run([p.command, *p.args], env=p.env, cwd=p.cwd, capture_output=True, text=True, timeout=60)
    lines = (out.stdout + out.stderr).strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and "user-info" in lines[0], out


def test_device_uris_go_through_the_allow_lists(tmp_path, listeners):
    web = listeners[0]
    pages, secret = tmp_path / "pages", tmp_path / "secret.txt"
    pages.mkdir()
    secret.write_text("root:$6$not-for-clients")
    (pages / "link.html").symlink_to(secret)
    params = _stdio(tmp_path / "rec", "--file-root", str(pages), "--max-pixels", "10000", "--max-steps", "50")

    async def main():
        async with Client(params) as c:
            for uri in (f"browser:file://{secret}", f"browser:{secret}", f"browser:file://{pages}/../secret.txt",
                        f"browser:file://{pages / 'link.html'}", f"mujoco:{secret}"):
                _one_line_error(await c.call_tool("open_device", {"uri": uri}), "--file-root")
            for uri in (f"browser:http://127.0.0.1:{web.port}/", f"browser:view-source:file://{secret}",
                        "browser:data:text/html,<a href=x>x</a>"):
                _one_line_error(await c.call_tool("open_device", {"uri": uri}), "--allow-page-origin")
            r = await c.call_tool("open_device", {"uri": "sim:twogap-push?size=128x128"})
            _one_line_error(r, "this server allows 10000")                 # --max-pixels, asked in the URI
            r = await c.call_tool("open_device", {"uri": "gui-sim:settings?max_steps=100000"})
            _one_line_error(r, "max_steps", "1..50")
            _json(await c.call_tool("open_device", {"uri": "sim:twogap-push?size=96x96"}))    # under the caps
    anyio.run(main)
    assert web.requests == []                      # nothing was fetched from the local service


@pytest.mark.skipif(find_chromium() is None, reason="chromium is not installed (apt-get install chromium)")
def test_a_page_under_the_file_root_opens(tmp_path):
    pages = tmp_path / "pages"
    pages.mkdir()
    (pages / "p.html").write_text("<html><body><button>Go</button></body></html>")

    async def main():
        async with Client(_stdio(tmp_path / "rec", "--file-root", str(pages))) as c:
            _json(await c.call_tool("open_device", {"uri": f"browser:file://{pages / 'p.html'}?settle=0"}))
            facts = json.loads((await c.call_tool("observe", {})).content[-1].text)
            assert any("Go" in str(e.get("text") or e.get("name")) for e in facts["ui_tree"]), facts["ui_tree"]
            _json(await c.call_tool("close_device", {}))
    anyio.run(main)
    assert Path(tmp_path / "rec").exists()


def test_only_an_unnamed_policy_server_goes_without_the_operators_key():
    """The key is withheld from a server only the bare ``remote:`` allows; ``openai:`` keeps its own
    (the endpoint is the operator's $OPENAI_BASE_URL), and a named server gets it however it is written."""
    from embodia.agent.serving.allowed import AccessError, Allowed
    allowed = Allowed(("remote:ws://lab-pc:8000", "remote:", "openai:"))
    assert allowed.policy("openai:qwen2.5-vl-7b") and allowed.policy("expert")
    assert allowed.policy("remote:ws://LAB-PC:8000/") and not allowed.policy("remote:ws://lab-pc:8001")
    with pytest.raises(AccessError, match="user-info"):
        allowed.policy("remote:ws://lab-pc:8000@elsewhere:8000")
    with pytest.raises(AccessError, match="not allowed"):
        Allowed(("remote:ws://lab-pc:8000",)).policy("remote:ws://lab-pc:8001")
    # any scheme naming a server by URL (e.g. lerobot:ws://...) is held to the same rules
    other = Allowed(("lerobot:ws://lab-pc:8000", "lerobot:"))
    assert other.policy("lerobot:ws://lab-pc:8000/") and not other.policy("lerobot:ws://elsewhere:8000")
    with pytest.raises(AccessError, match="user-info"):
        other.policy("lerobot:ws://lab-pc:8000@elsewhere:8000")
