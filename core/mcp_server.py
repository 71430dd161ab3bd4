"""``relaypoint mcp``: the runtime's operations as the tools of a Model Context Protocol server over
stdio, for agent hosts (Claude Desktop and others) to list, read and decide runs.

Each tool is one :class:`~relaypoint.Runtime` operation on the store at ``db_url``, opened for the
call (tools run on the SDK's worker threads; a store connection belongs to one). Inputs and outputs
are relaypoint's pydantic models and JSON: ``list_runs`` returns the rows of ``relaypoint list
--json``, ``show_run`` the object of ``relaypoint show --json``. An expected failure (an unknown
run, a refused decision, a store that cannot be used) is a tool error (``isError``) whose text is
the line the CLI prints after ``Error:`` (:func:`relaypoint.views.display.error_line`). With an app,
``resume`` starts the run in a separate background process, as the console does, and ``enqueue``
records a new run queued for a worker; nothing executes steps in the server's process.

Arguments that do not fit a tool's input schema are refused in one line naming each argument and
what it expects (pydantic's errors, reworded), and so are arguments a tool does not take. Standard
output carries only the protocol: the app module is imported with ``sys.stdout`` sent to stderr,
and while serving the SDK points fd 1 at stderr. A line that is not a JSON-RPC message is answered with a JSON-RPC error (``-32700`` parse
error, or ``-32600`` invalid request, ``id`` null) and told on stderr in one line; the SDK itself
drops such lines silently.
"""

from __future__ import annotations

import reprlib
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, redirect_stdout
from importlib.metadata import version
from typing import Annotated, Any

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp.types import INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError
from pydantic_core import ErrorDetails

from .apploader import load_workflows
from .background import resume_log, spawn_resume
from .defaults import DURABILITY, LEASE_SECONDS
from .encoding import parse_json_arg
from .errors import RelaypointError
from .models import Checkpoint, PendingDecision, RunSummary
from .runtime import Runtime
from .status import RunStatus
from .views.display import error_line
from .workflow import Workflow, find_workflow

INSTRUCTIONS = """relaypoint records durable, resumable runs of multi-step workflows, some of which pause for a \
person: an approval (approve or reject) or an input request (respond). pending_decisions lists what waits, oldest \
first; show_run shows a run with its outputs and the checkpoint it waits on. Cite that checkpoint_id when you decide, \
so a run that moved on since you looked is refused instead of decided blindly. Run ids may be given as a unique prefix."""

RunId = Annotated[str, Field(description="A run id, or a unique prefix of one.")]
By = Annotated[str | None, Field(description="Who decides (default: the user the server runs as).")]
CheckpointId = Annotated[int | None, Field(
    description="The checkpoint you reviewed (a run's pending.checkpoint_id); refused if the run waits on "
    "another one now.")]
Limit = Annotated[int, Field(ge=1, le=1000, description="At most this many.")]


class Cancelled(BaseModel):
    """A cancelled run and the status it had."""

    run_id: str
    previous_status: RunStatus


class ResumeStarted(BaseModel):
    """A resume started in a background process: its ``pid``, and the ``log`` its errors go to. The
    run's progress is recorded in the store (``show_run``)."""

    run_id: str
    pid: int
    log: str


SHOWN = reprlib.Repr()
"""How a refused argument's value is quoted: its ``repr`` (one line, escapes visible), shortened."""
SHOWN.maxstring = SHOWN.maxother = 60


