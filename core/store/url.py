"""Store URLs: which backend a ``--db`` value names, and where.

A plain path, ``sqlite:///relative/path`` or ``sqlite:////absolute/path`` names a SQLite file;
``postgresql://`` and ``postgres://`` name the PostgreSQL backend (not available yet). A SQLite URL
takes no query string or fragment (a ``?`` or ``#`` in a file name is written ``%3F``/``%23``).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from ..errors import StoreError
from .base import BackendUnavailable

POSTGRES_UNAVAILABLE = ("the PostgreSQL backend is not available yet in this version of relaypoint; "
                        "use a SQLite path or sqlite:///path")
_ACCEPTED = "write a file path, sqlite:///relative/path or sqlite:////absolute/path"


class InvalidStoreURL(StoreError):
    """The store URL cannot name a store: empty, malformed, with a query string or fragment, or a
    path holding a NUL character. The message says what was given and what is accepted."""


@dataclass(frozen=True)
class StoreURL:
    """A parsed store URL: ``backend`` ("sqlite") and ``path`` (the file, as given)."""

    backend: str
    path: str


def parse(url: str) -> StoreURL:
    """Parse a store URL.

    Raises ``BackendUnavailable`` for PostgreSQL URLs and unknown schemes, ``InvalidStoreURL`` for
    an empty or malformed URL, a ``sqlite://`` URL with a query string or fragment, and a path
    holding a NUL character.
    """
    text = str(url)
    if not text:
        raise InvalidStoreURL(f"the store URL is empty; {_ACCEPTED}")
    scheme, sep, rest = text.partition("://")
    if not sep or "/" in scheme or "\\" in scheme:  # a plain path (which may hold ':' or '://' later on)
        return StoreURL("sqlite", _file(text, text))
    scheme = scheme.lower()
    if scheme in ("postgresql", "postgres") or scheme.startswith("postgresql+"):
        raise BackendUnavailable(POSTGRES_UNAVAILABLE)
    if scheme != "sqlite":
        raise BackendUnavailable(f"unknown store URL scheme {scheme!r} in {text!r}; use a SQLite path or sqlite:///path")
    if "?" in rest or "#" in rest:  # SQLite's own URI options would be ignored silently: say so
        raise InvalidStoreURL(f"store URL {text!r} has a query string or fragment, which relaypoint does not take; "
                              f"{_ACCEPTED} (a '?' or '#' in the file name is written %3F or %23)")
    parts = urlsplit(text)
    if parts.netloc or not parts.path.startswith("/") or len(parts.path) < 2:
        raise InvalidStoreURL(f"cannot read store URL {text!r}: {_ACCEPTED}")
    return StoreURL("sqlite", _file(unquote(parts.path[1:]), text))


def _file(path: str, given: str) -> str:
    """``path`` when a file can have it; a NUL character cannot be in any file name."""
    if "\x00" in path:
        raise InvalidStoreURL(f"store URL {given!r} names a path with a NUL character, which no file name can hold; "
                              f"{_ACCEPTED}")
    return path
