"""Recorded calls inside a step (issue 22): ``ctx.call`` / ``await ctx.acall`` run a function once
per execution and record its result at its own boundary; an execution run again (after an answer
to ``request_input``, a retry, a kill -9) gets the recorded results back, matched by order and
name. On both backends, with real processes killed between and inside calls."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import stores
from relaypoint import Runtime, Workflow
from relaypoint.errors import LeaseLost
from relaypoint.status import RunStatus, StepStatus


def recorded(rt: Runtime, run_id: str) -> list[tuple[int, int, str, str, object]]:
    return [(c.seq, c.position, c.name, str(c.status), c.value) for c in rt.store.calls(run_id)]


def test_an_answer_to_request_input_does_not_repeat_the_calls_made_before_it(db):
    sent: list[str] = []

    def model(prompt):
        sent.append(prompt)
        return {"text": f"draft of {prompt}", "tokens": [1, 2]}

    wf = Workflow("w")

    @wf.step
    def draft(ctx):
        first = ctx.call("model", model, "outline")
        second = ctx.call("model", model, "body")
        title = ctx.request_input("Title?")
        return {"title": title, "parts": [first["text"], second["text"]], "tokens": first["tokens"]}

    with Runtime(db, [wf]) as rt:
        rid = rt.start("w")
        assert rt.get(rid).status == RunStatus.AWAITING_INPUT and sent == ["outline", "body"]
        rt.respond(rid, "Hello", by="ana")
        assert rt.resume(rid) == RunStatus.COMPLETED
        assert sent == ["outline", "body"], "the model was not asked again"
        assert rt.get(rid).tasks[0].output == {"title": "Hello", "parts": ["draft of outline", "draft of body"],
                                               "tokens": [1, 2]}
        assert recorded(rt, rid) == [(0, 0, "model", "completed", {"text": "draft of outline", "tokens": [1, 2]}),
                                     (0, 1, "model", "completed", {"text": "draft of body", "tokens": [1, 2]})]
        assert {c.attempt for c in rt.store.calls(rid)} == {1}


def test_a_retry_gets_the_recorded_results_and_a_failed_call_runs_again_at_its_position(db):
    ran: list[str] = []

    def search(q):
        ran.append(q)
        return [q, q]

    def flaky(q):
        ran.append("flaky")
        if ran.count("flaky") == 1:
            raise ConnectionError("model unavailable")
        return q.upper()

    wf = Workflow("w")

    @wf.step(retries=2)
    def step(ctx):
        hits = ctx.call("search", search, "x")
        return {"hits": hits, "answer": ctx.call("answer", flaky, "y")}

    with Runtime(db, [wf]) as rt:
        rid = rt.start("w")
        assert rt.get(rid).status == RunStatus.COMPLETED
        assert ran == ["x", "flaky", "flaky"], "search ran once; the failed call ran again"
        assert rt.get(rid).tasks[0].output == {"hits": ["x", "x"], "answer": "Y"}
        calls = rt.store.calls(rid)
        assert [(c.position, c.name, c.status, c.attempt, c.error) for c in calls] == [
            (0, "search", StepStatus.COMPLETED, 1, None), (1, "answer", StepStatus.COMPLETED, 2, None)]


def test_a_failed_call_is_recorded_with_its_line_until_it_runs_again(db):
    wf = Workflow("w")

    def down():
        raise ConnectionError("model unavailable\x1b[31m")

    @wf.step(retries=0)
    def step(ctx):
        return ctx.call("model", down)

    with Runtime(db, [wf]) as rt:
        rid = rt.start("w")
        assert rt.get(rid).status == RunStatus.FAILED
        [call] = rt.store.calls(rid)
        assert (call.status, call.value) == (StepStatus.FAILED, None)
        assert call.error == "ConnectionError: model unavailable\x1b[31m"  # stored as raised (shown literally)


def test_another_call_at_a_recorded_position_fails_the_step_once_without_retries(db):
    code = {"name": "search"}
    ran: list[str] = []
    wf = Workflow("w")

    @wf.step(retries=3)
    def step(ctx):
        ctx.call(code["name"], lambda: ran.append(code["name"]) or 1)
        return ctx.request_input("more?")

    with Runtime(db, [wf]) as rt:
        rid = rt.start("w")
        rt.respond(rid, "yes", by="ana")
        code["name"] = "fetch"  # the step's code changed while the run waited
        assert rt.resume(rid) == RunStatus.FAILED
        run = rt.get(rid)
        assert run.tasks[0].attempts == 2, "one attempt, no retries"
        assert run.error == ("step 'step' failed: step 'step' made call 1 'fetch' where its recorded execution made 'search' (its code "
                             "changed since); restore it, or fork the run from an earlier step")
        assert ran == ["search"]


def test_calls_gathered_at_once_are_numbered_in_the_order_they_were_made(db):
    async def slow(x, delay):
        await asyncio.sleep(delay)
        return x

    wf = Workflow("w")

    @wf.step
    async def step(ctx):
        return await asyncio.gather(ctx.acall("a", slow, "a", 0.3), ctx.acall("b", slow, "b", 0.0),
                                    ctx.acall("c", lambda: "c"))  # a sync one runs in a thread

    with Runtime(db, [wf]) as rt:
        rid = rt.start("w")
        assert rt.get(rid).tasks[0].output == ["a", "b", "c"]
        calls = rt.store.calls(rid)
        assert [(c.position, c.name) for c in calls] == [(0, "a"), (1, "b"), (2, "c")]
        assert calls[1].finished_at <= calls[0].finished_at, "b landed first, and is still call 2"


def test_what_a_call_cannot_take_is_refused_in_one_line(db):
    async def coro():
        return 1

    wf = Workflow("w")

    @wf.step(retries=2)
    def async_given(ctx):
        return ctx.call("coro", coro)

    other = Workflow("o")

    @other.step(retries=2)
    def unstorable(ctx):
        return ctx.call("set", lambda: {1, 2})

    with Runtime(db, [wf, other]) as rt:
        rid = rt.start("w")
        assert rt.get(rid).error == ("step 'async_given' failed: TypeError: ctx.call: 'coro' is an async function; use "
                                     "`await ctx.acall(...)`")
        bad = rt.start("o")
        run = rt.get(bad)
        assert run.status == RunStatus.FAILED and run.tasks[0].attempts == 1  # no retry of a value that cannot be stored
        assert "the result of call 'set'" in run.error
        assert rt.store.calls(bad) == []


def test_a_call_returning_after_its_run_was_cancelled_elsewhere_records_nothing(db):
    wf = Workflow("w")
    box: dict[str, str] = {}

    def model():
        with Runtime(db, [wf]) as other:  # another terminal cancels the run while the model answers
            other.cancel(box["rid"], by="ana")
        return {"text": "late"}

    @wf.step
    def step(ctx):
        box["rid"] = ctx.run_id
        return ctx.call("model", model)

    with Runtime(db, [wf]) as rt:
        with pytest.raises(LeaseLost):
            rt.start("w")
        rid = box["rid"]
        assert rt.get(rid).status == RunStatus.CANCELLED
        assert rt.store.calls(rid) == [], "the fence refused the call's record"


APP = """
import os, sys, time
from relaypoint import Runtime, Workflow

