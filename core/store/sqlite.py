"""The SQLite store: schema, migrations, transactions and the queries the runtime and console use.

One file, WAL mode, a busy timeout, owner-only permissions on a new file. Every write happens in a
``BEGIN IMMEDIATE`` transaction (:meth:`Store.transaction`) so a step boundary commits as one unit.
Listing reads only the ``runs`` table (progress is kept there), never step outputs.
"""

from __future__ import annotations

import heapq
import itertools
import json
import os
import secrets
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlite_utils

from . import encoding
from .clock import from_text
from .errors import StoreError, UnknownRun
from .models import Checkpoint, Event, Lease, RunSummary, StepRecord
from .status import RunStatus, StepStatus

APP_ID = "relaypoint"
SQLITE_HEADER_BYTES = 100
SCHEMA_VERSION = 2
BUSY_TIMEOUT_SECONDS = 30.0

# Columns of ``runs`` a listing reads (no input, no definition).
SUMMARY_COLUMNS = (
    "run_id, workflow, status, parent_run_id, forked_from_step, created_at, updated_at, current_step, "
    "steps_done, steps_total, error, lease_token, lease_pid, lease_host, lease_expires_at, heartbeat_at, "
    "lease_pid_start"
)
# A pause is open until one of these decisions is recorded. Anything else in the column (a hand
# edit, damage) reads as undecided: a decision that cannot be read is never taken as an approval.
DECISIONS = ("approved", "rejected", "responded", "expired", "cancelled")
UNDECIDED = f"(decision IS NULL OR decision NOT IN {DECISIONS!r})"
PAUSE_KINDS = ("approval", "input", "orphan")

STEP_COLUMNS_NO_OUTPUT = (
    "position, name, status, attempts, options, error, traceback, started_at, finished_at, "
    "idempotency_key, output IS NOT NULL AS has_output"
)


def _migrate_1(db: sqlite_utils.Database) -> None:
    db["runs"].create(
        {
            "run_id": str, "workflow": str, "status": str, "input": str, "parent_run_id": str,
            "forked_from_step": str, "definition": str, "fingerprint": str, "created_at": str,
            "updated_at": str, "current_step": str, "steps_done": int, "steps_total": int, "error": str,
            "lease_token": str, "lease_pid": int, "lease_host": str, "lease_expires_at": str,
            "heartbeat_at": str,
        },
        pk="run_id",
        not_null={"workflow", "status", "input", "created_at", "updated_at", "steps_done", "steps_total"},
        defaults={"steps_done": 0, "steps_total": 0},
    )
    db["steps"].create(
        {
            "run_id": str, "position": int, "name": str, "status": str, "attempts": int, "options": str,
            "output": str, "error": str, "traceback": str, "started_at": str, "finished_at": str,
            "idempotency_key": str,
        },
        pk=("run_id", "position"),
        not_null={"name", "status", "attempts", "options", "idempotency_key"},
        defaults={"attempts": 0, "options": "{}"},
        foreign_keys=[("run_id", "runs", "run_id")],
    )
    db["checkpoints"].create(
        {
            "checkpoint_id": int, "run_id": str, "position": int, "step": str, "kind": str,
            "created_at": str, "reason": str, "state": str, "decision": str, "decided_by": str,
            "decided_at": str, "comment": str, "value": str, "deadline_at": str,
        },
        pk="checkpoint_id",
        not_null={"run_id", "position", "kind", "created_at"},
        foreign_keys=[("run_id", "runs", "run_id")],
    )
    db["events"].create(
        {"event_id": int, "run_id": str, "at": str, "kind": str, "step": str, "actor": str, "detail": str},
        pk="event_id",
        not_null={"run_id", "at", "kind"},
        foreign_keys=[("run_id", "runs", "run_id")],
    )
    # Indexes serve the console: newest-first keyset pages, filtered by status or workflow,
    # the orphan sweep (status = running), forks of a run, and per-run chains.
    db["runs"].create_index(["created_at", "run_id"], index_name="runs_by_created")
    db["runs"].create_index(["status", "created_at", "run_id"], index_name="runs_by_status")
    db["runs"].create_index(["workflow", "created_at", "run_id"], index_name="runs_by_workflow")
    db["runs"].create_index(["parent_run_id"], index_name="runs_by_parent")
    db["steps"].create_index(["run_id", "name"], index_name="steps_by_name", unique=True)
    db["checkpoints"].create_index(["run_id", "checkpoint_id"], index_name="checkpoints_by_run")
    db["events"].create_index(["run_id", "event_id"], index_name="events_by_run")
    db["checkpoints"].create_index(["deadline_at"], index_name="checkpoints_by_deadline")


