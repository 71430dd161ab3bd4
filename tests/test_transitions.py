"""Every run transition, allowed and refused, through ``Runtime`` on a real store file."""

from __future__ import annotations

import getpass
import json
import os
import sys
from datetime import timedelta

import pytest
from pydantic import BaseModel

from helpers import (DB, FakeClock, Flow, asks, die_in, fails, ids, kill_owner, killed_start, returns, rows,
                     runtime, set_owner, sql, with_attempt)
from relaypoint import (DefinitionError, DriftError, InvalidValue, LeaseLost, RefusedTransition, Runtime,
                        RunStatus, StepStatus, StoreError, UnknownRun, UnknownStep, UnknownWorkflow, Workflow)


def statuses(rt: Runtime, rid: str) -> dict[str, StepStatus]:
    return {t.name: t.status for t in rt.get(rid).tasks}


def event_kinds(rt: Runtime, rid: str) -> list[str]:
    return [e.kind for e in rt.events(rid)]


def gated(*later: str) -> Flow:
    """a -> b (approval gate) -> later steps (default c)."""
    return Flow("a", ("b", {"approval": True}), *(later or ("c",)))


# ---- start ----------------------------------------------------------------------------------------


def test_start_runs_every_step_to_completed(db):
    flow = Flow("a", "b", "c")
    with runtime(db, flow) as rt:
        rid = rt.start("flow", {"topic": "x"})
        run = rt.get(rid)
        assert run.status == RunStatus.COMPLETED
        assert [(t.name, t.status, t.attempts, t.output) for t in run.tasks] == [
            ("a", "completed", 1, {"step": "a"}), ("b", "completed", 1, {"step": "b"}),
            ("c", "completed", 1, {"step": "c"})]
        assert (run.steps_done, run.steps_total, run.current_step, run.lease, run.error) == (3, 3, None, None, None)
        assert run.input == {"topic": "x"}
        assert event_kinds(rt, rid) == ["run_started"] + ["step_started", "step_completed"] * 3 + ["run_completed"]
    assert flow.calls == {"a": 1, "b": 1, "c": 1}


def test_start_pauses_at_gate_with_gated_output_recorded_and_later_steps_pending(db):
    flow = gated("c", "d")
    with runtime(db, flow) as rt:
        rid = rt.start("flow")
        run = rt.get(rid)
        assert run.status == RunStatus.AWAITING_APPROVAL
        assert statuses(rt, rid) == {"a": "completed", "b": "completed", "c": "pending", "d": "pending"}
        assert rt.step_output(rid, "b") == {"step": "b"}
        assert (run.pending.kind, run.pending.step, run.pending.decision) == ("approval", "b", None)
        assert (run.current_step, run.steps_done, run.lease) == ("b", 2, None)
    assert flow.calls["c"] == 0


def test_start_refuses_input_that_is_not_a_json_object_and_records_nothing(db):
    with runtime(db, Flow("a")) as rt:
        for bad in ([1, 2], "text", {"n": float("nan")}, {1: "x"}):
            with pytest.raises(InvalidValue):
                rt.start("flow", bad)
        assert rt.list() == []


def test_a_workflow_without_steps_completes(db):
    with runtime(db, Workflow("empty")) as rt:
        assert rt.get(rt.start("empty")).status == RunStatus.COMPLETED


def test_enqueue_records_the_run_queued_and_executes_nothing_until_resumed(db):
    flow = gated("c")
    with runtime(db, flow, Workflow("empty")) as rt:
        rid = rt.enqueue("flow", input={"topic": "x"})
        run = rt.get(rid)
        assert (run.status, run.input, run.lease, run.current_step, run.steps_done, run.steps_total) == (
            RunStatus.QUEUED, {"topic": "x"}, None, "a", 0, 3)
        assert [(t.name, t.status, t.attempts) for t in run.tasks] == [
            ("a", "pending", 0), ("b", "pending", 0), ("c", "pending", 0)]
        assert event_kinds(rt, rid) == ["run_queued"]
        assert rt.events(rid)[0].detail == {"workflow": "flow"}
        assert not flow.calls
        # a worker (here: a resume) executes it from its first step, up to its gate
        assert rt.resume(rid) == RunStatus.AWAITING_APPROVAL
        assert statuses(rt, rid) == {"a": "completed", "b": "completed", "c": "pending"}
        assert event_kinds(rt, rid)[:3] == ["run_queued", "resumed", "step_started"]
        assert dict(flow.calls) == {"a": 1, "b": 1}
        # a workflow without steps is queued too, and completes when executed
        empty = rt.enqueue("empty")
        assert rt.get(empty).status == RunStatus.QUEUED and rt.resume(empty) == RunStatus.COMPLETED


def test_an_enqueued_run_that_begins_with_a_pattern_is_executed_as_a_started_one(db):
    # the pattern's first execution is one its driver appends: recorded at enqueue, as start records
    # it, so the claim goes on with it rather than abandoning the pattern's row
    def refuses(ctx):
        raise RuntimeError("no")

    wf = Workflow("debating")
    wf.debate("argue", agents={"pro": refuses, "con": lambda ctx: "con"}, rounds=1, judge=lambda ctx: "judged")
    with runtime(db, wf) as rt:
        started = rt.start("debating")
        queued = rt.enqueue("debating")
        assert [(t.name, t.agent, t.status) for t in rt.get(queued).tasks] == [
            ("argue", None, "pending"), ("argue", "pro", "pending")]
        assert rt.resume(queued) == RunStatus.FAILED
        rows_of = lambda rid: [(t.name, t.iteration, t.agent, t.status, t.attempts) for t in rt.get(rid).tasks]
        assert rows_of(queued) == rows_of(started) == [("argue", 1, None, "pending", 0), ("argue", 1, "pro", "failed", 1)]
        [resumed] = [e for e in rt.events(queued) if e.kind == "resumed"]
        assert "abandoned" not in resumed.detail


def test_enqueue_refuses_what_start_refuses_and_records_nothing(db):
    with runtime(db, Flow("a")) as rt:
        for bad in ([1, 2], "text", {"n": float("nan")}):
            with pytest.raises(InvalidValue):
                rt.enqueue("flow", bad)
        with pytest.raises(UnknownWorkflow, match="'nope'"):
            rt.enqueue("nope")
        assert rt.list() == []


# ---- approve ----------------------------------------------------------------------------------------


