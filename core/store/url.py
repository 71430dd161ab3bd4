"""Store URLs: which backend a ``--db`` value names, and where.

A plain path, ``sqlite:///relative/path`` or ``sqlite:////absolute/path`` names a SQLite file;
``postgresql://user@host:port/dbname`` (or ``postgres://``) names a schema of a PostgreSQL database,
``relaypoint`` unless the one query parameter taken, ``schema``, says otherwise
(``postgresql://app@db/team?schema=relay_dev``; not an SQL keyword PostgreSQL takes only quoted,
such as ``user``). A SQLite URL takes no query string or fragment (a
``?`` or ``#`` in a file name is written ``%3F``/``%23``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from ..errors import StoreError
from .base import BackendUnavailable

DEFAULT_SCHEMA = "relaypoint"
# A schema name relaypoint puts in SQL and in the connection's search_path without quoting.
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_ACCEPTED = "write a file path, sqlite:///relative/path or sqlite:////absolute/path"
# The SQL keywords PostgreSQL takes as a name only quoted (pg_get_keywords() whose catcode is not 'U',
# PostgreSQL 15 to 18), by the server's own description of each kind: relaypoint writes its schema's
# name unquoted, so a URL naming one is refused as it is read, before any connection is made.
_KEYWORDS = {word: kind for kind, words in (
    ("reserved", """all analyse analyze and any array as asc asymmetric both case cast check collate column constraint
     create current_catalog current_date current_role current_time current_timestamp current_user default
     deferrable desc distinct do else end except false fetch for foreign from grant group having in initially
     intersect into lateral leading limit localtime localtimestamp not null offset on only or order placing
     primary references returning select session_user some symmetric system_user table then to trailing true
     union unique user using variadic when where window with"""),
    ("reserved (can be function or type name)", """authorization binary collation concurrently cross current_schema
     freeze full ilike inner is isnull join left like natural notnull outer overlaps right similar tablesample
     verbose"""),
    ("unreserved (cannot be function or type name)", """between bigint bit boolean char character coalesce dec
     decimal exists extract float greatest grouping inout int integer interval json json_array json_arrayagg
     json_exists json_object json_objectagg json_query json_scalar json_serialize json_table json_value least
     merge_action national nchar none normalize nullif numeric out overlay position precision real row setof
     smallint substring time timestamp treat trim values varchar xmlattributes xmlconcat xmlelement xmlexists
     xmlforest xmlnamespaces xmlparse xmlpi xmlroot xmlserialize xmltable"""),
) for word in words.split()}


class InvalidStoreURL(StoreError):
    """The store URL cannot name a store: empty, malformed, with a query string or fragment, or a
    path holding a NUL character. The message says what was given and what is accepted."""


@dataclass(frozen=True)
class StoreURL:
    """A parsed store URL: ``backend`` ("sqlite" or "postgres"); for SQLite ``path`` (the file, as
    given); for PostgreSQL ``conninfo`` (the URL for libpq, without relaypoint's query parameter)
    and ``schema`` (``path`` is empty)."""

    backend: str
    path: str
    conninfo: str | None = None
    schema: str | None = None


def parse(url: str) -> StoreURL:
    """Parse a store URL.

    Raises ``BackendUnavailable`` for unknown schemes, ``InvalidStoreURL`` for an empty or malformed
    URL, a ``sqlite://`` URL with a query string or fragment, a path holding a NUL character, and a
    PostgreSQL URL with a fragment, a query parameter other than ``schema``, or a schema name
    outside ``[a-z_][a-z0-9_]*`` or that PostgreSQL takes only quoted (an SQL keyword such as
    ``user``; unreserved ones such as ``copy`` are names like any other).
    """
    text = str(url)
    if not text:
        raise InvalidStoreURL(f"the store URL is empty; {_ACCEPTED}")
    scheme, sep, rest = text.partition("://")
    if not sep or "/" in scheme or "\\" in scheme:  # a plain path (which may hold ':' or '://' later on)
        return StoreURL("sqlite", _file(text, text))
    scheme = scheme.lower()
    if scheme in ("postgresql", "postgres"):
        return _postgres(text)
    if scheme != "sqlite":
        raise BackendUnavailable(f"unknown store URL scheme {scheme!r} in {text!r}; use a SQLite path, sqlite:///path "
                                 "or postgresql://user@host/dbname")
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


def shown(url: str) -> str:
    """``url`` as it may be printed or logged: a password in a PostgreSQL URL replaced by ``***``."""
    text = str(url)
    if not text.lower().startswith(("postgresql://", "postgres://")):
        return text
    try:
        parts = urlsplit(text)
    except ValueError:
        return text.split("://", 1)[0] + "://***"
    if parts.password is None:
        return text
    user, _, host = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{user.split(':', 1)[0]}:***@{host}"))


def _postgres(given: str) -> StoreURL:
    """A ``postgresql://`` URL: the libpq URL without relaypoint's ``schema`` parameter, and the schema.
    Error messages show the URL without its password."""
    text = shown(given)
    if "\x00" in given:
        raise InvalidStoreURL(f"store URL {text!r} holds a NUL character; write postgresql://user@host:port/dbname")
    parts = urlsplit(given)
    if parts.netloc.count("@") > 1:  # libpq splits at the first '@': the rest of a password would be the host
        raise InvalidStoreURL(f"store URL {text!r} has more than one '@' before its host; write an '@' in the user "
                              "name or password as %40 (or keep the password in PGPASSWORD or ~/.pgpass)")
    if parts.fragment:
        raise InvalidStoreURL(f"store URL {text!r} has a fragment, which relaypoint does not take; "
                              "write postgresql://user@host:port/dbname?schema=NAME")
    params = parse_qsl(parts.query, keep_blank_values=True)
    others = sorted({k for k, _ in params if k != "schema"})
    if others:
        raise InvalidStoreURL(f"store URL {text!r} has query parameters {', '.join(others)}, which relaypoint does "
                              "not take (only schema=NAME); set libpq options in PG* environment variables or "
                              "~/.pg_service.conf")
    schemas = [v for _, v in params]
    if len(schemas) > 1:
        raise InvalidStoreURL(f"store URL {text!r} names the schema more than once; give schema=NAME once")
    schema = schemas[0] if schemas else DEFAULT_SCHEMA
    if not _SCHEMA_NAME.fullmatch(schema):
        raise InvalidStoreURL(f"store URL {text!r} names schema {schema!r}; a relaypoint schema name is lower-case "
                              "letters, digits and _ (not starting with a digit), at most 63 characters")
    if schema in _KEYWORDS:
        raise InvalidStoreURL(f"store URL {text!r} names schema {schema!r}, an SQL keyword PostgreSQL takes as a name "
                              f"only quoted ({_KEYWORDS[schema]}); name another schema with ?schema=NAME "
                              "(e.g. relaypoint)")
    # as written, less the query: urlunsplit would turn a host-less postgresql:///db (PGHOST, the
    # local socket) into postgresql:/db, which libpq cannot read
    return StoreURL("postgres", "", conninfo=given.partition("?")[0], schema=schema)


def postgres_where(conninfo: str, schema: str) -> str:
    """How messages and the console name a PostgreSQL store: ``user@host:port/dbname/schema``, the
    user and port as the URL gives them (left out when it does not), the host from ``PGHOST`` when
    the URL has none (as libpq does), never the password."""
    parts = urlsplit(conninfo)
    host = parts.hostname or os.environ.get("PGHOST") or "localhost"
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # not one port number: several hosts (h1:5432,h2:5432), or one libpq refuses in one line
        host, port = parts.netloc.rpartition("@")[2], ""
    return f"{parts.username + '@' if parts.username else ''}{host}{port}{parts.path or '/'}/{schema}"


def store_name(url: str) -> str:
    """A short name of the store at ``url`` for a status line: the SQLite file's name, or for
    PostgreSQL the store's name in messages (:func:`postgres_where`)."""
    where = parse(url)
    if where.backend == "sqlite":
        return Path(where.path).name
    return postgres_where(where.conninfo or "", where.schema)


def log_stem(url: str) -> str:
    """Where files kept beside a store go, as a path stem: the SQLite file's path, or
    ``relaypoint-<schema>`` in the current directory for a PostgreSQL store (no file of its own)."""
    where = parse(url)
    return where.path if where.backend == "sqlite" else f"relaypoint-{where.schema}"
