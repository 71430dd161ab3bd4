"""What the SQL backends share of administration: :class:`SqlAdmin`, the SQL of forking (the copy of
a run's executions, an inherited approval), deletion and the copy of runs between stores, written
once with ``?`` placeholders over :class:`~.sql.SqlStore`'s dialect hooks and the few of its own
below (an inserted row's id, a value as JSON text, the ids a store gives next).
"""

from __future__ import annotations

import itertools
from abc import abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from ..errors import StoreError
from ..status import StepStatus
from .admin import RunRows, renumbered_batch
from .schema import CALL_ROW, CHECKPOINT_ROW, COPIED_TABLES, EVENT_ROW, OUTPUT_ROW, ROW_TIMES, RUN_ROW, STEP_ROW
from .sql import DEFINITION_OF_RUN, INPUT_OF_RUN, SqlStore, translated

# The columns of a copied run holding free text a person reads (see SqlStore._free).
COPIED_FREE_TEXT = frozenset({"error", "traceback", "reason", "decided_by", "comment", "actor"})
# The executions a fork copies as recorded, of a parent's (``s``): the top-level ones before the cut
# (its seq, given twice) with all their children, and the cut group's children before the seq given
# third (none when it is NULL: ``seq < NULL`` is never true).
_FORK_COPIED = ("(coalesce(s.parent_seq, s.seq) < CAST(? AS bigint) "
                "OR (s.parent_seq = CAST(? AS bigint) AND s.seq < CAST(? AS bigint)))")


