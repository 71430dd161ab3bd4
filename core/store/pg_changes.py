"""The PostgreSQL store's change feed: how ``data_version`` learns that the store changed.

A console's store listens on the schema's channel (LISTEN/NOTIFY) once it has checked that a test
notification reaches it, and records its listening connection in ``listeners`` so that writers
notify (schema version 8); where notifications cannot arrive (a pooler in transaction mode) it
reads the server's write counters per check instead. Commits of this process are counted here too,
so its own stores see them at once, before their notification comes back.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager

import psycopg

from ..errors import StoreError

PROBE_SECONDS = 2.0
"""How long a new listener waits for its own test notification before concluding notifications do not
reach it (normally they take a millisecond)."""
_PROBE = "probe "

NOTIFY_IF_WRITTEN = ("SELECT pg_notify(%s, '') WHERE pg_current_xact_id_if_assigned() IS NOT NULL "
                     "AND EXISTS (SELECT 1 FROM listeners)")
"""The end of every write transaction (its one argument: the channel): notify when it wrote (it then
has a transaction id) and a console listens."""
# A listening connection, once its test notification came back: the schema's lock taken exclusively
# (so every writer under way commits first, and every later one sees the row), the rows of listeners
# whose connection is gone dropped, its own added.
_LISTENERS_GONE = "DELETE FROM listeners l WHERE NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = l.pid)"
_LISTENING = ("INSERT INTO listeners (pid) VALUES (pg_backend_pid()) "
              "ON CONFLICT (pid) DO UPDATE SET since = excluded.since")
_NOT_LISTENING = "DELETE FROM listeners WHERE pid = pg_backend_pid()"
_WRITTEN = ("SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::bigint AS written "
            "FROM pg_stat_user_tables WHERE schemaname = %s")

_commits_lock = threading.Lock()
_commits: dict[tuple[str, str], int] = {}


def count_commit(key: tuple[str, str]) -> None:
    """Count a commit to the store ``key`` (conninfo, schema) made by this process: its stores see it
    in ``data_version`` at once, before the notification of it comes back from the server."""
    with _commits_lock:
        _commits[key] = _commits.get(key, 0) + 1


def _commits_here(key: tuple[str, str]) -> int:
    with _commits_lock:
        return _commits.get(key, 0)


class ChangeFeed:
    """The change feed of one store object, started at its first :meth:`version`.

    ``key``: the store's (conninfo, schema); ``channel``: the schema's notification channel;
    ``lock``: the statement taking the schema's advisory lock exclusively, and its arguments. ``listen``: opens the
    listening connection (never read-only: its record in ``listeners`` is its one write).
    ``connection``: the store's connection for one operation (raising ``StoreError``s), which sends
    the test notification and reads the write counters.
    """

    def __init__(self, key: tuple[str, str], channel: str, lock: tuple[str, tuple[int, int]],
                 listen: Callable[[], psycopg.Connection],
                 connection: Callable[[], AbstractContextManager[psycopg.Connection]]) -> None:
        self._key, self._channel, self._lock = key, channel, lock
        self._open, self._connection = listen, connection
        self._listener: psycopg.Connection | None = None
        self._kind: str | None = None
        self._notified = 0
        self._watch_lock = threading.Lock()  # one thread at a time reads the listener and its counts

    @property
    def kind(self) -> str | None:
        """How changes are learnt: "notifications" (LISTEN), "statistics" (a query of the server's
        write counters per check, when notifications are unavailable), None before the first
        :meth:`version`."""
        return self._kind

    def version(self) -> tuple[str, int, int]:
        """:attr:`kind`, the commits of this process to the store, and the notifications received
        (or, without notifications, the rows the schema's tables had written per the server's
        statistics). A lost listener counts as a change and listening starts again. Raises what the
        store's connection raises (``StoreError``) when reading the statistics."""
        with self._watch_lock:
            return self._version()

    def _version(self) -> tuple[str, int, int]:
        if self._kind is None:
            self._listen()
        here = _commits_here(self._key)
        if self._kind == "notifications":
            try:
                self._drain(0)
                return "notifications", here, self._notified
            except psycopg.Error:  # the listener's connection was lost: notifications may have been missed
                self._listener.close()
                self._listener, self._kind = None, None
                self._notified += 1
                return self._version()
        with self._connection() as conn:
            row = conn.execute(_WRITTEN, (self._key[1],)).fetchone()
        return "statistics", here, row["written"]

    def _listen(self) -> None:
        """Open the listening connection and check that a notification sent on another connection
        reaches it; then record it in ``listeners``, so that writers notify. Else (it cannot connect,
        LISTEN or the record is refused, or nothing arrives within ``PROBE_SECONDS``) use the
        statistics."""
        self._kind = "statistics"
        try:
            listener = self._open()
        except psycopg.Error:
            return
        self._listener = listener
        try:
            listener.execute(f"LISTEN {self._channel}")
            token = _PROBE + secrets.token_hex(8)
            with self._connection() as conn:
                conn.execute("SELECT pg_notify(%s, %s)", (self._channel, token))
            if self._drain(PROBE_SECONDS, until=token):
                with listener.transaction():
                    listener.execute(*self._lock)
                    listener.execute(_LISTENERS_GONE)
                    listener.execute(_LISTENING)
                self._kind = "notifications"
                return
        except (psycopg.Error, StoreError):  # the store's own connection failing is raised by the check itself
            pass
        self._listener = None
        listener.close()

    def _drain(self, timeout: float, until: str | None = None) -> bool:
        """Count the notifications that arrived (waiting up to ``timeout`` seconds for more, or for the
        one whose payload is ``until``): test notifications (probes) are not changes. True when
        ``until`` came."""
        for n in self._listener.notifies(timeout=timeout):
            if n.payload == until:
                return True
            if not n.payload.startswith(_PROBE):
                self._notified += 1
        return False

    def close(self) -> None:
        """Stop listening: the listener's record dropped (else the next console's listener drops it)
        and its connection closed."""
        with self._watch_lock:
            if self._listener is not None:
                try:
                    self._listener.execute(_NOT_LISTENING)
                except psycopg.Error:
                    pass
                self._listener.close()
                self._listener = None
