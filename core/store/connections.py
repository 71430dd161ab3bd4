"""A store's connections, one per thread: what lets one store object (and so one ``Runtime``) be used
by many threads at once.

Each thread that uses a store works on a connection of its own, with its own transaction: no
connection is ever used by two threads at once, so one thread's statements never land inside
another's open transaction, and a transaction of one thread never waits on a Python lock held by
another (the database's own locks order the writers, as they order processes). A connection whose
thread ended is given to the next thread that needs one, so a thread pool's turnover does not open
new ones; ``close()`` closes them all.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from ..errors import StoreError

C = TypeVar("C")


class _Slot(threading.local):
    """One thread's view: its connection (None before its first use) and whether it is inside a
    store transaction."""

    conn = None
    in_transaction = False


class ThreadConnections(Generic[C]):
    """The connections of one store, each held by the thread that uses it.

    ``close``: closes one connection (never raises). ``idle``: whether a connection left by an ended
    thread is outside any transaction, so another thread may take it over (one that is not is closed).
    ``where``: the store, for the error a closed store raises.
    """

    def __init__(self, close: Callable[[C], None], idle: Callable[[C], bool], where: str) -> None:
        self._close, self._idle, self._where = close, idle, where
        self._slot = _Slot()
        self._lock = threading.Lock()
        self._owned: dict[threading.Thread, C] = {}
        self._closed = False

    @property
    def conn(self) -> C | None:
        """This thread's connection, or None (none yet, one it only borrows between uses, or the
        store closed)."""
        return None if self._closed else self._slot.conn

    @property
    def in_transaction(self) -> bool:
        """Whether this thread is inside a store transaction."""
        return self._slot.in_transaction

    @in_transaction.setter
    def in_transaction(self, value: bool) -> None:
        self._slot.in_transaction = value

    def lend(self, conn: C | None) -> None:
        """Make ``conn`` this thread's connection without owning it (borrowed from a pool, which
        closes it), or None when it goes back."""
        self._slot.conn = conn

    def own(self, conn: C) -> C:
        """Make ``conn`` this thread's own connection, closed by :meth:`close`; returns it. The
        connection the thread owned before must have been dropped (:meth:`drop`). Raises
        ``StoreError`` (``conn`` closed) once the store is closed."""
        with self._lock:
            if self._closed:
                self._close(conn)
                raise self.closed_error()
            self._owned[threading.current_thread()] = conn
        self._slot.conn = conn
        return conn

    def drop(self) -> C | None:
        """Forget this thread's own connection (the caller closes it, e.g. a broken one); returns it."""
        with self._lock:
            conn = self._owned.pop(threading.current_thread(), None)
        self._slot.conn = None
        return conn

    def left_behind(self) -> C | None:
        """A connection an ended thread owned, now this thread's own (see :meth:`own`), or None.
        Those found inside a transaction (their thread died in one) are closed, which rolls it back."""
        stale: list[C] = []
        taken = None
        with self._lock:
            for thread, conn in list(self._owned.items()):
                if thread.is_alive():
                    continue
                del self._owned[thread]
                if taken is None and self._idle(conn):
                    taken = conn
                else:
                    stale.append(conn)
            if taken is not None:
                self._owned[threading.current_thread()] = taken
        for conn in stale:
            self._close(conn)
        if taken is not None:
            self._slot.conn = taken
        return taken

    def every(self) -> list[C]:
        """Every connection owned now, whatever thread holds it."""
        with self._lock:
            return list(self._owned.values())

    def close(self) -> None:
        """Close every owned connection; afterwards :meth:`own` refuses. Call it once the threads
        using the store are done: a thread still inside an operation has it fail."""
        with self._lock:
            self._closed = True
            owned, self._owned = list(self._owned.values()), {}
        self._slot.conn = None
        for conn in owned:
            self._close(conn)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def closed_error(self) -> StoreError:
        """The error an operation on the closed store raises."""
        return StoreError(f"{self._where} was closed by this process; open it again to use it")
