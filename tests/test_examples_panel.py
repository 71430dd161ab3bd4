"""The bundled ``panel`` example (every multi-agent pattern over a repository audit's findings) end to
end on a real store, its person-as-skeptic variant through the CLI, and the demo's panel runs: the
one SIGKILLed mid-debate resumes to the completed run's result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from relaypoint import Runtime
from relaypoint.demo import DEMO_APP, build_demo
from relaypoint.demo import workflows as demo_workflows
from relaypoint.examples import panel
from relaypoint.examples.panel import EDIT_LINES, borda, gather_findings, replan_fixes, struck_by
from relaypoint.workflow import Context
from procs import Sandbox

PANEL_APP = "relaypoint.examples.panel:workflows"


def body(lines: int) -> str:
    """The body of a function that is ``lines`` lines long with its ``def`` line."""
    return "".join(f"    x{i} = {i}\n" for i in range(lines - 2)) + "    return 0\n"


def indented(text: str) -> str:
    return "".join("    " + line for line in text.splitlines(True))


FILES = {
    "broken.py": '"""Broken."""\ndef broken(:\n    pass\n',
    "pkg/__init__.py": '"""Package."""\n',
    "pkg/engine.py": '"""Engine."""\n\n\ndef drive():\n' + body(130),
    "pkg/worker.py": '"""Worker."""\n\n\nclass Worker:\n    """A worker."""\n\n    def run(self):\n' + indented(body(70)),
    "tools.py": "# TODO: name this module\n\n\ndef edge():\n" + body(56) + "\n\ndef helper():\n    return 1\n",
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A small repository: a file that does not parse, functions of 130, 70 and 56 lines, a TODO,
    4 of 9 modules, classes and functions documented (44%)."""
    root = tmp_path / "proj"
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def tree(rt: Runtime, run_id: str) -> list[tuple[str, int, str | None, Any]]:
    """Every execution of the run in tree order as (name, iteration, agent, output)."""
    return [(t.name, t.iteration, t.agent, t.output) for t in rt.get(run_id).tasks]


def children(rt: Runtime, run_id: str, name: str) -> list[Any]:
    """The executions of pattern ``name`` (its group row's children), in order."""
    return [t for t in rt.get(run_id).tasks if t.name == name and t.parent is not None]


def test_the_findings_are_the_audits_most_severe_first(project):
    found = gather_findings(str(project))
    assert [(f["id"], f["kind"], f["severity"]) for f in found["findings"]] == [
        ("F1", "unparsable", 3.0), ("F2", "docstrings", 2.78), ("F3", "long_function", 2.6),
        ("F4", "long_function", 1.4), ("F5", "long_function", 1.12), ("F6", "todo", 1.0)]
    assert found["findings"][2]["says"] == "`drive` in pkg/engine.py is 130 lines (2.6x the 50-line limit)"
    assert found["findings"][3]["name"] == "Worker.run"
    assert [f["id"] for f in gather_findings(str(project), limit=2)["findings"]] == ["F1", "F2"]
    assert gather_findings(str(project), limit=2)["considered"] == 6


