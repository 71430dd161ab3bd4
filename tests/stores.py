"""A test's own view of a store's tables, on either backend: what another process left in a SQLite
file or a PostgreSQL schema, read (and, to stage a situation, written) behind relaypoint's back.

``db`` is what the test hands relaypoint as ``--db``: a SQLite path or ``sqlite:///`` URL, or a
``postgresql://...?schema=NAME`` URL. Statements are written once, in SQLite's form (``?``
placeholders); on PostgreSQL they run in the store's schema with ``%s`` placeholders. Values read
back are in SQLite's form: times as the store's UTC text (see relaypoint.clock.to_text), so a test
compares the same values on both backends.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from relaypoint.clock import to_text
from relaypoint.store.url import parse

TABLES = ("meta", "runs", "run_inputs", "definitions", "steps", "outputs", "checkpoints", "events")


def is_postgres(db: Path | str) -> bool:
    """Whether ``db`` names a PostgreSQL store."""
    return parse(str(db)).backend == "postgres"


def sqlite_path(db: Path | str) -> Path:
    """The file of a SQLite store (``AssertionError`` for a PostgreSQL URL: a test of a file)."""
    where = parse(str(db))
    assert where.backend == "sqlite", f"{db} is not a SQLite store"
    return Path(where.path)


def _plain(value: Any) -> Any:
    return to_text(value) if isinstance(value, datetime) else value


def _postgres_sql(statement: str) -> str:
    return statement.replace("%", "%%").replace("?", "%s")


@contextmanager
def _postgres(db: Path | str) -> Iterator[Any]:
    import psycopg

    where = parse(str(db))
    with psycopg.connect(where.conninfo, options=f"-c search_path={where.schema}") as conn:
        yield conn


def _created(db: Path | str) -> bool:
    """Whether the store's tables exist yet (a store being created has none)."""
    if is_postgres(db):
        with _postgres(db) as conn:
            return conn.execute("SELECT to_regclass('runs') IS NOT NULL").fetchone()[0]
    path = sqlite_path(db)
    if not path.exists():
        return False
    conn = sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True, timeout=30)
    try:
        return conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'runs'").fetchone() is not None
    finally:
        conn.close()


def query(db: Path | str, statement: str, params: tuple = ()) -> list[dict[str, Any]]:
    """Rows of a read-only ``statement`` as dicts; none while the store's tables do not exist."""
    if not _created(db):
        return []
    if is_postgres(db):
        with _postgres(db) as conn:
            cur = conn.execute(_postgres_sql(statement), params)
            names = [c.name for c in cur.description]
            return [{n: _plain(v) for n, v in zip(names, row)} for row in cur.fetchall()]
    conn = sqlite3.connect(f"file:{sqlite_path(db).resolve()}?mode=ro", uri=True, timeout=30)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(statement, params)]
    finally:
        conn.close()


def query_together(db: Path | str, *statements: str) -> list[list[dict[str, Any]]]:
    """Rows of each read-only statement (no parameters), all read in one snapshot: one read
    transaction on SQLite, one ``REPEATABLE READ`` transaction on PostgreSQL, so rows of several
    tables agree even while another process writes. Empty lists while the tables do not exist."""
    if not _created(db):
        return [[] for _ in statements]
    if is_postgres(db):
        import psycopg

        with _postgres(db) as conn:
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            conn.read_only = True
            found = []
            for statement in statements:
                cur = conn.execute(_postgres_sql(statement))
                names = [c.name for c in cur.description]
                found.append([{n: _plain(v) for n, v in zip(names, row)} for row in cur.fetchall()])
            return found
    conn = sqlite3.connect(f"file:{sqlite_path(db).resolve()}?mode=ro", uri=True, timeout=30)
    conn.row_factory = sqlite3.Row
    try:
        conn.execute("BEGIN")  # the snapshot is taken at the first read and kept to the end
        return [[dict(r) for r in conn.execute(statement)] for statement in statements]
    finally:
        conn.close()


def drop(db: Path | str) -> None:
    """Remove the store at ``db``: a PostgreSQL store's schema (if any), a SQLite file and its sidecars."""
    if is_postgres(db):
        import psycopg

        where = parse(str(db))
        with psycopg.connect(where.conninfo, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {where.schema} CASCADE")
        return
    path = sqlite_path(db)
    for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm"), Path(f"{path}-journal")):
        p.unlink(missing_ok=True)


def execute(db: Path | str, statement: str, *params: Any) -> list[tuple]:
    """Run one statement on a connection of its own and commit; returns its rows as tuples."""
    if is_postgres(db):
        with _postgres(db) as conn:
            cur = conn.execute(_postgres_sql(statement), params)
            rows = cur.fetchall() if cur.description else []
            return [tuple(_plain(v) for v in row) for row in rows]
    conn = sqlite3.connect(sqlite_path(db))
    try:
        with conn:
            return conn.execute(statement, params).fetchall()
    finally:
        conn.close()


def _order(db: Path | str, table: str) -> str:
    """Insertion order: SQLite's rowid; on PostgreSQL the key (tables without one: every column)."""
    if not is_postgres(db):
        return "rowid"
    keys = {"meta": "key", "runs": "run_id", "run_inputs": "run_id", "definitions": "fingerprint",
            "steps": "run_id, seq", "outputs": "run_id, seq", "checkpoints": "checkpoint_id", "events": "event_id",
            "run_counts": "status, slot"}
    return keys[table]


def dump(db: Path | str) -> dict[str, list[tuple]]:
    """Every row of every relaypoint table: two dumps are equal only if nothing at all was written
    between them."""
    tables = list(TABLES) + (["run_counts"] if is_postgres(db) else [])
    return {t: [tuple(r.values()) for r in query(db, f"SELECT * FROM {t} ORDER BY {_order(db, t)}")] for t in tables}
