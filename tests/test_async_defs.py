"""Async functions at definition level (issue 21, items 1 and 2's quick twins): every place a user
gives a function takes ``def`` or ``async def`` and refuses, in one line naming the place, what can
be neither; a pattern's wrappers of user code (``relaypoint.calls.wrap``) keep the user function's
kind; a loop's ``until`` is asked inside the pass; the Runtime's ``a``-twins run on a real SQLite
store from a running event loop without blocking it.

Running async steps end to end belongs to the executor's tests."""

from __future__ import annotations

import asyncio
import functools
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from relaypoint import Runtime, Workflow, human
from relaypoint.calls import is_async, loop_running, wrap
from relaypoint.drivers import Turn
from relaypoint.errors import DefinitionError
from relaypoint.patterns import Loop, Planner, Supervisor, Vote
from relaypoint.status import RunStatus
from relaypoint.workflow import Context


def ctx_of(**fields: Any) -> Context:
    """A context as the executor builds one, with ``fields`` set."""
    base: dict[str, Any] = dict(run_id="r1", step="node", attempt=1, idempotency_key="k", input={}, results={})
    return Context(**{**base, **fields})


# ---- what a user may give, place by place ----------------------------------------------------------


def plain(ctx: Context) -> Any:
    return 1


async def coroutine(ctx: Context) -> Any:
    return 1


def generator(ctx: Context) -> Any:
    yield 1


async def async_generator(ctx: Context) -> Any:
    yield 1


class AsyncAgent:
    async def __call__(self, ctx: Context) -> Any:
        return 1


# Each place a user gives a function: the words its refusal names, and how to give it ``fn``.
PLACES: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "step": ("step 'node'", lambda fn: Workflow("w").step(name="node")(fn)),
    "loop body": ("loop 'node': the body", lambda fn: Workflow("w").loop(name="node", max_iterations=2)(fn)),
    "loop until": ("loop 'node': until", lambda fn: Workflow("w").loop(name="node", max_iterations=2, until=fn)(plain)),
    "debate agent": ("debate 'node': agent 'pro'", lambda fn: Workflow("w").debate("node", agents={"pro": fn},
                                                                                     rounds=1)),
    "debate judge": ("debate 'node': judge", lambda fn: Workflow("w").debate("node", agents={"pro": plain}, rounds=1,
                                                                               judge=fn)),
    "voter": ("vote 'node': agent 'a'", lambda fn: Workflow("w").vote("node", voters={"a": fn})),
    "tally": ("vote 'node': tally", lambda fn: Workflow("w").vote("node", voters={"a": plain}, tally=fn)),
    "supervisor agent": ("supervisor 'node': agent 'a'", lambda fn: Workflow("w").supervisor(
        "node", agents={"a": fn}, route=plain)),
    "route": ("supervisor 'node': route", lambda fn: Workflow("w").supervisor("node", agents={"a": plain}, route=fn)),
    "planner agent": ("planner 'node': agent 'a'", lambda fn: Workflow("w").planner("node", plan=plain,
                                                                                     agents={"a": fn})),
    "plan": ("planner 'node': plan", lambda fn: Workflow("w").planner("node", plan=fn, agents={"a": plain})),
    "replan": ("planner 'node': replan", lambda fn: Workflow("w").planner("node", plan=plain, agents={"a": plain},
                                                                           replan=fn)),
}
REFUSED = {
    "an async generator": (async_generator, "is an async generator function (it yields)"),
    "a generator": (generator, "is a generator function (it yields)"),
    "a partial of a generator": (functools.partial(generator), "is a generator function (it yields)"),
    "not callable": (42, "must be a function of ctx (def or async def), not int"),
}


@pytest.mark.parametrize("given", list(REFUSED))
@pytest.mark.parametrize("place", list(PLACES))
def test_what_can_be_neither_def_nor_async_def_is_refused_in_one_line_naming_the_place(place, given):
    words, register = PLACES[place]
    fn, why = REFUSED[given]
    with pytest.raises(DefinitionError) as refused:
        register(fn)
    message = str(refused.value)
    assert "\n" not in message
    if place == "tally" and given == "not callable":  # a tally may also be the word "majority"
        assert message == "vote 'node': tally must be 'majority' or a function of the votes, not 42"
    else:
        assert message.startswith(f"{words} {why}"), message


@pytest.mark.parametrize("fn", [plain, coroutine, AsyncAgent(), functools.partial(coroutine)],
                         ids=["def", "async def", "async __call__", "partial of async def"])
@pytest.mark.parametrize("place", list(PLACES))
def test_def_and_async_def_are_taken_in_every_place(place, fn):
    PLACES[place][1](fn)