def _migrate_2(db: sqlite_utils.Database) -> None:
    # The owner process's start (boot id and start time): on its own host a lease belongs to a live
    # process, and a pid reused by another process is told apart from the owner.
    db["runs"].add_column("lease_pid_start", str)
    # Runs per status, kept by triggers in the transaction that changes a run, so the console's
    # status line reads a few rows instead of counting the runs table.
    for statement in (
        "CREATE TABLE run_counts (status TEXT PRIMARY KEY, runs INTEGER NOT NULL)",
        "INSERT INTO run_counts (status, runs) SELECT status, count(*) FROM runs GROUP BY status",
        """CREATE TRIGGER run_counts_insert AFTER INSERT ON runs BEGIN
               INSERT INTO run_counts (status, runs) VALUES (new.status, 1)
                   ON CONFLICT (status) DO UPDATE SET runs = runs + 1;
           END""",
        """CREATE TRIGGER run_counts_delete AFTER DELETE ON runs BEGIN
               UPDATE run_counts SET runs = runs - 1 WHERE status = old.status;
           END""",
        """CREATE TRIGGER run_counts_update AFTER UPDATE OF status ON runs WHEN old.status IS NOT new.status BEGIN
               UPDATE run_counts SET runs = runs - 1 WHERE status = old.status;
               INSERT INTO run_counts (status, runs) VALUES (new.status, 1)
                   ON CONFLICT (status) DO UPDATE SET runs = runs + 1;
           END""",
    ):
        db.conn.execute(statement)


MIGRATIONS = {1: _migrate_1, 2: _migrate_2}