def test_approve_queues_the_run_and_never_continues_it(db):
    flow = gated()
    with runtime(db, flow) as rt:
        rid = rt.start("flow")
        cp = rt.approve(rid, by="ada", comment="fine")
        run = rt.get(rid)
        assert run.status == RunStatus.QUEUED
        assert statuses(rt, rid)["c"] == StepStatus.PENDING
        assert run.pending is None
        (decided,) = [c for c in rt.store.checkpoints(rid) if c.kind == "approval"]
        assert (decided.checkpoint_id, decided.decision, decided.decided_by, decided.comment) == (
            cp.checkpoint_id, "approved", "ada", "fine")
        assert rt.events(rid)[-1].kind == "approved" and rt.events(rid)[-1].actor == "ada"
    assert flow.calls["c"] == 0


def test_second_approve_is_refused(db):
    with runtime(db, gated()) as rt:
        rid = rt.start("flow")
        rt.approve(rid)
        with pytest.raises(RefusedTransition, match="nothing to approve"):
            rt.approve(rid)
        assert sum(e.kind == "approved" for e in rt.events(rid)) == 1


def test_approve_without_by_records_the_os_user(db):
    with runtime(db, gated()) as rt:
        rid = rt.start("flow")
        assert rt.approve(rid).decided_by == getpass.getuser()
        assert rt.events(rid)[-1].actor == getpass.getuser()


def test_approve_with_output_replaces_the_gated_step_output(db):
    flow = gated().on("c", lambda ctx: ctx.results["b"])
    with runtime(db, flow) as rt:
        rid = rt.start("flow")
        rt.approve(rid, output={"edited": [1, 2]})
        assert rt.step_output(rid, "b") == {"edited": [1, 2]}
        assert rt.resume(rid) == RunStatus.COMPLETED
        assert rt.step_output(rid, "c") == {"edited": [1, 2]}
    assert flow.calls["b"] == 1


def test_approve_with_unstorable_output_is_refused_and_changes_nothing(db):
    with runtime(db, gated()) as rt:
        rid = rt.start("flow")
        before = rows(db, rid)
        with pytest.raises(InvalidValue, match="output"):
            rt.approve(rid, output={"x": float("nan")})
        assert rows(db, rid) == before


def test_approve_with_a_stale_checkpoint_id_is_refused(db):
    flow = Flow(("a", {"approval": True}), ("b", {"approval": True}), "c")
    with runtime(db, flow) as rt:
        rid = rt.start("flow")
        first = rt.get(rid).pending.checkpoint_id
        rt.approve(rid, checkpoint_id=first)
        assert rt.resume(rid) == RunStatus.AWAITING_APPROVAL
        second = rt.get(rid).pending.checkpoint_id
        with pytest.raises(RefusedTransition, match=f"moved on since checkpoint {first}"):
            rt.approve(rid, checkpoint_id=first)
        with pytest.raises(RefusedTransition, match="moved on"):
            rt.reject(rid, "no", checkpoint_id=first)
        other = rt.start("flow")
        foreign = rt.get(other).pending.checkpoint_id  # another run's checkpoint, or none at all
        for wrong in (foreign, 99_999):
            with pytest.raises(RefusedTransition, match=f"checkpoint {wrong} is not one of run {rid}'s; it waits on "
                                                        f"checkpoint {second}"):
                rt.approve(rid, checkpoint_id=wrong)
        assert rt.get(rid).status == RunStatus.AWAITING_APPROVAL
        assert rt.approve(rid, checkpoint_id=second).checkpoint_id == second


def test_resume_after_approve_continues_and_stops_at_the_next_gate(db):
    flow = Flow(("a", {"approval": True}), "b", ("c", {"approval": True}), "d")
    with runtime(db, flow) as rt:
        rid = rt.start("flow")
        rt.approve(rid)
        assert rt.resume(rid) == RunStatus.AWAITING_APPROVAL
        assert rt.get(rid).pending.step == "c"
        assert statuses(rt, rid) == {"a": "completed", "b": "completed", "c": "completed", "d": "pending"}
        rt.approve(rid)
        assert rt.resume(rid) == RunStatus.COMPLETED
    assert flow.calls == {"a": 1, "b": 1, "c": 1, "d": 1}


def test_approve_refused_unless_awaiting_approval(db):
    flow = Flow("a", "q").on("q", asks("title?"))
    with runtime(db, flow, Flow("a", name="plain")) as rt:
        asking = rt.start("flow")
        with pytest.raises(RefusedTransition, match="awaiting_input; there is nothing to approve"):
            rt.approve(asking)
        done = rt.start("plain")
        with pytest.raises(RefusedTransition, match="completed; there is nothing to approve"):
            rt.approve(done)


# ---- reject -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("reason", ["", "   ", None])
def test_reject_requires_a_reason(db, reason):
    with runtime(db, gated()) as rt:
        rid = rt.start("flow")
        with pytest.raises(InvalidValue, match="reason"):
            rt.reject(rid, reason)
        assert rt.get(rid).status == RunStatus.AWAITING_APPROVAL


def test_reject_cancels_remaining_steps_and_resume_is_refused_pointing_at_fork(db):
    flow = gated("c", "d")
    with runtime(db, flow) as rt:
        rid = rt.start("flow")
        cp = rt.reject(rid, "wrong numbers", by="bob")
        run = rt.get(rid)
        assert run.status == RunStatus.REJECTED and run.pending is None
        assert (cp.decision, cp.decided_by, cp.comment) == ("rejected", "bob", "wrong numbers")
        assert statuses(rt, rid) == {"a": "completed", "b": "completed", "c": "cancelled", "d": "cancelled"}
        assert rt.step_output(rid, "b") == {"step": "b"}
        with pytest.raises(RefusedTransition, match="fork"):
            rt.resume(rid)
        with pytest.raises(RefusedTransition):
            rt.approve(rid)
        with pytest.raises(RefusedTransition):
            rt.reject(rid, "again")
    assert flow.calls["c"] == 0


# ---- input ------------------------------------------------------------------------------------------


def test_request_input_pauses_then_respond_queues_and_resume_reruns_the_step(db):
    flow = Flow("a", "ask", "c").on("ask", lambda ctx: {"title": ctx.request_input("Title?")})
    with runtime(db, flow) as rt:
        rid = rt.start("flow")
        run = rt.get(rid)
        assert run.status == RunStatus.AWAITING_INPUT
        assert (run.pending.kind, run.pending.step, run.pending.reason) == ("input", "ask", "Title?")
        assert statuses(rt, rid) == {"a": "completed", "ask": "awaiting_input", "c": "pending"}
        assert rt.get(rid).tasks[1].attempts == 1

        cp = rt.respond(rid, "Hello", by="ada")
        assert (cp.decision, cp.decided_by, cp.value) == ("responded", "ada", "Hello")
        assert rt.get(rid).status == RunStatus.QUEUED
        assert statuses(rt, rid)["ask"] == "pending"  # answered: it re-runs on resume
        with pytest.raises(RefusedTransition, match="nothing to respond to"):
            rt.respond(rid, "again")

        assert rt.resume(rid) == RunStatus.COMPLETED
        assert rt.step_output(rid, "ask") == {"title": "Hello"}
    assert flow.calls == {"a": 1, "ask": 2, "c": 1}
    assert flow.attempts("ask") == [1, 2]


