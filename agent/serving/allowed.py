"""What an MCP client may name beyond its own session (`embodia mcp`'s allow-lists): policies,
checkpoints, memories, and the files and web pages a device URI opens.

Every check compares parsed, normalized values (a URL's scheme, host, port, path and query; a
path resolved), never string prefixes: with ``remote:ws://10.0.0.5:8000`` allowed as a prefix,
``remote:ws://10.0.0.5:8000@attacker:9/`` passed, the allowed address became the URL's user-info,
and the operator's API key went to the attacker. A URL with user-info is refused outright.

>>> server_url("ws://LAB-PC:80") == server_url("ws://lab-pc/")
True
>>> server_url("ws://10.0.0.5:8000@attacker:9/")
Traceback (most recent call last):
ValueError: 'ws://10.0.0.5:8000@attacker:9/' carries user-info (the part before '@'): refused
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple
from urllib.parse import unquote, urlsplit

from embodia.agent.recording.files import resolved_inside

_PORTS = {"ws": 80, "wss": 443, "http": 80, "https": 443}


class AccessError(ValueError):
    """A client named something the operator's allow-lists do not hold (one line, saying which list)."""


class Url(NamedTuple):
    scheme: str
    host: str
    port: int
    path: str
    query: str


def server_url(url: str, schemes=("ws", "wss")) -> Url:
    """``url`` parsed and normalized: scheme and host lower-cased, the default port filled in, an
    empty path read as "/". ValueError (one line) for another scheme, a URL with user-info, a
    fragment, no host, or characters a browser reads otherwise than Python (backslash, white space,
    control characters)."""
    if any(c == "\\" or c.isspace() or not c.isprintable() for c in url):
        raise ValueError(f"{url!r}: backslashes, spaces and control characters are not allowed in a URL")
    try:
        u = urlsplit(url)
        port = u.port
    except ValueError as e:
        raise ValueError(f"{url!r} is not a URL: {e}") from None
    scheme = u.scheme.lower()
    if scheme not in schemes:
        raise ValueError(f"{url!r}: expected a {' or '.join(s + '://' for s in schemes)} URL")
    if "@" in u.netloc:
        raise ValueError(f"{url!r} carries user-info (the part before '@'): refused")
    if not u.hostname or u.fragment:
        raise ValueError(f"{url!r}: expected {scheme}://host[:port][/path] (no fragment)")
    return Url(scheme, u.hostname.lower().rstrip("."), port or _PORTS[scheme], u.path or "/", u.query)


