"""The storage contract (``RunStore``), backend-neutral: every test takes the ``store_url`` fixture,
so a second backend runs them all by adding one parameter. Tests that must touch the SQLite file
itself live in test_store.py and test_broken_stores.py."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from relaypoint import encoding
from relaypoint.errors import InvalidValue, LeaseLost, StoreError, UnknownRun
from relaypoint.models import Lease, Owner
from relaypoint.status import AnnouncementOutcome, RunStatus, StepStatus
from relaypoint.workflow import fingerprint
from relaypoint.store import (BackendUnavailable, Change, ClosePauses, Committed, Decide, Lookup, NewCheckpoint, NewEvent, NewRun,
                              NewStep, RunStore, RunUpdate, StepEnd, StepStart, StoreDamaged, StoreMissing, StoreReadOnly,
                              Superseded, open_store)

T0 = datetime(2031, 5, 1, 12, 0, tzinfo=UTC)
HOST = "host-a"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def lease(token: str = "tok", pid: int = 4242, expires: float = 30) -> Lease:
    return Lease(token=token, pid=pid, pid_start="boot:1", host=HOST, expires_at=at(expires), heartbeat_at=T0)


def stage(store: RunStore, run_id: str, when: float = 0, **parts) -> Committed:
    """Stage a situation with one change of ``run_id`` at ``at(when)``: ``parts`` as :class:`Change`
    takes them; the run's row is left as it is unless ``run`` is given."""
    return store.commit(Change(run_id=run_id, at=at(when), **{"run": None, **parts}))


def owner_of(store: RunStore, run_id: str) -> Owner | None:
    """The process whose lease holds the run while it is running (what deleting a run checks)."""
    return next((r.owner for r in store.runs_in(["running"], run_ids=[run_id])), None)


def add_run(store: RunStore, run_id: str, *, steps: tuple[str, ...] = ("a", "b", "c"), workflow: str = "flow",
            status: RunStatus = RunStatus.RUNNING, created: float = 0, owner: Lease | None = None,
            input: dict | None = None, options: dict[str, str] | None = None) -> str:
    """A run with a pending chain, as the runtime records one at start (``options``: JSON text of
    the options of the steps it names)."""
    definition = [{"name": s} for s in steps]
    stage(store, run_id, created,
          new=NewRun(run_id=run_id, workflow=workflow, status=status, input=json.dumps(input or {"k": 1}),
                     definition=json.dumps(definition), fingerprint=fingerprint(definition), created_at=at(created),
                     steps_total=len(steps), current_step=steps[0] if steps else None, lease=owner),
          inserted=[NewStep(seq=i, name=s, idempotency_key=f"{run_id}/{s}", options=(options or {}).get(s, "{}"))
                    for i, s in enumerate(steps)],
          checkpoints=[NewCheckpoint(run_id=run_id, kind="start", seq=0, step=steps[0] if steps else None,
                                     at=at(created))],
          events=[NewEvent("run_started", detail={"workflow": workflow})])
    return run_id


def finish(store: RunStore, run_id: str, seq: int, output, *, fence: str | None = "tok", when: float = 1):
    """One boundary: step ``seq`` completes with ``output``, step ``seq + 1`` starts."""
    return store.commit(Change(
        run_id=run_id, at=at(when), fence=fence,
        ended=[StepEnd(seq=seq, status=StepStatus.COMPLETED)], outputs={seq: encoding.dumps(output)},
        started=StepStart(seq + 1, attempt=1),
        checkpoints=[NewCheckpoint(run_id=run_id, kind="boundary", seq=seq + 1, step=None, at=at(when),
                                   state=json.dumps({"next": seq + 1}))],
        run=RunUpdate(steps_done=seq + 1, current_step=None),
        events=[NewEvent("step_completed", step="x", detail={"attempt": 1}), NewEvent("step_started", step="y"),
                NewEvent("noted", detail={"why": "x"}, names_checkpoint=True)]))


def everything(store: RunStore, run_id: str):
    return (store.run(run_id), store.steps(run_id), [store.output(run_id, s.seq)[1] for s in store.steps(run_id)],
            store.checkpoints(run_id), store.events(run_id))


# ---- opening -------------------------------------------------------------------------------------


def test_a_missing_store_is_refused_unless_created(store_url):
    with pytest.raises(StoreMissing, match="^no relaypoint store at .+; make one with"):
        open_store(store_url)
    with open_store(store_url, create=True) as store:
        assert store.url == store_url
        # SQLite: the file's path; PostgreSQL: user@host:port/dbname/schema (never a password)
        assert store.where.endswith(("/runs.db", "/" + store_url.rpartition("schema=")[2])) and "://" not in store.where
        assert store.readonly_reason is None
    with open_store(store_url) as again:
        assert again.list_runs() == []


def test_an_unknown_scheme_is_one_line():
    with pytest.raises(BackendUnavailable, match="unknown store URL scheme 'mysql'"):
        open_store("mysql://localhost/x")


def test_an_unknown_durability_is_refused(store_url):
    with pytest.raises(InvalidValue, match="durability must be one of full, normal"):
        open_store(store_url, create=True, durability="sometimes")


# ---- runs: resolve, read, list, count -------------------------------------------------------------


def test_resolve_takes_a_full_id_or_a_unique_prefix(store):
    add_run(store, "abc123")
    add_run(store, "abc456")
    add_run(store, "abc")
    assert store.resolve("abc1") == "abc123"
    assert store.resolve("abc") == "abc"  # an exact id wins over the ids it prefixes
    assert store.resolve("ABC4") == "abc456", "ids are lowercase hex: a prefix typed in capitals finds them"
    with pytest.raises(UnknownRun, match=r"run id prefix 'ab' matches several runs \(abc, abc123, \.\.\.\); give more"):
        store.resolve("ab")
    with pytest.raises(UnknownRun, match=r"^no run with id 'zz' in .+; see `relaypoint list`$"):
        store.resolve("zz")
    with pytest.raises(UnknownRun, match="empty run id"):
        store.resolve("")
    assert store.exists("abc") and not store.exists("ab")


def test_a_run_reads_back_with_aware_utc_times_and_its_lease(store):
    add_run(store, "r1", owner=lease(), input={"topic": "x", "n": [1, 2]})
    head = store.run("r1")
    assert (head.run_id, head.workflow, head.status, head.steps_total, head.steps_done) == ("r1", "flow", "running", 3, 0)
    assert head.created_at == T0 and head.created_at.tzinfo is not None and head.updated_at == T0
    assert head.input == {"topic": "x", "n": [1, 2]} and store.run_document("r1", "input") == {"topic": "x", "n": [1, 2]}
    assert head.definition == [{"name": "a"}, {"name": "b"}, {"name": "c"}] == store.run_document("r1", "definition")
    assert head.fingerprint == fingerprint(head.definition) and head.suspect_deaths == 0
    assert head.lease == lease()
    assert owner_of(store, "r1") == Owner(host=HOST, pid=4242, pid_start="boot:1", expires_at=at(30))
    with pytest.raises(UnknownRun):
        store.run("nope")


def test_head_is_the_run_without_its_input_and_definition(store):
    add_run(store, "r1", owner=lease(), input={"big": "x" * 10_000})
    assert store.run("r1", documents=False) == store.run("r1").model_copy(update={"input": None, "definition": None})
    with pytest.raises(UnknownRun):
        store.run("nope", documents=False)


