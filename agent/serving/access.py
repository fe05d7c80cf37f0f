"""Who may connect to embodia's servers (`embodia mcp --transport http`, `embodia serve`).

On loopback only this machine's users reach the port. Beyond it anyone on the network does, and
an MCP client there clicks and types on the desktop: so a server that listens beyond loopback
needs a credential, and refuses to start without one (`require_credential`). The credential comes
from an environment variable or a file (`read_secret`), never from the command line (which other
users of the machine can read in the process list), and is compared in constant time. A file must be
the owner's alone (mode 600, no symlink) and a credential at least 16 characters long.

>>> is_loopback("127.0.0.2"), is_loopback("localhost"), is_loopback("0.0.0.0")
(True, True, False)
"""
from __future__ import annotations

import errno
import hmac
import ipaddress
import os
import stat
from pathlib import Path


def is_loopback(host: str) -> bool:
    """True for an address only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False      # a host name: whatever it resolves to, it is meant for others


def is_wildcard(host: str) -> bool:
    """0.0.0.0 or ::: every interface, so no single name clients use is known from the address."""
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_unspecified
    except ValueError:
        return False


MIN_SECRET = 16          # characters: a shorter credential is guessed over the network
MAX_SECRET_FILE = 4096   # bytes read from a credential file at most (--token-file /dev/zero ran out of memory)


def read_secret(env: str | None, file: str | Path | None) -> str | None:
    """The credential in ``file`` (its first line, stripped) or else in ``$env``; None when neither
    gives one. ValueError (one line) for a file that cannot be read, is not a regular file (a
    symlink, a FIFO, a device), is readable or writable by group or others, holds no credential, or
    a credential shorter than 16 characters."""
    if file is not None:
        value = _first_line(Path(file))
        where = f"the credential in {file}"
    else:
        value = os.environ.get(env) if env else None
        value = value.strip() if value and value.strip() else None
        where = f"${env}"
    if value is not None and len(value) < MIN_SECRET:
        raise ValueError(f"{where} is {len(value)} characters long: a credential needs at least {MIN_SECRET} "
                         f"(e.g. openssl rand -hex 16)")
    return value


def _first_line(path: Path) -> str:
    """The first line of a credential file that only its owner may read (see `read_secret`)."""
    return _lines(path)[0].strip()


def _lines(path: Path) -> list[str]:
    """The lines of a credential file that only its owner may read (see `read_secret`); at least one."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        why = "it is a symbolic link (name the file itself)" if e.errno == errno.ELOOP else e.strerror
        raise ValueError(f"cannot read the credential file {path}: {why}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"the credential file {path} is not a regular file")
        data = os.read(fd, MAX_SECRET_FILE + 1)
    except OSError as e:
        raise ValueError(f"cannot read the credential file {path}: {e.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_SECRET_FILE:
        raise ValueError(f"the credential file {path} is over {MAX_SECRET_FILE} bytes: not a credential file")
    try:
        lines = data.decode("utf-8").strip().splitlines()
    except UnicodeDecodeError:
        raise ValueError(f"the credential file {path} is not UTF-8 text") from None
    if not lines or not lines[0].strip():
        raise ValueError(f"the credential file {path} is empty")
    if st.st_mode & 0o077:
        raise ValueError(f"the credential file {path} may be read or written by group or others (mode "
                         f"{stat.S_IMODE(st.st_mode):o}): chmod 600 {path}")
    return lines


CLIENT_HEADER = "X-Embodia-Client"     # a client's own token (`read_client_tokens`), beside the shared key


def read_client_tokens(file: str | Path) -> dict[str, str]:
    """``embodia serve --client-tokens-file``: one ``NAME TOKEN`` a line (a credential file, as in
    `read_secret`); {token: name}. A client that sends its token in the ``X-Embodia-Client`` header
    is counted as itself, wherever it connects from, instead of as its host range (`host_range`).
    ValueError (one line) for a line that is not a name and a token, a token under 16 characters,
    or a name or token given twice."""
    out: dict[str, str] = {}
    for n, line in enumerate(_lines(Path(file)), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2:
            raise ValueError(f"{file}, line {n}: expected 'NAME TOKEN', got {len(parts)} words")
        name, token = parts
        if len(token) < MIN_SECRET:
            raise ValueError(f"{file}, line {n}: the token of {name!r} is {len(token)} characters long; a "
                             f"token needs at least {MIN_SECRET} (e.g. openssl rand -hex 16)")
        if token in out or name in out.values():
            raise ValueError(f"{file}, line {n}: {name!r} or its token is given twice")
        out[token] = name
    return out


def host_range(address: str) -> str:
    """The range a client address is counted in by `embodia serve` (its places and its turns): an
    IPv4 /24 or an IPv6 /64 (one machine can hold many addresses in it), and every loopback address
    one range, ``loopback`` (a process here may bind any of 127.0.0.0/8). A client named by its
    own token (`read_client_tokens`) is counted as itself instead.

    >>> host_range("192.168.4.17"), host_range("127.0.0.9"), host_range("::1"), host_range("2001:db8:1:2::5")
    ('192.168.4.0/24', 'loopback', 'loopback', '2001:db8:1:2::/64')
    """
    try:
        ip = ipaddress.ip_address(address.split("%")[0].strip("[]"))
    except ValueError:
        return address
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return "loopback"
    return str(ipaddress.ip_network(f"{ip}/{24 if ip.version == 4 else 64}", strict=False))


def require_credential(host: str, secret: str | None, how: str) -> None:
    """Refuse to listen beyond loopback without a credential; ``how`` says how to give one."""
    if secret is None and not is_loopback(host):
        raise ValueError(f"--host {host} is reachable from other machines: refusing to serve without a "
                         f"credential ({how}), or serve on 127.0.0.1")


def same_secret(sent: str | bytes, secret: str) -> bool:
    """Constant-time comparison (a plain == leaks how many leading characters matched)."""
    sent = sent.encode("utf-8", "replace") if isinstance(sent, str) else sent
    return hmac.compare_digest(sent, secret.encode("utf-8"))


class BearerAuth:
    """ASGI middleware: HTTP requests without ``Authorization: Bearer <token>`` get 401 before they
    reach the app (lifespan events pass through)."""

    def __init__(self, app, token: str):
        self.app, self.expected = app, f"Bearer {token}"

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            sent = next((v for k, v in scope.get("headers", ()) if k == b"authorization"), b"")
            if not same_secret(sent, self.expected):
                body = b"missing or wrong bearer token (send 'Authorization: Bearer <token>')\n"
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                                        (b"content-length", str(len(body)).encode()),
                                        (b"www-authenticate", b'Bearer realm="embodia"')]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
