"""The storage contract: :class:`RunStore` (its writes in :mod:`.writes`), and the errors it raises.

Everything outside ``relaypoint.store`` reads and writes runs through these methods; only a backend
module speaks SQL. Conventions shared by every method:

- Times are aware UTC :class:`~datetime.datetime` values, going in and coming out.
- JSON values go in as already-encoded JSON *text* (the caller encodes with
  :mod:`relaypoint.encoding`, so an unstorable value is refused naming its path) and come out
  decoded. Reads for display are lenient (damage reads ``{"unreadable": <raw text>}``); reads of
  what a step will consume are strict and raise :class:`StoreDamaged` naming what is damaged.
- A backend's own exceptions never leave a method: they are translated to the :class:`StoreError`
  subclasses below (each message one line a person can act on).
- Every write is one :class:`~relaypoint.store.writes.Change`, committed by :meth:`RunStore.commit`.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Hashable
from typing import ClassVar

from ..errors import RefusedTransition, StoreError
from .admin import RunAdmin
from .reads import RunReads
from .writes import RunWrites

# ---- errors -------------------------------------------------------------------------------------


class StoreMissing(StoreError):
    """No store at the URL (and ``create`` was not asked)."""


class NotAStore(StoreError):
    """The URL names something that is not a relaypoint store: a directory, an empty or foreign
    file, a corrupt database, or a store whose tables do not match its schema version."""


class StoreBusy(StoreError):
    """Another process held the store's write lock longer than the busy timeout."""


class RunLocked(RefusedTransition):
    """``transaction(run, skip_locked=True)``: another process holds the run in a transaction of its
    own (claiming it, committing its boundary); nothing was written."""


class StoreReadOnly(StoreError):
    """The store was opened read-only (or cannot be written) and a write was asked for."""


class StoreDamaged(StoreError):
    """A stored value or row cannot be read (damaged, or edited by hand); the message names it."""


class StoreNewer(StoreError):
    """The store was written by a newer relaypoint (a schema version this one does not know)."""


class StoreFull(StoreError):
    """The disk or the store is full; nothing was recorded."""


class StoreUnreachable(StoreError):
    """The database server cannot be reached: the connection was refused, timed out, or was lost
    (a write under way when it was lost is rolled back by the server)."""


class StoreDenied(StoreError):
    """The database server refused this user: bad credentials, or a permission the store needs."""


class BackendUnavailable(StoreError):
    """The URL names a backend this version of relaypoint does not provide (or an unknown scheme)."""


# ---- the contract -------------------------------------------------------------------------------


class RunStore(RunReads, RunWrites, RunAdmin):
    """A relaypoint store: runs, their step executions, outputs, checkpoints and events.

    Open one with :func:`relaypoint.store.open_store`. A store object may be used by many threads at
    once: each works on a connection of its own, and a :meth:`transaction` belongs to the thread that
    opened it (see :mod:`relaypoint.store.connections`). Every method may raise :class:`StoreBusy`,
    :class:`StoreFull` or :class:`StoreDamaged` besides what its docstring names.
    """

    schema_version: ClassVar[int]
    """The schema version of the stores this backend writes (each backend numbers its own)."""
    upgraded_from: int | None = None
    """The schema version this store had before opening it migrated it (0: opening made it); None
    when it was at ``schema_version`` already."""

    url: str
    """The URL the store was opened with, as given (to hand to another process)."""
    where: str
    """What messages name the store by (for SQLite: the file's path)."""
    readonly_reason: str | None
    """Why writes are unavailable (opened read-only, file not writable...), or None."""

    # ---- lifecycle

    @abstractmethod
    def close(self) -> None:
        """Release every thread's connection. The store is unusable afterwards: its methods raise
        :class:`StoreError`. Call it once the threads using the store are done."""

    def read_only_error(self, consequence: str = "actions that record something are unavailable") -> StoreReadOnly:
        """The error for a write this read-only store refuses (a :class:`StoreReadOnly`): where it
        is, why it is read-only (``readonly_reason``), and ``consequence``."""
        return StoreReadOnly(f"{self.where} is read-only ({self.readonly_reason}); {consequence}")

    @abstractmethod
    def data_version(self) -> Hashable:
        """A value that changes whenever anything is committed to the store, by this process or
        another (another process's commit may be seen a moment later: on PostgreSQL it arrives as a
        notification). Only comparable between calls on the same store object (from any thread)."""

    # ---- helpers shared by backends

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
