"""Independent calls at once (issue 21): a vote's voters run concurrently, sync ones in threads and
async ones on the loop, each recorded at its own boundary as it finishes; a failure, a person's
turn, a timeout and a lost lease wait for, or cancel, the calls in flight; a kill -9 mid-fan-out
re-runs only the calls that had not finished. On both backends."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import stores
from relaypoint import Runtime, Workflow
from relaypoint.errors import LeaseLost, RuntimeClosed
from relaypoint.status import RunStatus, StepStatus

VOTERS = ("a", "b", "c", "d", "e")


def votes(rt: Runtime, run_id: str) -> dict:
    return rt.get(run_id).tasks[0].output["votes"]


def calls(rt: Runtime, run_id: str) -> list:
    return [t for t in rt.get(run_id).tasks if t.parent is not None]


def test_sync_voters_run_at_once_in_threads(db):
    # each voter waits for all five: run one after another, the barrier would break
    barrier = threading.Barrier(len(VOTERS), timeout=20)
    threads = set()

    def voter(ctx):
        threads.add(threading.get_ident())
        barrier.wait()
        return ctx.agent

    wf = Workflow("v")
    wf.vote("pick", voters={v: voter for v in VOTERS})
    with Runtime(db, [wf]) as rt:
        rid = rt.start("v")
        assert rt.get(rid).status == RunStatus.COMPLETED
        assert votes(rt, rid) == {v: v for v in VOTERS}
        assert len(threads) == len(VOTERS)
        assert [c.agent for c in calls(rt, rid)] == list(VOTERS)  # rows in the order the calls started


def test_async_voters_run_at_once_on_one_loop_from_the_sync_api(db):
    loops = set()
    box = {}

    async def voter(ctx):
        loops.add(id(asyncio.get_running_loop()))
        await box["barrier"].wait()  # all five at once, or this never returns
        return ctx.agent

    wf = Workflow("v")
    wf.vote("pick", voters={v: voter for v in VOTERS}, timeout=20)
    with Runtime(db, [wf]) as rt:
        box["barrier"] = asyncio.Barrier(len(VOTERS))
        rid = rt.start("v")
        assert votes(rt, rid) == {v: v for v in VOTERS}
        box["barrier"] = asyncio.Barrier(len(VOTERS))
        second = rt.start("v")
        assert rt.get(second).status == RunStatus.COMPLETED
        assert len(loops) == 1, "every run of a runtime awaits on the same loop (an async client stays usable)"


def test_each_call_lands_at_its_own_boundary_in_the_order_the_calls_finish(db):
    order = ["c", "a", "e", "b", "d"]
    turn = {v: asyncio.Event() for v in VOTERS}
    turn[order[0]].set()

    async def voter(ctx):
        await turn[ctx.agent].wait()
        nxt = order.index(ctx.agent) + 1
        if nxt < len(order):
            turn[order[nxt]].set()
        return ctx.agent

    wf = Workflow("v")
    wf.vote("pick", voters={v: voter for v in VOTERS})
    with Runtime(db, [wf]) as rt:
        rid = rt.start("v")
        # in the order recorded (finished_at is in milliseconds: calls landing within one tie)
        landed = [e.detail["agent"] for e in rt.events(rid) if e.kind == "step_completed" and "agent" in e.detail]
        assert landed == order
        # each call's boundary folds one more voter, whatever the order: the state is a set
        states = stores.query(db, "SELECT state FROM checkpoints WHERE run_id = ? AND kind = 'boundary' "
                                  "ORDER BY checkpoint_id", (rid,))
        voted = [json.loads(s["state"]).get("in", {}).get("voted") for s in states]
        grown = [set(v) for v in voted if v]
        assert grown == [set(order[:i]) for i in range(1, len(order) + 1)]


def test_a_voter_failing_for_good_fails_the_vote_once_the_others_land_and_a_resume_runs_only_it(db):
    ran: list[str] = []
    gate = threading.Event()

    def voter(ctx):
        ran.append(ctx.agent)
        if ctx.agent == "a" and not gate.is_set():
            raise RuntimeError("model unavailable")
        time.sleep(0.2)  # the others are still in flight when a fails
        return ctx.agent

    wf = Workflow("v")
    wf.vote("pick", voters={v: voter for v in VOTERS}, retries=0)
    with Runtime(db, [wf]) as rt:
        rid = rt.start("v")
        run = rt.get(rid)
        assert run.status == RunStatus.FAILED and "model unavailable" in run.error
        status = {c.agent: c.status for c in calls(rt, rid)}
        assert status == {"a": StepStatus.FAILED, **{v: StepStatus.COMPLETED for v in VOTERS[1:]}}
        ran.clear()
        gate.set()
        assert rt.resume(rid) == RunStatus.COMPLETED
        assert ran == ["a"], "the calls that had landed are not repeated"
        assert votes(rt, rid) == {v: v for v in VOTERS}


def test_a_timeout_cancels_an_async_call_and_fails_a_sync_one_discarding_its_late_result(db):
    cancelled = threading.Event()
    late = threading.Event()

    async def slow_async(ctx):
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    def slow_sync(ctx):
        time.sleep(1.0)
        late.set()
        return "late"

    wf = Workflow("t")
    wf.vote("pick", voters={"x": slow_async, "y": slow_sync}, retries=0, timeout=0.3)
    with Runtime(db, [wf]) as rt:
        rid = rt.start("t")
        run = rt.get(rid)
        assert run.status == RunStatus.FAILED
        assert cancelled.is_set()
        failed = {c.agent: c.error for c in calls(rt, rid)}
        assert all("ran longer than its timeout of 0.3 s" in e for e in failed.values()), failed
        late.wait(5)
        time.sleep(0.1)
        assert all(c.status == StepStatus.FAILED for c in calls(rt, rid)), "a late sync result is discarded"


def test_cancelling_the_run_elsewhere_cancels_its_calls_in_flight(db):
    cancelled = threading.Event()
    started = threading.Event()

    async def voter(ctx):
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    wf = Workflow("v")
    wf.vote("pick", voters={v: voter for v in VOTERS})
    with Runtime(db, [wf], lease_seconds=0.6) as rt:
        def cancel_when_started():
            started.wait(20)
            with Runtime(db) as other:
                other.cancel(rt.list()[0].run_id)
        t = threading.Thread(target=cancel_when_started)
        t.start()
        with pytest.raises(LeaseLost):
            rt.start("v")
        t.join()
        assert cancelled.is_set()
        assert rt.list()[0].status == RunStatus.CANCELLED


def test_a_persons_turn_in_a_concurrent_vote_pauses_once_the_others_land(db):
    from relaypoint import human

    async def voter(ctx):
        await asyncio.sleep(0.1)
        return "yes"

    wf = Workflow("v")
    wf.vote("pick", voters={"a": voter, "me": human("Your vote?"), "b": voter})
    with Runtime(db, [wf]) as rt:
        rid = rt.start("v")
        assert rt.get(rid).status == RunStatus.AWAITING_INPUT
        assert {c.agent: c.status for c in calls(rt, rid)} == {
            "a": StepStatus.COMPLETED, "me": StepStatus.AWAITING_INPUT, "b": StepStatus.COMPLETED}
        rt.respond(rid, "no")
        assert rt.resume(rid) == RunStatus.COMPLETED
        assert votes(rt, rid) == {"a": "yes", "me": "no", "b": "yes"}


def test_astart_keeps_the_callers_loop_responsive_and_runs_async_steps_on_it(db):
    wf = Workflow("w")
    seen = {}

    @wf.step
    async def waits(ctx):
        seen["loop"] = id(asyncio.get_running_loop())
        await asyncio.sleep(0.5)
        return 1

    @wf.step
    def sleeps(ctx):
        time.sleep(0.5)  # a sync step: in a worker thread, never on the caller's loop
        return asyncio.run(asyncio.sleep(0, result=2))  # and free to run a loop of its own

    async def main(rt):
        ticks = []

        async def ticker():
            while True:
                ticks.append(time.monotonic())
                await asyncio.sleep(0.01)

        task = asyncio.ensure_future(ticker())
        rid = await rt.astart("w")
        task.cancel()
        gaps = [b - a for a, b in zip(ticks, ticks[1:])]
        return rid, id(asyncio.get_running_loop()), len(ticks), max(gaps)

    with Runtime(db, [wf]) as rt:
        rid, loop, ticks, longest = asyncio.run(main(rt))
        assert rt.get(rid).status == RunStatus.COMPLETED and seen["loop"] == loop
        assert [t.output for t in rt.get(rid).tasks] == [1, 2]
        assert ticks > 40 and longest < 0.25, (ticks, longest)


def test_the_sync_api_called_inside_a_running_loop_runs_a_step_that_runs_a_loop(db):
    wf = Workflow("w")

    @wf.step
    def nested(ctx):
        return asyncio.run(asyncio.sleep(0, result="ok"))

    async def main(rt):
        return rt.start("w")

    with Runtime(db, [wf]) as rt:
        rid = asyncio.run(main(rt))
        assert rt.get(rid).tasks[0].output == "ok"


def test_one_runtime_runs_fan_outs_from_threads_and_a_loop_at_once(db):
    async def voter(ctx):
        await asyncio.sleep(0.05)
        return ctx.agent

    def sync_voter(ctx):
        time.sleep(0.05)
        return ctx.agent

    wf = Workflow("v")
    wf.vote("pick", voters={"a": voter, "b": sync_voter, "c": voter})
    with Runtime(db, [wf]) as rt:
        ids: list[str] = []
        errors: list[BaseException] = []

        def from_thread():
            try:
                for _ in range(3):
                    ids.append(rt.start("v"))
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        async def from_loop():
            return await asyncio.gather(*(rt.astart("v") for _ in range(3)))

        threads = [threading.Thread(target=from_thread) for _ in range(4)]
        for t in threads:
            t.start()
        ids.extend(asyncio.run(from_loop()))
        for t in threads:
            t.join()
        assert not errors
        assert len(ids) == 15
        for rid in ids:
            assert rt.get(rid).status == RunStatus.COMPLETED and votes(rt, rid) == {"a": "a", "b": "b", "c": "c"}


APP = """
import asyncio, os, sys, time
from relaypoint import Runtime, Workflow