class Store:
    """A relaypoint store in one SQLite file.

    ``path``: the file. ``create``: make a new store if the file does not exist (owner-only, 0600);
    otherwise a missing file is a ``StoreError``. ``readonly``: open without writing (a console on a
    file it cannot write).

    Raises ``StoreError`` (one line) when the file is missing, not SQLite, corrupt, not a relaypoint
    store, or from a newer relaypoint. Nothing is written to a file that could not be read as a store.
    """

    def __init__(self, path: str | os.PathLike, *, create: bool = False, readonly: bool = False,
                 busy_timeout: float = BUSY_TIMEOUT_SECONDS) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self.readonly_reason = "opened read-only" if readonly else None
        if self.path.is_file() and not readonly and not _writable(self.path):
            self.readonly = True
            self.readonly_reason = f"{self.path} (or its directory) is not writable by this user"
        if not self.path.exists():
            if not create:
                raise StoreError(
                    f"no relaypoint store at {self.path}; make one with `relaypoint --db {self.path} demo` or "
                    "`relaypoint start`, or point --db (RELAYPOINT_DB) at an existing store"
                )
            self._create_file()
        elif self.path.is_dir():
            raise StoreError(f"{self.path} is a directory, not a relaypoint store file")
        else:
            self._check_header()
        try:
            self._connect(busy_timeout, "mode=ro" if self.readonly else None)
            try:
                self._check_and_migrate()
            except sqlite3.OperationalError:
                if not self.readonly:
                    raise
                # A WAL store read-only in a directory we cannot write: SQLite cannot make the
                # -shm file, so read the file as immutable (a snapshot as of opening).
                self.conn.close()
                self._connect(busy_timeout, "mode=ro&immutable=1")
                self.readonly_reason += "; showing a snapshot: changes made since are not seen until reopened"
                self._check_and_migrate()
        except sqlite3.DatabaseError as e:
            self.conn.close()
            raise StoreError(f"{self.path} is not a readable SQLite database ({e}); "
                             "point --db at a relaypoint store") from None
        except StoreError:
            self.conn.close()
            raise

    def _connect(self, busy_timeout: float, uri_query: str | None) -> None:
        if uri_query:
            self.conn = sqlite3.connect(f"file:{self.path.resolve()}?{uri_query}", uri=True, isolation_level=None,
                                        timeout=busy_timeout, check_same_thread=False)
        else:
            self.conn = sqlite3.connect(self.path, isolation_level=None, timeout=busy_timeout,
                                        check_same_thread=False)
        self.db = sqlite_utils.Database(self.conn)

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
            raise StoreError(f"{self.path} is an empty file, not a relaypoint store; delete it to let "
                             "relaypoint create a store there, or point --db at a store")
        if 0 < size < SQLITE_HEADER_BYTES:
            raise StoreError(f"{self.path} is not a readable SQLite database (too short); "
                             "point --db at a relaypoint store")

    def _schema_version(self) -> int:
        meta = dict(self.conn.execute("SELECT key, value FROM meta").fetchall())
        if meta.get("app") != APP_ID:
            raise StoreError(f"{self.path} is an SQLite file but not a relaypoint store")
        text = meta.get("schema_version")
        try:
            version = int(text)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            version = 0
        if version < 1:  # meta and the first schema are written in one transaction: this is damage
            raise StoreError(f"{self.path} has an unreadable schema version {text!r}; it cannot be opened safely")
        return version

    def _check_and_migrate(self) -> None:
        # Read before writing anything: a foreign or corrupt file must come out untouched.
        tables = {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        version = 0
        if tables:
            if "meta" not in tables:
                raise StoreError(f"{self.path} is an SQLite file but not a relaypoint store (no meta table)")
            version = self._schema_version()
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} has store schema version {version}, newer than this relaypoint "
                    f"understands ({SCHEMA_VERSION}); upgrade relaypoint to open it"
                )
        if self.readonly:
            if version < SCHEMA_VERSION:
                raise StoreError(f"{self.path} needs a schema migration but is open read-only")
            return
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA foreign_keys=ON")
        self.conn.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable at checkpoint, atomic always
        if version == SCHEMA_VERSION:
            return
        with self.transaction():
            # Re-read under the write lock: another process may have migrated meanwhile.
            if "meta" not in self.db.table_names():
                self.db["meta"].create({"key": str, "value": str}, pk="key")
                self.db["meta"].insert({"key": "app", "value": APP_ID})
                self.db["meta"].insert({"key": "schema_version", "value": "0"})
            version = int(self.db["meta"].get("schema_version")["value"])
            for v in range(version + 1, SCHEMA_VERSION + 1):
                try:
                    MIGRATIONS[v](self.db)
                except sqlite3.OperationalError as e:  # rolled back: the file is left as it was
                    raise StoreError(f"{self.path} says schema version {version} but its tables do not match "
                                     f"({e}; edited by hand?); it was left unchanged") from None
            self.db["meta"].upsert({"key": "schema_version", "value": str(SCHEMA_VERSION)}, pk="key")

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``): everything inside commits together or not at all.

        Waits up to the busy timeout for another writer. Raises ``StoreError`` if the store is
        read-only or the disk is full; the transaction is rolled back and nothing is half-written.
        """
        if self.readonly:
            raise StoreError(f"{self.path} is read-only ({self.readonly_reason}); actions that record "
                             "something are unavailable")
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            raise self.translate(e) from None
        try:
            yield self.conn
            self.conn.execute("COMMIT")
        except BaseException as exc:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.OperationalError):
                raise self.translate(exc) from None
            raise

    def translate(self, e: sqlite3.DatabaseError) -> StoreError:
        """One line for an error SQLite raised on this store (busy, read-only, full, damaged)."""
        msg = str(e)
        if "locked" in msg or "busy" in msg:
            return StoreError(f"{self.path} stayed busy for {BUSY_TIMEOUT_SECONDS:.0f} s (another process is "
                              "writing); try again")
        if "readonly" in msg:
            return StoreError(f"{self.path} is read-only; actions that record something are unavailable")
        if "full" in msg:
            return StoreError(f"{self.path}: the disk or store is full; nothing was recorded, free space and retry")
        if isinstance(e, sqlite3.OperationalError):
            return StoreError(f"{self.path}: {msg}")
        return StoreError(f"{self.path} could not be read ({msg}); it may be damaged: check it with "
                          "`sqlite3 FILE 'PRAGMA integrity_check'`")

    # ---- reads -----------------------------------------------------------------------------

    def resolve(self, run_id: str) -> str:
        """Full run id for a full id or a unique prefix. Raises ``UnknownRun`` (echoing the id)."""
        if not run_id:
            raise UnknownRun("empty run id; see `relaypoint list`")
        rows = self.conn.execute(
            "SELECT run_id FROM runs WHERE run_id >= ? AND run_id < ? ORDER BY run_id LIMIT 3",
            (run_id, run_id + "\U0010ffff"),
        ).fetchall()
        if not rows:
            raise UnknownRun(f"no run with id {run_id!r} in {self.path}; see `relaypoint list`")
        if len(rows) > 1 and rows[0][0] != run_id:
            ids = ", ".join(r[0] for r in rows[:2]) + (", ..." if len(rows) > 2 else "")
            raise UnknownRun(f"run id prefix {run_id!r} matches several runs ({ids}); give more characters")
        return rows[0][0]

    def exists(self, run_id: str) -> bool:
        """True if a run with exactly this id is in the store."""
        return self.conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone() is not None

    def run_row(self, run_id: str) -> dict[str, Any]:
        """The raw ``runs`` row (all columns). Raises ``UnknownRun``."""
        rows = list(self.db.query("SELECT * FROM runs WHERE run_id = ?", [run_id]))
        if not rows:
            raise UnknownRun(f"no run with id {run_id!r} in {self.path}; see `relaypoint list`")
        return rows[0]

    def list_runs(self, *, status: str | None = None, workflow: str | None = None, limit: int = 100,
                  before: tuple[str, str] | None = None, after: tuple[str, str] | None = None,
                  within: tuple[tuple[str, str], tuple[str, str]] | None = None, oldest_first: bool = False,
                  search: str | None = None) -> list[RunSummary]:
        """A page of runs, newest first (``oldest_first``: oldest first), at most ``limit``.

        Positions are (created_at text, run_id). ``before``/``after``: only runs older/newer than
        that position (keyset pagination on an index: cost does not grow with the offset);
        ``within``: only runs between two positions (newest, oldest), both included. ``search``: a
        run id prefix or a workflow name prefix; each matching workflow name (found by a loose
        index scan) is read in its index's order and the streams are merged, so no match is sorted
        and at most about ``limit`` rows per name are read.
        """
        where, params = [], []
        if status:
            where.append("status = ?")
            params.append(status)
        if workflow:
            where.append("workflow = ?")
            params.append(workflow)
        if before:
            where.append("(created_at, run_id) < (?, ?)")
            params.extend(before)
        if after:
            where.append("(created_at, run_id) > (?, ?)")
            params.extend(after)
        if within:
            where.append("(created_at, run_id) <= (?, ?) AND (created_at, run_id) >= (?, ?)")
            params.extend([*within[0], *within[1]])
        order = "ASC" if oldest_first else "DESC"

        def runs(*condition: str, values: tuple[str, ...] = ()) -> Iterator[dict[str, Any]]:
            clauses = [*where, *condition]
            sql = f"SELECT {SUMMARY_COLUMNS} FROM runs"
            if clauses:
                sql += " WHERE " + " AND ".join(clauses)
            sql += f" ORDER BY created_at {order}, run_id {order} LIMIT ?"
            return self.db.query(sql, [*params, *values, limit])

        if not search:
            rows: Iterator[dict[str, Any]] = runs()
        else:
            end = search + "\U0010ffff"
            streams = [runs("workflow = ?", values=(name,)) for name in self._workflows_from(search, end)]
            streams.append(runs("run_id >= ? AND run_id < ?", values=(search, end)))  # few: the primary key's range
            merged = heapq.merge(*streams, key=_position, reverse=not oldest_first)
            rows = (next(group) for _, group in itertools.groupby(merged, key=_position))  # in both streams
        return [s for s in map(_summary_or_none, itertools.islice(rows, limit)) if s is not None]

    def _workflows_from(self, low: str, high: str) -> list[str]:
        """The distinct workflow names in [low, high), by a loose index scan of ``runs_by_workflow``
        (one index seek per name, not a read of every matching run)."""
        return [name for (name,) in self.conn.execute(
            """WITH RECURSIVE names(name) AS (
                   SELECT (SELECT min(workflow) FROM runs WHERE workflow >= ?1 AND workflow < ?2)
                   UNION ALL
                   SELECT (SELECT min(workflow) FROM runs WHERE workflow > names.name AND workflow < ?2)
                   FROM names WHERE names.name IS NOT NULL)
               SELECT name FROM names WHERE name IS NOT NULL""", (low, high))]

    def count_by_status(self) -> dict[str, int]:
        """Number of runs per status, from the ``run_counts`` table its triggers keep (a few rows,
        whatever the number of runs)."""
        return dict(self.conn.execute("SELECT status, runs FROM run_counts WHERE runs > 0").fetchall())

    def data_version(self) -> tuple[int, int]:
        """A value that changes whenever a transaction that changed something is committed on the
        store: SQLite's ``PRAGMA data_version`` (commits by other connections, other processes
        included) with this connection's ``total_changes`` (its own). Only comparable between calls
        on this same Store."""
        return self.conn.execute("PRAGMA data_version").fetchone()[0], self.conn.total_changes

    def steps(self, run_id: str, *, with_output: bool = True) -> list[StepRecord]:
        """The run's chain in order. ``with_output=False`` skips the output column (the console
        loads one output at a time with :meth:`step_output`)."""
        cols = STEP_COLUMNS_NO_OUTPUT + (", output" if with_output else "")
        rows = self.db.query(f"SELECT {cols} FROM steps WHERE run_id = ? ORDER BY position", [run_id])
        return [step_from_row(r) for r in rows]

    def step_output(self, run_id: str, position: int) -> Any:
        """One step's decoded output (None when it has none)."""
        row = self.conn.execute("SELECT output FROM steps WHERE run_id = ? AND position = ?",
                                (run_id, position)).fetchone()
        return readable(row[0]) if row else None

    def completed_outputs(self, run_id: str, before_position: int) -> dict[str, Any]:
        """name -> output of each completed step before ``before_position``."""
        rows = self.conn.execute(
            "SELECT name, output FROM steps WHERE run_id = ? AND position < ? AND status = ? ORDER BY position",
            (run_id, before_position, StepStatus.COMPLETED),
        )
        return {name: self.strict(out, f"the output of step '{name}' of run {run_id}") for name, out in rows}

    def pending_checkpoint(self, run_id: str) -> Checkpoint | None:
        """The newest undecided pausing checkpoint (approval, input, orphan), if any."""
        rows = list(self.db.query(
            f"SELECT * FROM checkpoints WHERE run_id = ? AND kind IN {PAUSE_KINDS!r} "
            f"AND {UNDECIDED} ORDER BY checkpoint_id DESC LIMIT 1", [run_id]))
        return checkpoint_from_row(rows[0]) if rows else None

    def checkpoints(self, run_id: str) -> list[Checkpoint]:
        """All of a run's checkpoints, oldest first."""
        rows = self.db.query("SELECT * FROM checkpoints WHERE run_id = ? ORDER BY checkpoint_id", [run_id])
        return [checkpoint_from_row(r) for r in rows]

    def responses(self, run_id: str, step: str) -> list[Any]:
        """Recorded answers to ``request_input`` calls of one step, in call order."""
        rows = self.conn.execute(
            "SELECT value FROM checkpoints WHERE run_id = ? AND step = ? AND kind = 'input' "
            "AND decision = 'responded' ORDER BY checkpoint_id", (run_id, step))
        return [self.strict(r[0], f"a response to step '{step}' of run {run_id}") for r in rows]

    def forks(self, run_id: str) -> list[str]:
        """Ids of runs forked from this one, oldest first."""
        rows = self.conn.execute("SELECT run_id FROM runs WHERE parent_run_id = ? ORDER BY created_at",
                                 (run_id,))
        return [r[0] for r in rows]

    def events(self, run_id: str) -> list[Event]:
        """The run's audit trail, oldest first."""
        rows = self.db.query("SELECT * FROM events WHERE run_id = ? ORDER BY event_id", [run_id])
        return [
            Event(event_id=r["event_id"], run_id=r["run_id"], at=_time(r, "at", f"event {r['event_id']}"), kind=r["kind"],
                  step=r["step"], actor=r["actor"], detail=readable(r["detail"], dict))
            for r in rows
        ]

    # ---- writes (call inside transaction()) ---------------------------------------------------

    def add_event(self, run_id: str, at: str, kind: str, *, step: str | None = None,
                  actor: str | None = None, **detail: Any) -> None:
        """Append an audit event (inside the caller's transaction)."""
        self.conn.execute(
            "INSERT INTO events (run_id, at, kind, step, actor, detail) VALUES (?, ?, ?, ?, ?, ?)",
            (run_id, at, kind, step, actor, json.dumps(detail, ensure_ascii=False) if detail else None),
        )

    def add_checkpoint(self, run_id: str, at: str, kind: str, position: int, step: str | None,
                       reason: str | None = None, state: Any = None, deadline_at: str | None = None) -> int:
        """Insert a checkpoint row; returns its id (inside the caller's transaction)."""
        cur = self.conn.execute(
            "INSERT INTO checkpoints (run_id, position, step, kind, created_at, reason, state, deadline_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (run_id, position, step, kind, at, reason, None if state is None else encoding.dumps(state, "state"),
             deadline_at),
        )
        return int(cur.lastrowid)

    def update_run(self, run_id: str, *, fence: str | None = None, **cols: Any) -> bool:
        """Set columns of a run. With ``fence`` (a lease token) the write applies only while that
        token still owns the run; returns False when the fence refused it."""
        sets = ", ".join(f"{k} = ?" for k in cols)
        sql = f"UPDATE runs SET {sets} WHERE run_id = ?"
        params = [*cols.values(), run_id]
        if fence is not None:
            sql += " AND lease_token = ?"
            params.append(fence)
        return self.conn.execute(sql, params).rowcount == 1

    def update_step(self, run_id: str, position: int, **cols: Any) -> None:
        """Set columns of one step row."""
        sets = ", ".join(f"{k} = ?" for k in cols)
        self.conn.execute(f"UPDATE steps SET {sets} WHERE run_id = ? AND position = ?",
                          [*cols.values(), run_id, position])


    def strict(self, text: str | None, what: str) -> Any:
        """Decode a stored JSON value a step will consume; damage fails closed with ``StoreError``."""
        try:
            return encoding.loads(text)
        except (ValueError, RecursionError):
            raise StoreError(f"{what} in {self.path} is not valid JSON (damaged or edited by hand); "
                             "fix the row, or fork the run from an earlier step") from None


