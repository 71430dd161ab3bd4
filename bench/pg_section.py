"""The PostgreSQL section of ``run.py``: relaypoint beside the floor, DBOS Transact and LangGraph's
PostgresSaver on one server, worker throughput, and the console on a large store.

Every measurement runs in its own subprocess (``tool_pg_*.py``, ``tool_relaypoint.py``) in a schema
made for it on the server the URL names (``bench_<tool>_<pid>_<n>``) and dropped afterwards; the
console's store and the chains whose transactions are counted get databases of their own
(``bench_<tool>_<pid>_<n>``, dropped afterwards), so the server's statistics for such a database
count that work alone. The user in the URL needs ``CREATE`` on the database, and ``CREATEDB``.
"""

from __future__ import annotations

import itertools
import os
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import psycopg
from psycopg import sql
from rich.table import Table
from run import OverBudget, Series, call, console, fmt, print_verdicts, ratio, verdict

SERVER_SETTINGS = ("synchronous_commit", "fsync", "wal_sync_method", "full_page_writes", "shared_buffers")
BUSY_OTHERS = 0.25
"""Share of the cores other processes may keep busy before the throughput target is not judged."""
_names = itertools.count()


@dataclass(frozen=True)
class Options:
    """What the PostgreSQL section measures: ``url`` the server and database (no query string),
    ``sizes`` chain lengths, ``repeat`` runs per figure, ``budget`` seconds per measurement,
    ``worker_runs`` queued runs per throughput figure, ``workers`` worker-process counts,
    ``worker_poll`` the workers' ``--poll`` seconds, ``console_runs`` runs in the console's store,
    ``idle_seconds`` how long the idle console is watched."""

    url: str
    sizes: list[int]
    repeat: int
    budget: float
    worker_runs: int
    workers: list[int]
    worker_poll: float
    console_runs: int
    idle_seconds: int


def database_of(url: str) -> str:
    """The database a PostgreSQL URL names (its query string, if any, ignored)."""
    return unquote(urlsplit(url).path.lstrip("/"))


def with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{database}"))


def check(url: str) -> dict[str, str]:
    """The server's version and durability settings; raises SystemExit with one line when the URL
    cannot be used (it must name a database, without a query string)."""
    if urlsplit(url).query:
        raise SystemExit("--postgres takes a URL without a query string: each tool gets a schema of its own")
    try:
        with psycopg.connect(url, connect_timeout=10) as conn:
            info = {"server": conn.execute("SELECT version()").fetchone()[0].split(" on ")[0]}
            for name in SERVER_SETTINGS:
                info[name] = conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()[0]
    except psycopg.Error as e:
        raise SystemExit(f"cannot use --postgres {url}: {str(e).strip().splitlines()[0]}") from None
    return info


@contextmanager
def fresh_schema(url: str, tool: str) -> Iterator[str]:
    """A new empty schema for one measurement, as relaypoint's store URL ``url?schema=NAME``;
    dropped with everything in it afterwards."""
    name = f"bench_{tool}_{os.getpid()}_{next(_names)}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    try:
        yield f"{url}?schema={name}"
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))


@contextmanager
def fresh_database(url: str, tag: str, schema: str = "relaypoint") -> Iterator[str]:
    """A new database on the server of ``url``, as a store URL of its schema ``schema``; dropped
    afterwards (its connections ended first)."""
    name = f"bench_{tag}_{os.getpid()}_{next(_names)}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield f"{with_database(url, name)}?schema={schema}"
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def chain_series() -> list[Series]:
    return [Series("relaypoint full", "relaypoint", ("full",)),
            Series("relaypoint normal", "relaypoint", ("normal",)),
            Series("raw PostgreSQL, synchronous_commit on", "pg_floor", ("on",)),
            Series("raw PostgreSQL, synchronous_commit off", "pg_floor", ("off",)),
            Series("LangGraph PostgresSaver sync", "pg_langgraph"),
            Series("DBOS PostgreSQL", "pg_dbos")]


PEERS = ("LangGraph PostgresSaver sync", "DBOS PostgreSQL")


def measure_chains(o: Options) -> dict[str, dict[int, Any]]:
    """{"us": µs per step (median), "runs": samples} per series and size, or a string when not
    measured. A size whose first run takes longer than ``budget / repeat`` is measured once; once a
    size runs over budget, that series' larger sizes are skipped."""
    out: dict[str, dict[int, Any]] = {}
    for s in chain_series():
        out[s.label] = {}
        stopped = None
        for n in o.sizes:
            if stopped:
                out[s.label][n] = stopped
                continue
            console.print(f"  postgres chain {s.label} n={n:,}", style="dim")
            samples: list[float] = []
            try:
                while len(samples) < o.repeat:
                    with fresh_schema(o.url, s.tool) as target:
                        samples.append(call(s.tool, s.task, target, n, *s.args, budget=o.budget))
                    if samples[0] > o.budget / o.repeat:
                        break
                out[s.label][n] = {"us": statistics.median(samples) / n * 1e6, "runs": len(samples)}
            except OverBudget as e:
                out[s.label][n] = stopped = str(e)
    return out


