"""What a call running beside others sees in ``ctx.history``: never a call of its own wave, so
what it sees does not depend on which of them finished first (found by the concurrent crash
matrix, tests/patternmatrix.py's ``spread``: a planner's independent subtasks digest different
histories in a killed run and in an uninterrupted one). On each backend."""

from __future__ import annotations

import time

import pytest

from relaypoint import Runtime, Workflow
from relaypoint.status import StepStatus


@pytest.mark.xfail(strict=True, reason="a planner's subtasks see the subtasks beside them that finished "
                   "first (Planner has no seen(): ctx.history is every call recorded when it is read)")
def test_a_planners_ready_subtasks_never_see_each_other_whichever_finishes_first(db):
    seen = {}
    wf = Workflow("w")

    def plan(ctx):
        return [{"id": "fast", "agent": "fast"}, {"id": "slow", "agent": "slow"}]

    def fast(ctx):
        return "fast done"

    def slow(ctx):
        # reads its history once the subtask beside it has been recorded
        limit = time.monotonic() + 20
        while not any(t.agent == "fast" and t.status == StepStatus.COMPLETED for t in rt.get(ctx.run_id).tasks):
            assert time.monotonic() < limit, "the fast subtask never landed"
            time.sleep(0.01)
        seen["slow"] = [h.get("task") for h in ctx.history]
        return "slow done"

    wf.planner("build", plan=plan, agents={"fast": fast, "slow": slow})
    with Runtime(db, [wf]) as rt:
        rid = rt.start("w")
        assert rt.step_output(rid, "build") == {"fast": "fast done", "slow": "slow done"}
    # as in a vote, a parallel or a map: a call sees none of the calls that run beside it
    assert seen["slow"] == [], f"the slow subtask saw {seen['slow']} recorded beside it"