def test_runs_of_one_definition_share_it_and_a_drift_records_the_new_one(store):
    add_run(store, "r1")
    add_run(store, "r2")
    add_run(store, "other", steps=("x",))
    text = '[ {"name": "a"},  {"name": "b"} ]'  # as stored, never re-encoded
    stage(store, "r1", run=RunUpdate(definition=text, fingerprint=fingerprint(json.loads(text))))
    with pytest.raises(TypeError, match="give both"):
        RunUpdate(definition="[]")
    assert store.run_document("r1", "definition", text=True) == text and store.run_document("r1", "definition") == [{"name": "a"}, {"name": "b"}]
    assert store.run_document("r2", "definition") == [{"name": s} for s in "abc"] and store.run_document("other", "definition") == [{"name": "x"}]
    with store.transaction():
        store.delete_runs(["r2"])
    add_run(store, "r3")  # its definition was removed with its last run, and is recorded again
    assert store.run("r3").definition == [{"name": s} for s in "abc"]
    with pytest.raises(UnknownRun):
        store.run_document("nope", "definition", text=True)


def test_the_top_level_chain_before_a_seq_gives_what_a_fork_looks_at_its_open_steps_and_gates(store):
    add_run(store, "r1", owner=lease(), steps=())
    gate = '{"approval": true}'
    done = StepStatus.COMPLETED
    stage(store, "r1", inserted=[NewStep(seq=0, name="a", idempotency_key="r1/a", status=done),
                                 NewStep(seq=1, name="b", idempotency_key="r1/b", options=gate),
                                 NewStep(seq=2, name="c", idempotency_key="r1/c", status=StepStatus.FAILED),
                                 NewStep(seq=3, name="d", idempotency_key="r1/d", options=gate, status=done),
                                 NewStep(seq=4, name="sub", idempotency_key="r1/sub#1", parent=1, options=gate),
                                 NewStep(seq=5, name="e", idempotency_key="r1/e", options='{"approval": "1"}',
                                         status=done),
                                 NewStep(seq=6, name="f", idempotency_key="r1/f", options='{"approval": 1.0}',
                                         status=done),
                                 NewStep(seq=7, name="g", idempotency_key="r1/g", options="not json", status=done),
                                 # the last of two keys is the one JSON readers take
                                 NewStep(seq=8, name="h", idempotency_key="r1/h", status=done,
                                         options='{"approval":false,"approval":true}')])

    def looked_at(seq):
        return [s.name for s in store.steps("r1", before=seq)]

    # completed rows that ask for no approval are left out ("1" is no flag, nor unreadable options),
    # and never a pattern's appended call
    assert looked_at(9) == ["b", "c", "d", "f", "h"]
    assert looked_at(1) == [] and looked_at(2) == ["b"] and looked_at(0) == []


def test_a_run_update_sets_fields_and_clears_the_lease(store):
    add_run(store, "r1", owner=lease())
    assert stage(store, "r1", 5, run=RunUpdate(status=RunStatus.INTERRUPTED, lease=None, suspect_deaths=2,
                                               current_step="b", steps_done=1, error="why")) == Committed()
    head = store.run("r1")
    assert (head.status, head.updated_at, head.lease, head.suspect_deaths, head.current_step, head.error) == (
        RunStatus.INTERRUPTED, at(5), None, 2, "b", "why")
    assert owner_of(store, "r1") is None
    with pytest.raises(TypeError, match="unexpected keyword argument 'output'"):
        RunUpdate(output="x")
    with pytest.raises(TypeError, match="nothing to update"):
        RunUpdate(touch=False)
    with pytest.raises(TypeError, match="aware UTC datetimes"):
        store.commit(Change("r1", at="2031-01-01T00:00:00.000Z", run=RunUpdate(steps_done=2)))
    assert store.run("r1").updated_at == at(5) and store.run("r1").steps_done == 1
    stage(store, "r1", 7, run=RunUpdate(steps_done=2, touch=False))  # no progress: updated_at kept
    assert (store.run("r1").steps_done, store.run("r1").updated_at) == (2, at(5))


def test_a_fenced_update_applies_only_while_the_token_owns_the_run(store):
    add_run(store, "r1", owner=lease("mine"))
    with store.transaction():
        with pytest.raises(LeaseLost):
            store.commit(Change("r1", at(1), fence="theirs", run=RunUpdate(steps_done=3)))
        store.commit(Change("r1", at(1), fence="mine", run=RunUpdate(steps_done=1)))
        with pytest.raises(UnknownRun):
            store.commit(Change("missing", at(1), run=RunUpdate(steps_done=1)))
    assert store.run("r1").steps_done == 1


def test_list_pages_newest_first_by_keyset_with_filters(store):
    for i in range(7):
        add_run(store, f"run{i}", workflow="ingest" if i % 2 else "publish", created=i,
                status=RunStatus.COMPLETED if i < 4 else RunStatus.QUEUED)
    ids = lambda runs: [r.run_id for r in runs]  # noqa: E731
    first = store.list_runs(limit=3)
    assert ids(first) == ["run6", "run5", "run4"]
    key = lambda r: (encoding_time(r.created_at), r.run_id)  # noqa: E731
    assert ids(store.list_runs(limit=3, before=key(first[-1]))) == ["run3", "run2", "run1"]
    assert ids(store.list_runs(limit=2, after=key(first[-1]), oldest_first=True)) == ["run5", "run6"]
    assert ids(store.list_runs(within=(key(first[0]), key(first[-1])))) == ["run6", "run5", "run4"]
    assert ids(store.list_runs(oldest_first=True, limit=2)) == ["run0", "run1"]
    assert ids(store.list_runs(status="queued")) == ["run6", "run5", "run4"]
    assert ids(store.list_runs(workflow="ingest")) == ["run5", "run3", "run1"]
    assert ids(store.list_runs(search="ing")) == ["run5", "run3", "run1"]
    assert ids(store.list_runs(search="run2")) == ["run2"]
    assert ids(store.list_runs(search="pub", status="queued")) == ["run6", "run4"]
    assert store.list_runs(search="zzz") == []


def encoding_time(dt: datetime) -> str:
    from relaypoint.clock import to_text
    return to_text(dt)


def test_counts_by_status_follow_inserts_updates_and_deletes(store):
    assert store.count_by_status() == {}
    for i in range(3):
        add_run(store, f"r{i}", status=RunStatus.QUEUED)
    stage(store, "r0", run=RunUpdate(status=RunStatus.COMPLETED))
    assert store.count_by_status() == {"queued": 2, "completed": 1}
    with store.transaction():
        store.delete_runs(["r1", "r0"])
    assert store.count_by_status() == {"queued": 1}


