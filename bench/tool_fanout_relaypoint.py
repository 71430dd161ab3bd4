"""relaypoint's side of fanout.py: one fan-out of n agent calls in each of relaypoint's forms, a
crash and resume of one, a wide ``wf.map`` and an event loop's responsiveness around ``astart``.

Forms (``form``): ``vote``, ``parallel``, ``map`` and ``debate`` (one round, ``concurrent=True``),
each call an execution recorded at its own boundary; ``gather``, one step running the n calls
itself (``asyncio.gather`` or a thread pool: one boundary for all, the fast form before issue 21);
``vote_asyncio_run``, a vote whose sync voters each wrap the async call in ``asyncio.run`` (how an
async agent had to be called before). ``kind`` "async": the agents are ``async def`` and the run is
``await rt.astart(...)``; "sync": plain functions and ``rt.start(...)``. An API this relaypoint
lacks makes a task return ``{"na": "not available in this relaypoint: <API>"}``. Every run is at
``durability="full"``.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version as dist_version
from pathlib import Path
from typing import Any

from common import serve
from fanout_calls import STAGGER, async_call, use, sync_call

from relaypoint import Runtime, Workflow

WORKFLOW = "fanout"
# Forms whose agents are the user's own functions: with async agents they need astart.
NATIVE = ("vote", "parallel", "map", "debate")


def has(api: str) -> bool:
    """Whether this relaypoint has ``api``: ``"Owner.method"`` or ``"Owner.method(keyword=)"``."""
    owner, _, rest = api.partition(".")
    name, _, keyword = rest.partition("(")
    fn = getattr({"Workflow": Workflow, "Runtime": Runtime}[owner], name, None)
    return fn is not None and (not keyword or keyword.rstrip("=)") in inspect.signature(fn).parameters)


def needs(form: str, kind: str) -> list[str]:
    """The APIs a form and kind need beyond what every relaypoint has."""
    apis = {"parallel": ["Workflow.parallel"], "map": ["Workflow.map"],
            "debate": ["Workflow.debate(concurrent=)"]}.get(form, [])
    return apis + (["Runtime.astart"] if kind == "async" and form in NATIVE else [])


def not_available(apis: list[str]) -> dict[str, str] | None:
    missing = [a for a in apis if not has(a)]
    return {"na": f"not available in this relaypoint: {', '.join(missing)}"} if missing else None


def agent(i: int, kind: str):
    """Agent ``i`` as a pattern calls it (``ctx`` ignored): async or sync."""
    if kind == "async":
        async def call(ctx):
            return await async_call(i)
    else:
        def call(ctx):
            return sync_call(i)
    call.__name__ = call.__qualname__ = f"a{i}"  # a stable name in the recorded definition
    return call


def item(kind: str):
    """``wf.map``'s function: the call named by the item (``ctx.input["i"]``)."""
    if kind == "async":
        async def one(ctx):
            return await async_call(ctx.input["i"])
        return one

    def one_sync(ctx):
        return sync_call(ctx.input["i"])
    return one_sync


def gathered(n: int, kind: str):
    """One step making the n calls itself: their outputs are recorded together at its one boundary."""
    def fan(ctx):
        if kind == "async":
            async def all_calls():
                return await asyncio.gather(*(async_call(i) for i in range(n)))
            return asyncio.run(all_calls())
        with ThreadPoolExecutor(n) as pool:
            return list(pool.map(sync_call, range(n)))
    return fan


def workflow(form: str, kind: str, n: int) -> Workflow:
    """The workflow of one fan-out of ``n`` calls in ``form``."""
    wf = Workflow(WORKFLOW)
    agents = {f"a{i}": agent(i, kind) for i in range(n)}
    if form == "vote":
        wf.vote("fan", voters=agents)
    elif form == "parallel":
        wf.parallel("fan", branches=agents)
    elif form == "map":
        wf.map("fan", item(kind), items=lambda ctx: [{"i": i} for i in range(n)])
    elif form == "debate":
        wf.debate("fan", agents=agents, rounds=1, concurrent=True)
    elif form == "vote_asyncio_run":
        wf.vote("fan", voters={f"a{i}": lambda ctx, i=i: asyncio.run(async_call(i)) for i in range(n)})
    elif form == "gather":
        wf.step(name="fan")(gathered(n, kind))
    else:
        raise ValueError(f"unknown form {form!r}")
    return wf


def _run(rt: Runtime, form: str, kind: str) -> float:
    """Seconds of one start of the workflow; raises unless the run completed."""
    async def on_loop() -> tuple[float, str]:
        t = time.perf_counter()
        run_id = await rt.astart(WORKFLOW, input={})
        return time.perf_counter() - t, run_id

    if kind == "async" and form in NATIVE:
        seconds, run_id = asyncio.run(on_loop())
    else:
        t = time.perf_counter()
        run_id = rt.start(WORKFLOW, input={})
        seconds = time.perf_counter() - t
    status = rt.get(run_id, with_outputs=False).status
    if status != "completed":
        raise RuntimeError(f"run {run_id} ended {status}")
    return seconds