def measure_commits(o: Options, small: int = 10, large: int = 1000) -> dict[str, Any]:
    """Server transactions per step of each series: the transactions a ``large``-step chain ended in a
    database of its own, less those of a ``small``-step chain (set-up and start-up cancel out), over
    ``large - small`` steps. Read from ``pg_stat_database`` once the tool's process has ended (a
    backend flushes its statistics when its connection closes)."""
    out: dict[str, Any] = {}
    with psycopg.connect(o.url, autocommit=True) as conn:
        for s in chain_series():
            console.print(f"  postgres transactions per step {s.label}", style="dim")
            counts = []
            try:
                for n in (small, large):
                    with fresh_database(o.url, s.tool, "bench") as target:
                        call(s.tool, s.task, target, n, *s.args, budget=o.budget)
                        counts.append(database_transactions(conn, database_of(target)))
            except OverBudget as e:
                out[s.label] = str(e)
                continue
            out[s.label] = (counts[1] - counts[0]) / (large - small)
    return out


def database_transactions(conn: psycopg.Connection, database: str, settle: float = 5.0) -> int:
    """Transactions ended in ``database`` once its connections have closed (waits up to ``settle`` s
    for them), as the server's statistics count them."""
    deadline = time.monotonic() + settle
    while time.monotonic() < deadline and conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (database,)).fetchone()[0]:
        time.sleep(0.1)
    conn.execute("SELECT pg_stat_clear_snapshot()")
    return int(conn.execute("SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
                            (database,)).fetchone()[0])


def measure_workers(o: Options) -> dict[int, Any]:
    """Per worker count: medians of runs/s and of the CPU shares over ``repeat`` rounds, each on a
    fresh store of ``worker_runs`` queued runs; "runs_executed_twice" summed over the rounds."""
    out: dict[int, Any] = {}
    for w in o.workers:
        console.print(f"  postgres workers {w} on {o.worker_runs:,} queued runs", style="dim")
        rounds = []
        try:
            for _ in range(o.repeat):
                with fresh_schema(o.url, "workers") as target:
                    rounds.append(call("pg_workers", "throughput", target, o.worker_runs, w, o.worker_poll,
                                       budget=o.budget * 5))
        except OverBudget as e:
            out[w] = str(e)
            continue
        out[w] = {k: statistics.median(r[k] for r in rounds) for k in rounds[0] if k != "runs_executed_twice"}
        out[w]["runs_executed_twice"] = sum(r["runs_executed_twice"] for r in rounds)
    return out


def measure_console(o: Options) -> dict[str, Any]:
    """Seconds to build the store, seconds to the first rows (median of ``repeat``), and the idle
    server load (see tool_pg_console.py)."""
    out: dict[str, Any] = {}
    home = database_of(o.url)
    with fresh_database(o.url, "console") as target:
        console.print(f"  postgres console: building a store of {o.console_runs:,} runs", style="dim")
        try:
            out["build_s"] = call("pg_console", "build", target, o.console_runs, budget=o.budget * 10)
            console.print("  postgres console: time to first rows", style="dim")
            out["first_rows_s"] = statistics.median(
                call("pg_console", "first_rows", target, 0, budget=o.budget) for _ in range(o.repeat))
            console.print(f"  postgres console: idle for {o.idle_seconds} s", style="dim")
            t = time.monotonic()
            with psycopg.connect(o.url, autocommit=True) as conn:
                before = server_transactions(conn, database_of(target))
                out["idle"] = call("pg_console", "idle", target, o.idle_seconds, home, budget=o.idle_seconds + 120)
                out["idle"]["others_transactions_per_s"] = (
                    server_transactions(conn, database_of(target)) - before) / (time.monotonic() - t)
        except OverBudget as e:
            out.setdefault("error", str(e))
    return out


def server_transactions(conn: psycopg.Connection, but: str) -> int:
    """Transactions ended so far in every database of the server but ``but`` (the other load)."""
    return int(conn.execute("SELECT coalesce(sum(xact_commit + xact_rollback), 0) FROM pg_stat_database "
                        "WHERE datname IS DISTINCT FROM %s", (but,)).fetchone()[0])


