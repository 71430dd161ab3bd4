"""LangGraph with its PostgreSQL checkpointer (``PostgresSaver`` of ``langgraph-checkpoint-postgres``),
durability "sync": a StateGraph of n sequential nodes, one ``invoke``, its tables in the schema the
URL names (the connection's ``search_path``), at the server's ``synchronous_commit`` (on by default).

The connection is the one ``PostgresSaver.from_conn_string`` would open (autocommit, no prepared
statements, dict rows), with the schema added. Nodes overwrite one state key, as on SQLite (see
tool_langgraph.py).
"""

from __future__ import annotations

import time
from importlib.metadata import version as dist_version

import psycopg
from common import pg_target, serve
from langgraph.checkpoint.postgres import PostgresSaver
from psycopg.rows import dict_row
from tool_langgraph import _config, _graph


def chain(url: str, n: int) -> float:
    """Seconds of one ``invoke`` of an n-node graph of no-op nodes."""
    conninfo, schema = pg_target(url)
    with psycopg.connect(conninfo, autocommit=True, prepare_threshold=0, row_factory=dict_row,
                         options=f"-c search_path={schema}") as conn:
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        saver = PostgresSaver(conn)
        saver.setup()
        app = _graph(n, lambda i: None, saver)
        t = time.perf_counter()
        app.invoke({}, _config("run", n), durability="sync")
        return time.perf_counter() - t


def version() -> dict[str, str]:
    return {"langgraph-checkpoint-postgres": dist_version("langgraph-checkpoint-postgres")}


if __name__ == "__main__":
    serve(globals())
