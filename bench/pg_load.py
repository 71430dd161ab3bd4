"""What an idle console and a worker cost a PostgreSQL server, counted by the server itself.

    python bench/pg_load.py console [--server URL] [--runs 2000] [--seconds 60] [--noise 10]
    python bench/pg_load.py worker  [--server URL] [--concurrency 4 16]

Both work in a database of their own (``relaypoint_load``, made when missing) so that nothing else
on the server is counted.

``console``: starts ``relaypoint --db URL console`` in a detached tmux session on a store of
``--runs`` runs, waits for its first page, then counts the transactions the server ran for that
database over ``--seconds`` (``xact_commit + xact_rollback`` of ``pg_stat_database``, read from
another database; every statement the console sends outside a transaction is one). ``--noise N``
meanwhile commits N small transactions a second in another database of the same server (the
activity of other teams): a console that must not refresh for them should not count more.

``worker``: queues ``concurrency`` runs whose second step sleeps, starts ``relaypoint worker
--concurrency N``, and once every run is executing counts the server connections of that
database (``pg_stat_activity``), i.e. what the worker holds while its runs execute.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import psycopg

from relaypoint import Runtime

sys.path.insert(0, str(Path(__file__).parent))
from bench import fill  # noqa: E402

DATABASE = "relaypoint_load"


def database_url(server: str) -> str:
    """The URL of the measurement database on ``server`` (made when missing)."""
    with psycopg.connect(server, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone() is None:
            conn.execute(f"CREATE DATABASE {DATABASE}")
    return server.rsplit("/", 1)[0] + "/" + DATABASE


def transactions(server: str) -> int:
    with psycopg.connect(server, autocommit=True) as conn:
        return conn.execute("SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
                            (DATABASE,)).fetchone()[0]


def connections(server: str) -> int:
    with psycopg.connect(server, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (DATABASE,)).fetchone()[0]


def active_since(server: str, seconds: float) -> int:
    """Client connections to the measurement database whose state changed in the last ``seconds``
    (a statement sent): zero when a console sends nothing while idle."""
    with psycopg.connect(server, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND backend_type = "
                            "'client backend' AND state_change > now() - make_interval(secs => %s)",
                            (DATABASE, seconds)).fetchone()[0]


def noise(server: str, per_second: float, stop: threading.Event) -> int:
    """Commit ``per_second`` one-row transactions a second in ``server``'s own database until ``stop``."""
    done = 0
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS relaypoint_load_noise (at timestamptz)")
        while not stop.wait(1 / per_second):
            conn.execute("INSERT INTO relaypoint_load_noise VALUES (now())")
            done += 1
        conn.execute("DROP TABLE relaypoint_load_noise")
    return done


def console(args: argparse.Namespace) -> None:
    db = database_url(args.server) + "?schema=console_idle"
    with Runtime(db) as rt:
        if not rt.counts():
            fill(rt, args.runs, output_bytes=100, workflows=("ingest-orders", "ingest-users", "report"))
    session = "relaypoint-pg-load"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "45",
                    f"exec relaypoint --db {shlex.quote(db)} console"], check=True)
    stop = threading.Event()
    noisy = threading.Thread(target=lambda: noise(args.server, args.noise, stop)) if args.noise else None
    try:
        time.sleep(20)  # the first page, the first refreshes (slow on a busy machine), statistics flushed
        if noisy:
            noisy.start()
        before, start = transactions(args.server), time.monotonic()
        time.sleep(args.seconds)
        time.sleep(1.5)  # a backend flushes its counts at most once a second
        after, elapsed = transactions(args.server), time.monotonic() - start - 1.5
        held = connections(args.server)
        active = active_since(args.server, args.seconds + 1.5)
    finally:
        stop.set()
        if noisy and noisy.is_alive():
            noisy.join()
        subprocess.run(["tmux", "kill-session", "-t", session], check=False)
    print(f"console idle {elapsed:.0f} s, noise {args.noise}/s elsewhere on the server: "
          f"{(after - before) / elapsed:.2f} transactions/s on its database (autovacuum included), {held} connections, "
          f"{active} of them sent a statement during the window")


APP = textwrap.dedent('''
    import time
    from relaypoint import Workflow

    wf = Workflow("hold")

    @wf.step(name="one")
    def one(ctx):
        return 1

    @wf.step(name="two")
    def two(ctx):
        time.sleep(ctx.input.get("sleep", 0))
        return 2

    workflows = [wf]
''')


def worker(args: argparse.Namespace) -> None:
    base_url = database_url(args.server)
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "loadapp.py").write_text(APP)
        env = {**os.environ, "PYTHONPATH": tmp + os.pathsep + os.environ.get("PYTHONPATH", "")}
        sys.path.insert(0, tmp)
        from loadapp import workflows  # noqa: PLC0415
        for n in args.concurrency:
            db = f"{base_url}?schema=worker_c{n}"
            with psycopg.connect(base_url, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS worker_c{n} CASCADE")
            with Runtime(db, workflows) as rt:
                base = rt.start("hold", {})
                forks = [rt.fork(base, "two", {"sleep": 20}) for _ in range(n)]
            idle = connections(args.server)
            proc = subprocess.Popen(["relaypoint", "--db", db, "worker", "--app", "loadapp:workflows",
                                     "--concurrency", str(n), "--poll", "0.2"], env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                with Runtime(db, workflows) as rt:
                    deadline = time.monotonic() + 60
                    while sum(rt.get(f, with_outputs=False).status == "running" for f in forks) < n:
                        if time.monotonic() > deadline:
                            raise SystemExit(f"the worker did not start {n} runs within 60 s")
                        time.sleep(0.2)
                time.sleep(12)  # the heartbeats renew (every lease/3 s) while the steps sleep
                held = connections(args.server) - idle
            finally:
                proc.terminate()
                proc.wait(60)
            print(f"worker --concurrency {n}, {n} runs executing: {held} server connections")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["console", "worker"])
    parser.add_argument("--server", default=os.environ.get("RELAYPOINT_TEST_POSTGRES",
                                                           "postgresql://postgres@127.0.0.1:5432/test"))
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--noise", type=float, default=0)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[4, 16])
    args = parser.parse_args()
    console(args) if args.what == "console" else worker(args)


if __name__ == "__main__":
    main()
