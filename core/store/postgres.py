"""The PostgreSQL backend of :class:`~relaypoint.store.base.RunStore`: one schema of a database
(``relaypoint``, or ``?schema=NAME``), psycopg 3.

This module holds what is PostgreSQL's own: connecting (a connection per thread, a pool for
heartbeats), transactions under the schema's advisory lock (exclusive, or shared plus the run's row
lock for writes confined to one run), the boundary as one call of the schema's ``commit_boundary``
function, the change feed (LISTEN/NOTIFY while a console listens, else the server's write counters),
grants, and translating every psycopg error into a :class:`~relaypoint.errors.StoreError`. The
README's "Store schema: On PostgreSQL" explains the choices and their measurements.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import secrets
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import psycopg
from psycopg import errors as pgerrors
from psycopg.sql import SQL, Identifier
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from ..clock import from_text
from ..defaults import BUSY_TIMEOUT_SECONDS, DURABILITIES, DURABILITY
from ..errors import InvalidValue, StoreError, quoted
from ..models import Lease
from ..status import OPEN_STEPS, RunStatus, StepStatus
from .base import (Boundary, BoundaryResult, NewCheckpoint, NewRun, NewStep, NotAStore, RunLocked, StoreBusy,
                   StoreDamaged, StoreDenied, StoreFull, StoreMissing, StoreNewer, StoreReadOnly, StoreUnreachable)
from .schema import LEASE_COLUMNS
from .connections import ThreadConnections
from .migrations.postgres import FENCE_REFUSED, MIGRATIONS, SCHEMA_VERSION, channel, lock_key
from .url import postgres_where
from .sql import NESTED, PAUSED, RUN_FIELDS, STEP_FIELDS, TIME_FIELDS, UNDECIDED, event_detail, translated
from .sql_admin import SqlAdmin, id_column

# psycopg logs a rollback that failed on a lost connection as a warning, which Python prints on stderr
# when the application configured no logging: a second, raw line beside the error raised and said here
# (and, in the console, over its screen).
logging.getLogger("psycopg").addHandler(logging.NullHandler())

APP_ID = "relaypoint"
CONNECT_TIMEOUT_SECONDS = 10
SILENT_PEER_SECONDS = 10
"""A peer silent this long is given up on. By this client, the server (TCP keepalives and
``tcp_user_timeout``): a worker whose host was cut off from the server gets ``StoreUnreachable``
and can say so and stop, instead of waiting in a read forever (or for the kernel's 15 minutes of
retransmissions). By the server, this client inside a transaction
(``idle_in_transaction_session_timeout``): a host cut off, or a process stopped, while it holds
the store's write lock does not keep every other writer of the store waiting."""

# The first key of the schema's advisory lock (the second is a hash of the schema name): "RPNT".
LOCK_CLASS = 0x52504E54
POOL_MAX_SIZE = 4
"""Connections a process's pool for one store holds at most (heartbeat renewals: one short transaction
each every lease/3 seconds, serialized by the schema's lock anyway)."""
PROBE_SECONDS = 2.0
"""How long a new listener waits for its own test notification before concluding notifications do not
reach it (normally they take a millisecond)."""
_PROBE = "probe "

# Free text a person reads (never matched on): PostgreSQL text cannot hold NUL, so it is shown as U+FFFD.
FREE_TEXT_FIELDS = {"error", "traceback"}
_LOCK = "SELECT pg_advisory_xact_lock(%s, %s)"
_LOCK_SHARED = "SELECT pg_advisory_xact_lock_shared(%s, %s)"
# A run's transaction, after the schema's lock (shared; the order every writer takes them in): the
# run's row, which a boundary's fenced update locks too.
_LOCK_RUN = "SELECT 1 FROM runs WHERE run_id = %s FOR UPDATE"
_SKIP_LOCKED_RUN = "SELECT EXISTS (SELECT 1 FROM runs WHERE run_id = %(run)s FOR UPDATE SKIP LOCKED) AS taken, " \
                   "EXISTS (SELECT 1 FROM runs WHERE run_id = %(run)s) AS known"
# At the end of a transaction: notify the schema's channel when it wrote (it then has a transaction id)
# and a console listens (schema version 8).
_NOTIFY_IF_WRITTEN = ("SELECT pg_notify(%s, '') WHERE pg_current_xact_id_if_assigned() IS NOT NULL "
                      "AND EXISTS (SELECT 1 FROM listeners)")