def test_the_panel_runs_every_pattern_end_to_end_on_a_real_store(db, project):
    with Runtime(db, panel.workflows) as rt:
        rid = rt.start("panel", {"root": str(project)})
        run = rt.get(rid)
        assert run.status == "completed", run.error
        out = {t.name: t.output for t in run.tasks if t.parent is None}

        # argue: the skeptic strikes the TODO, then the 56-line function, then concedes (70 lines is 1.4x)
        turns = [(t.iteration, t.agent, t.output.get("strike", "-")) for t in children(rt, rid, "argue")]
        assert turns == [(1, "advocate", "-"), (1, "skeptic", "F6"), (2, "advocate", "-"), (2, "skeptic", "F5"),
                         (3, "advocate", "-"), (3, "skeptic", None), (4, "judge", "-")]
        assert out["argue"]["matter"] == ["F1", "F2", "F3", "F4"]
        assert out["argue"]["says"] == "4 of 6 findings matter: F1, F2, F3, F4; struck F6, F5"
        assert out["argue"]["struck"][1] == {"id": "F5", "round": 2, "why": (
            "56 lines is within 12% of the limit; splitting buys little")}

        # rank: three rankings, Borda points 4-3-2-1
        assert out["rank"]["votes"] == {"impact": ["F1", "F2", "F3", "F4"], "effort": ["F1", "F2", "F4", "F3"],
                                        "reach": ["F2", "F1", "F3", "F4"]}
        assert out["rank"]["result"] == {"ranking": ["F1", "F2", "F3", "F4"],
                                         "points": {"F1": 11, "F2": 10, "F3": 5, "F4": 4}}

        # triage: routing decisions alternate search and fix, both go idle, review ends it
        decisions = [t.output["choice"] for t in children(rt, rid, "triage") if t.agent == "route"]
        assert decisions == ["search", "fix"] * 4 + ["review", None]
        calls = [(t.agent, t.output if t.output is None else t.output.get("finding"))
                 for t in children(rt, rid, "triage") if t.agent != "route"]
        assert calls == [("search", "F1"), ("fix", "F1"), ("search", "F2"), ("fix", "F2"), ("search", "F3"),
                         ("fix", "F3"), ("search", None), ("fix", None), ("review", None)]
        assert [f["where"] for f in out["triage"]["fixes"]] == ["broken.py", "every module", "pkg/engine.py:4"]
        assert out["triage"]["fixes"][2]["span"] == [4, 133]
        assert out["triage"]["says"] == "3 fixes proposed: F1, F2, F3"

        # fixes: the three edits are independent (subtasks 1-3, the checks 4-6); the 130-line edit
        # fails (more than 40 lines), the re-plan (past ordinal 6) splits it into 4 chunks
        sub = children(rt, rid, "fixes")
        assert [(t.iteration, t.agent, t.options.get("task"), t.status) for t in sub] == [
            (1, "plan", None, "completed"), (1, "edit", "edit-F1", "completed"), (2, "edit", "edit-F2", "completed"),
            (3, "edit", "edit-F3", "failed"), (7, "replan", None, "completed"),
            (7, "check", "check-F1", "completed"), (8, "check", "check-F2", "completed"),
            (9, "edit", "edit-F3.1", "completed"), (10, "edit", "edit-F3.2", "completed"),
            (11, "edit", "edit-F3.3", "completed"), (12, "edit", "edit-F3.4", "completed"),
            (13, "check", "check-F3", "completed")]
        assert sub[3].error == ("ValueError: pkg/engine.py:4: lines 4-133 are more than one edit rewrites (40); "
                                "split the edit")
        assert out["fixes"]["check-F3"]["edits"] == ["pkg/engine.py lines 4-43", "pkg/engine.py lines 44-83",
                                                     "pkg/engine.py lines 84-123", "pkg/engine.py lines 124-133"]

        # summary: two sections a pass until the score reaches 0.9
        passes = [(t.output["pass"], t.output["score"]) for t in children(rt, rid, "summary")]
        assert passes == [(1, 0.4), (2, 0.8), (3, 1.0)]
        markdown = out["summary"]["markdown"]
        assert markdown.startswith("# Panel review of proj\n\n## Findings\n\n- **F1** broken.py does not parse")
        for line in ["## Debate", "- F6 struck in round 1: a TODO is a reminder, not a defect",
                     "1. F1 (11 points)", "- F3 in pkg/engine.py:4: split `drive` (130 lines) into 3 functions",
                     "- edit-F3.4: pkg/engine.py lines 124-133", "- check-F3: 4 edits recorded",
                     f"Re-planned: an edit rewrites at most {EDIT_LINES} lines"]:
            assert line in markdown