def test_owners_runnable_and_prunable(store):
    add_run(store, "a", owner=lease("t1", pid=1))
    add_run(store, "b", owner=lease("t2", pid=1))
    add_run(store, "c", owner=lease("t3", pid=2))
    add_run(store, "q", status=RunStatus.QUEUED, created=1)
    add_run(store, "i", status=RunStatus.INTERRUPTED, created=2)
    add_run(store, "other", status=RunStatus.QUEUED, workflow="other")
    add_run(store, "done", status=RunStatus.COMPLETED)
    owners = set(r.owner for r in store.runs_in(["running"]))
    assert sorted(o.pid for o in owners) == [1, 2]
    one = next(o for o in owners if o.pid == 1)
    assert sorted((r.run_id, r.token) for r in store.runs_in(["running"], owner=one)) == [("a", "t1"), ("b", "t2")]

    def runnable(limit):
        return [(r.run_id, r.status) for r in store.runs_in(["queued", "interrupted"], workflows=["flow"], limit=limit)]

    def prunable(statuses, before):
        return [(r.run_id, r.owner) for r in store.runs_in(statuses, updated_before=before)]

    assert runnable(10) == [("q", RunStatus.QUEUED), ("i", RunStatus.INTERRUPTED)]
    assert runnable(1) == [("q", RunStatus.QUEUED)]
    assert prunable(["completed"], at(1)) == [("done", None)]
    assert prunable(["completed"], at(0)) == []
    running = dict(prunable(["running"], at(1)))
    assert running["a"] == Owner(host=HOST, pid=1, pid_start="boot:1", expires_at=at(30))


# ---- steps, outputs, boundaries -------------------------------------------------------------------

AWKWARD = [None, "", "x" * 10_000, "naïve ☃ \U0001f600 \u2028", {"nested": {"list": [1, 2.5, -0.0, True, None]}},
           [], {}, 2**63 - 1, -2**63, 1e300, "null", {"quote\"": "back\\slash"}]


@pytest.mark.parametrize("value", AWKWARD, ids=range(len(AWKWARD)))
def test_outputs_round_trip_awkward_values(store, value):
    add_run(store, "r1", owner=lease())
    store.commit(Change(run_id="r1", at=at(1), fence=None, started=StepStart(0, attempt=1)))
    finish(store, "r1", 0, value)
    step = store.step("r1", 0)
    assert step.has_output and step.status == StepStatus.COMPLETED and step.finished_at == at(1)
    assert store.output("r1", 0)[1] == value
    assert store.output("r1", name="a") == (True, value)
    assert store.output("r1", name="b") == (False, None)


def test_a_boundary_commits_every_part_together(store):
    add_run(store, "r1", owner=lease())
    store.commit(Change(run_id="r1", at=at(0), fence="tok", started=StepStart(0, attempt=1),
                        events=[NewEvent("step_started", step="a", detail={"attempt": 1})]))
    assert store.step("r1", 0).status == StepStatus.RUNNING and store.step("r1", 0).started_at == T0
    result = finish(store, "r1", 0, {"a": 1}, when=2)
    steps = store.steps("r1")
    assert [(s.seq, s.status, s.attempts, s.has_output) for s in steps] == [
        (0, StepStatus.COMPLETED, 1, True), (1, StepStatus.RUNNING, 1, False), (2, StepStatus.PENDING, 0, False)]
    cp = store.checkpoint("r1", Lookup.LATEST)
    assert cp.checkpoint_id == result.checkpoint_id and (cp.kind, cp.seq, cp.state) == ("boundary", 1, {"next": 1})
    head = store.run("r1")
    assert (head.steps_done, head.updated_at, head.current_step) == (1, at(2), None)
    assert [e.kind for e in store.events("r1")][-3:] == ["step_completed", "step_started", "noted"]
    assert store.events("r1")[-3].detail == {"attempt": 1} and store.events("r1")[-2].detail is None
    assert list(store.events("r1")[-1].detail.items()) == [("checkpoint_id", result.checkpoint_id), ("why", "x")]


def new_run(run_id: str, steps: tuple[str, ...] = ("a", "b")) -> tuple[NewRun, list[NewStep]]:
    definition = json.dumps([{"name": s} for s in steps])
    return (NewRun(run_id=run_id, workflow="flow", status=RunStatus.RUNNING, input='{"k": 1}', definition=definition,
                   fingerprint=fingerprint(json.loads(definition)), created_at=at(0), steps_total=len(steps),
                   current_step=steps[0], lease=lease()),
            [NewStep(seq=i, name=s, idempotency_key=f"{run_id}/{s}", options='{"retries": 2}' if i else "{}")
             for i, s in enumerate(steps)])


def test_a_start_writes_the_run_and_its_first_boundary_together(store):
    run, steps = new_run("r1")
    appended = NewStep(seq=2, name="extra", idempotency_key="r1/extra", iteration=2, agent="pro", parent=0)
    result = store.commit(Change(
        run_id="r1", at=at(0), fence="tok", new=run, inserted=steps, started=StepStart(appended, attempt=1),
        checkpoints=[NewCheckpoint("r1", "start", 0, "a", at(0), state='{"s": 0}'),
                     NewCheckpoint("r1", "boundary", 2, "extra", at(0), state='{"s": 1}')],
        events=[NewEvent("run_started", detail={"workflow": "flow"}),
                NewEvent("step_started", step="extra", detail={"attempt": 1}, names_checkpoint=True)]))
    head = store.run("r1")
    assert (head.status, head.workflow, head.input, head.steps_total, head.current_step, head.created_at,
            head.updated_at, head.lease.pid) == (RunStatus.RUNNING, "flow", {"k": 1}, 2, "a", at(0), at(0), 4242)
    assert head.definition == [{"name": "a"}, {"name": "b"}]
    assert [(s.seq, s.name, s.status, s.attempts, s.options, s.iteration, s.agent, s.parent, s.idempotency_key)
            for s in sorted(store.steps("r1"), key=lambda s: s.seq)] == [
        (0, "a", StepStatus.PENDING, 0, {}, 1, None, None, "r1/a"),
        (1, "b", StepStatus.PENDING, 0, {"retries": 2}, 1, None, None, "r1/b"),
        (2, "extra", StepStatus.RUNNING, 1, {}, 2, "pro", 0, "r1/extra")]
    start, boundary = store.checkpoints("r1")
    assert (start.kind, start.seq, start.state, boundary.kind, boundary.seq, boundary.state) == (
        "start", 0, {"s": 0}, "boundary", 2, {"s": 1})
    assert result.checkpoint_id == boundary.checkpoint_id > start.checkpoint_id
    assert [(e.kind, e.step, e.detail) for e in store.events("r1")] == [
        ("run_started", None, {"workflow": "flow"}),
        ("step_started", "extra", {"checkpoint_id": boundary.checkpoint_id, "attempt": 1})]
    assert store.count_by_status() == {"running": 1}


def test_a_start_of_an_existing_run_id_writes_nothing(store):
    add_run(store, "r1", owner=lease())
    before = everything(store, "r1")
    run, steps = new_run("r1")
    with pytest.raises(StoreError):
        store.commit(Change(run_id="r1", at=at(0), fence="tok", new=run, inserted=steps, started=StepStart(0),
                            checkpoints=[NewCheckpoint("r1", "start", 0, "a", at(0))]))
    assert everything(store, "r1") == before and store.count_by_status() == {"running": 1}


def test_a_refused_fence_raises_lease_lost_and_writes_nothing(store):
    add_run(store, "r1", owner=lease("theirs"))
    before = everything(store, "r1")
    with pytest.raises(LeaseLost, match=r"^run r1: this process no longer owns the run \(its lease expired or another "
                                        r"process took the run over\); the step's result was not recorded$"):
        finish(store, "r1", 0, "out", fence="mine")
    assert everything(store, "r1") == before
    stage(store, "r1", run=RunUpdate(status=RunStatus.CANCELLED, lease=None))
    with pytest.raises(LeaseLost, match=r"\(it was cancelled\)"):
        finish(store, "r1", 0, "out", fence="theirs")