LOG = os.environ["CALLS_LOG"]

def log(line):
    with open(LOG, "a") as f:
        f.write(line + "\\n")

def model(n):
    log(f"start {n}")
    time.sleep(float(os.environ.get("CALL_SLEEP", "0")) if n == 2 else 0)
    log(f"end {n}")
    return {"n": n}

wf = Workflow("agent")

@wf.step
def think(ctx):
    got = []
    for n in (1, 2, 3):
        got.append(ctx.call("model", model, n)["n"])
        log(f"recorded {n}")
        if os.environ.get("PAUSE_AFTER") == str(n):
            time.sleep(30)
    return got

if __name__ == "__main__":
    with Runtime(sys.argv[1], [wf]) as rt:
        if sys.argv[2] == "start":
            rt.start("agent")
        else:
            print(rt.resume(rt.list()[0].run_id))
"""


def _killed_at(db: str, tmp_path: Path, line: str, **env: str) -> tuple[Path, list[str], dict[str, str]]:
    app = tmp_path / "agentapp.py"
    app.write_text(textwrap.dedent(APP))
    log = tmp_path / "calls.log"
    env = {**os.environ, "CALLS_LOG": str(log), **env}
    proc = subprocess.Popen([sys.executable, str(app), str(db), "start"], env=env, cwd=tmp_path)
    limit = time.monotonic() + 60
    while line not in (log.read_text().splitlines() if log.exists() else []):
        assert time.monotonic() < limit and proc.poll() is None, "the app never got there"
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return app, log.read_text().splitlines(), env


def _resumed(app: Path, db: str, env: dict[str, str], tmp_path: Path) -> list[str]:
    done = subprocess.run([sys.executable, str(app), str(db), "resume"], env={**env, "CALL_SLEEP": "0",
                                                                           "PAUSE_AFTER": ""},
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "completed", done.stderr
    return done.stdout


def test_a_kill_inside_a_call_runs_only_that_call_and_the_rest_again(db, tmp_path):
    app, before, env = _killed_at(db, tmp_path, "start 2", CALL_SLEEP="30")
    assert before == ["start 1", "end 1", "recorded 1", "start 2"]
    _resumed(app, db, env, tmp_path)
    after = (tmp_path / "calls.log").read_text().splitlines()[len(before):]
    assert [x for x in after if x.startswith("start")] == ["start 2", "start 3"], after
    with Runtime(db, []) as rt:
        rid = rt.list()[0].run_id
        assert rt.get(rid).tasks[0].output == [1, 2, 3]
        assert [(c.position, c.attempt) for c in rt.store.calls(rid)] == [(0, 1), (1, 2), (2, 2)]


def test_a_kill_between_calls_runs_none_of_the_recorded_calls_again(db, tmp_path):
    app, before, env = _killed_at(db, tmp_path, "recorded 2", PAUSE_AFTER="2")
    recorded_then = [r["position"] for r in stores.query(db, "SELECT position FROM calls ORDER BY seq, position")]
    assert recorded_then == [0, 1], "each call was recorded as it returned, before the step went on"
    _resumed(app, db, env, tmp_path)
    after = (tmp_path / "calls.log").read_text().splitlines()[len(before):]
    assert [x for x in after if x.startswith("start")] == ["start 3"], after


def test_the_running_execution_is_known_to_the_code_it_calls(db):
    from relaypoint.recorded import current

    def deep():  # what an integration's agent reaches without being passed ctx
        return current().call("tool", lambda: "called")

    async def adeep():
        return await current().acall("model", lambda: "asked")

    wf = Workflow("w")

    @wf.step
    def inline(ctx):
        return deep()

    @wf.step
    async def awaited(ctx):
        return [await adeep(), await asyncio.to_thread(deep)]

    with Runtime(db, [wf]) as rt:
        rid = rt.start("w")
        assert [t.output for t in rt.get(rid).tasks] == ["called", ["asked", "called"]]
        assert [(c.seq, c.name) for c in rt.store.calls(rid)] == [(0, "tool"), (1, "model"), (1, "tool")]
    with pytest.raises(TypeError, match="not inside a relaypoint step"):
        current()


def test_progress_writes_the_latest_line_at_most_every_half_second_and_show_prints_it(db, tmp_path):
    seen: list = []
    written: list[dict] = []
    wf = Workflow("w")

    def line() -> str:
        return stores.query(db, "SELECT progress FROM steps WHERE seq = 0")[0]["progress"]

    @wf.step
    def step(ctx):
        for i in range(1, 51):
            ctx.progress(f"model request {i}\n\x1b[31mred")
        time.sleep(1.2)
        seen.append(line())
        shown = subprocess.run([sys.executable, "-m", "relaypoint", "--db", db, "show", ctx.run_id],
                               capture_output=True, text=True, timeout=60).stdout
        seen.append([x for x in shown.splitlines() if "model request" in x])
        ctx.progress("x" * 500)
        time.sleep(1.2)
        seen.append(line())
        return 1

    with Runtime(db, [wf]) as rt:
        commit = rt.store.commit
        rt.store.commit = lambda change: (written.append(dict(change.progress)) if change.progress else None,
                                          commit(change))[1]
        rid = rt.start("w")
        assert rt.get(rid).status == RunStatus.COMPLETED
    assert seen[0] == "model request 50 \x1b[31mred", "the latest line, on one line"
    assert seen[1] == ["  … model request 50 \\x1b[31mred"], "shown literally under the running step"
    assert seen[2] == "x" * 199 + "…"
    assert 2 <= len(written) <= 3, written  # 51 lines, rate-limited