def _writable(path: Path) -> bool:
    # WAL mode writes beside the file (-wal, -shm), so the directory matters too.
    shm = path.with_name(path.name + "-shm")
    return os.access(path, os.W_OK) and (os.access(path.parent, os.W_OK) or os.access(shm, os.W_OK))


def readable(text: str | None, shape: type | None = None) -> Any:
    """Decode a stored JSON value for display: damage, or a value not of ``shape`` (dict, list),
    shows as ``{"unreadable": <raw text>}``."""
    try:
        value = encoding.loads(text)
    except (ValueError, RecursionError):
        return {"unreadable": text}
    if shape is not None and value is not None and not isinstance(value, shape):
        return {"unreadable": text}
    return value


def _vocabulary(enum: type, value: str, what: str) -> Any:
    try:
        return enum(value)
    except ValueError:
        raise StoreError(f"{what} has status {value!r}, outside relaypoint's vocabulary (edited by hand?); "
                         "fix the row or delete the run") from None


def _position(r: dict[str, Any]) -> tuple[str, str]:
    return r["created_at"], r["run_id"]


def _summary_or_none(r: dict[str, Any]) -> RunSummary | None:
    # A listing skips a row damaged by hand (status outside the vocabulary, unreadable time);
    # `show` on it says what is wrong.
    try:
        return summary_from_row(r)
    except StoreError:
        return None