def test_a_failing_boundary_is_rolled_back_whole(store):
    add_run(store, "r1", owner=lease())
    before = everything(store, "r1")
    dup = NewStep(seq=1, name="b", idempotency_key="r1/b#2", iteration=2)  # seq 1 exists: the insert fails
    with pytest.raises(StoreError):
        store.commit(Change(
            run_id="r1", at=at(3), fence="tok", ended=[StepEnd(seq=0, status=StepStatus.COMPLETED)], outputs={0: '"o"'},
            started=StepStart(dup), run=RunUpdate(steps_done=1), events=[NewEvent("step_completed")]))
    assert everything(store, "r1") == before


def test_an_appended_execution_repeats_a_name_in_a_later_iteration(store):
    add_run(store, "r1", owner=lease(), steps=("plan", "act"))
    store.commit(Change(run_id="r1", at=at(0), started=StepStart(0)))
    finish(store, "r1", 0, "plan-1")
    finish(store, "r1", 1, "act-1", when=2)  # starts seq 2, which does not exist: an update of nothing
    again = NewStep(seq=2, name="plan", iteration=2, parent=None, idempotency_key="r1/plan#2")
    store.commit(Change(run_id="r1", at=at(3), fence="tok", started=StepStart(again, attempt=1)))
    store.commit(Change(run_id="r1", at=at(4), fence="tok", ended=[StepEnd(seq=2, status=StepStatus.COMPLETED)],
                        outputs={2: '"plan-2"'}))
    child = NewStep(seq=3, name="vote", agent="critic", parent=2, idempotency_key="r1/vote#1/critic")
    stage(store, "r1", inserted=[child])
    assert [(s.seq, s.name, s.iteration, s.agent, s.parent) for s in store.steps("r1")] == [
        (0, "plan", 1, None, None), (1, "act", 1, None, None), (2, "plan", 2, None, None), (3, "vote", 1, "critic", 2)]
    assert store.step("r1", name="plan").seq == 2
    assert store.output("r1", name="plan") == (True, "plan-2")
    assert store.step("r1", name="vote") is None  # not a top-level execution
    assert store.step("r1").seq == 3
    add_run(store, "empty", steps=())
    assert store.step("empty") is None  # no execution: an appended one goes at seq 0


def test_a_damaged_output_is_lenient_for_display_and_strict_for_execution(store):
    add_run(store, "r1", owner=lease())
    store.commit(Change(run_id="r1", at=at(1), ended=[StepEnd(seq=0, status=StepStatus.COMPLETED)],
                        outputs={0: "{not json"}))
    assert store.output("r1", 0)[1] == {"unreadable": "{not json"}
    with pytest.raises(StoreDamaged, match=r"the output of step 'a' of run r1 in .* is not valid JSON"):
        store.output("r1", name="a")


def test_step_ends_marks_and_outputs(store):
    add_run(store, "r1")
    stage(store, "r1", 8, started=StepStart(1, attempt=3))
    stage(store, "r1", 9, ended=[StepEnd(1, StepStatus.FAILED, error="boom", traceback="tb")],
          marked={2: StepStatus.AWAITING_INPUT}, outputs={0: '{"edited": true}'})
    stage(store, "r1", 10, outputs={0: '{"edited": 2}'})  # written again: replaced
    b = store.step("r1", 1)
    assert (b.status, b.attempts, b.error, b.traceback, b.started_at, b.finished_at) == (
        StepStatus.FAILED, 3, "boom", "tb", at(8), at(9))
    assert store.output("r1", 0)[1] == {"edited": 2}
    c = store.step("r1", 2)
    assert (c.status, c.attempts, c.started_at, c.finished_at) == (StepStatus.AWAITING_INPUT, 0, None, None)
    stage(store, "r1", 11, started=StepStart(1, attempt=4))  # a retry clears what the failure left
    b = store.step("r1", 1)
    assert (b.status, b.attempts, b.error, b.traceback, b.started_at, b.finished_at) == (
        StepStatus.RUNNING, 4, None, None, at(11), None)
    assert store.step("r1", 7) is None


def test_replace_steps_keeps_recorded_steps_and_their_outputs_by_name(store):
    add_run(store, "r1", owner=lease())
    store.commit(Change(run_id="r1", at=at(0), started=StepStart(0)))
    finish(store, "r1", 0, "A")
    finish(store, "r1", 1, "B", when=2)
    dropped = stage(store, "r1", replaced=[NewStep(seq=0, name="b", idempotency_key="r1/b", options='{"retries": 1}'),
                                           NewStep(seq=1, name="new", idempotency_key="r1/new"),
                                           NewStep(seq=2, name="c", idempotency_key="r1/c")]).dropped
    assert dropped == ["a"]
    assert [(s.seq, s.name, s.status, s.has_output, s.options) for s in store.steps("r1")] == [
        (0, "b", StepStatus.COMPLETED, True, {"retries": 1}), (1, "new", StepStatus.PENDING, False, {}),
        (2, "c", StepStatus.RUNNING, False, {})]
    assert store.output("r1", 0)[1] == "B" and store.output("r1", name="a") == (False, None)


def test_cancel_open_steps_leaves_ended_ones(store):
    add_run(store, "r1", owner=lease())
    store.commit(Change(run_id="r1", at=at(0), started=StepStart(0)))
    finish(store, "r1", 0, "A")
    stage(store, "r1", 7, cancel_open=True)
    assert [(s.status, s.finished_at) for s in store.steps("r1")] == [
        (StepStatus.COMPLETED, at(1)), (StepStatus.CANCELLED, at(7)), (StepStatus.CANCELLED, at(7))]


# ---- checkpoints and decisions --------------------------------------------------------------------


def pause(store: RunStore, run_id: str, kind: str = "approval", seq: int = 1, step: str = "a",
          deadline: datetime | None = None) -> int:
    """A pause at ``seq``: a gate on the execution before it (approval), or the execution ``seq``."""
    return stage(store, run_id, checkpoints=[NewCheckpoint(
        run_id=run_id, kind=kind, seq=seq, step=step, at=at(1), reason=f"approve the output of step '{step}'",
        deadline_at=deadline, paused_seq=seq - 1 if kind == "approval" else seq)]).checkpoint_id


def paused_runs(store: RunStore, count: int) -> None:
    """``count`` runs awaiting approval, their pauses announced, among ten times as many completed
    runs, each run with three boundary checkpoints (for the plans of the announcement poll)."""
    with store.transaction():
        for i in range(count):
            for rid, status in ((f"p{i:05d}", RunStatus.AWAITING_APPROVAL),
                                *((f"c{i:05d}{k}", RunStatus.COMPLETED) for k in range(10))):
                approval = [NewCheckpoint(run_id=rid, kind="approval", seq=3, step="a", at=at(i),
                                          reason="approve the output of step 'a'")] if rid[0] == "p" else []
                stage(store, rid, i, new=NewRun(run_id=rid, workflow="flow", status=status, input="{}", definition="[]",
                                                fingerprint="fp", created_at=at(i), steps_total=3),
                      checkpoints=[*(NewCheckpoint(run_id=rid, kind="boundary", seq=seq, step=None, at=at(i))
                                     for seq in range(3)), *approval])
    while claimed := store.claim_announcements(500, at(count), at(count + 60)):
        for p in claimed:
            store.settle_announcement(p.checkpoint_id, at(count + 60), AnnouncementOutcome.ANNOUNCED, at(count))


