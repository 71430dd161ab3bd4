"""The bundled ``research`` example (PydanticAI agents on offline FunctionModels: a writer with a
web_search tool, a vote of three typed reviewers, a revision behind an approval gate, an idempotent
publish) on both backends; real processes SIGKILLed in the writer's third model request and after
the publish wrote its post; and the demo's research runs."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from relaypoint import InvalidValue, Runtime
from relaypoint.demo import DEMO_APP, NO_RESEARCH, build_demo
from relaypoint.examples import research
from relaypoint.examples.research import Draft, Review
from relaypoint.status import RunStatus
from relaypoint.workflow import Context
from procs import Sandbox


def calls_of(rt: Runtime, run_id: str, name: str) -> list[tuple[str, str, int]]:
    """The recorded calls of the top-level execution ``name`` as (kind, name, attempt)."""
    (task,) = [t for t in rt.get(run_id).tasks if t.name == name and t.parent is None]
    return [(str(c.kind), c.name, c.attempt) for c in task.calls]


MODEL, TOOL = "model request", "tool web_search"


def test_the_example_runs_to_the_gate_with_every_agent_call_recorded(db, tmp_path):
    with Runtime(db, research.workflows) as rt:
        rid = rt.start("research", {"published_dir": str(tmp_path / "posts")})
        run = rt.get(rid)
        assert (run.status, run.pending.step) == (RunStatus.AWAITING_APPROVAL, "revise")
        assert calls_of(rt, rid, "draft") == [("model", MODEL, 1), ("tool", TOOL, 1), ("model", MODEL, 1),
                                              ("tool", TOOL, 1), ("model", MODEL, 1)]
        draft = rt.step_output(rid, "draft")
        assert draft["sources"] == ["https://notes.example/checkpoints", "https://notes.example/model-requests"]
        assert draft["title"] == "Durable agent runs: what survives a crash"

        vote = rt.step_output(rid, "review")
        assert vote["result"]["keys"] == {"facts": "revise", "editor": "accept", "reader": "revise"}
        assert vote["result"]["winner"] == "revise"
        assert vote["votes"]["facts"] == {"score": 3, "verdict": "revise", "notes": "cite at least 3 sources (2 cited)"}
        voters = [t for t in run.tasks if t.name == "review" and t.agent is not None]
        assert {t.agent: [c.model for c in t.calls] for t in voters} == {
            "facts": ["canned-fact-checker"], "editor": ["canned-editor"], "reader": ["canned-reader"]}

        revised = rt.step_output(rid, "revise")
        assert calls_of(rt, rid, "revise") == [("model", MODEL, 1), ("tool", TOOL, 1), ("model", MODEL, 1)]
        assert revised["sources"] == [*draft["sources"], "https://notes.example/approval"]
        assert revised["body"].startswith(draft["body"]) and "approves" in revised["body"]
        # what the person at the gate sees: the writer's calls, named model, usage
        gated = next(t for t in run.tasks if t.name == "revise")
        requests = [c for c in gated.calls if str(c.kind) == "model"]
        assert {c.model for c in requests} == {"canned-writer"}
        assert all(c.requests == 1 and c.input_tokens > 0 and c.output_tokens > 0 for c in requests)
        assert gated.calls[1].detail == {"tool": "web_search", "args": {"query": "who approves a post before it "
                                                                                 "is published"}}
    assert not (tmp_path / "posts").exists(), "nothing is published before the approval"


def test_approved_it_publishes_once_and_a_publish_run_again_finds_its_post(db, tmp_path, monkeypatch):
    posts = tmp_path / "posts"
    given: list[object] = []
    publish_post = research.publish_post

    def spy(directory, key, draft):
        given.append(draft)
        return publish_post(directory, key, draft)

    monkeypatch.setattr(research, "publish_post", spy)
    with Runtime(db, research.workflows) as rt:
        rid = rt.start("research", {"published_dir": str(posts)})
        revised = rt.step_output(rid, "revise")
        rt.approve(rid, by="ana", comment="Sourced and clear.")
        assert rt.resume(rid) == RunStatus.COMPLETED
        out = rt.step_output(rid, "publish")
        key = next(t for t in rt.get(rid).tasks if t.name == "publish").idempotency_key
    assert out == {"path": str(posts / f"{rid}-publish.json"), "key": f"{rid}/publish", "published": True}
    assert key == f"{rid}/publish"
    assert json.loads(Path(out["path"]).read_text()) == {"key": key, **revised}
    # the publish step read the approved revision as a Draft (a typed output, given back as its model)
    assert [type(d) for d in given] == [Draft] and given[0].model_dump() == revised

    again = publish_post(str(posts), key, Draft(title="Another", body="b", sources=[]))
    assert again == {**out, "published": False}
    assert [p.name for p in posts.iterdir()] == [f"{rid}-publish.json"]
    assert json.loads(Path(out["path"]).read_text())["title"] == revised["title"], "the post is kept as it was"


def test_an_edit_at_the_gate_must_fit_the_draft_and_is_what_gets_published(db, tmp_path):
    with Runtime(db, research.workflows) as rt:
        rid = rt.start("research", {"published_dir": str(tmp_path / "posts")})
        with pytest.raises(InvalidValue) as refused:
            rt.approve(rid, output={"title": "Edited", "body": "b"})
        assert str(refused.value) == ("the edited output of step 'revise' does not fit Draft: field 'sources': "
                                      "Field required")
        assert rt.get(rid).status == RunStatus.AWAITING_APPROVAL
        rt.approve(rid, output={"title": "Edited", "body": "Shorter.", "sources": ["https://notes.example/forks"]})
        assert rt.resume(rid) == RunStatus.COMPLETED
        post = json.loads(Path(rt.step_output(rid, "publish")["path"]).read_text())
    assert (post["title"], post["body"], post["sources"]) == ("Edited", "Shorter.", ["https://notes.example/forks"])


def test_a_vote_to_accept_keeps_the_draft_without_asking_the_writer_again():
    accept = Review(score=5, verdict="accept", notes="fine")
    draft = Draft(title="T", body="b", sources=["s"])
    ctx = Context(run_id="r", step="revise", attempt=1, idempotency_key="r/revise", input={},
                           results={"draft": draft, "review": {"result": {"winner": "accept"},
                                                               "votes": {"facts": accept.model_dump()}}})
    # not a step's execution: asking the writer here would raise OutsideStep
    assert asyncio.run(research.revise(ctx)) is draft


def test_the_reviewers_read_the_draft_as_their_personas_do():
    short = Draft(title="T", body="too short", sources=["a", "b", "c"])
    assert research.check_facts(short) == Review(score=4, verdict="accept", notes="3 sources cited")
    assert research.check_length(short) == Review(score=2, verdict="revise", notes="2 words: write 40 to 300")
    assert research.check_reader(short).verdict == "revise"
    assert research.check_reader(short.model_copy(update={"body": "A person approves it."})).verdict == "accept"
    assert research.search_corpus("nothing matches") == []
    assert [h["url"] for h in research.search_corpus("leases decide ownership", limit=1)] == [
        "https://notes.example/leases"]


# ---- real processes killed with SIGKILL -----------------------------------------------------------

APP = """
import os, sys, time
from relaypoint import Runtime
from relaypoint.examples import research

