"""The PostgreSQL backend of :class:`~relaypoint.store.base.RunStore`: one schema of a database
(``relaypoint``, or ``?schema=NAME``), psycopg 3.

This module holds what is PostgreSQL's own: opening and migrating the schema, a connection per
thread (or one borrowed from the process's pool), transactions under the schema's advisory lock
(exclusive, or shared plus the run's row lock for writes confined to one run), a change as one call
of the schema's ``commit_change`` function, grants, and translating every psycopg error into a
:class:`~relaypoint.errors.StoreError`. Connecting is in :mod:`.pg_connect`, the change feed of
``data_version`` in :mod:`.pg_changes`. docs/reference/schema.md ("On PostgreSQL") explains the
choices and their measurements.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg import errors as pgerrors
from psycopg.sql import SQL, Identifier
from psycopg_pool import ConnectionPool, PoolTimeout

from ..clock import from_text
from ..defaults import BUSY_TIMEOUT_SECONDS, DURABILITIES, DURABILITY
from ..errors import InvalidValue, LeaseLost, StoreError, quoted
from ..models import Lease
from ..status import RunStatus
from .base import (NotAStore, RunLocked, StoreBusy, StoreDamaged, StoreDenied, StoreFull, StoreMissing, StoreNewer,
                   StoreReadOnly, StoreUnreachable)
from .commit import SqlCommit, event_detail
from .connections import ThreadConnections
from .group import CommitCounts
from .migrations import APP_ID, stored_version
from .migrations.postgres import (CALL_ARRAYS, CHECKPOINT_ARRAYS, FENCE_REFUSED, INSERTED_ARRAYS, LOCK_CLASS,
                                  MIGRATIONS, SCHEMA_VERSION, channel, lock_key)
from .pg_changes import NOTIFY_IF_WRITTEN, ChangeFeed, count_commit
from .pg_connect import (CONNECT_TIMEOUT_SECONDS, POOL_MAX_SIZE, Server, close_quietly, connect_settings, idle,
                         join_pool, leave_pool, one_line)
from .schema import LEASE_COLUMNS
from .sql import PAUSED, UNDECIDED, translated
from .sql_admin import SqlAdmin, id_column
from .url import postgres_where
from .writes import KEEP, Change, Committed, NewStep, Superseded

# psycopg logs a rollback that failed on a lost connection as a warning, which Python prints on stderr
# when the application configured no logging: a second, raw line beside the error raised and said here
# (and, in the console, over its screen).
logging.getLogger("psycopg").addHandler(logging.NullHandler())

_LOCK = "SELECT pg_advisory_xact_lock(%s, %s)"
_LOCK_SHARED = "SELECT pg_advisory_xact_lock_shared(%s, %s)"
# A run's transaction, after the schema's lock (shared; the order every writer takes them in): the
# run's row, which a boundary's fenced update locks too.
_LOCK_RUN = "SELECT 1 FROM runs WHERE run_id = %s FOR UPDATE"
_SKIP_LOCKED_RUN = "SELECT EXISTS (SELECT 1 FROM runs WHERE run_id = %(run)s FOR UPDATE SKIP LOCKED) AS taken, " \
                   "EXISTS (SELECT 1 FROM runs WHERE run_id = %(run)s) AS known"
_COMMIT_CHANGE = "SELECT * FROM commit_change(%s::json, %s, %s, %s::text[], %s::text[])"
"""A change: its document (the schema's ``change`` type), the run's input and a definition, its
outputs' and its checkpoints' states (version 10; the arrays as literals, see :func:`_text_array`)."""


class PostgresStore(SqlAdmin, SqlCommit):
    """A relaypoint store in one schema of a PostgreSQL database.

    ``conninfo``: the libpq URL of the database; ``schema``: the schema holding the store.
    ``create``: make the schema and its tables when there are none (the database must exist);
    otherwise a missing store is ``StoreMissing``. ``readonly``: every transaction read-only.
    ``durability``: "full" or "normal" (``synchronous_commit`` on or off). ``busy_timeout``: seconds
    a write waits for a lock (``lock_timeout``). ``pooled``: hold no connection, borrow one from the
    process's pool (see :func:`.pg_connect.join_pool`) for each transaction, boundary or read (each thread its own).

    Raises ``StoreUnreachable`` (no server, connection refused or lost), ``StoreDenied`` (bad
    credentials, missing permission), ``StoreMissing`` (no such database, or no store in the schema),
    ``NotAStore`` (a schema holding other tables), ``StoreNewer``, ``InvalidValue``.
    """

    schema_version = SCHEMA_VERSION

    def __init__(self, conninfo: str, schema: str, *, url: str | None = None, create: bool = False,
                 readonly: bool = False, durability: str = DURABILITY,
                 busy_timeout: float = BUSY_TIMEOUT_SECONDS, pooled: bool = False) -> None:
        if durability not in DURABILITIES:
            raise InvalidValue(f"durability must be one of {', '.join(DURABILITIES)}, not {durability!r}")
        self.conninfo = conninfo
        self.schema = schema
        self._url = conninfo if url is None else url
        self.durability = durability
        self.busy_timeout = busy_timeout
        self.readonly = readonly
        self._readonly_reason = "opened read-only" if readonly else None
        self._lock_keys = (LOCK_CLASS, lock_key(schema))
        self.rows_read = 0
        """Rows this store object has read and returned (a cost guard for tests)."""
        self._server = Server.of(conninfo)
        self._where = postgres_where(conninfo, schema)
        self._threads: ThreadConnections[psycopg.Connection] = ThreadConnections(close_quietly, idle, self._where)
        self._key = (conninfo, schema)
        self.commit_counts = CommitCounts()
        self._name = f"{APP_ID}-{schema}"
        """Its connections' ``application_name`` (shown in ``pg_stat_activity``; the server keeps 63
        bytes of it) and its pool's name."""
        self._channel = channel(schema)
        self._feed = ChangeFeed(self._key, self._channel, (_LOCK, self._lock_keys), self._listener, self._connection)
        self._pool: ConnectionPool | None = None
        try:
            if pooled:
                self._pool = join_pool(conninfo, self._settings(), self._name)
            else:
                self._connect()
        except psycopg.Error as e:
            raise self._server.refused(e) from None
        try:
            with self._connection():
                self._check_and_migrate(create)
        except StoreError:
            self.close()
            raise

    # ---- opening

    def _settings(self, readonly: bool | None = None) -> dict[str, Any]:
        """psycopg.connect's keyword arguments for this store's connections (read-only ones when
        ``readonly``, by default when the store is)."""
        return connect_settings(self.schema, self._name, busy_timeout=self.busy_timeout, durability=self.durability,
                                readonly=self.readonly if readonly is None else readonly)

    def _connect(self) -> None:
        self._threads.own(psycopg.connect(self.conninfo, **self._settings()))

    def _listener(self) -> psycopg.Connection:
        """A new connection for the change feed to listen on: never read-only (``readonly`` stores'
        too), since its record in ``listeners`` is its one write."""
        return psycopg.connect(self.conninfo, **self._settings(readonly=False))

    @property
    def conn(self) -> psycopg.Connection | None:
        """This thread's connection (see :mod:`.connections`; for a pooled store, the one borrowed
        while an operation lasts), or None."""
        return self._threads.conn

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection]:
        """The connection for one operation, psycopg's errors raised as ``StoreError``s: this store's own
        (reconnected if it broke), the one already borrowed (in a transaction), or one borrowed from
        the process's pool until the block ends. Raises ``StoreBusy`` when every pooled connection
        stays in use for ``CONNECT_TIMEOUT_SECONDS``, and what connecting raises."""
        if self._pool is not None and self.conn is not None:  # borrowed for the transaction under way
            yield self.conn
            return
        if self._threads.closed:
            raise self._threads.closed_error()
        if self._pool is None:
            self._ensure_connected()
            try:
                yield self.conn
            except psycopg.Error as e:
                raise self.translate(e) from None
            return
        try:
            conn = self._pool.getconn()
        except PoolTimeout:
            raise self._no_pooled_connection() from None
        self._threads.lend(conn)
        try:
            yield conn
        except psycopg.Error as e:
            raise self.translate(e) from None
        finally:
            self._threads.lend(None)
            self._pool.putconn(conn)  # a broken connection is closed, not kept

    def _no_pooled_connection(self) -> StoreError:
        """Why no pooled connection came: the server's own answer to a new connection, or a busy pool."""
        try:
            psycopg.connect(self.conninfo, **self._settings()).close()
        except psycopg.Error as e:
            return self._server.refused(e)
        return StoreBusy(f"{self._where}: the {POOL_MAX_SIZE} shared connections of this process stayed in use "
                         f"for {CONNECT_TIMEOUT_SECONDS} s; try again")

    def _catalog(self) -> dict[str, Any] | None:
        """What opening needs to know of the schema, in one query of the catalog (each query of a new
        connection's first ones costs milliseconds: its caches are cold): ``usage`` (may this user use
        it), ``tables`` (its tables' names), ``writes`` (may this user insert, update and delete in
        all of them but meta; None without tables). None when there is no such schema."""
        return self.conn.execute(
            "SELECT has_schema_privilege(n.oid, 'USAGE') AS usage, "
            "array(SELECT c.relname::text FROM pg_class c WHERE c.relnamespace = n.oid "
            "AND c.relkind IN ('r', 'p')) AS tables, "
            "(SELECT bool_and(has_table_privilege(c.oid, 'INSERT') AND has_table_privilege(c.oid, 'UPDATE') "
            "AND has_table_privilege(c.oid, 'DELETE')) FROM pg_class c WHERE c.relnamespace = n.oid "
            "AND c.relkind = 'r' AND c.relname <> 'meta') AS writes "
            "FROM pg_namespace n WHERE n.nspname = %s", (self.schema,)).fetchone()

    def _schema_version(self, catalog: dict[str, Any] | None) -> int:
        """0 for no store in the schema (``catalog``, see :meth:`_catalog`); else its version. Raises
        ``NotAStore``, ``StoreDamaged``."""
        if catalog is None or not catalog["tables"]:
            return 0
        if "meta" not in catalog["tables"]:
            raise NotAStore(f"schema {self.schema} of {self._database()} holds tables but is not a relaypoint "
                            "store (no meta table); name another schema with ?schema=NAME")
        return stored_version({r["key"]: r["value"] for r in self.conn.execute("SELECT key, value FROM meta")},
                              self._where, f"schema {self.schema} of {self._database()} is not a relaypoint store")

    def _database(self) -> str:
        return self._where.rsplit("/", 1)[0]

    def _check_and_migrate(self, create: bool) -> None:
        catalog = self._catalog()
        # A schema this user may not use is left out of its search_path silently: say so instead.
        if catalog is not None and not catalog["usage"]:
            raise StoreDenied(f"{self._where}: {self._server.user or 'this user'} may not use schema {self.schema}; "
                              f"{self._grant_hint()}")
        version = self._schema_version(catalog)
        if version > SCHEMA_VERSION:
            raise StoreNewer(f"{self._where} has store schema version {version}, newer than this relaypoint "
                             f"understands ({SCHEMA_VERSION}); upgrade relaypoint to open it")
        if version == SCHEMA_VERSION:
            self._note_a_reader(catalog["writes"])
            return
        if version == 0 and not create:
            raise StoreMissing(f"no relaypoint store at {self._where}; make one with `relaypoint --db URL migrate` "
                               "(or `demo`, `start`), or point --db (RELAYPOINT_DB) at an existing store")
        if self.readonly:
            if version == 0:
                raise StoreMissing(f"no relaypoint store at {self._where} (opened read-only, so none is made)")
            raise StoreReadOnly(f"{self._where} has store schema version {version} and needs an upgrade to version "
                                f"{SCHEMA_VERSION}, which writes to it; open it once as a user who can write it")
        self._migrate()

    def _note_a_reader(self, writes: bool | None) -> None:
        """A user who may read the tables but not write them (``writes``, see :meth:`_catalog`)
        browses: the store opens read-only, saying why, as a SQLite file this user cannot write does
        (instead of failing each action)."""
        if self.readonly:
            return
        if not writes:
            self.readonly = True
            self._readonly_reason = f"{self._server.user or 'this user'} may only read schema {self.schema}; " \
                                    f"{self._grant_hint()}"

    def _grant_hint(self) -> str:
        """What to do about a privilege this store's user lacks."""
        return f"the schema's owner can grant what relaypoint needs: `relaypoint --db URL migrate --grant " \
               f"{self._server.user or 'USER'}`"

    def _migrate(self) -> None:
        """Make or upgrade the store under the schema's lock (its name is no SQL keyword: the URL
        refused those). Raises ``StoreDenied`` when this user may not (naming who may)."""
        version, owner = 0, None
        try:
            with self.conn.transaction():
                self.conn.execute(_LOCK, self._lock_keys)
                # Re-read under the lock: another process may have made or migrated the store meanwhile.
                catalog = self._catalog()
                version = self._schema_version(catalog)
                # Made only when missing: a schema an administrator made (granting CREATE on it alone) is used as is.
                if catalog is None:
                    self.conn.execute(f"CREATE SCHEMA {self.schema}")
                if version > SCHEMA_VERSION:
                    raise StoreNewer(f"{self._where} has store schema version {version}, newer than this relaypoint "
                                     f"understands ({SCHEMA_VERSION}); upgrade relaypoint to open it")
                # who may upgrade it (the owner of its tables), named if this user may not
                owner = self.conn.execute("SELECT tableowner FROM pg_tables WHERE schemaname = %s AND tablename = "
                                          "'runs'", (self.schema,)).fetchone() if version else None
                for v in range(version + 1, SCHEMA_VERSION + 1):
                    for statement in MIGRATIONS[v - 1](self.schema):
                        self.conn.execute(statement)
                self.conn.execute("INSERT INTO meta (key, value) VALUES ('app', %s) ON CONFLICT (key) DO NOTHING",
                                  (APP_ID,))
                self.conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', %s) "
                                  "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (str(SCHEMA_VERSION),))
        except pgerrors.InsufficientPrivilege as e:
            user = self._server.user or "this user"
            if version == 0:
                raise StoreDenied(f"no relaypoint store at {self._where}, and {user} may not make one ({one_line(e)}); "
                                  "make it once as a user with CREATE on the database (or on the schema): "
                                  "`relaypoint --db URL migrate`") from None
            who = owner["tableowner"] if owner else "the owner of its tables"
            raise StoreDenied(f"{self._where} has store schema version {version} and needs an upgrade to version "
                              f"{SCHEMA_VERSION}, which only the owner of its tables may make ({one_line(e)}): run "
                              f"`relaypoint --db URL migrate` once as {who}") from None
        if version < SCHEMA_VERSION:
            self.upgraded_from = version

    def grant(self, role: str, *, writes: bool) -> None:
        """Let ``role`` use the schema and read its tables, and with ``writes`` also write them and
        move their id sequences on (a copy into the store sets them); the same for the tables and
        sequences later migrations by this user make (default privileges). Raises ``InvalidValue``
        for a role the server does not have, ``StoreDenied`` for a user who may not grant them (not
        the owner of the tables, or a member of its role)."""
        tables = "SELECT, INSERT, UPDATE, DELETE" if writes else "SELECT"
        statements = [f"GRANT USAGE ON SCHEMA {self.schema} TO {{}}",
                      f"GRANT {tables} ON ALL TABLES IN SCHEMA {self.schema} TO {{}}",
                      f"ALTER DEFAULT PRIVILEGES IN SCHEMA {self.schema} GRANT {tables} ON TABLES TO {{}}"]
        if writes:
            statements += [f"GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA {self.schema} TO {{}}",
                           f"ALTER DEFAULT PRIVILEGES IN SCHEMA {self.schema} GRANT USAGE, SELECT, UPDATE ON SEQUENCES "
                           "TO {}"]
        with self._connection() as conn:
            # Anyone else's GRANT grants nothing, with a warning only: check first.
            owner = conn.execute("SELECT pg_has_role(relowner, 'USAGE') AS owns, relowner::regrole::text AS name "
                                 "FROM pg_class WHERE oid = 'runs'::regclass").fetchone()
            if not owner["owns"]:
                raise StoreDenied(f"{self._where}: only the owner of its tables ({owner['name']}) may grant a role "
                                  f"what relaypoint needs; run `relaypoint --db URL migrate --grant ...` as "
                                  f"{owner['name']}")
            try:
                with conn.transaction():
                    for statement in statements:
                        conn.execute(SQL(statement).format(Identifier(role)))
            except pgerrors.UndefinedObject:
                raise InvalidValue(f"the server at {self._server.address} has no role {quoted(role)}; create it first "
                                   "(CREATE ROLE ... LOGIN)") from None

    # ---- properties and lifecycle

    @property
    def where(self) -> str:
        """user@host:port/dbname/schema (never the password)."""
        return self._where

    def close(self) -> None:
        """Close every thread's connection and the listener's, and leave the pool."""
        self._threads.close()
        self._feed.close()
        if self._pool is not None:
            leave_pool(self._pool)
            self._pool = None

    def translate(self, e: psycopg.Error) -> StoreError:
        """One line for an error psycopg raised on this store."""
        msg = one_line(e)
        w = self._where
        if isinstance(e, (pgerrors.LockNotAvailable, pgerrors.QueryCanceled)):
            return StoreBusy(f"{w} stayed busy for {self.busy_timeout:g} s (another process is writing); try again")
        if isinstance(e, (pgerrors.SerializationFailure, pgerrors.DeadlockDetected)):
            return StoreBusy(f"{w}: a concurrent write conflicted with this one ({msg}); nothing was recorded, "
                             "try again")
        if isinstance(e, pgerrors.ReadOnlySqlTransaction):
            return StoreReadOnly(f"{w} is read-only; actions that record something are unavailable")
        if isinstance(e, (pgerrors.DiskFull, pgerrors.OutOfMemory)):
            return StoreFull(f"{w}: the server's disk is full; nothing was recorded, free space and retry")
        if isinstance(e, pgerrors.InvalidCatalogName):
            return StoreMissing(f"no database {self._database().rsplit('/', 1)[-1]!r} on the server at "
                                f"{self._database()}; create it (createdb) or point --db at another database")
        if isinstance(e, (pgerrors.InvalidPassword, pgerrors.InvalidAuthorizationSpecification)):
            return StoreDenied(f"the server at {self._database()} refused the credentials ({msg}); check the user "
                               "and password (PGPASSWORD or ~/.pgpass)")
        if isinstance(e, pgerrors.InsufficientPrivilege):
            return StoreDenied(f"{w}: {msg}; {self._grant_hint()}")
        if isinstance(e, (pgerrors.UndefinedTable, pgerrors.UndefinedColumn, pgerrors.UndefinedFunction,
                          pgerrors.UndefinedObject)):  # an object: the boundary's type (version 7)
            return StoreDamaged(f"{w} does not match its schema version ({msg}); edited by hand?")
        if isinstance(e, psycopg.OperationalError) or self.conn is None or self.conn.broken or self.conn.closed:
            if isinstance(e, pgerrors.AdminShutdown) or (self.conn is not None and self.conn.closed):
                return StoreUnreachable(f"the connection to {w} was lost ({msg}); a write under way was not "
                                        "recorded")
            if "password" in msg or "authentication" in msg:
                return StoreDenied(f"the server at {self._database()} refused the credentials ({msg})")
            return StoreUnreachable(f"cannot use the PostgreSQL server of {w} ({msg})")
        return StoreError(f"{w}: {msg}")

    def _ensure_connected(self) -> None:
        """Reconnect when the connection broke (server restart, network), outside transactions."""
        if self.conn is None or self.conn.closed or self.conn.broken:
            if self._threads.in_transaction:
                raise StoreUnreachable(f"the connection to {self._where} was lost in a transaction; it was not "
                                       "recorded")
            if self._threads.closed:
                raise self._threads.closed_error()
            if (broken := self._threads.drop()) is not None:
                close_quietly(broken)
            if self._threads.left_behind() is not None:  # an ended thread's, set up already
                return
            try:
                self._connect()
            except psycopg.Error as e:
                raise self._server.refused(e) from None

    @contextmanager
    def _write(self, run: str | None = None, skip_locked: bool = False) -> Iterator[None]:
        with self._connection() as conn:
            self._threads.in_transaction = True
            try:
                with conn.transaction():
                    conn.execute(_LOCK if run is None else _LOCK_SHARED, self._lock_keys)
                    if run is not None and not skip_locked:
                        conn.execute(_LOCK_RUN, (run,))
                    elif run is not None:
                        row = conn.execute(_SKIP_LOCKED_RUN, {"run": run}).fetchone()
                        if row["known"] and not row["taken"]:
                            raise RunLocked(f"run {run} is held by another process's transaction (a claim or "
                                            "a boundary); nothing was written")
                    yield
                    conn.execute(NOTIFY_IF_WRITTEN, (self._channel,))
            finally:
                self._threads.in_transaction = False
        count_commit(self._key)

    def data_version(self) -> tuple[str, int, int]:
        """How the store's changes are learnt (``change_feed``), the commits of this process to the
        store, and the notifications received (or, without notifications, the rows the schema's
        tables had written per the server's statistics): see :mod:`.pg_changes`."""
        return self._feed.version()

    @property
    def change_feed(self) -> str | None:
        """How ``data_version`` learns of changes: "notifications" (LISTEN), "statistics" (the
        server's write counters), None before its first call."""
        return self._feed.kind

    # ---- query helpers

    DRIVER_ERROR = psycopg.Error
    # PostgreSQL hash-joins the join of the shared form with every checkpoint; a lateral join reads
    # each paused run's newest open pause by the run's key in checkpoints_paused instead.
    _OWED_PAUSES = ("runs r CROSS JOIN LATERAL (SELECT * FROM checkpoints p WHERE p.run_id = r.run_id AND "
                    f"{PAUSED} AND {UNDECIDED} ORDER BY p.checkpoint_id DESC LIMIT 1) c")

    def _rows(self, sql: str, params: Any = ()) -> list[dict[str, Any]]:
        with self._connection() as conn:
            rows = conn.execute(_dialect(sql), params).fetchall()
        self.rows_read += len(rows)
        return rows

    def _execute(self, sql: str, params: Any = ()) -> int:
        return self.conn.execute(_dialect(sql), params).rowcount

    def _execute_many(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        if rows:
            with self.conn.cursor() as cur:
                cur.executemany(_dialect(sql), rows)

    @staticmethod
    def _stamp(dt: datetime | None) -> datetime | None:
        return _time(dt)

    @staticmethod
    def _free(text: str | None) -> str | None:
        return _free(text)

    @staticmethod
    def _position_values(position: tuple[Any, str]) -> tuple[datetime | None, str]:
        created, run_id = position
        return _time(from_text(created) if isinstance(created, str) else created), run_id

    @staticmethod
    def _among(column: str, values: Sequence[Any], sql_type: str = "text") -> tuple[str, Any]:
        return f"{column} = ANY(?::{sql_type}[])", list(values)

    @staticmethod
    def _one_of(column: str, values: Sequence[Any], sql_type: str = "text") -> tuple[str, list[Any]]:
        return f"{column} = ANY(?::{sql_type}[])", [list(values)]

    @staticmethod
    def _same(column: str, sql_type: str = "text") -> str:
        return f"{column} IS NOT DISTINCT FROM ?::{sql_type}"

    def _insert_one(self, sql: str, params: Any, id_column: str) -> int | None:
        row = self.conn.execute(_dialect(f"{sql} RETURNING {id_column}"), params).fetchone()
        return None if row is None else int(row[id_column])

    @staticmethod
    def _json_text(expression: str) -> str:
        return f"to_json({expression})::text"

    @contextmanager
    def _snapshot(self) -> Iterator[None]:
        self._ensure_connected()
        with self.conn.transaction():
            self.conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield

    def _exported(self, run_id: str, row: dict[str, Any]) -> dict[str, Any]:
        return row  # timestamptz columns read as aware datetimes already

    # ---- copying between stores

    @translated
    def make_room(self, table: str, top: int, renumber: bool) -> int:
        column = id_column(table)
        sequence = f"pg_get_serial_sequence('{table}', '{column}')::regclass"
        shift = self._row(f"SELECT greatest((SELECT coalesce(max({column}), 0) FROM {table}), "
                          f"coalesce(pg_sequence_last_value({sequence}), 0)) AS id")["id"] if renumber else 0
        self._reserve(table, shift + top)
        return shift

    def _reserve(self, table: str, top: int) -> None:
        # The identity moves past ``top`` (never back).
        column = id_column(table)
        sequence = f"pg_get_serial_sequence('{table}', '{column}')::regclass"
        self._row(f"SELECT setval({sequence}, greatest(?, coalesce(pg_sequence_last_value({sequence}), 0), 1)) AS id",
                  (top,))

    def _allocate(self, table: str, count: int) -> list[int]:
        self.make_room(table, 0, True)  # the identity past every id there, given or not
        sequence = f"pg_get_serial_sequence('{table}', '{id_column(table)}')::regclass"
        return sorted(r["id"] for r in self._rows(f"SELECT nextval({sequence}) AS id FROM generate_series(1, ?)",
                                                  (count,)))

    # ---- changes

    def _commit_alone(self, change: Change) -> Committed:
        # One statement, the schema's commit_change function, in its own transaction: one round trip
        # (its statements are planned once per connection). A drift's chain is rebuilt first, in SQL
        # that reads it: a transaction of the run.
        if change.replaced is not None:
            committed = super()._commit_alone(change)
        else:
            with self._connection() as conn:
                committed = self._call(conn, change, [])
            count_commit(self._key)
        self.commit_counts.add(1, len(change.ended))
        return committed

    def _apply(self, c: Change) -> Committed:
        dropped = self._replace(c.run_id, c.replaced) if c.replaced is not None else []
        return self._call(self.conn, c, dropped)

    def _call(self, conn: psycopg.Connection, c: Change, dropped: list[str]) -> Committed:
        """Change ``c`` (its ``replaced`` chain aside) by one call of the schema's ``commit_change``
        on ``conn``; a refusal raised as :meth:`SqlCommit.commit` says."""
        try:
            row = conn.execute(_COMMIT_CHANGE, self._change_params(c)).fetchone()
        except psycopg.Error as e:
            if getattr(e, "sqlstate", None) != FENCE_REFUSED:
                raise
            row = {"o_checkpoint": None, "o_refused": e.diag.message_detail or ""}
        if (refused := row["o_refused"]) is not None:
            if refused == "decided":
                raise Superseded(f"checkpoint {c.decided.checkpoint_id} was already decided")
            if not refused:
                raise self._unknown(c.run_id)
            raise LeaseLost.of(c.run_id, cancelled=refused == RunStatus.CANCELLED)
        return Committed(checkpoint_id=row["o_checkpoint"], dropped=dropped)

    def _change_params(self, c: Change) -> tuple[str, str | None, str | None, str | None, str | None]:
        """The arguments of the schema's ``commit_change`` for ``c``: its document, then the values
        that may be long, as text (the new run's input, a definition, the outputs, the checkpoints'
        states)."""
        doc: dict[str, Any] = {"run": c.run_id, "fence": c.fence, "at": _time(c.at), "cancel_open": c.cancel_open,
                               "reopen": c.reopened}
        definition = None
        if (n := c.new) is not None:
            doc.update(new=True, n_workflow=n.workflow, n_status=str(n.status), n_parent_run=n.parent_run_id,
                       n_forked_from=n.forked_from_step, n_fingerprint=n.fingerprint, n_created_at=_time(n.created_at),
                       n_current_step=n.current_step, n_steps_done=n.steps_done, n_steps_total=n.steps_total,
                       **{f"n_{k}": v for k, v in zip(LEASE_COLUMNS, _lease_values(n.lease))})
            definition = n.definition
        if c.inserted:
            doc.update(zip(INSERTED_ARRAYS, zip(*(
                (s.seq, s.name, s.iteration, s.agent, s.parent, str(s.status), s.attempts, s.options, s.idempotency_key)
                for s in c.inserted))))
        if (d := c.decided) is not None:
            doc.update(d_checkpoint=d.checkpoint_id, d_decision=str(d.decision), d_by=_free(d.by),
                       d_comment=_free(d.comment), d_value=d.value_json)
        if (u := c.run) is not None:
            given = u.given()
            doc.update({k: (str(v) if k == "status" else _free(v) if k == "error" else v)
                        for k, v in given.items() if k != "lease"})
            if "lease" in given:
                doc.update(zip(LEASE_COLUMNS, _lease_values(given["lease"])))
            doc["fields"] = [*given, *(["updated_at"] if u.touch else [])]
            if u.definition is not KEEP:
                definition = u.definition
        if c.ended:
            doc.update(e_seqs=[e.seq for e in c.ended], e_statuses=[str(e.status) for e in c.ended],
                       e_errors=[_free(e.error) for e in c.ended], e_tracebacks=[_free(e.traceback) for e in c.ended])
        if c.marked:
            doc.update(m_seqs=list(c.marked), m_statuses=[str(v) for v in c.marked.values()])
        if (started := c.started) is not None:
            s = started.step
            new = isinstance(s, NewStep)
            doc.update(start_seq=s.seq if new else s, start_attempt=started.attempt, start_new=new)
            if new:
                doc.update(new_name=s.name, new_iteration=s.iteration, new_agent=s.agent, new_parent=s.parent,
                           new_options=s.options, new_key=s.idempotency_key)
        if c.outputs:
            doc["o_seqs"] = list(c.outputs)
        if c.calls:
            doc.update(zip(CALL_ARRAYS, zip(*(
                (k.seq, k.position, k.name, k.kind, str(k.status), k.attempt, k.value, _free(k.error), k.detail,
                 k.model, k.requests, k.input_tokens, k.output_tokens, _time(k.started_at)) for k in c.calls))))
        if c.progress:
            doc.update(g_seqs=list(c.progress), g_texts=[_free(t) for t in c.progress.values()])
        if (closed := c.closed) is not None:
            doc.update(x_decision=str(closed.decision), x_by=_free(closed.by))
        if c.checkpoints:
            doc.update(zip(CHECKPOINT_ARRAYS, zip(*(
                (cp.run_id, cp.seq, cp.step, cp.kind, _time(cp.at), _free(cp.reason), _time(cp.deadline_at),
                 cp.paused_seq) for cp in c.checkpoints))))
        if c.events:
            kinds, steps, actors, details, names = [], [], [], [], []
            for ev in c.events:
                if ev.names_checkpoint and c.checkpoints and "checkpoint_id" not in ev.detail:
                    rest = json.dumps(ev.detail, ensure_ascii=False)[1:] if ev.detail else "}"
                    detail, names_it = (", " + rest if ev.detail else rest), True
                else:
                    detail = event_detail({"checkpoint_id": None, **ev.detail} if ev.names_checkpoint else ev.detail)
                    names_it = False
                kinds.append(ev.kind)
                steps.append(ev.step)
                actors.append(_free(ev.actor))
                details.append(detail)
                names.append(names_it)
            doc.update(ev_kinds=kinds, ev_steps=steps, ev_actors=actors, ev_details=details, ev_names=names)
        return (_document(doc), None if c.new is None else c.new.input, definition, _text_array(c.outputs.values()),
                _text_array([cp.state for cp in c.checkpoints]))


# ---- conversions --------------------------------------------------------------------------------


def _dialect(sql: str) -> str:
    """A statement written with ``?`` placeholders (the shared queries of :mod:`.sql`) in psycopg's ``%s``."""
    return sql.replace("?", "%s") if "?" in sql else sql


def _document(fields: dict[str, Any]) -> str:
    """A boundary's or a start's fields as the JSON document the schema's functions read (version 7):
    store times (see :func:`_time`) as ISO 8601 text."""
    return json.dumps(fields, ensure_ascii=False, separators=(",", ":"), default=datetime.isoformat)


def _text_array(values: Iterable[str | None]) -> str | None:
    """``values`` as a PostgreSQL ``text[]`` literal, each element quoted (None when there are none)."""
    # Built here: psycopg adapts a list element by element, the dearest part of a boundary's arguments.
    items = ['"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' if v is not None else "NULL" for v in values]
    return "{" + ",".join(items) + "}" if items else None


def _time(dt: datetime | None) -> datetime | None:
    """A store time: aware UTC, truncated to milliseconds as the SQLite store keeps it (so a listing
    position written as store text names the row exactly)."""
    if dt is None:
        return None
    if not isinstance(dt, datetime):
        raise TypeError(f"store times are aware UTC datetimes, not {type(dt).__name__} ({dt!r})")
    dt = dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)
    return dt.replace(microsecond=dt.microsecond // 1000 * 1000)


def _free(text: str | None) -> str | None:
    """Free text a person reads (an error, a reason, a name of who decided): PostgreSQL text cannot
    hold NUL, which is stored as U+FFFD."""
    return text.replace("\x00", "\ufffd") if text is not None and "\x00" in text else text


def _lease_values(lease: Lease | None) -> tuple[Any, ...]:
    if lease is None:
        return (None,) * len(LEASE_COLUMNS)
    return (lease.token, lease.pid, lease.pid_start, lease.host, _time(lease.expires_at), _time(lease.heartbeat_at))