def origin(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of an http(s) URL, normalized as `server_url` does."""
    return server_url(url, ("http", "https"))[:3]


@dataclass(frozen=True)
class Allowed:
    """What a client may name beyond devices, as the operator set it.

    ``policies``: ``remote:ws://host:port[/path]`` (that server: the operator's $EMBODIA_API_KEY goes
    to it; any other ``scheme:ws://...`` spec alike), ``remote:`` (any server, sent without the key),
    ``openai:`` or another bare scheme (any spec of it), or one exact spec. ``checkpoint_roots``:
    checkpoints and replays; ``memory_roots``: memory folders; ``file_roots``: files a device opens
    (``browser:`` pages by path or file://, ``mujoco:`` scenes); ``page_origins``: the http(s) origins
    ``browser:`` pages may come from. Everything else a client names is refused: the server would
    otherwise connect to any address, read any file or create folders anywhere it can write. Paths
    are compared resolved (``..`` and symlinks followed). ValueError at construction for a server or
    origin entry that does not parse."""
    policies: tuple[str, ...] = ()
    checkpoint_roots: tuple[str, ...] = ()
    memory_roots: tuple[str, ...] = ()
    file_roots: tuple[str, ...] = ()
    page_origins: tuple[str, ...] = ()

    def __post_init__(self):
        for p in self.policies:
            if _server(p) or p.startswith("remote:") and p != "remote:":
                _parsed(lambda: server_url(p.partition(":")[2]), "--allow-policy")
        for o in self.page_origins:
            _parsed(lambda: origin(o), "--allow-page-origin")

    def policy(self, spec: str) -> bool:
        """Raise AccessError unless a client may run ``spec``; whether the operator's credential may go
        with it: False for a ``remote:`` server only ``remote:`` allows (one the operator did not name),
        True otherwise (``openai:`` talks to the operator's own $OPENAI_BASE_URL)."""
        from embodia.agent.loop.factory import BUNDLED
        if spec.startswith("remote:") or _server(spec):
            return self._remote(spec)
        if spec in ("expert", "random") or spec in BUNDLED or spec in self.policies:
            return True
        scheme = spec.partition(":")[0] + ":"
        if ":" in spec and scheme in self.policies:
            return True
        if spec.startswith("openai:"):
            raise AccessError(f"policy {spec!r} is not allowed on this server (the operator allows more with "
                              f"--allow-policy)")
        path = spec.split(":", 1)[1].partition("#")[0] if spec.startswith(("actions:", "replay:", "hf:")) else spec
        if resolved_inside(path, self.checkpoint_roots) is None:
            raise AccessError(f"policy {spec!r}: {path} is not under the server's --checkpoint-root folders "
                              f"({', '.join(self.checkpoint_roots) or 'none set'})")
        return True

    def _remote(self, spec: str) -> bool:
        """A policy server (``remote:<url>``, or any ``scheme:ws://...``): named by the operator (True:
        the key goes to it), allowed by the bare scheme (False: sent no key), or refused."""
        scheme, _, rest = spec.partition(":")
        try:
            url = server_url(rest)
        except ValueError as e:
            raise AccessError(f"policy {spec!r}: {e}") from None
        named = {server_url(p.partition(":")[2]) for p in self.policies
                 if p.partition(":")[0] == scheme and p.partition(":")[2]}
        if url in named:
            return True
        if f"{scheme}:" in self.policies:
            return False          # any server, but the operator's key only goes where it was meant to
        raise AccessError(f"policy {spec!r} is not allowed on this server (the operator allows more with "
                          f"--allow-policy)")

    def memory(self, path: str) -> str:
        """The resolved memory folder a client named; AccessError outside the roots or not a folder."""
        p = resolved_inside(path, self.memory_roots)
        if p is None:
            raise AccessError(f"memory {path}: not under the server's --memory-root folders "
                              f"({', '.join(self.memory_roots) or 'none set'})")
        if p.exists() and not p.is_dir():
            raise AccessError(f"memory {path}: exists and is not a folder")
        return str(p)

    def device(self, uri: str) -> None:
        """Raise AccessError unless the files and pages ``uri`` opens are allowed (``browser:`` and
        ``mujoco:``; other schemes open no file or page a client names)."""
        from embodia.devices.registry import parse_uri
        scheme, target, _ = parse_uri(uri)
        if scheme == "mujoco":
            self._file(target, "scene")
        elif scheme == "browser":
            self._page(target)

    def _file(self, path: str, what: str) -> None:
        if resolved_inside(path, self.file_roots) is None:
            raise AccessError(f"{what} {path}: not under the server's --file-root folders "
                              f"({', '.join(self.file_roots) or 'none set'})")

    def _page(self, target: str) -> None:
        """The page a ``browser:`` target names: about:blank, a file under the file roots, or an
        http(s) URL of an allowed origin; nothing else (view-source:, data:, javascript:, ...)."""
        if target in ("", "about:blank"):
            return
        if "://" not in target and not target.lower().startswith(("about:", "data:")):
            return self._file(target, "page")          # a local path, as the browser device reads it
        scheme = target.partition(":")[0].lower()
        if scheme == "file":
            u = urlsplit(target)
            if u.netloc not in ("", "localhost"):
                raise AccessError(f"page {target!r}: a file:// URL on another host")
            return self._file(unquote(u.path), "page")
        if scheme in ("http", "https"):
            try:
                where = origin(target)
            except ValueError as e:
                raise AccessError(f"page {e}") from None
            if where in {origin(o) for o in self.page_origins}:
                return
            raise AccessError(f"page {target!r}: its origin is not one the server allows "
                              f"(--allow-page-origin: {', '.join(self.page_origins) or 'none set'})")
        raise AccessError(f"page {target!r}: browser pages are about:blank, files under --file-root or "
                          f"http(s) pages of an --allow-page-origin")


def _server(spec: str) -> bool:
    """Whether a spec names a policy server by URL after its scheme (``lerobot:ws://...`` and the like)."""
    return spec.partition(":")[2].lower().startswith(("ws://", "wss://"))


def _parsed(parse, option: str):
    try:
        return parse()
    except ValueError as e:
        raise ValueError(f"{option}: {e}") from None