LOG = os.environ["REQUESTS_LOG"]

def log(line):
    with open(LOG, "a") as f:
        f.write(line + "\\n")

write = research.WRITER_MODEL.function

async def logged(messages, info):
    prompt = messages[0].parts[-1].content
    sent = sum(m.kind == "response" for m in messages)
    log(f"{'revise' if prompt.startswith('Revise') else 'draft'} request {sent + 1}")
    return await write(messages, info)

research.WRITER_MODEL.function = logged
publish_post = research.publish_post

def publish_then_hang(directory, key, draft):
    done = publish_post(directory, key, draft)
    log(f"published {done['published']}")
    if os.environ.get("HANG_AFTER_PUBLISH"):
        time.sleep(60)  # killed here: the post is written, the step's output is not
    return done

research.publish_post = publish_then_hang

if __name__ == "__main__":
    with Runtime(sys.argv[1], research.workflows) as rt:
        if sys.argv[2] == "start":
            rt.start("research", input={"published_dir": os.environ["POSTS"], "delay": float(os.environ["DELAY"])},
                     on_created=lambda rid: log(f"run {rid}"))
        else:
            print(rt.resume(sys.argv[3]))
"""


class Child:
    """The example in a child process (``APP``), its writer's model requests and its publications
    logged to ``log``."""

    def __init__(self, tmp_path: Path, db: str) -> None:
        self.app = tmp_path / "researchapp.py"
        self.app.write_text(textwrap.dedent(APP))
        self.log = tmp_path / "requests.log"
        self.db = db
        self.env = {**os.environ, "REQUESTS_LOG": str(self.log), "POSTS": str(tmp_path / "posts"), "DELAY": "0"}

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def start_and_kill_at(self, line: str, **env: str) -> tuple[str, list[str]]:
        """Start a run, SIGKILL the process once ``line`` is logged; returns (run id, the log)."""
        proc = subprocess.Popen([sys.executable, str(self.app), self.db, "start"], env={**self.env, **env},
                                cwd=self.app.parent)
        limit = time.monotonic() + 60
        while line not in self.lines():
            assert time.monotonic() < limit and proc.poll() is None, f"the app never logged {line!r}"
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        logged = self.lines()
        return logged[0].removeprefix("run "), logged[1:]

    def resume(self, run_id: str) -> str:
        done = subprocess.run([sys.executable, str(self.app), self.db, "resume", run_id], env=self.env,
                              cwd=self.app.parent, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()


def test_a_kill_in_the_writers_third_model_request_resumes_sending_only_it_again(db, tmp_path):
    child = Child(tmp_path, db)
    rid, before = child.start_and_kill_at("draft request 3", DELAY="60")
    assert before == ["draft request 1", "draft request 2", "draft request 3"]
    with Runtime(db, create=False) as rt:
        rt.sweep()
        assert rt.get(rid).status == RunStatus.INTERRUPTED
        assert calls_of(rt, rid, "draft") == [("model", MODEL, 1), ("tool", TOOL, 1), ("model", MODEL, 1),
                                              ("tool", TOOL, 1)]
    assert child.resume(rid) == "awaiting_approval"  # the second attempt does not wait
    assert child.lines()[len(before) + 1:] == ["draft request 3", "revise request 1", "revise request 2"]
    with Runtime(db, create=False) as rt:
        assert calls_of(rt, rid, "draft") == [("model", MODEL, 1), ("tool", TOOL, 1), ("model", MODEL, 1),
                                              ("tool", TOOL, 1), ("model", MODEL, 2)]
        assert rt.get(rid).tasks[0].attempts == 2
        assert len(rt.step_output(rid, "draft")["sources"]) == 2  # the draft an uninterrupted run writes
        assert rt.step_output(rid, "revise")["sources"][-1] == "https://notes.example/approval"


def test_a_kill_after_the_post_was_written_publishes_nothing_twice_on_resume(db, tmp_path):
    child = Child(tmp_path, db)
    with Runtime(db, research.workflows) as rt:  # to the gate and approved in this process
        rid = rt.start("research", {"published_dir": child.env["POSTS"]})
        rt.approve(rid, by="ana")
    proc = subprocess.Popen([sys.executable, str(child.app), db, "resume", rid],
                            env={**child.env, "HANG_AFTER_PUBLISH": "1"}, cwd=tmp_path)
    limit = time.monotonic() + 60
    while "published True" not in child.lines():
        assert time.monotonic() < limit and proc.poll() is None, "the app never published"
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert child.resume(rid) == "completed"
    assert child.lines() == ["published True", "published False"]
    posts = list((tmp_path / "posts").iterdir())
    assert [p.name for p in posts] == [f"{rid}-publish.json"]
    with Runtime(db, create=False) as rt:
        assert rt.step_output(rid, "publish")["published"] is False
        assert next(t for t in rt.get(rid).tasks if t.name == "publish").attempts == 2


# ---- the demo's research runs ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A demo store (``relaypoint demo``'s runs) auditing a one-file tree."""
    base = tmp_path_factory.mktemp("demo")
    (base / "tree").mkdir()
    (base / "tree" / "mod.py").write_text("def f():\n    return 1\n")
    db = Sandbox(base).db
    return db, build_demo(str(db), root=str(base / "tree"))