# A console's listening connection, once its test notification came back: the schema's lock taken
# exclusively (so every writer under way commits first, and every later one sees the row), the rows
# of listeners whose connection is gone dropped, its own added.
_LISTENERS_GONE = "DELETE FROM listeners l WHERE NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = l.pid)"
_LISTENING = ("INSERT INTO listeners (pid) VALUES (pg_backend_pid()) "
              "ON CONFLICT (pid) DO UPDATE SET since = excluded.since")
_NOT_LISTENING = "DELETE FROM listeners WHERE pid = pg_backend_pid()"
_RUN_INSERT = (
    "INSERT INTO runs (run_id, workflow, status, parent_run_id, forked_from_step, fingerprint, created_at, "
    "updated_at, current_step, steps_done, steps_total, lease_token, lease_pid, lease_pid_start, lease_host, "
    "lease_expires_at, heartbeat_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)")
_INPUT_INSERT = "INSERT INTO run_inputs (run_id, input) VALUES (%s, %s)"
_DEFINITION_INSERT = ("INSERT INTO definitions (fingerprint, definition) VALUES (%s, %s) "
                      "ON CONFLICT (fingerprint) DO NOTHING")
_OUTPUT_INSERT = ("INSERT INTO outputs (run_id, seq, value) VALUES (%s, %s, %s) "
                  "ON CONFLICT (run_id, seq) DO UPDATE SET value = excluded.value")
_CHECKPOINT_INSERT = ("INSERT INTO checkpoints (run_id, seq, step, kind, created_at, reason, state, deadline_at, "
                      "paused_seq) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING checkpoint_id")
# A boundary's document, output and checkpoint state (schema version 7); a start's document, input,
# definition and start checkpoint state, then its first boundary's.
_COMMIT_BOUNDARY = "SELECT commit_boundary(%s::json, %s, %s) AS checkpoint_id"
# A start's document: the run's row (as _RUN_INSERT less updated_at), its planned executions (as
# arrays, in the order of _step_values), its start checkpoint (less its state); the run_start type.
_RUN_START_FIELDS = ("run", "workflow", "status", "parent_run", "forked_from", "fingerprint", "created_at",
                     "current_step", "steps_done", "steps_total", *LEASE_COLUMNS)
_STEP_ARRAYS = ("s_seqs", "s_names", "s_iterations", "s_agents", "s_parents", "s_statuses", "s_attempts", "s_options",
                "s_keys")
_START_CHECKPOINT_FIELDS = ("c_run", "c_seq", "c_step", "c_kind", "c_at", "c_reason", "c_deadline")
_START_RUN = "SELECT start_run(%s::json, %s, %s, %s, %s::json, %s, %s) AS checkpoint_id"


# ---- error translation --------------------------------------------------------------------------


def _one_line(e: BaseException) -> str:
    diag = getattr(e, "diag", None)
    text = (getattr(diag, "message_primary", None) or str(e) or type(e).__name__).strip()
    return " ".join(text.split())


def _close(conn: psycopg.Connection) -> None:
    try:
        conn.close()
    except psycopg.Error:
        pass


def _idle(conn: psycopg.Connection) -> bool:
    """Whether ``conn`` is usable and outside any transaction (another thread may take it over)."""
    return not (conn.closed or conn.broken) and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


_registry_lock = threading.Lock()
_commits: dict[tuple[str, str], int] = {}
_pools: dict[tuple[str, str], tuple[ConnectionPool, int]] = {}


def _committed(key: tuple[str, str]) -> None:
    """Count a commit to the store ``key`` (conninfo, schema) made by this process: its stores see it
    in ``data_version`` at once, before the notification of it comes back from the server."""
    with _registry_lock:
        _commits[key] = _commits.get(key, 0) + 1


def _commits_here(key: tuple[str, str]) -> int:
    with _registry_lock:
        return _commits.get(key, 0)


