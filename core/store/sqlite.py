"""The SQLite backend of :class:`~relaypoint.store.base.RunStore`: one file; opening it (checks, migrations
from :mod:`.migrations.sqlite`), its connections and transactions, and its dialect hooks.

WAL mode, a busy timeout, owner-only permissions on a new file, ``synchronous=FULL`` by default
(``durability="normal"``: ``NORMAL``). Every write happens in a ``BEGIN IMMEDIATE`` transaction, so
a change (:meth:`RunStore.commit`) commits as one unit. Each thread using a store has a connection of its own (see
:mod:`.connections`), and the writers of one process take turns on a lock (:class:`_Writers`).
Listing reads only the ``runs`` table (progress is kept there); step outputs live in their own
append-only table and are read one at a time, when asked for.
Every ``sqlite3`` error is translated here into a :class:`~relaypoint.errors.StoreError` subclass.
"""

from __future__ import annotations

import collections
import json
import os
import secrets
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from ..clock import from_text, to_text
from ..defaults import BUSY_TIMEOUT_SECONDS, DURABILITIES, DURABILITY
from ..errors import InvalidValue, RelaypointError, StoreError
from .base import NotAStore, StoreBusy, StoreDamaged, StoreFull, StoreMissing, StoreNewer, StoreReadOnly
from .commit import SqlCommit
from .connections import ThreadConnections
from .group import CommitCounts, GroupCommit
from .migrations import APP_ID, stored_version
from .migrations.sqlite import MIGRATIONS, SCHEMA_VERSION
from .schema import ROW_TIMES
from .sql import translated
from .sql_admin import SqlAdmin, id_column
from .writes import Change, Committed

SQLITE_HEADER_BYTES = 100