def test_two_request_input_calls_in_one_step_are_answered_in_order(db):
    flow = Flow("ask").on("ask", asks("first?", "second?"))
    with runtime(db, flow) as rt:
        rid = rt.start("flow")
        assert rt.get(rid).pending.reason == "first?"
        rt.respond(rid, 1)
        assert rt.resume(rid) == RunStatus.AWAITING_INPUT
        assert rt.get(rid).pending.reason == "second?"
        rt.respond(rid, {"two": 2})
        assert rt.resume(rid) == RunStatus.COMPLETED
        assert rt.step_output(rid, "ask") == [1, {"two": 2}]
    assert flow.calls["ask"] == 3


def test_respond_refused_at_an_approval_gate_and_refuses_unstorable_values(db):
    flow = Flow("ask", name="asking").on("ask", asks("n?"))
    with runtime(db, gated(), flow) as rt:
        gate = rt.start("flow")
        with pytest.raises(RefusedTransition, match="nothing to respond to"):
            rt.respond(gate, 1)
        asking = rt.start("asking")
        with pytest.raises(InvalidValue, match="value"):
            rt.respond(asking, float("inf"))
        assert rt.get(asking).status == RunStatus.AWAITING_INPUT
    assert flow.calls["ask"] == 1


@pytest.mark.parametrize("end", ["cancel", "deadline"])
def test_a_step_awaiting_input_is_cancelled_with_its_run(db, end):
    clock = FakeClock()
    flow = Flow("a", ("ask", {"timeout": 60}), "c").on("ask", asks("?"))
    with runtime(db, flow, clock=clock) as rt:
        rid = rt.start("flow")
        if end == "cancel":
            rt.cancel(rid)
        else:
            clock.advance(seconds=61)
            assert rt.expire_deadlines() == [rid]
        assert statuses(rt, rid) == {"a": "completed", "ask": "cancelled", "c": "cancelled"}


# ---- failure and retries ----------------------------------------------------------------------------


class Fatal(BaseException):
    """Not an Exception: what a careless library might raise."""


@pytest.mark.parametrize("raise_, message", [
    pytest.param(lambda: sys.exit(0), "SystemExit: 0", id="sys.exit(0)"),
    pytest.param(lambda: sys.exit(), "SystemExit", id="sys.exit()"),
    pytest.param(lambda: sys.exit("bye"), "SystemExit: bye", id="sys.exit(text)"),
    pytest.param(lambda: (_ for _ in ()).throw(Fatal("deep")), "Fatal: deep", id="BaseException"),
])
def test_anything_a_step_raises_fails_the_step(db, raise_, message):
    flow = Flow("a", "b", "c").on("b", lambda ctx: raise_())
    with runtime(db, flow) as rt:
        rid = rt.start("flow")
        run = rt.get(rid)
        assert (run.status, run.error, run.lease) == (RunStatus.FAILED, f"step 'b' failed: {message}", None)
        assert (run.tasks[1].status, run.tasks[1].error) == (StepStatus.FAILED, message)
        assert event_kinds(rt, rid)[-2:] == ["step_failed", "run_failed"]
        flow.on("b", returns(1))
        assert rt.resume(rid) == RunStatus.COMPLETED


def test_ctrl_c_in_a_step_releases_the_run_interrupted_not_failed(db):
    def interrupt(ctx):
        raise KeyboardInterrupt
    flow = Flow("a", "b").on("b", interrupt)
    with runtime(db, flow) as rt:
        with pytest.raises(KeyboardInterrupt):
            rt.start("flow")
        (run,) = rt.list()
        assert (run.status, run.lease) == (RunStatus.INTERRUPTED, None)
        assert statuses(rt, run.run_id) == {"a": "completed", "b": "interrupted"}


def test_failure_records_step_and_exception_and_keeps_what_came_before(db):
    flow = Flow("a", "b", "c").on("b", fails(message="disk on fire"))
    with runtime(db, flow) as rt:
        rid = rt.start("flow")
        run = rt.get(rid)
        assert run.status == RunStatus.FAILED
        assert run.error == "step 'b' failed: RuntimeError: disk on fire"
        a, b, c = run.tasks
        assert (a.status, a.output) == ("completed", {"step": "a"})
        assert (b.status, b.error, b.has_output) == ("failed", "RuntimeError: disk on fire", False)
        assert "Traceback" in b.traceback and "disk on fire" in b.traceback
        assert c.status == StepStatus.PENDING and run.lease is None
        assert event_kinds(rt, rid)[-2:] == ["step_failed", "run_failed"]


def test_resume_of_failed_run_retries_only_the_failed_step(db):
    flow = Flow("a", "b", "c").on("b", fails(times=1))
    with runtime(db, flow) as rt:
        rid = rt.start("flow")
        assert rt.get(rid).status == RunStatus.FAILED
        assert rt.resume(rid) == RunStatus.COMPLETED
        run = rt.get(rid)
        assert [t.attempts for t in run.tasks] == [1, 2, 1]
        assert run.error is None and run.tasks[1].error is None
    assert flow.calls == {"a": 1, "b": 2, "c": 1}
    assert flow.attempts("b") == [1, 2]


def test_retries_rerun_a_failing_step_automatically(db):
    flow = Flow("a", ("b", {"retries": 2}), "c").on("b", fails(times=2))
    with runtime(db, flow) as rt:
        rid = rt.start("flow")
        assert rt.get(rid).status == RunStatus.COMPLETED
        assert rt.step_output(rid, "b") == {"ok": 3}
        failed = [e.detail["will_retry"] for e in rt.events(rid) if e.kind == "step_failed"]
        assert failed == [True, True]
    assert flow.attempts("b") == [1, 2, 3]


def test_exhausted_retries_fail_the_run(db):
    flow = Flow(("b", {"retries": 1})).on("b", fails())
    with runtime(db, flow) as rt:
        rid = rt.start("flow")
        assert rt.get(rid).status == RunStatus.FAILED
        assert rt.get(rid).tasks[0].attempts == 2
    assert flow.calls["b"] == 2


@pytest.mark.parametrize("bad, message", [
    ({"obj": object()}, "output.obj: object is not JSON serializable"),
    ({"n": [1.0, float("nan")]}, "output.n[1]: nan is not valid JSON"),
    ({1: "x"}, "output: key 1 is not a string"),
])
def test_unstorable_output_fails_the_step_without_retry_and_keeps_prior_outputs(db, bad, message):
    flow = Flow("a", ("b", {"retries": 3}), "c").on("b", returns(bad))
    with runtime(db, flow) as rt:
        rid = rt.start("flow")
        run = rt.get(rid)
        assert run.status == RunStatus.FAILED
        assert message in run.error and run.error.startswith("step 'b' failed: ")
        assert run.tasks[0].output == {"step": "a"}
        assert not run.tasks[1].has_output and run.tasks[1].status == StepStatus.FAILED
    assert flow.calls["b"] == 1  # retrying cannot make the value storable


