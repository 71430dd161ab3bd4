"""Connecting to PostgreSQL: the settings of every connection a store opens, one-line messages for a
connection that could not be made, and the process-wide registry of connection pools that pooled
stores share.

Kept apart from :mod:`.postgres` (the backend: transactions, the schema, error translation) because
it holds no store state: what it knows of a store is passed in.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from ..errors import StoreError
from .base import StoreDenied, StoreMissing, StoreUnreachable

CONNECT_TIMEOUT_SECONDS = 10
SILENT_PEER_SECONDS = 10
"""A peer silent this long is given up on. By this client, the server (TCP keepalives and
``tcp_user_timeout``): a worker whose host was cut off from the server gets ``StoreUnreachable``
and can say so and stop, instead of waiting in a read forever (or for the kernel's 15 minutes of
retransmissions). By the server, this client inside a transaction
(``idle_in_transaction_session_timeout``): a host cut off, or a process stopped, while it holds
the store's write lock does not keep every other writer of the store waiting."""
POOL_MAX_SIZE = 4
"""Connections a process's pool for one store holds at most (heartbeat renewals: one short transaction
each every lease/3 seconds, serialized by the schema's lock anyway)."""


def connect_settings(schema: str, name: str, *, busy_timeout: float, durability: str, readonly: bool) -> dict[str, Any]:
    """psycopg.connect's keyword arguments for a connection to the store in ``schema``: autocommit,
    rows as dicts, UTC, ``busy_timeout`` seconds of waiting for a lock, ``synchronous_commit`` off
    for ``durability`` "normal", every transaction read-only when ``readonly``, ``name`` as its
    ``application_name``, and a silent peer given up on (:data:`SILENT_PEER_SECONDS`)."""
    silent_ms = SILENT_PEER_SECONDS * 1000
    options = (f"-c search_path={schema} -c timezone=UTC "
               f"-c lock_timeout={int(busy_timeout * 1000)} "
               f"-c synchronous_commit={'on' if durability == 'full' else 'off'} "
               f"-c idle_in_transaction_session_timeout={silent_ms}")
    if readonly:
        options += " -c default_transaction_read_only=on"
    # Keepalives notice a server gone while a statement waits for its answer (nothing unacknowledged);
    # tcp_user_timeout, one gone while what was sent is unacknowledged (and bounds the keepalives).
    return {"autocommit": True, "row_factory": dict_row, "options": options,
            "connect_timeout": CONNECT_TIMEOUT_SECONDS, "application_name": name,
            "keepalives": 1, "keepalives_idle": SILENT_PEER_SECONDS // 2, "keepalives_interval": 1,
            "keepalives_count": SILENT_PEER_SECONDS // 2, "tcp_user_timeout": silent_ms}


def one_line(e: BaseException) -> str:
    """The server's or libpq's message of ``e`` on one line (its primary message when it has one)."""
    diag = getattr(e, "diag", None)
    text = (getattr(diag, "message_primary", None) or str(e) or type(e).__name__).strip()
    return " ".join(text.split())


def close_quietly(conn: psycopg.Connection) -> None:
    """Close ``conn``, ignoring a failure (a connection already lost)."""
    try:
        conn.close()
    except psycopg.Error:
        pass


def idle(conn: psycopg.Connection) -> bool:
    """Whether ``conn`` is usable and outside any transaction (another thread may take it over)."""
    return not (conn.closed or conn.broken) and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


@dataclass(frozen=True)
class Server:
    """The server a store's URL names, as its messages show it: ``address`` ("host:port"), ``user``
    and ``database`` (None where the URL names none: libpq's defaults apply)."""

    address: str
    user: str | None
    database: str | None

    @classmethod
    def of(cls, conninfo: str) -> Server:
        """The server of the libpq URL ``conninfo`` (never its password)."""
        parts = urlsplit(conninfo)
        try:
            address = f"{parts.hostname or 'localhost'}:{parts.port or 5432}"
        except ValueError:  # not one port number (see postgres_where)
            address = parts.netloc.rpartition("@")[2]
        return cls(address, parts.username, (parts.path or "/").lstrip("/") or None)

    def refused(self, e: psycopg.Error) -> StoreError:
        """One line for a connection to this server that could not be made (libpq's message is
        several): ``StoreMissing`` (no such database), ``StoreDenied`` (no such user, credentials
        refused), else ``StoreUnreachable``."""
        msg = one_line(e)
        detail = re.sub(r"^connection failed: (connection to server at .*?, port \d+ failed: )?", "", msg)
        detail = detail.replace("FATAL: ", "")
        server = f"the PostgreSQL server at {self.address}"
        if re.search(r'database ".*" does not exist', msg):
            db = self.database or self.user or "?"
            return StoreMissing(f"{server} has no database {db!r}; create it (createdb {db}) or point --db at "
                                "another database")
        if re.search(r'role ".*" does not exist', msg):
            return StoreDenied(f"{server} has no user {self.user or '(default)'!r}; name an existing user in the "
                               "URL (postgresql://USER@host/dbname)")
        if any(w in msg for w in ("password", "authentication", "pg_hba.conf")):
            return StoreDenied(f"{server} refused the credentials ({detail}); check the user and password "
                               "(PGPASSWORD or ~/.pgpass)")
        if "Connection refused" in msg:
            return StoreUnreachable(f"{server} refused the connection (is PostgreSQL running and listening there?)")
        if "resolve host" in msg or "could not translate host name" in msg:
            return StoreUnreachable(f"cannot find the host of {server} (check the URL): {detail}")
        if "timeout" in msg.lower():
            return StoreUnreachable(f"{server} did not answer within {CONNECT_TIMEOUT_SECONDS} s")
        return StoreUnreachable(f"cannot connect to {server}: {detail}")


_pools_lock = threading.Lock()
_pools: dict[tuple[str, str], tuple[ConnectionPool, int]] = {}


def join_pool(conninfo: str, settings: dict[str, Any], name: str) -> ConnectionPool:
    """This process's pool of connections to ``conninfo`` with ``settings`` (psycopg.connect's keyword
    arguments), made at its first user (connections are opened when first borrowed, at most
    ``POOL_MAX_SIZE``; a borrower waits ``CONNECT_TIMEOUT_SECONDS`` at most). Each call must be
    matched by one :func:`leave_pool`."""
    key = (conninfo, repr(sorted(settings.items())))
    with _pools_lock:
        pool, users = _pools.get(key, (None, 0))
        if pool is None:
            pool = ConnectionPool(conninfo, kwargs=settings, min_size=0, max_size=POOL_MAX_SIZE, open=True,
                                  name=name, timeout=CONNECT_TIMEOUT_SECONDS, num_workers=1)
        _pools[key] = (pool, users + 1)
        return pool


def leave_pool(pool: ConnectionPool) -> None:
    """One user of ``pool`` is done; the last closes it (and its connections)."""
    with _pools_lock:
        for key, (shared, users) in list(_pools.items()):
            if shared is pool:
                if users > 1:
                    _pools[key] = (pool, users - 1)
                    return
                del _pools[key]
                break
    pool.close()