LOG = os.environ["FANOUT_LOG"]
DELAYS = {"a": 0.3, "b": 0.6, "c": 0.9, "d": 1.2, "e": 1.5}

def log(line):
    with open(LOG, "a") as f:
        f.write(line + "\\n")

async def voter(ctx):
    log("start " + ctx.agent)
    await asyncio.sleep(DELAYS[ctx.agent] * float(os.environ.get("FANOUT_SCALE", "1")))
    log("end " + ctx.agent)
    return ctx.agent

wf = Workflow("fan")
wf.vote("pick", voters={v: voter for v in DELAYS})

if __name__ == "__main__":
    with Runtime(sys.argv[1], [wf]) as rt:
        if sys.argv[2] == "start":
            rt.start("fan")
        else:
            async def main():
                return await rt.aresume(rt.list()[0].run_id)
            print(asyncio.run(main()))
"""


def test_a_kill_during_a_fan_out_reruns_only_the_calls_that_had_not_finished(db, tmp_path):
    app = tmp_path / "fanapp.py"
    app.write_text(textwrap.dedent(APP))
    log = tmp_path / "calls.log"
    env = {**os.environ, "FANOUT_LOG": str(log)}
    proc = subprocess.Popen([sys.executable, str(app), str(db), "start"], env=env, cwd=tmp_path)
    limit = time.monotonic() + 60
    while time.monotonic() < limit:  # kill once three calls have finished and two are in flight
        lines = log.read_text().splitlines() if log.exists() else []
        if sum(line.startswith("end") for line in lines) >= 3:
            break
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = log.read_text().splitlines()
    # what was recorded (a call that logged its end may have been killed before its boundary)
    finished = {r["agent"] for r in stores.query(db, "SELECT agent FROM steps WHERE parent_seq IS NOT NULL "
                                                     "AND status = 'completed'")}
    assert len(finished) >= 2 and len(finished) < 5, (before, finished)
    done = subprocess.run([sys.executable, str(app), str(db), "resume"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "completed"
    rerun = [line.split()[1] for line in log.read_text().splitlines()[len(before):] if line.startswith("start")]
    assert sorted(rerun) == sorted(set(VOTERS) - finished), (before, rerun)
    with Runtime(db, []) as rt:
        run = rt.list()[0]
        assert votes(rt, run.run_id) == {v: v for v in VOTERS}
        resumed = {c.agent: c.attempts for c in calls(rt, run.run_id)}
        assert all(resumed[v] == 1 for v in finished) and all(resumed[v] == 2 for v in rerun)


def test_show_says_how_many_calls_of_a_pattern_are_running(db):
    from click.testing import CliRunner

    from relaypoint import cli

    release = threading.Event()

    def voter(ctx):
        if ctx.agent != "a":
            release.wait(30)
        return ctx.agent

    wf = Workflow("v")
    wf.vote("pick", voters={"a": voter, "b": voter, "c": voter})
    with Runtime(db, [wf]) as rt:
        runner = threading.Thread(target=rt.start, args=("v",))
        runner.start()
        try:
            limit = time.monotonic() + 30
            while time.monotonic() < limit and not (
                    rt.list() and sum(c.status == StepStatus.RUNNING for c in calls(rt, rt.list()[0].run_id)) == 2
                    and any(c.status == StepStatus.COMPLETED for c in calls(rt, rt.list()[0].run_id))):
                time.sleep(0.02)
            shown = CliRunner().invoke(cli.cli, ["--db", str(db), "show", rt.list()[0].run_id])
            assert shown.exit_code == 0, shown.output
            assert "pick  pending  attempts 0  · 2 of 3 running" in shown.output
        finally:
            release.set()
            runner.join()
        shown = CliRunner().invoke(cli.cli, ["--db", str(db), "show", rt.list()[0].run_id])
        assert "pick  completed  attempts 1  · 3/3 votes" in shown.output


def test_async_functions_run_end_to_end_in_every_pattern(db):
    """Every place a user's function goes, async, in one real run: a step, a loop's body and until,
    a debate's agents and judge, a vote's voters and tally, a supervisor's route and agents, a
    planner's plan, agents and replan, a parallel's branches and a map's items and function."""
    failed_once = []

    async def step(ctx):
        await asyncio.sleep(0)
        return {"topic": "cache"}

    async def body(ctx):
        await asyncio.sleep(0)
        return ctx.iteration

    async def until(ctx):
        await asyncio.sleep(0)
        return ctx.output >= 2

    async def speaker(ctx):
        await asyncio.sleep(0)
        return f"{ctx.agent}{ctx.iteration}"

    async def judge(ctx):
        return len(ctx.history)

    async def voter(ctx):
        return "yes"

    async def tally(votes):
        await asyncio.sleep(0)
        return sorted(votes)

    async def route(ctx):
        return "worker" if ctx.state["turn"] <= 1 else None

    async def plan(ctx):
        return [{"id": "t1", "agent": "worker"}, {"id": "t2", "agent": "flaky", "after": ["t1"]}]

    async def flaky(ctx):
        if not failed_once:
            failed_once.append(1)
            raise RuntimeError("first try fails")
        return "fixed"

    async def replan(ctx):
        return [{"id": "t3", "agent": "flaky"}]

    async def items(ctx):
        return [1, 2, 3]

    async def double(ctx):
        return ctx.input * 2

    wf = Workflow("all")
    wf.step(step)
    wf.loop(body, name="refine", max_iterations=5, until=until)
    wf.debate("argue", agents={"pro": speaker, "con": speaker}, rounds=2, judge=judge, concurrent=True)
    wf.vote("decide", voters={"a": voter, "b": voter}, tally=tally)
    wf.supervisor("triage", agents={"worker": voter}, route=route)
    wf.planner("build", plan=plan, agents={"worker": voter, "flaky": flaky}, replan=replan, retries=0)
    wf.parallel("gather", branches={"x": voter, "y": speaker})
    wf.map("doubled", double, items=items)
    with Runtime(db, [wf]) as rt:
        rid = rt.start("all")
        run = rt.get(rid)
        assert run.status == RunStatus.COMPLETED, run.error
        out = {t.name: t.output for t in run.tasks if t.parent is None}
        assert out["step"] == {"topic": "cache"}
        assert out["refine"] == 2  # until said stop after pass 2
        assert out["argue"] == 4  # the judge heard both rounds of both speakers
        assert out["decide"]["result"] == ["a", "b"]
        assert out["triage"] == "yes"
        assert out["build"] == {"t1": "yes", "t3": "fixed"}
        assert out["gather"] == {"x": "yes", "y": "y1"}
        assert out["doubled"] == [2, 4, 6]


