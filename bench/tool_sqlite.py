"""The raw SQLite floor: one WAL transaction per step on one connection, nothing else.

Each step is ``BEGIN IMMEDIATE; INSERT <small row>; COMMIT`` with ``synchronous`` FULL or NORMAL:
what any engine that commits each step in its own transaction cannot go below.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from common import on_disk, payload, payload_bytes, serve


def _open(path: Path, sync: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={sync}")
    conn.execute("CREATE TABLE steps (seq INTEGER PRIMARY KEY, name TEXT, output TEXT)")
    return conn


def _steps(conn: sqlite3.Connection, n: int, output) -> None:
    for i in range(n):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO steps (seq, name, output) VALUES (?, ?, ?)", (i, f"s{i}", output(i)))
        conn.execute("COMMIT")


def chain(path: Path, n: int, sync: str = "FULL") -> float:
    """Seconds for ``n`` one-row transactions (a no-op step's worth of writing)."""
    conn = _open(path, sync)
    t = time.perf_counter()
    _steps(conn, n, lambda i: "null")
    elapsed = time.perf_counter() - t
    conn.close()
    return elapsed


def storage(path: Path, n: int, sync: str = "FULL") -> dict[str, int]:
    """Bytes on disk after ``n`` transactions each inserting one ~10 KB output."""
    conn = _open(path, sync)
    _steps(conn, n, lambda i: json.dumps(payload(i)))
    conn.close()
    return {"disk": on_disk(path), "outputs": payload_bytes(n)}


def version() -> dict[str, str]:
    return {"sqlite": sqlite3.sqlite_version}


if __name__ == "__main__":
    serve(globals())
