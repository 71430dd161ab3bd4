"""What the SQL backends share: :class:`SqlStore`, the query methods whose SQL is the same on SQLite
and PostgreSQL, and the statement fragments both use.

A backend subclasses it and provides the dialect hooks: :meth:`SqlStore._rows` (run a query, rows
as dicts; SQL is written here with ``?`` placeholders, which a backend that takes ``%s`` converts),
:meth:`SqlStore._execute` (a write, its row count), :meth:`SqlStore._execute_many` (a write per row of
parameters), :meth:`SqlStore._stamp` (a time as the backend stores it), :meth:`SqlStore._free` (free
text as it can hold it), :meth:`SqlStore._position_values` (a listing position as query parameters),
``DRIVER_ERROR`` (its driver's base exception) and :meth:`SqlStore.translate`. What differs between
the two (opening, migrations, connections, transactions, queries that use a dialect's own
functions) stays in each backend's module; the writes are :mod:`.commit`'s.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import string
from abc import abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any, ClassVar, Literal

from .. import encoding
from ..errors import LeaseLost, StoreError, UnknownRun, quoted
from ..models import CallRecord, Checkpoint, Event, Owner, PendingDecision, RunHead, RunSummary, StepRecord
from ..status import PAUSED as PAUSED_RUNS
from ..status import AnnouncementOutcome, Decision, RunStatus, StepStatus
from ..status import PAUSE_KINDS as PAUSING
from ..usage import Usage
from .base import RunStore, StoreDamaged
from .connections import ThreadConnections
from .reads import Lookup, RunState, StepBrief
from .rows import (_execution, _owner, _position, _summary_fields, _summary_or_none, _time, _vocabulary, call_from_row,
                   checkpoint_from_row, options_ask_approval, readable, step_from_row)

# Columns of ``runs`` a listing reads (no input, no definition).
SUMMARY_COLUMNS = (
    "run_id, workflow, status, parent_run_id, forked_from_step, created_at, updated_at, current_step, "
    "steps_done, steps_total, error, lease_token, lease_pid, lease_host, lease_expires_at, heartbeat_at, "
    "lease_pid_start"
)
# ... with what a claim reads (no input, no definition: those live in their own tables).
HEAD_COLUMNS = SUMMARY_COLUMNS + ", fingerprint, suspect_deaths"
INPUT_OF_RUN = "(SELECT input FROM run_inputs i WHERE i.run_id = runs.run_id)"
DEFINITION_OF_RUN = "(SELECT definition FROM definitions d WHERE d.fingerprint = runs.fingerprint)"
# A pause is open until one of these decisions is recorded. Anything else in the column (a hand
# edit, damage) reads as undecided: a decision that cannot be read is never taken as an approval.
USAGE_BATCH = 500
"""Runs per query of :meth:`SqlStore.usage` (SQLite allows 32,766 parameters, PostgreSQL 65,535)."""
DECISIONS = tuple(d.value for d in Decision)
UNDECIDED = f"(decision IS NULL OR decision NOT IN {DECISIONS!r})"
PAUSE_KINDS = tuple(sorted(k.value for k in PAUSING))
PAUSED = f"kind IN {PAUSE_KINDS!r}"
# The pauses no worker has announced yet (``worker --on-pause``): the condition of the partial index
# checkpoints_unannounced, which holds these rows only (empty when every open pause was announced).
UNANNOUNCED = f"announced_at IS NULL AND {PAUSED} AND {UNDECIDED}"
# Of those, the pauses a worker may claim at time ?: no claim holds them (none, or one whose claimer
# did not settle it in time), and their announcement did not fail.
CLAIMABLE = "announce_failed_at IS NULL AND (announcing_until IS NULL OR announcing_until <= ?)"
# A decision owed: checkpoint ``c`` is the newest undecided pausing checkpoint of run ``r``, a paused run.
PAUSED_RUN = f"r.status IN {tuple(sorted(str(s) for s in PAUSED_RUNS))!r}"
NEWEST_OPEN_PAUSE = f"(SELECT max(p.checkpoint_id) FROM checkpoints p WHERE p.run_id = r.run_id AND {PAUSED} AND {UNDECIDED})"
NESTED = "a store transaction is already open on this store (transactions do not nest)"


STEP_COLUMNS = (
    "s.seq, s.name, s.iteration, s.agent, s.parent_seq, s.status, s.attempts, s.options, s.error, s.traceback, "
    "s.started_at, s.finished_at, s.idempotency_key, s.progress, "
    "EXISTS (SELECT 1 FROM outputs o WHERE o.run_id = s.run_id AND o.seq = s.seq) AS has_output"
)
# Checkpoints that hold the driver state a run goes on from (not a pause's).
STATE_KINDS = ("start", "boundary", "fork")
# Each lookup of a run's newest checkpoint of a sort; pauses are read through the partial index
# checkpoints_paused, which needs its condition word for word.
_NEWEST = {
    Lookup.LATEST: "run_id = ?",
    Lookup.PENDING: f"run_id = ? AND {PAUSED} AND {UNDECIDED}",
    Lookup.LAST_PAUSE: f"run_id = ? AND {PAUSED}",
    Lookup.FORK: "run_id = ? AND kind = 'fork'",
    Lookup.APPROVAL: f"run_id = ? AND {PAUSED} AND kind = 'approval' AND paused_seq = ?",
}


def translated(method: Callable) -> Callable:
    """Run a store method with its driver's errors (``DRIVER_ERROR``) raised as the one-line
    ``StoreError`` subclasses its :meth:`SqlStore.translate` gives."""

    @functools.wraps(method)
    def wrapper(self: SqlStore, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except self.DRIVER_ERROR as e:
            raise self.translate(e) from None

    return wrapper


class SqlStore(RunStore):
    """A :class:`RunStore` over SQL tables (schema 3 of the SQLite store; the PostgreSQL store has
    the same tables): the query methods both backends run alike. See the module's docstring for the
    hooks a backend provides. Subclasses set ``_url``, ``readonly``, ``_readonly_reason`` and ``_threads``."""

    DRIVER_ERROR: ClassVar[type[Exception]]
    """The driver's base exception class, translated by :meth:`translate`."""
    _url: str
    readonly: bool
    _readonly_reason: str | None
    _threads: ThreadConnections[Any]
    """Each thread's connection and whether it is inside a store transaction (see :mod:`.connections`)."""

    # ---- dialect hooks

    @abstractmethod
    def _rows(self, sql: str, params: Any = ()) -> list[dict[str, Any]]:
        """The rows of a query (``?`` placeholders) as dicts, counted in ``rows_read``."""

    @abstractmethod
    def _execute(self, sql: str, params: Any = ()) -> int:
        """Run a write (``?`` placeholders) on the open connection; the number of rows it changed."""

    @abstractmethod
    def _execute_many(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        """Run a write (``?`` placeholders) once per row of parameters on the open connection (not at
        all when ``rows`` is empty)."""

    @staticmethod
    @abstractmethod
    def _stamp(dt: datetime | None) -> Any:
        """A time (aware UTC) as the backend stores it (None stays None). Raises ``TypeError`` for
        anything but a datetime."""

    @staticmethod
    def _free(text: str | None) -> str | None:
        """Free text a person reads (an error, a name of who decided) as the backend can hold it."""
        return text

    @staticmethod
    def _position_values(position: tuple[Any, str]) -> Iterable[Any]:
        """A listing position (created_at store text, run_id) as the two parameters its query compares
        ``(created_at, run_id)`` with."""
        return position

    @abstractmethod
    def translate(self, e: Exception) -> StoreError:
        """One line for an error the driver raised on this store."""

    @staticmethod
    @abstractmethod
    def _among(column: str, values: Sequence[Any], sql_type: str = "text") -> tuple[str, Any]:
        """A condition "``column`` is one of ``values``" with its one ``?`` parameter: (SQL, parameter).
        ``sql_type``: the values' SQL type (text, bigint)."""

    @staticmethod
    @abstractmethod
    def _one_of(column: str, values: Sequence[Any], sql_type: str = "text") -> tuple[str, list[Any]]:
        """A condition "``column`` is one of ``values``" for a few values of a vocabulary (statuses,
        workflow names), which a planner may choose an index by: (SQL, its ``?`` parameters)."""

    @staticmethod
    @abstractmethod
    def _same(column: str, sql_type: str = "text") -> str:
        """A condition "``column`` equals the ``?`` parameter", NULL matching NULL."""

    @abstractmethod
    def _insert_one(self, sql: str, params: Any, id_column: str) -> int | None:
        """Run an ``INSERT`` (``?`` placeholders) of at most one row on the open connection; the
        ``id_column`` of the row it inserted, or None when it inserted none."""

    @staticmethod
    def _indexed_by(index: str) -> str:
        """The hint, after a table's name, that a query reads it through ``index`` ("" where the
        planner needs none)."""
        return ""

    @staticmethod

    @abstractmethod
    def _write(self, run: str | None = None, skip_locked: bool = False) -> AbstractContextManager[None]:
        """A write transaction on this thread's connection (``run``, ``skip_locked``: see
        :meth:`transaction`), committed when the block ends and rolled back on an exception (driver
        errors may come out untranslated: :meth:`transaction` translates them). Called outside any
        other (see :meth:`_outside_transaction`)."""

    @abstractmethod
    def _snapshot(self) -> AbstractContextManager[None]:
        """A read-only transaction in which every query sees the store as of one instant. Called
        outside any other (see :meth:`_outside_transaction`)."""

    @abstractmethod
    def _exported(self, run_id: str, row: dict[str, Any]) -> dict[str, Any]:
        """A row of run ``run_id`` with its times as aware UTC datetimes. Raises ``StoreDamaged``
        naming the run when one cannot be read."""

    # ---- shared helpers

    @contextmanager
    def transaction(self, run: str | None = None, *, skip_locked: bool = False) -> Iterator[None]:
        if self.readonly:
            raise self.read_only_error()
        self._outside_transaction()
        try:
            with self._write(run, skip_locked):
                yield
        except self.DRIVER_ERROR as e:
            raise self.translate(e) from None

    @property
    def url(self) -> str:
        return self._url

    @property
    def readonly_reason(self) -> str | None:
        return self._readonly_reason if self.readonly else None

    def _outside_transaction(self) -> None:
        """Raise ``RuntimeError`` when this thread already holds a store transaction (they do not nest:
        its connection is in use)."""
        if self._threads.in_transaction:
            raise RuntimeError(NESTED)

    def _row(self, sql: str, params: Any = ()) -> dict[str, Any] | None:
        rows = self._rows(sql, params)
        return rows[0] if rows else None

    def _unknown(self, run_id: str) -> UnknownRun:
        return UnknownRun(f"no run with id {quoted(run_id)} in {self.where}; see `relaypoint list`")

    def _strict(self, text: str | None, what: str) -> Any:
        """Decode a stored JSON value a step will consume; damage fails closed with ``StoreDamaged``."""
        try:
            return encoding.loads(text)
        except (ValueError, RecursionError):
            raise StoreDamaged(f"{what} in {self.where} is not valid JSON (damaged or edited by hand); "
                               "fix the row, or fork the run from an earlier step") from None

    def _head_row(self, run_id: str, columns: str) -> dict[str, Any]:
        row = self._row(f"SELECT {columns} FROM runs WHERE run_id = ?", (run_id,))
        if row is None:
            raise self._unknown(run_id)
        return row

    def _refused(self, run_id: str) -> LeaseLost | UnknownRun:
        """Why a fenced boundary was refused (read inside its transaction, before the rollback)."""
        row = self._row("SELECT status FROM runs WHERE run_id = ?", (run_id,))
        if row is None:
            return self._unknown(run_id)
        return LeaseLost.of(run_id, cancelled=row["status"] == RunStatus.CANCELLED)

    # ---- reads: runs

    @translated
    def resolve(self, run_id: str) -> str:
        if not run_id:
            raise UnknownRun("empty run id; see `relaypoint list`")
        if not matchable(run_id):
            raise self._unknown(run_id)
        if all(c in string.hexdigits for c in run_id):  # ids are lowercase hex: ABC12 is typed for abc12
            run_id = run_id.lower()
        rows = self._rows("SELECT run_id FROM runs WHERE run_id >= ? AND run_id < ? ORDER BY run_id LIMIT 3",
                          (run_id, run_id + "\U0010ffff"))
        if not rows:
            raise self._unknown(run_id)
        if len(rows) > 1 and rows[0]["run_id"] != run_id:
            ids = ", ".join(r["run_id"] for r in rows[:2]) + (", ..." if len(rows) > 2 else "")
            raise UnknownRun(f"run id prefix {quoted(run_id)} matches several runs ({ids}); give more characters")
        return rows[0]["run_id"]

    @translated
    def existing(self, run_ids: Sequence[str]) -> list[str]:
        among, ids = self._among("run_id", [i for i in run_ids if matchable(i)])
        return [r["run_id"] for r in self._rows(f"SELECT run_id FROM runs WHERE {among}", (ids,))]

    @translated
    def run(self, run_id: str, *, documents: bool = True) -> RunHead:
        if not documents:
            r = self._head_row(run_id, HEAD_COLUMNS)
            return RunHead(**_summary_fields(r), input=None, definition=None, fingerprint=r["fingerprint"],
                           suspect_deaths=r["suspect_deaths"] or 0)
        r = self._head_row(run_id, f"{HEAD_COLUMNS}, {INPUT_OF_RUN} AS input, {DEFINITION_OF_RUN} AS definition")
        return RunHead(**_summary_fields(r), input=readable(r["input"], dict), definition=readable(r["definition"]),
                       fingerprint=r["fingerprint"], suspect_deaths=r["suspect_deaths"] or 0)

    @translated
    def run_document(self, run_id: str, name: Literal["input", "definition"], *, text: bool = False) -> Any:
        if name not in ("input", "definition"):
            raise ValueError(f"run_document: input or definition, not {name!r}")
        stored = self._head_row(run_id, f"{INPUT_OF_RUN if name == 'input' else DEFINITION_OF_RUN} AS doc")["doc"]
        if text:
            return "null" if stored is None else stored
        value = self._strict(stored, f"the {name} of run {run_id}")
        if name == "definition":
            return value
        if value is not None and not isinstance(value, dict):
            raise StoreDamaged(f"the input of run {run_id} in {self.where} is not a JSON object (damaged or "
                               "edited by hand); fix the row, or fork the run with a new --input")
        return value or {}

    @translated
    def list_runs(self, *, status: str | None = None, workflow: str | None = None, limit: int | None = 100,
                  before: tuple[str, str] | None = None, after: tuple[str, str] | None = None,
                  within: tuple[tuple[str, str], tuple[str, str]] | None = None, oldest_first: bool = False,
                  search: str | None = None, parent: str | None = None) -> list[RunSummary]:
        # Each matching workflow name of a search (found by a loose index scan) is read in its
        # index's order and the streams are merged, so no match is sorted and at most about
        # ``limit`` rows per name are read.
        if not all(matchable(key) for key in (workflow, search, parent) if key):
            return []
        where: list[str] = []
        params: list[Any] = []
        if status:
            where.append("status = ?")
            params.append(status)
        if workflow:
            where.append("workflow = ?")
            params.append(workflow)
        if parent is not None:
            where.append("parent_run_id = ?")
            params.append(parent)
        if before:
            where.append("(created_at, run_id) < (?, ?)")
            params.extend(self._position_values(before))
        if after:
            where.append("(created_at, run_id) > (?, ?)")
            params.extend(self._position_values(after))
        if within:
            where.append("(created_at, run_id) <= (?, ?) AND (created_at, run_id) >= (?, ?)")
            params.extend([*self._position_values(within[0]), *self._position_values(within[1])])
        order = "ASC" if oldest_first else "DESC"

        def runs(*condition: str, values: tuple[str, ...] = ()) -> list[dict[str, Any]]:
            clauses = [*where, *condition]
            sql = f"SELECT {SUMMARY_COLUMNS} FROM runs"
            if clauses:
                sql += " WHERE " + " AND ".join(clauses)
            sql += f" ORDER BY created_at {order}, run_id {order}"
            if limit is None:
                return self._rows(sql, [*params, *values])
            return self._rows(sql + " LIMIT ?", [*params, *values, limit])

        if not search:
            rows: Iterator[dict[str, Any]] = iter(runs())
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
        return [r["name"] for r in self._rows(
            """WITH RECURSIVE names(name) AS (
                   SELECT (SELECT min(workflow) FROM runs WHERE workflow >= ? AND workflow < ?)
                   UNION ALL
                   SELECT (SELECT min(workflow) FROM runs WHERE workflow > names.name AND workflow < ?)
                   FROM names WHERE names.name IS NOT NULL)
               SELECT name FROM names WHERE name IS NOT NULL""", (low, high, high))]

    @translated
    def count_by_status(self) -> dict[str, int]:
        # From the run_counts table its triggers keep: a few rows, whatever the number of runs (on
        # PostgreSQL a few per status, summed).
        return {r["status"]: r["runs"] for r in self._rows(
            "SELECT status, CAST(sum(runs) AS BIGINT) AS runs FROM run_counts GROUP BY status HAVING sum(runs) > 0")}

    @translated
    def runs_in(self, statuses: Iterable[str], *, run_ids: Sequence[str] | None = None,
                workflows: Iterable[str] | None = None, owner: Owner | None = None,
                updated_before: datetime | None = None, limit: int | None = None) -> list[RunState]:
        if run_ids is not None and not run_ids:
            return []
        wanted, values = self._one_of("status", [str(s) for s in statuses])
        where, params = [wanted], [*values]
        if run_ids is not None:  # listed: the planner reads them by the primary key, not every run of a status
            among, ids = self._one_of("run_id", [i for i in run_ids if matchable(i)])
            where.append(among)
            params += ids
        if workflows is not None:
            names, values = self._one_of("workflow", list(workflows))
            where.append(names)
            params += values
        if owner is not None:
            where.append(f"{self._same('lease_host')} AND {self._same('lease_pid', 'bigint')} AND "
                         f"{self._same('lease_pid_start')}")
            params += [owner.host, owner.pid, owner.pid_start]
        if updated_before is not None:
            where.append("updated_at < ?")
            params.append(self._stamp(updated_before))
        order = "" if limit is None else " ORDER BY updated_at LIMIT ?"
        rows = self._rows("SELECT run_id, status, lease_token, lease_host, lease_pid, lease_pid_start, lease_expires_at "
                          f"FROM runs WHERE {' AND '.join(where)}{order}",
                          (*params, *(() if limit is None else (limit,))))
        return [RunState(r["run_id"], RunStatus(r["status"]), _owner(r), r["lease_token"])
                if r["status"] == RunStatus.RUNNING else RunState(r["run_id"], RunStatus(r["status"]), None)
                for r in rows]

    # ---- reads: steps and outputs

    def _children(self, columns: str, run_id: str, parent_seq: int) -> list[dict[str, Any]]:
        """The rows (``columns`` of ``steps s``) of the children of execution ``parent_seq``, in seq
        order. A group's children carry its name (the pattern's): steps_by_name reads the group's
        executions only, not every execution after it (SQLite's planner, without statistics, would
        rather scan the run's primary key to skip the sort)."""
        return self._rows(f"SELECT {columns} FROM steps s{self._indexed_by('steps_by_name')} WHERE s.run_id = ? "
                          "AND s.name = (SELECT g.name FROM steps g WHERE g.run_id = ? AND g.seq = ?) "
                          "AND s.parent_seq = ? ORDER BY s.seq", (run_id, run_id, parent_seq, parent_seq))

    @translated
    def step_brief(self, run_id: str, seq: int) -> StepBrief | None:
        r = self._row("SELECT name, status, attempts, idempotency_key FROM steps WHERE run_id = ? AND seq = ?",
                      (run_id, seq))
        if r is None:
            return None
        return StepBrief(r["name"], _vocabulary(StepStatus, r["status"], f"step {r['name']!r}"), r["attempts"],
                         r["idempotency_key"])

    @translated
    def steps(self, run_id: str, *, parent: int | None = None, before: int | None = None,
              outputs: bool = False) -> list[StepRecord]:
        if (parent is not None and before is not None) or (outputs and parent is None):
            raise ValueError("steps: parent or before, not both; outputs only with parent")
        if parent is not None and outputs:
            rows = self._children(f"{STEP_COLUMNS}, (SELECT value FROM outputs o WHERE o.run_id = s.run_id "
                                  "AND o.seq = s.seq) AS value", run_id, parent)
            return [step_from_row(r).model_copy(update={"output": self._strict(r["value"], _execution(run_id, r))})
                    for r in rows if r["status"] == StepStatus.COMPLETED]
        if parent is not None:
            rows = self._children(STEP_COLUMNS, run_id, parent)
        elif before is not None:  # whole rows only for those a fork looks at: cheap over a long chain
            seqs = [r["seq"] for r in self._rows("SELECT seq, status, options FROM steps WHERE run_id = ? AND seq < ? "
                                                 "AND parent_seq IS NULL", (run_id, before))
                    if r["status"] != StepStatus.COMPLETED or options_ask_approval(r["options"])]
            among, ids = self._among("s.seq", seqs, "bigint")
            rows = self._rows(f"SELECT {STEP_COLUMNS} FROM steps s WHERE s.run_id = ? AND {among} ORDER BY s.seq",
                              (run_id, ids)) if seqs else []
        else:  # tree order: each group's children (appended after every top-level row) right after it
            rows = self._rows(f"SELECT {STEP_COLUMNS} FROM steps s WHERE s.run_id = ? "
                              "ORDER BY coalesce(s.parent_seq, s.seq), s.seq", (run_id,))
        return [step_from_row(r) for r in rows]

    @translated
    def step(self, run_id: str, seq: int | None = None, *, name: str | None = None) -> StepRecord | None:
        if seq is not None and name is not None:
            raise ValueError("step: a seq or a name, not both")
        if seq is not None:
            r = self._row(f"SELECT {STEP_COLUMNS} FROM steps s WHERE s.run_id = ? AND s.seq = ?", (run_id, seq))
        elif name is None:
            r = self._row(f"SELECT {STEP_COLUMNS} FROM steps s WHERE s.run_id = ? ORDER BY s.seq DESC LIMIT 1",
                          (run_id,))
        elif not matchable(name):
            return None
        else:
            r = self._row(f"SELECT {STEP_COLUMNS} FROM steps s WHERE s.run_id = ? AND s.name = ? "
                          "AND s.parent_seq IS NULL ORDER BY s.iteration DESC, s.seq DESC LIMIT 1", (run_id, name))
        return None if r is None else step_from_row(r)

    @translated
    def calls(self, run_id: str, seq: int | None = None, *, strict: bool = False) -> list[CallRecord]:
        rows = (self._rows("SELECT * FROM calls WHERE run_id = ? ORDER BY seq, position", (run_id,)) if seq is None
                else self._rows("SELECT * FROM calls WHERE run_id = ? AND seq = ? ORDER BY position", (run_id, seq)))
        return [call_from_row(r, self._strict(r["value"], f"the result of call '{r['name']}' of execution "
                                                          f"{r['seq']} of run {run_id}") if strict
                              else readable(r["value"])) for r in rows]

    @translated
    def usage(self, run_ids: Sequence[str]) -> dict[str, Usage]:
        found: dict[str, Usage] = {}
        ids = list(dict.fromkeys(filter(matchable, run_ids)))
        for batch in (ids[i:i + USAGE_BATCH] for i in range(0, len(ids), USAGE_BATCH)):
            # A fork's own calls only: those it copied were recorded before it was created (usage.own).
            for r in self._rows("SELECT c.run_id, SUM(c.requests) AS requests, SUM(c.input_tokens) AS input_tokens, "
                                "SUM(c.output_tokens) AS output_tokens FROM calls c JOIN runs r ON r.run_id = c.run_id "
                                f"WHERE c.run_id IN ({', '.join('?' * len(batch))}) AND c.requests IS NOT NULL "
                                "AND (r.parent_run_id IS NULL OR c.started_at >= r.created_at) "
                                "GROUP BY c.run_id", batch):
                found[r["run_id"]] = Usage(requests=int(r["requests"] or 0), input_tokens=int(r["input_tokens"] or 0),
                                           output_tokens=int(r["output_tokens"] or 0))
        return found

    @translated
    def output(self, run_id: str, seq: int | None = None, *, name: str | None = None) -> tuple[bool, Any]:
        if (seq is None) == (name is None):
            raise ValueError("output: a seq or a name")
        if name is None:
            r = self._row("SELECT value FROM outputs WHERE run_id = ? AND seq = ?", (run_id, seq))
            return (False, None) if r is None else (True, readable(r["value"]))
        r = self._row(
            "SELECT s.seq, (SELECT value FROM outputs o WHERE o.run_id = s.run_id AND o.seq = s.seq) AS value "
            "FROM steps s WHERE s.run_id = ? AND s.name = ? AND s.parent_seq IS NULL AND s.status = ? "
            "ORDER BY s.iteration DESC, s.seq DESC LIMIT 1", (run_id, name, StepStatus.COMPLETED.value))
        if r is None:
            return False, None
        return True, self._strict(r["value"], f"the output of step '{name}' of run {run_id}")

    # ---- reads: checkpoints and events

    @translated
    def checkpoint(self, run_id: str, lookup: Lookup, seq: int | None = None) -> Checkpoint | None:
        lookup = Lookup(lookup)
        if (seq is None) != (lookup not in (Lookup.APPROVAL, Lookup.STATE_AT)):
            raise ValueError(f"checkpoint: {lookup} {'takes no' if seq is not None else 'needs a'} seq")
        if lookup == Lookup.STATE_AT:  # the earliest: the boundary that started execution seq
            r = self._row(f"SELECT * FROM checkpoints WHERE run_id = ? AND seq = ? AND kind IN {STATE_KINDS!r} "
                          "ORDER BY checkpoint_id LIMIT 1", (run_id, seq))
            if r is None:
                return None
            state = self._strict(r["state"], f"the driver state of checkpoint {r['checkpoint_id']} of run {run_id}")
            return checkpoint_from_row(r).model_copy(update={"state": state})
        where, params = _NEWEST[lookup], (run_id,) if seq is None else (run_id, seq)
        r = self._row(f"SELECT * FROM checkpoints WHERE {where} ORDER BY checkpoint_id DESC LIMIT 1", params)
        return None if r is None else checkpoint_from_row(r)

    @translated
    def checkpoints(self, run_id: str | None = None, *, due: datetime | None = None) -> list[Checkpoint]:
        if (run_id is None) == (due is None):
            raise ValueError("checkpoints: a run or a due time")
        if due is not None:  # the condition of the partial index checkpoints_due
            rows = self._rows(f"SELECT * FROM checkpoints WHERE deadline_at IS NOT NULL AND deadline_at <= ? AND "
                              f"{UNDECIDED} ORDER BY checkpoint_id", (self._stamp(due),))
        else:
            rows = self._rows("SELECT * FROM checkpoints WHERE run_id = ? ORDER BY checkpoint_id", (run_id,))
        return [checkpoint_from_row(r) for r in rows]

    @translated
    def responses(self, run_id: str, seq: int) -> list[Any]:
        rows = self._rows(f"SELECT step, value FROM checkpoints WHERE run_id = ? AND {PAUSED} AND kind = 'input' "
                          "AND paused_seq = ? AND decision = 'responded' ORDER BY checkpoint_id", (run_id, seq))
        return [self._strict(r["value"], f"a response to step '{r['step']}' of run {run_id}") for r in rows]

    @translated
    def pending_decisions(self, limit: int) -> list[PendingDecision]:
        return self._owed(self._OWED_PAUSES, PAUSED_RUN, limit)

    _OWED_PAUSES = f"runs r JOIN checkpoints c ON c.checkpoint_id = {NEWEST_OPEN_PAUSE}"
    """The paused runs (``r``: runs_by_status), each joined with its newest open pause (``c``,
    checkpoints_paused then its key). A backend whose planner would rather scan every checkpoint
    says it another way."""

    def _owed(self, tables: str, where: str, limit: int, params: tuple[Any, ...] = ()) -> list[PendingDecision]:
        """The decisions owed among ``tables`` (``r``: runs, ``c``: checkpoints) where ``where`` (its
        ``?`` given by ``params``) holds, oldest first, at most ``limit``."""
        rows = self._rows(f"SELECT c.*, r.workflow AS run_workflow, r.status AS run_status, x.iteration AS "
                          f"paused_iteration, x.agent AS paused_agent, x.parent_seq AS paused_parent FROM {tables} "
                          "LEFT JOIN steps x ON x.run_id = c.run_id AND x.seq = c.paused_seq "
                          f"WHERE {where} ORDER BY c.checkpoint_id LIMIT ?", (*params, limit))
        return [PendingDecision(**checkpoint_from_row(r).model_dump(), workflow=r["run_workflow"],
                                status=r["run_status"], **({} if r["paused_parent"] is None else {
                                    "iteration": r["paused_iteration"], "agent": r["paused_agent"]}))
                for r in rows]

    def _unannounced(self, limit: int, at: datetime) -> list[PendingDecision]:
        """The decisions owed not announced yet that a worker may claim at ``at``, oldest first, at
        most ``limit``: the rows of the partial index checkpoints_unannounced (none read when it is
        empty), each checked against its run (CROSS JOIN: SQLite, which keeps no statistics, would
        otherwise go through every paused run)."""
        return self._owed("checkpoints c CROSS JOIN runs r", f"r.run_id = c.run_id AND {UNANNOUNCED} AND {PAUSED_RUN} "
                          f"AND c.checkpoint_id = {NEWEST_OPEN_PAUSE} AND {CLAIMABLE}", limit, (self._stamp(at),))

    @translated
    def claim_announcements(self, limit: int, at: datetime, until: datetime) -> list[PendingDecision]:
        if self.readonly:
            raise self.read_only_error()
        if not self._unannounced(1, at):  # the common case, every poll: a read, no lock taken, nothing written
            return []
        with self.transaction():  # the only writer: of claimers racing, the first takes them, the others none
            owed = self._unannounced(limit, at)
            if owed:
                among, ids = self._among("checkpoint_id", [p.checkpoint_id for p in owed], "bigint")
                self._execute(f"UPDATE checkpoints SET announcing_until = ? WHERE {among}", (self._stamp(until), ids))
        return owed

    @translated
    def settle_announcement(self, checkpoint_id: int, until: datetime, outcome: str, at: datetime) -> bool:
        if self.readonly:
            raise self.read_only_error()
        outcome = AnnouncementOutcome(outcome)
        if outcome == AnnouncementOutcome.RELEASED:
            sets, values = "announcing_until = NULL", ()
        else:
            ended = "announced_at" if outcome == AnnouncementOutcome.ANNOUNCED else "announce_failed_at"
            sets, values = f"{ended} = ?, announcing_until = NULL", (self._stamp(at),)
        with self.transaction():  # the claim's expiry names it: a claim taken over since is not this one
            return self._execute(f"UPDATE checkpoints SET {sets} WHERE checkpoint_id = ? AND announcing_until = ?",
                                 (*values, checkpoint_id, self._stamp(until))) == 1

    @translated
    def events(self, run_id: str, *, limit: int | None = None) -> list[Event]:
        limited, values = ("", (run_id,)) if limit is None else (" LIMIT ?", (run_id, limit))
        return [Event(event_id=r["event_id"], run_id=r["run_id"], at=_time(r, "at", f"event {r['event_id']}"),
                      kind=r["kind"], step=r["step"], actor=r["actor"], detail=readable(r["detail"], dict))
                for r in self._rows(f"SELECT * FROM events WHERE run_id = ? ORDER BY event_id{limited}", values)]


def matchable(key: str) -> bool:
    """Whether ``key``, a run id or a name given to look one up, can match anything: names hold no
    NUL and no lone surrogate (``relaypoint.workflow.is_name``) and run ids are hex, so a key holding
    one matches nothing; it is not sent to the database, whose driver would refuse it (an encoding
    error, or on PostgreSQL a NUL in text)."""
    return "\x00" not in key and encoding.is_unicode(key)
