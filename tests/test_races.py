"""Races and fences between real processes: a zombie executor, the orphan sweep against fresh starts,
concurrent decisions, resume against fork, cancel during a step, and the worker (exactly-once
claims, graceful stop, poison pill, pause deadlines).

Every command runs the CLI entry point in its own process (see procs.py); racers are released
together by a barrier after their imports. Waits poll the store (read-only) with timeouts. Every
test runs on both backends (the ``store_url`` fixture of conftest.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import procs
import pytest
import stores
from procs import Sandbox, finish, wait_until

APP = "raceapp:workflows"
APP_SOURCE = r'''
"""Workflows for tests/test_races.py."""
import ctypes, os, signal, time
from relaypoint import Workflow

LOGGING = True


def _log(ctx):
    path = os.environ.get("EXEC_LOG")
    if LOGGING and path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(fd, f"{ctx.run_id} {ctx.step} {ctx.attempt} {os.getpid()}\n".encode())
        os.close(fd)


slow = Workflow("slow")            # the middle step sleeps input["sleep"] s, on its first attempt only


@slow.step
def first(ctx):
    _log(ctx)
    return {"n": ctx.input.get("n", 1)}


@slow.step
def nap(ctx):
    _log(ctx)
    if ctx.attempt == 1:
        time.sleep(float(ctx.input.get("sleep", 0)))
    return {"n": ctx.results["first"]["n"] + 1}


@slow.step
def last(ctx):
    _log(ctx)
    return {"n": ctx.results["nap"]["n"] + 1}


slowfirst = Workflow("slowfirst")  # the first step sleeps: a run that just started


@slowfirst.step
def warmup(ctx):
    _log(ctx)
    time.sleep(float(ctx.input.get("sleep", 0.3)))
    return "warm"


@slowfirst.step
def done(ctx):
    _log(ctx)
    return ctx.results["warmup"] + "!"


gated = Workflow("gated")          # two approval gates


@gated.step(approval=True)
def draft(ctx):
    _log(ctx)
    return {"text": ctx.input.get("text", "draft")}


@gated.step(approval=True)
def review(ctx):
    _log(ctx)
    return {"reviewed": ctx.results["draft"]["text"]}


@gated.step
def publish(ctx):
    _log(ctx)
    return {"published": ctx.results["review"]["reviewed"]}


ask = Workflow("ask")


@ask.step
def question(ctx):
    _log(ctx)
    return {"answer": ctx.request_input("what?")}


quick = Workflow("quick")          # for the workers: three short steps


@quick.step
def one(ctx):
    _log(ctx)
    time.sleep(float(ctx.input.get("sleep", 0)))
    return ctx.input.get("n", 0)


@quick.step
def two(ctx):
    _log(ctx)
    time.sleep(float(ctx.input.get("sleep", 0)))
    return ctx.results["one"] * 2


@quick.step
def three(ctx):
    _log(ctx)
    return ctx.results["two"] + 1


poison = Workflow("poison")        # a step that kills its own process


@poison.step
def fine(ctx):
    _log(ctx)
    return "ok"


@poison.step
def boom(ctx):
    _log(ctx)
    os.kill(os.getpid(), signal.SIGKILL)


@poison.step
def never(ctx):
    _log(ctx)
    return "unreachable"


bail = Workflow("bail")            # a step that ends its own process with os._exit


@bail.step
def warm(ctx):
    _log(ctx)
    time.sleep(float(ctx.input.get("sleep", 0)))
    return "warm"


@bail.step
def leave(ctx):
    _log(ctx)
    if ctx.input.get("exit", True):
        os._exit(3)
    return "stayed"


gil = Workflow("gil")              # a step holding the GIL input["hold"] s, on its first attempt only


@gil.step
def hog(ctx):
    _log(ctx)
    if ctx.attempt == 1:  # one C call that keeps the GIL (PyDLL does not release it): no heartbeat
        ctypes.PyDLL(None).sleep(int(ctx.input.get("hold", 0)))
    return "held"


@gil.step
def after(ctx):
    _log(ctx)
    return ctx.results["hog"] + ", then released"


timed = Workflow("timed")          # an approval that may wait 1 s


@timed.step(approval=True, timeout=1)
def proposal(ctx):
    _log(ctx)
    return {"p": 1}


@timed.step
def act(ctx):
    _log(ctx)
    return "acted"


timedask = Workflow("timedask")    # an input request that may wait 1 s


@timedask.step(timeout=1)
def asked(ctx):
    _log(ctx)
    return ctx.request_input("quick, what?")


hold = Workflow("hold")            # a sleeping step, then one that hangs on its first attempt


@hold.step
def doze(ctx):
    _log(ctx)
    time.sleep(float(ctx.input.get("sleep", 0)))
    return "rested"


@hold.step
def hang(ctx):
    _log(ctx)
    if ctx.attempt == 1:
        time.sleep(60)
    return ctx.results["doze"] + ", then released"


workflows = [slow, slowfirst, gated, ask, quick, poison, bail, gil, timed, timedask, hold]
'''

# The app of the fault tests: dies just after its N-th step boundary commits (GAP_KILL_AFTER=N), or
# fails to open the heartbeat's store connection (HEARTBEAT_STORE_FAILS=1), as a busy or damaged
# file would.
FAULT_APP_SOURCE = r'''
import os, signal, threading, time
import relaypoint.lease as _lease
from relaypoint.store.postgres import PostgresStore
from relaypoint.store.sqlite import SqliteStore
from relaypoint import StoreError, Workflow

_boundaries = 0


def _dying(commit):
    def dying(self, change):
        global _boundaries
        result = commit(self, change)
        _boundaries += bool(change.ended)  # a step boundary ends an execution (a start, a renewal none)
        if change.ended and _boundaries == int(os.environ.get("GAP_KILL_AFTER", "0")):
            os.kill(os.getpid(), signal.SIGKILL)  # the boundary has committed
        return result

    return dying


for _Store in (SqliteStore, PostgresStore):
    _Store.commit = _dying(_Store.commit)
_open_store = _lease.open_store


def _failing_store(*args, **kwargs):
    if os.environ.get("HEARTBEAT_STORE_FAILS") and threading.current_thread().name.startswith("heartbeat"):
        raise StoreError("injected: the store stayed busy for 30 s")
    return _open_store(*args, **kwargs)


_lease.open_store = _failing_store
wf = Workflow("pair")


@wf.step
def a(ctx):
    time.sleep(float(ctx.input.get("sleep", 0)))
    return 1


@wf.step
def b(ctx):
    return ctx.results["a"] + 1


workflows = [wf]
'''


@pytest.fixture
def box(tmp_path: Path, store_url: str) -> Sandbox:
    (tmp_path / "raceapp.py").write_text(APP_SOURCE)
    return Sandbox(tmp_path, APP, db=store_url)


def api(box: Sandbox):
    """An in-process Runtime on the box's store with the app's workflows (for setting up states fast;
    steps run here log nothing)."""
    from relaypoint import Runtime

    spec = importlib.util.spec_from_file_location(f"raceapp_{abs(hash(box.dir))}", box.dir / "raceapp.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.LOGGING = False
    return Runtime(str(box.db), module.workflows)


def execs(box: Sandbox, run_id: str | None = None) -> list[tuple[str, str, int]]:
    """(step, attempt, pid) of each logged execution (of ``run_id`` if given), in order."""
    return [(s, a, int(p)) for r, s, a, p in box.executions() if run_id is None or r == run_id]


def values(box: Sandbox, run_id: str) -> dict:
    """Decoded output of each completed step."""
    return {k: json.loads(v) for k, v in procs.outputs(box.db, run_id).items()}


def detail(event: dict) -> dict:
    return json.loads(event["detail"]) if event["detail"] else {}


def assert_clean(*done: procs.Done) -> None:
    for d in done:
        assert not d.leaks(), f"{d.args} printed {d.leaks()}: {d.text}"


def refused(d: procs.Done, *needles: str) -> str:
    """Assert ``d`` was refused: exit 1 and one line naming the reason; returns the line."""
    assert d.code == 1, (d.code, d.text)
    line = d.one_line_error()
    assert line, f"expected one error line, got {d.err!r}"
    for needle in needles:
        assert needle in line, line
    return line


# ---- the zombie -------------------------------------------------------------------------------------

@pytest.fixture
def zombie(tmp_path: Path, store_url: str) -> dict:
    """An executor SIGSTOPped in a sleeping step, recorded as an owner on another host whose 1.5 s
    lease then expires, while another process resumes and completes the run; then SIGCONTed while
    its step is still sleeping. (On its own host a live owner is never taken over: see
    test_a_stopped_owner_past_its_lease_keeps_the_run_until_it_is_killed.)"""
    (tmp_path / "raceapp.py").write_text(APP_SOURCE)
    box = Sandbox(tmp_path, APP, lease_seconds=1.5, db=store_url)
    z = box.spawn("start", "slow", "--app", APP, "--input", json.dumps({"sleep": 4}))
    rid = procs.wait_step(box.db, "nap")["run_id"]
    os.kill(z.pid, signal.SIGSTOP)
    try:
        write(box, "UPDATE runs SET lease_host = 'elsewhere' WHERE run_id = ?", rid)
        row = procs.run_row(box.db, rid)
        wait_until(lambda: procs.utc_text() > procs.run_row(box.db, rid)["lease_expires_at"], 10,
                   "the stopped executor's lease to expire")
        resumer = box.run("resume", rid, "--app", APP)
        before = procs.dump(box.db)
    finally:
        os.kill(z.pid, signal.SIGCONT)
    zd = finish(z, 30)
    return {"box": box, "rid": rid, "zombie": zd, "zombie_row": row, "resumer": resumer, "before": before,
            "after": procs.dump(box.db)}


def write(box: Sandbox, statement: str, *params) -> None:
    """One statement committed on the box's store: what another process would have left in it."""
    stores.execute(box.db, statement, *params)


