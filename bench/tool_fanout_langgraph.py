"""LangGraph's side of fanout.py: a graph whose START fans out to n ``Send("agent", {"i": i})``
tasks (one superstep), durability "sync".

``kind`` "async": ``async def`` nodes, ``AsyncSqliteSaver``, ``await app.ainvoke``; "sync": plain
nodes (LangGraph runs them in its thread pool), ``SqliteSaver``, ``app.invoke``. Each node finishing
inside the superstep is saved as a pending write, so a resume (``invoke(None)`` on the same thread)
re-runs only the nodes that had not finished.
"""

from __future__ import annotations

import asyncio
import operator
import sqlite3
import time
from importlib.metadata import version as dist_version
from pathlib import Path
from typing import Annotated, Any, TypedDict

from common import serve
from fanout_calls import STAGGER, async_call, sync_call, use
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

CONFIG = {"configurable": {"thread_id": "run"}}


class State(TypedDict, total=False):
    done: Annotated[list, operator.add]


class Item(TypedDict):
    i: int


def _graph(n: int, kind: str, saver):
    if kind == "async":
        async def agent(item: Item) -> dict[str, Any]:
            return {"done": [await async_call(item["i"])]}
    else:
        def agent(item: Item) -> dict[str, Any]:
            return {"done": [sync_call(item["i"])]}
    graph = StateGraph(State)
    graph.add_node("agent", agent)
    graph.add_conditional_edges(START, lambda state: [Send("agent", {"i": i}) for i in range(n)], ["agent"])
    graph.add_edge("agent", END)
    return graph.compile(checkpointer=saver)


def _invoke(path: Path, n: int, kind: str, state: dict[str, Any] | None) -> float:
    """Seconds of one invoke (``state`` None: continue the thread's last checkpoint); raises
    unless all n calls are in the final state."""
    async def on_loop() -> tuple[float, dict[str, Any]]:
        async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
            app = _graph(n, kind, saver)
            t = time.perf_counter()
            out = await app.ainvoke(state, CONFIG, durability="sync")
            return time.perf_counter() - t, out

    if kind == "async":
        seconds, out = asyncio.run(on_loop())
    else:
        saver = SqliteSaver(sqlite3.connect(path, check_same_thread=False))
        saver.setup()
        app = _graph(n, kind, saver)
        t = time.perf_counter()
        out = app.invoke(state, CONFIG, durability="sync")
        seconds = time.perf_counter() - t
    if len(out.get("done", [])) != n:
        raise RuntimeError(f"{len(out.get('done', []))} of {n} calls in the final state")
    return seconds


def round_(path: Path, n: int, kind: str) -> float:
    """Seconds of one invoke of the n-way fan-out."""
    return _invoke(path, n, kind, {"done": []})


def crash(path: Path, n: int, kind: str) -> float:
    """The fan-out with ``STAGGER`` delays and the call log; fanout.py kills it part-way."""
    use(STAGGER, path.with_name("calls.log"))
    return _invoke(path, n, kind, {"done": []})


def recover(path: Path, n: int, kind: str) -> dict[str, Any]:
    """Continue the killed thread from its last checkpoint and pending writes."""
    use(STAGGER, path.with_name("calls.log"))
    return {"seconds": _invoke(path, n, kind, None), "status": "completed"}


def version() -> dict[str, str]:
    return {p: dist_version(p) for p in ("langgraph", "langgraph-checkpoint-sqlite", "aiosqlite")}


if __name__ == "__main__":
    serve({**globals(), "round": round_})