def test_a_step_without_a_name_of_its_own_is_told_to_give_one():
    with pytest.raises(DefinitionError, match=r"^workflow 'w': a step of partial needs name=\.\.\., it has no "
                                              r"__name__$"):
        Workflow("w").step(functools.partial(coroutine))
    with pytest.raises(DefinitionError, match=r"^workflow 'w': a step must be a function of ctx \(def or async def\), "
                                              r"not str$"):
        Workflow("w").step("draft")
    assert Workflow("w").step(name="draft")(functools.partial(coroutine)).func is coroutine


async def async_key(vote: Any) -> Any:
    return vote


def generator_key(vote: Any) -> Any:
    yield vote


@pytest.mark.parametrize(("key", "kind"), [(async_key, "async def"), (generator_key, "a generator"),
                                           ("score", "str")])
def test_a_votes_key_must_be_a_plain_def(key, kind):
    with pytest.raises(DefinitionError) as refused:
        Workflow("w").vote("decide", voters={"a": coroutine}, key=key)
    assert str(refused.value) == (f"vote 'decide': key must be a function of a vote, not {kind} (a plain def "
                                  "returning its answer: it is called where nothing is awaited)")


# ---- the combinator ------------------------------------------------------------------------------


def test_wrap_of_a_plain_function_is_plain_and_applies_before_and_after():
    wrapped = wrap(lambda n: n * 10, before=lambda ctx: ctx.iteration, after=lambda out, ctx: (out, ctx.step))
    assert not is_async(wrapped)
    assert wrapped(ctx_of(iteration=4)) == (40, "node")
    assert wrap(len)("abc") == 3  # neither: the function itself, called


def test_wrap_of_an_async_function_is_async_def_and_post_processes_the_awaited_result():
    seen: list[Any] = []

    async def agent(ctx: Context) -> str:
        await asyncio.sleep(0)
        seen.append(asyncio.current_task())  # on the loop
        return "b"

    wrapped = wrap(agent, after=lambda out, ctx: out.upper())
    assert is_async(wrapped)
    assert asyncio.run(wrapped(ctx_of())) == "B"
    assert seen and seen[0] is not None


def test_wrap_of_a_plain_function_returning_an_awaitable_returns_one_that_finishes_the_rest():
    async def later(ctx: Context) -> int:
        return 7

    wrapped = wrap(lambda ctx: later(ctx), after=lambda out, ctx: out + 1)
    assert not is_async(wrapped)
    pending = wrapped(ctx_of())
    assert asyncio.iscoroutine(pending)
    assert asyncio.run(pending) == 8


def test_wrap_awaits_an_after_that_is_itself_async():
    async def check(out: int, ctx: Context) -> int:
        return -out

    assert asyncio.run(wrap(coroutine, after=check)(ctx_of())) == -1
    assert asyncio.run(wrap(plain, after=check)(ctx_of())) == -1  # plain fn: an awaitable comes back


# ---- the patterns' wrappers keep the user function's kind ----------------------------------------------


def test_an_async_router_decides_as_a_sync_one_does():
    async def route(ctx: Context) -> str | None:
        return "a"

    supervisor = Supervisor("triage", {"a": plain, "b": plain}, route=route, max_turns=3, max_idle=2, retries=0,
                            on_orphan="retry", timeout=None)
    decide = supervisor.spec("route").fn
    assert is_async(decide)
    ctx = ctx_of(iteration=2, state=MappingProxyType({"idle": {"a": 0, "b": 2}}))
    assert asyncio.run(decide(ctx)) == {"turn": 2, "candidates": ["a"], "choice": "a"}

    async def wrong(ctx: Context) -> str:
        return "c"

    bad = Supervisor("triage", {"a": plain}, route=wrong, max_turns=3, max_idle=2, retries=0, on_orphan="retry",
                     timeout=None)
    with pytest.raises(Exception, match="returned 'c' for turn 2, not one of its agents"):
        asyncio.run(bad.spec("route").fn(ctx))


def test_an_async_tally_is_given_the_votes():
    async def tally(votes: dict[str, Any]) -> Any:
        return sorted(votes.items())

    vote = Vote("decide", {"a": plain, "b": coroutine}, tally=tally, key=None, retries=0, on_orphan="retry",
                timeout=None)
    history = [{"agent": "a", "output": 1, "iteration": 1}, {"agent": "b", "output": 2, "iteration": 1}]
    assert asyncio.run(vote.spec("tally").fn(ctx_of(history=history))) == [("a", 1), ("b", 2)]


