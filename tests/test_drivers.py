"""The chain driver, pure (no store): what it asks for from a state, how results and decisions fold
into the state, how a state is restored from a checkpoint (also one written before drivers
existed), and that the definition and fingerprint are today's. Then a driver of its own through
the runtime: a repeated step name, appended executions, independent calls, and a resume."""

from __future__ import annotations

import hashlib
import json
import time
from datetime import UTC, datetime

import pytest

from relaypoint import Runtime, Workflow
from relaypoint.drivers import Call, ChainDriver, Driver, Finish, Pause, RunStep, RunSteps, idempotency_key
from relaypoint.models import Checkpoint


def chain(*steps: str | tuple[str, dict]) -> Workflow:
    wf = Workflow("w")
    for spec in steps:
        name, options = (spec, {}) if isinstance(spec, str) else spec
        wf.step(name=name, **options)(lambda ctx: None)
    return wf


def checkpoint(kind: str, seq: int, step: str | None = None, state=None, decision: str | None = None) -> Checkpoint:
    return Checkpoint(checkpoint_id=1, run_id="r", seq=seq, step=step, kind=kind,
                      created_at=datetime(2031, 1, 1, tzinfo=UTC), state=state, decision=decision)


def drive(driver: ChainDriver, state: dict) -> tuple[list[str], dict]:
    """Run the driver to its first pause or finish, folding each call; returns the calls and the state."""
    calls = []
    while isinstance(action := driver.next(state), RunStep):
        calls.append(action.call.name)
        state = driver.fold(state, action.call, {"out": action.call.name})
    return calls, state


def test_a_chain_runs_its_steps_in_order_then_finishes():
    driver = ChainDriver(chain("a", "b", "c"))
    state = driver.initial_state()
    assert state == {"next": 0}
    assert driver.next(state) == RunStep(Call("a"))
    calls, state = drive(driver, state)
    assert calls == ["a", "b", "c"] and state == {"next": 3}
    assert driver.next(state) == Finish()


def test_an_empty_chain_finishes_at_once():
    driver = ChainDriver(Workflow("empty"))
    assert driver.next(driver.initial_state()) == Finish() and driver.planned() == []


def test_an_approval_step_opens_a_gate_that_pauses_until_decided():
    driver = ChainDriver(chain("a", ("b", {"approval": True, "timeout": 60}), "c"))
    calls, state = drive(driver, driver.initial_state())
    assert calls == ["a", "b"] and state == {"next": 2, "gate": "b"}
    assert driver.next(state) == Pause("approval", "b", 1, "approve the output of step 'b'", 60)
    decided = driver.decided(state, checkpoint("approval", 2, "b", state, "approved"))
    assert decided == {"next": 2} and driver.next(decided) == RunStep(Call("c"))
    assert state == {"next": 2, "gate": "b"}  # never mutated


def test_a_result_recorded_before_this_claim_opens_no_gate():
    driver = ChainDriver(chain(("a", {"approval": True}), "b"))
    assert driver.fold({"next": 0}, Call("a"), None, recorded=True) == {"next": 1}
    assert driver.fold({"next": 0}, Call("a"), None) == {"next": 1, "gate": "a"}


def test_a_state_is_restored_from_the_checkpoint_that_carries_it():
    driver = ChainDriver(chain("a", "b", "c"))
    saved = {"next": 2, "gate": "b"}
    restored = driver.restore(saved, checkpoint("approval", 2, "b", saved))
    assert restored == saved and restored is not saved


@pytest.mark.parametrize("kind, seq, step, state", [
    ("start", 0, "a", None),
    ("boundary", 2, "c", None),
    ("input", 1, "b", None),
    ("orphan", 1, "b", None),
    ("fork", 2, "c", {"parent_run_id": "p", "from_step": "c"}),     # a v2 fork's state is not a driver state
    ("approval", 3, "c", {"inherited_from": {"run_id": "p", "checkpoint_id": 4}}),
    ("boundary", 1, "b", {"unreadable": "{broken"}),
])
def test_a_checkpoint_written_before_drivers_restores_from_its_seq(kind, seq, step, state):
    driver = ChainDriver(chain("a", "b", "c"))
    assert driver.restore(state, checkpoint(kind, seq, step, state)) == {"next": seq}


def test_upstream_offers_the_steps_before_the_next_one():
    driver = ChainDriver(chain("a", "b", "c"))
    up = driver.upstream({"next": 2})
    assert list(up) == ["a", "b"] and len(up) == 2 and up[1] == "b"
    assert "a" in up and "b" in up and "c" not in up and "zz" not in up
    assert list(driver.upstream({"next": 0})) == []


def test_planned_steps_and_their_seqs_follow_the_definition():
    driver = ChainDriver(chain("a", "b", "c"))
    assert [s.name for s in driver.planned()] == ["a", "b", "c"]
    assert [driver.seq_of(Call(n)) for n in ("a", "b", "c", "zz")] == [0, 1, 2, None]
    assert driver.spec(Call("b")).name == "b"
    with pytest.raises(KeyError):
        driver.spec(Call("zz"))


def test_the_definition_and_fingerprint_are_those_of_v0_1():
    wf = chain("a", ("b", {"approval": True, "retries": 2, "on_orphan": "hold", "timeout": 5}))
    expected = [{"name": "a", "approval": False, "retries": 0, "on_orphan": "retry", "timeout": None},
                {"name": "b", "approval": True, "retries": 2, "on_orphan": "hold", "timeout": 5}]
    assert wf.driver().definition() == wf.definition() == expected
    blob = json.dumps(expected, sort_keys=True).encode()
    assert wf.fingerprint() == hashlib.sha256(blob).hexdigest()[:16]