def us(v: Any) -> float | None:
    return v["us"] if isinstance(v, dict) else None


def saturated(row: Any, cores: int) -> bool:
    """Whether the machine's cores were at least 90% busy over a throughput figure."""
    return isinstance(row, dict) and row["machine_cores"] >= 0.9 * cores


def targets(chains, workers, sizes: list[int], cores: int) -> list[tuple[str, str]]:
    """The issue's PostgreSQL targets, each with "met" / "not met (figure)"."""
    rp = chains["relaypoint full"]
    fastest = {n: min((v for p in PEERS if (v := us(chains[p].get(n))) is not None), default=None) for n in sizes}
    vs_peers = [r for n in sizes if (r := ratio(us(rp.get(n)), fastest[n])) is not None]
    counts = [w for w in workers if isinstance(workers[w], dict)]
    steps, where = [], saturation(workers, cores)
    for lo, hi in itertools.pairwise(counts):
        grows = ratio(workers[hi]["runs_per_s"], workers[lo]["runs_per_s"])
        steps.append((lo, hi, grows, saturated(workers[lo], cores)))
    failing = [f"{lo}->{hi}: {g:.2f}x" for lo, hi, g, sat in steps if g < 1.05 and not sat]
    grow_text = ", ".join(f"{lo}->{hi} {g:.2f}x" for lo, hi, g, _ in steps)
    busy = [(w, others(workers[w])) for w in counts if others(workers[w]) >= BUSY_OTHERS * cores]
    if not steps:
        growth = "not measured"
    elif busy:
        w, o = max(busy, key=lambda b: b[1])
        growth = (f"not measured ({grow_text}; other processes kept {o:.2f} of the {cores} cores busy "
                  f"with {w} worker{'s' if w > 1 else ''}: measure on an idle machine)")
    else:
        growth = f"{'not met' if failing else 'met'} ({grow_text}; {where})"
    return [
        ("µs per step at full <= 0.5x the faster of LangGraph and DBOS on PostgreSQL (worst size)",
         verdict(max(vs_peers, default=None), 0.5)),
        ("throughput grows with workers until the server or the cores are saturated", growth),
    ]


def saturation(workers: dict[int, Any], cores: int) -> str:
    """Where the machine saturates, in words: the first worker count with its cores >= 90% busy,
    and who kept them busy."""
    for w, row in workers.items():
        if saturated(row, cores):
            return (f"the {cores} cores saturated from {w} worker{'s' if w > 1 else ''}: workers "
                    f"{row['workers_cpu']:.2f}, server {row['server_cpu']:.2f}, other processes "
                    f"{others(row):.2f} cores")
    return "the cores never saturated"


def others(row: dict[str, float]) -> float:
    """Cores kept busy by processes other than the workers and the server (this harness included)."""
    return max(0.0, row["machine_cores"] - row["workers_cpu"] - row["server_cpu"])


NOTES = [
    "Durability: relaypoint 'full' commits with synchronous_commit on (the server's default: a boundary is in the "
    "WAL on disk when it returns), 'normal' with it off; LangGraph (autocommit connection, durability 'sync') and "
    "DBOS run at the server's setting (on). The raw floor: one INSERT per transaction over one connection.",
    "Each figure runs in its own process, in a schema made for it and dropped afterwards.",
    "¹ measured once: its first run took longer than budget / repeat.",
    "Workers: `relaypoint worker --poll P` processes (one thread each, durability full) on forks queued from the "
    "first step of one executed run; runs/s from the first claim (`resumed` event) to the last `run_completed`. "
    "CPU in cores (of the machine's), sampled over the same stretch: every process on the machine; the workers; "
    "the server's processes (named postgres: other clients' work on the server counts there too).",
    "Console: headless (Textual run_test at 160x45), store of 10-step runs with 100-byte outputs in a database of "
    "its own; idle load = transactions and rows returned for that database per second, read from "
    "pg_stat_database, and the CPU of the server processes serving it; 'other transactions' is the rest of the "
    "server's load meanwhile (the console learns of its schema's commits by LISTEN/NOTIFY, so the rest does not "
    "reach it).",
]


