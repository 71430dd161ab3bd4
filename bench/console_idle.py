"""The console left idle on a large store: its memory (RSS) and CPU, sampled while nothing changes.

    python bench/console_idle.py --db /tmp/big.db [--minutes 15] [--interval 30] [--scroll 10000]

Starts ``relaypoint --db DB console`` in a detached tmux session at 160x45, optionally presses
``pagedown`` until about ``--scroll`` rows are loaded, then samples the process's resident memory
(``/proc/PID/status``) and its CPU share over each interval (``/proc/PID/stat``), prints a table and
ends the session. A missing DB is first built like ``bench.py`` builds its listing store
(``--runs`` runs of ``--steps`` steps, 100-byte outputs). Needs tmux and Linux's /proc.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from relaypoint import Runtime

sys.path.insert(0, str(Path(__file__).parent))
from bench import fill  # noqa: E402

PAGE_ROWS = 40
"""Rows a ``pagedown`` moves at 160x45 (the runs table's height)."""


def tmux(*args: str) -> str:
    """Run one tmux command; its stdout."""
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


def rss_mib(pid: int) -> float:
    """Resident memory of ``pid`` in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time used by ``pid`` so far, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="the store (built first if missing)")
    parser.add_argument("--runs", type=int, default=100_000, help="runs of a store built here")
    parser.add_argument("--steps", type=int, default=10, help="steps per run of a store built here")
    parser.add_argument("--minutes", type=float, default=15, help="how long to sample")
    parser.add_argument("--interval", type=float, default=30, help="seconds between samples")
    parser.add_argument("--scroll", type=int, default=0, help="rows to scroll down before sampling")
    parser.add_argument("--session", default="relaypoint-idle", help="tmux session name")
    args = parser.parse_args()

    if not Path(args.db).exists():
        with Runtime(args.db) as rt:
            fill(rt, args.runs, steps_per_run=args.steps, output_bytes=100,
                 workflows=("ingest-orders", "ingest-users", "report"))
    command = f"exec relaypoint --db {shlex.quote(args.db)} console"
    tmux("new-session", "-d", "-s", args.session, "-x", "160", "-y", "45", command)
    try:
        pid = int(tmux("list-panes", "-t", args.session, "-F", "#{pane_pid}").split()[0])
        time.sleep(5)  # the first page and the first refresh
        for _ in range(args.scroll // PAGE_ROWS):
            tmux("send-keys", "-t", args.session, "PageDown")
            time.sleep(0.2)
        if args.scroll:
            time.sleep(10)  # the last pages arrive
        rows = []
        start = time.monotonic()
        last_t, last_cpu = start, cpu_seconds(pid)
        rows.append((0.0, rss_mib(pid), None))
        while time.monotonic() - start < args.minutes * 60:
            time.sleep(args.interval)
            now, cpu = time.monotonic(), cpu_seconds(pid)
            rows.append((now - start, rss_mib(pid), (cpu - last_cpu) / (now - last_t) * 100))
            last_t, last_cpu = now, cpu
    finally:
        tmux("kill-session", "-t", args.session)
    table = Table("elapsed", "RSS", "CPU over the interval",
                  title=f"relaypoint console idle on {Path(args.db).name}, scrolled {args.scroll} rows")
    for elapsed, rss, cpu in rows:
        table.add_row(f"{elapsed / 60:.1f} min", f"{rss:.0f} MiB", "" if cpu is None else f"{cpu:.1f}%")
    busy = [cpu for _, _, cpu in rows if cpu is not None]
    Console().print(table)
    print(f"RSS {rows[0][1]:.0f} -> {rows[-1][1]:.0f} MiB; mean CPU {sum(busy) / max(len(busy), 1):.1f}%")


if __name__ == "__main__":
    main()
