"""The tables described once (relaypoint.store.schema) are the tables a store has: made new, and
upgraded from the first schema version, on both backends. A migration that adds, drops or changes a
column without the description following (or the other way round) fails here."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from relaypoint.store import open_store
from relaypoint.store.schema import TABLES, Column, Table
from relaypoint.store.url import parse

# How each backend stores a column of each kind: SQLite's type affinity, PostgreSQL's type and collation.
SQLITE_AFFINITY = {"key": "TEXT", "text": "TEXT", "int": "INTEGER", "id": "INTEGER", "time": "TEXT"}
POSTGRES_TYPE = {"key": ("text", "C"), "text": ("text", None), "int": ("bigint", None), "id": ("bigint", None),
                 "time": ("timestamp with time zone", None)}


def described(table: Table, backend: str) -> list[tuple]:
    def one(c: Column) -> tuple:
        kind = SQLITE_AFFINITY[c.kind] if backend == "sqlite" else POSTGRES_TYPE[c.kind]
        return c.name, kind, c.not_null or c.name in table.primary_key, c.default, c.name in table.primary_key

    return [one(c) for c in table.columns]


def sqlite_columns(path: Path, table: str) -> list[tuple]:
    def affinity(declared: str) -> str:  # SQLite's rules, as far as the store's declarations go
        return "INTEGER" if "INT" in declared.upper() else "TEXT" if "TEXT" in declared.upper() else declared

    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(f"PRAGMA table_info({table})").fetchall()
    finally:
        conn.close()
    return [(name, affinity(declared), bool(notnull) or pk > 0, default, pk > 0)
            for _, name, declared, notnull, default, pk in rows]


def postgres_columns(url: str, table: str) -> list[tuple]:
    import psycopg

    where = parse(url)
    with psycopg.connect(where.conninfo) as conn:
        rows = conn.execute(
            "SELECT c.column_name, c.data_type, c.collation_name, c.is_nullable = 'NO', c.column_default, "
            "EXISTS (SELECT 1 FROM information_schema.key_column_usage k JOIN information_schema.table_constraints t "
            "USING (constraint_schema, constraint_name) WHERE t.constraint_type = 'PRIMARY KEY' "
            "AND k.table_schema = c.table_schema AND k.table_name = c.table_name AND k.column_name = c.column_name) "
            "FROM information_schema.columns c WHERE c.table_schema = %s AND c.table_name = %s "
            "ORDER BY c.ordinal_position", (where.schema, table)).fetchall()
    return [(name, (kind, collation), not_null, default.removesuffix("::text") if default else None, pk)
            for name, kind, collation, not_null, default, pk in rows]


def columns(url: str, table: str) -> list[tuple]:
    where = parse(url)
    return sqlite_columns(Path(where.path), table) if where.backend == "sqlite" else postgres_columns(url, table)


def first_version_store(url: str) -> None:
    """A store as schema version 1 of its backend left it (no runs)."""
    where = parse(url)
    if where.backend == "sqlite":
        from relaypoint.store.migrations.sqlite import MIGRATIONS

        conn = sqlite3.connect(where.path, isolation_level=None)
        conn.execute('CREATE TABLE "meta" ("key" TEXT PRIMARY KEY, "value" TEXT)')
        conn.execute("INSERT INTO meta (key, value) VALUES ('app', 'relaypoint'), ('schema_version', '1')")
        for statement in MIGRATIONS[0]:
            conn.execute(statement)
        conn.close()
        return
    import psycopg

    from relaypoint.store.migrations.postgres import MIGRATIONS

    with psycopg.connect(where.conninfo, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {where.schema}")
        conn.execute(f"SET search_path = {where.schema}")
        with conn.transaction():
            for statement in MIGRATIONS[0](where.schema):
                conn.execute(statement)
            conn.execute("INSERT INTO meta (key, value) VALUES ('app', 'relaypoint'), ('schema_version', '1')")


@pytest.mark.parametrize("made", ["new", "upgraded"])
def test_a_store_has_the_tables_the_schema_describes(store_url, made):
    if made == "upgraded":
        first_version_store(store_url)
    open_store(store_url, create=made == "new").close()
    backend = parse(store_url).backend
    for table in TABLES:
        assert columns(store_url, table.name) == described(table, backend), table.name


def test_the_comparison_sees_a_column_the_description_lacks(store_url):
    open_store(store_url, create=True).close()
    backend = parse(store_url).backend
    where = parse(store_url)
    if backend == "sqlite":
        conn = sqlite3.connect(where.path)
        conn.execute("ALTER TABLE steps ADD COLUMN extra TEXT")
        conn.commit()
        conn.close()
    else:
        import psycopg

        with psycopg.connect(where.conninfo, autocommit=True) as conn:
            conn.execute(f"ALTER TABLE {where.schema}.steps ADD COLUMN extra text")
    steps = next(t for t in TABLES if t.name == "steps")
    assert columns(store_url, "steps") != described(steps, backend)
    assert columns(store_url, "steps")[:-1] == described(steps, backend)
