"""The workflows of ``store_v4.db`` and ``store_pg_v8.sql`` (stores made by relaypoint 0.2.0 at commit
d9cd0d1: SQLite schema version 4, PostgreSQL schema version 8; see make_store_v4.py): the two
reproductions of a pause resolved by its seq (issue 19, item 1) and the other pauses a pattern
makes. The migration tests define them again, unchanged, to decide and resume the runs they hold."""

from __future__ import annotations

from relaypoint import Workflow, human


def pro(ctx):
    if ctx.input.get("fail"):
        raise RuntimeError("pro failed on purpose")
    return {"speech": f"pro speaks in round {ctx.iteration}"}


def con(ctx):
    return {"speech": f"con speaks in round {ctx.iteration}"}


# 1: a gate on the last planned step, after a pattern: its checkpoint's seq is pro's row.
gate_after_pattern = Workflow("gate_after_pattern")
gate_after_pattern.debate("argue", agents={"pro": pro, "con": con}, rounds=1)


@gate_after_pattern.step(approval=True)
def final(ctx):
    return {"publish": "THE REAL GATED OUTPUT"}


# 2: a gate on the step before a pattern: its checkpoint's seq is the pattern's row.
gate_before_pattern = Workflow("gate_before_pattern")


@gate_before_pattern.step(approval=True)
def draft(ctx):
    return {"draft": "the draft"}


gate_before_pattern.debate("argue", agents={"pro": pro, "con": con}, rounds=1, retries=0)

# A person's turn of kind approval, and one of kind input, inside a debate.
turn_approval = Workflow("turn_approval")
turn_approval.debate("argue", agents={"pro": pro, "person": human("approve pro's speech?", kind="approval")},
                     rounds=1)
turn_input = Workflow("turn_input")
turn_input.debate("argue", agents={"pro": pro, "person": human("your view?")}, rounds=1)

# An input request in a top-level step.
ask = Workflow("ask")


@ask.step
def question(ctx):
    return {"answer": ctx.request_input("what colour?")}


WORKFLOWS = [gate_after_pattern, gate_before_pattern, turn_approval, turn_input, ask]
