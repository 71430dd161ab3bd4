"""A fixed store for the console's tests, snapshots and screenshots: ``build_fixture_store``.

Every run is really executed by the runtime, with an injected clock and injected run ids, so the
store (and what the console shows of it, at :data:`CONSOLE_NOW`) is the same on every build.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from relaypoint import Runtime, Workflow
from relaypoint.workflow import Context

import stores

START = datetime(2026, 3, 14, 9, 0, tzinfo=UTC)
CONSOLE_NOW = datetime(2026, 3, 14, 11, 30, tzinfo=UTC)
"""The console's clock in snapshots: a while after the last fixture run."""


class FixtureClock:
    """A clock that moves only when told to (:meth:`advance`), so the recorded times do not
    depend on how often the runtime reads the clock."""

    def __init__(self, start: datetime = START) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, minutes: float = 0, seconds: float = 0) -> None:
        """Move the time forward."""
        self.now += timedelta(minutes=minutes, seconds=seconds)


CLOCK = FixtureClock()
"""The clock of the store being built; the fixture's steps advance it to take time."""


def counter_ids(prefix: str = "fixture") -> Callable[[], str]:
    """Run ids from a counter, hashed so they look like real ids (distinct first 8 characters)."""
    counter = itertools.count(1)
    return lambda: hashlib.sha256(f"{prefix}-{next(counter)}".encode()).hexdigest()[:16]


def fixed_clock(now: datetime = CONSOLE_NOW) -> Callable[[], datetime]:
    """A clock that always says ``now`` (the console's, in snapshots)."""
    return lambda: now


publish = Workflow("publish-post")


@publish.step
def draft(ctx: Context) -> dict[str, Any]:
    topic = ctx.input.get("topic", "untitled")
    CLOCK.advance(seconds=4)
    if ctx.input.get("fail"):
        raise ValueError(f"no sources found for {topic!r}")
    body = (f"# {topic.title()}\n\nThis week we shipped durable runs on a single SQLite file.\n"
            "Runs survive crashes, pause for a person, and can be forked from any step.")
    return {"title": topic.title(), "body": body, "words": len(body.split()), "tags": ["release", "sqlite"]}


@publish.step(approval=True)
def review(ctx: Context) -> dict[str, Any]:
    post = ctx.results["draft"]
    CLOCK.advance(seconds=2)
    return {"title": post["title"], "summary": post["body"].splitlines()[2], "reading_minutes": 1,
            "checks": {"spelling": "ok", "links": "ok"}}


@publish.step
def publish_post(ctx: Context) -> dict[str, Any]:
    CLOCK.advance(seconds=1.5)
    return {"url": f"https://blog.example.invalid/{ctx.run_id[:8]}", "published": True}


intake = Workflow("ticket-intake")


@intake.step
def classify(ctx: Context) -> dict[str, Any]:
    CLOCK.advance(seconds=0.8)
    return {"category": "billing", "confidence": 0.82}


@intake.step
def route(ctx: Context) -> dict[str, Any]:
    team = ctx.request_input("Which team owns this billing ticket? Answer with a JSON string, e.g. \"finance\".")
    return {"team": team}


WORKFLOWS = [publish, intake]


def build_fixture_store(path: str) -> dict[str, str]:
    """Fill a new store at ``path`` (a SQLite path or any store URL) with one run per interesting state; returns their ids by role:
    ``completed``, ``awaiting_approval``, ``awaiting_input``, ``failed``, ``rejected``,
    ``cancelled``, ``fork`` (queued, forked from ``completed`` at step ``review``).

    Process ids and the host name in events vary per process and machine; they are fixed to
    ``4242``/``fixture-host`` so what the console shows is identical on every build.
    """
    clock = CLOCK
    clock.now = START
    runs: dict[str, str] = {}
    with Runtime(path, WORKFLOWS, clock=clock, id_factory=counter_ids()) as rt:
        runs["completed"] = rt.start("publish-post", {"topic": "weekly update"})
        clock.advance(3)
        rt.approve(runs["completed"], by="alice", comment="reads well")
        clock.advance(1)
        rt.resume(runs["completed"])
        clock.advance(12)
        runs["failed"] = rt.start("publish-post", {"topic": "budget", "fail": True})
        clock.advance(9)
        runs["rejected"] = rt.start("publish-post", {"topic": "rumours"})
        clock.advance(4)
        rt.reject(runs["rejected"], "not something we announce", by="bob")
        clock.advance(15)
        runs["cancelled"] = rt.start("ticket-intake", {"ticket": 1041})
        clock.advance(2)
        rt.cancel(runs["cancelled"], by="carol")
        clock.advance(20)
        runs["awaiting_input"] = rt.start("ticket-intake", {"ticket": 1042})
        clock.advance(11)
        runs["awaiting_approval"] = rt.start("publish-post", {"topic": "release notes"})
        clock.advance(25)
        runs["fork"] = rt.fork(runs["completed"], "review", {"topic": "weekly update, take two"})
    fix_hosts(path)
    return runs


def build_research_store(path: str) -> str:
    """Fill a new store at ``path`` with one run of the bundled ``research`` example (PydanticAI
    agents on offline, priced models) waiting for approval at ``revise``, its writer's model
    requests and tool calls recorded, at fixed times under a fixed id; returns the id."""
    from relaypoint.examples import research  # PydanticAI: imported by the tests that show it only

    CLOCK.now = START
    with Runtime(path, research.workflows, clock=CLOCK, id_factory=counter_ids("research")) as rt:
        return rt.start("research")


def fix_hosts(db: str) -> None:
    """Set ``pid`` and ``host`` to ``4242``/``fixture-host`` in every event detail that names them."""
    if not stores.is_postgres(db):
        stores.execute(db, "UPDATE events SET detail = json_set(detail, '$.pid', 4242, '$.host', 'fixture-host') "
                           "WHERE json_extract(detail, '$.pid') IS NOT NULL")
        return
    for event in stores.query(db, "SELECT event_id, detail FROM events WHERE detail LIKE '%\"pid\"%'"):
        detail = json.loads(event["detail"])
        if "pid" in detail:  # the same keys in the same order, as SQLite's json_set leaves them
            detail.update(pid=4242, host="fixture-host")
            stores.execute(db, "UPDATE events SET detail = ? WHERE event_id = ?",
                           json.dumps(detail, ensure_ascii=False, separators=(",", ":")), event["event_id"])
