"""LangGraph with its SQLite checkpointer (SqliteSaver), durability "sync": a StateGraph of n
sequential nodes, one ``invoke`` per run with its own thread_id.

Each node writes its output to one state key, ``out``, overwritten by the next node: SqliteSaver
stores each checkpoint's full channel values, so a key per node would re-store every earlier output
at every step (quadratic storage); one key is the shape most favourable to LangGraph.
Resume: the checkpoint taken before the last node is forked with ``update_state`` (LangGraph's
fork: a new checkpoint branching from an earlier one) and the fork is invoked from there, so only
the last node runs.
"""

from __future__ import annotations

import sqlite3
import time
from importlib.metadata import version as dist_version
from pathlib import Path
from typing import Any, TypedDict

from common import on_disk, payload, payload_bytes, serve
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph


class State(TypedDict, total=False):
    out: Any


def _graph(n: int, output, saver: SqliteSaver):
    graph = StateGraph(State)
    for i in range(n):
        graph.add_node(f"s{i}", lambda state, i=i: {"out": output(i)})
        graph.add_edge(START if i == 0 else f"s{i - 1}", f"s{i}")
    graph.add_edge(f"s{n - 1}", END)
    return graph.compile(checkpointer=saver)


def _saver(path: Path) -> SqliteSaver:
    saver = SqliteSaver(sqlite3.connect(path, check_same_thread=False))
    saver.setup()
    return saver


def _config(thread: str, n: int, **extra: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, **extra}, "recursion_limit": n + 10}


def chain(path: Path, n: int) -> float:
    """Seconds of one ``invoke`` of an n-node graph of no-op nodes."""
    app = _graph(n, lambda i: None, _saver(path))
    t = time.perf_counter()
    app.invoke({}, _config("run", n), durability="sync")
    return time.perf_counter() - t


def storage(path: Path, n: int) -> dict[str, int]:
    """Bytes on disk after an n-node run whose nodes output ~10 KB each."""
    saver = _saver(path)
    _graph(n, payload, saver).invoke({}, _config("run", n), durability="sync")
    saver.conn.close()
    return {"disk": on_disk(path), "outputs": payload_bytes(n)}


def resume(path: Path, n: int, repeat: int) -> dict[str, list[float]]:
    """Seconds to fork the checkpoint before the last node, and to invoke the fork to the end."""
    app = _graph(n, lambda i: None, _saver(path))
    app.invoke({}, _config("run", n), durability="sync")
    forks, resumes = [], []
    for _ in range(repeat):
        t = time.perf_counter()
        before_last = next(s for s in app.get_state_history(_config("run", n)) if s.next == (f"s{n - 1}",) and s.metadata.get("source") == "loop")
        fork = app.update_state(before_last.config, None)
        forks.append(time.perf_counter() - t)
        t = time.perf_counter()
        app.invoke(None, {**fork, "recursion_limit": n + 10}, durability="sync")
        resumes.append(time.perf_counter() - t)
    return {"fork": forks, "resume": resumes}


def version() -> dict[str, str]:
    return {p: dist_version(p) for p in ("langgraph", "langgraph-checkpoint-sqlite")}


if __name__ == "__main__":
    serve(globals())