class Server(MCPServer):
    """The SDK's server, with two answers it lacks: arguments that fail the input schema are one
    line (:func:`argument_errors`), and a line on stdin that is not a JSON-RPC message gets a
    JSON-RPC error reply instead of silence."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context | None = None) -> Any:
        """See :meth:`MCPServer.call_tool`; raises ``ToolError`` with one line for bad arguments,
        those the tool does not take included (the SDK would drop them silently)."""
        tool = next((t for t in await self.list_tools() if t.name == name), None)
        if tool is not None:
            taken = list(tool.input_schema.get("properties", {}))
            if unknown := [a for a in arguments or {} if a not in taken]:
                raise ToolError(f"Error executing tool {name}: {unknown_arguments(name, unknown, taken)}")
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as e:
            # the SDK raises ToolError from the ValidationError of the arguments; our own tool
            # errors have no cause and a crash is UnexpectedToolError
            if isinstance(e, UnexpectedToolError) or not isinstance(e.__cause__, ValidationError):
                raise
            raise ToolError(f"Error executing tool {name}: {argument_errors(e.__cause__)}") from e.__cause__

    async def run_stdio_async(self) -> None:
        """Serve over stdin and stdout (see :meth:`MCPServer.run_stdio_async`), answering each
        line the transport could not read as a JSON-RPC message (:func:`unreadable_reply`)."""
        async with stdio_server() as (read_stream, write_stream):
            send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)

            async def sift() -> None:
                async with send:
                    async for item in read_stream:
                        if isinstance(item, Exception):
                            reply = unreadable_reply(item)
                            print(f"relaypoint mcp: {reply.error.message}", file=sys.stderr, flush=True)
                            await write_stream.send(SessionMessage(reply))
                        else:
                            await send.send(item)

            async with anyio.create_task_group() as tg:
                tg.start_soon(sift)
                # the SDK's own run_stdio_async does this with the transport's streams
                lowlevel = self._lowlevel_server  # noqa: SLF001
                await lowlevel.run(receive, write_stream, lowlevel.create_initialization_options())


def unreadable_reply(error: Exception) -> JSONRPCError:
    """The JSON-RPC answer to a line the stdio transport could not read (``error``, what it
    raised): ``-32700`` when the line is not JSON, ``-32600`` when it is JSON but not a JSON-RPC
    message; ``id`` null, as the spec has it when the request's id cannot be known."""
    details = error.errors(include_url=False) if isinstance(error, ValidationError) else []
    if any(d["type"] == "json_invalid" for d in details):
        code, message = PARSE_ERROR, f"Parse error: a line is not JSON ({details[0]['ctx']['error']})"
    elif details:
        code, message = INVALID_REQUEST, "Invalid Request: a line is JSON but not a JSON-RPC 2.0 message"
    else:
        code, message = PARSE_ERROR, f"Parse error: a line could not be read ({type(error).__name__})"
    return JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(code=code, message=message))


def unknown_arguments(tool: str, unknown: list[str], taken: list[str]) -> str:
    """The arguments ``unknown`` a tool does not take, and those it does (``taken``), in a phrase:
    ``coment is not an argument of approve; it takes run_id, output, comment, by, checkpoint_id``."""
    names = ", ".join(SHOWN.repr(a)[1:-1] for a in unknown)  # escapes visible, no quotes
    are = "is not an argument" if len(unknown) == 1 else "are not arguments"
    return f"{names} {are} of {tool}; it takes {', '.join(taken) or 'none'}"


def argument_errors(error: ValidationError) -> str:
    """Pydantic's errors about a tool's arguments as one line: each names the argument and what it
    expects, e.g. ``status must be one of 'queued', ... or 'cancelled'; not 'bogus'``."""
    return "; ".join(argument_error(d) for d in error.errors(include_url=False))


def argument_error(detail: ErrorDetails) -> str:
    """One of pydantic's errors (:meth:`ValidationError.errors`) about an argument, in a phrase."""
    name = ".".join(str(part) for part in detail["loc"]) or "the arguments"
    if detail["type"] == "missing":
        return f"{name} is required"
    if detail["type"] == "enum":
        expected = f"one of {detail['ctx']['expected']}"
    elif detail["type"] == "dict_type":
        expected = "a JSON object"
    else:
        expected = detail["msg"].removeprefix("Input should be ")
    return f"{name} must be {expected}; not {SHOWN.repr(detail['input'])}"


def summary_of(run: RunSummary) -> RunSummary:
    """``run`` (a :class:`~relaypoint.models.Run` too) as the row ``relaypoint list --json`` prints."""
    return RunSummary(**{name: getattr(run, name) for name in RunSummary.model_fields})