def test_a_checkpoint_is_decided_exactly_once(store):
    add_run(store, "r1")
    cp = pause(store, "r1")
    assert store.checkpoint("r1", Lookup.PENDING).checkpoint_id == cp == store.checkpoint("r1", Lookup.LAST_PAUSE).checkpoint_id
    stage(store, "r1", 2, decided=Decide(cp, "approved", "alice", comment="ok", value_json='{"v": 1}'))
    before = everything(store, "r1")
    with pytest.raises(Superseded, match=f"checkpoint {cp} was already decided"):
        stage(store, "r1", 3, decided=Decide(cp, "rejected", "bob"), run=RunUpdate(status=RunStatus.FAILED),
              events=[NewEvent("rejected")])
    assert everything(store, "r1") == before  # refused: nothing of the change written
    decided = store.checkpoint("r1", Lookup.LAST_PAUSE)
    assert (decided.decision, decided.decided_by, decided.decided_at, decided.comment, decided.value) == (
        "approved", "alice", at(2), "ok", {"v": 1})
    assert store.checkpoint("r1", Lookup.PENDING) is None
    assert store.checkpoint("r1", Lookup.APPROVAL, 0).checkpoint_id == cp and store.checkpoint("r1", Lookup.APPROVAL, 1) is None
    assert store.checkpoint("r1", Lookup.LAST_PAUSE).paused_seq == 0


def test_responses_are_the_answered_input_requests_of_one_execution_in_order(store):
    add_run(store, "r1")
    first, second, other = pause(store, "r1", "input", 0), pause(store, "r1", "input", 0), pause(store, "r1", "input", 1)
    stage(store, "r1", 3, decided=Decide(second, "responded", "d", value_json='"blue"'))
    stage(store, "r1", 4, decided=Decide(first, "responded", "d", value_json='{"n": 1}'))
    stage(store, "r1", 4, decided=Decide(other, "responded", "d", value_json='"other"'))
    assert store.responses("r1", 0) == [{"n": 1}, "blue"]
    assert store.responses("r1", 2) == []


def test_due_pauses_and_close_pauses(store):
    add_run(store, "r1")
    add_run(store, "r2")
    soon = pause(store, "r1", deadline=at(10))
    pause(store, "r2", deadline=at(100))
    pause(store, "r2", kind="orphan")
    assert [c.checkpoint_id for c in store.checkpoints(due=at(10))] == [soon]
    assert store.checkpoints(due=at(9)) == []
    stage(store, "r2", 11, closed=ClosePauses("cancelled", "carol"))
    assert [(c.decision, c.decided_by, c.decided_at) for c in store.checkpoints("r2") if c.kind != "start"] == [
        ("cancelled", "carol", at(11))] * 2
    assert store.checkpoint("r2", Lookup.PENDING) is None and store.checkpoint("r2", Lookup.LAST_PAUSE).decision == "cancelled"
    assert [c.checkpoint_id for c in store.checkpoints(due=at(1000))] == [soon]


def test_pending_decisions_are_each_paused_runs_newest_open_pause_oldest_first(store):
    add_run(store, "late", status=RunStatus.AWAITING_APPROVAL, workflow="w2")
    add_run(store, "early", status=RunStatus.AWAITING_INPUT)
    add_run(store, "ended", status=RunStatus.CANCELLED)
    add_run(store, "decided", status=RunStatus.AWAITING_APPROVAL)
    stale = pause(store, "early", kind="input")
    early = pause(store, "early", kind="input", step="b")  # the newest open pause is the one owed
    late = pause(store, "late")
    pause(store, "ended")  # undecided, but its run is no longer paused
    done = pause(store, "decided")
    stage(store, "decided", 2, decided=Decide(done, "approved", "alice"))
    pending = store.pending_decisions(10)
    assert [(p.run_id, p.checkpoint_id, p.kind, p.step, p.workflow, p.status) for p in pending] == [
        ("early", early, "input", "b", "flow", RunStatus.AWAITING_INPUT),
        ("late", late, "approval", "a", "w2", RunStatus.AWAITING_APPROVAL)]
    assert stale < early and pending[1].reason == "approve the output of step 'a'"
    assert [p.run_id for p in store.pending_decisions(1)] == ["early"]


def owed(pauses) -> list[tuple[str, int]]:
    return [(p.run_id, p.checkpoint_id) for p in pauses]


def test_pauses_owed_are_claimed_for_announcement_once_each_oldest_first(store):
    add_run(store, "late", status=RunStatus.AWAITING_APPROVAL, workflow="w2")
    add_run(store, "early", status=RunStatus.AWAITING_INPUT)
    add_run(store, "ended", status=RunStatus.CANCELLED)
    add_run(store, "decided", status=RunStatus.AWAITING_APPROVAL)
    pause(store, "early", kind="input")
    early = pause(store, "early", kind="input", step="b")  # the newest open pause is the one owed
    late = pause(store, "late", deadline=at(60))
    pause(store, "ended")  # undecided, but its run is no longer paused
    done = pause(store, "decided")
    stage(store, "decided", 2, decided=Decide(done, "approved", "alice"))
    [first] = store.claim_announcements(1, at(5), at(35))
    assert first == store.pending_decisions(10)[0]  # as the review queue lists it: every field
    assert (first.run_id, first.checkpoint_id, first.kind, first.step, first.workflow, first.status) == (
        "early", early, "input", "b", "flow", RunStatus.AWAITING_INPUT)
    [second] = store.claim_announcements(10, at(6), at(36))
    assert (second.run_id, second.checkpoint_id, second.workflow, second.deadline_at) == ("late", late, "w2", at(60))
    assert store.claim_announcements(10, at(7), at(37)) == []  # both claimed, until their claims expire
    assert owed(store.pending_decisions(10)) == [("early", early), ("late", late)]  # still owed: only announced
    assert store.settle_announcement(late, at(36), AnnouncementOutcome.ANNOUNCED, at(8))
    assert store.settle_announcement(early, at(35), AnnouncementOutcome.ANNOUNCED, at(9))
    assert store.claim_announcements(10, at(100), at(130)) == []  # announced: never claimed again
    # the time each was announced is kept, and travels with the run when it is copied to another store
    [copied] = store.export_runs(["late"])
    assert {c["checkpoint_id"]: c["announced_at"] for c in copied.checkpoints if c["kind"] == "approval"} == {late: at(8)}
    # decided, and paused again at the next gate: a new pause, announced once more
    stage(store, "late", 101, decided=Decide(late, "approved", "alice"))
    again = pause(store, "late", seq=2, step="c")
    assert owed(store.claim_announcements(10, at(102), at(132))) == [("late", again)]
    assert store.claim_announcements(10, at(103), at(133)) == []