def test_zombie_writes_nothing_once_continued(zombie):
    box, rid, zd, resumer = zombie["box"], zombie["rid"], zombie["zombie"], zombie["resumer"]
    assert zombie["zombie_row"]["lease_pid"] == zd.pid and zombie["zombie_row"]["lease_host"] == "elsewhere"
    assert resumer.code == 0 and resumer.out.strip() == f"run {rid} is completed", resumer.text
    refused(zd, "no longer owns the run", "not recorded")  # exit 1, one line saying why
    assert zombie["after"] == zombie["before"]             # not a byte written after SIGCONT
    assert procs.run_status(box.db, rid) == "completed"
    # the zombie ran first and nap (attempt 1); the resumer nap (attempt 2) and last
    assert execs(box, rid) == [("first", "1", zd.pid), ("nap", "1", zd.pid), ("nap", "2", resumer.pid),
                               ("last", "1", resumer.pid)]
    assert values(box, rid) == {"first": {"n": 1}, "nap": {"n": 2}, "last": {"n": 3}}
    kinds = procs.event_kinds(box.db, rid)
    assert Counter(k for k in kinds)["step_completed"] == 3
    assert [(e["kind"], e["step"]) for e in procs.events(box.db, rid) if e["kind"] == "interruption_detected"] \
        == [("interruption_detected", "nap")]
    assert_clean(zd, resumer)


# ---- a live owner whose heartbeat stops ----------------------------------------------------------------