class SqliteStore(SqlAdmin, SqlCommit):
    """A relaypoint store in one SQLite file.

    ``path``: the file. ``url``: what it was opened with (default: the path). ``create``: make a new
    store if the file does not exist (owner-only, 0600); otherwise a missing file is
    ``StoreMissing``. ``readonly``: open without writing. ``durability``: "full" or "normal" (see
    :func:`relaypoint.store.open_store`). ``busy_timeout``: seconds a write waits for the lock.

    Raises ``StoreMissing``, ``NotAStore`` (a directory, an empty, foreign or corrupt file, tables
    not matching the schema version), ``StoreNewer``, ``StoreDamaged`` (an unreadable schema
    version), ``InvalidValue`` (an unknown durability); nothing is written to a file that could
    not be read as a store.
    """

    schema_version = SCHEMA_VERSION

    def __init__(self, path: str | os.PathLike, *, url: str | None = None, create: bool = False,
                 readonly: bool = False, durability: str = DURABILITY,
                 busy_timeout: float = BUSY_TIMEOUT_SECONDS) -> None:
        if durability not in DURABILITIES:
            raise InvalidValue(f"durability must be one of {', '.join(DURABILITIES)}, not {durability!r}")
        self.path = Path(path)
        self._url = str(path) if url is None else url
        self.durability = durability
        self.busy_timeout = busy_timeout
        self.readonly = readonly
        self._readonly_reason = "opened read-only" if readonly else None
        self._threads: ThreadConnections[sqlite3.Connection] = ThreadConnections(
            sqlite3.Connection.close, lambda conn: not conn.in_transaction, str(self.path))
        self._uri_query: str | None = None
        self._tracer: Callable[[str], None] | None = None
        self._watch: sqlite3.Connection | None = None  # data_version's connection, opened at its first call
        self._watch_lock = threading.Lock()
        self.rows_read = 0
        """Rows this store object has read and returned (a cost guard for tests)."""
        if self.path.is_file() and not readonly and not _writable(self.path):
            self.readonly = True
            self._readonly_reason = f"{self.path} (or its directory) is not writable by this user"
        if not self.path.exists():
            if not self.path.parent.is_dir():  # migrate would fail too: say what is missing
                raise StoreMissing(f"no relaypoint store at {self.path}: its directory {self.path.parent} does not "
                                   "exist; make the directory first, or point --db (RELAYPOINT_DB) at an existing store")
            if not create:
                raise StoreMissing(
                    f"no relaypoint store at {self.path}; make one with `relaypoint --db {self.path} migrate` "
                    "(or `demo`, `start`), or point --db (RELAYPOINT_DB) at an existing store"
                )
            self._create_file()
        elif self.path.is_dir():
            raise NotAStore(f"{self.path} is a directory, not a relaypoint store file")
        else:
            self._check_header()
        self._writers = _Writers.of(self.path, self)
        self.commit_counts = CommitCounts()
        self.group_commit: GroupCommit[Change, Committed] = GroupCommit(self._commit_group)
        """The commits of this store's threads, grouped (:mod:`.group`)."""
        try:
            self._connect("mode=ro" if self.readonly else None)
            try:
                self._check_and_migrate()
            except sqlite3.OperationalError:
                if not self.readonly:
                    raise
                # A WAL store read-only in a directory we cannot write: SQLite cannot make the
                # -shm file, so read the file as immutable (a snapshot as of opening).
                self.conn.close()
                self._connect("mode=ro&immutable=1")
                self._readonly_reason += "; showing a snapshot: changes made since are not seen until reopened"
                self._check_and_migrate()
        except sqlite3.Error as e:
            self._close_quietly()
            if isinstance(e, sqlite3.OperationalError) and ("locked" in str(e) or "busy" in str(e)):
                raise self.translate(e) from None
            raise NotAStore(f"{self.path} is not a readable SQLite database ({e}); "
                            "point --db at a relaypoint store") from None
        except StoreError:
            self._close_quietly()
            raise

    # ---- opening

    def _close_quietly(self) -> None:
        self._threads.close()

    def _connect(self, uri_query: str | None) -> None:
        """Open this thread's connection (the one opening checks and migrates the store through),
        replacing any it had; the other threads' connections open the same way (``uri_query``)."""
        old = self._threads.drop()
        if old is not None:
            old.close()
        self._uri_query = uri_query
        self._threads.own(self._open())

    def _open(self) -> sqlite3.Connection:
        """A new connection to the file, as :meth:`_connect` was asked for, with the tracer set."""
        if self._uri_query:
            # as_uri() percent-encodes the path: a '?', '#' or '%' in a file name is not read as URI syntax.
            conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?{self._uri_query}", uri=True,
                                   isolation_level=None, timeout=self.busy_timeout, check_same_thread=False)
        else:
            conn = sqlite3.connect(self.path, isolation_level=None, timeout=self.busy_timeout,
                                   check_same_thread=False)
        conn.set_trace_callback(self._tracer)
        return conn

    @property
    def conn(self) -> sqlite3.Connection:
        """This thread's connection to the file (see :mod:`.connections`), opened at its first use.
        Raises ``StoreError`` once the store is closed."""
        conn = self._threads.conn
        return conn if conn is not None else self._thread_connection()

    def _thread_connection(self) -> sqlite3.Connection:
        """A connection for a thread that has none: one an ended thread left, or a new one set as
        opening set its own (synchronous, foreign keys; journal_mode is the file's)."""
        if self._threads.closed:
            raise self._threads.closed_error()
        conn = self._threads.left_behind()
        if conn is not None:
            return conn
        try:
            conn = self._open()
            if not self.readonly:
                self._configure(conn)
        except sqlite3.Error as e:
            raise self.translate(e) from None
        return self._threads.own(conn)

    def _configure(self, conn: sqlite3.Connection) -> None:
        """The per-connection settings of a writable store's connection (after its migration)."""
        # FULL: a committed transaction is on disk when COMMIT returns (survives a power cut);
        # NORMAL in WAL: atomic always, durable from the next checkpoint (survives a process crash).
        conn.execute(f"PRAGMA synchronous={'FULL' if self.durability == 'full' else 'NORMAL'}")
        conn.execute("PRAGMA foreign_keys=ON")

    def _create_file(self) -> None:
        """Make a new, owner-only (0600) SQLite file at ``path`` atomically: it is written beside
        the path and linked into place, so no process ever sees it empty (an empty file is refused,
        never adopted: see :meth:`_check_header`). If another process links its file first, that
        one is used."""
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{secrets.token_hex(4)}.new")
        try:
            fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            os.fchmod(fd, 0o600)  # whatever the umask
            os.close(fd)
            conn = sqlite3.connect(tmp, isolation_level=None)
            try:
                conn.execute("PRAGMA journal_mode=WAL")  # writes the header: the file is a database now
            finally:
                conn.close()
            try:
                os.link(tmp, self.path)
            except FileExistsError:
                pass  # another process created the store first; the checks that follow apply to it
        except (OSError, sqlite3.Error) as e:
            raise StoreError(f"cannot create store {self.path}: {getattr(e, 'strerror', None) or e}") from None
        finally:
            tmp.unlink(missing_ok=True)

    def _check_header(self) -> None:
        # SQLite takes a file shorter than its 100-byte header for an empty database and would
        # write over it; longer files it checks itself. Never open() the file here: closing any
        # descriptor of it drops this process's SQLite locks (POSIX), and another process could
        # then delete the WAL under a live connection.
        size = self.path.stat().st_size
        if size == 0:  # relaypoint never leaves a store empty (see _create_file): this is someone's file
            raise NotAStore(f"{self.path} is an empty file, not a relaypoint store; delete it to let "
                            "relaypoint create a store there, or point --db at a store")
        if 0 < size < SQLITE_HEADER_BYTES:
            raise NotAStore(f"{self.path} is not a readable SQLite database (too short); "
                            "point --db at a relaypoint store")

    def _schema_version(self) -> int:
        return stored_version(dict(self.conn.execute("SELECT key, value FROM meta").fetchall()), str(self.path),
                              f"{self.path} is an SQLite file but not a relaypoint store")

    def _check_and_migrate(self) -> None:
        # Read before writing anything: a foreign or corrupt file must come out untouched.
        tables = {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        version = 0
        if tables:
            if "meta" not in tables:
                raise NotAStore(f"{self.path} is an SQLite file but not a relaypoint store (no meta table)")
            version = self._schema_version()
            if version > SCHEMA_VERSION:
                raise StoreNewer(
                    f"{self.path} has store schema version {version}, newer than this relaypoint "
                    f"understands ({SCHEMA_VERSION}); upgrade relaypoint to open it"
                )
        if self.readonly:
            if version < SCHEMA_VERSION:
                raise StoreReadOnly(
                    f"{self.path} has store schema version {version} and needs a one-time upgrade to version "
                    f"{SCHEMA_VERSION}, which writes to it; open it once as a user who can write it, or copy it "
                    "somewhere writable"
                )
            return
        self.conn.execute("PRAGMA journal_mode=WAL")
        if version < SCHEMA_VERSION:
            self._migrate()
        # After migrating: a migration rebuilding a parent table must not cascade foreign key checks.
        self._configure(self.conn)

    def _migrate(self) -> None:
        with self._write():
            # Re-read under the write lock: another process may have migrated meanwhile.
            conn = self.conn
            if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone() is None:
                conn.execute('CREATE TABLE "meta" ("key" TEXT PRIMARY KEY, "value" TEXT)')
                conn.execute("INSERT INTO meta (key, value) VALUES ('app', ?), ('schema_version', '0')", (APP_ID,))
            version = int(conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0])
            if version < SCHEMA_VERSION:
                self.upgraded_from = version
            for v in range(version + 1, SCHEMA_VERSION + 1):
                try:
                    for statement in MIGRATIONS[v - 1]:
                        conn.execute(statement)
                except sqlite3.OperationalError as e:  # rolled back: the file is left as it was
                    raise NotAStore(f"{self.path} says schema version {version} but its tables do not match "
                                    f"({e}; edited by hand?); it was left unchanged") from None
            conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))

    # ---- properties and lifecycle

    @property
    def where(self) -> str:
        return str(self.path)

    def close(self) -> None:
        """Close every thread's connection (and data_version's)."""
        self._threads.close()
        with self._watch_lock:
            if self._watch is not None:
                self._watch.close()
                self._watch = None

    def trace(self, callback: Callable[[str], None] | None) -> None:
        """Call ``callback`` with the text of every SQL statement this store runs, on any thread's
        connection (None: stop). For tests and guards that count statements; see also :attr:`rows_read`."""
        self._tracer = callback
        with self._watch_lock:
            for conn in [*self._threads.every(), *([self._watch] if self._watch is not None else [])]:
                conn.set_trace_callback(callback)

    def translate(self, e: sqlite3.Error) -> StoreError:
        """One line for an error SQLite raised on this store (busy, read-only, full, damaged)."""
        msg = str(e)
        if "locked" in msg or "busy" in msg:
            return StoreBusy(f"{self.path} stayed busy for {self.busy_timeout:g} s (another process or thread "
                             "is writing); try again")
        if "readonly" in msg:
            return StoreReadOnly(f"{self.path} is read-only; actions that record something are unavailable")
        if "full" in msg:
            return StoreFull(f"{self.path}: the disk or store is full; nothing was recorded, free space and retry")
        if isinstance(e, sqlite3.OperationalError) and "no such" not in msg:
            return StoreError(f"{self.path}: {msg}")
        return StoreDamaged(f"{self.path} could not be read ({msg}); it may be damaged: check it with "
                            "`sqlite3 FILE 'PRAGMA integrity_check'`")

    def _commit_alone(self, change: Change) -> Committed:
        # Concurrent commits of this store's threads share transactions, so one fsync serves many.
        return self.group_commit.commit(change)

    def _commit_group(self, changes: Sequence[Change]) -> list[Committed | BaseException]:
        """The changes of one group (:class:`.group.GroupCommit`) in one transaction, each under a
        savepoint of its own when there are several: a change refused (its fence, a checkpoint
        decided already, an unknown run) is rolled back alone and its refusal returned in its place.
        Raises what failed anything else (a statement, the commit), which leaves nothing of the
        group written."""
        outcomes: list[Committed | BaseException] = []
        with self._write():
            if len(changes) == 1:
                outcomes.append(self._apply(changes[0]))
            else:
                for change in changes:
                    self.conn.execute("SAVEPOINT change")
                    try:
                        outcomes.append(self._apply(change))
                    except RelaypointError as e:  # refusals are raised before a statement fails
                        self.conn.execute("ROLLBACK TO change")
                        outcomes.append(e)
                    self.conn.execute("RELEASE change")
        written = [c for c, o in zip(changes, outcomes) if not isinstance(o, BaseException)]
        self.commit_counts.add(len(written), sum(len(c.ended) for c in written))
        return outcomes

    @contextmanager
    def _write(self, run: str | None = None, skip_locked: bool = False) -> Iterator[None]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` as this process's one writer of the file (see
        :class:`_Writers`), rolled back on any exception (sqlite3 errors raw). One writer at a time:
        ``run`` and ``skip_locked`` change nothing here."""
        with self._writers:
            self.conn.execute("BEGIN IMMEDIATE")
            self._threads.in_transaction = True
            try:
                yield
                self.conn.execute("COMMIT")
            except BaseException:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise
            finally:
                self._threads.in_transaction = False

    @translated
    def data_version(self) -> tuple[int]:
        """SQLite's ``PRAGMA data_version`` on a connection of its own, which never writes: it
        changes with every commit of every other connection, this store's threads' included, and
        compares whatever thread asks."""
        with self._watch_lock:
            if self._watch is None:
                if self._threads.closed:
                    raise self._threads.closed_error()
                self._watch = self._open()
            return (self._watch.execute("PRAGMA data_version").fetchone()[0],)

    # ---- query helpers

    DRIVER_ERROR = sqlite3.Error

    def _rows(self, sql: str, params: Iterable[Any] = ()) -> list[dict[str, Any]]:
        cur = self.conn.execute(sql, tuple(params))
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, r)) for r in cur.fetchall()]
        self.rows_read += len(rows)
        return rows

    def _execute(self, sql: str, params: Iterable[Any] = ()) -> int:
        return self.conn.execute(sql, tuple(params)).rowcount

    def _execute_many(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        if len(rows) == 1:  # most parts of a boundary are one row: execute costs less than executemany
            self.conn.execute(sql, rows[0])
        else:
            self.conn.executemany(sql, rows)

    @staticmethod
    def _stamp(dt: datetime | None) -> str | None:
        return _text(dt)

    @staticmethod
    def _among(column: str, values: Sequence[Any], sql_type: str = "text") -> tuple[str, Any]:
        return f"{column} IN (SELECT value FROM json_each(?))", json.dumps(list(values))

    @staticmethod
    def _one_of(column: str, values: Sequence[Any], sql_type: str = "text") -> tuple[str, list[Any]]:
        # Listed, not json_each: the planner picks an index by the values (runs_by_workflow for runnable).
        return f"{column} IN ({', '.join('?' * len(values))})", list(values)

    @staticmethod
    def _same(column: str, sql_type: str = "text") -> str:
        return f"{column} IS ?"

    def _insert_one(self, sql: str, params: Any, id_column: str) -> int | None:
        cur = self.conn.execute(sql, tuple(params))
        return int(cur.lastrowid) if cur.rowcount == 1 else None

    @staticmethod
    def _json_text(expression: str) -> str:
        return f"json_quote({expression})"

    @staticmethod
    def _indexed_by(index: str) -> str:
        return f" INDEXED BY {index}"

    @contextmanager
    def _snapshot(self) -> Iterator[None]:
        self.conn.execute("BEGIN")  # in WAL mode, a read transaction sees one snapshot
        try:
            yield
        finally:
            self.conn.execute("COMMIT")

    def _exported(self, run_id: str, row: dict[str, Any]) -> dict[str, Any]:
        try:
            return {k: from_text(v) if k in ROW_TIMES else v for k, v in row.items()}
        except (ValueError, TypeError, AttributeError):
            raise StoreDamaged(f"run {run_id} in {self.path} has an unreadable time (edited by hand?); fix the row "
                               "or delete the run, then copy again") from None

    # ---- copying between stores

    @translated
    def make_room(self, table: str, top: int, renumber: bool) -> int:
        # A rowid table gives max + 1 next: nothing to move, and no room can be kept from another writer.
        column = id_column(table)
        return self._row(f"SELECT coalesce(max({column}), 0) AS id FROM {table}")["id"] if renumber else 0

    def _allocate(self, table: str, count: int) -> list[int]:
        # A rowid table gives max + 1 next: ids above every one there are free.
        first = self.make_room(table, 0, True) + 1
        return list(range(first, first + count))


# ---- conversions --------------------------------------------------------------------------------


def _text(dt: datetime | None) -> str | None:
    if dt is None:
        return None
    if not isinstance(dt, datetime):
        raise TypeError(f"store times are aware UTC datetimes, not {type(dt).__name__} ({dt!r})")
    return to_text(dt)


def _writable(path: Path) -> bool:
    # WAL mode writes beside the file (-wal, -shm), so the directory matters too.
    shm = path.with_name(path.name + "-shm")
    return os.access(path, os.W_OK) and (os.access(path.parent, os.W_OK) or os.access(shm, os.W_OK))


class _Writers:
    """This process's writers of one SQLite file, one at a time: each write transaction of any of
    its store objects and threads holds it from ``BEGIN IMMEDIATE`` to ``COMMIT``. SQLite lets one
    writer in anyway, but a writer kept out by its lock retries by sleeping (up to 100 ms at a time),
    so among busy threads one could wait seconds while the others take turns; here the writers
    go in the order they came (:class:`_Queue`) as soon as the one before commits. Other processes
    are still ordered by SQLite's lock and ``busy_timeout``. Waits up to the store's busy timeout,
    then raises ``StoreBusy``."""

    _registry: dict[tuple[int, int], _Queue] = {}
    _registry_lock = threading.Lock()

    def __init__(self, lock: _Queue, store: SqliteStore) -> None:
        self._lock, self._store = lock, store

    @classmethod
    def of(cls, path: Path, store: SqliteStore) -> _Writers:
        """The writers of the file at ``path`` (by its device and inode: one file under two names
        has one lock), for ``store``."""
        st = os.stat(path)
        with cls._registry_lock:
            lock = cls._registry.setdefault((st.st_dev, st.st_ino), _Queue())
        return cls(lock, store)

    def __enter__(self) -> None:
        if not self._lock.acquire(timeout=self._store.busy_timeout):
            raise self._store.translate(sqlite3.OperationalError("database is locked"))

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


class _Queue:
    """A lock taken in the order it was asked for: ``threading.Lock`` lets the thread that releases
    it take it straight back, so one busy thread could keep the others out for a long while."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._waiting: collections.deque[object] = collections.deque()
        self._held = False

    def acquire(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every thread that asked before, then hold the lock;
        False (not held, out of the queue) when the time ran out."""
        me = object()
        with self._changed:
            self._waiting.append(me)
            if not self._changed.wait_for(lambda: not self._held and self._waiting[0] is me, timeout):
                self._waiting.remove(me)
                self._changed.notify_all()  # the one after it may be first now
                return False
            self._waiting.popleft()
            self._held = True
            return True

    def release(self) -> None:
        with self._changed:
            self._held = False
            self._changed.notify_all()