def test_an_async_replan_sees_the_failed_subtask():
    async def replan(ctx: Context) -> Any:
        return [{"id": "again", "agent": "a", "note": ctx.failed}]

    planner = Planner("build", plain, {"a": plain}, replan=replan, max_replans=1, retries=0, on_orphan="retry",
                      timeout=None)
    failed = {"task": {"id": "t1", "agent": "a", "input": None, "after": []}, "error": "boom"}
    answer = asyncio.run(planner.spec("replan").fn(ctx_of(state=MappingProxyType({"failed": failed}))))
    assert answer == [{"id": "again", "agent": "a", "note": failed}]


def test_a_person_stays_a_plain_function():
    vote = Vote("decide", {"p": human("yours?")}, tally="majority", key=None, retries=0, on_orphan="retry",
                timeout=None)
    assert not is_async(vote.spec("p").fn)


# ---- a loop's until, asked inside the pass -----------------------------------------------------------------


def loop_of(body: Any, until: Any, max_iterations: int = 3) -> Loop:
    return Loop("refine", body, max_iterations=max_iterations, until=until, retries=0, on_orphan="retry",
                timeout=None)


async def async_body(ctx: Context) -> dict[str, int]:
    return {"score": ctx.iteration}


def sync_body(ctx: Context) -> dict[str, int]:
    return {"score": ctx.iteration}


async def async_until(ctx: Context) -> bool:
    return ctx.output["score"] >= 2


@pytest.mark.parametrize("body", [async_body, sync_body], ids=["async body", "sync body"])
def test_an_async_until_is_awaited_in_the_pass_and_its_verdict_folded(body):
    loop = loop_of(body, async_until)
    run = loop.spec(None).fn
    for iteration, verdict in ((1, False), (2, True)):
        ctx = ctx_of(iteration=iteration)
        result = run(ctx)
        output = asyncio.run(result if asyncio.iscoroutine(result) else asyncio.sleep(0, result))
        assert output == {"score": iteration} and ctx.output == output and ctx._until is verdict
        sub = loop.fold({"pass": iteration - 1, "done": False}, Turn(iteration), output, ctx)
        assert sub == ({"pass": 2, "done": True, "stopped": "until"} if verdict else {"pass": 1, "done": False})


def test_a_sync_until_after_an_async_body_runs_in_a_worker_thread_not_on_the_loop():
    threads: list[int] = []

    def until(ctx: Context) -> bool:
        threads.append(threading.get_ident())
        time.sleep(0.2)  # a slow check: the loop must keep running meanwhile
        return True

    async def main() -> tuple[Any, list[float]]:
        ticks: list[float] = []

        async def ticker() -> None:
            while True:
                ticks.append(time.monotonic())
                await asyncio.sleep(0.01)

        task = asyncio.create_task(ticker())
        ctx = ctx_of(iteration=1)
        output = await loop_of(async_body, until).spec(None).fn(ctx)
        task.cancel()
        return (output, ctx._until, threading.get_ident()), ticks

    (output, verdict, loop_thread), ticks = asyncio.run(main())
    assert output == {"score": 1} and verdict is True
    assert threads and threads[0] != loop_thread
    assert len(ticks) >= 10 and max(b - a for a, b in zip(ticks, ticks[1:])) < 0.1


def test_the_last_pass_never_asks_until():
    asked: list[int] = []
    loop = loop_of(sync_body, lambda ctx: asked.append(ctx.iteration), max_iterations=2)
    ctx = ctx_of(iteration=2)
    assert loop.spec(None).fn(ctx) == {"score": 2}
    assert asked == [] and ctx._until is None
    assert loop.fold({"pass": 1, "done": False}, Turn(2), {"score": 2}, ctx) == {"pass": 2, "done": True}


@pytest.mark.parametrize("until", [async_until, lambda ctx: ctx.output["score"] >= 2], ids=["async", "sync"])
def test_a_recorded_pass_is_judged_in_fold_where_no_loop_runs(until):
    loop = loop_of(sync_body, until)
    ctx = ctx_of(iteration=2)  # no verdict: the pass was recorded before this claim
    assert loop.fold({"pass": 1, "done": False}, Turn(2), {"score": 2}, ctx) == {"pass": 2, "done": True,
                                                                                  "stopped": "until"}
    assert loop.fold({"pass": 0, "done": False}, Turn(1), {"score": 1}, ctx_of(iteration=1)) == {"pass": 1,
                                                                                                 "done": False}


def test_a_recorded_pass_with_an_async_until_is_refused_where_a_loop_runs():
    loop = loop_of(sync_body, async_until)

    async def fold() -> Any:
        assert loop_running()
        return loop.fold({"pass": 1, "done": False}, Turn(2), {"score": 2}, ctx_of(iteration=2))

    with pytest.raises(RuntimeError, match="an async until of a recorded pass is asked from a thread whose event "
                                           "loop runs"):
        asyncio.run(fold())