def test_runs_of_the_panel_are_deterministic_and_the_threshold_ends_the_loop(db, project):
    with Runtime(db, panel.workflows) as rt:
        first, second = (rt.start("panel", {"root": str(project)}) for _ in range(2))
        assert tree(rt, first) == tree(rt, second)
        lower = rt.start("panel", {"root": str(project), "threshold": 0.8, "max_fixes": 1})
        assert [t.output["score"] for t in children(rt, lower, "summary")] == [0.4, 0.8]
        assert [f["finding"] for f in rt.step_output(lower, "triage")["fixes"]] == ["F1"]


def test_a_max_fixes_out_of_range_fails_the_run_in_one_line(db, project):
    with Runtime(db, panel.workflows) as rt:
        run = rt.get(rt.start("panel", {"root": str(project), "max_fixes": 9}))
    assert run.status == "failed"
    assert run.tasks[0].error == "ValueError: max_fixes must be 1 to 8, not 9"


def test_a_person_as_the_skeptic_pauses_each_round_and_resumes_after_respond(tmp_path, project):
    """Each command is its own process: the pause survives them; answering what the automated
    skeptic said gives the automated panel's result."""
    with Runtime(str(tmp_path / "auto.db"), panel.workflows) as rt:
        auto = rt.start("panel", {"root": str(project)})
        said = [t.output for t in children(rt, auto, "argue") if t.agent == "skeptic"]
        expected = tree(rt, auto)
    box = Sandbox(tmp_path)
    started = box.run("start", "panel-with-person", "--app", PANEL_APP, "--input", json.dumps({"root": str(project)}))
    assert started.code == 0, started.err
    rid = started.out.strip()
    for round_, answer in enumerate(said, 1):
        with Runtime(str(box.db), create=False) as rt:
            run = rt.get(rid)
            assert run.status == "awaiting_input"
            assert run.pending.reason == f"{panel.SKEPTIC_PROMPT} (argue, round {round_}, as 'skeptic')"
            waiting = [t for t in children(rt, rid, "argue") if t.status == "awaiting_input"]
            assert [(t.iteration, t.agent) for t in waiting] == [(round_, "skeptic")]
        assert box.run("respond", rid, "--value", json.dumps(answer), "--by", "ana").code == 0
        resumed = box.run("resume", rid, "--app", PANEL_APP)
        assert resumed.code == 0 and not resumed.leaks(), resumed.err
    with Runtime(str(box.db), create=False) as rt:
        assert rt.get(rid).status == "completed"
        assert tree(rt, rid) == expected
        advocate_calls = [t.attempts for t in children(rt, rid, "argue") if t.agent == "advocate"]
        assert advocate_calls == [1, 1, 1]  # the rounds before each pause never ran again


def test_a_person_may_answer_with_a_bare_id_or_concede():
    assert struck_by("F4") == "F4" and struck_by(" F4 ") == "F4"
    assert struck_by({"strike": "F2", "says": "why"}) == "F2"
    assert struck_by(None) is None and struck_by({"strike": None}) is None and struck_by(3) is None


def test_borda_counts_rankings_and_breaks_ties_by_the_first_voters_order():
    assert borda({"a": ["x", "y"], "b": ["y", "x"]}) == {"ranking": ["x", "y"], "points": {"x": 3, "y": 3}}
    assert borda({}) == {"ranking": [], "points": {}}