def _time(r: dict[str, Any], column: str, what: str) -> datetime | None:
    try:
        return from_text(r[column])
    except ValueError:
        raise StoreError(f"{what} has an unreadable {column} {r[column]!r} (edited by hand?); "
                         "fix the row or delete the run") from None


def summary_from_row(r: dict[str, Any]) -> RunSummary:
    """Build a :class:`RunSummary` from a ``runs`` row. Raises ``StoreError`` for a damaged row."""
    what = f"run {r['run_id']}"
    lease = None
    if r.get("lease_token"):
        lease = Lease(token=r["lease_token"], pid=r["lease_pid"] or 0, pid_start=r.get("lease_pid_start") or None,
                      host=r["lease_host"] or "",
                      expires_at=_time(r, "lease_expires_at", what), heartbeat_at=_time(r, "heartbeat_at", what))
    return RunSummary(
        run_id=r["run_id"], workflow=r["workflow"], status=_vocabulary(RunStatus, r["status"], what),
        parent_run_id=r["parent_run_id"], forked_from_step=r["forked_from_step"],
        created_at=_time(r, "created_at", what), updated_at=_time(r, "updated_at", what),
        current_step=r["current_step"], steps_done=r["steps_done"], steps_total=r["steps_total"],
        error=r["error"], lease=lease,
    )


