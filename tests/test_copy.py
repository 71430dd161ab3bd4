"""``relaypoint copy``: a store copied SQLite -> PostgreSQL -> SQLite with every run identical (the
CLI's ``show --json`` and ``events --json``, and every raw row), refusals with nothing written,
whole runs only after an interrupted copy, ids renumbered consistently in a destination that has
its own, and copied runs that go on in the destination (approved, answered, resumed).

The source is a real store made by ``relaypoint demo`` (completed, paused for approval and for
input, failed, rejected, cancelled, forked, patterns' appended executions, runs SIGKILLed mid-step)
plus an answered input and a fork that inherits an approval.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from relaypoint import Runtime
from relaypoint.cli import cli
from relaypoint.clock import utcnow
from relaypoint.copying import CopyRefused, copy_runs
from relaypoint.demo import build_demo, workflows
from relaypoint.models import Lease
from relaypoint.status import RunStatus
from relaypoint.store import Change, NewRun, RunStore, RunUpdate, open_store
from relaypoint.store.schema import COPIED_TABLES

from conftest import postgres_server
from helpers import one_line_error, relaypoint
from procs import kill
from relaypoint.store.url import parse
from test_drift_and_delete import start_slow, wait_for_running


@pytest.fixture(scope="module")
def rich(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, str]]:
    """A SQLite store holding a run in every state (see the module's docstring): (URL, label -> id)."""
    base = tmp_path_factory.mktemp("rich")
    tree = base / "tree"  # a small tree to audit: the demo's runs stay quick
    tree.mkdir()
    (tree / "mod.py").write_text('"""A module."""\n\n\ndef f():\n    # TODO: more\n    return 1\n')
    url = f"sqlite:///{base}/source.db"
    runs = build_demo(url, root=str(tree))
    with Runtime(url, workflows) as rt:
        rid = rt.start("repo-audit", {"root": str(tree), "ask_title": True})
        rt.respond(rid, "Answered title", by="reviewer")  # goes on to the approval gate
        runs["answered"] = rid
        # Forked after its approved gate: the child inherits the approval (a reference to the parent's checkpoint).
        runs["fork_inheriting"] = rt.fork(runs["completed"], "publish", {"root": str(tree), "title": "Republished"})
    return url, runs


def ids_of(store: RunStore) -> list[str]:
    return [rid for _, rid in store.run_page(None, 10_000)]


def cli_json(url: str, *args: str) -> Any:
    result = CliRunner().invoke(cli, ["--db", url, *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def views(url: str) -> dict[str, tuple[Any, Any]]:
    """Each run's ``show --json`` and ``events --json``, by run id."""
    with open_store(url) as store:
        run_ids = ids_of(store)
    return {rid: (cli_json(url, "show", rid, "--json"), cli_json(url, "events", rid, "--json")) for rid in run_ids}


def copy(source: str, destination: str, *args: str) -> str:
    result = CliRunner().invoke(cli, ["copy", "--from", source, "--to", destination, *args])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture
def pg_url(postgres_schema: str) -> str:
    return f"{postgres_server()}?schema={postgres_schema}"


def test_round_trip_sqlite_postgres_sqlite_keeps_every_run_identical(rich, pg_url: str, tmp_path: Path) -> None:
    source, runs = rich
    back = f"sqlite:///{tmp_path}/back.db"
    out = copy(source, pg_url, "--batch", "4")  # several batches
    assert out.startswith("copied 15 runs (") and out.rstrip().endswith("; counts verified"), out
    assert "from sqlite:///" in out and "?schema=" in out
    copy(pg_url, back)

    before = views(source)
    assert set(before) == set(runs.values())
    assert views(pg_url) == before
    assert views(back) == before
    with open_store(source, readonly=True) as a, open_store(pg_url) as b, open_store(back) as c:
        rows = a.export_runs(ids_of(a))
        # Every raw row, value for value: times, JSON text as stored, ids, leases, lineage.
        assert b.export_runs(ids_of(a)) == rows == c.export_runs(ids_of(a))
        assert {tuple(sorted(a.row_counts(ids_of(a)).items()))} == {
            tuple(sorted(s.row_counts(ids_of(a)).items())) for s in (b, c)}
        assert a.count_by_status() == b.count_by_status() == c.count_by_status()
    # What the rich store holds is what the test claims to cover.
    by_id = {r.run_id: r for r in rows}
    statuses = {r.run["status"] for r in rows}
    assert statuses >= {"completed", "awaiting_approval", "awaiting_input", "failed", "rejected", "cancelled",
                        "queued", "interrupted"}
    assert any(s["parent_seq"] is not None for s in by_id[runs["panel_completed"]].steps)  # a pattern's children
    assert any(c["decision"] == "responded" for c in by_id[runs["answered"]].checkpoints)
    fork = by_id[runs["fork_inheriting"]]
    assert fork.run["parent_run_id"] == runs["completed"]
    assert any('"inherited_from"' in (c["state"] or "") for c in fork.checkpoints)


def test_copy_refuses_a_destination_holding_any_of_the_runs(rich, pg_url: str) -> None:
    source, runs = rich
    copy(source, pg_url)
    with open_store(pg_url) as dst:
        dst_ids = ids_of(dst)
        with dst.transaction():
            dst.delete_runs([r for r in dst_ids if r != runs["failed"]])
        before = dst.row_counts(dst_ids)
    result = CliRunner().invoke(cli, ["copy", "--from", source, "--to", pg_url])
    assert result.exit_code == 1
    assert f"already holds 1 of the 15 runs to copy ({runs['failed']}); nothing was copied" in result.output
    with open_store(pg_url) as dst:
        assert dst.row_counts(dst_ids) == before and ids_of(dst) == [runs["failed"]]
    # --skip-existing copies the others; the copy is then whole.
    assert "copied 14 runs" in copy(source, pg_url, "--skip-existing")
    assert views(pg_url) == views(source)


def test_copy_into_itself_is_refused(rich) -> None:
    source, _ = rich
    result = CliRunner().invoke(cli, ["copy", "--from", source, "--to", source])
    assert result.exit_code == 1 and "already holds 15 of the 15 runs" in result.output


def executing_source(tmp_path: Path) -> tuple[str, datetime]:
    """A source store holding one run executing on another host (its lease 5 minutes ahead), and now."""
    source = f"sqlite:///{tmp_path}/live.db"
    now = utcnow()
    with open_store(source, create=True) as store:
        store.commit(Change("live0001", now, run=None, new=NewRun(
            run_id="live0001", workflow="w", status=RunStatus.RUNNING, input="{}", definition="{}",
            fingerprint="f", created_at=now, steps_total=1,
            lease=Lease(token="t", pid=1, host="elsewhere", expires_at=now + timedelta(minutes=5), heartbeat_at=now))))
    return source, now


def test_copy_refuses_a_run_executing_in_the_source(tmp_path: Path, store_url: str) -> None:
    source, now = executing_source(tmp_path)
    with pytest.raises(CopyRefused, match=r"1 run is executing in .* \(live0001\); a copy made mid-execution"):
        with open_store(source, readonly=True) as src, open_store(store_url, create=True) as dst:
            copy_runs(src, dst)
    with open_store(store_url) as dst:
        assert ids_of(dst) == []
    # Once its lease has expired (its process is gone) the run is copied as it stands.
    with open_store(source) as store:
        store.commit(Change("live0001", now, run=RunUpdate(
            lease=Lease(token="t", pid=1, host="elsewhere", expires_at=now, heartbeat_at=now), touch=False)))
    with open_store(source, readonly=True) as src, open_store(store_url) as dst:
        assert copy_runs(src, dst).runs == 1
        assert dst.export_runs(["live0001"]) == src.export_runs(["live0001"])


def made(url: str) -> bool:
    """Whether anything is at ``url``: the SQLite file, or the PostgreSQL schema."""
    where = parse(url)
    if where.backend == "sqlite":
        return Path(where.path).exists()
    import psycopg

    with psycopg.connect(where.conninfo) as conn:
        return conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (where.schema,)).fetchone() is not None


def test_a_copy_that_copies_nothing_makes_no_destination(tmp_path: Path, store_url: str) -> None:
    source, _ = executing_source(tmp_path)
    line = one_line_error(relaypoint(tmp_path, "copy", "--from", source, "--to", store_url, db=None))
    assert "1 run is executing in" in line and line.endswith("nothing was copied")
    assert not made(store_url)
    empty = f"sqlite:///{tmp_path}/empty.db"
    open_store(empty, create=True).close()
    done = relaypoint(tmp_path, "copy", "--from", empty, "--to", store_url, db=None)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"nothing to copy: {empty} holds no runs, so no store was made at {store_url}\n"
    assert not made(store_url)


def test_a_run_whose_process_was_killed_is_copied_at_once_as_list_calls_it_interrupted(db: str, tmp_path: Path) -> None:
    """One liveness rule: right after a kill -9, with most of its 30 s lease left, the run whose
    owner pid is dead on this host is what ``list`` calls it, interrupted, not executing."""
    proc = start_slow(tmp_path, db)
    try:
        rid = wait_for_running(db, "wait")
        line = one_line_error(relaypoint(tmp_path, "copy", "--from", db, "--to", f"{tmp_path}/early.db", db=None))
        assert "1 run is executing in " in line and f"({rid})" in line  # its process lives
    finally:
        kill(proc)
        proc.wait()
    destination = f"sqlite:///{tmp_path}/copy.db"
    done = relaypoint(tmp_path, "copy", "--from", db, "--to", destination, db=None)
    assert done.returncode == 0 and done.stdout.startswith("copied 1 run ("), done.stderr
    for url in (db, destination):
        listed = json.loads(relaypoint(tmp_path, "list", "--json", db=url).stdout)
        assert [(r["run_id"], r["status"]) for r in listed] == [(rid, "interrupted")], url


def test_an_interrupted_copy_leaves_whole_runs_and_is_finished_with_skip_existing(rich, store_url: str) -> None:
    source, _ = rich

    class Interrupting:
        """The destination, interrupted (as by Ctrl-C) after writing batch 2, before its commit."""

        def __init__(self, store: RunStore) -> None:
            self.store, self.imported = store, 0

        def import_runs(self, batch: Any, shift: Any = None) -> None:
            self.store.import_runs(batch, shift)
            self.imported += 1
            if self.imported == 2:
                raise KeyboardInterrupt

        def __getattr__(self, name: str) -> Any:
            return getattr(self.store, name)

    with open_store(source, readonly=True) as src, open_store(store_url, create=True) as dst:
        order = ids_of(src)
        with pytest.raises(KeyboardInterrupt):
            copy_runs(src, Interrupting(dst), batch=2)
        # The first batch whole, nothing of the second (written, then rolled back).
        assert ids_of(dst) == order[:2]
        assert dst.export_runs(order[:2]) == src.export_runs(order[:2])
        assert dst.row_counts(order[2:]) == dict.fromkeys(COPIED_TABLES, 0)
        with pytest.raises(CopyRefused, match=f"already holds 2 of the 15 runs to copy \\({order[0]}, {order[1]}\\)"):
            copy_runs(src, dst)
        report = copy_runs(src, dst, skip_existing=True, batch=5)
        assert (report.runs, report.skipped) == (13, 2)
        assert dst.export_runs(order) == src.export_runs(order)


def busy_destination(url: str, tree: str) -> Iterator[str]:
    """Fill ``url`` with runs of its own, so that the ids a copied run had are taken there."""
    with Runtime(url, workflows, create=True) as rt:
        for i in range(3):
            yield rt.start("repo-audit", {"root": tree, "title": f"own {i}"})


def test_ids_taken_in_the_destination_are_renumbered_with_every_reference(rich, store_url: str,
                                                                          tmp_path: Path) -> None:
    source, runs = rich
    tree = tmp_path / "tree"
    tree.mkdir()
    own = list(busy_destination(store_url, str(tree)))
    copy(source, store_url)
    with open_store(source, readonly=True) as src, open_store(store_url) as dst:
        assert sorted(ids_of(dst)) == sorted(own + ids_of(src))
        moved: dict[int, int] = {}
        for rid in ids_of(src):
            a, b = src.checkpoints(rid), dst.checkpoints(rid)
            assert len(a) == len(b)
            moved.update({x.checkpoint_id: y.checkpoint_id for x, y in zip(a, b)})
        assert any(k != v for k, v in moved.items())  # renumbered: the destination had ids 1.. of its own
        assert len(set(moved.values())) == len(moved)
        for rid in ids_of(src):
            for x, y in zip(src.checkpoints(rid), dst.checkpoints(rid)):
                if isinstance(x.state, dict) and "inherited_from" in x.state:
                    origin = x.state["inherited_from"]
                    assert y.state == {"inherited_from": {**origin, "checkpoint_id": moved[origin["checkpoint_id"]]}}
                    assert y.comment.startswith(f"inherited from checkpoint {moved[origin['checkpoint_id']]} of run ")
                    x = x.model_copy(update={"state": y.state, "comment": y.comment})
                assert y == x.model_copy(update={"checkpoint_id": moved[x.checkpoint_id]})
            for x, y in zip(src.events(rid), dst.events(rid), strict=True):
                detail = None if x.detail is None else dict(x.detail)
                for key in ("checkpoint_id", "parent_checkpoint_id"):
                    if detail is not None and isinstance(detail.get(key), int):
                        detail[key] = moved[detail[key]]
                assert (y.kind, y.at, y.step, y.actor, y.detail) == (x.kind, x.at, x.step, x.actor, detail)
        # The fork's inherited approval names the parent's approval as the destination numbers it.
        inherited = next(c for c in dst.checkpoints(runs["fork_inheriting"]) if c.decision == "approved")
        origin = inherited.state["inherited_from"]
        parent_cp = next(c for c in dst.checkpoints(runs["completed"]) if c.checkpoint_id == origin["checkpoint_id"])
        assert (parent_cp.kind, parent_cp.step, parent_cp.decision) == ("approval", "draft", "approved")
    # The destination's own runs are untouched and its new checkpoints get ids above every copied one.
    with Runtime(store_url, workflows) as rt:
        rid = rt.start("repo-audit", {"root": str(tree), "title": "after"})
        assert rt.get(rid).pending.checkpoint_id > max(moved.values())


def test_copied_ids_keep_their_order_across_runs_above_the_destination_s_own(rich, store_url: str,
                                                                             tmp_path: Path) -> None:
    """Every copied checkpoint and event is renumbered above the destination's own, in the order the
    source gave them across all the runs (the review queue and deadlines go by checkpoint id), over
    several batches: not only the runs whose ids clash."""
    source, _ = rich
    tree = tmp_path / "tree"
    tree.mkdir()
    list(busy_destination(store_url, str(tree)))
    with open_store(store_url) as dst:
        own = {rid: ([c.checkpoint_id for c in dst.checkpoints(rid)], [e.event_id for e in dst.events(rid)])
               for rid in ids_of(dst)}
    copy(source, store_url, "--batch", "4")

    def by_id(store: RunStore, run_ids: list[str], which: int) -> list[tuple[str, int]]:
        """Each run's checkpoints (which=0) or events (1), as (run, position in the run), in id order."""
        found = []
        for rid in run_ids:
            ids = [c.checkpoint_id for c in store.checkpoints(rid)] if which == 0 else \
                  [e.event_id for e in store.events(rid)]
            found += [(i, (rid, n)) for n, i in enumerate(ids)]
        return [where for _, where in sorted(found)]

    with open_store(source, readonly=True) as src, open_store(store_url) as dst:
        copied = ids_of(src)
        for which in (0, 1):
            assert by_id(dst, copied, which) == by_id(src, copied, which)
            top_own = max(i for ids in own.values() for i in ids[which])
            first = min((c.checkpoint_id for rid in copied for c in dst.checkpoints(rid)) if which == 0 else
                        (e.event_id for rid in copied for e in dst.events(rid)))
            assert first > top_own
        assert {rid: ([c.checkpoint_id for c in dst.checkpoints(rid)], [e.event_id for e in dst.events(rid)])
                for rid in own} == own  # the destination's own runs are untouched


def test_a_batch_whose_ids_the_destination_holds_is_numbered_above_them_in_order(rich, store_url: str,
                                                                                tmp_path: Path) -> None:
    """import_runs told to keep ids (as when another writer took some after the copy made room):
    the batch's ids go above every id there, in their order, the references with them."""
    source, runs = rich
    tree = tmp_path / "tree"
    tree.mkdir()
    list(busy_destination(store_url, str(tree)))
    pair = [runs["completed"], runs["fork_inheriting"]]  # a fork and its parent, in one batch
    with open_store(source, readonly=True) as src, open_store(store_url) as dst:
        top = max(c.checkpoint_id for rid in ids_of(dst) for c in dst.checkpoints(rid))
        with dst.transaction():
            dst.import_runs(src.export_runs(pair))
        before = [(c.checkpoint_id, rid, n) for rid in pair for n, c in enumerate(src.checkpoints(rid))]
        after = [(c.checkpoint_id, rid, n) for rid in pair for n, c in enumerate(dst.checkpoints(rid))]
        assert min(after)[0] == top + 1
        assert [where for *_, where in sorted((i, (rid, n)) for i, rid, n in after)] == \
            [where for *_, where in sorted((i, (rid, n)) for i, rid, n in before)]
        inherited = next(c for c in dst.checkpoints(runs["fork_inheriting"]) if c.decision == "approved")
        origin = inherited.state["inherited_from"]["checkpoint_id"]
        assert any(c.checkpoint_id == origin and c.step == "draft" for c in dst.checkpoints(runs["completed"]))


def test_copied_runs_go_on_in_the_destination(rich, store_url: str) -> None:
    source, runs = rich
    with open_store(store_url, create=True):
        pass
    copy(source, store_url)
    with Runtime(store_url, workflows) as rt:
        pending = rt.get(runs["awaiting_approval"]).pending
        rt.approve(runs["awaiting_approval"], by="reviewer", checkpoint_id=pending.checkpoint_id)
        assert rt.resume(runs["awaiting_approval"]) == RunStatus.COMPLETED
        rt.respond(runs["awaiting_input"], "A title", by="reviewer")
        assert rt.resume(runs["awaiting_input"]) == RunStatus.AWAITING_APPROVAL  # its report gate
        # The fork's approval, inherited in the source, holds in the destination: no pause.
        assert rt.resume(runs["fork_inheriting"]) == RunStatus.COMPLETED
        # A pattern's debate waiting for a person's turn takes each answer and goes on to the end.
        status, turns = RunStatus.AWAITING_INPUT, 0
        while status == RunStatus.AWAITING_INPUT and turns < 10:
            rt.respond(runs["panel_awaiting_input"], f"The findings hold ({turns}).", by="skeptic")
            status, turns = rt.resume(runs["panel_awaiting_input"]), turns + 1
        assert status == RunStatus.COMPLETED
    with Runtime(source, workflows) as rt:  # the source is only read
        assert rt.get(runs["awaiting_approval"]).status == RunStatus.AWAITING_APPROVAL


def test_copy_errors_are_one_line(rich, tmp_path: Path) -> None:
    source, _ = rich
    cases = {
        ("bogus://x", f"{tmp_path}/d.db"): "source bogus://x: unknown store URL scheme",
        (f"{tmp_path}/missing.db", f"{tmp_path}/d.db"): "no relaypoint store at",
        ("postgresql://postgres:secret@127.0.0.1:1/test", f"{tmp_path}/d.db"):
            "source postgresql://postgres:***@127.0.0.1:1/test: the PostgreSQL server at 127.0.0.1:1 refused",
        (source, "postgresql://postgres:secret@127.0.0.1:1/test"): "destination postgresql://postgres:***@",
    }
    for (src, dst), expected in cases.items():
        line = one_line_error(relaypoint(tmp_path, "copy", "--from", src, "--to", dst, db=None))
        assert expected in line and "secret" not in line, line
    assert not (tmp_path / "missing.db").exists()
