"""Mechanisms: one COMMIT per step boundary, listings that never read step outputs, keyset pages,
and query plans that use the runs indexes."""

from __future__ import annotations

import re
import sqlite3
from datetime import timedelta

import pytest

from helpers import DB, FakeClock, Flow, between, committed_writes, returns, runtime, sql
from relaypoint import StoreError
from relaypoint.clock import to_text



def marking(flow: Flow, trace: list[str]) -> Flow:
    """Make each step of ``flow`` put ``enter NAME`` / ``leave NAME`` markers into ``trace``."""
    for spec in flow.wf.steps:
        inner = flow.behaviour.get(spec.name) or returns({"step": spec.name})

        def marked(ctx, inner=inner):
            trace.append(f"enter {ctx.step}")
            out = inner(ctx)
            trace.append(f"leave {ctx.step}")
            return out
        flow.on(spec.name, marked)
    return flow


def test_the_transaction_grouping_sees_split_and_autocommit_writes():
    one = ["BEGIN IMMEDIATE", "UPDATE steps SET x = 1", "INSERT INTO events VALUES (1)", "COMMIT"]
    split = ["BEGIN IMMEDIATE", "UPDATE steps SET x = 1", "COMMIT", "BEGIN IMMEDIATE", "INSERT INTO events VALUES (1)",
             "COMMIT"]
    loose = ["UPDATE steps SET x = 1", "INSERT INTO events VALUES (1)"]
    savepoint = ['SAVEPOINT "q"', "SELECT 1", 'RELEASE "q"', 'SAVEPOINT "w"', "INSERT INTO t VALUES (1)", 'RELEASE "w"']
    rolled_back = ["BEGIN IMMEDIATE", "UPDATE steps SET x = 1", "ROLLBACK"]
    assert len(committed_writes(one)) == 1
    assert len(committed_writes(split)) == 2
    assert len(committed_writes(loose)) == 2
    assert committed_writes(savepoint) == [["INSERT INTO t VALUES (1)"]]
    assert committed_writes(rolled_back) == []


@pytest.mark.parametrize("finished, starts", [("a", "b"), ("b", "c")])
def test_each_step_boundary_is_exactly_one_commit(tmp_path, finished, starts):
    trace: list[str] = []
    flow = marking(Flow("a", "b", "c"), trace)
    with runtime(tmp_path, flow) as rt:
        rt.store.trace(trace.append)
        rid = rt.start("flow")
    segment = between(trace, f"leave {finished}", f"enter {starts}")
    assert sum(s.strip().upper() == "COMMIT" for s in segment) == 1
    (boundary,) = committed_writes(segment)
    text = "\n".join(boundary)
    # The finished step's output, the checkpoint, the events and the next step's start, together.
    assert "UPDATE steps SET status = 'completed'" in text
    assert f"INTO outputs (run_id, seq, value) VALUES ('{rid}', {'abc'.index(finished)}, '{{\"step\":\"{finished}\"}}')" in text
    assert "INSERT INTO checkpoints" in text and "'boundary'" in text
    assert "'step_completed'" in text and "'step_started'" in text and f"'{starts}'" in text
    assert "UPDATE steps SET status = 'running'" in text
    assert f"WHERE run_id = '{rid}' AND lease_token = " in text  # fenced on the executor's lease


def test_an_approval_gate_is_one_commit_with_the_step_output(tmp_path):
    trace: list[str] = []
    flow = marking(Flow("a", ("b", {"approval": True}), "c"), trace)
    with runtime(tmp_path, flow) as rt:
        rt.store.trace(trace.append)
        rt.start("flow")
    (gate,) = committed_writes(between(trace, "leave b"))
    text = "\n".join(gate)
    assert "status = 'completed'" in text and "status = 'awaiting_approval'" in text
    assert "'approval'" in text and "'paused'" in text


# ---- listing --------------------------------------------------------------------------------------