# ---- the Runtime's async twins ---------------------------------------------------------------------------------


def paused_workflow() -> Workflow:
    wf = Workflow("gate")

    @wf.step(approval=True)
    def draft(ctx: Context) -> dict[str, str]:
        return {"text": "hello"}

    @wf.step
    def publish(ctx: Context) -> dict[str, str]:
        return {"title": ctx.request_input("title?")}

    return wf


class Ticker:
    """A task ticking every 10 ms on the running loop: the loop was blocked when a gap is long."""

    def __init__(self) -> None:
        self.ticks: list[float] = []
        self.task = asyncio.create_task(self._tick())

    async def _tick(self) -> None:
        while True:
            self.ticks.append(time.monotonic())
            await asyncio.sleep(0.01)

    def longest_gap(self) -> float:
        return max(b - a for a, b in zip(self.ticks, self.ticks[1:]))


def slowed(rt: Runtime, name: str, seconds: float, threads: list[int]) -> None:
    """Make ``rt.<name>`` take ``seconds`` longer, noting the thread it runs on."""
    real = getattr(rt, name)

    def slow(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.get_ident())
        time.sleep(seconds)
        return real(*args, **kwargs)
    setattr(rt, name, slow)


def test_async_twins_work_from_a_running_loop_without_blocking_it(tmp_path: Path):
    with Runtime(str(tmp_path / "store.db"), [paused_workflow()]) as rt:
        first = rt.start("gate", input={"n": 1})
        second = rt.start("gate", input={"n": 2})
        threads: list[int] = []
        for name in ("get", "list", "approve", "reject", "respond", "fork", "cancel", "enqueue"):
            slowed(rt, name, 0.15, threads)

        async def main() -> dict[str, Any]:
            ticker, seen = Ticker(), {}
            seen["get"] = (await rt.aget(first)).status
            seen["list"] = sorted(r.run_id for r in await rt.alist(workflow="gate"))
            await rt.aapprove(first, by="ann", comment="fine")
            seen["resumed"] = await asyncio.to_thread(rt.resume, first)
            await rt.arespond(first, "Title", by="ann")
            seen["done"] = await asyncio.to_thread(rt.resume, first)
            await rt.areject(second, "no", by="bob")
            fork = await rt.afork(first, "publish")
            seen["cancel"] = await rt.acancel(fork, by="bob")
            seen["fork"] = (await rt.aget(fork, with_outputs=False)).status
            seen["queued"] = (await rt.aget(await rt.aenqueue("gate", {"n": 3}), with_outputs=False)).status
            ticker.task.cancel()
            seen["gap"], seen["ticks"], seen["loop"] = ticker.longest_gap(), len(ticker.ticks), threading.get_ident()
            seen["threads"] = list(threads)
            return seen

        seen = asyncio.run(main())
        assert seen["get"] == RunStatus.AWAITING_APPROVAL
        assert seen["list"] == sorted([first, second])
        assert seen["resumed"] == RunStatus.AWAITING_INPUT and seen["done"] == RunStatus.COMPLETED
        assert rt.get(first).tasks[-1].output == {"title": "Title"}
        assert rt.get(second).status == RunStatus.REJECTED
        assert seen["cancel"] == RunStatus.QUEUED and seen["fork"] == RunStatus.CANCELLED
        assert seen["queued"] == RunStatus.QUEUED
        assert len(seen["threads"]) == 10 and seen["loop"] not in seen["threads"]  # every twin ran its operation off the loop
        assert seen["ticks"] >= 10 * 0.15 / 0.01 / 2  # the loop kept ticking through 1.5 s of operations
        assert seen["gap"] < 0.1


def test_aapprove_waiting_for_the_store_lock_leaves_the_loop_running(tmp_path: Path):
    db = tmp_path / "store.db"
    with Runtime(str(db), [paused_workflow()]) as rt:
        run_id = rt.start("gate")
        holder = sqlite3.connect(db, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # another process's write transaction: the approval must wait

        async def main() -> tuple[Any, Ticker, float]:
            ticker = Ticker()
            loop = asyncio.get_running_loop()
            loop.call_later(0.4, holder.execute, "COMMIT")
            began = time.monotonic()
            decided = await rt.aapprove(run_id, by="ann")
            waited = time.monotonic() - began
            ticker.task.cancel()
            return decided, ticker, waited

        decided, ticker, waited = asyncio.run(main())
        holder.close()
        assert decided.decision == "approved" and rt.get(run_id).status == RunStatus.QUEUED
        assert waited >= 0.35  # it did wait for the lock...
        assert ticker.longest_gap() < 0.1 and len(ticker.ticks) >= 20  # ...while the loop ran on