def test_a_claim_ends_announced_failed_or_released_and_a_failed_pause_waits_to_be_reopened(store):
    for rid in ("a", "b", "c"):
        add_run(store, rid, status=RunStatus.AWAITING_APPROVAL)
    a, b, c = (pause(store, rid) for rid in ("a", "b", "c"))
    assert owed(store.claim_announcements(10, at(0), at(30))) == [("a", a), ("b", b), ("c", c)]
    # failed: never claimed again by itself, not even once its claim has expired
    assert store.settle_announcement(a, at(30), AnnouncementOutcome.FAILED, at(1))
    # released (its worker stopped before its attempts ran out): claimable at once
    assert store.settle_announcement(b, at(30), AnnouncementOutcome.RELEASED, at(1))
    assert owed(store.claim_announcements(10, at(2), at(32))) == [("b", b)]
    # c's claimer died: claimed again once its claim expired, by another claimer
    assert store.claim_announcements(10, at(29.999), at(59)) == []
    assert owed(store.claim_announcements(10, at(30), at(60))) == [("c", c)]
    # the first claimer, late, settles nothing: the claim is no longer its
    assert not store.settle_announcement(c, at(30), AnnouncementOutcome.ANNOUNCED, at(31))
    assert announced_at(store, "c", c) is None
    assert store.settle_announcement(c, at(60), AnnouncementOutcome.ANNOUNCED, at(32))
    assert store.settle_announcement(b, at(32), AnnouncementOutcome.ANNOUNCED, at(32))
    assert store.claim_announcements(10, at(1000), at(1030)) == []  # a failed, b and c announced
    assert (announced_at(store, "a", a), announced_at(store, "c", c)) == (None, at(32))
    # reopened by hand (`relaypoint announce`): a failed pause, and an announced one, are claimable again
    with store.transaction():
        stage(store, "a", 1000, reopened=a)
        stage(store, "c", 1000, reopened=c)
    assert owed(store.claim_announcements(10, at(1001), at(1031))) == [("a", a), ("c", c)]
    assert announced_at(store, "c", c) is None


def announced_at(store: RunStore, run_id: str, checkpoint_id: int) -> datetime | None:
    [cp] = [c for c in store.export_runs([run_id])[0].checkpoints if c["checkpoint_id"] == checkpoint_id]
    return cp["announced_at"]


def quiet_version(store: RunStore) -> object:
    """The store's data version once it has stopped changing for 0.3 s (a notification of a write
    arrives a moment after the write)."""
    version = store.data_version()
    for _ in range(50):
        time.sleep(0.3)
        if (now := store.data_version()) == version:
            return version
        version = now
    raise AssertionError("the store's data version kept changing")


def test_with_nothing_to_announce_a_claim_takes_no_lock_and_writes_nothing(store):
    add_run(store, "paused", status=RunStatus.AWAITING_APPROVAL)
    add_run(store, "done", status=RunStatus.COMPLETED)
    pause(store, "paused")
    [claimed] = store.claim_announcements(10, at(5), at(35))
    opened = []
    transaction = store.transaction
    store.transaction = lambda *a, **k: opened.append(a) or transaction(*a, **k)
    version = store.data_version()
    assert store.claim_announcements(10, at(6), at(36)) == []  # claimed and not yet announced
    store.settle_announcement(claimed.checkpoint_id, at(35), AnnouncementOutcome.ANNOUNCED, at(7))
    opened.clear()
    version = quiet_version(store)  # the settle's own notification (PostgreSQL) has come back
    assert store.claim_announcements(10, at(8), at(38)) == []  # announced
    assert opened == [] and store.data_version() == version