def show(info: dict[str, str], versions: dict[str, str], chains, commits, workers, console_figures, goals,
         o: Options) -> None:
    t = Table(title="PostgreSQL server", show_header=False)
    for k, v in {**info, **versions}.items():
        t.add_row(k, str(v))
    console.print(t)

    t = Table(title=f"PostgreSQL: µs per step, chains of no-op steps (median of {o.repeat})")
    t.add_column("series")
    for n in o.sizes:
        t.add_column(f"{n:,}", justify="right")
    for label, row in chains.items():
        t.add_row(label, *(fmt(us(v)) + ("¹" if v["runs"] < o.repeat else "") if isinstance(v, dict) else str(v)
                           for v in (row.get(n) for n in o.sizes)))
    console.print(t)

    t = Table(title="PostgreSQL: server transactions per step (1,000-step chain less a 10-step one)")
    t.add_column("series")
    t.add_column("transactions per step", justify="right")
    for label, v in commits.items():
        t.add_row(label, fmt(v, ".2f"))
    console.print(t)

    t = Table(title="PostgreSQL ratios (x = first / second, same size)")
    t.add_column("ratio")
    for n in o.sizes:
        t.add_column(f"{n:,}", justify="right")
    pairs = [("relaypoint full", "raw PostgreSQL, synchronous_commit on"),
             ("relaypoint normal", "raw PostgreSQL, synchronous_commit off"),
             *(("relaypoint full", p) for p in PEERS)]
    for a, b in pairs:
        t.add_row(f"{a} / {b}", *(fmt(r, ".2f") if (r := ratio(us(chains[a].get(n)), us(chains[b].get(n)))) else "—"
                                   for n in o.sizes))
    console.print(t)

    t = Table(title=f"PostgreSQL: worker throughput on {o.worker_runs:,} queued 5-step runs (median of {o.repeat})")
    for col in ("workers", "runs/s", "machine cores busy", "workers' cores", "server's cores", "others' cores",
                "runs executed twice"):
        t.add_column(col, justify="right")
    for w, row in workers.items():
        if isinstance(row, dict):
            t.add_row(str(w), f"{row['runs_per_s']:,.1f}", f"{row['machine_cores']:.2f}",
                      f"{row['workers_cpu']:.2f}", f"{row['server_cpu']:.2f}", f"{others(row):.2f}",
                      str(row["runs_executed_twice"]))
        else:
            t.add_row(str(w), row, "", "", "", "", "")
    console.print(t)

    t = Table(title=f"PostgreSQL: the console on a store of {o.console_runs:,} runs", show_header=False)
    c = console_figures
    if "build_s" in c:
        t.add_row("store built in (template through the store contract, copies by the server)", f"{c['build_s']:.0f} s")
    if "first_rows_s" in c:
        t.add_row(f"start to the runs table's first rows (median of {o.repeat})", f"{c['first_rows_s'] * 1000:,.0f} ms")
    if "idle" in c:
        i = c["idle"]
        t.add_row(f"idle {i['seconds']:.0f} s: transactions per second for its database", f"{i['transactions_per_s']:.2f}")
        t.add_row("idle: rows returned per second", f"{i['rows_per_s']:,.1f}")
        t.add_row("idle: CPU of the server processes serving it (cores)", f"{i['server_cpu']:.4f}")
        t.add_row("idle: its connections", str(i["connections"]))
        t.add_row("meanwhile: other transactions per second on the server", f"{i['others_transactions_per_s']:,.1f}")
    if "error" in c:
        t.add_row("not measured", c["error"])
    console.print(t)

    print_verdicts(NOTES, "PostgreSQL targets of issue 9", goals)


def section(o: Options) -> dict[str, Any]:
    """Measure, print and return the PostgreSQL figures."""
    info = check(o.url)
    versions: dict[str, str] = {}
    for tool in ("relaypoint", "pg_floor", "pg_langgraph", "pg_dbos"):
        try:
            versions.update(call(tool, "version", budget=60))
            versions.pop("durability_option", None)
        except OverBudget as e:
            raise SystemExit(f"{tool} cannot be measured ({e}); the peers install with: pip install -e '.[bench]'")
    console.print(f"measuring on PostgreSQL ({o.url})...")
    chains = measure_chains(o)
    commits = measure_commits(o)
    workers = measure_workers(o)
    console_figures = measure_console(o)
    cores = os.cpu_count() or 1
    goals = targets(chains, workers, o.sizes, cores)
    show(info, versions, chains, commits, workers, console_figures, goals, o)
    return {"server": info, "versions": versions, "us_per_step": chains, "transactions_per_step": commits,
            "workers": workers,
            "console": console_figures, "targets": dict(goals)}


def server_settings(url: str, settings: dict[str, int | None]) -> None:
    """``ALTER SYSTEM SET`` each setting (``RESET`` for None) and reload the server's configuration;
    new connections see it. Needs a superuser."""
    with psycopg.connect(url, autocommit=True) as conn:
        for name, value in settings.items():
            if value is None:
                conn.execute(sql.SQL("ALTER SYSTEM RESET {}").format(sql.Identifier(name)))
            else:
                conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), sql.Literal(value)))
        conn.execute("SELECT pg_reload_conf()")
