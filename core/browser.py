"""``relaypoint serve``: the console in a web browser, through textual-serve.

Each browser session runs the console (``python -m relaypoint console``) as a subprocess whose
screen and keys travel over a WebSocket. The store's URL reaches that subprocess in
``RELAYPOINT_DB``, never on its command line, where ``ps`` would show a PostgreSQL password.

There is no authentication: anyone who can open the page can approve, reject, fork and cancel runs.
So the server listens on the loopback address unless told otherwise (:func:`listen_address`), and
it refuses the two ways another web site could drive a loopback console from the user's own
browser: a WebSocket opened by a page of another origin (cross-site WebSocket hijacking), and,
listening on loopback, a request naming a host that is not a loopback name (DNS rebinding).

textual-serve (and aiohttp under it) is imported only when serving, by :func:`serve_console`.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import os
import shlex
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .defaults import DURABILITY
from .errors import RelaypointError

LOOPBACK_HOST = "127.0.0.1"
"""Where ``relaypoint serve`` listens unless ``--host`` says otherwise."""

DEFAULT_PORT = 8000

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
"""Host names a browser may use for a loopback server, besides the one it was started with (a
request naming another is refused)."""

PAGE_TEMPLATES = Path(__file__).parent / "browser_page"
"""The page textual-serve serves, relaypoint's copy (its comment says what differs): its addresses
are relative to the page's origin, so it works under any name the browser used, and it makes no
request outside its server."""

_BIND_PROBLEMS = {
    errno.EADDRINUSE: "the port is in use; choose another with --port",
    errno.EACCES: "permission denied (ports below 1024 need privileges); choose another with --port",
    errno.EADDRNOTAVAIL: "this machine has no such address; give one of its own with --host",
}


@dataclass(frozen=True)
class ListenAddress:
    """Where the server listens: ``host`` and ``port`` as given, whether every address ``host``
    resolves to is a loopback one, and ``url``, the address the server announces (for a
    wildcard host such as ``0.0.0.0``, this machine's name)."""

    host: str
    port: int
    loopback: bool
    url: str


def _is_loopback(address: str) -> bool:
    return ipaddress.ip_address(address.split("%", 1)[0]).is_loopback


def listen_address(host: str, port: int, *, public: bool) -> ListenAddress:
    """Check that the server may listen on ``host``:``port`` and that the port is free.

    ``host`` must resolve, and to loopback addresses only unless ``public`` is true. The port is
    bound once and released, so a port in use or not allowed is refused here, in one line, before
    anything is served. Raises ``RelaypointError`` saying what to change."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as e:
        why = e.strerror if isinstance(e, socket.gaierror) else "not a valid host name"
        raise RelaypointError(f"cannot serve on host {host!r}: {why}") from None
    loopback = all(_is_loopback(info[4][0]) for info in infos)
    if not loopback and not public:
        raise RelaypointError(f"host {host!r} is not a loopback address, and relaypoint serve has no "
                              "authentication: anyone who reaches it can decide runs; add --public to serve "
                              "there anyway")
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp binds
        try:
            probe.bind(address)
        except OSError as e:
            why = _BIND_PROBLEMS.get(e.errno, e.strerror or str(e))
            raise RelaypointError(f"cannot listen on {host} port {port}: {why}") from None
    ip = _ip(host)
    shown_host = socket.gethostname() if ip and ip.is_unspecified else f"[{host}]" if ip and ip.version == 6 else host
    return ListenAddress(host, port, loopback, f"http://{shown_host}:{port}")


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def console_command(app_spec: str | None, *, readonly: bool = False, durability: str = DURABILITY) -> str:
    """The shell command each browser session runs: ``python -m relaypoint --durability D console
    [--app APP] [--read-only]``, every word quoted. The store is not on it: see :func:`serve_console`."""
    words = [sys.executable, "-m", "relaypoint", "--durability", durability, "console"]
    words += ["--app", app_spec] if app_spec else []
    words += ["--read-only"] if readonly else []
    return shlex.join(words)


def serve_console(db_url: str, where: ListenAddress, command: str, *, announce: Callable[[str], None]) -> None:
    """Serve the console at ``where`` until SIGINT or SIGTERM: each browser session runs
    ``command`` (:func:`console_command`) with ``RELAYPOINT_DB`` set to ``db_url`` in its
    environment. ``announce`` is called with one line once the server starts."""
    from aiohttp import web
    from textual_serve.server import Server
    from yarl import URL

    os.environ["RELAYPOINT_DB"] = db_url  # inherited by every session's console, not shown by `ps`
    sessions: set[asyncio.Task] = set()
    allowed_names = {*LOOPBACK_NAMES, URL(where.url).host}

    class ConsoleServer(Server):
        """textual-serve's server, announcing itself in one line and refusing requests another
        site could make through the user's browser (see the module's docstring)."""

        def _refuse(self, request: web.Request) -> None:
            if where.loopback and (request.url.host or "").lower() not in allowed_names:
                raise web.HTTPForbidden(text=f"relaypoint serve answers only to {', '.join(sorted(allowed_names))}\n")
            origin = request.headers.get("Origin")
            if origin is not None and origin.lower() not in (f"http://{request.host}".lower(),
                                                             f"https://{request.host}".lower()):
                raise web.HTTPForbidden(text="relaypoint serve refuses pages of other origins\n")

        async def handle_index(self, request: web.Request) -> Any:
            self._refuse(request)
            return await super().handle_index(request)

        async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
            self._refuse(request)
            session = asyncio.current_task()
            sessions.add(session)
            try:
                return await super().handle_websocket(request)
            finally:
                sessions.discard(session)

        async def on_shutdown(self, app: web.Application) -> None:
            # Each session, cancelled, closes its WebSocket and tells its console to quit; left
            # alone, the server would wait for browsers to hang up.
            for session in sessions:
                session.cancel()

        def initialize_logging(self) -> None:
            # Plain lines on stderr, which the CLI cleans (a request line or a User-Agent is the
            # client's text); no tracebacks with local variables, which could show the store's URL.
            logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)

        async def on_startup(self, app: web.Application) -> None:
            announce(f"serving the console at {where.url} (Ctrl+C stops)")

    server = ConsoleServer(command, host=where.host, port=where.port, title="relaypoint console",
                           templates_path=PAGE_TEMPLATES)
    try:
        server.serve()
    except OSError as e:  # the port was taken between the check and the bind
        raise RelaypointError(f"cannot listen on {where.host} port {where.port}: "
                              f"{_BIND_PROBLEMS.get(e.errno, e.strerror or str(e))}") from None
