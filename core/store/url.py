"""Store URLs: which backend a ``--db`` value names, and where.

A plain path, ``sqlite:///relative/path`` or ``sqlite:////absolute/path`` names a SQLite file;
``postgresql://`` and ``postgres://`` name the PostgreSQL backend (not available yet).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from .base import BackendUnavailable

POSTGRES_UNAVAILABLE = ("the PostgreSQL backend is not available yet in this version of relaypoint; "
                        "use a SQLite path or sqlite:///path")


@dataclass(frozen=True)
class StoreURL:
    """A parsed store URL: ``backend`` ("sqlite") and ``path`` (the file, as given)."""

    backend: str
    path: str


def parse(url: str) -> StoreURL:
    """Parse a store URL. Raises ``BackendUnavailable`` for PostgreSQL URLs and unknown schemes."""
    text = str(url)
    scheme, sep, _ = text.partition("://")
    if not sep or "/" in scheme or "\\" in scheme:  # a plain path (which may hold ':' or '://' later on)
        return StoreURL("sqlite", text)
    scheme = scheme.lower()
    if scheme in ("postgresql", "postgres") or scheme.startswith("postgresql+"):
        raise BackendUnavailable(POSTGRES_UNAVAILABLE)
    if scheme == "sqlite":
        parts = urlsplit(text)
        if parts.netloc or not parts.path.startswith("/") or len(parts.path) < 2:
            raise BackendUnavailable(f"cannot read store URL {text!r}: write sqlite:///relative/path or "
                                     "sqlite:////absolute/path (or a plain path)")
        return StoreURL("sqlite", unquote(parts.path[1:]))
    raise BackendUnavailable(f"unknown store URL scheme {scheme!r} in {text!r}; use a SQLite path or sqlite:///path")