def test_the_demo_has_a_research_run_at_its_gate_and_one_killed_in_the_writers_third_request(demo):
    db, runs = demo
    with Runtime(str(db), create=False) as rt:
        waiting = rt.get(runs["research_awaiting_approval"])
        assert (waiting.workflow, waiting.status, waiting.pending.step) == ("research", "awaiting_approval", "revise")
        assert len(calls_of(rt, waiting.run_id, "revise")) == 3
        killed = rt.get(runs["research_interrupted"])
        assert (killed.status, killed.tasks[0].name, killed.tasks[0].status) == ("interrupted", "draft", "interrupted")
        assert killed.tasks[0].progress == "model request 3"
        assert calls_of(rt, killed.run_id, "draft") == [("model", MODEL, 1), ("tool", TOOL, 1), ("model", MODEL, 1),
                                                        ("tool", TOOL, 1)]


def test_the_demos_killed_research_run_resumes_to_its_gate_sending_only_the_third_request(demo):
    db, runs = demo
    resumed = Sandbox(db.parent).run("resume", runs["research_interrupted"], "--app", DEMO_APP)
    assert resumed.code == 0 and not resumed.leaks(), resumed.err
    with Runtime(str(db), create=False) as rt:
        rid = runs["research_interrupted"]
        assert rt.get(rid).status == "awaiting_approval"
        assert [a for _, _, a in calls_of(rt, rid, "draft")] == [1, 1, 1, 1, 2]
        assert rt.step_output(rid, "revise") == rt.step_output(runs["research_awaiting_approval"], "revise")


def test_without_pydantic_ai_the_demo_says_how_to_add_the_research_runs(tmp_path):
    code = ("import sys; sys.modules['pydantic_ai'] = None\n"
            "from relaypoint.cli import cli\n"
            "cli(['--db', sys.argv[1], 'demo', '--no-console', '--root', sys.argv[2]])")
    (tmp_path / "tree").mkdir()
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "demo.db"), str(tmp_path / "tree")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert NO_RESEARCH in done.stderr.splitlines()
    assert "research" not in done.stderr.replace(NO_RESEARCH, "")
    with Runtime(str(tmp_path / "demo.db"), create=False) as rt:
        assert {r.workflow for r in rt.list()} == {"repo-audit", "panel", "panel-with-person"}
