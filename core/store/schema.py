"""The store's tables as they are today, described once for both backends.

Each backend's migrations (:mod:`.migrations`) bring a store of any older version to these tables;
a test compares a migrated store's columns with them on both backends. Column lists of inserts and
of copied rows are derived from here. A column's ``kind`` says how each backend stores it:

- ``key``: text compared bytewise (ids, names, statuses; ``COLLATE "C"`` on PostgreSQL);
- ``text``: free text or JSON text (stored as written: never normalised);
- ``int``: an integer; ``id``: an integer key the store assigns (``INTEGER PRIMARY KEY`` on SQLite,
  an identity column on PostgreSQL);
- ``time``: a UTC time to the millisecond (ISO text on SQLite, ``timestamptz`` on PostgreSQL).

Bookkeeping tables of one backend (``meta``, ``run_counts``, PostgreSQL's ``listeners``) are its
migrations' own.
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("key", "text", "int", "id", "time")


@dataclass(frozen=True)
class Column:
    """A column: its ``name``, its ``kind`` (one of :data:`KINDS`), whether it is ``not_null``, its
    ``default`` (an SQL literal, or None), and whether a copy to another store carries it
    (``copied``: False for a worker's own claim on an announcement, which means nothing elsewhere)."""

    name: str
    kind: str
    not_null: bool = False
    default: str | None = None
    copied: bool = True


@dataclass(frozen=True)
class Table:
    """A table: its ``name``, its ``columns`` in their stored order, its ``primary_key``."""

    name: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]

    @property
    def names(self) -> tuple[str, ...]:
        """Every column's name, in order."""
        return tuple(c.name for c in self.columns)

    def copied(self, *, per_run: bool = False) -> tuple[str, ...]:
        """The columns a copy of a run carries, in order; ``per_run``: without ``run_id`` (the
        rows of one run, whose id is the run's)."""
        return tuple(c.name for c in self.columns if c.copied and not (per_run and c.name == "run_id"))


def _c(name: str, kind: str, not_null: bool = False, default: str | None = None, copied: bool = True) -> Column:
    assert kind in KINDS, kind
    return Column(name, kind, not_null, default, copied)


RUNS = Table("runs", (
    _c("run_id", "key", True), _c("workflow", "key", True), _c("status", "key", True), _c("parent_run_id", "key"),
    _c("forked_from_step", "key"), _c("fingerprint", "key"), _c("created_at", "time", True),
    _c("updated_at", "time", True), _c("current_step", "key"), _c("steps_done", "int", True, "0"),
    _c("steps_total", "int", True, "0"), _c("suspect_deaths", "int", True, "0"), _c("error", "text"),
    _c("lease_token", "key"), _c("lease_pid", "int"), _c("lease_pid_start", "key"), _c("lease_host", "key"),
    _c("lease_expires_at", "time"), _c("heartbeat_at", "time"),
), ("run_id",))
RUN_INPUTS = Table("run_inputs", (_c("run_id", "key", True), _c("input", "text", True)), ("run_id",))
DEFINITIONS = Table("definitions", (_c("fingerprint", "key", True), _c("definition", "text", True)), ("fingerprint",))
STEPS = Table("steps", (
    _c("run_id", "key", True), _c("seq", "int", True), _c("name", "key", True), _c("iteration", "int", True, "1"),
    _c("agent", "key"), _c("parent_seq", "int"), _c("status", "key", True), _c("attempts", "int", True, "0"),
    _c("options", "text", True, "'{}'"), _c("error", "text"), _c("traceback", "text"), _c("started_at", "time"),
    _c("finished_at", "time"), _c("idempotency_key", "key", True), _c("progress", "text"),
), ("run_id", "seq"))
OUTPUTS = Table("outputs", (_c("run_id", "key", True), _c("seq", "int", True), _c("value", "text")), ("run_id", "seq"))
CHECKPOINTS = Table("checkpoints", (
    _c("checkpoint_id", "id", True), _c("run_id", "key", True), _c("seq", "int", True), _c("step", "key"),
    _c("kind", "key", True), _c("created_at", "time", True), _c("reason", "text"), _c("state", "text"),
    _c("decision", "key"), _c("decided_by", "text"), _c("decided_at", "time"), _c("comment", "text"),
    _c("value", "text"), _c("deadline_at", "time"), _c("announced_at", "time"), _c("paused_seq", "int"),
    _c("announcing_until", "time", copied=False), _c("announce_failed_at", "time", copied=False),
), ("checkpoint_id",))
EVENTS = Table("events", (
    _c("event_id", "id", True), _c("run_id", "key", True), _c("at", "time", True), _c("kind", "key", True),
    _c("step", "key"), _c("actor", "text"), _c("detail", "text"),
), ("event_id",))
CALLS = Table("calls", (
    _c("run_id", "key", True), _c("seq", "int", True), _c("position", "int", True), _c("name", "key", True),
    _c("kind", "key", True), _c("status", "key", True), _c("attempt", "int", True), _c("value", "text"),
    _c("error", "text"), _c("detail", "text"), _c("model", "key"), _c("requests", "int"),
    _c("input_tokens", "int"), _c("output_tokens", "int"), _c("started_at", "time", True),
    _c("finished_at", "time", True),
), ("run_id", "seq", "position"))

TABLES = (RUNS, RUN_INPUTS, DEFINITIONS, STEPS, OUTPUTS, CHECKPOINTS, EVENTS, CALLS)
"""Every table holding runs, parents before the tables referring to them."""

COPIED_TABLES = tuple(t.name for t in TABLES if t is not DEFINITIONS)
"""The per-run tables :meth:`RunStore.row_counts` counts, in the order a copy reports them."""
RUN_ROW = RUNS.copied()
"""The columns of a :class:`~relaypoint.store.admin.RunRows` ``run`` (the ``runs`` table's)."""
STEP_ROW = STEPS.copied(per_run=True)
"""The columns of each of a :class:`~relaypoint.store.admin.RunRows`' ``steps`` (``steps`` less ``run_id``)."""
OUTPUT_ROW = OUTPUTS.copied(per_run=True)
CHECKPOINT_ROW = CHECKPOINTS.copied(per_run=True)
EVENT_ROW = EVENTS.copied(per_run=True)
CALL_ROW = CALLS.copied(per_run=True)
ROW_TIMES = frozenset(c.name for t in TABLES for c in t.columns if c.kind == "time" and c.copied)
"""Columns holding times: aware UTC datetimes (milliseconds) in a copied row, whatever the backend."""
LEASE_COLUMNS = ("lease_token", "lease_pid", "lease_pid_start", "lease_host", "lease_expires_at", "heartbeat_at")
"""The ``runs`` columns of a run's lease (:class:`relaypoint.models.Lease`), in order."""


def insert(table: Table, columns: tuple[str, ...], mark: str = "?") -> str:
    """``INSERT INTO table (columns) VALUES (mark, ...)``; ``mark``: the placeholder (``?``, ``%s``).
    Raises ``ValueError`` for a column the table does not have."""
    unknown = set(columns) - set(table.names)
    if unknown:
        raise ValueError(f"{table.name} has no column {', '.join(sorted(unknown))}")
    return f"INSERT INTO {table.name} ({', '.join(columns)}) VALUES ({', '.join([mark] * len(columns))})"