def test_none_is_a_valid_output(db):
    flow = Flow("a", "b").on("a", returns(None))
    flow.on("b", lambda ctx: {"a": ctx.results["a"], "keys": list(ctx.results)})
    with runtime(db, flow) as rt:
        rid = rt.start("flow")
        a = rt.get(rid).tasks[0]
        assert (a.status, a.output, a.has_output) == ("completed", None, True)
        assert rt.step_output(rid, "b") == {"a": None, "keys": ["a"]}


class Report(BaseModel):
    title: str
    pages: list[int]


def test_pydantic_model_output_is_stored_as_json(db):
    flow = Flow("a").on("a", returns(Report(title="t", pages=[1, 2])))
    with runtime(db, flow) as rt:
        rid = rt.start("flow")
    (raw,) = sql(db, "SELECT value FROM outputs WHERE run_id = ?", rid)[0]
    assert json.loads(raw) == {"title": "t", "pages": [1, 2]}


# ---- context ----------------------------------------------------------------------------------------


def test_context_carries_run_step_attempt_input_and_upstream_results(db):
    seen: dict[str, list[dict]] = {}  # ctx.results is read from the store while the step runs

    def keep(inner):
        def step(ctx):
            seen.setdefault(ctx.step, []).append(dict(ctx.results))
            return inner(ctx)
        return step
    flow = Flow("a", "b", ("c", {"retries": 1})).on("a", keep(returns([1]))).on("b", keep(returns({"step": "b"})))
    flow.on("c", keep(fails(times=1)))
    with runtime(db, flow, id_factory=ids("run-1")) as rt:
        rt.start("flow", {"topic": "x"})
    a, b = flow.seen["a"][0], flow.seen["b"][0]
    c1, c2 = flow.seen["c"]
    assert (a.run_id, a.step, a.attempt, a.input, seen["a"]) == ("run-1", "a", 1, {"topic": "x"}, [{}])
    assert (b.step, seen["b"]) == ("b", [{"a": [1]}])
    assert (c1.attempt, c2.attempt) == (1, 2)
    assert seen["c"][1] == {"a": [1], "b": {"step": "b"}}
    assert (a.iteration, a.agent, dict(a.state), dict(c2.state)) == (1, None, {"next": 0}, {"next": 2})
    assert c1.idempotency_key == c2.idempotency_key == "run-1/c"


# ---- cancel -----------------------------------------------------------------------------------------


def _queued(rt):
    rid = rt.start("flow")
    rt.approve(rid)
    return rid


def _interrupted(rt, flow, tmp_path, db):
    return killed_start(tmp_path, db, flow, "b")


@pytest.mark.parametrize("make, previous", [
    pytest.param(lambda rt, flow, tmp_path, db: _queued(rt), RunStatus.QUEUED, id="queued"),
    pytest.param(lambda rt, flow, tmp_path, db: rt.start("flow"), RunStatus.AWAITING_APPROVAL, id="awaiting_approval"),
    pytest.param(lambda rt, flow, tmp_path, db: rt.start("asking"), RunStatus.AWAITING_INPUT, id="awaiting_input"),
    pytest.param(lambda rt, flow, tmp_path, db: rt.start("failing"), RunStatus.FAILED, id="failed"),
    pytest.param(_interrupted, RunStatus.INTERRUPTED, id="interrupted"),
])
def test_cancel_of_a_run_that_has_not_ended(db, tmp_path, make, previous):
    flows = [gated(), Flow("a", "ask", "c", name="asking").on("ask", asks("?")),
             Flow("a", "b", "c", name="failing").on("b", fails())]
    with runtime(db, *flows) as rt:
        rid = make(rt, flows[0], tmp_path, db)
        assert rt.get(rid).status == previous
        assert rt.cancel(rid, by="ops") == previous
        run = rt.get(rid)
        assert run.status == RunStatus.CANCELLED and run.pending is None and run.lease is None
        assert run.tasks[0].status == StepStatus.COMPLETED
        open_steps = [t.status for t in run.tasks if t.status not in (StepStatus.COMPLETED, StepStatus.FAILED)]
        assert open_steps and set(open_steps) == {StepStatus.CANCELLED}
        assert rt.events(rid)[-1].kind == "cancelled" and rt.events(rid)[-1].actor == "ops"
        with pytest.raises(RefusedTransition, match="fork"):
            rt.resume(rid)


def test_cancel_of_a_run_whose_owner_died_unnoticed_says_it_was_interrupted(db):
    flow = gated()
    with runtime(db, flow) as rt:
        rid = _queued(rt)
        kill_owner(db, rid, "c")  # no sweep has seen the death yet: the row says running
        assert sql(db, "SELECT status FROM runs WHERE run_id = ?", rid) == [("running",)]
        assert rt.cancel(rid) == RunStatus.INTERRUPTED
        assert [e.kind for e in rt.events(rid)][-2:] == ["interruption_detected", "cancelled"]


@pytest.mark.parametrize("end", ["completed", "rejected", "cancelled"])
def test_cancel_of_an_ended_run_is_refused(db, end):
    with runtime(db, gated(), Flow("a", name="plain")) as rt:
        if end == "completed":
            rid = rt.start("plain")
        else:
            rid = rt.start("flow")
            if end == "rejected":
                rt.reject(rid, "no")
            else:
                rt.cancel(rid)
        before = rows(db, rid)
        with pytest.raises(RefusedTransition, match=f"already {end}"):
            rt.cancel(rid)
        assert rows(db, rid) == before


def test_cancel_while_a_step_runs_revokes_the_lease_and_the_step_is_not_recorded(db):
    flow = Flow("a", "b", "c")

    def cancel_from_elsewhere(ctx):
        with Runtime(db) as other:
            assert other.cancel(ctx.run_id) == RunStatus.RUNNING
        return {"late": True}

    flow.on("b", cancel_from_elsewhere)
    with runtime(db, flow, id_factory=ids("r1")) as rt:
        with pytest.raises(LeaseLost, match="cancelled"):
            rt.start("flow")
        run = rt.get("r1")
        assert run.status == RunStatus.CANCELLED
        assert statuses(rt, "r1") == {"a": "completed", "b": "cancelled", "c": "cancelled"}
        assert not run.tasks[1].has_output
    assert flow.calls["c"] == 0


# ---- resume refusals and ownership -----------------------------------------------------------------


