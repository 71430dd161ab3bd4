"""The store: the :class:`RunStore` contract and its backends, chosen by URL with :func:`open_store`.

Only this package speaks SQL; everything else calls :class:`RunStore` methods.
"""

from __future__ import annotations

from ..defaults import DURABILITIES, DURABILITY
from ..errors import InvalidValue
from .base import (BackendUnavailable, NotAStore, RunLocked, RunStore, StoreBusy, StoreDamaged, StoreDenied, StoreFull,
                   StoreMissing, StoreNewer, StoreReadOnly, StoreUnreachable)
from .reads import Lookup, RunState, StepBrief
from .url import InvalidStoreURL, parse
from .writes import (KEEP, Change, ClosePauses, Committed, Decide, NewCall, NewCheckpoint, NewEvent, NewRun, NewStep,
                     RunUpdate, StepEnd, StepStart, Superseded)


def open_store(url: str, *, create: bool = False, readonly: bool = False,
               durability: str = DURABILITY, pooled: bool = False) -> RunStore:
    """Open the store at ``url`` (a plain path, ``sqlite:///path``, ``postgresql://user@host/dbname``;
    see :mod:`relaypoint.store.url`).

    ``create``: make a new store when there is none (else :class:`StoreMissing`). ``readonly``:
    never write (a console on a file it cannot write). ``durability``: "full" (every commit is on
    disk when it returns: survives a power cut) or "normal" (survives a process crash; an OS crash
    may lose the last commits). ``pooled``: on PostgreSQL, hold no connection but borrow one from the
    process's shared pool for each transaction or read (for short, occasional work such as a
    heartbeat); a SQLite store always has its own. Raises the :class:`relaypoint.errors.StoreError` subclasses:
    ``StoreMissing``, ``NotAStore``, ``StoreNewer``, ``StoreDamaged``, ``BackendUnavailable``,
    ``InvalidStoreURL``...; ``InvalidValue`` for an unknown durability.
    """
    if durability not in DURABILITIES:
        raise InvalidValue(f"durability must be one of {', '.join(DURABILITIES)}, not {durability!r}")
    where = parse(url)
    if where.backend == "postgres":
        try:
            from .postgres import PostgresStore
        except ImportError as e:  # psycopg is an optional extra
            if (e.name or "").split(".")[0] not in ("psycopg", "psycopg_binary", "psycopg_c", "psycopg_pool"):
                raise
            raise BackendUnavailable("the PostgreSQL backend needs psycopg, which is not installed; "
                                     "pip install 'relaypoint[postgres]'") from None
        return PostgresStore(where.conninfo, where.schema, url=str(url), create=create, readonly=readonly,
                             durability=durability, pooled=pooled)
    from .sqlite import SqliteStore

    return SqliteStore(where.path, url=str(url), create=create, readonly=readonly, durability=durability)


__all__ = [
    "KEEP", "BackendUnavailable", "Change", "ClosePauses", "Committed", "Decide", "InvalidStoreURL", "Lookup",
    "NewCall", "NewCheckpoint", "NewEvent", "NewRun", "NewStep", "NotAStore", "RunLocked", "RunState", "RunStore",
    "RunUpdate", "StepBrief", "StepEnd", "StepStart", "StoreBusy", "StoreDamaged", "StoreDenied", "StoreFull",
    "StoreMissing", "StoreNewer", "StoreReadOnly", "StoreUnreachable", "Superseded", "open_store",
]
