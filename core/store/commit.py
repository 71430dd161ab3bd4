"""The write primitive in SQL: :class:`SqlCommit`, :meth:`RunStore.commit` written once for both
backends over :class:`~relaypoint.store.sql.SqlStore`'s dialect hooks, and the statements of a
change.

A backend subclasses :class:`SqlCommit`. SQLite runs a change's statements in a transaction of
its own; PostgreSQL overrides :meth:`SqlCommit._commit_alone` and :meth:`SqlCommit._apply` to send
the change as one call of its schema's ``commit_change`` function instead.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from ..models import Lease
from ..status import OPEN_STEPS, StepStatus
from .group import CommitCounts
from .schema import CALLS, CHECKPOINTS, EVENT_ROW, EVENTS, LEASE_COLUMNS, RUN_INPUTS, RUN_ROW, RUNS, STEPS, insert
from .sql import PAUSED, UNDECIDED, SqlStore, translated
from .writes import KEEP, Change, Committed, NewRun, NewStep, RunUpdate, Superseded

NEW_RUN_COLUMNS = tuple(c for c in RUN_ROW if c not in ("suspect_deaths", "error"))
"""The columns of ``runs`` a new run is inserted with (:class:`~relaypoint.store.writes.NewRun`)."""

# The statements of a change (SqlCommit._apply), fixed texts a driver prepares once.
_RUN_INSERT = insert(RUNS, NEW_RUN_COLUMNS)
_INPUT_INSERT = insert(RUN_INPUTS, RUN_INPUTS.names)
# A fingerprint is a hash of its definition: one row serves every run of that definition.
_DEFINITION_INSERT = "INSERT INTO definitions (fingerprint, definition) VALUES (?, ?) ON CONFLICT (fingerprint) DO NOTHING"
_NEW_STEP_COLUMNS = ("run_id", "seq", "name", "iteration", "agent", "parent_seq", "status", "attempts", "options",
                     "idempotency_key")
_STEP_INSERT = insert(STEPS, _NEW_STEP_COLUMNS)
# ... and with a kept execution's error, traceback and times (a replaced chain).
_STEP_COPY = insert(STEPS, (*_NEW_STEP_COLUMNS, "error", "traceback", "started_at", "finished_at"))
_DECIDE = ("UPDATE checkpoints SET decision = ?, decided_by = ?, decided_at = ?, comment = ?, value = ? "
           f"WHERE checkpoint_id = ? AND {UNDECIDED}")
_STEP_END = "UPDATE steps SET status = ?, finished_at = ?, error = ?, traceback = ? WHERE run_id = ? AND seq = ?"
_STEP_MARK = "UPDATE steps SET status = ? WHERE run_id = ? AND seq = ?"
OPEN_STEP_STATUSES = tuple(sorted(s.value for s in OPEN_STEPS))
_CANCEL_OPEN = (f"UPDATE steps SET status = '{StepStatus.CANCELLED.value}', finished_at = coalesce(finished_at, ?) "
                f"WHERE run_id = ? AND status IN {OPEN_STEP_STATUSES!r}")
_STEP_START = (f"UPDATE steps SET status = '{StepStatus.RUNNING.value}', attempts = ?, started_at = ?, "
               "finished_at = NULL, error = NULL, traceback = NULL WHERE run_id = ? AND seq = ?")
_STEP_APPEND = ("INSERT INTO steps (run_id, seq, name, iteration, agent, parent_seq, status, attempts, options, "
                f"started_at, idempotency_key) VALUES (?, ?, ?, ?, ?, ?, '{StepStatus.RUNNING.value}', ?, ?, ?, ?)")
_OUTPUT_UPSERT = ("INSERT INTO outputs (run_id, seq, value) VALUES (?, ?, ?) "
                  "ON CONFLICT (run_id, seq) DO UPDATE SET value = excluded.value")
_CALL_UPSERT = (insert(CALLS, CALLS.names) + " ON CONFLICT (run_id, seq, position) DO UPDATE SET "
                + ", ".join(f"{c} = excluded.{c}" for c in CALLS.names[3:]))
_PROGRESS = "UPDATE steps SET progress = ? WHERE run_id = ? AND seq = ?"
_CLOSE_PAUSES = f"UPDATE checkpoints SET decision = ?, decided_by = ?, decided_at = ? WHERE run_id = ? AND {PAUSED} AND {UNDECIDED}"
_REOPEN = ("UPDATE checkpoints SET announced_at = NULL, announce_failed_at = NULL, announcing_until = NULL "
           "WHERE checkpoint_id = ?")
CHECKPOINT_COLUMNS = ("run_id", "seq", "step", "kind", "created_at", "reason", "state", "deadline_at", "paused_seq")
"""The columns a new checkpoint is inserted with (:class:`~relaypoint.store.writes.NewCheckpoint`)."""
_CHECKPOINT_INSERT = insert(CHECKPOINTS, CHECKPOINT_COLUMNS)
_EVENT_INSERT = insert(EVENTS, ("run_id", *EVENT_ROW[1:]))


class SqlCommit(SqlStore):
    """A :class:`SqlStore` that commits changes (:meth:`RunStore.commit`): the statements of each
    part, in the order :class:`~relaypoint.store.writes.Change` gives."""

    commit_counts: CommitCounts
    """What this store object committed (each backend makes it when it opens)."""

    @translated
    def commit(self, change: Change) -> Committed:
        if self.readonly:
            raise self.read_only_error()
        if self._threads.in_transaction:
            return self._apply(change)
        return self._commit_alone(change)

    def _commit_alone(self, change: Change) -> Committed:
        """``change`` in a transaction of its own (a backend with a one-call commit overrides it);
        :meth:`commit` has checked what :meth:`transaction` would."""
        with self._write(change.run_id):
            return self._apply(change)

    def _apply(self, c: Change) -> Committed:
        """The statements of change ``c`` in the open transaction, in the order :class:`Change`
        gives; returns what it made. Fixed statement texts (prepared once), the change's time
        converted once. Refusals come before the first write (a new run's insert aside)."""
        at, rid = self._stamp(c.at), c.run_id
        if c.new is not None:
            self._insert_run(c.new)
        if c.inserted:
            self._execute_many(_STEP_INSERT, [_step_values(rid, s) for s in c.inserted])
        dropped = self._replace(rid, c.replaced) if c.replaced is not None else []
        if (d := c.decided) is not None and self._execute(_DECIDE, (
                str(d.decision), self._free(d.by), at, self._free(d.comment), d.value_json, d.checkpoint_id)) != 1:
            raise Superseded(f"checkpoint {d.checkpoint_id} was already decided")
        if c.run is not None:
            self._update_run(rid, c.fence, c.run, at)
        if c.ended:
            self._execute_many(_STEP_END, [(str(e.status), at, self._free(e.error), self._free(e.traceback), rid,
                                            e.seq) for e in c.ended])
        if c.marked:
            self._execute_many(_STEP_MARK, [(str(status), rid, seq) for seq, status in c.marked.items()])
        if c.cancel_open:
            self._execute(_CANCEL_OPEN, (at, rid))
        if (started := c.started) is not None:
            s = started.step
            if isinstance(s, NewStep):
                self._execute(_STEP_APPEND, (rid, s.seq, s.name, s.iteration, s.agent, s.parent, started.attempt,
                                             s.options, at, s.idempotency_key))
            else:
                self._execute(_STEP_START, (started.attempt, at, rid, s))
        if c.outputs:
            self._execute_many(_OUTPUT_UPSERT, [(rid, seq, text) for seq, text in c.outputs.items()])
        if c.calls:
            self._execute_many(_CALL_UPSERT, [
                (rid, k.seq, k.position, k.name, k.kind, str(k.status), k.attempt, k.value, self._free(k.error),
                 k.detail, k.model, k.requests, k.input_tokens, k.output_tokens, self._stamp(k.started_at), at)
                for k in c.calls])
        if c.progress:
            self._execute_many(_PROGRESS, [(self._free(text), rid, seq) for seq, text in c.progress.items()])
        if (closed := c.closed) is not None:
            self._execute(_CLOSE_PAUSES, (str(closed.decision), self._free(closed.by), at, rid))
        if c.reopened is not None:
            self._execute(_REOPEN, (c.reopened,))
        checkpoint_id = None
        for cp in c.checkpoints:
            checkpoint_id = self._insert_one(_CHECKPOINT_INSERT, (
                cp.run_id, cp.seq, cp.step, cp.kind, at if cp.at == c.at else self._stamp(cp.at), self._free(cp.reason),
                cp.state, self._stamp(cp.deadline_at), cp.paused_seq), "checkpoint_id")
        if c.events:
            self._execute_many(_EVENT_INSERT, [
                (rid, at, ev.kind, ev.step, self._free(ev.actor),
                 event_detail({"checkpoint_id": checkpoint_id, **ev.detail} if ev.names_checkpoint else ev.detail))
                for ev in c.events])
        return Committed(checkpoint_id=checkpoint_id, dropped=dropped)

    def _insert_run(self, run: NewRun) -> None:
        at = self._stamp(run.created_at)
        values = {"run_id": run.run_id, "workflow": run.workflow, "status": str(run.status),
                  "parent_run_id": run.parent_run_id, "forked_from_step": run.forked_from_step,
                  "fingerprint": run.fingerprint, "created_at": at, "updated_at": at, "current_step": run.current_step,
                  "steps_done": run.steps_done, "steps_total": run.steps_total,
                  **dict(zip(LEASE_COLUMNS, self._lease_values(run.lease)))}
        self._execute(_RUN_INSERT, [values[c] for c in NEW_RUN_COLUMNS])
        self._execute(_INPUT_INSERT, (run.run_id, run.input))
        self._keep_definition(run.fingerprint, run.definition)

    def _keep_definition(self, fingerprint: str, definition: str) -> None:
        self._execute(_DEFINITION_INSERT, (fingerprint, definition))

    def _lease_values(self, lease: Lease | None) -> tuple[Any, ...]:
        if lease is None:
            return (None,) * len(LEASE_COLUMNS)
        return (lease.token, lease.pid, lease.pid_start, lease.host, self._stamp(lease.expires_at),
                self._stamp(lease.heartbeat_at))

    def _update_run(self, rid: str, fence: str | None, u: RunUpdate, at: Any) -> None:
        """Update the run's row as ``u`` says (fenced on ``fence``); raise :meth:`_refused` when no
        row was updated."""
        given = u.given()
        names = (*given, "updated_at") if u.touch else tuple(given)
        values: list[Any] = []
        for k, v in given.items():
            if k == "lease":
                values += self._lease_values(v)
            elif k == "error":
                values.append(self._free(v))
            else:
                values.append(str(v) if k == "status" else v)
        if u.touch:
            values.append(at)
        fenced = fence is not None
        if self._execute(_run_update(names, fenced), (*values, rid, fence) if fenced else (*values, rid)) != 1:
            raise self._refused(rid)
        if u.definition is not KEEP:  # after the fence: a refused change writes nothing
            self._keep_definition(u.fingerprint, u.definition)

    def _replace(self, run_id: str, steps: Sequence[NewStep]) -> list[str]:
        """A ``replaced`` chain (see :class:`Change`); returns the names of the dropped steps."""
        rows = self._rows("SELECT * FROM steps WHERE run_id = ? ORDER BY seq", (run_id,))
        top = [r for r in rows if r["parent_seq"] is None]
        old = {r["name"]: r for r in top}
        shift = len(steps) - len(top)  # children stay after every top-level row, in their order
        moved: dict[int, int] = {}  # old seq -> new seq of each kept execution
        kept_rows = []
        for s in steps:
            kept = old.pop(s.name, None)
            if kept is None:
                kept_rows.append(_step_values(run_id, s) + (None, None, None, None))
                continue
            moved[kept["seq"]] = s.seq
            kept_rows.append((run_id, s.seq, s.name, kept["iteration"], kept["agent"], None, kept["status"],
                              kept["attempts"], s.options, kept["idempotency_key"], kept["error"], kept["traceback"],
                              kept["started_at"], kept["finished_at"]))
        for r in rows:  # in seq order: a parent is placed before its children
            if r["parent_seq"] is not None and r["parent_seq"] in moved:
                moved[r["seq"]] = r["seq"] + shift
                kept_rows.append((run_id, moved[r["seq"]], r["name"], r["iteration"], r["agent"],
                                  moved[r["parent_seq"]], r["status"], r["attempts"], r["options"],
                                  r["idempotency_key"], r["error"], r["traceback"], r["started_at"], r["finished_at"]))
        self._execute("DELETE FROM steps WHERE run_id = ?", (run_id,))
        self._execute_many(_STEP_COPY, kept_rows)
        # Outputs and recorded calls move with their execution without being read: park them at
        # negative seqs, move the kept ones to their new seq, drop the rest.
        for table in ("outputs", "calls"):
            self._execute(f"UPDATE {table} SET seq = -1 - seq WHERE run_id = ?", (run_id,))
            self._execute_many(f"UPDATE {table} SET seq = ? WHERE run_id = ? AND seq = ?",
                               [(new, run_id, -1 - was) for was, new in moved.items()])
            self._execute(f"DELETE FROM {table} WHERE run_id = ? AND seq < 0", (run_id,))
        # Checkpoints follow their executions (an answer stays with the step that asked for it); a
        # seq at no kept execution names none (negative), so it never matches an execution added later.
        def follow(seq: int | None) -> int | None:
            return seq if seq is None or seq < 0 else moved.get(seq, -1 - seq)

        self._execute_many("UPDATE checkpoints SET seq = ?, paused_seq = ? WHERE checkpoint_id = ?", [
            (follow(r["seq"]), follow(r["paused_seq"]), r["checkpoint_id"]) for r in self._rows(
                "SELECT checkpoint_id, seq, paused_seq FROM checkpoints WHERE run_id = ?", (run_id,))
            if (follow(r["seq"]), follow(r["paused_seq"])) != (r["seq"], r["paused_seq"])])
        return sorted(old)


def event_detail(detail: dict[str, Any]) -> str | None:
    """An event's detail as stored: JSON text (None when empty)."""
    return json.dumps(detail, ensure_ascii=False) if detail else None


def _step_values(run_id: str, s: NewStep) -> tuple[Any, ...]:
    """A new execution's values, in the order of ``_STEP_INSERT``."""
    return (run_id, s.seq, s.name, s.iteration, s.agent, s.parent, str(s.status), s.attempts, s.options,
            s.idempotency_key)


@functools.lru_cache(maxsize=64)
def _run_update(names: tuple[str, ...], fenced: bool) -> str:
    """The ``UPDATE runs`` text setting ``names`` (``lease``: its columns), fenced or not: built
    once per shape."""
    columns = [c for k in names for c in (LEASE_COLUMNS if k == "lease" else (k,))]
    sql = f"UPDATE runs SET {', '.join(f'{c} = ?' for c in columns)} WHERE run_id = ?"
    return sql + " AND lease_token = ?" if fenced else sql
