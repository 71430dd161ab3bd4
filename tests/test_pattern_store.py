"""What the store and the operations around it do for patterns, on real SQLite files: the reads of a
group's children use an index and cost the same however many executions other groups have;
decisions on a pattern's execution (a held orphan, a person's approval turn) act on that row; forks
from an iteration boundary refuse what they cannot copy, in one line."""

from __future__ import annotations

import json

from helpers import DB
from test_store_contract import DEBATE, add_debate, add_run

from relaypoint.status import StepStatus
from relaypoint.store import NewStep, RunStore, open_store

# ---- reads: index use and cost ------------------------------------------------------------------


def add_group(store: RunStore, run_id: str, parent: int, name: str, first: int, count: int) -> None:
    """``count`` completed children of group ``parent`` (named ``name``), from seq ``first``, with outputs."""
    with store.transaction():
        store.insert_steps(run_id, [NewStep(seq=first + i, name=name, iteration=i + 1, agent="a", parent=parent,
                                            status=StepStatus.COMPLETED, idempotency_key=f"{run_id}/{name}#{i + 1}/a")
                                    for i in range(count)])
        for i in range(count):
            store.set_output(run_id, first + i, json.dumps({"n": i}))


def test_pattern_reads_use_the_primary_key_or_an_index(tmp_path):
    with open_store(str(tmp_path / DB), create=True) as store:
        add_debate(store, "r1", rounds=1)
        trace: list[str] = []
        store.trace(trace.append)
        store.children("r1", 1)
        store.history("r1", 1)
        store.checkpoint_at("r1", 3)
        store.steps("r1")
        store.trace(None)
        plans = [" | ".join(r[3] for r in store.conn.execute(f"EXPLAIN QUERY PLAN {s}")) for s in trace]
    assert [p.split(" USING ")[1].split()[1] for p in plans] == [
        "steps_by_name", "steps_by_name", "checkpoints_by_run", "sqlite_autoindex_steps_1"], plans
    assert all("SCAN" not in p for p in plans), plans  # every table is searched, none read whole


def test_reading_a_groups_children_costs_the_same_however_many_executions_other_groups_have(tmp_path):
    costs = []
    with open_store(str(tmp_path / DB), create=True) as store:
        for run_id, others in (("few", 10), ("many", 5_000)):
            add_run(store, run_id, steps=DEBATE)
            add_group(store, run_id, 1, "argue", 3, 6)
            add_group(store, run_id, 2, "verdict", 9, others)  # a later group, larger and larger
            instructions = [0]

            def tick() -> int:
                instructions[0] += 1
                return 0

            store.conn.set_progress_handler(tick, 1)
            rows = store.rows_read
            assert len(store.children(run_id, 1)) == len(store.history(run_id, 1)) == 6
            store.conn.set_progress_handler(None, 1)
            costs.append((store.rows_read - rows, instructions[0]))
    (few_rows, few_work), (many_rows, many_work) = costs
    assert few_rows == many_rows == 12
    assert many_work < few_work * 1.5, costs  # B-tree depth only, not the other group's 5,000 rows
