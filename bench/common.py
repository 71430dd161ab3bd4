"""What every measured tool shares: the payload, the on-disk size, and the subprocess protocol.

Each tool module (``tool_*.py``) defines ``chain(path, n) -> seconds``, ``storage(path, n) ->
{"disk": bytes, "outputs": bytes}`` and optionally ``resume(path, n, repeat) -> {"fork": [s], "resume":
[s]}`` (or ``{"na": why}``), and ends with ``serve(globals())``. ``run.py`` starts one subprocess per
measurement, so imports and global state of one tool never touch another's figures. On PostgreSQL the
store is a URL naming a schema, ``postgresql://user@host:port/db?schema=NAME`` (relaypoint's own form),
instead of a path; ``pg_target`` splits it for the tools that take a connection and a schema.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

OUTPUT_BYTES = 10_000  # ~10 KB of JSON per step in the storage measurement


def payload(i: int) -> dict[str, Any]:
    """The output of step ``i`` in the storage measurement: ~10 KB of JSON, the same for every tool.
    Hex digests chained from ``i``, so no tool gains by compressing repeated text."""
    digest, parts = str(i).encode(), []
    while sum(len(p) for p in parts) < OUTPUT_BYTES - 100:
        digest = hashlib.sha256(digest).digest()
        parts.append(digest.hex())
    return {"step": i, "text": " ".join(parts)}


def payload_bytes(n: int) -> int:
    """Bytes of the JSON encoding of the outputs of steps 0..n-1."""
    return sum(len(json.dumps(payload(i)).encode()) for i in range(n))


def on_disk(*files: Path) -> int:
    """Bytes on disk of SQLite files (main file + WAL), after folding the WAL into the main file
    with ``PRAGMA wal_checkpoint(TRUNCATE)`` on a fresh connection. Missing files count 0."""
    total = 0
    for f in files:
        if not f.exists():
            continue
        conn = sqlite3.connect(f)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        total += sum(p.stat().st_size for p in (f, Path(f"{f}-wal"), Path(f"{f}-journal")) if p.exists())
    return total


def pg_target(url: str) -> tuple[str, str]:
    """``postgresql://...?schema=NAME`` -> (the URL without its query, NAME)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(query="")), parse_qs(parts.query)["schema"][0]


def serve(functions: dict[str, Any]) -> None:
    """Run one measurement named on the command line and print its JSON result as the last line:
    ``tool_x.py TASK PATH N [ARGS...]`` (PATH a file, or a PostgreSQL URL kept as text). TASK names
    a function of the tool (``chain``, ``storage``, ``resume``, ...) or is ``version``."""
    task, rest = sys.argv[1], sys.argv[2:]
    if task == "version":
        result = functions["version"]()
    else:
        path, n = (rest[0] if "://" in rest[0] else Path(rest[0])), int(rest[1])
        extra = [int(a) if a.isdigit() else a for a in rest[2:]]
        result = functions[task](path, n, *extra)
    print(json.dumps(result))
