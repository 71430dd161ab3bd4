"""Fixtures shared by the test modules. ``store_url``: a fresh store URL for each backend the
backend-neutral tests run against (SQLite today; a PostgreSQL parameter joins with its backend)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from relaypoint.store import RunStore, open_store

BACKENDS = ["sqlite"]


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The URL of a store not yet created (open it with ``open_store(url, create=True)``)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('store')}/runs.db"
    raise AssertionError(f"no store for backend {request.param!r}")


@pytest.fixture
def store(store_url: str) -> Iterator[RunStore]:
    """A new, empty store at ``store_url``, closed after the test."""
    opened = open_store(store_url, create=True)
    yield opened
    opened.close()
