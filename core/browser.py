"""``relaypoint serve``: the console in a web browser, through textual-serve.

Each browser session runs the console (``python -m relaypoint console --by NAME``) as a subprocess
whose screen and keys travel over a WebSocket. The store's URL reaches that subprocess in
``RELAYPOINT_DB``, never on its command line, where ``ps`` would show a PostgreSQL password.

Whoever opens the page decides runs, so every request needs the server's token, and the page asks
for the name the decisions are recorded under (:mod:`relaypoint.browser_access`, which also refuses
what another web site could make the user's own browser request). The server speaks plain HTTP, so
it listens on the loopback address unless told otherwise (:func:`listen_address`).

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
from urllib.parse import quote

from .defaults import DURABILITY
from .errors import InvalidValue, RelaypointError

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
        raise RelaypointError(f"host {host!r} is not a loopback address, and relaypoint serve speaks plain HTTP: "
                              "its token and every page would cross the network unencrypted; tunnel to a loopback "
                              "server (ssh -L), or add --public to serve there anyway")
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
    """The shell command each browser session runs, with ``--by=NAME`` added (the name its page
    gave): ``python -m relaypoint --durability D console [--app APP] [--read-only]``, every word
    quoted. The store is not on it: see :func:`serve_console`."""
    words = [sys.executable, "-m", "relaypoint", "--durability", durability, "console"]
    words += ["--app", app_spec] if app_spec else []
    words += ["--read-only"] if readonly else []
    return shlex.join(words)


def serve_console(db_url: str, where: ListenAddress, token: str, command: str, *,
                  announce: Callable[[str], None]) -> None:
    """Serve the console at ``where`` until SIGINT or SIGTERM, to requests carrying ``token``: each
    browser session runs ``command`` (:func:`console_command`) with ``--by=NAME``, the name its
    page gave (one word: a name that looks like an option stays a name), and ``RELAYPOINT_DB``
    set to ``db_url`` in its environment. ``announce`` is called with one line, the address to
    open (with the token), once the server starts."""
    import aiohttp_jinja2
    from aiohttp import web
    from textual_serve.app_service import AppService
    from textual_serve.server import Server, to_int
    from yarl import URL

    from .browser_access import NAME_CHARS, Access, hide_token_in_logs, reviewer_name, see_other

    os.environ["RELAYPOINT_DB"] = db_url  # inherited by every session's console, not shown by `ps`
    sessions: set[asyncio.Task] = set()
    access = Access(token, where.port, frozenset({*LOOPBACK_NAMES, URL(where.url).host}) if where.loopback else None)
    log = logging.getLogger("textual-serve")

    def name_form(request: web.Request, name: str, error: str | None = None, status: int = 200) -> web.Response:
        return aiohttp_jinja2.render_template("name.html", request, {"name": name, "error": error,
                                                                     "limit": NAME_CHARS}, status=status)

    class ConsoleServer(Server):
        """textual-serve's server behind :class:`~relaypoint.browser_access.Access`, asking for a
        name before the console, and announcing itself in one line."""

        async def _make_app(self) -> web.Application:
            app = await super()._make_app()
            app.middlewares.append(access.middleware)
            app.add_routes([web.get("/name", self.handle_name_form), web.post("/name", self.handle_name)])
            return app

        async def handle_index(self, request: web.Request) -> web.StreamResponse:
            name = access.name_of(request)
            if name is None:
                return name_form(request, "")
            context = {"font_size": to_int(request.query.get("fontsize", "16"), 16), "name": name,
                       "application": {"name": self.title}}
            return aiohttp_jinja2.render_template("app_index.html", request, context)

        async def handle_name_form(self, request: web.Request) -> web.StreamResponse:
            return name_form(request, access.name_of(request) or "")

        async def handle_name(self, request: web.Request) -> web.StreamResponse:
            given = (await request.post()).get("name")
            try:
                name = reviewer_name(given if isinstance(given, str) else "")
            except InvalidValue as e:
                return name_form(request, "", str(e), status=400)
            response = see_other("/")
            access.remember_name(response, name)
            return response

        async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
            name = access.name_of(request)
            if name is None:
                raise web.HTTPForbidden(text="relaypoint serve: give your name on its page first (open /)\n")
            session = asyncio.current_task()
            sessions.add(session)
            try:
                return await self._run_console(request, f"{self.command} {shlex.quote(f'--by={name}')}")
            finally:
                sessions.discard(session)

        async def _run_console(self, request: web.Request, command: str) -> web.WebSocketResponse:
            # textual-serve's handle_websocket, with a command of the session's own (its name).
            websocket = web.WebSocketResponse(heartbeat=15)
            service: AppService | None = None
            try:
                await websocket.prepare(request)
                service = AppService(command, write_bytes=websocket.send_bytes, write_str=websocket.send_str,
                                     close=websocket.close, download_manager=self.download_manager, debug=self.debug)
                await service.start(to_int(request.query.get("width", "80"), 80),
                                    to_int(request.query.get("height", "24"), 24))
                await self._process_messages(websocket, service)
            except asyncio.CancelledError:
                await websocket.close()
            except Exception as error:
                log.exception(error)
            finally:
                if service is not None:
                    await service.stop()
            return websocket

        async def on_shutdown(self, app: web.Application) -> None:
            # Each session, cancelled, closes its WebSocket and tells its console to quit; left
            # alone, the server would wait for browsers to hang up.
            for session in sessions:
                session.cancel()

        def initialize_logging(self) -> None:
            # Plain lines on stderr, which the CLI cleans (a request line or a User-Agent is the
            # client's text); no tracebacks with local variables, which could show the store's URL;
            # no token in a logged address.
            logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
            hide_token_in_logs(token)

        async def on_startup(self, app: web.Application) -> None:
            announce(f"serving the console at {where.url}/?token={quote(token, safe='')} (Ctrl+C stops)")

    server = ConsoleServer(command, host=where.host, port=where.port, title="relaypoint console",
                           templates_path=PAGE_TEMPLATES)
    try:
        server.serve()
    except OSError as e:  # the port was taken between the check and the bind
        raise RelaypointError(f"cannot listen on {where.host} port {where.port}: "
                              f"{_BIND_PROBLEMS.get(e.errno, e.strerror or str(e))}") from None