def stopped_owner(box: Sandbox, sleep: float) -> tuple[subprocess.Popen, str]:
    """An executor of ``slow`` (nap sleeping ``sleep`` s) SIGSTOPped in nap, once its 1 s lease has
    expired. The caller kills or continues it."""
    box.lease_seconds = 1
    owner = box.spawn("start", "slow", "--app", APP, "--input", json.dumps({"sleep": sleep}))
    rid = procs.wait_step(box.db, "nap")["run_id"]
    # in nap itself: its start is recorded before its function runs (and logs it)
    wait_until(lambda: ("nap", "1", owner.pid) in execs(box, rid), 30, "the owner to be inside nap")
    os.kill(owner.pid, signal.SIGSTOP)
    expires = procs.run_row(box.db, rid)["lease_expires_at"]
    try:
        wait_until(lambda: procs.utc_text() > expires, 10, "the stopped owner's lease to expire")
    except AssertionError:
        procs.kill(owner)
        finish(owner)
        raise
    return owner, rid


def test_a_stopped_owner_past_its_lease_keeps_the_run_until_it_is_killed(box):
    owner, rid = stopped_owner(box, sleep=30)
    try:
        listed, resumed = box.run("list", "--json"), box.run("resume", rid, "--app", APP)
        kinds = procs.event_kinds(box.db, rid)
    finally:
        procs.kill(owner)  # SIGKILL ends a stopped process too
    finish(owner)
    assert listed.code == 0, listed.text
    (shown,) = [r for r in json.loads(listed.out) if r["run_id"] == rid]
    assert shown["status"] == "running" and shown["lease"]["pid"] == owner.pid
    refused(resumed, f"run {rid} is being executed by pid {owner.pid}", "cancel it")
    assert "interruption_detected" not in kinds and "resumed" not in kinds
    assert execs(box, rid) == [("first", "1", owner.pid), ("nap", "1", owner.pid)]  # nap ran once
    # once dead, the owner is gone: the next reader sees the run interrupted, a resume recovers it
    after = box.run("list", "--json")
    assert [r["status"] for r in json.loads(after.out) if r["run_id"] == rid] == ["interrupted"]
    again = box.run("resume", rid, "--app", APP)
    assert again.code == 0 and again.out.strip() == f"run {rid} is completed", again.text
    (seen,) = [e for e in procs.events(box.db, rid) if e["kind"] == "interruption_detected"]
    assert seen["step"] == "nap" and detail(seen)["pid"] == owner.pid
    assert [(s, a) for s, a, _ in execs(box, rid)] == [("first", "1"), ("nap", "1"), ("nap", "2"), ("last", "1")]
    assert_clean(listed, resumed, after, again)


def test_a_step_holding_the_gil_past_its_lease_keeps_its_run(box):
    box.lease_seconds = 1
    owner = box.spawn("start", "gil", "--app", APP, "--input", json.dumps({"hold": 8}))
    rid = wait_until(lambda: next((r for r, s, *_ in box.executions() if s == "hog"), None), 30,
                     "the step to take the GIL")
    # its heartbeat thread cannot run: the lease lapses while the process lives
    wait_until(lambda: procs.utc_text() > procs.run_row(box.db, rid)["lease_expires_at"], 10,
               "the owner's lease to expire")
    lister, resumer = box.spawn("list"), box.spawn("resume", rid, "--app", APP)
    listed, resumed = finish(lister), finish(resumer)
    held = procs.step_row(box.db, rid, "hog")["status"]
    done = finish(owner, 60)
    assert listed.code == 0, listed.text
    assert "interruption_detected" not in procs.event_kinds(box.db, rid)
    refused(resumed, f"run {rid} is being executed by pid {owner.pid}")
    assert execs(box, rid) == [("hog", "1", owner.pid), ("after", "1", owner.pid)]  # never run beside it
    assert held == "running", "the step ended before the other processes looked (machine too slow?)"
    assert done.code == 0, done.text
    assert procs.run_status(box.db, rid) == "completed"
    assert_clean(listed, resumed, done)


def test_cancel_revokes_a_stopped_owner_whose_writes_are_then_refused(box):
    owner, rid = stopped_owner(box, sleep=3)
    try:
        cancel = box.run("cancel", rid, "--by", "carol")
        before = procs.dump(box.db)
    finally:
        os.kill(owner.pid, signal.SIGCONT)
    done = finish(owner, 30)
    assert cancel.code == 0 and cancel.out.strip() == f"cancelled run {rid} (it was running)", cancel.text
    refused(done, "no longer owns the run", "it was cancelled", "not recorded")
    assert procs.dump(box.db) == before  # the continued owner wrote nothing
    nap = procs.step_row(box.db, rid, "nap")
    assert procs.run_status(box.db, rid) == "cancelled" and nap["status"] == "cancelled" and nap["output"] is None
    assert_clean(cancel, done)


# ---- the orphan sweep -----------------------------------------------------------------------------

SWEEPER = r"""
import os, sys
from relaypoint import Runtime
db, stop = sys.argv[1], sys.argv[2]
sweeps, marked = 0, []
with Runtime(db, create=False) as rt:
    while not os.path.exists(stop):
        marked += rt.sweep()
        rt.list(limit=20)
        sweeps += 1
print(sweeps, *marked)
"""


