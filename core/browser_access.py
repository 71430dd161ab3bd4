"""Who may use ``relaypoint serve``, and under which name they decide.

The token works as Jupyter's: a fresh one each start (:func:`new_token`) unless ``--token-file``
gives a fixed one (:func:`read_token_file`); the address the server prints carries it
(``/?token=...``); a request with it gets a cookie holding it and is redirected to the same address
without it; every other request needs the cookie, compared in constant time. :class:`Access`
refuses, on every path (the page, ``/static/``, ``/download/``, the WebSocket, ``/name``):

- a request naming a Host that is not this server's (DNS rebinding: another site's page, served
  under a name that resolves to 127.0.0.1, reading the console), when listening on loopback: 403;
- a request from a page of another origin (``Origin``: a WebSocket opened, or a form posted, by
  another site through the user's browser): 403;
- a request without the token or its cookie: 401.

The page asks once for the name of the person deciding, kept in a second cookie
(:func:`reviewer_name` says which names are taken); it is the ``by`` of every decision the
browser session's console records. Both cookies are HttpOnly and named after the port, so two
servers on one machine do not overwrite each other's. They are SameSite=Lax, not Strict: the
address opened from a link on another site (a chat, a mail) must work, and Strict cookies are not
sent after its redirect; a page of another site gets neither cookie on its WebSocket or form post
(and the Origin check refuses them).

This module imports aiohttp: only ``relaypoint serve`` loads it.
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

from aiohttp import web

from .errors import InvalidValue, RelaypointError
from .views.display import clean

TOKEN_BYTES = 32
"""Random bytes in a fresh token (43 URL-safe characters)."""

NAME_CHARS = 64
"""The longest name a person may give, in characters."""

NAME_COOKIE_SECONDS = 365 * 24 * 3600
"""How long a browser keeps the name (the token's cookie lasts until the browser closes)."""

_TOKEN_IN_LOG = re.compile(r"([?&]token=)[^&\s\"]*")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def new_token() -> str:
    """A fresh token: :data:`TOKEN_BYTES` random bytes, URL-safe base64."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def read_token_file(path: str) -> str:
    """The token ``path`` holds: its text without surrounding whitespace, one word of printable
    ASCII. Raises ``RelaypointError`` (one line) when the file cannot be read, is empty, or holds
    anything else."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise RelaypointError(f"cannot read token file {path!r}: it is not UTF-8 text") from None
    except OSError as e:
        raise RelaypointError(f"cannot read token file {path!r}: {e.strerror or e}") from None
    token = text.strip()
    if not token:
        raise RelaypointError(f"token file {path!r} is empty; write a token in it, e.g. "
                              f"python3 -c 'import secrets; print(secrets.token_urlsafe(32))' > {path}")
    if not (token.isascii() and token.isprintable()) or any(c.isspace() for c in token):
        raise RelaypointError(f"token file {path!r} must hold one word of printable ASCII characters, the token")
    return token


def reviewer_name(text: str) -> str:
    """``text`` as the name of a person deciding: without surrounding whitespace, 1 to
    :data:`NAME_CHARS` characters, none of which the console would show as an escape (controls
    such as ESC, line breaks, format characters such as BiDi overrides). Markup and quotes are
    kept: the name is stored and shown literally. Raises ``InvalidValue`` saying what to change."""
    name = text.strip()
    if not name:
        raise InvalidValue("give a name: it is recorded as who decides")
    if len(name) > NAME_CHARS:
        raise InvalidValue(f"a name is at most {NAME_CHARS} characters; this one has {len(name):,}")
    if clean(name) != name:
        raise InvalidValue("a name cannot hold control or format characters (escapes, line breaks, "
                           "direction overrides); type it again")
    return name


def see_other(location: str) -> web.Response:
    """A 303 redirect to ``location``, a response that cookies can be set on."""
    return web.Response(status=303, headers={"Location": location})


def scrub_token(line: str) -> str:
    """``line`` (a logged request) with the value of any ``token`` query parameter hidden."""
    return _TOKEN_IN_LOG.sub(r"\1(hidden)", line)


class _ScrubToken(logging.Filter):
    """Hides ``token`` in a record: its message, its arguments and its exception's text (a request
    aiohttp cannot parse is logged with the raw header lines, a cookie's token among them)."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self.token = token

    def _scrubbed(self, text: str) -> str:
        return scrub_token(text.replace(self.token, "(hidden)"))

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = self._scrubbed(record.getMessage()), None
        if record.exc_info:
            record.exc_text = self._scrubbed(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True


def hide_token_in_logs(token: str) -> None:
    """Make aiohttp's logs (its access log, and its errors of requests and the web handler) show
    ``(hidden)`` instead of ``token``, and ``token=(hidden)`` for any token in a logged address."""
    scrub = _ScrubToken(token)
    for name in ("aiohttp.access", "aiohttp.server", "aiohttp.web"):
        logging.getLogger(name).addFilter(scrub)


@dataclass(frozen=True)
class Access:
    """The token, the port (which names the cookies) and, listening on loopback, the host names a
    request may give (None: any, for a server listening on a public address)."""

    token: str
    port: int
    hosts: frozenset[str] | None

    @property
    def token_cookie(self) -> str:
        return f"relaypoint-token-{self.port}"

    @property
    def name_cookie(self) -> str:
        return f"relaypoint-name-{self.port}"

    def _is_token(self, given: str) -> bool:
        return secrets.compare_digest(given.encode("utf-8", "replace"), self.token.encode())

    def _refuse_foreign(self, request: web.Request) -> None:
        if self.hosts is not None and (request.url.host or "").lower() not in self.hosts:
            raise web.HTTPForbidden(text=f"relaypoint serve answers only to {', '.join(sorted(self.hosts))}\n")
        origin = request.headers.get("Origin")
        if origin is not None and origin.lower() not in (f"http://{request.host}".lower(),
                                                         f"https://{request.host}".lower()):
            raise web.HTTPForbidden(text="relaypoint serve refuses pages of other origins\n")

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """The aiohttp middleware refusing what the module's doc says, and trading the token in an
        address for its cookie."""
        self._refuse_foreign(request)
        given = request.query.get("token")
        if given is not None:
            if not self._is_token(given):
                raise web.HTTPUnauthorized(text="relaypoint serve: wrong token; open the address it printed "
                                                "when it started\n")
            response = see_other(str(request.rel_url.without_query_params("token")))
            response.set_cookie(self.token_cookie, self.token, path="/", httponly=True, samesite="Lax")
            return response
        if not self._is_token(request.cookies.get(self.token_cookie, "")):
            raise web.HTTPUnauthorized(text="relaypoint serve needs its token: open the address it printed when "
                                            "it started (http://HOST:PORT/?token=...)\n")
        return await handler(request)

    def name_of(self, request: web.Request) -> str | None:
        """The name the request's cookie gives, or None when it gives none that :func:`reviewer_name` takes."""
        try:
            return reviewer_name(unquote(request.cookies.get(self.name_cookie, ""), errors="strict"))
        except (InvalidValue, UnicodeDecodeError):
            return None

    def remember_name(self, response: web.StreamResponse, name: str) -> None:
        """Make ``response`` set the name's cookie to ``name`` (one :func:`reviewer_name` took)."""
        response.set_cookie(self.name_cookie, quote(name, safe=""), path="/", max_age=NAME_COOKIE_SECONDS,
                            httponly=True, samesite="Lax")