def step_from_row(r: dict[str, Any]) -> StepRecord:
    """Build a :class:`StepRecord` from a ``steps`` row (output decoded when the row carries it)."""
    what = f"step {r['name']!r}"
    return StepRecord(
        position=r["position"], name=r["name"], status=_vocabulary(StepStatus, r["status"], what),
        attempts=r["attempts"], options=readable(r["options"], dict) or {}, output=readable(r.get("output")),
        has_output=bool(r["has_output"]), error=r["error"], traceback=r["traceback"],
        started_at=_time(r, "started_at", what), finished_at=_time(r, "finished_at", what),
        idempotency_key=r["idempotency_key"],
    )


def checkpoint_from_row(r: dict[str, Any]) -> Checkpoint:
    """Build a :class:`Checkpoint` from a ``checkpoints`` row."""
    what = f"checkpoint {r['checkpoint_id']}"
    return Checkpoint(
        checkpoint_id=r["checkpoint_id"], run_id=r["run_id"], position=r["position"], step=r["step"],
        kind=r["kind"], created_at=_time(r, "created_at", what), reason=r["reason"],
        state=readable(r["state"]), decision=r["decision"], decided_by=r["decided_by"],
        decided_at=_time(r, "decided_at", what), comment=r["comment"], value=readable(r["value"]),
        deadline_at=_time(r, "deadline_at", what),
    )
