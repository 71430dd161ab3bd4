"""Group commit: the changes of many threads committed in shared transactions, one durable flush
(one fsync at ``full``) for each group, as PostgreSQL's WAL flush serves every transaction waiting
on it.

A thread that commits while another is committing waits; the group is whatever waited during the
transaction before it (no fixed delay: a change that finds no transaction under way commits at
once, alone). The first waiter leads the next group: it writes every change of the group in one
transaction on its own connection, then wakes each member with its own result. Nothing is
acknowledged before the transaction holding it is committed; a change refused inside the group
fails alone (the backend rolls it back to a savepoint), and a failure of the group's transaction
fails every member with nothing written.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

C = TypeVar("C")
R = TypeVar("R")


class _Member(Generic[C, R]):
    """One change waiting in a group: its outcome once the group is written, or the call to lead."""

    __slots__ = ("change", "result", "error", "done", "lead", "woken")

    def __init__(self, change: C) -> None:
        self.change = change
        self.result: R | None = None
        self.error: BaseException | None = None
        self.done = self.lead = False
        self.woken = threading.Event()


class GroupCommit(Generic[C, R]):
    """Commits changes of many threads in groups through ``write``.

    ``write(changes)`` writes a group in one transaction and returns, in order, each change's result
    or the exception that refused it alone; an exception it raises fails the whole group (nothing
    of it was committed).
    """

    def __init__(self, write: Callable[[Sequence[C]], list[R | BaseException]]) -> None:
        self._write = write
        self._lock = threading.Lock()
        self._waiting: list[_Member[C, R]] = []
        self._leading = False

    def commit(self, change: C) -> R:
        """Commit ``change`` in the next group and return its result once that group is committed;
        raises the exception that refused it, or the one that failed its group."""
        me: _Member[C, R] = _Member(change)
        with self._lock:
            self._waiting.append(me)
            if not self._leading:
                self._leading = me.lead = True
        if not me.lead:
            me.woken.wait()
        if not me.done:
            self._lead()
        if me.error is not None:
            raise me.error
        return me.result  # type: ignore[return-value]

    def _lead(self) -> None:
        """Write the group that waited, wake its members, and hand the lead to the first of the next."""
        with self._lock:
            group, self._waiting = self._waiting, []
        try:
            outcomes: Sequence[R | BaseException] = self._write([m.change for m in group])
        except BaseException as e:  # the group's transaction failed: nothing of it was committed
            outcomes = [e] * len(group)
        with self._lock:
            for member, outcome in zip(group, outcomes):
                if isinstance(outcome, BaseException):
                    member.error = outcome
                else:
                    member.result = outcome
                member.done = True
                member.woken.set()
            if self._waiting:
                self._waiting[0].lead = True
                self._waiting[0].woken.set()
            else:
                self._leading = False


class CommitCounts:
    """What one store object has committed since it was opened, for throughput figures (the
    worker's stats line): ``changes``, the step executions they ended (``boundaries``), and the
    ``transactions`` that held them (fewer than the changes where commits were grouped). Safe to
    update and read from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.changes = self.boundaries = self.transactions = 0

    def add(self, changes: int, boundaries: int, transactions: int = 1) -> None:
        """Count one committed transaction (or ``transactions``) holding ``changes`` that ended ``boundaries``."""
        with self._lock:
            self.changes += changes
            self.boundaries += boundaries
            self.transactions += transactions

    def read(self) -> tuple[int, int, int]:
        """(changes, boundaries, transactions), read together."""
        with self._lock:
            return self.changes, self.boundaries, self.transactions