def test_resume_of_a_run_executed_by_a_live_process_is_refused(db):
    flow = Flow("a", "b")
    refusals = []

    def resume_from_elsewhere(ctx):
        with Runtime(db, [flow.wf]) as other:
            with pytest.raises(RefusedTransition) as refused:
                other.resume(ctx.run_id)
            refusals.append(str(refused.value))
        return 1

    flow.on("b", resume_from_elsewhere)
    with runtime(db, flow) as rt:
        rid = rt.start("flow")
        assert rt.get(rid).status == RunStatus.COMPLETED
    assert len(refusals) == 1 and f"is being executed by pid {os.getpid()}" in refusals[0]
    assert flow.calls == {"a": 1, "b": 1}


@pytest.mark.parametrize("status", ["awaiting_approval", "awaiting_input", "completed"])
def test_resume_refused_for_paused_and_ended_runs(db, status):
    flows = [gated(), Flow("ask", name="asking").on("ask", asks("?")), Flow("a", name="plain")]
    with runtime(db, *flows) as rt:
        rid = rt.start({"awaiting_approval": "flow", "awaiting_input": "asking", "completed": "plain"}[status])
        hint = {"awaiting_approval": "approve", "awaiting_input": "respond", "completed": "fork"}[status]
        with pytest.raises(RefusedTransition, match=hint):
            rt.resume(rid)
        assert rt.get(rid).status == status


def test_owner_on_another_host_is_gone_only_when_its_lease_expired(db):
    flow = gated()
    with runtime(db, flow) as rt:
        rid = _queued(rt)
        set_owner(db, rid, pid=1, host="elsewhere", expires_in=300, step="c")
        with pytest.raises(RefusedTransition, match="pid 1 on elsewhere"):
            rt.resume(rid)
        assert rt.get(rid).status == RunStatus.RUNNING
        set_owner(db, rid, pid=1, host="elsewhere", expires_in=-1, step="c")
        assert rt.get(rid).status == RunStatus.INTERRUPTED
        assert rt.resume(rid) == RunStatus.COMPLETED
    assert flow.calls["c"] == 1


# ---- definitions and unknowns -----------------------------------------------------------------------


def test_duplicate_step_names_are_refused_at_definition():
    wf = Workflow("w")
    wf.step(name="a")(lambda ctx: 1)
    with pytest.raises(DefinitionError, match="already has a step named 'a'"):
        wf.step(name="a")(lambda ctx: 2)
    assert [s.name for s in wf.steps] == ["a"]


def test_two_workflows_with_one_name_are_refused(db):
    with pytest.raises(DefinitionError, match="two workflows"):
        runtime(db, Flow("a"), Flow("b"))


def test_unknown_workflow(db):
    with runtime(db, Flow("a")) as rt:
        with pytest.raises(UnknownWorkflow, match="'nope'.*flow"):
            rt.start("nope")
        assert rt.list() == []


def test_resume_needs_the_run_workflow(db):
    with runtime(db, gated()) as rt:
        rid = _queued(rt)
    with runtime(db) as bare, pytest.raises(UnknownWorkflow, match="--app"):
        bare.resume(rid)
    with runtime(db, Flow("a", name="other")) as wrong, pytest.raises(UnknownWorkflow, match="other"):
        wrong.resume(rid)


def test_unknown_step(db):
    with runtime(db, Flow("a", "b")) as rt:
        rid = rt.start("flow")
        with pytest.raises(UnknownStep, match="no step 'zz'; its steps are: a, b"):
            rt.fork(rid, "zz")
        with pytest.raises(UnknownStep):
            rt.step_output(rid, "zz")


@pytest.mark.parametrize("operation, args", [
    ("get", ()), ("events", ()), ("steps", ()), ("approve", ()), ("reject", ("no",)), ("respond", (1,)),
    ("cancel", ()), ("fork", ("a",)), ("resume", ()), ("step_output", ("a",)), ("delete", ()),
])
def test_unknown_run_echoes_the_id(db, operation, args):
    with runtime(db, Flow("a")) as rt:
        rt.start("flow")
        with pytest.raises(UnknownRun, match="'feedface'"):
            getattr(rt, operation)("feedface", *args)


def test_run_id_prefixes(db):
    with runtime(db, gated(), id_factory=ids("abc123", "abd456", "abc1234")) as rt:
        for _ in range(3):
            rt.start("flow")
        with pytest.raises(UnknownRun, match="prefix 'ab' matches several runs"):
            rt.get("ab")
        with pytest.raises(UnknownRun, match="several"):
            rt.approve("abc")
        assert rt.get("abd").run_id == "abd456"
        assert rt.get("abc123").run_id == "abc123"  # a full id that is also a prefix of another
        assert rt.approve("abd").run_id == "abd456"
        assert rt.get("abd456").status == RunStatus.QUEUED
        with pytest.raises(UnknownRun, match="empty"):
            rt.get("")


# ---- forks ------------------------------------------------------------------------------------------


def _completed_parent(db, flow, **options):
    rt = runtime(db, flow, **options)
    rid = rt.start("flow", {"topic": "x"})
    assert rt.get(rid).status == RunStatus.COMPLETED
    return rt, rid


def test_fork_copies_upstream_outputs_and_queues_the_rest(db):
    flow = Flow("a", "b", "c").on("a", lambda ctx: {"a": ctx.attempt, "topic": ctx.input["topic"]})
    flow.on("b", lambda ctx: {"saw": ctx.results["a"]})
    rt, parent = _completed_parent(db, flow)
    with rt:
        before_get = rt.get(parent).model_dump(exclude={"forks"})
        before_rows = rows(db, parent)
        child = rt.fork(parent, "b")
        run = rt.get(child)
        assert (run.status, run.parent_run_id, run.forked_from_step) == ("queued", parent, "b")
        assert [(t.name, t.status) for t in run.tasks] == [("a", "completed"), ("b", "pending"), ("c", "pending")]
        assert run.tasks[0].output == {"a": 1, "topic": "x"} and run.input == {"topic": "x"}
        assert run.steps_done == 1
        assert rt.get(parent).model_dump(exclude={"forks"}) == before_get
        assert rows(db, parent) == before_rows
        assert rt.get(parent).forks == [child]

        assert rt.resume(child) == RunStatus.COMPLETED
        assert rt.step_output(child, "b") == {"saw": {"a": 1, "topic": "x"}}
        assert rows(db, parent) == before_rows
    assert flow.calls == {"a": 1, "b": 2, "c": 2}


def test_two_forks_of_one_boundary_are_independent(db):
    flow = Flow("a", "b", "c")
    rt, parent = _completed_parent(db, flow)
    with rt:
        one, two = rt.fork(parent, "b"), rt.fork(parent, "b")
        assert one != two
        before = rows(db, two)
        assert rt.resume(one) == RunStatus.COMPLETED
        assert rows(db, two) == before
        assert rt.get(two).status == RunStatus.QUEUED
        assert rt.get(parent).forks == [one, two]