def test_the_replan_splits_every_unfinished_long_edit_and_rewires_its_check():
    def task(tid, agent, span=None, after=(), status="pending"):
        return {"id": tid, "agent": agent, "input": {"finding": tid[-2:], "path": "a.py", "span": span},
                "after": list(after), "status": status}

    plan = [task("edit-F1", "edit", [1, 10], status="completed"), task("check-F1", "check", after=["edit-F1"],
                                                                       status="completed"),
            task("edit-F2", "edit", [5, 90], status="failed"), task("check-F2", "check", after=["edit-F2"]),
            task("edit-F3", "edit", [1, 41]), task("check-F3", "check", after=["edit-F3"])]
    ctx = Context(run_id="r", step="fixes", attempt=1, idempotency_key="k", input={}, results={},
                  state={"plan": plan})
    new = replan_fixes(ctx)
    assert [(t["id"], t["input"]["span"], t["after"]) for t in new] == [
        ("edit-F2.1", [5, 44], []), ("edit-F2.2", [45, 84], []), ("edit-F2.3", [85, 90], []),
        ("check-F2", None, ["edit-F2.1", "edit-F2.2", "edit-F2.3"]),
        ("edit-F3.1", [1, 40], []), ("edit-F3.2", [41, 41], []), ("check-F3", None, ["edit-F3.1", "edit-F3.2"])]


# ---- the demo's panel runs ----------------------------------------------------------------------


@pytest.fixture
def demo(tmp_path, project) -> tuple[Path, dict[str, str]]:
    """A demo store (``relaypoint demo``'s runs, about a second to make) auditing the test project."""
    db = Sandbox(tmp_path).db
    return db, build_demo(str(db), root=str(project))


def test_the_demo_has_a_completed_panel_one_killed_mid_debate_and_one_awaiting_a_person(demo):
    db, runs = demo
    with Runtime(str(db), create=False) as rt:
        assert rt.get(runs["panel_completed"]).status == "completed"
        assert rt.get(runs["panel_interrupted"]).status == "interrupted"
        killed = children(rt, runs["panel_interrupted"], "argue")
        assert [(t.iteration, t.agent, t.status) for t in killed][:3] == [
            (1, "advocate", "completed"), (1, "skeptic", "completed"), (2, "advocate", "completed")]
        assert (killed[3].iteration, killed[3].agent) == (2, "skeptic") and killed[3].output is None
        person = rt.get(runs["panel_awaiting_input"])
        assert person.status == "awaiting_input" and person.workflow == "panel-with-person"
        assert person.pending.reason.endswith("(argue, round 1, as 'skeptic')")
    assert DEMO_APP == "relaypoint.demo:workflows"
    assert {"panel", "panel-with-person", "repo-audit", "research"} == {wf.name for wf in demo_workflows}


def test_the_killed_agent_call_is_marked_interrupted_like_a_killed_step(demo):
    db, runs = demo
    with Runtime(str(db), create=False) as rt:
        skeptic = children(rt, runs["panel_interrupted"], "argue")[3]
        assert skeptic.status == "interrupted"
        detected = [e for e in rt.events(runs["panel_interrupted"]) if e.kind == "interruption_detected"]
        assert len(detected) == 1 and detected[0].step == "argue"


def test_the_demo_run_killed_mid_debate_resumes_to_the_completed_runs_result(demo):
    db, runs = demo
    box = Sandbox(db.parent)
    resumed = box.run("resume", runs["panel_interrupted"], "--app", DEMO_APP)
    assert resumed.code == 0 and not resumed.leaks(), resumed.err
    assert resumed.out.strip().endswith("is completed")
    with Runtime(str(db), create=False) as rt:
        assert tree(rt, runs["panel_interrupted"]) == tree(rt, runs["panel_completed"])
        attempts = [(t.iteration, t.agent, t.attempts) for t in children(rt, runs["panel_interrupted"], "argue")]
        assert attempts == [(1, "advocate", 1), (1, "skeptic", 1), (2, "advocate", 1), (2, "skeptic", 2),
                            (3, "advocate", 1), (3, "skeptic", 1), (4, "judge", 1)]

        def started(rid: str) -> int:
            return sum(e.kind == "step_started" and e.step == "argue" for e in rt.events(rid))

        # the debate's 7 calls and its result, and once more the call the kill cut short: nothing else
        assert (started(runs["panel_completed"]), started(runs["panel_interrupted"])) == (8, 9)