def test_an_async_router_naming_an_unknown_agent_fails_its_turn_in_one_line(db):
    async def route(ctx):
        return "nobody"

    async def worker(ctx):
        return 1

    wf = Workflow("s")
    wf.supervisor("triage", agents={"worker": worker}, route=route, retries=0)
    with Runtime(db, [wf]) as rt:
        rid = rt.start("s")
        run = rt.get(rid)
        assert run.status == RunStatus.FAILED and "returned 'nobody'" in run.error and "\n" not in run.error


def test_a_sync_until_after_an_async_body_in_a_real_run(db):
    threads = set()

    async def body(ctx):
        return ctx.iteration

    def until(ctx):
        threads.add(threading.current_thread().name)
        return ctx.output >= 3

    wf = Workflow("l")
    wf.loop(body, name="refine", max_iterations=9, until=until)
    with Runtime(db, [wf]) as rt:
        rid = rt.start("l")
        assert rt.get(rid).tasks[0].output == 3
        assert "relaypoint-loop" not in threads, "a sync until never runs on the event loop"


def test_closing_the_runtime_while_astart_runs_releases_the_run_for_a_resume(db):
    fast = {"go": False}

    async def step(ctx):
        if not fast["go"]:
            await asyncio.sleep(30)
        return "done"

    wf = Workflow("w")
    wf.step(name="s")(step)

    async def main() -> str:
        created: list[str] = []
        rt = Runtime(db, [wf])
        task = asyncio.ensure_future(rt.astart("w", on_created=created.append))
        while not created:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # in its step
        rt.close()  # as a web server's shutdown does, before it cancels its tasks
        with pytest.raises(RuntimeClosed, match=f"run {created[0]}: the runtime was closed while it executed"):
            await task
        return created[0]

    rid = asyncio.run(main())
    with Runtime(db, [wf]) as rt:
        run = rt.get(rid)
        assert run.status == RunStatus.INTERRUPTED and run.lease is None
        [detected] = [e for e in rt.events(rid) if e.kind == "interruption_detected"]
        assert not detected.detail.get("suspect"), "a release, not a death: never charged"
        fast["go"] = True
        assert rt.resume(rid) == RunStatus.COMPLETED


def test_an_async_call_that_outlives_its_timeout_fails_however_it_returns(db):
    async def stubborn(ctx):
        try:
            await asyncio.sleep(2)
        except asyncio.CancelledError:
            pass  # swallowed: it returns anyway
        return "late"

    async def blocker(ctx):
        time.sleep(0.6)  # blocks the loop past its deadline
        return "late"

    wf = Workflow("w")
    wf.step(name="stubborn", timeout=0.3, retries=0)(stubborn)
    other = Workflow("o")
    other.step(name="blocker", timeout=0.3, retries=0)(blocker)
    with Runtime(db, [wf, other]) as rt:
        for name in ("w", "o"):
            run = rt.get(rt.start(name))
            assert run.status == RunStatus.FAILED and not run.tasks[0].has_output
            assert "ran longer than its timeout of 0.3 s (cancelled)" in run.error