def test_two_claimers_racing_get_each_pause_once_between_them(store_url):
    with open_store(store_url, create=True) as one, open_store(store_url) as two:
        paused = {}
        for i in range(24):
            add_run(one, f"r{i:02d}", status=RunStatus.AWAITING_APPROVAL)
            paused[pause(one, f"r{i:02d}")] = f"r{i:02d}"
        start = threading.Barrier(2)
        claims: dict[str, list[tuple[str, int]]] = {}

        def claim(name: str, store: RunStore) -> None:
            start.wait()
            got = claims.setdefault(name, [])
            while batch := store.claim_announcements(3, at(5), at(35)):
                got += owed(batch)

        threads = [threading.Thread(target=claim, args=(n, s)) for n, s in (("one", one), ("two", two))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        both = claims["one"] + claims["two"]
        assert sorted(both) == sorted((rid, cp) for cp, rid in paused.items())  # each once, none left out
        assert one.claim_announcements(10, at(6), at(36)) == two.claim_announcements(10, at(6), at(36)) == []


def test_a_read_only_store_claims_no_announcement(store_url):
    with open_store(store_url, create=True) as store:
        add_run(store, "r1", status=RunStatus.AWAITING_APPROVAL)
        pause(store, "r1")
    with open_store(store_url, readonly=True) as ro, pytest.raises(StoreReadOnly):
        ro.claim_announcements(10, at(5), at(35))
    with open_store(store_url) as store:
        assert owed(store.claim_announcements(10, at(5), at(35))) == [("r1", store.checkpoint("r1", Lookup.PENDING).checkpoint_id)]


def test_a_fork_copies_upstream_executions_and_outputs_as_stored(store):
    add_run(store, "p", owner=lease())
    store.commit(Change(run_id="p", at=at(0), started=StepStart(0)))
    finish(store, "p", 0, AWKWARD[3])
    finish(store, "p", 1, {"b": [1, None]}, when=2)
    with store.transaction():
        stage(store, "child", 5, new=NewRun(run_id="child", workflow="flow", status=RunStatus.QUEUED, input="{}",
                                            definition="[]", fingerprint="fp", created_at=at(5), steps_total=3,
                                            parent_run_id="p", forked_from_step="b", steps_done=1))
        assert store.copy_for_fork("p", "child", 1) == []
    assert [(s.seq, s.name, s.status, s.attempts, s.has_output, s.idempotency_key) for s in store.steps("child")] == [
        (0, "a", StepStatus.COMPLETED, 1, True, "p/a"), (1, "b", StepStatus.PENDING, 0, False, "child/b"),
        (2, "c", StepStatus.PENDING, 0, False, "child/c")]
    assert store.output("child", name="a") == (True, AWKWARD[3])
    assert [r.run_id for r in store.list_runs(parent="p", limit=None)] == ["child"]
    assert store.run("child").parent_run_id == "p"


def test_an_approval_is_inherited_with_its_author_and_origin(store):
    add_run(store, "p")
    add_run(store, "child", status=RunStatus.QUEUED, steps=())
    cp = pause(store, "p")
    with store.transaction():
        stage(store, "p", 2, decided=Decide(cp, "approved", "alice", comment="fine"))
        [new] = store.copy_for_fork("p", "child", 0, approvals=[cp], at=at(8))
    got = store.checkpoint("child", Lookup.APPROVAL, 0)
    assert got.checkpoint_id == new != cp
    assert (got.decision, got.decided_by, got.decided_at, got.created_at) == ("approved", "alice", at(2), at(8))
    assert got.comment == f"inherited from checkpoint {cp} of run p: fine"
    assert got.state == {"inherited_from": {"run_id": "p", "checkpoint_id": cp}}
    assert store.checkpoint("child", Lookup.PENDING) is None


def test_deleting_runs_removes_everything_of_them(store):
    add_run(store, "r1", owner=lease())
    add_run(store, "keep")
    store.commit(Change(run_id="r1", at=at(0), started=StepStart(0)))
    finish(store, "r1", 0, "A")
    kept = everything(store, "keep")
    with store.transaction():
        store.delete_runs(["r1"])
    assert not store.exists("r1") and store.steps("r1") == [] and store.checkpoints("r1") == []
    assert store.events("r1") == [] and store.output("r1", 0)[1] is None
    assert everything(store, "keep") == kept


# ---- patterns: a group row and its children ------------------------------------------------------

DEBATE = ("brief", "argue", "verdict")  # 'argue' (seq 1) is a debate's group row; children from seq 3


def add_debate(store: RunStore, run_id: str, rounds: int = 3) -> dict[tuple[int, str], int]:
    """A run whose 'brief' completed and whose debate 'argue' recorded ``rounds`` rounds of pro and
    con, as the engine appends them: each child completed with its output, after the boundary
    checkpoint that started it (holding the driver state there). Returns {(round, agent): seq}."""
    add_run(store, run_id, steps=DEBATE, owner=lease(), options={"argue": '{"pattern": "debate"}'})
    seqs = {}
    with store.transaction():
        stage(store, run_id, 0, started=StepStart(0, attempt=1))
        stage(store, run_id, 1, ended=[StepEnd(0, StepStatus.COMPLETED)], outputs={0: '"the brief"'},
              run=RunUpdate(steps_done=1, touch=False))
        for n, (rnd, agent) in enumerate((r, a) for r in range(1, rounds + 1) for a in ("pro", "con")):
            seq = seqs[rnd, agent] = len(DEBATE) + n
            stage(store, run_id, seq, checkpoints=[NewCheckpoint(run_id, "boundary", seq, "argue", at(seq), state=json.dumps(
                      {"next": 1, "in": {"round": rnd, "spoken": [] if agent == "pro" else ["pro"]}}))],
                  inserted=[NewStep(seq=seq, name="argue", iteration=rnd, agent=agent, parent=1,
                                    status=StepStatus.COMPLETED, attempts=1, idempotency_key=f"{run_id}/argue#{rnd}/{agent}")],
                  outputs={seq: encoding.dumps({"round": rnd, "by": agent})})
    return seqs


def shape(steps) -> list[tuple]:
    return [(s.seq, s.name, s.iteration, s.agent, s.parent, s.status) for s in steps]


def test_children_and_history_read_one_group_in_seq_order(store):
    seqs = add_debate(store, "r1", rounds=2)
    # the judge is under way; the verdict step has a child of its own
    stage(store, "r1", inserted=[NewStep(seq=7, name="argue", iteration=3, agent="judge", parent=1,
                                         status=StepStatus.RUNNING, idempotency_key="r1/argue#3/judge"),
                                 NewStep(seq=8, name="verdict", iteration=1, agent="x", parent=2,
                                         idempotency_key="r1/verdict#1/x")])
    children = store.steps("r1", parent=1)
    assert shape(children) == [(3, "argue", 1, "pro", 1, "completed"), (4, "argue", 1, "con", 1, "completed"),
                               (5, "argue", 2, "pro", 1, "completed"), (6, "argue", 2, "con", 1, "completed"),
                               (7, "argue", 3, "judge", 1, "running")]
    assert [(c.has_output, c.output) for c in children] == [(True, None)] * 4 + [(False, None)]
    history = store.steps("r1", parent=1, outputs=True)  # completed children only, outputs decoded
    assert [(h.seq, h.output) for h in history] == [(seqs[r, a], {"round": r, "by": a})
                                                    for r in (1, 2) for a in ("pro", "con")]
    assert shape(store.steps("r1", parent=2)) == [(8, "verdict", 1, "x", 2, "pending")]
    assert store.steps("r1", parent=0) == [] == store.steps("r1", parent=0, outputs=True)
    assert store.steps("r1", parent=99) == [] == store.steps("nope", parent=1)


def test_history_fails_closed_naming_the_execution_whose_output_is_damaged(store):
    seqs = add_debate(store, "r1", rounds=2)
    stage(store, "r1", outputs={seqs[2, "con"]: "{not json"})
    with pytest.raises(StoreDamaged, match=r"^the output of execution 6 \('argue', iteration 2, agent 'con'\) of run "
                                           r"r1 in .* is not valid JSON"):
        store.steps("r1", parent=1, outputs=True)
    assert store.steps("r1", parent=1)[-1].has_output  # reading without outputs still works


def test_steps_are_in_tree_order_each_group_followed_by_its_children(store):
    add_debate(store, "r1", rounds=1)
    stage(store, "r1", inserted=[NewStep(seq=5, name="verdict", agent="x", parent=2, idempotency_key="r1/verdict/x"),
                                 NewStep(seq=6, name="argue", iteration=2, agent="judge", parent=1,
                                         idempotency_key="r1/argue#2/judge")])
    assert [(s.seq, s.parent) for s in store.steps("r1")] == [(0, None), (1, None), (3, 1), (4, 1), (6, 1), (2, None),
                                                             (5, 2)]


def test_checkpoint_at_is_the_earliest_state_holding_checkpoint_of_an_execution(store):
    seqs = add_debate(store, "r1", rounds=2)
    with store.transaction():
        pause_id = stage(store, "r1", checkpoints=[
            NewCheckpoint("r1", "input", 9, "argue", at(20), state='{"next": 1}')]).checkpoint_id
        stage(store, "r1", checkpoints=[
            NewCheckpoint("r1", "boundary", seqs[2, "pro"], "argue", at(21), state='{"later": 1}'),
            NewCheckpoint("r1", "fork", 10, "argue", at(22), state='{"next": 1, "fork": {}}')])
    first = store.checkpoint("r1", Lookup.STATE_AT, seqs[2, "pro"])
    assert (first.kind, first.seq, first.created_at) == ("boundary", 5, at(5))
    assert first.state == {"next": 1, "in": {"round": 2, "spoken": []}}
    assert store.checkpoint("r1", Lookup.STATE_AT, 0).kind == "start"
    assert store.checkpoint("r1", Lookup.STATE_AT, 10).state == {"next": 1, "fork": {}}
    assert store.checkpoint("r1", Lookup.STATE_AT, 9) is None and store.checkpoint("r1", Lookup.LAST_PAUSE).checkpoint_id == pause_id  # a pause's
    assert store.checkpoint("r1", Lookup.STATE_AT, 42) is None and store.checkpoint("nope", Lookup.STATE_AT, 0) is None
    damaged = stage(store, "r1", checkpoints=[
        NewCheckpoint("r1", "boundary", 11, "argue", at(23), state="{not json")]).checkpoint_id
    assert store.checkpoints("r1")[-1].state == {"unreadable": "{not json"}  # lenient for display
    with pytest.raises(StoreDamaged, match=f"^the driver state of checkpoint {damaged} of run r1 in .* is not valid"):
        store.checkpoint("r1", Lookup.STATE_AT, 11)  # strict for a fork that resumes from it


def fork_run(store: RunStore, parent: str, child: str, cut: int, children_before: int | None = None) -> None:
    with store.transaction():
        stage(store, child, 50, new=NewRun(run_id=child, workflow="flow", status=RunStatus.QUEUED, input="{}",
                                           definition="[]", fingerprint="fp", created_at=at(50), steps_total=3,
                                           parent_run_id=parent, forked_from_step=DEBATE[cut]))
        store.copy_for_fork(parent, child, cut, children_before)


def debate_ended(store: RunStore) -> None:
    """Run p's debate ended: its group row holds the result."""
    with store.transaction():
        stage(store, "p", 40, started=StepStart(1, attempt=1))
        stage(store, "p", 41, ended=[StepEnd(1, StepStatus.COMPLETED)], outputs={1: '"pro wins"'})


def test_a_fork_after_a_pattern_copies_its_group_with_every_child(store):
    seqs = add_debate(store, "p", rounds=2)
    debate_ended(store)
    fork_run(store, "p", "child", 2)
    assert shape(store.steps("child")) == [(0, "brief", 1, None, None, "completed"),
                                           (1, "argue", 1, None, None, "completed"),
                                           *[(seqs[r, a], "argue", r, a, 1, "completed") for r in (1, 2)
                                             for a in ("pro", "con")],
                                           (2, "verdict", 1, None, None, "pending")]
    assert [h.idempotency_key for h in store.steps("child", parent=1, outputs=True)] == [f"p/argue#{r}/{a}" for r in (1, 2)
                                                                      for a in ("pro", "con")]
    assert [h.output for h in store.steps("child", parent=1, outputs=True)] == [h.output for h in store.steps("p", parent=1, outputs=True)]
    assert store.output("child", name="argue") == (True, "pro wins")
    assert store.step("child", 2).idempotency_key == "child/verdict" and not store.step("child", 2).has_output


def test_a_fork_inside_a_pattern_copies_the_children_before_the_cut(store):
    seqs = add_debate(store, "p", rounds=3)
    debate_ended(store)
    fork_run(store, "p", "child", 1, children_before=seqs[2, "pro"])
    assert shape(store.steps("child")) == [(0, "brief", 1, None, None, "completed"),
                                           (1, "argue", 1, None, None, "pending"),
                                           (3, "argue", 1, "pro", 1, "completed"),
                                           (4, "argue", 1, "con", 1, "completed"),
                                           (2, "verdict", 1, None, None, "pending")]
    assert [h.output for h in store.steps("child", parent=1, outputs=True)] == [{"round": 1, "by": "pro"}, {"round": 1, "by": "con"}]
    group = store.step("child", 1)
    assert (group.has_output, group.attempts, group.idempotency_key) == (False, 0, "child/argue")
    assert store.step("child").seq == seqs[2, "pro"] - 1  # round 2 is appended there again
    assert store.output("child", name="brief") == (True, "the brief")
    fork_run(store, "p", "bare", 1)  # without children_before: the group starts afresh
    assert shape(store.steps("bare"))[1:] == [(1, "argue", 1, None, None, "pending"),
                                              (2, "verdict", 1, None, None, "pending")]


def test_replace_steps_moves_children_with_their_group_and_checkpoints_with_their_execution(store):
    seqs = add_debate(store, "r1", rounds=2)
    with store.transaction():
        asked = stage(store, "r1", 30, checkpoints=[NewCheckpoint("r1", "input", seqs[2, "con"], "argue", at(30),
                                                                  paused_seq=seqs[2, "con"])]).checkpoint_id
        stage(store, "r1", 31, decided=Decide(asked, "responded", "ann", value_json='"my point"'))
        # the next append's position
        stage(store, "r1", checkpoints=[NewCheckpoint("r1", "boundary", 7, "argue", at(32), state='{"next": 1}')])
        dropped = stage(store, "r1", replaced=[NewStep(seq=0, name="intro", idempotency_key="r1/intro"),
                                               NewStep(seq=1, name="brief", idempotency_key="r1/brief"),
                                               NewStep(seq=2, name="argue", idempotency_key="r1/argue",
                                                       options='{"pattern": "debate"}'),
                                               NewStep(seq=3, name="verdict", idempotency_key="r1/verdict")]).dropped
    assert dropped == []
    assert shape(store.steps("r1")) == [(0, "intro", 1, None, None, "pending"),
                                        (1, "brief", 1, None, None, "completed"),
                                        (2, "argue", 1, None, None, "pending"),
                                        *[(seqs[r, a] + 1, "argue", r, a, 2, "completed") for r in (1, 2)
                                          for a in ("pro", "con")],
                                        (3, "verdict", 1, None, None, "pending")]
    assert [h.output for h in store.steps("r1", parent=2, outputs=True)] == [{"round": r, "by": a} for r in (1, 2) for a in ("pro", "con")]
    assert store.step("r1", 4).idempotency_key == "r1/argue#1/pro"
    assert store.output("r1", name="brief") == (True, "the brief")
    assert store.checkpoint("r1", Lookup.STATE_AT, seqs[2, "pro"] + 1).state == {"next": 1, "in": {"round": 2, "spoken": []}}
    assert store.responses("r1", seqs[2, "con"] + 1) == ["my point"]  # the answer stays with the turn that asked
    moved = next(c for c in store.checkpoints("r1") if c.checkpoint_id == asked)
    assert moved.seq == moved.paused_seq == seqs[2, "con"] + 1
    assert store.checkpoint("r1", Lookup.STATE_AT, 1).kind == "start"  # brief's, moved with it
    assert [c.seq for c in store.checkpoints("r1")][-1] == -8  # the next-append position names no execution
    assert stage(store, "r1", replaced=[NewStep(seq=0, name="brief", idempotency_key="r1/brief")]).dropped == [
        "argue", "intro", "verdict"]
    assert shape(store.steps("r1")) == [(0, "brief", 1, None, None, "completed")]
    assert store.output("r1", 0)[1] == "the brief" and store.step("r1").seq == 0
    assert store.responses("r1", 4) == [] and all(c.seq < 0 for c in store.checkpoints("r1") if c.seq != 0)
    assert next(c for c in store.checkpoints("r1") if c.checkpoint_id == asked).paused_seq < 0


# ---- transactions, versions, read-only ----------------------------------------------------------


def test_a_transaction_rolls_back_on_an_exception_and_does_not_nest(store):
    add_run(store, "r1")
    before = everything(store, "r1")
    with pytest.raises(ZeroDivisionError), store.transaction():
        stage(store, "r1", 1, run=RunUpdate(status=RunStatus.FAILED), events=[NewEvent("step_failed")])
        assert store.run("r1").status == RunStatus.FAILED  # read back inside the transaction
        stage(store, "r1", 1, events=[NewEvent("noted")])  # a second change joins the same transaction
        1 / 0
    assert everything(store, "r1") == before
    with store.transaction(), pytest.raises(RuntimeError, match="do not nest"):
        with store.transaction():
            pass
    with store.transaction():  # usable again
        stage(store, "r1", 2, events=[NewEvent("noted")])
    assert store.events("r1")[-1].kind == "noted"


def test_data_version_changes_when_another_store_commits(store):
    add_run(store, "r1")
    version = store.data_version()
    assert store.data_version() == version
    with open_store(store.url) as other:
        stage(other, "r1", 1, events=[NewEvent("noted")])
    assert store.data_version() != version
    version = store.data_version()
    stage(store, "r1", 2, events=[NewEvent("noted")])
    assert store.data_version() != version


def test_a_read_only_store_reads_and_refuses_every_write(store):
    add_run(store, "r1", owner=lease())
    with open_store(store.url, readonly=True) as ro:
        assert ro.readonly_reason == "opened read-only"
        assert ro.run("r1").run_id == "r1" and len(ro.steps("r1")) == 3
        with pytest.raises(StoreReadOnly, match=r"is read-only \(opened read-only\); actions that record something "
                                                "are unavailable"):
            with ro.transaction():
                pass
        with pytest.raises(StoreReadOnly):
            finish(ro, "r1", 0, "x")
    assert store.steps("r1")[0].status == StepStatus.PENDING