def _join_pool(conninfo: str, settings: dict[str, Any], name: str) -> ConnectionPool:
    """This process's pool of connections to ``conninfo`` with ``settings`` (psycopg.connect's keyword
    arguments), made at its first user (connections are opened when first borrowed, at most
    ``POOL_MAX_SIZE``). Each call must be matched by one :func:`_leave_pool`."""
    key = (conninfo, repr(sorted(settings.items())))
    with _registry_lock:
        pool, users = _pools.get(key, (None, 0))
        if pool is None:
            pool = ConnectionPool(conninfo, kwargs=settings, min_size=0, max_size=POOL_MAX_SIZE, open=True,
                                  name=name, timeout=CONNECT_TIMEOUT_SECONDS, num_workers=1)
        _pools[key] = (pool, users + 1)
        return pool


def _leave_pool(pool: ConnectionPool) -> None:
    """One user of ``pool`` is done; the last closes it (and its connections)."""
    with _registry_lock:
        for key, (shared, users) in list(_pools.items()):
            if shared is pool:
                if users > 1:
                    _pools[key] = (pool, users - 1)
                    return
                del _pools[key]
                break
    pool.close()


class PostgresStore(SqlAdmin):
    """A relaypoint store in one schema of a PostgreSQL database.

    ``conninfo``: the libpq URL of the database; ``schema``: the schema holding the store.
    ``create``: make the schema and its tables when there are none (the database must exist);
    otherwise a missing store is ``StoreMissing``. ``readonly``: every transaction read-only.
    ``durability``: "full" or "normal" (``synchronous_commit`` on or off). ``busy_timeout``: seconds
    a write waits for a lock (``lock_timeout``). ``pooled``: hold no connection, borrow one from the
    process's pool (see :func:`_join_pool`) for each transaction, boundary or read (each thread its own).

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
        parts = urlsplit(conninfo)
        try:
            self._server = f"{parts.hostname or 'localhost'}:{parts.port or 5432}"
        except ValueError:  # not one port number (see postgres_where)
            self._server = parts.netloc.rpartition("@")[2]
        self._user = parts.username
        self._dbname = (parts.path or "/").lstrip("/") or None
        self._where = postgres_where(conninfo, schema)
        self._threads: ThreadConnections[psycopg.Connection] = ThreadConnections(_close, _idle, self._where)
        self._key = (conninfo, schema)
        self._name = f"{APP_ID}-{schema}"
        """Its connections' ``application_name`` (shown in ``pg_stat_activity``; the server keeps 63
        bytes of it) and its pool's name."""
        self._channel = channel(schema)
        self._listener: psycopg.Connection | None = None
        self._feed: str | None = None  # how data_version learns of changes: "notifications" or "statistics"
        self._notified = 0
        self._watch_lock = threading.Lock()  # data_version's: the listener and its counts
        self._pool: ConnectionPool | None = None
        try:
            if pooled:
                self._pool = _join_pool(conninfo, self._settings(), self._name)
            else:
                self._connect()
        except psycopg.Error as e:
            raise self._connect_failure(e) from None
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
        silent_ms = SILENT_PEER_SECONDS * 1000
        options = (f"-c search_path={self.schema} -c timezone=UTC "
                   f"-c lock_timeout={int(self.busy_timeout * 1000)} "
                   f"-c synchronous_commit={'on' if self.durability == 'full' else 'off'} "
                   f"-c idle_in_transaction_session_timeout={silent_ms}")
        if self.readonly if readonly is None else readonly:
            options += " -c default_transaction_read_only=on"
        # Keepalives notice a server gone while a statement waits for its answer (nothing unacknowledged);
        # tcp_user_timeout, one gone while what was sent is unacknowledged (and bounds the keepalives).
        return {"autocommit": True, "row_factory": dict_row, "options": options,
                "connect_timeout": CONNECT_TIMEOUT_SECONDS, "application_name": self._name,
                "keepalives": 1, "keepalives_idle": SILENT_PEER_SECONDS // 2, "keepalives_interval": 1,
                "keepalives_count": SILENT_PEER_SECONDS // 2, "tcp_user_timeout": silent_ms}

    def _connect(self) -> None:
        self._threads.own(psycopg.connect(self.conninfo, **self._settings()))

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
            return self._connect_failure(e)
        return StoreBusy(f"{self._where}: the {POOL_MAX_SIZE} shared connections of this process stayed in use "
                         f"for {CONNECT_TIMEOUT_SECONDS} s; try again")

    def _connect_failure(self, e: psycopg.Error) -> StoreError:
        """One line for a connection that could not be made (libpq's message is several)."""
        msg = _one_line(e)
        detail = re.sub(r"^connection failed: (connection to server at .*?, port \d+ failed: )?", "", msg)
        detail = detail.replace("FATAL: ", "")
        server = f"the PostgreSQL server at {self._server}"
        if re.search(r'database ".*" does not exist', msg):
            db = self._dbname or self._user or "?"
            return StoreMissing(f"{server} has no database {db!r}; create it (createdb {db}) or point --db at "
                                "another database")
        if re.search(r'role ".*" does not exist', msg):
            return StoreDenied(f"{server} has no user {self._user or '(default)'!r}; name an existing user in the "
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

    def _close_quietly(self) -> None:
        """Close this thread's own connection (a broken one, before reconnecting)."""
        conn = self._threads.drop()
        if conn is not None:
            _close(conn)

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
        meta = {r["key"]: r["value"] for r in self.conn.execute("SELECT key, value FROM meta")}
        if meta.get("app") != APP_ID:
            raise NotAStore(f"schema {self.schema} of {self._database()} is not a relaypoint store")
        text = meta.get("schema_version")
        try:
            version = int(text)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            version = 0
        if version < 1:
            raise StoreDamaged(f"{self._where} has an unreadable schema version {text!r}; it cannot be opened safely")
        return version

    def _database(self) -> str:
        return self._where.rsplit("/", 1)[0]

    def _check_and_migrate(self, create: bool) -> None:
        catalog = self._catalog()
        # A schema this user may not use is left out of its search_path silently: say so instead.
        if catalog is not None and not catalog["usage"]:
            raise StoreDenied(f"{self._where}: {self._user or 'this user'} may not use schema {self.schema}; "
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
            self._readonly_reason = f"{self._user or 'this user'} may only read schema {self.schema}; " \
                                    f"{self._grant_hint()}"

    def _grant_hint(self) -> str:
        """What to do about a privilege this store's user lacks."""
        return f"the schema's owner can grant what relaypoint needs: `relaypoint --db URL migrate --grant " \
               f"{self._user or 'USER'}`"

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
            user = self._user or "this user"
            if version == 0:
                raise StoreDenied(f"no relaypoint store at {self._where}, and {user} may not make one ({_one_line(e)}); "
                                  "make it once as a user with CREATE on the database (or on the schema): "
                                  "`relaypoint --db URL migrate`") from None
            who = owner["tableowner"] if owner else "the owner of its tables"
            raise StoreDenied(f"{self._where} has store schema version {version} and needs an upgrade to version "
                              f"{SCHEMA_VERSION}, which only the owner of its tables may make ({_one_line(e)}): run "
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
                raise InvalidValue(f"the server at {self._server} has no role {quoted(role)}; create it first "
                                   "(CREATE ROLE ... LOGIN)") from None

    # ---- properties and lifecycle

    @property
    def where(self) -> str:
        """user@host:port/dbname/schema (never the password)."""
        return self._where

    def close(self) -> None:
        """Close every thread's connection and the listener's, and leave the pool."""
        self._threads.close()
        with self._watch_lock:
            if self._listener is not None:
                try:
                    self._listener.execute(_NOT_LISTENING)  # else dropped by the next console's _listen
                except psycopg.Error:
                    pass
                self._listener.close()
                self._listener = None
        if self._pool is not None:
            _leave_pool(self._pool)
            self._pool = None

    def translate(self, e: psycopg.Error) -> StoreError:
        """One line for an error psycopg raised on this store."""
        msg = _one_line(e)
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
            if self._in_transaction:
                raise StoreUnreachable(f"the connection to {self._where} was lost in a transaction; it was not "
                                       "recorded")
            if self._threads.closed:
                raise self._threads.closed_error()
            self._close_quietly()
            if self._threads.left_behind() is not None:  # an ended thread's, set up already
                return
            try:
                self._connect()
            except psycopg.Error as e:
                raise self._connect_failure(e) from None

    @contextmanager
    def _write(self, run: str | None, skip_locked: bool) -> Iterator[None]:
        if self._in_transaction:
            raise RuntimeError(NESTED)
        with self._connection() as conn:
            self._in_transaction = True
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
                    conn.execute(_NOTIFY_IF_WRITTEN, (self._channel,))
            finally:
                self._in_transaction = False
        _committed(self._key)

    @contextmanager
    def transaction(self, run: str | None = None, *, skip_locked: bool = False) -> Iterator[None]:
        if self.readonly:
            raise self.read_only_error()
        try:
            with self._write(run, skip_locked):
                yield
        except psycopg.Error as e:
            raise self.translate(e) from None

    def data_version(self) -> tuple[str, int, int]:
        """How the store changes are learnt (``change_feed``), the commits of this process to the store,
        and the notifications received (or, without notifications, the rows the schema's tables had
        written per the server's statistics). See the module docstring. One thread at a time reads
        the listener."""
        with self._watch_lock:
            return self._version()

    def _version(self) -> tuple[str, int, int]:
        if self._feed is None:
            self._listen()
        here = _commits_here(self._key)
        if self._feed == "notifications":
            try:
                self._drain(0)
                return "notifications", here, self._notified
            except psycopg.Error:  # the listener's connection was lost: notifications may have been missed
                self._listener.close()
                self._listener, self._feed = None, None
                self._notified += 1
                return self._version()
        with self._connection() as conn:
            row = conn.execute("SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::bigint AS written "
                               "FROM pg_stat_user_tables WHERE schemaname = %s", (self.schema,)).fetchone()
        return "statistics", here, row["written"]

    @property
    def change_feed(self) -> str | None:
        """How ``data_version`` learns of changes: "notifications" (LISTEN), "statistics" (a query of
        the server's write counters per check, when notifications are unavailable), None before its
        first call."""
        return self._feed

    def _listen(self) -> None:
        """Open the listening connection and check that a notification sent on another connection
        reaches it; then record it in ``listeners``, so that writers notify (schema version 8). Else
        (it cannot connect, LISTEN or the record is refused, or nothing arrives within
        ``PROBE_SECONDS``: a pooler in transaction mode) use the statistics. The connection is never
        read-only (``readonly`` stores too): its record is its one write."""
        self._feed = "statistics"
        try:
            # keepalives: a lost server is noticed
            listener = psycopg.connect(self.conninfo, **self._settings(readonly=False))
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
                    listener.execute(_LOCK, self._lock_keys)
                    listener.execute(_LISTENERS_GONE)
                    listener.execute(_LISTENING)
                self._feed = "notifications"
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
        if self._in_transaction:
            raise RuntimeError(NESTED)
        self._ensure_connected()
        with self.conn.transaction():
            self.conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield

    def _exported(self, run_id: str, row: dict[str, Any]) -> dict[str, Any]:
        return row  # timestamptz columns read as aware datetimes already

    # ---- writes

    @translated
    def insert_run(self, run: NewRun) -> None:
        self.conn.execute(_RUN_INSERT, self._run_insert_values(run))
        self.conn.execute(_INPUT_INSERT, (run.run_id, run.input))
        self._keep_definition(run.fingerprint, run.definition)

    @staticmethod
    def _run_insert_values(run: NewRun) -> tuple[Any, ...]:
        at = _time(run.created_at)
        return (run.run_id, run.workflow, str(run.status), run.parent_run_id, run.forked_from_step, run.fingerprint,
                at, at, run.current_step, run.steps_done, run.steps_total, *_lease_values(run.lease))

    def _keep_definition(self, fingerprint: str, definition: str) -> None:
        self.conn.execute(_DEFINITION_INSERT, (fingerprint, definition))

    @translated
    def update_run(self, run_id: str, *, fence: str | None = None, **fields: Any) -> bool:
        if "definition" in fields:
            if "fingerprint" not in fields:
                raise TypeError("update_run: a definition is stored under its fingerprint: give both")
            self._keep_definition(fields["fingerprint"], fields.pop("definition"))
        names, values = _run_values(fields)
        return self.conn.execute(_run_update(names, fence is not None),
                                 (*values, run_id) if fence is None else (*values, run_id, fence)).rowcount == 1

    @translated
    def update_step(self, run_id: str, seq: int, **fields: Any) -> None:
        unknown = set(fields) - STEP_FIELDS
        if unknown or not fields:
            raise TypeError(f"update_step: unknown or no fields {sorted(unknown)} (known: {sorted(STEP_FIELDS)})")
        values = [_field_value(k, v) for k, v in fields.items()]
        self.conn.execute(f"UPDATE steps SET {', '.join(f'{k} = %s' for k in fields)} WHERE run_id = %s AND seq = %s",
                          [*values, run_id, seq])

    @translated
    def set_output(self, run_id: str, seq: int, json_text: str) -> None:
        self.conn.execute(_OUTPUT_INSERT, (run_id, seq, json_text))

    @translated
    def add_checkpoint(self, checkpoint: NewCheckpoint) -> int:
        return self.conn.execute(_CHECKPOINT_INSERT, self._checkpoint_values(checkpoint)).fetchone()["checkpoint_id"]

    @staticmethod
    def _checkpoint_values(c: NewCheckpoint) -> tuple[Any, ...]:
        return (c.run_id, c.seq, c.step, c.kind, _time(c.at), _free(c.reason), c.state, _time(c.deadline_at),
                c.paused_seq)

    @translated
    def cancel_open_steps(self, run_id: str, at: datetime) -> None:
        self.conn.execute(
            "UPDATE steps SET status = %s, finished_at = coalesce(finished_at, %s) "
            "WHERE run_id = %s AND status = ANY(%s::text[])",
            (StepStatus.CANCELLED.value, _time(at), run_id, sorted(str(s) for s in OPEN_STEPS)))

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

    # ---- the hot path

    def commit_boundary(self, boundary: Boundary) -> BoundaryResult:
        # The hot path: one statement, the schema's commit_boundary function, in its own transaction
        # (one round trip; the statements inside are planned once per connection: _migrate_3).
        return self._call_fenced(_COMMIT_BOUNDARY, self._boundary_params(boundary), boundary.run_id)

    def start_run(self, run: NewRun, steps: Sequence[NewStep], start: NewCheckpoint,
                  boundary: Boundary) -> BoundaryResult:
        # One statement, the schema's start_run function (schema version 5), in its own transaction.
        if boundary.run_id != run.run_id:
            raise ValueError(f"start_run: the boundary is of run {boundary.run_id}, not of {run.run_id}")
        columns: list[list[Any]] = [[] for _ in _STEP_ARRAYS]
        for s in steps:
            for column, value in zip(columns, self._step_values(run.run_id, s)[1:]):
                column.append(value)
        values, cp = self._run_insert_values(run), self._checkpoint_values(start)
        doc = {**dict(zip(_RUN_START_FIELDS, (*values[:7], *values[8:]))),  # updated_at is created_at
               **dict(zip(_STEP_ARRAYS, columns)),
               **dict(zip(_START_CHECKPOINT_FIELDS, (*cp[:6], cp[7]))),  # its state is an argument
               "lock1": self._lock_keys[0], "lock2": self._lock_keys[1]}
        params = (_document(doc), run.input, run.definition, cp[6], *self._boundary_params(boundary))
        return self._call_fenced(_START_RUN, params, run.run_id)

    def _call_fenced(self, statement: str, params: Sequence[Any], run_id: str) -> BoundaryResult:
        """One call of a schema function that writes a boundary of ``run_id`` in its own transaction
        and returns the boundary's checkpoint id; its refused fence (``FENCE_REFUSED``) is raised as
        :meth:`_refused` says, nothing written."""
        if self.readonly:
            raise self.read_only_error()
        if self._in_transaction:
            raise RuntimeError(NESTED)
        with self._connection() as conn:
            try:
                row = conn.execute(statement, params).fetchone()
            except psycopg.Error as e:
                if getattr(e, "sqlstate", None) != FENCE_REFUSED:
                    raise
                row = None
        if row is None:
            raise self._refused(run_id)
        _committed(self._key)
        return BoundaryResult(checkpoint_id=row["checkpoint_id"])

    def _boundary_params(self, b: Boundary) -> tuple[str, str | None, str | None]:
        """The arguments of the schema's ``commit_boundary`` function for boundary ``b``: its document
        (the ``boundary`` type's fields, as JSON), its output and its checkpoint's state."""
        ended, started, cp = b.ended, b.started, b.checkpoint
        fields = {"updated_at": b.at, **b.run}
        names, _ = _run_values(fields)  # checks the names
        new = started is not None and isinstance(started.step, NewStep)
        step = started.step if new else None
        events: list[list[Any]] = [[], [], [], [], []]
        for ev in b.events:
            if ev.names_checkpoint and cp is not None and "checkpoint_id" not in ev.detail:
                rest = json.dumps(ev.detail, ensure_ascii=False)[1:] if ev.detail else "}"
                detail, names_it = (", " + rest if ev.detail else rest), True
            else:
                detail = event_detail({"checkpoint_id": None, **ev.detail} if ev.names_checkpoint else ev.detail)
                names_it = False
            for column, value in zip(events, (ev.kind, ev.step, _free(ev.actor), detail, names_it)):
                column.append(value)
        doc = {"run": b.run_id, "fence": b.fence, "at": _time(b.at), "fields": list(names),
               "status": str(fields["status"]) if "status" in fields else None,
               "updated_at": _time(fields["updated_at"]), "current_step": fields.get("current_step"),
               "steps_done": fields.get("steps_done"), "steps_total": fields.get("steps_total"),
               "error": _free(fields.get("error")), "fingerprint": fields.get("fingerprint"),
               "suspect_deaths": fields.get("suspect_deaths"),
               **dict(zip(LEASE_COLUMNS, _lease_values(fields.get("lease")))),
               "ev_kinds": events[0], "ev_steps": events[1], "ev_actors": events[2], "ev_details": events[3],
               "ev_names": events[4], "lock1": self._lock_keys[0], "lock2": self._lock_keys[1]}
        if ended is not None:
            doc.update(end_seq=ended.seq, end_status=str(ended.status), end_error=_free(ended.error),
                       end_traceback=_free(ended.traceback))
        if started is not None:
            doc.update(start_seq=step.seq if new else started.step, start_attempt=started.attempt, new=new)
        if step is not None:
            doc.update(new_name=step.name, new_iteration=step.iteration, new_agent=step.agent, new_parent=step.parent,
                       new_options=step.options, new_key=step.idempotency_key)
        if cp is not None:
            doc.update(cp_kind=cp.kind, cp_run=cp.run_id, cp_seq=cp.seq, cp_step=cp.step, cp_at=_time(cp.at),
                       cp_reason=_free(cp.reason), cp_deadline=_time(cp.deadline_at), cp_paused=cp.paused_seq)
        return (_document(doc), None if ended is None else ended.output_json, None if cp is None else cp.state)


# ---- conversions --------------------------------------------------------------------------------


def _dialect(sql: str) -> str:
    """A statement written with ``?`` placeholders (the shared queries of :mod:`.sql`) in psycopg's ``%s``."""
    return sql.replace("?", "%s") if "?" in sql else sql


def _document(fields: dict[str, Any]) -> str:
    """A boundary's or a start's fields as the JSON document the schema's functions read (version 7):
    store times (see :func:`_time`) as ISO 8601 text."""
    return json.dumps(fields, ensure_ascii=False, separators=(",", ":"), default=datetime.isoformat)


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


def _field_value(name: str, value: Any) -> Any:
    if name in TIME_FIELDS:
        return _time(value)
    if name in FREE_TEXT_FIELDS:
        return _free(value)
    return value.value if isinstance(value, (RunStatus, StepStatus)) else value


def _run_values(fields: dict[str, Any]) -> tuple[tuple[str, ...], list[Any]]:
    unknown = fields.keys() - RUN_FIELDS
    if unknown or not fields:
        raise TypeError(f"update_run: unknown or no fields {sorted(unknown)} (known: {sorted(RUN_FIELDS)})")
    values: list[Any] = []
    for k, v in fields.items():
        if k == "lease":
            values += _lease_values(v)
        else:
            values.append(_field_value(k, v))
    return tuple(fields), values


@functools.lru_cache(maxsize=64)
def _run_update(names: tuple[str, ...], fenced: bool) -> str:
    columns = [c for k in names for c in (LEASE_COLUMNS if k == "lease" else (k,))]
    sql = f"UPDATE runs SET {', '.join(f'{c} = %s' for c in columns)} WHERE run_id = %s"
    return sql + " AND lease_token = %s" if fenced else sql