def deny_step_reads(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """Install an authorizer that refuses any read of steps, outputs, inputs and definitions;
    returns the list the refused reads are appended to."""
    refused: list[tuple[str, str]] = []

    def authorize(action, table, column, db, trigger):
        if action == sqlite3.SQLITE_READ and table in ("steps", "outputs", "run_inputs", "definitions"):
            refused.append((table, column))
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK
    conn.set_authorizer(authorize)
    return refused


def test_listing_never_reads_steps_even_with_huge_outputs(tmp_path):
    big = "x" * 5_000_000
    flow = Flow("a", ("b", {"approval": True}), "c").on("a", returns({"blob": big}))
    clock = FakeClock()
    with runtime(tmp_path, flow, clock=clock) as rt:
        paused = rt.start("flow")
        clock.advance(seconds=1)
        done = rt.start("flow")
        rt.approve(done)
        rt.resume(done)
    trace: list[str] = []
    with runtime(tmp_path) as rt:
        refused = deny_step_reads(rt.store.conn)
        rt.store.trace(trace.append)
        listed = rt.list()
        assert [(r.run_id, r.status, r.steps_done, r.steps_total) for r in listed] == [
            (done, "completed", 3, 3), (paused, "awaiting_approval", 2, 3)]
        assert refused == []
        with pytest.raises(StoreError, match="prohibited|not authorized"):
            rt.step_output(paused, "a")  # the authorizer really bites: reading an output touches steps
        assert refused[0][0] == "steps"
    selects = [s for s in trace if s.lstrip().upper().startswith("SELECT")]
    assert selects and not any(mentions_steps_or_output(s) for s in selects)


def mentions_steps_or_output(text: str) -> bool:
    return re.search(r"\b(steps|output)\b", text) is not None


def plan(db, statement: str) -> list[str]:
    return [row[3] for row in sql(db, f"EXPLAIN QUERY PLAN {statement}")]


def listing_sql(rt, **filters) -> list[str]:
    """The SELECT statements ``rt.list(**filters)`` runs."""
    trace: list[str] = []
    rt.store.trace(trace.append)
    try:
        rt.list(**filters)
    finally:
        rt.store.trace(None)
    return [s for s in trace if s.lstrip().upper().startswith("SELECT") and "FROM runs" in s]


def index_columns(db, name: str) -> list[str]:
    return [r[2] for r in sql(db, f"PRAGMA index_info({name})")]


@pytest.mark.parametrize("filters, leading", [
    ({}, None),
    ({"before": ("2031-01-01T12:00:00.000Z", "zz")}, None),
    ({"status": "completed"}, "status"),
    ({"status": "completed", "before": ("2031-01-01T12:00:00.000Z", "zz")}, "status"),
    ({"workflow": "flow"}, "workflow"),
])
def test_listing_query_plans_use_a_runs_index_and_never_touch_steps(tmp_path, filters, leading):
    with runtime(tmp_path, Flow("a")) as rt:
        for _ in range(3):
            rt.start("flow")
        statements = [s for s in listing_sql(rt, **filters) if "ORDER BY" in s]
    (listing,) = statements
    assert not mentions_steps_or_output(listing)
    lines = plan(tmp_path / DB, listing)
    assert not any(mentions_steps_or_output(line) for line in lines), lines
    (scan,) = [line for line in lines if " runs" in line]
    assert " USING " in scan and "INDEX " in scan, scan  # never a bare SCAN runs
    if leading is not None:  # a filter is served by the index that starts with its column
        index = scan.split("INDEX ")[1].split()[0]
        assert index_columns(tmp_path / DB, index)[0] == leading, scan


def fill_runs(db, n: int) -> None:
    """``n`` runs rows (three statuses, two workflows), one second apart, written directly."""
    start = FakeClock().now
    with sqlite3.connect(db) as conn:
        conn.executemany(
            "INSERT INTO runs (run_id, workflow, status, created_at, updated_at, steps_done, steps_total) "
            "VALUES (?, ?, ?, ?, ?, 0, 1)",
            [(f"{i:016x}", "w" if i % 2 else "v", ("completed", "failed", "queued")[i % 3],
              to_text(start + timedelta(seconds=i)), to_text(start + timedelta(seconds=i))) for i in range(n)])
    conn.close()


def page_cost(rt, **filters) -> int:
    """SQLite virtual-machine instructions spent on one 20-run page (a deterministic cost measure)."""
    steps = []
    rt.store.conn.set_progress_handler(lambda: steps.append(1), 1)
    try:
        assert len(rt.store.list_runs(limit=20, **filters)) == 20
    finally:
        rt.store.conn.set_progress_handler(None, 1)
    return len(steps)


@pytest.mark.parametrize("filters", [{}, {"status": "completed"}, {"workflow": "w"},
                                     {"status": "queued", "workflow": "v"}, {"deep": True}])
def test_a_page_costs_the_same_in_a_small_and_a_large_store(tmp_path, filters):
    costs = []
    for n in (200, 6000):
        (tmp_path / str(n)).mkdir()
        with runtime(tmp_path / str(n)) as rt:
            fill_runs(rt.store.path, n)
            if filters.get("deep"):  # a page from the middle of the listing
                middle = rt.store.list_runs(limit=n // 2)[-1]
                costs.append(page_cost(rt, before=(to_text(middle.created_at), middle.run_id)))
            else:
                costs.append(page_cost(rt, **filters))
    small, large = costs
    assert large <= small * 1.5, costs  # reading or sorting every run would cost ~30 times more


# ---- keyset pagination ----------------------------------------------------------------------------


def test_keyset_pages_return_every_run_once_newest_first(tmp_path):
    clock = FakeClock()
    flows = (Flow("a", name="plain"), Flow(("a", {"approval": True}), name="gated"))
    created: dict[str, tuple[str, str, str]] = {}  # run id -> (created_at, workflow, status)
    with runtime(tmp_path, *flows, clock=clock) as rt:
        for i in range(23):
            if i % 3 == 0:
                clock.advance(seconds=1)  # runs created within one millisecond share created_at
            workflow = "gated" if i % 4 == 0 else "plain"
            rid = rt.start(workflow)
            created[rid] = (to_text(clock.now), workflow, rt.get(rid).status)

        def pages(size: int, **filters) -> list[list[str]]:
            out, before = [], None
            while True:
                page = rt.store.list_runs(limit=size, before=before, **filters)
                if not page:
                    return out
                out.append([r.run_id for r in page])
                before = (to_text(page[-1].created_at), page[-1].run_id)

        def expected(**filters) -> list[str]:
            keep = [rid for rid, (at, wf, status) in created.items()
                    if filters.get("workflow", wf) == wf and filters.get("status", status) == status]
            return sorted(keep, key=lambda rid: (created[rid][0], rid), reverse=True)

        for size in (1, 4, 5, 23, 50):
            got = pages(size)
            assert all(len(p) == size for p in got[:-1])
            assert [rid for p in got for rid in p] == expected()
        gated = pages(2, workflow="gated")
        assert [rid for p in gated for rid in p] == expected(workflow="gated")
        paused = pages(3, status="awaiting_approval")
        assert [rid for p in paused for rid in p] == expected(status="awaiting_approval")
        assert len(expected(status="awaiting_approval")) == 6
        assert rt.list(limit=5) == rt.store.list_runs(limit=5)


def test_a_page_boundary_inside_a_tie_of_created_at_loses_nothing(tmp_path):
    clock = FakeClock()
    with runtime(tmp_path, Flow("a"), clock=clock) as rt:
        tied = sorted(rt.start("flow") for _ in range(4))
        clock.advance(seconds=1)
        newest = rt.start("flow")
        first = rt.store.list_runs(limit=2)
        rest = rt.store.list_runs(limit=10, before=(to_text(first[-1].created_at), first[-1].run_id))
    assert [r.run_id for r in first] == [newest, tied[3]]
    assert [r.run_id for r in rest] == [tied[2], tied[1], tied[0]]
    assert all(r.created_at == first[1].created_at for r in rest)
    assert first[0].created_at - rest[0].created_at == timedelta(seconds=1)