def test_fork_with_a_new_input(db):
    flow = Flow("a", "b").on("b", lambda ctx: ctx.input)
    rt, parent = _completed_parent(db, flow)
    with rt:
        child = rt.fork(parent, "b", {"topic": "y"})
        assert rt.get(child).input == {"topic": "y"}
        rt.resume(child)
        assert rt.step_output(child, "b") == {"topic": "y"}
        assert rt.get(parent).input == {"topic": "x"}
        with pytest.raises(InvalidValue, match="JSON object"):
            rt.fork(parent, "b", ["not", "an", "object"])


def test_fork_from_a_step_whose_upstream_did_not_complete_is_refused(db):
    flow = Flow("a", "b", "c").on("b", fails())
    with runtime(db, flow) as rt:
        rid = rt.start("flow")
        with pytest.raises(RefusedTransition, match="step 'b' .* has not completed.*fork from 'b' or earlier"):
            rt.fork(rid, "c")
        child = rt.fork(rid, "b")
        assert [t.status for t in rt.get(child).tasks] == ["completed", "pending", "pending"]


def test_idempotency_key_is_stable_across_attempts_and_new_in_a_fork(db):
    flow = Flow("a", ("b", {"retries": 1})).on("b", fails(times=1))
    rt, parent = _completed_parent(db, flow, id_factory=ids("parent", "child"))
    with rt:
        child = rt.fork(parent, "b")
        rt.resume(child)
        keys = [t.idempotency_key for t in rt.steps(child)]
    assert [ctx.idempotency_key for ctx in flow.seen["b"]] == ["parent/b", "parent/b", "child/b"]
    assert keys == ["parent/a", "child/b"]


# ---- forks past an approval gate ----------------------------------------------------------------------


def _gate_left(rt, decision):
    """A run of gated() stopped at its gate b: rejected, or still awaiting approval."""
    rid = rt.start("flow")
    if decision == "rejected":
        rt.reject(rid, "not this", by="rita")
    return rid


@pytest.mark.parametrize("decision, why", [("rejected", "rejected by rita"), ("awaiting", "not yet decided")])
def test_a_fork_past_a_gate_that_was_not_approved_pauses_at_that_gate(db, decision, why):
    flow = gated("c", "d").on("b", lambda ctx: {"draft": ctx.attempt})
    with runtime(db, flow) as rt:
        parent = _gate_left(rt, decision)
        before = rows(db, parent)
        child = rt.fork(parent, "c")
        run = rt.get(child)
        assert (run.status, run.current_step) == (RunStatus.AWAITING_APPROVAL, "b")
        assert (run.pending.kind, run.pending.step, run.pending.seq) == ("approval", "b", 2)
        assert f"copied from run {parent}" in run.pending.reason and why in run.pending.reason
        assert run.tasks[1].output == {"draft": 1}  # what the reviewer approves: the copied output
        assert statuses(rt, child) == {"a": "completed", "b": "completed", "c": "pending", "d": "pending"}
        with pytest.raises(RefusedTransition, match="awaiting approval"):
            rt.resume(child)
        assert flow.calls["c"] == 0
        rt.approve(child, by="ana", comment="fine after all")
        assert rt.resume(child) == RunStatus.COMPLETED
        assert rows(db, parent) == before
    assert flow.calls == {"a": 1, "b": 1, "c": 1, "d": 1}


def test_a_fork_past_a_rejected_gate_can_be_rejected_again(db):
    flow = gated("c")
    with runtime(db, flow) as rt:
        child = rt.fork(_gate_left(rt, "rejected"), "c")
        rt.reject(child, "still no")
        assert rt.get(child).status == RunStatus.REJECTED
        assert statuses(rt, child)["c"] == "cancelled"
    assert flow.calls["c"] == 0


def test_a_fork_past_an_approved_gate_inherits_the_approval_and_runs_on(db):
    flow = gated("c", "d")
    with runtime(db, flow, id_factory=ids("parent", "child", "grandchild")) as rt:
        parent = rt.start("flow")
        rt.approve(parent, by="ana", comment="good")
        assert rt.resume(parent) == RunStatus.COMPLETED
        original = rt.store.checkpoints(parent)
        (approved,) = [cp for cp in original if cp.kind == "approval"]
        child = rt.fork(parent, "d")
        assert rt.get(child).status == RunStatus.QUEUED and rt.get(child).pending is None
        (copied,) = [cp for cp in rt.store.checkpoints(child) if cp.kind == "approval"]
        assert (copied.step, copied.decision, copied.decided_by, copied.decided_at) == (
            "b", "approved", "ana", approved.decided_at)
        assert copied.comment == f"inherited from checkpoint {approved.checkpoint_id} of run parent: good"
        (inherited,) = [e for e in rt.events(child) if e.kind == "approval_inherited"]
        assert (inherited.step, inherited.detail["parent_run_id"], inherited.detail["parent_checkpoint_id"]) == (
            "b", "parent", approved.checkpoint_id)

        rt.delete(parent)  # the fork carries the approval itself: a fork of the fork still sees it
        grandchild = rt.fork(child, "c")
        assert rt.get(grandchild).status == RunStatus.QUEUED
        (again,) = [cp for cp in rt.store.checkpoints(grandchild) if cp.kind == "approval"]
        assert (again.decision, again.decided_by) == ("approved", "ana")
        assert again.comment.startswith(f"inherited from checkpoint {copied.checkpoint_id} of run child")
        assert rt.resume(child) == RunStatus.COMPLETED
        assert rt.resume(grandchild) == RunStatus.COMPLETED
    assert flow.calls == {"a": 1, "b": 1, "c": 2, "d": 3}


def test_a_fork_of_a_fork_paused_at_an_unapproved_gate_pauses_too(db):
    flow = gated("c", "d")
    with runtime(db, flow) as rt:
        child = rt.fork(_gate_left(rt, "awaiting"), "c")
        grandchild = rt.fork(child, "c")
        assert rt.get(grandchild).status == RunStatus.AWAITING_APPROVAL
        assert rt.get(grandchild).pending.step == "b"
    assert flow.calls["c"] == 0


# ---- orphans: a step that was running when its process died ----------------------------------------


def _orphan(tmp_path, db, on_orphan, **options):
    """A run whose process was SIGKILLed while step b ran, and the in-process flow to resume it."""
    flow = Flow("a", ("b", {"on_orphan": on_orphan}), "c").on("b", with_attempt)
    rid = killed_start(tmp_path, db, flow, "b")
    return flow, runtime(db, flow, **options), rid


