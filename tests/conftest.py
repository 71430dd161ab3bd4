"""Fixtures shared by the test modules. ``store_url``: a fresh store URL for each backend the
backend-neutral tests run against: SQLite, and PostgreSQL on the server named by
``RELAYPOINT_TEST_POSTGRES`` (default ``postgresql://postgres@127.0.0.1:5432/test``), each test in
a schema of its own, dropped afterwards. Without a server the PostgreSQL parameters are skipped,
saying how to point them at one; with ``CI`` set they fail instead."""

from __future__ import annotations

import functools
import os
import queue
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from relaypoint.store import RunStore, open_store

BACKENDS = ["sqlite", "postgres"]
POSTGRES_URL = os.environ.get("RELAYPOINT_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


TIMING_MODULES = frozenset({"test_races.py", "test_crash.py", "test_crash_matrix.py", "test_pattern_crash_matrix.py",
                            "test_multihost.py", "test_pattern_durability.py", "test_postgres_store.py",
                            "test_postgres_notify.py", "test_threads.py"})
"""Tests of real processes racing, crashing and taking over expired leases, of sub-second leases
kept by heartbeats, of notifications' timing, and of threads taking turns on one store. Under pytest-xdist (pyproject's addopts) they
form one group (``--dist loadgroup``) that one worker runs first (the biggest group goes first)
and one test at a time: beside the other worker's ordinary tests, never beside each other."""


@pytest.hookimpl(tryfirst=True)  # before xdist's, which starts the workers
def pytest_cmdline_main(config: pytest.Config) -> None:
    """With ``-s`` (the tests' own output wanted: the soak commands of docs/reference/reliability.md) or ``--pdb``, the tests
    run in this process: xdist's workers would swallow the output, and refuse ``--pdb``."""
    if config.getoption("capture") == "no" or config.getoption("usepdb"):
        config.option.numprocesses = 0


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in TIMING_MODULES:
            item.add_marker(pytest.mark.xdist_group("timing"))


@functools.cache
def postgres_problem() -> str | None:
    """Why the test PostgreSQL server cannot be used (None: it answers)."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install -e '.[test]')"
    try:
        psycopg.connect(POSTGRES_URL, connect_timeout=3).close()
    except psycopg.Error as e:
        return f"{' '.join(str(e).split())[:200]}"
    return None


def postgres_server() -> str:
    """The test server's URL, or skip (fail under CI) when it does not answer."""
    problem = postgres_problem()
    if problem is not None:
        why = (f"PostgreSQL at {POSTGRES_URL} cannot be used ({problem}); set RELAYPOINT_TEST_POSTGRES to the URL "
               "of a server (trust or ~/.pgpass authentication) to run the PostgreSQL tests")
        if os.environ.get("CI"):
            pytest.fail(why + " [CI is set: PostgreSQL is required]", pytrace=False)
        pytest.skip(why)
    return POSTGRES_URL


def drop_schema(schema: str) -> None:
    import psycopg

    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


class SchemaDropper:
    """Drops test schemas on a thread of its own, so a test's teardown does not wait for its
    ``DROP SCHEMA ... CASCADE`` (a new connection and a commit: about 30 ms on an idle machine).
    :meth:`close` waits until every schema handed over is dropped, and raises the first error."""

    BATCH = 8  # schemas per statement (each takes a lock per object it holds: a few dozen)

    def __init__(self) -> None:
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, name="schema-dropper", daemon=True)
        self._thread.start()

    def drop(self, schema: str) -> None:
        """Drop ``schema`` (if it exists) soon."""
        self._queue.put(schema)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()
        if self._errors:
            raise self._errors[0]

    def _run(self) -> None:
        import psycopg

        conn: psycopg.Connection | None = None
        done = False
        while not done:
            batch = [self._queue.get()]
            while len(batch) < self.BATCH and not self._queue.empty():
                batch.append(self._queue.get())
            done = None in batch
            names = [s for s in batch if s is not None]
            if not names:
                continue
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(POSTGRES_URL, autocommit=True)
                conn.execute(f"DROP SCHEMA IF EXISTS {', '.join(names)} CASCADE")
            except psycopg.Error as e:
                self._errors.append(e)
        if conn is not None:
            conn.close()


@pytest.fixture(scope="session")
def schema_dropper() -> Iterator[SchemaDropper]:
    """The session's :class:`SchemaDropper`; every schema it was given is gone when the session ends."""
    dropper = SchemaDropper()
    yield dropper
    dropper.close()


@pytest.fixture
def postgres_schema(schema_dropper: SchemaDropper) -> Iterator[str]:
    """A schema name of its own on the test server (``relaypoint_t<hex>``), dropped after the test
    (by the session's :class:`SchemaDropper`, while the next tests run)."""
    postgres_server()
    schema = f"relaypoint_t{uuid.uuid4().hex[:16]}"
    yield schema
    schema_dropper.drop(schema)


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a store not yet created (open it with ``open_store(url, create=True)``)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('store')}/runs.db"
    elif request.param == "postgres":
        schema = request.getfixturevalue("postgres_schema")
        yield f"{postgres_server()}?schema={schema}"
    else:
        raise AssertionError(f"no store for backend {request.param!r}")


@pytest.fixture(params=BACKENDS)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The ``--db`` of a store not yet created, for tests of relaypoint's behaviour on each backend:
    the path of ``store.db`` in the test's directory (the file helpers.DB names; a plain path, the
    form users give, which the console's status line and snapshots show as is), or the test
    server's URL with a schema of the test's own, dropped afterwards."""
    if request.param == "sqlite":
        yield str(tmp_path / "store.db")
    elif request.param == "postgres":
        schema = request.getfixturevalue("postgres_schema")
        yield f"{postgres_server()}?schema={schema}"
    else:
        raise AssertionError(f"no store for backend {request.param!r}")


@pytest.fixture
def store(store_url: str) -> Iterator[RunStore]:
    """A new, empty store at ``store_url``, closed after the test."""
    opened = open_store(store_url, create=True)
    yield opened
    opened.close()