def test_idempotency_keys_keep_the_chain_form_and_name_iterations_and_agents():
    assert idempotency_key("r", Call("a")) == "r/a"
    assert idempotency_key("r", Call("a", iteration=3)) == "r/a#3"
    assert idempotency_key("r", Call("a", iteration=2, agent="critic")) == "r/a#2/critic"
    assert idempotency_key("r", Call("a", agent="critic")) == "r/a#1/critic"


# ---- a driver of its own, through the runtime: repeated names, appended executions, RunSteps ------


class Rounds(Driver):
    """Three iterations of ``draft``, then one ``review`` per agent still to review (RunSteps)."""

    def __init__(self, wf: Workflow) -> None:
        self.specs = {s.name: s for s in wf.steps}

    def definition(self):
        return {"pattern": "rounds", "rounds": 3, "steps": sorted(self.specs)}

    def planned(self):
        return [self.specs["draft"]]

    def spec(self, call):
        return self.specs[call.name]

    def seq_of(self, call):
        return 0 if (call.name, call.iteration, call.agent) == ("draft", 1, None) else None

    def initial_state(self):
        return {"round": 1, "reviewers": ["ana", "bo"]}

    def next(self, state):
        if state["round"] <= 3:
            return RunStep(Call("draft", iteration=state["round"]))
        if state["reviewers"]:
            return RunSteps(tuple(Call("review", agent=a) for a in state["reviewers"]))
        return Finish()

    def fold(self, state, call, output, *, recorded=False, ctx=None):
        if call.name == "draft":
            return {**state, "round": state["round"] + 1}
        return {**state, "reviewers": [a for a in state["reviewers"] if a != call.agent]}

    def decided(self, state, checkpoint):
        return state

    def restore(self, state, checkpoint):
        return dict(state)

    def upstream(self, state):
        return ["draft"]


class RoundsFlow(Workflow):
    def make_driver(self) -> Driver:
        return Rounds(self)


def rounds_flow(interrupt_once: str | None = None) -> tuple[RoundsFlow, list]:
    seen = []
    wf = RoundsFlow("rounds")

    @wf.step
    def draft(ctx):
        seen.append(("draft", ctx.iteration, ctx.agent, ctx.idempotency_key.split("/", 1)[1], dict(ctx.state)))
        return {"round": ctx.iteration}

    @wf.step
    def review(ctx):
        seen.append(("review", ctx.iteration, ctx.agent, ctx.idempotency_key.split("/", 1)[1], ctx.results["draft"]))
        if ctx.agent == interrupt_once and ctx.attempt == 1:
            time.sleep(0.5)  # the call beside it, which returns at once, lands first
            raise KeyboardInterrupt  # the operator's Ctrl-C: the run is released interrupted
        return {"by": ctx.agent}

    return wf, seen


def test_a_driver_repeats_a_name_appends_executions_and_runs_independent_calls(db):
    wf, seen = rounds_flow()
    with Runtime(db, [wf]) as rt:
        rid = rt.start("rounds")
        run = rt.get(rid)
        assert run.status == "completed" and run.definition == {"pattern": "rounds", "rounds": 3,
                                                                "steps": ["draft", "review"]}
        rows = [(t.seq, t.name, t.iteration, t.agent, t.status, t.output) for t in run.tasks]
        assert rows == [(0, "draft", 1, None, "completed", {"round": 1}),
                        (1, "draft", 2, None, "completed", {"round": 2}),
                        (2, "draft", 3, None, "completed", {"round": 3}),
                        (3, "review", 1, "ana", "completed", {"by": "ana"}),
                        (4, "review", 1, "bo", "completed", {"by": "bo"})]
        assert rt.store.checkpoints(rid)[-1].state == {"round": 4, "reviewers": []}
    assert seen[:3] == [("draft", 1, None, "draft", {"round": 1, "reviewers": ["ana", "bo"]}),
                        ("draft", 2, None, "draft#2", {"round": 2, "reviewers": ["ana", "bo"]}),
                        ("draft", 3, None, "draft#3", {"round": 3, "reviewers": ["ana", "bo"]})]
    # the independent calls run at once, so in either order
    assert sorted(seen[3:]) == [("review", 1, "ana", "review#1/ana", {"round": 3}),   # the latest iteration's output
                                ("review", 1, "bo", "review#1/bo", {"round": 3})]


def test_a_resume_reruns_only_the_appended_call_not_recorded_in_its_own_row(db):
    wf, seen = rounds_flow(interrupt_once="bo")
    with Runtime(db, [wf]) as rt:
        with pytest.raises(KeyboardInterrupt):
            rt.start("rounds")
        (rid,) = [r.run_id for r in rt.list()]
        assert rt.get(rid).status == "interrupted"
        seen.clear()
        assert rt.resume(rid) == "completed"
        tasks = rt.get(rid).tasks
    assert [(s[0], s[2]) for s in seen] == [("review", "bo")]  # ana's review was recorded: not run again
    assert [(t.seq, t.name, t.agent, t.attempts, t.status) for t in tasks][3:] == [
        (3, "review", "ana", 1, "completed"), (4, "review", "bo", 2, "completed")]
