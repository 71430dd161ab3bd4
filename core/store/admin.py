"""The administration half of the storage contract: :class:`RunAdmin` (the copy a fork makes,
deletion, the copy of runs between stores, grants) and :class:`RunRows`, a run's raw rows as one
store exports them and another imports them.

Its writes are made inside :meth:`~relaypoint.store.base.RunStore.transaction` unless a docstring
says otherwise.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..errors import InvalidValue

# The state and comment RunStore.copy_for_fork writes for an inherited approval (both backends write the same text).
_INHERITED_STATE = re.compile(r'\{"inherited_from":\{"run_id":(".*"),"checkpoint_id":(\d+)\}\}')
_INHERITED_COMMENT = re.compile(r"inherited from checkpoint (\d+) of run ")


@dataclass(frozen=True)
class RunRows:
    """Everything a store holds of one run, as raw backend-neutral values, to copy it to another
    store (:meth:`RunStore.export_runs`, :meth:`RunStore.import_runs`).

    Each row is a dict of the columns named by :data:`~.schema.RUN_ROW`, :data:`~.schema.STEP_ROW`,
    :data:`~.schema.OUTPUT_ROW`, :data:`~.schema.CHECKPOINT_ROW`, :data:`~.schema.EVENT_ROW`,
    :data:`~.schema.CALL_ROW`: times are aware UTC datetimes (milliseconds), JSON
    values the stored text, never decoded. ``input``/``definition``: the stored JSON text (None when
    the store has none). ``steps``, ``outputs`` in ``seq`` order; ``checkpoints``, ``events`` in id
    order; ``calls`` in (``seq``, ``position``) order. ``parent_checkpoints``: the ids of the parent run's checkpoints in the source store, in
    order ([] for a run that is no fork): a copy that renumbers the parent's checkpoints maps the
    references to them (an inherited approval's origin) by their position."""

    run: dict[str, Any]
    input: str | None
    definition: str | None
    steps: list[dict[str, Any]]
    outputs: list[dict[str, Any]]
    checkpoints: list[dict[str, Any]]
    events: list[dict[str, Any]]
    calls: list[dict[str, Any]] = field(default_factory=list)
    parent_checkpoints: list[int] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.run["run_id"]

    def counts(self) -> dict[str, int]:
        """Rows per table of :data:`~.schema.COPIED_TABLES` this run has (what :meth:`RunStore.row_counts`
        must find once it is imported)."""
        return {"runs": 1, "run_inputs": int(self.input is not None), "steps": len(self.steps),
                "outputs": len(self.outputs), "checkpoints": len(self.checkpoints), "events": len(self.events),
                "calls": len(self.calls)}

    def renumbered(self, checkpoints: Mapping[int, int], events: Mapping[int, int],
                   parent: Mapping[int, int]) -> RunRows:
        """These rows with new ids: ``checkpoints``/``events`` map this run's old ids to new ones
        (ids not in them are kept), ``parent`` maps the parent run's checkpoint ids. Every reference
        follows: an event's ``checkpoint_id`` (this run's) and ``parent_checkpoint_id`` (the
        parent's), an inherited approval's ``state`` and ``comment`` (the parent's). Text holding
        no changed id is kept byte for byte."""
        if not any(k != v for m in (checkpoints, events, parent) for k, v in m.items()):
            return self
        cps = [{**c, "checkpoint_id": checkpoints.get(c["checkpoint_id"], c["checkpoint_id"]),
                **_inherited(c, self.run["parent_run_id"], parent)} for c in self.checkpoints]
        evs = [{**e, "event_id": events.get(e["event_id"], e["event_id"]),
                "detail": _detail_renumbered(e["detail"], checkpoints, parent)} for e in self.events]
        return RunRows(run=self.run, input=self.input, definition=self.definition, steps=self.steps,
                       outputs=self.outputs, checkpoints=cps, events=evs, calls=self.calls,
                       parent_checkpoints=self.parent_checkpoints)


def _inherited(c: dict[str, Any], parent_run: str | None, parent: Mapping[int, int]) -> dict[str, Any]:
    """The ``state`` and ``comment`` of an inherited approval naming the parent's checkpoint by its
    new id ({} when ``c`` is no inherited approval of ``parent_run`` or its origin keeps its id)."""
    m = _INHERITED_STATE.fullmatch(c["state"] or "")
    if m is None or parent_run is None or json.loads(m.group(1)) != parent_run:
        return {}
    old = int(m.group(2))
    new = parent.get(old, old)
    if new == old:
        return {}
    changed = {"state": f'{{"inherited_from":{{"run_id":{m.group(1)},"checkpoint_id":{new}}}}}'}
    comment = c["comment"] or ""
    if (cm := _INHERITED_COMMENT.match(comment)) is not None and int(cm.group(1)) == old:
        changed["comment"] = f"inherited from checkpoint {new} of run {comment[cm.end():]}"
    return changed


def _detail_renumbered(text: str | None, checkpoints: Mapping[int, int], parent: Mapping[int, int]) -> str | None:
    """An event's detail with its ``checkpoint_id`` and ``parent_checkpoint_id`` mapped; the text
    unchanged when neither changes (or it is not a JSON object)."""
    if not text or "checkpoint_id" not in text:
        return text
    try:
        detail = json.loads(text)
    except ValueError:
        return text
    if not isinstance(detail, dict):
        return text
    changed = False
    for key, ids in (("checkpoint_id", checkpoints), ("parent_checkpoint_id", parent)):
        old = detail.get(key)
        if isinstance(old, int) and not isinstance(old, bool) and ids.get(old, old) != old:
            detail[key] = ids[old]
            changed = True
    # Both backends write an event's detail as json.dumps(detail, ensure_ascii=False).
    return json.dumps(detail, ensure_ascii=False) if changed else text


def renumbered_batch(batch: Sequence[RunRows], shift: Mapping[str, int], held: Callable[[str, list[int]], set[int]],
                     allocate: Callable[[str, int], list[int]],
                     parent_ids: Callable[[list[str]], dict[str, list[int]]]) -> list[RunRows]:
    """A batch of runs to import, renumbered as :meth:`RunStore.import_runs` says, by three
    queries of the destination: ``held(table, ids)`` (which of ``ids`` the table holds, table
    "checkpoints" or "events"), ``allocate(table, count)`` (``count`` new ids in increasing order,
    above every id the table holds or gave), ``parent_ids(run_ids)`` (each run's checkpoint ids in
    order). ``shift``: what each table's ids move up by (a table left out: 0). A parent in the same
    batch is matched through its own map."""
    moved: dict[str, dict[int, int]] = {}  # table -> old id -> new id, the whole batch's
    for table, key in (("checkpoints", "checkpoint_id"), ("events", "event_id")):
        old = sorted(x[key] for r in batch for x in getattr(r, table))
        new = [i + shift.get(table, 0) for i in old]
        if old and held(table, new):  # taken meanwhile by another writer: above every id there, in order
            new = allocate(table, len(old))
        moved[table] = dict(zip(old, new))

    def own(r: RunRows, table: str, key: str) -> dict[int, int]:
        return {x[key]: moved[table][x[key]] for x in getattr(r, table)}

    by_id = {r.run_id: r for r in batch}
    elsewhere = [r.run["parent_run_id"] for r in batch if r.parent_checkpoints and r.run["parent_run_id"] not in by_id]
    found = parent_ids(elsewhere) if elsewhere else {}
    out = []
    for r in batch:
        parent: dict[int, int] = {}
        pid = r.run["parent_run_id"]
        if pid in by_id:
            parent = own(by_id[pid], "checkpoints", "checkpoint_id")
        elif r.parent_checkpoints and len(found.get(pid, [])) == len(r.parent_checkpoints):
            parent = dict(zip(r.parent_checkpoints, found[pid]))  # else the parent is not (all) here: kept as is
        out.append(r.renumbered(own(r, "checkpoints", "checkpoint_id"), own(r, "events", "event_id"), parent))
    return out


class RunAdmin(ABC):
    """The administration methods of a :class:`~relaypoint.store.base.RunStore`."""

    where: str

    # ---- forks and deletion

    @abstractmethod
    def delete_runs(self, run_ids: Iterable[str]) -> None:
        """Delete runs with everything of them (steps, outputs, checkpoints, events), and each
        definition no run uses any more."""

    @abstractmethod
    def copy_for_fork(self, parent: str, child: str, cut_seq: int, children_before: int | None = None, *,
                      approvals: Sequence[int] = (), at: datetime | None = None) -> list[int]:
        """Copy the parent's executions into the child (which must exist), keeping their seqs:
        top-level executions before ``cut_seq`` as recorded, with all their children, and their
        outputs as stored text (never decoded); with ``children_before``, also the children of
        execution ``cut_seq`` whose seq is below it (a fork inside a pattern); top-level executions
        from ``cut_seq`` on pending, attempts 0, no output, with the child's idempotency keys.

        ``approvals``: ids of decided approval checkpoints (the parent's) the child inherits, each
        copied into it created at ``at`` (UTC), the decision keeping its author and time, the comment
        naming where it came from, ``state`` naming the origin. Returns the new checkpoints' ids, in
        the order of ``approvals``. Raises ``ValueError`` for ``approvals`` without ``at``;
        ``StoreError`` when one of ``approvals`` is not in the store."""

    # ---- copying between stores

    @abstractmethod
    def run_page(self, after: tuple[Any, str] | None, limit: int) -> list[tuple[Any, str]]:
        """Positions (created_at as the backend keeps it, run_id) of up to ``limit`` runs, oldest
        first, after the position ``after`` (None: from the first): every run, damaged or not, so a
        copy misses none; a fork comes after its parent. Positions are opaque to the caller."""

    @abstractmethod
    def export_runs(self, run_ids: Sequence[str]) -> list[RunRows]:
        """The raw rows of these runs (ids not in the store are left out), read as one consistent
        snapshot: a run being written meanwhile is read as of one instant. Must not be called inside
        :meth:`transaction`. Raises :class:`StoreDamaged` naming a run whose times cannot be read."""

    @abstractmethod
    def held_ids(self, table: str, ids: Sequence[int] | None = None, *, runs: Sequence[str] | None = None) -> set[int]:
        """Ids of ``table``'s rows ("checkpoints" or "events"): which of ``ids`` it holds, or with
        ``runs``, every id of these runs' rows (what a copy of the runs to another store numbers).
        Raises ``ValueError`` unless exactly one of ``ids`` and ``runs`` is given, or for another table."""

    @abstractmethod
    def make_room(self, table: str, top: int, renumber: bool) -> int:
        """Room for ids of ``table`` ("checkpoints" or "events") up to ``top`` copied in from another
        store, kept as they are (returns 0) or, with ``renumber``, moved above every id this store
        holds or has given (returns what is added to each: their order is kept). On PostgreSQL the
        identity moves past the room, so the ids the store gives later (another writer's, while
        the copy goes on) are above it; SQLite gives max + 1, and :meth:`import_runs` renumbers a
        batch holding an id taken meanwhile."""

    @abstractmethod
    def import_runs(self, batch: Sequence[RunRows], shift: Mapping[str, int] | None = None) -> None:
        """Insert runs exported from another store (inside :meth:`transaction`), values as given, a
        fork after its parent. Every checkpoint id moves up by ``shift["checkpoints"]`` and every
        event id by ``shift["events"]`` (see :meth:`make_room`; None or a table left out: kept),
        every reference following (an event's checkpoint, an inherited approval's origin; see
        :func:`renumbered_batch`); a batch holding an id the store holds by then (another writer's)
        is numbered above every id there instead, in the same order. Raises :class:`StoreError`
        when the store already holds one of the runs (nothing imported)."""

    @abstractmethod
    def row_counts(self, run_ids: Sequence[str]) -> dict[str, int]:
        """Rows per table of :data:`~.schema.COPIED_TABLES` that these runs have in the store."""

    # ---- roles

    def grant(self, role: str, *, writes: bool) -> None:
        """Let the database role ``role`` use this store: read it, and with ``writes`` record in it
        (every command and the worker), now and after later migrations by this user. Only a store
        on a database server has roles: here it raises :class:`InvalidValue` (a SQLite store is
        guarded by its file's permissions)."""
        raise InvalidValue(f"roles belong to a database server; {self.where} is a SQLite file, guarded by its "
                           "file permissions")