class SqlAdmin(SqlStore):
    """The administration methods of a :class:`~.sql.SqlStore`. A backend provides, besides the
    dialect hooks of :class:`~.sql.SqlStore`: :meth:`_json_text`,
    :meth:`_reserve` (when its ids come from a sequence), :meth:`make_room` and :meth:`_allocate`."""

    # ---- dialect hooks

    @staticmethod
    @abstractmethod
    def _json_text(expression: str) -> str:
        """SQL of the text value ``expression`` as a JSON string (quoted, escaped as SQLite's
        ``json_quote`` writes it)."""

    def _reserve(self, table: str, top: int) -> None:
        """Make the ids ``table`` ("checkpoints" or "events") gives later higher than ``top``: nothing
        to do where the next id is the highest one held plus one."""

    @abstractmethod
    def _allocate(self, table: str, count: int) -> list[int]:
        """``count`` ids of ``table`` above every id it holds or has given, in order, for a batch an
        import renumbers."""

    # ---- forks and deletion

    @translated
    def delete_runs(self, run_ids: Iterable[str]) -> None:
        ids = list(run_ids)
        if not ids:
            return
        among, values = self._among("run_id", ids)
        fingerprints = [r["fingerprint"] for r in self._rows(
            f"SELECT DISTINCT fingerprint FROM runs WHERE {among} AND fingerprint IS NOT NULL", (values,))]
        for table in ("calls", "events", "checkpoints", "outputs", "steps", "run_inputs", "runs"):
            self._execute(f"DELETE FROM {table} WHERE {among}", (values,))
        # A definition goes with the last run of it.
        unused, prints = self._among("fingerprint", fingerprints)
        self._execute(f"DELETE FROM definitions WHERE {unused} AND NOT EXISTS "
                      "(SELECT 1 FROM runs r WHERE r.fingerprint = definitions.fingerprint)", (prints,))

    @translated
    def copy_for_fork(self, parent: str, child: str, cut_seq: int, children_before: int | None = None, *,
                      approvals: Sequence[int] = (), at: datetime | None = None) -> list[int]:
        if approvals and at is None:
            raise ValueError("copy_for_fork: inherited approvals need their time (at)")
        # In SQL: upstream outputs and recorded calls move as stored text, never decoded or re-run.
        # Four inserts, each read in the primary key's order (no sort), appended in seq order.
        copied = (cut_seq, cut_seq, children_before)
        self._execute(
            f"""INSERT INTO steps (run_id, seq, name, iteration, agent, parent_seq, status, attempts, options,
                                   error, traceback, started_at, finished_at, idempotency_key)
                SELECT CAST(? AS text), seq, name, iteration, agent, parent_seq, status, attempts, options, error,
                       traceback, started_at, finished_at, idempotency_key
                FROM steps s WHERE run_id = ? AND {_FORK_COPIED} ORDER BY seq""", (child, parent, *copied))
        self._execute(
            """INSERT INTO steps (run_id, seq, name, iteration, agent, parent_seq, status, attempts, options,
                                  idempotency_key)
               SELECT CAST(? AS text), seq, name, 1, NULL, NULL, CAST(? AS text), 0, options,
                      CAST(? AS text) || '/' || name
               FROM steps WHERE run_id = ? AND seq >= CAST(? AS bigint) AND parent_seq IS NULL AND iteration = 1
               ORDER BY seq""", (child, StepStatus.PENDING.value, child, parent, cut_seq))
        self._execute(f"INSERT INTO outputs (run_id, seq, value) SELECT CAST(? AS text), o.seq, o.value FROM steps s "
                      "JOIN outputs o ON o.run_id = s.run_id AND o.seq = s.seq "
                      f"WHERE s.run_id = ? AND {_FORK_COPIED} ORDER BY s.seq", (child, parent, *copied))
        self._execute(f"INSERT INTO calls (run_id, {', '.join(CALL_ROW)}) SELECT CAST(? AS text), "
                      f"{', '.join('k.' + c for c in CALL_ROW)} FROM steps s "
                      "JOIN calls k ON k.run_id = s.run_id AND k.seq = s.seq "
                      f"WHERE s.run_id = ? AND {_FORK_COPIED} ORDER BY s.seq, k.position", (child, parent, *copied))
        return [self._inherit_approval(cp, child, at) for cp in approvals]

    def _inherit_approval(self, parent_checkpoint_id: int, child: str, at: datetime) -> int:
        """Copy one decided approval checkpoint into ``child``; its new id (see :meth:`copy_for_fork`)."""
        # The decision keeps its original author and time; the comment names where it came from, the
        # state the origin: {"inherited_from":{"run_id":..,"checkpoint_id":..}}.
        new_id = self._insert_one(
            f"""INSERT INTO checkpoints (run_id, seq, step, kind, created_at, reason, state, decision,
                                         decided_by, decided_at, comment, value, paused_seq)
                SELECT CAST(? AS text), seq, step, kind, ?, reason,
                       '{{"inherited_from":{{"run_id":' || {self._json_text('run_id')} || ',"checkpoint_id":'
                           || checkpoint_id || '}}}}',
                       decision, decided_by, decided_at,
                       'inherited from checkpoint ' || checkpoint_id || ' of run ' || run_id
                           || coalesce(': ' || comment, ''),
                       value, paused_seq
                FROM checkpoints WHERE checkpoint_id = ?""", (child, self._stamp(at), parent_checkpoint_id),
            "checkpoint_id")
        if new_id is None:
            raise StoreError(f"checkpoint {parent_checkpoint_id} is not in {self.where}; nothing was inherited")
        return new_id

    # ---- copying between stores

    @translated
    def export_runs(self, run_ids: Sequence[str]) -> list[RunRows]:
        among, ids = self._among("run_id", run_ids)
        self._outside_transaction()
        with self._snapshot():  # a boundary committed meanwhile is not half seen
            runs = self._rows(f"SELECT {', '.join(RUN_ROW)}, {INPUT_OF_RUN} AS input, {DEFINITION_OF_RUN} AS "
                              f"definition FROM runs WHERE {among} ORDER BY created_at, run_id", (ids,))
            # in key order (a call's key is its execution and position), the same on every backend
            tables = {table: _grouped(self._rows(f"SELECT run_id, {', '.join(columns)} FROM {table} WHERE {among} "
                                                 f"ORDER BY run_id, {order}", (ids,)))
                      for table, columns, order in (("steps", STEP_ROW, "seq"), ("outputs", OUTPUT_ROW, "seq"),
                                                    ("checkpoints", CHECKPOINT_ROW, "checkpoint_id"),
                                                    ("events", EVENT_ROW, "event_id"),
                                                    ("calls", CALL_ROW, "seq, position"))}
            parents = _grouped(self._rows(
                "SELECT run_id, checkpoint_id FROM checkpoints WHERE run_id IN (SELECT parent_run_id FROM runs "
                f"WHERE {among}) ORDER BY run_id, checkpoint_id", (ids,)))
        return [RunRows(run=self._exported(rid, {k: r[k] for k in RUN_ROW}), input=r["input"],
                        definition=r["definition"],
                        steps=[self._exported(rid, x) for x in tables["steps"].get(rid, [])],
                        outputs=tables["outputs"].get(rid, []),
                        checkpoints=[self._exported(rid, x) for x in tables["checkpoints"].get(rid, [])],
                        events=[self._exported(rid, x) for x in tables["events"].get(rid, [])],
                        calls=[self._exported(rid, x) for x in tables["calls"].get(rid, [])],
                        parent_checkpoints=[x["checkpoint_id"] for x in parents.get(r["parent_run_id"], [])])
                for r in runs for rid in (r["run_id"],)]

    @translated
    def row_counts(self, run_ids: Sequence[str]) -> dict[str, int]:
        among, ids = self._among("run_id", run_ids)
        return {table: self._row(f"SELECT count(*) AS n FROM {table} WHERE {among}", (ids,))["n"]
                for table in COPIED_TABLES}

    @translated
    def held_ids(self, table: str, ids: Sequence[int] | None = None, *, runs: Sequence[str] | None = None) -> set[int]:
        if (ids is None) == (runs is None):
            raise ValueError("held_ids: ids or runs")
        column = id_column(table)
        among, values = self._among(column, ids, "bigint") if runs is None else self._among("run_id", runs)
        return {r["id"] for r in self._rows(f"SELECT {column} AS id FROM {table} WHERE {among}", (values,))}

    def _checkpoint_ids(self, run_ids: list[str]) -> dict[str, list[int]]:
        """Each of these runs' checkpoint ids, in order."""
        among, ids = self._among("run_id", run_ids)
        return {rid: [r["checkpoint_id"] for r in group] for rid, group in _grouped(self._rows(
            f"SELECT run_id, checkpoint_id FROM checkpoints WHERE {among} ORDER BY run_id, checkpoint_id",
            (ids,))).items()}

    @translated
    def run_page(self, after: tuple[Any, str] | None, limit: int) -> list[tuple[Any, str]]:
        where, params = ("WHERE (created_at, run_id) > (?, ?) ", [*after]) if after else ("", [])
        return [(r["created_at"], r["run_id"]) for r in self._rows(
            f"SELECT created_at, run_id FROM runs {where}ORDER BY created_at, run_id LIMIT ?", [*params, limit])]

    @translated
    def import_runs(self, batch: Sequence[RunRows], shift: Mapping[str, int] | None = None) -> None:
        if not self._threads.in_transaction:
            raise RuntimeError("import_runs: call it inside transaction()")
        if held := self.existing([r.run_id for r in batch]):
            raise StoreError(f"run {held[0]} is already in {self.where}; nothing was imported")
        batch = renumbered_batch(batch, shift or {}, self.held_ids, self._allocate, self._checkpoint_ids)
        for table, key in (("checkpoints", "checkpoint_id"), ("events", "event_id")):
            # Past the ids written, whether make_room reserved them or not.
            if top := max((x[key] for r in batch for x in getattr(r, table)), default=0):
                self._reserve(table, top)
        # A fingerprint is a hash of its definition: one row serves every run of that definition.
        self._execute_many("INSERT INTO definitions (fingerprint, definition) VALUES (?, ?) "
                           "ON CONFLICT (fingerprint) DO NOTHING", list({
                               r.run["fingerprint"]: r.definition for r in batch
                               if r.run["fingerprint"] is not None and r.definition is not None}.items()))

        def into(table: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
            self._execute_many(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                               rows)

        into("runs", RUN_ROW, [tuple(self._copied(c, r.run[c]) for c in RUN_ROW) for r in batch])
        into("run_inputs", ("run_id", "input"), [(r.run_id, r.input) for r in batch if r.input is not None])
        for table, columns in (("steps", STEP_ROW), ("outputs", OUTPUT_ROW), ("checkpoints", CHECKPOINT_ROW),
                               ("events", EVENT_ROW), ("calls", CALL_ROW)):
            into(table, ("run_id", *columns),
                 [(r.run_id, *(self._copied(c, v[c]) for c in columns)) for r in batch for v in getattr(r, table)])

    def _copied(self, column: str, value: Any) -> Any:
        """A value of a copied row as this store keeps it: a time as :meth:`_stamp` makes it, free text
        as :meth:`_free` does."""
        if column in ROW_TIMES:
            return self._stamp(value)
        return self._free(value) if column in COPIED_FREE_TEXT else value


def id_column(table: str) -> str:
    """The id column of ``table``, "checkpoints" or "events" (the tables a copy numbers): ``ValueError``
    for any other name, which is never put in SQL."""
    columns = {"checkpoints": "checkpoint_id", "events": "event_id"}
    if table not in columns:
        raise ValueError(f"no numbered table {table!r}; checkpoints or events")
    return columns[table]


def _grouped(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Rows ordered by run id, by run id, each without its ``run_id``."""
    return {rid: [{k: v for k, v in r.items() if k != "run_id"} for r in group]
            for rid, group in itertools.groupby(rows, key=lambda r: r["run_id"])}
