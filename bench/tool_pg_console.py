"""The console on a large PostgreSQL store: the time to its first rows, and the load it puts on the
server while nothing changes.

    build URL RUNS [STEPS]       fill the store: RUNS runs of STEPS steps (100-byte outputs)
    first_rows URL 0             seconds from starting the console to the runs table's first rows
    idle URL SECONDS HOME_DB     the server's work for the console's database over SECONDS

The store is built as ``console_idle.py`` builds its SQLite one (``bench.fill``: completed-looking runs
one second apart, three workflow names, the statuses in a fixed mix), but through the store contract
only for the newest ``TEMPLATE`` runs: the older ones are those rows copied by the server (``INSERT
... SELECT``, every table holding a ``run_id``, with new run ids and times moved back by whole
blocks, one transaction per block), since 100,000 runs through the contract take ~8 minutes on
PostgreSQL. Then every table is
vacuumed and analyzed, so autovacuum does not work on it while the console is measured.

The console runs headless (``App.run_test`` at 160x45) in this process. Idle load is read from the
server's statistics for the store's database, which the caller made for the console alone:
transactions (``xact_commit + xact_rollback`` of ``pg_stat_database``; an autocommit query is one
transaction), rows the server returned (``tup_returned + tup_fetched``) and the CPU of the server
processes serving the console's connections, read from a connection to ``HOME_DB`` so that the
reading is not counted. The window starts ``SETTLE`` seconds after the first rows: a backend flushes
its statistics at most once a second, and an idle one within 10 seconds.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import psycopg
from common import pg_target, serve
from tool_pg_workers import process_cpu

from relaypoint import Runtime
from relaypoint.tui.app import RelaypointConsole
from relaypoint.tui.widgets.runs_table import RunsTable

sys.path.insert(0, str(Path(__file__).parent))
from bench import fill  # noqa: E402

TEMPLATE = 1000
"""Runs written through the store contract; the rest are copies of them."""
SETTLE = 15
SIZE = (160, 45)


def build(url: str, runs: int, steps: int = 10) -> float:
    """Seconds to fill the store with ``runs`` runs of ``steps`` steps (see the module docstring)."""
    t = time.perf_counter()
    template = min(runs, TEMPLATE)
    with Runtime(url) as rt:
        fill(rt, template, steps_per_run=steps, output_bytes=100, workflows=("ingest-orders", "ingest-users", "report"))
    conninfo, schema = pg_target(url)
    blocks = -(-runs // template) - 1
    with psycopg.connect(conninfo, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.columns WHERE table_schema = %s AND column_name = 'run_id' "
            "ORDER BY table_name = 'runs' DESC, table_name", (schema,))]
        columns = {table: conn.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = %s "
            "AND table_name = %s AND column_default IS NULL AND is_identity = 'NO' ORDER BY ordinal_position",
            (schema, table)).fetchall() for table in tables}
        for b in range(1, blocks + 1):  # a transaction per block: the run_counts trigger updates one row per run
            with conn.transaction():
                for table, cols in columns.items():
                    exprs = [f"lpad(to_hex(('x' || run_id)::bit(64)::bigint + {b * template}), 16, '0')"
                             if c == "run_id" else f"{c} - interval '{b * template} seconds'"
                             if t.startswith("timestamp") else c for c, t in cols]
                    conn.execute(f"INSERT INTO {schema}.{table} ({', '.join(c for c, _ in cols)}) "
                                 f"SELECT {', '.join(exprs)} FROM {schema}.{table} "
                                 f"WHERE run_id < '{template:016x}' AND ('x' || run_id)::bit(64)::bigint + {b * template} < {runs}")
        for (table,) in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)).fetchall():
            conn.execute(f"VACUUM (ANALYZE) {schema}.{table}")
        assert conn.execute(f"SELECT count(*) FROM {schema}.runs").fetchone()[0] == runs
    return time.perf_counter() - t


async def _first_rows(app: RelaypointConsole, pilot) -> None:
    table = app.screen.query_one("#runs", RunsTable)
    while table.row_count == 0:
        await pilot.pause(0.005)


def first_rows(url: str, _: int) -> float:
    """Seconds from creating the console to the first rows in its runs table."""
    async def go() -> float:
        t = time.perf_counter()
        app = RelaypointConsole(url)
        async with app.run_test(size=SIZE) as pilot:
            await _first_rows(app, pilot)
            return time.perf_counter() - t
    return asyncio.run(go())


def _server_side(home: psycopg.Connection, database: str) -> dict[str, float]:
    row = home.execute("SELECT xact_commit + xact_rollback, tup_returned + tup_fetched FROM pg_stat_database "
                       "WHERE datname = %s", (database,)).fetchone()
    pids = [r[0] for r in home.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", (database,))]
    return {"at": time.monotonic(), "transactions": row[0], "rows": row[1],
            "cpu": sum(process_cpu(p) for p in pids), "connections": len(pids)}


def idle(url: str, seconds: int, home_db: str) -> dict[str, float]:
    """Per second over ``seconds`` of an idle console: the server's transactions and rows returned
    for the console's database, and the CPU (fraction of one core) of its server processes."""
    conninfo, _ = pg_target(url)

    async def go() -> dict[str, float]:
        app = RelaypointConsole(url)
        async with app.run_test(size=SIZE) as pilot:
            await _first_rows(app, pilot)
            await asyncio.sleep(SETTLE)
            with psycopg.connect(conninfo, dbname=home_db, autocommit=True) as home:
                database = psycopg.conninfo.conninfo_to_dict(conninfo)["dbname"]
                a = _server_side(home, database)
                await asyncio.sleep(seconds)
                b = _server_side(home, database)
        span = b["at"] - a["at"]
        return {"transactions_per_s": (b["transactions"] - a["transactions"]) / span,
                "rows_per_s": (b["rows"] - a["rows"]) / span, "server_cpu": (b["cpu"] - a["cpu"]) / span,
                "connections": b["connections"], "seconds": span}
    return asyncio.run(go())


if __name__ == "__main__":
    serve(globals())
