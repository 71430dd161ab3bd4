"""``relaypoint mcp``: the MCP server driven by the SDK's own stdio client, as an agent host drives
it: a real ``relaypoint --db DB mcp`` subprocess, its answers compared with the CLI's JSON and with
what the store records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from relaypoint import Runtime

from helpers import APP, app_workflows, kill_owner, one_line_error, relaypoint, rows, set_owner, write_app
from procs import wait_status

TOOLS = {"list_runs", "show_run", "pending_decisions", "approve", "reject", "respond", "fork", "cancel"}
REQUIRED = {"list_runs": set(), "show_run": {"run_id"}, "pending_decisions": set(), "approve": {"run_id"},
            "reject": {"run_id", "comment"}, "respond": {"run_id", "value"}, "fork": {"run_id", "from_step"},
            "cancel": {"run_id"}, "resume": {"run_id"}, "enqueue": {"workflow"}}


@asynccontextmanager
async def server(cwd: Path, db: str, *args: str) -> AsyncIterator[ClientSession]:
    """A session with ``relaypoint --db DB mcp ARGS`` run in ``cwd`` (its stderr to ``cwd/mcp.err``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYPOINT_")}
    params = StdioServerParameters(command=sys.executable, args=["-m", "relaypoint", "--db", db, "mcp", *args],
                                   env=env, cwd=cwd)
    with open(cwd / "mcp.err", "a") as err:
        async with stdio_client(params, errlog=err) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session
    assert "Traceback" not in (cwd / "mcp.err").read_text()


async def call(session: ClientSession, tool: str, **arguments: Any) -> Any:
    """A tool's structured result (a list tool's list unwrapped); fails on a tool error."""
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content
    data = result.structured_content
    return data["result"] if set(data) == {"result"} else data


async def refused(session: ClientSession, tool: str, **arguments: Any) -> str:
    """The text of the tool error a call comes back with (one line)."""
    result = await session.call_tool(tool, arguments)
    assert result.is_error and result.structured_content is None, result
    [content] = result.content
    assert "\n" not in content.text
    return content.text


def cli_json(app: Path, db: str, *args: str) -> Any:
    done = relaypoint(app, *args, "--json", db=db)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def app(tmp_path: Path) -> Path:
    write_app(tmp_path)
    return tmp_path


def started(db: str, *workflows: str) -> list[str]:
    with Runtime(db, app_workflows()) as rt:
        return [rt.start(name, {"topic": "mcp"}) for name in workflows]


async def test_every_tool_is_listed_with_its_input_schema_and_resume_and_enqueue_only_with_an_app(app: Path):
    db = str(app / "store.db")
    started(db, "simple")
    for args, tools in (((), TOOLS), (("--app", APP), TOOLS | {"resume", "enqueue"})):
        async with server(app, db, *args) as session:
            listed = {t.name: t for t in (await session.list_tools()).tools}
            assert set(listed) == tools
            for name, tool in listed.items():
                assert tool.input_schema["type"] == "object" and tool.description, name
                assert set(tool.input_schema.get("required", [])) == REQUIRED[name], name
                assert tool.output_schema is not None, name
            statuses = listed["list_runs"].input_schema["$defs"]["RunStatus"]["enum"]
            assert "awaiting_approval" in statuses


async def test_list_show_and_pending_equal_the_cli_and_the_runtime(app: Path, db: str):
    review, ask, simple, boom = started(db, "review", "ask", "simple", "boom")
    set_owner(db, simple, pid=os.getpid(), expires_in=60)  # shown running, with its executor's lease
    async with server(app, db) as session:
        assert await call(session, "list_runs") == cli_json(app, db, "list")
        assert await call(session, "list_runs", status="awaiting_input") == cli_json(
            app, db, "list", "--status", "awaiting_input")
        [running] = await call(session, "list_runs", search=simple[:6])
        assert (running["run_id"], running["status"], running["lease"]["pid"]) == (simple, "running", os.getpid())
        assert len(await call(session, "list_runs", limit=2)) == 2
        for run_id in (review, ask, simple, boom):
            assert await call(session, "show_run", run_id=run_id[:8]) == cli_json(app, db, "show", run_id)
        pending = await call(session, "pending_decisions")
        with Runtime(db) as rt:
            assert pending == [p.model_dump(mode="json") for p in rt.pending_decisions()]
        assert [(p["run_id"], p["kind"], p["step"], p["status"]) for p in pending] == [
            (review, "approval", "check", "awaiting_approval"), (ask, "input", "question", "awaiting_input")]
        assert "no run with id 'nope'" in await refused(session, "show_run", run_id="nope")


async def test_approve_records_the_decision_with_the_checkpoint_it_cites(app: Path, db: str):
    first, second = started(db, "review", "review")
    async with server(app, db) as session:
        [gate, _] = await call(session, "pending_decisions")
        decided = await call(session, "approve", run_id=first, checkpoint_id=gate["checkpoint_id"], comment="fine",
                             by="agent-7", output='{"draft": "edited"}')
        assert (decided["checkpoint_id"], decided["decision"], decided["decided_by"]) == (
            gate["checkpoint_id"], "approved", "agent-7")
        await call(session, "approve", run_id=second)
    with Runtime(db) as rt:
        run = rt.get(first)
        assert run.status == "queued" and run.pending is None
        assert rt.step_output(first, "check") == {"draft": "edited"}
        [event] = [e for e in rt.events(first) if e.kind == "approved"]
        assert (event.actor, event.detail["comment"], event.detail["checkpoint_id"]) == (
            "agent-7", "fine", gate["checkpoint_id"])
        assert rt.get(second).status == "queued" and rt.pending_decisions() == []


async def test_a_refused_decision_is_the_cli_line_as_a_tool_error_and_records_nothing(app: Path):
    db = str(app / "store.db")
    paused, done = started(db, "review", "simple")
    with Runtime(db) as rt:
        checkpoint = rt.get(paused).pending.checkpoint_id
    before = rows(db, paused), rows(db, done)
    cases = [  # (tool call, the same decision through the CLI)
        ({"run_id": paused, "checkpoint_id": checkpoint + 1}, ["approve", paused, "--checkpoint", str(checkpoint + 1)]),
        ({"run_id": done}, ["approve", done]),
        ({"run_id": "0000"}, ["approve", "0000"]),
        ({"run_id": paused, "output": "{not json"}, ["approve", paused, "--output", "{not json"]),
        ({"run_id": paused, "output": "null"}, ["approve", paused, "--output", "null"]),
    ]
    async with server(app, db) as session:
        for arguments, cli in cases:
            text = await refused(session, "approve", **arguments)
            line = one_line_error(relaypoint(app, *cli, db=db)).removeprefix("Error: ")
            assert text == f"Error executing tool approve: {line.replace('--output', 'output')}"
        assert await refused(session, "reject", run_id=done, comment="no") == (
            "Error executing tool reject: " + one_line_error(relaypoint(app, "reject", done, "--comment", "no", db=db))
            .removeprefix("Error: "))
    assert (rows(db, paused), rows(db, done)) == before


async def test_respond_reject_fork_and_cancel_record_in_the_store(app: Path):
    db = str(app / "store.db")
    review, ask, simple, other = started(db, "review", "ask", "simple", "simple")
    async with server(app, db) as session:
        answered = await call(session, "respond", run_id=ask, value='"A title"')
        assert answered["decision"] == "responded" and answered["value"] == "A title"
        assert "not valid JSON" in await refused(session, "respond", run_id=ask, value="A title")
        rejected = await call(session, "reject", run_id=review, comment="too short")
        assert rejected["decision"] == "rejected"
        fork = await call(session, "fork", run_id=simple, from_step="only", input={"topic": "forked"})
        assert (fork["parent_run_id"], fork["forked_from_step"], fork["status"]) == (simple, "only", "queued")
        assert fork == (await call(session, "list_runs", search=fork["run_id"]))[0]
        assert await call(session, "cancel", run_id=fork["run_id"][:10]) == {
            "run_id": fork["run_id"], "previous_status": "queued"}
        assert await refused(session, "cancel", run_id=other) == (
            f"Error executing tool cancel: run {other} is already completed; nothing to cancel")
    with Runtime(db) as rt:
        assert rt.get(ask).status == "queued"
        assert rt.get(review).status == "rejected"
        assert rt.get(fork["run_id"]).input == {"topic": "forked"}
        assert rt.get(fork["run_id"]).status == "cancelled"


async def test_resume_runs_queued_and_interrupted_runs_to_completion_in_a_background_process(app: Path):
    db = str(app / "store.db")
    review, simple = started(db, "review", "simple")
    with Runtime(db) as rt:
        rt.approve(review)
        interrupted = rt.fork(simple, "only")
    kill_owner(db, interrupted, "only")
    async with server(app, db, "--app", APP) as session:
        for run_id in (review, interrupted):
            begun = await call(session, "resume", run_id=run_id)
            assert begun["run_id"] == run_id and Path(begun["log"]) == app / "store.db.resume.log"
            wait_status(db, run_id, "completed")
            with Runtime(db) as rt:
                resumed = [e for e in rt.events(run_id) if e.kind == "resumed"]
            assert resumed[-1].detail["pid"] == begun["pid"] != os.getpid()
        assert "is completed" in await refused(session, "resume", run_id=review)


async def test_enqueue_records_a_queued_run_for_a_worker_and_refuses_what_start_refuses(app: Path):
    db = str(app / "store.db")
    started(db, "simple")
    async with server(app, db, "--app", APP) as session:
        row = await call(session, "enqueue", workflow="review", input={"topic": "queued"})
        assert (row["workflow"], row["status"], row["steps_done"], row["steps_total"]) == ("review", "queued", 0, 3)
        assert row == (await call(session, "list_runs", search=row["run_id"]))[0]
        texted = await call(session, "enqueue", workflow="simple", input='{"n": 1}')  # JSON text of an object too
        bare = await call(session, "enqueue", workflow="simple")
        before = cli_json(app, db, "list")
        for arguments, expected in (
                ({"workflow": "nope"}, "unknown workflow 'nope'"),
                ({"workflow": "simple", "input": ["a"]}, "input must be a JSON object; not ['a']"),
                ({"workflow": "simple", "input": "{broken"}, "input must be a JSON object; not '{broken'"),
                ({}, "workflow is required")):
            assert expected in await refused(session, "enqueue", **arguments)
        assert cli_json(app, db, "list") == before  # nothing recorded
    with Runtime(db) as rt:
        for run_id, input in ((row["run_id"], {"topic": "queued"}), (texted["run_id"], {"n": 1}), (bare["run_id"], {})):
            run = rt.get(run_id)
            assert (run.status, run.input, [t.status for t in run.tasks][:1]) == ("queued", input, ["pending"])
            assert [e.kind for e in rt.events(run_id)] == ["run_queued"]


async def test_with_the_store_missing_the_server_does_not_start_and_says_why_in_one_line(app: Path):
    done = subprocess.run([sys.executable, "-m", "relaypoint", "--db", str(app / "none.db"), "mcp"], cwd=app,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.stdout == ""
    assert "none.db" in one_line_error(done)


async def test_arguments_that_do_not_fit_a_tool_are_refused_in_one_line_naming_the_argument(app: Path):
    db = str(app / "store.db")
    paused, simple = started(db, "review", "simple")
    before = rows(db, paused), rows(db, simple)
    statuses = "'queued', 'running', 'awaiting_approval', 'awaiting_input', 'interrupted', 'completed', 'failed', " \
               "'rejected' or 'cancelled'"
    cases = [
        ("list_runs", {"status": "bogus"}, f"status must be one of {statuses}; not 'bogus'"),
        ("list_runs", {"limit": -1}, "limit must be greater than or equal to 1; not -1"),
        ("approve", {"run_id": paused, "checkpoint_id": "abc"},
         "checkpoint_id must be a valid integer, unable to parse string as an integer; not 'abc'"),
        ("approve", {}, "run_id is required"),
        ("fork", {"run_id": simple, "from_step": "only", "input": "{broken"}, "input must be a JSON object; not '{broken'"),
        ("fork", {"run_id": simple, "from_step": "only", "input": ["a"]}, "input must be a JSON object; not ['a']"),
        ("respond", {"value": 3}, "run_id is required; value must be a valid string; not 3"),
        # JSON text nested past the limit names the path, however deep (not Python's RecursionError)
        ("approve", {"run_id": paused, "output": "[" * 100_000}, "output" + "[0]" * 201 + ": nested deeper than 200 "
                                                                  "levels"),
        ("respond", {"run_id": paused, "value": '{"a": ' * 5_000}, "value" + ".a" * 201 + ": nested deeper than 200 "
                                                                    "levels"),
        # an argument a tool does not take is refused, not ignored
        ("approve", {"run_id": paused, "coment": "typo"},
         "coment is not an argument of approve; it takes run_id, output, comment, by, checkpoint_id"),
        ("list_runs", {"limit": 5, "statuses": ["failed"], "sort": "age"},
         "statuses, sort are not arguments of list_runs; it takes status, workflow, search, limit"),
    ]
    async with server(app, db) as session:
        for tool, arguments, expected in cases:
            assert await refused(session, tool, **arguments) == f"Error executing tool {tool}: {expected}"
        # the refused value is quoted with its escapes visible, and shortened
        shown = await refused(session, "show_run", run_id=["\x1b[31m" * 40])
        assert shown.startswith("Error executing tool show_run: run_id must be a valid string; not ['\\x1b[31m")
        assert "\x1b" not in shown and "..." in shown and len(shown) < 150
        # a fork's input is an object; JSON text of one is taken too (the SDK decodes it)
        fork = await call(session, "fork", run_id=simple, from_step="only", input='{"topic": "text"}')
    assert (rows(db, paused), rows(db, simple)) == before
    with Runtime(db) as rt:
        assert rt.get(fork["run_id"]).input == {"topic": "text"}


async def test_tool_errors_name_tool_arguments_not_command_line_flags(app: Path):
    db = str(app / "store.db")
    paused, simple = started(db, "review", "simple")
    async with server(app, db) as session:
        assert await refused(session, "reject", run_id=paused, comment="  ") == (
            "Error executing tool reject: a rejection needs a reason: a comment that is not blank")
        assert await refused(session, "fork", run_id=simple, from_step="only", iteration=1) == (
            f"Error executing tool fork: step 'only' of run {simple} is not a pattern, so it has no iterations; "
            "fork from it without an iteration")
    with Runtime(db) as rt:
        assert rt.get(paused).status == "awaiting_approval"


def raw_server(cwd: Path, db: str, *args: str) -> subprocess.Popen[str]:
    """``relaypoint --db DB mcp ARGS`` with pipes, for writing protocol lines by hand."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYPOINT_")}
    return subprocess.Popen([sys.executable, "-m", "relaypoint", "--db", db, "mcp", *args], cwd=cwd, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def answers(process: subprocess.Popen[str], *lines: str, count: int) -> tuple[list[dict[str, Any]], str]:
    """Write ``lines`` to the server, read ``count`` answers from its stdout, then close its stdin;
    returns the answers (each line must be a JSON-RPC message) and its stderr. A server that owes
    an answer is killed after a minute (its stdout ends, so the read fails instead of hanging)."""
    assert process.stdin and process.stdout
    process.stdin.write("".join(lines))
    process.stdin.flush()
    watchdog = threading.Timer(60, process.kill)
    watchdog.start()
    try:
        got = [json.loads(process.stdout.readline() or "null") for _ in range(count)]
    finally:
        watchdog.cancel()
    rest, err = process.communicate(timeout=60)
    assert rest == "" and process.returncode == 0, (rest, err)
    return got, err


PING = '{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n'


def test_a_line_that_is_not_a_json_rpc_message_is_answered_with_an_error_and_told_on_stderr(app: Path):
    db = str(app / "store.db")
    started(db, "simple")
    got, err = answers(raw_server(app, db), "this is not json\n", '{"jsonrpc": "2.0", "id": 7, "meth\n',
                       '{"id": 8}\n', PING, count=4)
    assert [(a.get("id"), a.get("error", {}).get("code")) for a in got] == [
        (None, -32700), (None, -32700), (None, -32600), (1, None)]
    assert got[0]["error"]["message"].startswith("Parse error: a line is not JSON (")
    assert got[3]["result"] == {}
    lines = err.splitlines()
    assert [line.split(":")[1].strip() for line in lines] == ["Parse error", "Parse error", "Invalid Request"]
    assert all(line.startswith("relaypoint mcp: ") for line in lines)


def test_what_the_app_prints_on_import_goes_to_stderr_and_stdout_carries_only_the_protocol(app: Path):
    db = str(app / "store.db")
    started(db, "simple")
    (app / "noisy.py").write_text(f"from {APP.replace(':', ' import ')}\nprint('IMPORT-TIME NOISE')\n")
    got, err = answers(raw_server(app, db, "--app", "noisy:workflows"), PING, count=1)
    assert got == [{"jsonrpc": "2.0", "id": 1, "result": {}}]
    assert err.splitlines() == ["IMPORT-TIME NOISE"]