def build_server(db_url: str, *, app_spec: str | None = None, durability: str = DURABILITY,
                 lease_seconds: float = LEASE_SECONDS) -> Server:
    """The MCP server over the store at ``db_url``. With ``app_spec`` (``MODULE:ATTR``, imported
    here, its prints sent to stderr: raises ``AppLoadError``) it has the ``resume`` and ``enqueue`` tools, for
    the workflows the app defines."""
    server = Server("relaypoint", version=version("relaypoint"), instructions=INSTRUCTIONS, log_level="WARNING")
    read = ToolAnnotations(read_only_hint=True)
    defined: dict[str, Workflow] = {}
    if app_spec is not None:
        with redirect_stdout(sys.stderr):  # what the module prints on import must not reach the protocol
            defined = {wf.name: wf for wf in load_workflows(app_spec)}

    @contextmanager
    def runtime(workflows: Iterable[Workflow] = ()) -> Iterator[Runtime]:
        try:
            with Runtime(db_url, workflows, create=False, durability=durability, lease_seconds=lease_seconds) as rt:
                yield rt
        except RelaypointError as e:
            raise ToolError(error_line(e)) from None

    @server.tool(annotations=read)
    def list_runs(status: RunStatus | None = None,
                  workflow: Annotated[str | None, Field(description="Only runs of this workflow.")] = None,
                  search: Annotated[str | None, Field(description="A run id or workflow name prefix.")] = None,
                  limit: Limit = 100) -> list[RunSummary]:
        """Runs, newest first (the rows of `relaypoint list --json`), without their outputs."""
        with runtime() as rt:
            return rt.list(status=status, workflow=workflow, limit=limit, search=search)

    @server.tool(annotations=read)
    def show_run(run_id: RunId) -> dict[str, Any]:
        """A run as `relaypoint show --json` prints it: status, input, every step execution with its
        output, error, recorded calls (model requests with their messages, tool calls with their
        arguments and results) and `usage`, the run's total `usage` ({requests, input_tokens,
        output_tokens}, and cost in US dollars when priced), and `pending`, the checkpoint it waits
        on (null when none)."""
        with runtime() as rt:
            return rt.get(run_id).shown()

    @server.tool(annotations=read)
    def pending_decisions(limit: Limit = 100) -> list[PendingDecision]:
        """The decisions owed across all runs, oldest first: approvals, input requests and held
        orphan steps, each with the checkpoint_id a decision cites, the run's workflow and status."""
        with runtime() as rt:
            return rt.pending_decisions(limit)

    @server.tool()
    def approve(run_id: RunId,
                output: Annotated[str, Field(
                    description="An edited output replacing the gated step's, as JSON text, not a JSON value (a "
                    "string is '\"text\"', an object '{\"k\": 1}'); empty: the output is approved as it is.")] = "",
                comment: Annotated[str | None, Field(description="A note kept with the decision.")] = None,
                by: By = None, checkpoint_id: CheckpointId = None) -> Checkpoint:
        """Approve the run's pending approval (or held orphan step): the run becomes queued, for a
        worker or `resume` to continue. Returns the decided checkpoint."""
        value = parse_json(output, "output") if output else None
        if output and value is None:  # None is "not edited" to Runtime.approve
            raise ToolError("output null: an edited output cannot be null; approve without output to keep the "
                            "step's output as it is")
        with runtime(defined.values()) as rt:  # the app's models check an edit, their validators included
            return rt.approve(run_id, by=by, comment=comment, output=value, checkpoint_id=checkpoint_id)

    @server.tool()
    def reject(run_id: RunId, comment: Annotated[str, Field(description="The reason (required).")],
               by: By = None, checkpoint_id: CheckpointId = None) -> Checkpoint:
        """Reject the run's pending approval: the run ends rejected. Returns the decided checkpoint."""
        with runtime() as rt:
            return rt.reject(run_id, comment=comment, by=by, checkpoint_id=checkpoint_id)

    @server.tool()
    def respond(run_id: RunId,
                value: Annotated[str, Field(description="The answer as JSON text, not a JSON value (a string is "
                                                      "'\"text\"', a number '3').")],
                by: By = None, checkpoint_id: CheckpointId = None) -> Checkpoint:
        """Answer the run's pending input request: the run becomes queued and the asking step, run
        again, receives the answer. Returns the decided checkpoint."""
        answer = parse_json(value, "value")
        with runtime() as rt:
            return rt.respond(run_id, answer, by=by, checkpoint_id=checkpoint_id)

    @server.tool()
    def fork(run_id: RunId, from_step: Annotated[str, Field(description="The first step the fork runs again.")],
             iteration: Annotated[int | None, Field(
                 description="With a pattern as from_step: fork before its iteration N (round, turn, pass, "
                 "subtask).")] = None,
             input: Annotated[dict[str, Any] | None, Field(
                 description="A new input for the fork: a JSON object, as a value (a run's input is always one; "
                 "JSON text of an object is taken too). Default: the parent's input.")] = None,
             ) -> RunSummary:
        """Fork a run from the boundary before a step: a new queued run reusing the outputs before
        it (the parent is untouched). Returns the new run's row."""
        with runtime() as rt:
            new_id = rt.fork(run_id, from_step, input, iteration=iteration)
            return summary_of(rt.get(new_id, with_outputs=False))

    @server.tool(annotations=ToolAnnotations(destructive_hint=True))
    def cancel(run_id: RunId, by: By = None) -> Cancelled:
        """Cancel a run that has not ended (a step still running is never recorded as completed)."""
        with runtime() as rt:
            rid = rt.resolve(run_id)
            return Cancelled(run_id=rid, previous_status=rt.cancel(rid, by=by))

    if app_spec is not None:
        @server.tool()
        def resume(run_id: RunId, allow_drift: Annotated[bool, Field(
                       description="Resume even if the workflow's steps changed (completed steps are kept by "
                       "name).")] = False) -> ResumeStarted:
            """Continue a queued, interrupted or failed run in a background process (it outlives this
            server); its progress is recorded in the run (show_run), its errors in the returned log."""
            with runtime() as rt:
                run = rt.check_resumable(run_id)
            try:
                find_workflow(defined, run.workflow)
                process = spawn_resume(db_url, app_spec, run.run_id, allow_drift=allow_drift, durability=durability)
            except RelaypointError as e:
                raise ToolError(error_line(e)) from None
            except OSError as e:
                raise ToolError(f"could not start the resume of run {run.run_id}: {e}") from None
            threading.Thread(target=process.wait, name=f"reap-{process.pid}", daemon=True).start()
            return ResumeStarted(run_id=run.run_id, pid=process.pid, log=str(resume_log(db_url).resolve()))

        @server.tool()
        def enqueue(workflow: Annotated[str, Field(description="The workflow to run (one the --app defines).")],
                    input: Annotated[dict[str, Any] | None, Field(
                        description="The run's input: a JSON object, as a value (JSON text of one is taken too). "
                        "Default: {}.")] = None) -> RunSummary:
            """Record a new run of a workflow, queued for a worker (`relaypoint worker`) to execute;
            nothing executes in this server. Returns the new run's row."""
            with runtime(defined.values()) as rt:
                run_id = rt.enqueue(workflow, input)
                return summary_of(rt.get(run_id, with_outputs=False))

    return server


def parse_json(text: str, what: str) -> Any:
    """``text`` parsed as JSON (see :func:`relaypoint.encoding.parse_json_arg`); a tool error otherwise.

    Values are taken as JSON text, like the CLI's ``--value`` and ``--output``, rather than as JSON
    values: the SDK decodes a string argument that reads as JSON when the parameter is not typed
    ``str``, which would turn an answer such as ``'["a"]'`` or ``"null"`` into another value."""
    try:
        return parse_json_arg(text, what)
    except RelaypointError as e:
        raise ToolError(error_line(e)) from None