def test_a_dead_owner_is_seen_and_the_run_marked_interrupted(db, tmp_path):
    flow, rt, rid = _orphan(tmp_path, db, "retry")
    with rt:
        run = rt.get(rid)
        assert (run.status, run.lease) == (RunStatus.INTERRUPTED, None)
        assert statuses(rt, rid) == {"a": "completed", "b": "interrupted", "c": "pending"}
        (seen,) = [e for e in rt.events(rid) if e.kind == "interruption_detected"]
        assert (seen.step, seen.detail["attempt"]) == ("b", 1)


def test_orphan_retry_reruns_the_step_with_the_next_attempt(db, tmp_path):
    flow, rt, rid = _orphan(tmp_path, db, "retry")
    with rt:
        assert rt.resume(rid) == RunStatus.COMPLETED
        assert rt.step_output(rid, "b") == {"step": "b", "attempt": 2}
    assert flow.calls == {"a": 1, "b": 2, "c": 1}


def test_orphan_hold_pauses_for_a_person(db, tmp_path):
    flow, rt, rid = _orphan(tmp_path, db, "hold")
    with rt:
        assert rt.resume(rid) == RunStatus.AWAITING_APPROVAL
        run = rt.get(rid)
        assert (run.pending.kind, run.pending.step) == ("orphan", "b")
        assert "step 'b' was running (attempt 1)" in run.pending.reason and "approve" in run.pending.reason
        with pytest.raises(RefusedTransition, match="approve"):
            rt.resume(rid)
    assert flow.calls["b"] == 1


def test_orphan_hold_approved_without_output_reruns_the_step(db, tmp_path):
    flow, rt, rid = _orphan(tmp_path, db, "hold")
    with rt:
        rt.resume(rid)
        rt.approve(rid)
        assert rt.get(rid).status == RunStatus.QUEUED
        assert rt.resume(rid) == RunStatus.COMPLETED
        assert rt.step_output(rid, "b") == {"step": "b", "attempt": 2}
    assert flow.calls == {"a": 1, "b": 2, "c": 1}


def test_orphan_hold_approved_with_output_records_it_instead_of_rerunning(db, tmp_path):
    flow, rt, rid = _orphan(tmp_path, db, "hold")
    flow.on("c", lambda ctx: ctx.results["b"])
    with rt:
        rt.resume(rid)
        rt.approve(rid, output={"done": "by hand"})
        b = rt.get(rid).tasks[1]
        assert (b.status, b.output) == ("completed", {"done": "by hand"})
        assert rt.get(rid).steps_done == 2
        assert rt.resume(rid) == RunStatus.COMPLETED
        assert rt.step_output(rid, "c") == {"done": "by hand"}
    assert flow.calls == {"a": 1, "b": 1, "c": 1}


def test_orphan_hold_rejected_ends_the_run(db, tmp_path):
    flow, rt, rid = _orphan(tmp_path, db, "hold")
    with rt:
        rt.resume(rid)
        rt.reject(rid, "side effect unknown")
        assert statuses(rt, rid) == {"a": "completed", "b": "cancelled", "c": "cancelled"}
        assert rt.get(rid).status == RunStatus.REJECTED


def test_a_run_whose_executor_keeps_dying_is_failed(db, tmp_path):
    flow = Flow("a", "b")
    rid = killed_start(tmp_path, db, flow, "b")
    die_in(tmp_path, db, flow, "b", "resume", rid)  # recovery 1: b dies again
    with runtime(db, flow, max_recoveries=1) as rt:
        assert rt.resume(rid) == RunStatus.FAILED
        run = rt.get(rid)
        assert run.status == RunStatus.FAILED and "died 2 times" in run.error
        assert run.tasks[1].status == StepStatus.FAILED
    assert flow.calls["b"] == 2


# ---- releasing, deadlines ---------------------------------------------------------------------------


def test_a_stopping_executor_releases_the_run_queued_at_the_next_boundary(db):
    flow = Flow(("a", {"approval": True}), "b", "c")
    with runtime(db, flow) as rt:
        rid = rt.start("flow")
        rt.approve(rid)
        assert rt.resume(rid, should_stop=lambda: True) == RunStatus.QUEUED
        assert statuses(rt, rid) == {"a": "completed", "b": "completed", "c": "pending"}
        assert rt.get(rid).lease is None and rt.events(rid)[-1].kind == "released"
        assert rt.resume(rid) == RunStatus.COMPLETED
    assert flow.calls == {"a": 1, "b": 1, "c": 1}


@pytest.mark.parametrize("pause", ["approval", "input"])
def test_a_pause_past_its_deadline_is_rejected(db, pause):
    clock = FakeClock()
    options = {"approval": True, "timeout": 60} if pause == "approval" else {"timeout": 60}
    flow = Flow("a", ("b", options), "c")
    if pause == "input":
        flow.on("b", asks("?"))
    with runtime(db, flow, clock=clock) as rt:
        rid = rt.start("flow")
        assert rt.get(rid).pending.deadline_at == clock.now + timedelta(seconds=60)
        clock.advance(seconds=59)
        assert rt.expire_deadlines() == []
        clock.advance(seconds=1)
        assert rt.expire_deadlines() == [rid]
        run = rt.get(rid)
        assert run.status == RunStatus.REJECTED and "deadline" in run.error
        assert run.tasks[2].status == StepStatus.CANCELLED
        with pytest.raises(RefusedTransition):
            rt.approve(rid) if pause == "approval" else rt.respond(rid, 1)
        assert rt.expire_deadlines() == []


@pytest.mark.parametrize("decision", ["approve", "reject", "respond"])
def test_a_decision_after_the_deadline_is_refused_even_with_no_worker_running(db, decision):
    clock = FakeClock()
    options = {"timeout": 60} if decision == "respond" else {"approval": True, "timeout": 60}
    flow = Flow("a", ("b", options), "c")
    if decision == "respond":
        flow.on("b", asks("?"))
    with runtime(db, flow, clock=clock) as rt:
        rid = rt.start("flow")
        clock.advance(seconds=61)  # no worker has looked since
        with pytest.raises(RefusedTransition, match="already decided: expired by deadline"):
            {"approve": lambda: rt.approve(rid), "reject": lambda: rt.reject(rid, "late"),
             "respond": lambda: rt.respond(rid, 1)}[decision]()
        run = rt.get(rid)
        assert run.status == RunStatus.REJECTED and "deadline" in run.error
        assert [e.kind for e in rt.events(rid)][-1] == "deadline_expired"
    assert flow.calls["c"] == 0


def test_a_decided_pause_never_expires(db):
    clock = FakeClock()
    flow = Flow(("a", {"approval": True, "timeout": 5}), "b")
    with runtime(db, flow, clock=clock) as rt:
        rid = rt.start("flow")
        rt.approve(rid)
        clock.advance(hours=1)
        assert rt.expire_deadlines() == []
        assert rt.get(rid).status == RunStatus.QUEUED


