"""The raw PostgreSQL floor: one transaction per step over one psycopg connection, nothing else.

Each step is ``INSERT <small row>; COMMIT`` (psycopg opens the transaction) into a table of the
schema the URL names, with ``synchronous_commit`` on (the server's default: the commit returns once
its WAL is flushed to disk) or off: what any engine that commits each step in its own transaction
over a connection to this server cannot go below.
"""

from __future__ import annotations

import time

import psycopg
from common import pg_target, serve


def chain(url: str, n: int, sync: str = "on") -> float:
    """Seconds for ``n`` one-row transactions (a no-op step's worth of writing)."""
    conninfo, schema = pg_target(url)
    with psycopg.connect(conninfo, options=f"-c search_path={schema} -c synchronous_commit={sync}") as conn:
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        conn.execute("CREATE TABLE steps (seq bigint PRIMARY KEY, name text, output text)")
        conn.commit()
        t = time.perf_counter()
        for i in range(n):
            conn.execute("INSERT INTO steps (seq, name, output) VALUES (%s, %s, %s)", (i, f"s{i}", "null"))
            conn.commit()
        return time.perf_counter() - t


def version() -> dict[str, str]:
    return {"psycopg": psycopg.__version__}


if __name__ == "__main__":
    serve(globals())