def test_orphan_sweep_never_interrupts_a_live_run(box):
    api(box).close()  # create the store
    stop = box.dir / "stop-sweeping"
    sweeper = subprocess.Popen([sys.executable, "-c", SWEEPER, str(box.db), str(stop)], cwd=box.dir,
                               env=box.environ(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    listings, starts = [], []
    try:
        # fresh starts, two at a time, each first step sleeping while the sweeper loops
        for i in range(5):
            pair = [box.spawn("start", "slowfirst", "--app", APP, "--input", json.dumps({"sleep": 0.25, "i": i}))
                    for _ in range(2)]
            listings.append(box.spawn("list", "--status", "running", "--json"))
            starts += [finish(p) for p in pair]
            listings.append(box.spawn("list"))
        # and one run whose owner really died, re-claimed while the sweeper loops
        victim = box.spawn("start", "slow", "--app", APP, "--input", json.dumps({"sleep": 30}))
        victim_id = procs.wait_step(box.db, "nap")["run_id"]
        procs.kill(victim)
        finish(victim)
        resumed = box.run("resume", victim_id, "--app", APP)
    finally:
        stop.touch()
    swept = finish(sweeper)
    listed = [finish(p) for p in listings]

    assert swept.code == 0, swept.err
    sweeps, *marked = swept.out.split()
    assert int(sweeps) > 20, "the sweeper hardly ran"
    assert set(marked) <= {victim_id}
    fresh = [s.out.strip() for s in starts]
    for s in starts:
        assert s.code == 0, s.text
    for rid in fresh:
        assert procs.run_status(box.db, rid) == "completed"
        assert "interruption_detected" not in procs.event_kinds(box.db, rid)
    assert resumed.code == 0, resumed.text
    kinds = procs.event_kinds(box.db, victim_id)
    assert kinds.count("interruption_detected") == 1  # the real death, once, before the claim
    assert kinds.index("interruption_detected") < kinds.index("resumed") and kinds[-1] == "run_completed"
    for d in listed:
        assert d.code == 0, d.text
    assert_clean(*starts, *listed, swept, resumed)


# ---- decisions ------------------------------------------------------------------------------------

def paused_runs(box: Sandbox, workflow: str, n: int, **input) -> list[str]:
    with api(box) as rt:
        ids = [rt.start(workflow, {**input, "i": i}) for i in range(n)]
        assert {rt.get(r).status for r in ids} <= {"awaiting_approval", "awaiting_input"}
    return ids


def test_two_approvers_at_once_one_decision(box):
    ids = paused_runs(box, "gated", 6)
    for i, rid in enumerate(ids):
        other = ("approve", rid, "--by", "bob") if i % 2 == 0 else ("reject", rid, "--by", "bob",
                                                                     "--comment", "no")
        results = box.race(("approve", rid, "--by", "alice"), other)
        assert_clean(*results)
        winners = [r for r in results if r.code == 0]
        assert len(winners) == 1, [r.text for r in results]
        loser = next(r for r in results if r.code != 0)
        refused(loser, rid, "nothing to", "already decided")
        cps = [c for c in procs.checkpoints(box.db, rid) if c["kind"] == "approval"]
        assert len(cps) == 1 and cps[0]["decided_by"] == winners[0].args[3]
        kinds = procs.event_kinds(box.db, rid)
        assert kinds.count("approved") + kinds.count("rejected") == 1
        assert procs.run_status(box.db, rid) == ("queued" if winners[0].args[0] == "approve" else "rejected")


def test_approve_racing_cancel_is_consistent(box):
    ids = paused_runs(box, "gated", 6)
    orders = Counter()
    for rid in ids:
        approve, cancel = box.race(("approve", rid, "--by", "alice"), ("cancel", rid, "--by", "carol"))
        assert_clean(approve, cancel)
        assert cancel.code == 0, cancel.text  # a paused or queued run can always be cancelled
        kinds = [k for k in procs.event_kinds(box.db, rid) if k in ("approved", "cancelled")]
        cp = next(c for c in procs.checkpoints(box.db, rid) if c["kind"] == "approval")
        if approve.code == 0:  # approved, then cancelled while queued
            orders["approve first"] += 1
            assert kinds == ["approved", "cancelled"] and cp["decision"] == "approved"
            assert "it was queued" in cancel.out
        else:                  # cancelled, then the approval refused
            orders["cancel first"] += 1
            refused(approve, "is cancelled", "nothing to approve")
            assert kinds == ["cancelled"] and cp["decision"] == "cancelled"
            assert "it was awaiting_approval" in cancel.out
        assert procs.run_status(box.db, rid) == "cancelled"
        assert {s["status"] for s in procs.steps(box.db, rid)} == {"completed", "cancelled"}
    print(f"approve racing cancel: {dict(orders)}")


def test_respond_twice_one_answer(box):
    (rid,) = paused_runs(box, "ask", 1)
    first, second = box.race(("respond", rid, "--value", '"A"', "--by", "a"),
                             ("respond", rid, "--value", '"B"', "--by", "b"))
    assert_clean(first, second)
    assert sorted([first.code, second.code]) == [0, 1], (first.text, second.text)
    winner, loser = (first, second) if first.code == 0 else (second, first)
    refused(loser, "nothing to respond to", "already decided")
    answer = "A" if winner is first else "B"
    assert procs.event_kinds(box.db, rid).count("responded") == 1
    done = box.run("resume", rid, "--app", APP)
    assert done.code == 0, done.text
    assert values(box, rid) == {"question": {"answer": answer}}
    refused(box.run("respond", rid, "--value", '"C"'), "is completed", "nothing to respond to")


def test_approval_on_a_stale_view_is_refused(box):
    (rid,) = paused_runs(box, "gated", 1)
    seen = procs.checkpoints(box.db, rid)[-1]  # what a person looked at: the gate after draft
    assert seen["kind"] == "approval" and seen["step"] == "draft"
    c1 = str(seen["checkpoint_id"])
    ok = box.run("approve", rid, "--checkpoint", c1, "--by", "bob")
    assert ok.code == 0, ok.text
    # a second person, still looking at checkpoint c1, while the run is queued
    refused(box.run("approve", rid, "--checkpoint", c1, "--by", "alice"), "nothing to approve")
    moved = box.run("resume", rid, "--app", APP)
    assert moved.code == 0 and "awaiting_approval at step 'review'" in moved.out, moved.text
    c2 = procs.checkpoints(box.db, rid)[-1]
    assert c2["kind"] == "approval" and c2["step"] == "review"
    before = procs.dump(box.db)
    for cmd in (("approve", rid, "--checkpoint", c1), ("reject", rid, "--checkpoint", c1, "--comment", "no"),
                ("approve", rid, "--checkpoint", c1, "--output", '{"reviewed": "edited"}')):
        refused(box.run(*cmd), f"moved on since checkpoint {c1}", f"checkpoint {c2['checkpoint_id']}",
                "step 'review'")
    assert procs.dump(box.db) == before  # refused: nothing recorded
    fresh = box.run("approve", rid, "--checkpoint", str(c2["checkpoint_id"]), "--by", "alice")
    assert fresh.code == 0, fresh.text
    assert procs.run_status(box.db, rid) == "queued"
    assert_clean(ok, moved, fresh)


# ---- resume and fork racing ----------------------------------------------------------------------

@pytest.mark.parametrize("sleep", [0.0, 0.05, 0.2])
def test_resume_and_fork_racing_on_one_run(box, sleep):
    with api(box) as rt:  # a queued run whose step one is done; two and three each take `sleep` s
        rid = rt.fork(rt.start("quick", {"n": 5}), "two", {"n": 5, "sleep": sleep})
    before = procs.outputs(box.db, rid)
    assert before == {"one": "5"}
    results = box.race(("resume", rid, "--app", APP), ("fork", rid, "--from", "two"),
                       ("fork", rid, "--from", "three"))
    assert_clean(*results)
    resumed, *forks = results
    assert resumed.code == 0 and resumed.out.strip() == f"run {rid} is completed", resumed.text
    parent = procs.outputs(box.db, rid)
    assert parent == {"one": "5", "two": "10", "three": "11"}
    assert {k: parent[k] for k in before} == before  # completed outputs never change
    assert [s for s, _, _ in execs(box, rid)] == ["two", "three"]
    assert forks[0].code == 0, forks[0].text  # step one was completed before the race
    outcomes = []
    for fork, cut in zip(forks, ("two", "three")):
        if fork.code != 0:  # forked before the upstream step completed: refused, and says why
            refused(fork, "step 'two'", "has not completed", "no output to reuse")
            outcomes.append(f"--from {cut} refused")
            continue
        outcomes.append(f"--from {cut} forked")
        child = fork.out.strip()
        upstream = ["one", "two", "three"][:["one", "two", "three"].index(cut)]
        assert procs.outputs(box.db, child) == {s: parent[s] for s in upstream}  # copied at the fork point
        assert procs.run_row(box.db, child)["status"] == "queued"
        assert procs.run_row(box.db, child)["parent_run_id"] == rid
        ran = box.run("resume", child, "--app", APP)
        assert ran.code == 0, ran.text
        assert procs.outputs(box.db, child) == parent
        assert [s for s, _, _ in execs(box, child)] == ["one", "two", "three"][len(upstream):]
    assert procs.outputs(box.db, rid) == parent
    print(f"resume and fork racing (steps of {sleep} s): {', '.join(outcomes)}")


# ---- cancel while a step runs -----------------------------------------------------------------------

# With the short lease the heartbeat sees the cancel first (a pure ownership check, fixed in 0476e87).
@pytest.mark.parametrize("lease", [None, 0.9], ids=["default-lease", "short-lease"])
def test_cancel_while_a_step_runs(box, lease):
    box.lease_seconds = lease
    executor = box.spawn("start", "slow", "--app", APP, "--input", json.dumps({"sleep": 2}))
    rid = procs.wait_step(box.db, "nap")["run_id"]
    cancel = box.run("cancel", rid, "--by", "carol")
    assert cancel.code == 0 and cancel.out.strip() == f"cancelled run {rid} (it was running)", cancel.text
    ex = finish(executor, 30)
    assert_clean(cancel, ex)
    assert procs.run_status(box.db, rid) == "cancelled"
    nap = procs.step_row(box.db, rid, "nap")
    assert nap["status"] == "cancelled" and nap["output"] is None
    assert procs.step_row(box.db, rid, "last")["status"] == "cancelled"
    completed = [e["step"] for e in procs.events(box.db, rid) if e["kind"] == "step_completed"]
    assert completed == ["first"]
    assert [s for s, _, _ in execs(box, rid)] == ["first", "nap"]
    refused(ex, "no longer owns the run", "it was cancelled", "not recorded")


# ---- faults around the boundaries ------------------------------------------------------------------

@pytest.fixture
def faulty(tmp_path: Path, store_url: str) -> Sandbox:
    (tmp_path / "faultapp.py").write_text(FAULT_APP_SOURCE)
    return Sandbox(tmp_path, "faultapp:workflows", db=store_url)


def test_owner_killed_right_after_the_last_boundary_leaves_the_run_completed(faulty):
    # Found by the crash matrix before ad68fa5: the last boundary and the completion were two
    # commits, and a death between them left a running run with every step done.
    died = faulty.run("start", "pair", "--app", faulty.app, env={"GAP_KILL_AFTER": "2"})
    assert died.code == -signal.SIGKILL
    (row,) = procs.query(faulty.db, "SELECT * FROM runs")
    assert row["status"] == "completed" and row["lease_token"] is None
    kinds = procs.event_kinds(faulty.db, row["run_id"])
    assert kinds[-1] == "run_completed" and "resumed" not in kinds


def test_owner_killed_after_an_inner_boundary_resumes_at_the_next_step(faulty):
    died = faulty.run("start", "pair", "--app", faulty.app, env={"GAP_KILL_AFTER": "1"})
    assert died.code == -signal.SIGKILL
    (row,) = procs.query(faulty.db, "SELECT * FROM runs")
    rid = row["run_id"]
    assert [(s["name"], s["status"]) for s in procs.steps(faulty.db, rid)] == [("a", "completed"), ("b", "running")]
    again = faulty.run("resume", rid, "--app", faulty.app)
    assert again.code == 0, again.text
    assert procs.outputs(faulty.db, rid) == {"a": "1", "b": "2"}
    kinds = procs.event_kinds(faulty.db, rid)
    assert kinds.count("interruption_detected") == 1 and kinds.index("interruption_detected") < kinds.index("resumed")


def test_a_heartbeat_that_cannot_open_the_store_prints_no_traceback(faulty):
    done = faulty.run("start", "pair", "--app", faulty.app, "--input", json.dumps({"sleep": 0.3}),
                      env={"HEARTBEAT_STORE_FAILS": "1"})
    assert "Traceback" not in done.text, done.text
    assert done.code in (0, 1) and (done.code == 0 or done.one_line_error()), done.text


# ---- a reader in another process while a step runs ----------------------------------------------

def test_a_reader_closing_never_hides_the_executors_commits(box):
    executor = box.spawn("start", "hold", "--app", APP, "--input", json.dumps({"sleep": 1.0}))
    try:
        rid = procs.wait_step(box.db, "doze")["run_id"]
        listed = box.run("list")  # another process opens the store, reads, closes
        assert listed.code == 0, listed.text
        # the executor commits doze's boundary, then logs hang: from then on every process must see it
        wait_until(lambda: ("hang", "1", executor.pid) in execs(box, rid), 30, "the executor to reach hang")
        seen = procs.step_row(box.db, rid, "doze")["status"]
    finally:
        procs.kill(executor)
        finish(executor)
    assert seen == "completed"
    assert procs.step_row(box.db, rid, "doze")["status"] == "completed"  # and it survives the executor's death
    assert procs.outputs(box.db, rid) == {"doze": '"rested"'}


# ---- the worker ---------------------------------------------------------------------------------------

def two_workers(box, runs: list[str]) -> list:
    """Two workers of two threads each, stopped (SIGTERM) once every one of ``runs`` completed; they
    exited cleanly. Returns how each finished."""
    workers = [box.spawn("worker", "--app", APP, "--concurrency", "2", "--poll", "0.1") for _ in range(2)]
    try:
        wait_until(lambda: all(procs.run_status(box.db, r) == "completed" for r in runs), 60,
                   "every queued run to complete")
    finally:
        for w in workers:
            procs.kill(w, signal.SIGTERM)
    done = [finish(w, 30) for w in workers]
    assert [d.code for d in done] == [0, 0], [d.err for d in done]
    assert_clean(*done)
    return done


def test_two_workers_execute_every_run_exactly_once(box):
    with api(box) as rt:
        base = rt.start("quick", {"n": 0})
        forks = [rt.fork(base, "one", {"n": i, "sleep": 0.1}) for i in range(1, 9)]
    done = two_workers(box, forks)
    for i, f in enumerate(forks, start=1):
        assert [(s, a) for s, a, _ in execs(box, f)] == [("one", "1"), ("two", "1"), ("three", "1")]
        assert procs.outputs(box.db, f) == {"one": str(i), "two": str(2 * i), "three": str(2 * i + 1)}
    pids = Counter(p for f in forks for _, _, p in execs(box, f))
    assert set(pids) <= {d.pid for d in done}
    print(f"two workers: runs per worker process {dict(Counter({p: n // 3 for p, n in pids.items()}))}")


def test_runs_queued_by_start_queue_are_each_executed_once_by_two_racing_workers(box):
    # eight `relaypoint start --queue` processes at once, then two workers going down the same queue
    assert box.run("migrate").code == 0
    queued = box.race(*[("start", "quick", "--queue", "--app", APP, "--input", json.dumps({"n": i, "sleep": 0.1}))
                        for i in range(1, 9)])
    assert_clean(*queued)
    runs = [d.out.strip() for d in queued]
    assert [d.code for d in queued] == [0] * 8 and len(set(runs)) == 8
    assert execs(box) == [] and {procs.run_status(box.db, r) for r in runs} == {"queued"}  # nothing executed
    done = two_workers(box, runs)
    for i, rid in enumerate(runs, start=1):
        assert [(s, a) for s, a, _ in execs(box, rid)] == [("one", "1"), ("two", "1"), ("three", "1")]
        assert procs.outputs(box.db, rid) == {"one": str(i), "two": str(2 * i), "three": str(2 * i + 1)}
        assert [k for k in procs.event_kinds(box.db, rid) if k in ("run_queued", "resumed")] == ["run_queued", "resumed"]
    assert {p for rid in runs for _, _, p in execs(box, rid)} <= {d.pid for d in done}


def test_sigterm_finishes_the_step_and_releases_the_run(box):
    with api(box) as rt:
        base = rt.start("slow", {"sleep": 0})
        rid = rt.fork(base, "nap", {"sleep": 2.0})
    w = box.spawn("worker", "--app", APP, "--poll", "0.1")
    nap = procs.wait_step(box.db, "nap", run_id=rid, timeout=30)
    started = procs.parse_utc(nap["started_at"])
    procs.kill(w, signal.SIGTERM)
    sent = time.monotonic()
    remaining = 2.0 - (procs.parse_utc(procs.utc_text()) - started).total_seconds()
    d = finish(w, 30)
    took = time.monotonic() - sent
    assert d.code == 0, d.err
    assert_clean(d)
    assert took < max(remaining, 0) + 2.0, f"the worker took {took:.1f} s to stop"
    row = procs.run_row(box.db, rid)
    assert row["status"] == "queued" and row["lease_token"] is None and row["current_step"] == "last"
    assert procs.step_row(box.db, rid, "nap")["status"] == "completed"
    assert procs.step_row(box.db, rid, "last")["status"] == "pending"
    released = [e for e in procs.events(box.db, rid) if e["kind"] == "released"]
    assert len(released) == 1 and released[0]["step"] == "last"
    assert "stopping" in d.err and f"run {rid}: queued" in d.err
    # another worker continues where it stopped: nap is not executed again
    w2 = box.spawn("worker", "--app", APP, "--poll", "0.1")
    try:
        procs.wait_status(box.db, rid, "completed", 30)
    finally:
        procs.kill(w2, signal.SIGTERM)
    assert finish(w2, 30).code == 0
    assert [s for s, _, _ in execs(box, rid)] == ["nap", "last"]


@pytest.mark.parametrize("options", [(), ("--on-pause", "true"), ("--concurrency", "2")],
                         ids=["alone", "on-pause", "concurrency-2"])
def test_ctrl_c_stops_a_worker_whose_output_pipe_is_closed(box, options):
    # `relaypoint worker ... 2>&1 | tee w.log`, then Ctrl-C: tee is gone first, so the worker's
    # "stopping" line meets a closed pipe. It stopped nothing (the worker ran on for minutes), or,
    # with one thread to join, ended the process at once and left the step under way interrupted.
    with api(box) as rt:
        rid = rt.fork(rt.start("slow", {"sleep": 0}), "nap", {"sleep": 2.0})
    w = box.spawn("worker", "--app", APP, "--poll", "0.1", *options)
    try:
        procs.wait_step(box.db, "nap", run_id=rid, timeout=30)
        w.stdout.close()
        w.stderr.close()  # the reader of its output is gone
        procs.kill(w, signal.SIGINT)
        code = w.wait(timeout=30)
    finally:
        procs.kill(w)
    assert code == 0
    row = procs.run_row(box.db, rid)
    assert row["status"] == "queued" and row["lease_token"] is None and row["current_step"] == "last"
    assert procs.step_row(box.db, rid, "nap")["status"] == "completed"
    assert [e["step"] for e in procs.events(box.db, rid) if e["kind"] == "released"] == ["last"]


def test_poison_pill_run_is_failed_after_max_recoveries(box):
    start = box.run("start", "poison", "--app", APP)
    assert start.code == -signal.SIGKILL  # the step killed its own process
    (row,) = procs.query(box.db, "SELECT * FROM runs")
    rid = row["run_id"]
    deaths = []
    for _ in range(6):  # each worker that picks the run up dies with it, until the guard fails it
        w = box.spawn("worker", "--app", APP, "--max-recoveries", "2", "--poll", "0.1")
        try:
            wait_until(lambda w=w: w.poll() is not None or procs.run_status(box.db, rid) == "failed", 30,
                       "the worker to die or the run to fail")
        except AssertionError:
            procs.kill(w)
            finish(w)
            raise
        if w.poll() is not None:
            deaths.append(finish(w))
            continue
        procs.kill(w, signal.SIGTERM)
        survivor = finish(w, 30)
        break
    else:
        pytest.fail(f"the run never failed: {procs.run_row(box.db, rid)}")
    assert [d.code for d in deaths] == [-signal.SIGKILL] * 2
    assert survivor.code == 0 and f"run {rid}: failed" in survivor.err, survivor.err
    assert_clean(survivor)
    row = procs.run_row(box.db, rid)
    assert row["status"] == "failed"
    assert "died 3 times" in row["error"] and "2 recoveries" in row["error"] and "'boom'" in row["error"]
    assert procs.step_row(box.db, rid, "boom")["status"] == "failed"
    assert [s for s, _, _ in execs(box, rid)] == ["fine", "boom", "boom", "boom"]
    failed = [e for e in procs.events(box.db, rid) if e["kind"] == "run_failed"]
    assert len(failed) == 1 and detail(failed[0])["poison_pill"] is True


def test_a_poison_pill_is_charged_alone_and_spares_the_runs_that_shared_its_worker(box):
    with api(box) as rt:  # three healthy runs (steps of 1 s) and one whose step calls os._exit
        healthy = [rt.fork(rt.start("quick", {"n": 0}), "one", {"n": i, "sleep": 1.0}) for i in (1, 2, 3)]
        poison = rt.fork(rt.start("bail", {"exit": False}), "warm", {"sleep": 0.3, "exit": True})

    def settled() -> bool:
        return all(procs.run_status(box.db, r) in ("completed", "failed") for r in (*healthy, poison))

    deaths, survivor = [], None
    for _ in range(8):  # a worker restarted after each death, as a supervisor would
        w = box.spawn("worker", "--app", APP, "--concurrency", "4", "--max-recoveries", "2", "--poll", "0.1")
        try:
            wait_until(lambda w=w: w.poll() is not None or settled(), 60, "the worker to die or every run to settle")
        except AssertionError:
            procs.kill(w)
            finish(w)
            raise
        if w.poll() is not None:
            deaths.append(finish(w))
            continue
        procs.kill(w, signal.SIGTERM)
        survivor = finish(w, 30)
        break
    assert survivor is not None, f"not settled after {len(deaths)} worker deaths: " + ", ".join(
        f"{r}: {procs.run_status(box.db, r)}" for r in (*healthy, poison))
    assert survivor.code == 0, survivor.err
    assert [procs.run_status(box.db, r) for r in (*healthy, poison)] == ["completed"] * 3 + ["failed"]
    assert_clean(survivor, *deaths)
    assert {d.code for d in deaths} == {3}
    # every death was the poison run's; once it runs alone each is charged, and 2 recoveries are allowed
    charged = [detail(e) for e in procs.events(box.db, poison) if e["kind"] == "interruption_detected"]
    assert [c["suspect"] for c in charged].count(True) == 3 and len(charged) == len(deaths)
    assert 3 <= len(deaths) <= 4  # at most one death shared with the healthy runs, then 3 alone
    row = procs.run_row(box.db, poison)
    assert "died 3 times while executing it alone" in row["error"] and "'leave'" in row["error"]
    for i, h in enumerate(healthy, start=1):
        assert procs.outputs(box.db, h) == {"one": str(i), "two": str(2 * i), "three": str(2 * i + 1)}
        runs = Counter(s for s, _, _ in execs(box, h))
        interrupted = [detail(e) for e in procs.events(box.db, h) if e["kind"] == "interruption_detected"]
        assert not any(x["suspect"] for x in interrupted) and all(x["co_executing"] > 1 for x in interrupted)
        assert len(interrupted) <= 1 and sum(runs.values()) <= 3 + len(interrupted), (h, runs, interrupted)
        assert max(runs.values()) <= 2
    print(f"poison pill among healthy runs: {len(deaths)} worker deaths, healthy executions "
          f"{[sum(Counter(s for s, _, _ in execs(box, h)).values()) for h in healthy]}")


def killed_mid_step(box: Sandbox) -> str:
    """A run of ``slow`` whose executor, executing it alone, was SIGKILLed in its step ``nap``, then
    marked interrupted by a sweep (a death charged to it); returns its id."""
    z = box.spawn("start", "slow", "--app", APP, "--input", json.dumps({"sleep": 60}))
    rid = procs.wait_step(box.db, "nap")["run_id"]
    # the step itself under way (its boundary is committed a moment before the step logs its start)
    procs.wait_until(lambda: ("nap" in {s for s, _, _ in execs(box, rid)}), 30, "step nap to begin")
    procs.kill(z)
    finish(z)
    with api(box) as rt:
        assert rt.sweep() == [rid]
    return rid


def test_a_worker_claims_a_run_only_while_it_is_in_the_status_it_listed_it_in(box):
    # A worker thread's list of candidates can be stale when it reaches a run. The flaky poison-pill
    # test: a thread failed the poison run as a poison pill while another, which had listed it
    # interrupted, waited for its turn, then resumed it as a failed run (resumable, never checked
    # for the poison pill) and died in it a fifth time. Both states are built here and the stale
    # lists given to one thread in turn: the whole interleaving, without timing.
    from relaypoint.status import RunStatus
    from relaypoint.worker import Worker

    poison, healthy = killed_mid_step(box), killed_mid_step(box)
    write(box, "UPDATE runs SET suspect_deaths = 3 WHERE run_id = ?", poison)  # two more deaths alone
    stale = [(poison, RunStatus.INTERRUPTED), (poison, RunStatus.INTERRUPTED),  # two threads' lists
             (healthy, RunStatus.QUEUED)]  # listed queued, interrupted since: claimed alone only
    lines: list[str] = []
    with api(box) as rt:
        worker = Worker(str(box.db), rt.workflows.values(), max_recoveries=2, log=lines.append)
    worker.candidates = lambda rt: stale
    before = {r: procs.events(box.db, r) for r in (poison, healthy)}
    with worker._runtime() as rt:
        assert worker.run_once(rt) == 1, lines  # the poison pill failed, nothing executed
        assert worker.run_once(rt) == 0, lines  # the same stale list again: every listing refused
    refused = f"run {poison}: not recovered here (another worker took it, or it changed meanwhile)"
    assert [line for line in lines if "recovering it alone" not in line] == [
        f"run {poison}: failed", refused, refused], lines
    row = procs.run_row(box.db, poison)
    assert row["status"] == "failed" and "died 3 times while executing it alone" in row["error"]
    assert [e["kind"] for e in procs.events(box.db, poison)[len(before[poison]):]] == ["run_failed"]
    assert procs.step_row(box.db, poison, "nap")["status"] == "failed"
    assert procs.events(box.db, healthy) == before[healthy] and procs.run_status(box.db, healthy) == "interrupted"
    assert [s for s, _, _ in execs(box)] == ["first", "nap", "first", "nap"]  # only the killed executors'


def test_pause_deadline_is_absolute_and_enforced_by_a_later_worker(box):
    api(box).close()  # create the store
    w1 = box.spawn("worker", "--app", APP, "--poll", "0.1")  # running while the pauses begin
    assert "worker on" in w1.stderr.readline()
    starts = [box.spawn("start", wf, "--app", APP) for wf in ("timed", "timedask")]
    approval, ask = [finish(p) for p in starts]
    assert approval.code == 0 and ask.code == 0, (approval.text, ask.text)
    runs = {approval.out.strip(): "approval", ask.out.strip(): "input"}
    # the worker is restarted: the first one stops (before the deadlines, on any sane machine)
    procs.kill(w1, signal.SIGTERM)
    d1 = finish(w1, 30)
    assert d1.code == 0, d1.err
    gates = {}
    for rid, kind in runs.items():
        (cp,) = [c for c in procs.checkpoints(box.db, rid) if c["kind"] == kind]
        span = (procs.parse_utc(cp["deadline_at"]) - procs.parse_utc(cp["created_at"])).total_seconds()
        assert 1.0 <= span < 1.5, span  # stored as an absolute UTC time when the pause began
        gates[rid] = cp
    deadline = max(cp["deadline_at"] for cp in gates.values())
    wait_until(lambda: procs.utc_text() > deadline, 10, "the deadlines to pass")
    w2 = box.spawn("worker", "--app", APP, "--poll", "0.1")  # started after the deadlines
    try:
        for rid in runs:
            procs.wait_status(box.db, rid, "rejected", 30)
    finally:
        procs.kill(w2, signal.SIGTERM)
    d2 = finish(w2, 30)
    assert d2.code == 0, d2.err
    assert_clean(d1, d2)
    for rid, kind in runs.items():
        cp = next(c for c in procs.checkpoints(box.db, rid) if c["checkpoint_id"] == gates[rid]["checkpoint_id"])
        assert cp["deadline_at"] == gates[rid]["deadline_at"]  # unchanged across the worker restart
        assert cp["decision"] == "expired" and cp["decided_by"] == "deadline"
        assert cp["decided_at"] >= cp["deadline_at"]  # never before the deadline
        row = procs.run_row(box.db, rid)
        assert f"the {kind} deadline ({cp['deadline_at']}) passed" in row["error"]
        expired = [e for e in procs.events(box.db, rid) if e["kind"] == "deadline_expired"]
        assert len(expired) == 1
        line = f"run {rid}: pause deadline passed; rejected"
        assert (d1.err + d2.err).count(line) == 1
    assert procs.step_row(box.db, approval.out.strip(), "act")["status"] == "cancelled"
    assert procs.step_row(box.db, approval.out.strip(), "proposal")["status"] == "completed"