# ---- drift ------------------------------------------------------------------------------------------


def _drifted(db, *new_steps):
    with runtime(db, gated()) as rt:
        rid = _queued(rt)
    new = Flow(*new_steps)
    return new, runtime(db, new), rid


def test_resume_with_changed_steps_raises_drift_listing_added_and_removed(db):
    new, rt, rid = _drifted(db, "d", "a", ("b", {"approval": True}))
    with rt:
        before = rows(db, rid)
        with pytest.raises(DriftError, match=rf"workflow 'flow' changed since run {rid} was recorded "
                                             r"\(added d; removed c\)"):
            rt.resume(rid)
        assert rows(db, rid) == before
    assert sum(new.calls.values()) == 0


def test_resume_with_a_renamed_step_or_changed_options_raises_drift(db):
    new, rt, rid = _drifted(db, "a", ("b", {"approval": True}), "d")
    with rt, pytest.raises(DriftError, match="renamed c -> d"):
        rt.resume(rid)
    new, rt, rid = _drifted(db, "a", "b", "c")
    with rt, pytest.raises(DriftError, match="options changed for b"):
        rt.resume(rid)


def test_resume_with_an_added_step_names_it(db):
    new, rt, rid = _drifted(db, "a", ("b", {"approval": True}), "c", "e")
    with rt, pytest.raises(DriftError, match="added e"):
        rt.resume(rid)


def test_resume_with_a_removed_step_names_it(db):
    new, rt, rid = _drifted(db, "a", ("b", {"approval": True}))
    with rt, pytest.raises(DriftError, match="removed c"):
        rt.resume(rid)


def test_allow_drift_runs_the_new_definition_keeping_completed_steps(db):
    new, rt, rid = _drifted(db, "a", ("b", {"approval": True}), "c", "e")
    with rt:
        assert rt.resume(rid, allow_drift=True) == RunStatus.COMPLETED
        assert statuses(rt, rid) == {"a": "completed", "b": "completed", "c": "completed", "e": "completed"}
        assert rt.get(rid).steps_total == 4
    assert new.calls == {"c": 1, "e": 1}


# ---- deletion -------------------------------------------------------------------------------------


def test_delete_removes_every_row_of_the_run_and_forks_keep_their_parent_id(db):
    rt, parent = _completed_parent(db, Flow("a", "b"))
    with rt:
        child = rt.fork(parent, "b")
        assert rt.delete(parent[:6]) == parent
        assert all(found == [] for found in rows(db, parent).values())
        assert rt.get(child).parent_run_id == parent
        with pytest.raises(UnknownRun):
            rt.get(parent)


def test_delete_of_a_run_a_live_process_executes_is_refused(db):
    with runtime(db, gated()) as rt:
        rid = _queued(rt)
        set_owner(db, rid, pid=os.getpid(), expires_in=300, step="c")
        with pytest.raises(RefusedTransition, match="cancel it"):
            rt.delete(rid)
        assert rt.get(rid).status == RunStatus.RUNNING


# ---- the driver state and lazy upstream values ------------------------------------------------------


def test_each_boundary_commits_the_driver_state_and_a_resume_restores_it(db):
    flow = Flow("a", ("b", {"approval": True}), "c")
    with runtime(db, flow) as rt:
        rid = rt.start("flow")
        states = [(c.kind, c.seq, c.state) for c in rt.store.checkpoints(rid)]
        assert states == [("start", 0, {"next": 0}), ("boundary", 1, {"next": 1}),
                          ("approval", 2, {"next": 2, "gate": "b"})]
        rt.approve(rid, by="ana")
        assert rt.resume(rid) == RunStatus.COMPLETED
        assert flow.calls == {"a": 1, "b": 1, "c": 1}
        assert rt.store.checkpoints(rid)[-1].state == {"next": 3}


def test_a_resume_follows_the_latest_checkpoint_state_not_the_step_rows(db):
    flow = Flow("a", ("b", {"approval": True}), "c", "d")
    with runtime(db, flow) as rt:
        rid = rt.start("flow")
        rt.approve(rid, by="ana")
        # a hand edit of the state (standing for a driver's own bookkeeping) is what the resume follows
        sql(db, "UPDATE checkpoints SET state = '{\"next\":3}' WHERE run_id = ? AND kind = 'approval'", rid)
        assert rt.resume(rid) == RunStatus.COMPLETED
        assert (flow.calls["c"], flow.calls["d"]) == (0, 1)


def test_a_step_sees_the_driver_state_read_only(db):
    def meddle(ctx):
        with pytest.raises(TypeError):
            ctx.state["next"] = 99
        return dict(ctx.state)
    flow = Flow("a", "b").on("b", meddle)
    with runtime(db, flow) as rt:
        rid = rt.start("flow")
        assert rt.get(rid).status == RunStatus.COMPLETED
        assert rt.step_output(rid, "b") == {"next": 1}


def test_a_damaged_upstream_output_releases_the_run_interrupted_without_failing_the_step(db):
    swallowed = []

    def reads(ctx):
        try:
            return ctx.results["a"]
        except Exception as e:  # a step that swallows the error does not hide the damage
            swallowed.append(type(e).__name__)
            return "made up"
    flow = Flow("a", ("b", {"approval": True}), "c").on("c", reads)
    with runtime(db, flow) as rt:
        rid = rt.start("flow")
        rt.approve(rid, by="ana")
        sql(db, "UPDATE outputs SET value = '{\"broken' WHERE run_id = ? AND seq = 0", rid)
        with pytest.raises(StoreError, match="the output of step 'a'.*not valid JSON"):
            rt.resume(rid)
        run = rt.get(rid, with_outputs=False)
        assert (run.status, statuses(rt, rid)["c"]) == (RunStatus.INTERRUPTED, "interrupted")
        assert swallowed == ["StoreDamaged"]
        assert rt.store.run(rid, documents=False).suspect_deaths == 0  # a release by its owner is never charged
        released = [e for e in rt.events(rid) if e.kind == "interruption_detected"]
        assert [e.detail["cause"] for e in released] == ["released by its owner"]
        assert not any(e.kind == "step_failed" for e in rt.events(rid))


def test_a_step_that_reads_no_upstream_output_runs_although_one_is_damaged(db):
    flow = Flow("a", ("b", {"approval": True}), "c")
    with runtime(db, flow) as rt:
        rid = rt.start("flow")
        rt.approve(rid, by="ana")
        sql(db, "UPDATE outputs SET value = '{\"broken' WHERE run_id = ? AND seq = 0", rid)
        assert rt.resume(rid) == RunStatus.COMPLETED