def round_(path: Path, n: int, form: str, kind: str) -> Any:
    """Seconds of one run holding one fan-out round of n calls (``fanout_calls.ROUND`` delays)."""
    if na := not_available(needs(form, kind)):
        return na
    with Runtime(str(path), [workflow(form, kind, n)], durability="full") as rt:
        return _run(rt, form, kind)


def crash(path: Path, n: int, form: str, kind: str) -> Any:
    """Start the fan-out with ``STAGGER`` delays, logging each call to calls.log beside the store;
    fanout.py kills this process with SIGKILL part-way."""
    if na := not_available(needs(form, kind)):
        return na
    use(STAGGER, path.with_name("calls.log"))
    with Runtime(str(path), [workflow(form, kind, n)], durability="full") as rt:
        return _run(rt, form, kind)


def recover(path: Path, n: int, form: str, kind: str) -> dict[str, Any]:
    """Resume the killed run (``Runtime.resume``); its seconds and final status."""
    use(STAGGER, path.with_name("calls.log"))
    with Runtime(str(path), [workflow(form, kind, n)], durability="full") as rt:
        run_id = rt.list(limit=1)[0].run_id
        t = time.perf_counter()
        status = rt.resume(run_id)
        return {"seconds": time.perf_counter() - t, "status": str(status)}


def width(path: Path, n: int, concurrency: int, seconds: str = "0.1") -> Any:
    """One ``wf.map`` over n items, ``max_concurrency`` calls in flight, each awaiting ``seconds``:
    {"wall": s, "cpu": s of this process}."""
    if na := not_available(["Workflow.map(max_concurrency=)", "Runtime.astart"]):
        return na
    wait = float(seconds)

    async def one(ctx):
        await asyncio.sleep(wait)
        return ctx.input["i"]

    wf = Workflow(WORKFLOW)
    wf.map("wide", one, items=lambda ctx: [{"i": i} for i in range(n)], max_concurrency=concurrency)
    with Runtime(str(path), [wf], durability="full") as rt:
        cpu = time.process_time()
        wall = _run(rt, "map", "async")
        return {"wall": wall, "cpu": time.process_time() - cpu}


def ticker(path: Path, n: int, mode: str) -> Any:
    """The longest interval (ms) between ticks of a 10 ms ticker task on the event loop while a run
    of a step awaiting 1 s and a step sleeping 1 s executes. ``mode``: "astart" (``await
    rt.astart``); "on_loop", ``rt.start`` called in a coroutine (the sleeping step alone: an async
    step does not run there); "to_thread", ``await asyncio.to_thread(rt.start, ...)`` with the
    awaiting step as ``asyncio.run`` inside a sync step."""
    if mode == "astart" and (na := not_available(["Runtime.astart"])):
        return na

    async def wait(ctx):
        await asyncio.sleep(1)

    def block(ctx):
        time.sleep(1)

    wf = Workflow(WORKFLOW)
    if mode == "astart":
        wf.step(wait)
    elif mode == "to_thread":
        wf.step(name="wait")(lambda ctx: asyncio.run(wait(ctx)))
    wf.step(block)
    with Runtime(str(path), [wf], durability="full") as rt:
        start = {"astart": lambda: rt.astart(WORKFLOW, input={}),
                 "to_thread": lambda: asyncio.to_thread(rt.start, WORKFLOW, input={})}.get(mode)

        async def run() -> str:
            return await start() if start else rt.start(WORKFLOW, input={})

        gap, seconds, run_id = asyncio.run(watched(run))
        status = rt.get(run_id, with_outputs=False).status
        if status != "completed":
            raise RuntimeError(f"run {run_id} ended {status}")
        return {"max_gap_ms": gap * 1000, "seconds": seconds}


async def watched(run) -> tuple[float, float, Any]:
    """Await ``run()`` beside a task ticking every 10 ms: (longest interval between ticks in
    seconds, seconds of the run, its result)."""
    gaps: list[float] = []
    running = True

    async def tick() -> None:
        last = time.perf_counter()
        while running:
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    task = asyncio.create_task(tick())
    await asyncio.sleep(0.05)  # the ticker is running before the run starts
    gaps.clear()
    t = time.perf_counter()
    result = await run()
    seconds = time.perf_counter() - t
    running = False
    await task
    return max(gaps), seconds, result


def version() -> dict[str, object]:
    apis = ["Runtime.astart", "Runtime.aresume", "Workflow.parallel", "Workflow.map",
            "Workflow.map(max_concurrency=)", "Workflow.debate(concurrent=)"]
    return {"relaypoint": dist_version("relaypoint"), "apis": {a: has(a) for a in apis}}


if __name__ == "__main__":
    serve({**globals(), "round": round_})
