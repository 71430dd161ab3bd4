"""Constant-cost guards (counts, not timings): a step boundary runs the same SQL statements, reads
the same number of rows and costs about the same SQLite work at step 5 of a 10-step chain as at step
4,000 of a 5,000-step one; resuming a fork at the last step of a 5,000-step run reads what resuming
a 10-step one reads, and no output but the one its step uses; a step that reads no ``ctx.results``
reads no output; listing never touches step rows or outputs.

Statements come from the store's trace hook, rows from its ``rows_read`` count, and the work SQLite
does inside (pages and rows it walks, which no row count shows) from its virtual-machine
instruction count, which grows only with the depth of a B-tree (logarithmically) on constant-cost paths.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from relaypoint import Runtime, Workflow

SMALL, LARGE = 10, 5_000


def shape(statement: str) -> str:
    """A statement with its literal values blanked, so two boundaries compare by what they run."""
    text = re.sub(r"'(?:[^']|'')*'", "?", statement)
    return re.sub(r"\b\d+(?:\.\d+)?\b", "N", text)


def reads_outputs(statement: str) -> bool:
    """Whether a statement reads output values (an existence check on the outputs' key does not)."""
    return re.search(r"\bvalue\b[^;]*\bFROM\s+outputs\b", statement, re.IGNORECASE) is not None


@dataclass
class Meter:
    """Counts what a store does between :meth:`on` and :meth:`off`."""

    rt: Runtime
    statements: list[str] = field(default_factory=list)
    instructions: int = 0
    rows: int = 0
    _rows_at: int = 0
    _on: bool = False

    def _tick(self) -> int:
        self.instructions += 1
        return 0

    def on(self) -> None:
        self._on, self._rows_at = True, self.rt.store.rows_read
        self.rt.store.trace(self.statements.append)
        self.rt.store.conn.set_progress_handler(self._tick, 1)

    def off(self) -> None:
        if self._on:
            self.rt.store.trace(None)
            self.rt.store.conn.set_progress_handler(None, 1)
            self.rows += self.rt.store.rows_read - self._rows_at
            self._on = False

    def outputs_read(self) -> list[str]:
        return [s for s in self.statements if reads_outputs(s)]


def chain(n: int, body=None) -> Workflow:
    wf = Workflow("chain")
    for i in range(n):
        wf.step(name=f"s{i}")(body or (lambda ctx: None))
    return wf


def boundary_cost(tmp_path: Path, n: int, k: int) -> Meter:
    """What the boundary between steps ``k`` and ``k + 1`` of an ``n``-step no-op chain costs."""
    meter: Meter | None = None
    wf = Workflow("chain")

    def step(ctx):
        i = int(ctx.step[1:])
        if i == k + 1:
            meter.off()
        if i == k:
            # the boundary starts when this step returns: meter from here to the next step's start
            meter.on()
        return None

    for i in range(n):
        wf.step(name=f"s{i}")(step)
    with Runtime(str(tmp_path / f"{n}.db"), [wf], durability="normal") as rt:
        meter = Meter(rt)
        rt.start("chain")
    return meter


def test_a_boundary_costs_the_same_at_step_5_of_10_and_at_step_4000_of_5000(tmp_path):
    small = boundary_cost(tmp_path, SMALL, 5)
    large = boundary_cost(tmp_path, LARGE, 4_000)
    assert small.statements and [shape(s) for s in small.statements] == [shape(s) for s in large.statements]
    assert small.rows == large.rows <= 2
    assert large.instructions <= small.instructions * 1.25, (small.instructions, large.instructions)
    assert small.outputs_read() == [] == large.outputs_read()


def resume_cost(tmp_path: Path, n: int) -> tuple[Meter, list]:
    """Fork an ``n``-step chain at its last step and resume the fork; returns what the resume cost
    and what the last step read of ``ctx.results``."""
    seen = []

    def step(ctx):
        if ctx.step == f"s{n - 1}":
            seen.append(ctx.results[f"s{n - 2}"])
        return {"i": ctx.step}

    wf = chain(n, step)
    with Runtime(str(tmp_path / f"fork{n}.db"), [wf], durability="normal") as rt:
        parent = rt.start("chain")
        child = rt.fork(parent, f"s{n - 1}")
        seen.clear()
        meter = Meter(rt)
        meter.on()
        rt.resume(child)
        meter.off()
        assert rt.get(child, with_outputs=False).status == "completed"
    return meter, seen


def test_resuming_a_fork_at_the_last_step_costs_the_same_for_10_and_5000_steps(tmp_path):
    (small, small_seen), (large, large_seen) = resume_cost(tmp_path, SMALL), resume_cost(tmp_path, LARGE)
    assert small_seen == [{"i": f"s{SMALL - 2}"}] and large_seen == [{"i": f"s{LARGE - 2}"}]
    assert [shape(s) for s in small.statements] == [shape(s) for s in large.statements]
    assert small.rows == large.rows
    assert large.instructions <= small.instructions * 1.25, (small.instructions, large.instructions)
    # the one output the step used, nothing else
    assert len(small.outputs_read()) == 1 == len(large.outputs_read())


def test_a_step_that_reads_no_results_reads_no_output(tmp_path):
    with Runtime(str(tmp_path / "s.db"), [chain(20, lambda ctx: {"big": "x" * 10_000})]) as rt:
        meter = Meter(rt)
        meter.on()
        rid = rt.start("chain")
        meter.off()
        assert rt.get(rid, with_outputs=False).status == "completed"
    assert meter.statements and meter.outputs_read() == []


@pytest.mark.parametrize("filters", [{}, {"status": "completed"}, {"workflow": "chain"}, {"search": "ch"}])
def test_listing_touches_no_step_and_no_output(tmp_path, filters):
    with Runtime(str(tmp_path / "l.db"), [chain(3, lambda ctx: {"big": "x" * 10_000})]) as rt:
        for _ in range(5):
            rt.start("chain")
        meter = Meter(rt)
        meter.on()
        listed = rt.list(**filters)
        meter.off()
    assert len(listed) == 5 and meter.statements
    assert not any(re.search(r"\b(steps|outputs|output)\b", s) for s in meter.statements), meter.statements
    assert meter.rows <= 5 + len(meter.statements)


def debate_boundary_cost(tmp_path: Path, rounds: int, k: int) -> tuple[Meter, list[int]]:
    """What the boundary after ``pro``'s speech in round ``k`` of a ``rounds``-round debate costs
    (agents that read no history), and the size of every checkpoint state the run wrote (bytes)."""
    meter: Meter | None = None

    def pro(ctx):
        if ctx.iteration == k:
            meter.on()
        return "p"

    def con(ctx):
        if ctx.iteration == k:
            meter.off()
        return "c"

    wf = Workflow("debate")
    wf.debate("argue", agents={"pro": pro, "con": con}, rounds=rounds, judge=lambda ctx: "j")
    with Runtime(str(tmp_path / f"d{rounds}.db"), [wf], durability="normal") as rt:
        meter = Meter(rt)
        rid = rt.start("debate")
        sizes = [len(str(cp.state)) for cp in rt.store.checkpoints(rid)]
    return meter, sizes


def test_a_boundary_inside_a_debate_costs_the_same_in_round_5_of_10_and_round_2000_of_2500(tmp_path):
    (small, small_sizes), (large, large_sizes) = (debate_boundary_cost(tmp_path, 10, 5),
                                                  debate_boundary_cost(tmp_path, 2_500, 2_000))
    assert small.statements and [shape(s) for s in small.statements] == [shape(s) for s in large.statements]
    assert small.rows == large.rows
    assert large.instructions <= small.instructions * 1.25, (small.instructions, large.instructions)
    assert small.outputs_read() == [] == large.outputs_read()
    # the pattern's state is counters, never results: it does not grow with the rounds
    assert max(large_sizes) - max(small_sizes) <= 4, (max(small_sizes), max(large_sizes))
