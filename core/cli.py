"""The ``relaypoint`` command line: a thin layer over :class:`relaypoint.Runtime`.

Every expected failure prints one line ``Error: ...`` on stderr and exits 1; usage mistakes exit 2
(click's own handling). Human output shows stored text literally; ``--json`` prints JSON.

Stored and step-produced text (names, outputs, errors, exception messages) may carry terminal
control sequences. Every line this module prints goes through :func:`relaypoint.views.display.clean` or
:func:`relaypoint.views.display.literal`: messages through :func:`_say`, errors at one choke point in
:func:`main`, which also cleans whatever else reaches stderr (a step's own writes, a traceback), so
``<store>.resume.log`` is clean too.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stdout
from datetime import timedelta
from typing import Any, TextIO

import click
from rich.cells import cell_len, set_cell_size
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from .apploader import load_workflows
from .browser import DEFAULT_PORT, LOOPBACK_HOST
from .clock import to_text, utcnow
from .copying import BATCH_RUNS, copy_runs
from .drivers import Call, where
from .encoding import parse_json_arg
from .errors import InvalidValue, RelaypointError
from .docs import command_docs
from .defaults import DURABILITIES, DURABILITY, HOOK_ATTEMPTS, HOOK_SECONDS, LEASE_SECONDS
from .throughput import STATS_SECONDS
from . import usage
from .runner import CALL_THREAD_PREFIX
from .runtime import Runtime
from .workflow import find_workflow
from .models import Run, RunSummary
from .store import RunStore, StoreMissing, open_store
from .store.url import shown
from .status import RUN_SYMBOLS, STEP_SYMBOLS, RunStatus, StepStatus
from .views.display import (CALL_PREVIEW_CHARS, CALL_PREVIEW_LINES, Preview, clean, error_line, literal, preview,
                            preview_json)
from .views.calls import read_calls
from .views.patterns import kind_of, paused_execution, progress

LIST_PAGE = 1_000
"""Runs read per store query while ``list`` streams its rows."""

STATUS_CHOICE = click.Choice([s.value for s in RunStatus])
APP_OPTION = click.option("--app", "app_spec", envvar="RELAYPOINT_APP", metavar="MODULE:ATTR",
                          help="Module attribute holding a Workflow or a list of them (env RELAYPOINT_APP).")
def _named(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A ``--by`` value: None when not given (the OS user), else a name that is not blank."""
    if value is not None and not value.strip():
        raise click.BadParameter("give a name, or leave --by out to record the OS user's")
    return value


BY_OPTION = click.option("--by", metavar="NAME", callback=_named, help="Who decides: the name the console's approvals, rejections, "
                         "answers and cancels are recorded under (default: the OS user).")


class _DocsEpilog:
    """A command's help ends with the address of the page that explains it (:mod:`relaypoint.docs`),
    read when the help is shown, so ``RELAYPOINT_DOCS`` applies."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_epilog(ctx, formatter)  # type: ignore[misc]
        formatter.write_paragraph()  # written as is: a wrapped address would not open
        formatter.write(f"{'':>{formatter.current_indent}}Docs: {command_docs(None if ctx.parent is None else ctx.command.name)}\n")


class _Command(_DocsEpilog, click.Command):
    pass


class _Group(_DocsEpilog, click.Group):
    """Turns relaypoint's typed errors (the store's included: it translates its backend's own) into one line."""

    command_class = _Command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except RelaypointError as e:  # printed by click as "Error: <message>"
            raise click.ClickException(error_line(e)) from None


def _out() -> Console:
    console = Console(highlight=False)
    if not console.is_terminal:  # piped: never truncate ids to 80 columns
        console.width = 200
    return console


def _say(text: str, *, err: bool = False, file: TextIO | None = None) -> None:
    """Print one line built from stored or step-produced text, cleaned (controls shown as escapes),
    on stdout (``file`` when given) or stderr."""
    click.echo(clean(text), file=file, err=err)


@contextmanager
def _steps_print_to_stderr() -> Iterator[TextIO]:
    """While steps execute, whatever they print goes to stderr (cleaned there), so stdout carries
    only what relaypoint prints (``RUN=$(relaypoint start ...)`` gets the run id alone). Yields the
    real stdout."""
    stdout = sys.stdout
    with redirect_stdout(sys.stderr):
        yield stdout


def _json(value: Any) -> str:
    # ensure_ascii: stored text may hold C1 controls and BiDi overrides; escaped JSON never reaches
    # the terminal raw.
    return json.dumps(value, indent=2, ensure_ascii=True)


def _dump(value: Any) -> None:
    click.echo(_json(value))


def _input_arg(text: str | None) -> dict[str, Any] | None:
    """``--input``: absent, or a JSON object (``null`` and other values are refused)."""
    if text is None:
        return None
    data = parse_json_arg(text, "--input")
    if not isinstance(data, dict):
        raise InvalidValue("--input must be a JSON object, e.g. '{\"root\": \".\"}'")
    return data


def _continue_hint(run_id: str, app: str | None = None) -> str:
    """How to continue a queued run, as a command to copy: with the ``--db`` given when the same
    shell would not find the store without it."""
    app = app or os.environ.get("RELAYPOINT_APP") or "MODULE:ATTR"
    db = click.get_current_context().obj["db"]
    store = "" if db == os.environ.get("RELAYPOINT_DB", "relaypoint.db") else f" --db {shlex.quote(shown(db))}"
    return f"continue it with `relaypoint{store} resume {run_id} --app {app}` or let a worker pick it up"


def _lease_seconds() -> float:
    # An operator setting for slow steps on shared hosts, and for tests of lease expiry.
    return float(os.environ.get("RELAYPOINT_LEASE_SECONDS", LEASE_SECONDS))


def _runtime(ctx: click.Context, app_spec: str | None = None, *, create: bool = False) -> Runtime:
    workflows = load_workflows(app_spec) if app_spec else []
    rt = Runtime(ctx.obj["db"], workflows, create=create, lease_seconds=_lease_seconds(),
                 durability=ctx.obj["durability"])
    ctx.call_on_close(rt.close)
    return rt


@click.group(cls=_Group, invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--db", default="relaypoint.db", envvar="RELAYPOINT_DB", show_default=True, metavar="URL",
              help="The store: a file path, sqlite:///path or postgresql://user@host/dbname (env RELAYPOINT_DB).")
@click.option("--durability", type=click.Choice(DURABILITIES, case_sensitive=False),
              default=DURABILITY, envvar="RELAYPOINT_DURABILITY",
              show_default=True, help="full: every recorded step is on disk before the next starts (survives a "
              "power cut); normal: faster, survives a crash of relaypoint but an OS crash or power cut may lose "
              "the last steps (env RELAYPOINT_DURABILITY).")
@click.version_option(package_name="relaypoint")
@click.pass_context
def cli(ctx: click.Context, db: str, durability: str) -> None:
    """Durable, resumable, human-approved runs in a SQLite file or a PostgreSQL database.

    With no command, opens the console.
    """
    ctx.obj = {"db": db, "durability": durability}
    if ctx.invoked_subcommand is None:
        ctx.invoke(console, app_spec=os.environ.get("RELAYPOINT_APP"), readonly=False, by=None)


def console_options(command: Callable[..., None]) -> Callable[..., None]:
    """The options of the commands that open the console (console, review)."""
    return APP_OPTION(click.option("--read-only", "readonly", is_flag=True,
                                   help="Browse without recording anything.")(BY_OPTION(command)))


def _open_console(ctx: click.Context, app_spec: str | None, readonly: bool, by: str | None, review: bool) -> None:
    from relaypoint.tui import run_console  # textual is imported only for the console

    run_console(ctx.obj["db"], app_spec, readonly=readonly, durability=ctx.obj["durability"], review=review, by=by)


@cli.command()
@console_options
@click.pass_context
def console(ctx: click.Context, app_spec: str | None, readonly: bool, by: str | None) -> None:
    """Open the terminal console on the store."""
    _open_console(ctx, app_spec, readonly, by, review=False)


@cli.command()
@APP_OPTION
@click.option("--read-only", "readonly", is_flag=True, help="Browse without recording anything.")
@click.option("--host", default=LOOPBACK_HOST, show_default=True,
              help="Address to listen on; one that is not loopback needs --public.")
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=click.IntRange(1, 65535), help="Port to listen on.")
@click.option("--public", is_flag=True, help="Allow a --host that is not loopback (plain HTTP: the token and "
              "the pages cross the network unencrypted).")
@click.option("--token-file", metavar="PATH", help="Read the token every request needs from PATH (one word) "
              "instead of making a fresh one at each start.")
@click.pass_context
def serve(ctx: click.Context, app_spec: str | None, readonly: bool, host: str, port: int, public: bool,
          token_file: str | None) -> None:
    """Serve the console to web browsers (each browser tab runs its own console) until SIGINT/SIGTERM.

    Prints the address to open, with the token every request needs (a fresh one at each start,
    unless --token-file gives it). The page asks for your name: decisions made through it are
    recorded under it. Listens on the loopback address unless --host and --public say otherwise.
    """
    from .browser import console_command, listen_address, serve_console
    from .browser_access import new_token, read_token_file

    token = read_token_file(token_file) if token_file is not None else new_token()
    if app_spec:
        load_workflows(app_spec)  # fail here, with one line, rather than at a browser's first resume
    Runtime(ctx.obj["db"], create=False, readonly=readonly, durability=ctx.obj["durability"]).close()
    where = listen_address(host, port, public=public)
    if not where.loopback:
        _say(f"Warning: relaypoint serve speaks plain HTTP: on {where.url} its token and every page cross the "
             "network unencrypted, and whoever learns the token can approve, reject, fork and cancel runs", err=True)
    command = console_command(app_spec, readonly=readonly, durability=ctx.obj["durability"])
    serve_console(ctx.obj["db"], where, token, command,
                  announce=lambda line: _say(f"{line}; store {shown(ctx.obj['db'])}", err=True))


@cli.command()
@console_options
@click.pass_context
def review(ctx: click.Context, app_spec: str | None, readonly: bool, by: str | None) -> None:
    """Open the console on the review queue: the oldest pending decision of all runs.

    a approves (enter records it), x rejects, i answers, n / N move along the queue,
    u shows the upstream outputs, escape goes to the runs list.
    """
    _open_console(ctx, app_spec, readonly, by, review=True)


@cli.command()
@click.option("--no-console", is_flag=True, help="Only fill the store; do not open the console.")
@click.option("--root", default=None, metavar="DIR", help="Directory the example audits (default: the relaypoint sources).")
@click.pass_context
def demo(ctx: click.Context, no_console: bool, root: str | None) -> None:
    """Fill the store with real runs of the bundled examples, then open the console.

    The runs rest in every state a run can (completed, paused, interrupted, failed, rejected,
    cancelled, a queued fork, patterns under way); the console gets the examples' app
    (relaypoint.demo:workflows), so it can resume them.
    """
    from .demo import DEMO_APP, build_demo

    runs = build_demo(ctx.obj["db"], root=root, progress=lambda line: _say(line, err=True),
                      durability=ctx.obj["durability"])
    total = sum(_runtime(ctx).counts().values())
    _say(f"demo store {shown(ctx.obj['db'])}: added {len(runs)} runs ({total} in the store)", err=True)
    if not no_console:
        from relaypoint.tui import run_console

        run_console(ctx.obj["db"], DEMO_APP, durability=ctx.obj["durability"])


@cli.command()
@click.argument("workflow")
@APP_OPTION
@click.option("--input", "input_json", metavar="JSON", help="The run input, a JSON object.")
@click.option("--queue", is_flag=True, help="Record the run queued for a worker (relaypoint worker) and execute "
              "nothing here.")
@click.pass_context
def start(ctx: click.Context, workflow: str, app_spec: str | None, input_json: str | None, queue: bool) -> None:
    """Start a run of WORKFLOW and execute it here; prints the run id.

    Exits 0 when the run ends completed or paused, 1 when it failed. With --queue the run is only
    recorded, queued: a worker picks it up.
    """
    if not app_spec:
        raise click.UsageError("start needs --app MODULE:ATTR (or RELAYPOINT_APP) to find the workflow")
    data = _input_arg(input_json)
    workflows = load_workflows(app_spec)
    find_workflow({wf.name: wf for wf in workflows}, workflow)  # refuse before creating a store file
    rt = Runtime(ctx.obj["db"], workflows, create=True, lease_seconds=_lease_seconds(),
                 durability=ctx.obj["durability"])
    ctx.call_on_close(rt.close)
    if queue:
        run_id = rt.enqueue(workflow, data)
        _say(run_id)
        _say(f"run {run_id} is queued: {_continue_hint(run_id, app_spec)}", err=True)
        return
    started: list[str] = []

    try:
        with _steps_print_to_stderr() as stdout:
            def created(run_id: str) -> None:  # print the id before the first step, so a killed run can be found
                started.append(run_id)
                _say(run_id, file=stdout)

            run_id = rt.start(workflow, data, on_created=created)
    except KeyboardInterrupt:
        if started:
            raise click.ClickException(f"run {started[0]} interrupted; continue it with "
                                       f"`relaypoint resume {started[0]} --app {app_spec}`") from None
        raise
    run = rt.get(run_id)
    if run.status == RunStatus.FAILED:
        raise click.ClickException(_failed(run))
    if run.status.is_paused:
        _say(f"run {run_id} is {run.status}{_waits_at(run)}", err=True)


@cli.command("list")
@click.option("--status", type=STATUS_CHOICE, help="Only runs with this status.")
@click.option("--workflow", help="Only runs of this workflow.")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1), help="At most this many runs.")
@click.option("--tokens", is_flag=True, help="Add each run's model requests and tokens (summed over its recorded calls).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array, newest first.")
@click.pass_context
def list_(ctx: click.Context, status: str | None, workflow: str | None, limit: int, tokens: bool, as_json: bool) -> None:
    """List runs, newest first.

    Rows are printed as they are read, a page of the store at a time, so a listing of any length
    starts at once and holds one page in memory. With ``--tokens``, one grouped read per page adds
    each run's usage (``usage`` in ``--json``: ``{"requests", "input_tokens", "output_tokens"}``;
    a run without model requests has zeros).
    """
    rt = _runtime(ctx)
    pages = _batched(_pages(rt, status, workflow, limit))
    columns = [c for c in LIST_COLUMNS if tokens or c != "tokens (in / out)"]
    if as_json:
        _stream_json(r.model_dump(mode="json") | ({"usage": used[r.run_id].as_json()} if tokens else {})
                     for page in pages for used in [_usage(rt, page, tokens)] for r in page)
        return
    _say(_row(columns, *columns))
    for page in pages:
        used = _usage(rt, page, tokens)
        click.echo("\n".join(_row(columns, r.run_id, r.workflow, f"{RUN_SYMBOLS[r.status]} {r.status}",
                                    f"{r.steps_done}/{r.steps_total}", r.current_step or "",
                                    r.updated_at.strftime("%Y-%m-%d %H:%M:%S"),
                                    *([_tokens(used[r.run_id])] if tokens else []), r.parent_run_id or "")
                               for r in page))


def _usage(rt: Runtime, page: list[RunSummary], wanted: bool) -> dict[str, usage.Usage]:
    """The usage of each run of ``page`` (zeros for a run without model requests), or nothing when
    not ``wanted``."""
    found = rt.usage([r.run_id for r in page]) if wanted else {}
    return {r.run_id: found.get(r.run_id, usage.Usage()) for r in page}


def _tokens(used: usage.Usage) -> str:
    """A `list` cell: ``1,204 / 388`` tokens in and out, or ``-`` when no model request was recorded."""
    return f"{used.input_tokens:,} / {used.output_tokens:,}" if used.used else "-"


# Column titles and widths (in terminal cells) of `list`: fixed, so rows line up without the
# listing being read first. Longer workflow and step names end in an ellipsis; ids are never cut.
LIST_COLUMNS = ("run id", "workflow", "status", "progress", "step", "updated (UTC)", "tokens (in / out)", "parent")
LIST_WIDTHS = dict(zip(LIST_COLUMNS, (16, 20, 19, 8, 20, 19, 19, 0)))


def _row(columns: list[str], *cells: str) -> str:
    """One `list` line of ``columns``: each cell cleaned and fitted to its width in :data:`LIST_WIDTHS`."""
    out = []
    for text, title in zip(cells, columns):
        text, width = clean(text), LIST_WIDTHS[title]
        if title in ("workflow", "step") and _cells(text) > width:
            text = set_cell_size(text, width - 1) + "…"
        out.append(text + " " * (width - _cells(text)))
    return "  ".join(out).rstrip()


def _cells(text: str) -> int:
    # ASCII (ids, times) needs no width table; rich's cell_len caches each string it measures.
    return len(text) if text.isascii() else cell_len(text)


def _pages(rt: Runtime, status: str | None, workflow: str | None, limit: int) -> Iterator[RunSummary]:
    """Up to ``limit`` runs, newest first, read :data:`LIST_PAGE` at a time (keyset pages)."""
    before = None
    while limit > 0:
        page = rt.list(status=status, workflow=workflow, limit=min(LIST_PAGE, limit), before=before)
        if not page:
            return
        yield from page
        limit -= len(page)
        before = (to_text(page[-1].created_at), page[-1].run_id)


def _batched(runs: Iterator[RunSummary]) -> Iterator[list[RunSummary]]:
    """``runs`` in lists of :data:`LIST_PAGE` (one write per page rather than per row)."""
    batch: list[RunSummary] = []
    for run in runs:
        batch.append(run)
        if len(batch) == LIST_PAGE:
            yield batch
            batch = []
    if batch:
        yield batch


def _stream_json(values: Iterator[Any]) -> None:
    """Write a JSON array element by element, exactly as ``_dump(list(values))`` would print it."""
    out = sys.stdout
    first = True
    for value in values:
        # An element's JSON holds no raw newline inside strings, so indenting its lines is exact.
        out.write(("[\n  " if first else ",\n  ") + _json(value).replace("\n", "\n  "))
        first = False
    out.write("[]\n" if first else "\n]\n")
    out.flush()


@cli.command()
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="Print the run as JSON (every value whole).")
@click.option("--output", "output_step", metavar="STEP", help="Print this step's whole output as JSON.")
@click.pass_context
def show(ctx: click.Context, run_id: str, as_json: bool, output_step: str | None) -> None:
    """Show a run: header, step chain with outputs and errors.

    A long output, error or traceback is shown as a bounded preview with its size and the command
    that prints all of it; ``--json`` and ``--output STEP`` print values whole.
    """
    rt = _runtime(ctx)
    if output_step is not None:
        run = rt.get(run_id, with_outputs=False)
        step = next((t for t in run.tasks if t.name == output_step), None)
        if step is not None and not step.has_output:
            raise click.ClickException(f"step '{step.name}' of run {run.run_id} has no output (it is {step.status})")
        _dump(rt.step_output(run.run_id, output_step))  # UnknownStep names the steps
        return
    run = rt.get(run_id)
    if as_json:
        _dump(run.shown())
        return
    out = _out()
    whole_run = f"relaypoint show {run.run_id} --json"
    out.print(literal(f"run {run.run_id}  {run.workflow}  {RUN_SYMBOLS[run.status]} {run.status}", "bold"))
    out.print(literal(f"created {run.created_at:%Y-%m-%d %H:%M:%S} UTC, updated {run.updated_at:%Y-%m-%d %H:%M:%S} UTC"))
    if run.parent_run_id:
        at = "" if run.forked_from_iteration is None else f", iteration {run.forked_from_iteration}"
        out.print(literal(f"forked from {run.parent_run_id} at step '{run.forked_from_step}'{at}"))
    if run.forks:
        out.print(literal(f"forks: {', '.join(run.forks)}"))
    if run.lease is not None:
        lease = run.lease
        beat = f", last heartbeat {to_text(lease.heartbeat_at)}" if lease.heartbeat_at else ""
        out.print(literal(f"executor: pid {lease.pid} on {lease.host}{beat}"))
    if run.pending:
        until = f", deadline {to_text(run.pending.deadline_at)}" if run.pending.deadline_at else ""
        _bounded(out, preview(f"waiting: {run.pending.reason} (checkpoint {run.pending.checkpoint_id}{until})"),
                 whole_run, "yellow")
    if run.error:
        _bounded(out, preview(f"error: {run.error}"), whole_run, "red")
    _bounded(out, preview(f"input: {json.dumps(run.input, ensure_ascii=False)}"), whole_run)
    each = usage.per_execution(run.tasks, run.prices)
    if (total := usage.of_run(run.tasks, run.prices, run.forked_at)).used:
        out.print(literal(f"usage: {total.line()}"))
    latest = None
    for t in run.tasks:  # in tree order: a pattern's executions, indented, follow its row
        out.print()
        inside = where(Call.of(t))
        how_far = ""
        if not inside and kind_of(t) is not None:  # a pattern's row: how far it got (3 of 5 running)
            latest = latest or rt.latest_checkpoint(run.run_id)
            how_far = "  · " + progress(t, [c for c in run.tasks if c.parent == t.seq], latest and latest.state)
        out.print(literal(f"{'  ' if inside else ''}{STEP_SYMBOLS[t.status]} {t.name}{inside}  {t.status}  "
                          f"attempts {t.attempts}{how_far}", "bold"))
        indent = "    " if inside else "  "
        if t.progress and t.status == StepStatus.RUNNING:
            out.print(literal(f"{indent}… {t.progress}", "dim"))
        if each[t.seq].used:
            out.print(literal(f"{indent}usage: {each[t.seq].line()}", "dim"))
        if t.has_output:
            whole = whole_run if inside else f"relaypoint show {run.run_id} --output {shlex.quote(t.name)}"
            _bounded(out, preview_json(t.output), whole)
        if t.error:
            _bounded(out, preview(t.traceback or t.error), whole_run, "red")
        for read in read_calls(t.calls):  # what the execution recorded inside it, in order
            c = read.call
            tokens = (f"  tokens {c.input_tokens or 0:,} in / {c.output_tokens or 0:,} out"
                      if c.input_tokens is not None or c.output_tokens is not None else "")
            out.print(literal(f"{indent}· {c.kind} {c.position + 1} {c.name}  {STEP_SYMBOLS[c.status]} {c.status}"
                              f"{tokens}"))
            # What it sent, then ("→") what came back, a bounded line a part.
            for mark, parts, more in (("  ", read.sent, read.more_sent), ("→ ", read.received, read.more_received)):
                for part in parts:
                    said = (f"the result of call {part.same_as + 1}, above" if part.same_as is not None else
                            part.value if isinstance(part.value, str) else json.dumps(part.value, ensure_ascii=False))
                    said = said.replace("\n", f"\n{indent}      ")  # continuation lines under their first
                    _bounded(out, preview(f"{indent}  {mark}{part.label}: {said}", chars=CALL_PREVIEW_CHARS,
                                          lines=CALL_PREVIEW_LINES), whole_run, "red" if part.label == "error" else "")
                if more:
                    out.print(literal(f"{indent}  {mark}… {more} more parts: {whole_run}", "dim"))


FAILED_CHARS = 1_000
"""At most this many characters of a failed run's error are said when start or resume ends."""


def _failed(run: Run) -> str:
    """``run {id} failed: {error}``, the error bounded to :data:`FAILED_CHARS` (``show`` prints it whole)."""
    error = preview(run.error or "", chars=FAILED_CHARS, lines=1)
    more = f"… ({error.size:,} bytes in all: relaypoint show {run.run_id})" if error.cut else ""
    return f"run {run.run_id} failed: {error.head}{more}"


def _waits_at(run: Run) -> str:
    """Where a paused run waits: `` at step 'draft'``, or inside a pattern
    `` at step 'argue' (iteration 2, agent 'con')``."""
    step = paused_execution(run.tasks, run.pending) if run.pending else None
    if step is None:
        return f" at step '{run.current_step}'"
    return f" at step '{step.name}'{where(Call.of(step))}"


def _bounded(out: Console, shown: Preview, whole: str, style: str = "") -> None:
    """Print a bounded preview (see :func:`relaypoint.views.display.preview`); when it was cut, say the
    whole size and the command ``whole`` that prints all of it."""
    out.print(literal(shown.head, style, multiline=True))
    if shown.cut:
        out.print(literal(shown.note(whole), "dim"))


@cli.command()
@click.argument("run_id")
@APP_OPTION
@click.option("--allow-drift", is_flag=True, help="Resume even if the workflow's steps changed (maps completed steps by name).")
@click.option("--replan", is_flag=True, help="The planner the run is inside decomposes its goal again (its recorded "
              "plan is kept otherwise).")
@click.pass_context
def resume(ctx: click.Context, run_id: str, app_spec: str | None, allow_drift: bool, replan: bool) -> None:
    """Continue a queued, interrupted or failed run at its first non-completed step."""
    if not app_spec:
        raise click.UsageError("resume needs --app MODULE:ATTR (or RELAYPOINT_APP) to run the steps")
    rt = _runtime(ctx, app_spec)
    try:
        with _steps_print_to_stderr():
            status = rt.resume(run_id, allow_drift=allow_drift, replan=replan)
    except KeyboardInterrupt:
        raise click.ClickException(f"run {run_id} interrupted; continue it with "
                                   f"`relaypoint resume {run_id} --app {app_spec}`") from None
    run = rt.get(run_id)
    if status == RunStatus.FAILED:
        raise click.ClickException(_failed(run))
    _say(f"run {run.run_id} is {status}" + (_waits_at(run) if status.is_paused else ""))


@cli.command()
@click.argument("run_id")
@APP_OPTION
@click.option("--by", callback=_named, help="Who decides (default: the OS user).")
@click.option("--comment", help="A note kept with the decision.")
@click.option("--output", "output_json", metavar="JSON", help="Replace the gated step's output with this JSON.")
@click.option("--checkpoint", type=int, help="Refuse if the run no longer waits on this checkpoint id.")
@click.pass_context
def approve(ctx: click.Context, run_id: str, app_spec: str | None, by: str | None, comment: str | None,
            output_json: str | None, checkpoint: int | None) -> None:
    """Approve the run's pending checkpoint; the run becomes queued.

    An edited output (--output) of a typed step is checked against the JSON Schema the run
    recorded; with --app, by the step's model itself, its own validators included.
    """
    output = parse_json_arg(output_json, "--output") if output_json is not None else None
    if output_json is not None and output is None:  # None is "not edited" to Runtime.approve
        raise click.ClickException("--output null: an edited output cannot be null; approve without --output "
                                   "to keep the step's output as it is")
    rt = _runtime(ctx, app_spec if output is not None else None)  # the app only checks an edit
    cp = rt.approve(run_id, by=by, comment=comment, output=output, checkpoint_id=checkpoint)
    rid = cp.run_id
    _say(f"approved checkpoint {cp.checkpoint_id} (step '{cp.step}') of run {rid}; the run is queued: "
         f"{_continue_hint(rid)}")


@cli.command()
@click.argument("run_id")
@click.option("--comment", required=True, help="The reason (required).")
@click.option("--by", callback=_named, help="Who decides (default: the OS user).")
@click.option("--checkpoint", type=int, help="Refuse if the run no longer waits on this checkpoint id.")
@click.pass_context
def reject(ctx: click.Context, run_id: str, comment: str, by: str | None, checkpoint: int | None) -> None:
    """Reject the run's pending approval; the run becomes rejected."""
    cp = _runtime(ctx).reject(run_id, comment=comment, by=by, checkpoint_id=checkpoint)
    _say(f"rejected checkpoint {cp.checkpoint_id} (step '{cp.step}') of run {cp.run_id}")


@cli.command()
@click.argument("run_id")
@click.option("--value", "value_json", required=True, metavar="JSON", help="The answer, as JSON (a string is '\"text\"').")
@click.option("--by", callback=_named, help="Who answers (default: the OS user).")
@click.option("--checkpoint", type=int, help="Refuse if the run no longer waits on this checkpoint id.")
@click.pass_context
def respond(ctx: click.Context, run_id: str, value_json: str, by: str | None, checkpoint: int | None) -> None:
    """Answer the run's pending input request; the run becomes queued."""
    value = parse_json_arg(value_json, "--value")
    cp = _runtime(ctx).respond(run_id, value, by=by, checkpoint_id=checkpoint)
    _say(f"recorded the answer for step '{cp.step}' of run {cp.run_id}; the run is queued: "
         f"{_continue_hint(cp.run_id)}")


@cli.command()
@click.argument("run_id")
@click.option("--from", "from_step", required=True, metavar="STEP", help="First step the fork re-runs.")
@click.option("--iteration", type=int, metavar="N",
              help="With a pattern as STEP: fork from the boundary before its iteration N (round, turn, pass, "
              "subtask), reusing the iterations before it.")
@click.option("--input", "input_json", metavar="JSON", help="A new input for the fork (a JSON object).")
@click.pass_context
def fork(ctx: click.Context, run_id: str, from_step: str, iteration: int | None, input_json: str | None) -> None:
    """Fork a run from the boundary before STEP (or before an iteration of it); prints the new run id.

    The fork is queued. When it pauses at a copied approval gate its parent did not approve,
    stderr says why.
    """
    data = _input_arg(input_json)
    rt = _runtime(ctx)
    new_id = rt.fork(run_id, from_step, data, iteration=iteration)
    _say(new_id)
    run = rt.get(new_id, with_outputs=False)
    if run.pending is not None:  # a copied gate the parent did not approve
        _say(f"run {new_id} is {run.status} at step '{run.pending.step}': {run.pending.reason}", err=True)


@cli.command()
@click.argument("run_id")
@click.option("--by", callback=_named, help="Who cancels (default: the OS user).")
@click.pass_context
def cancel(ctx: click.Context, run_id: str, by: str | None) -> None:
    """Cancel a run that has not ended."""
    rt = _runtime(ctx)
    rid = rt.resolve(run_id)
    previous = rt.cancel(rid, by=by)
    _say(f"cancelled run {rid} (it was {previous})")


@cli.command()
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array, oldest first.")
@click.pass_context
def events(ctx: click.Context, run_id: str, as_json: bool) -> None:
    """Show a run's audit trail (times in UTC, ISO 8601)."""
    evs = _runtime(ctx).events(run_id)
    if as_json:
        _dump([e.model_dump(mode="json") for e in evs])
        return
    table = Table(box=None, pad_edge=False)
    for col in ("at (UTC)", "event", "step", "by", "detail"):
        table.add_column(col)
    for e in evs:
        detail = ", ".join(f"{k}={v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}"
                           for k, v in (e.detail or {}).items() if v not in (None, False))
        table.add_row(e.at.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z", literal(e.kind), literal(e.step or ""),
                      literal(e.actor or ""), literal(detail))
    _out().print(table)


@cli.command()
@click.argument("run_id")
@click.pass_context
def announce(ctx: click.Context, run_id: str) -> None:
    """Announce the pause RUN_ID waits on again: the next poll of a worker with --on-pause runs its hook.

    For a pause whose hook failed every attempt (once the hook is fixed), or to tell a person again.
    """
    cp = _runtime(ctx).announce(run_id)
    _say(f"run {cp.run_id}: the pause at checkpoint {cp.checkpoint_id} (step '{cp.step}') will be announced by the "
         "next poll of a worker with --on-pause")


@cli.command()
@APP_OPTION
@click.option("--concurrency", default=1, show_default=True, type=click.IntRange(1, 64),
              help="Runs in flight at once (their async calls on one event loop, sync ones in threads).")
@click.option("--max-recoveries", default=3, show_default=True, type=click.IntRange(0),
              help="Mark a run failed once its process has died more than this many times executing it alone.")
@click.option("--poll", default=1.0, show_default=True, type=click.FloatRange(0.05), help="Seconds between polls.")
@click.option("--on-pause", "on_pause", metavar="CMD",
              help="Run CMD (split like a shell command line, run without a shell) for each pause for a person in the "
              "store not announced yet, with the pause as JSON on its standard input, in the background; a failed "
              f"attempt is tried again ({HOOK_ATTEMPTS} in all), and a pause is marked announced once one succeeds.")
@click.option("--on-pause-timeout", default=HOOK_SECONDS, show_default=True, type=click.FloatRange(0.1),
              metavar="SECONDS", help="Kill an --on-pause command still running after this many seconds.")
@click.option("--stats-every", "stats_seconds", default=STATS_SECONDS, show_default=True, type=click.FloatRange(0.1),
              metavar="SECONDS", help="While busy, print runs in flight, boundaries per second and changes per "
              "transaction this often.")
@click.option("--json", "as_json", is_flag=True,
              help="Print each line as a JSON object ({\"at\", \"message\"}, or {\"at\", \"stats\"}), for logs.")
@click.pass_context
def worker(ctx: click.Context, app_spec: str | None, concurrency: int, max_recoveries: int, poll: float,
           on_pause: str | None, on_pause_timeout: float, stats_seconds: float, as_json: bool) -> None:
    """Execute queued runs and recover interrupted ones until SIGINT/SIGTERM."""
    from .pausehook import PauseHook
    from .throughput import WorkerStats
    from .worker import Worker

    def say(line: str) -> None:
        _say(json.dumps({"at": to_text(utcnow()), "message": line}) if as_json else line, err=True)

    def stats(figures: WorkerStats) -> None:
        _say(json.dumps({"at": to_text(utcnow()), **figures.as_json()}) if as_json else figures.line(), err=True)

    if not app_spec:
        raise click.UsageError("worker needs --app MODULE:ATTR (or RELAYPOINT_APP) to run the steps")
    log = say
    hook = None
    if on_pause is not None:
        try:
            command = shlex.split(on_pause)
        except ValueError as e:
            raise click.UsageError(f"--on-pause: {e}") from None
        if not command:
            raise click.UsageError("--on-pause needs a command, e.g. --on-pause 'notify-send relaypoint'")
        try:
            hook = PauseHook(command, timeout=on_pause_timeout, log=log)
        except ValueError as e:  # its program cannot be started: every announcement would fail
            raise click.UsageError(f"--on-pause: {e}") from None
    workflows = load_workflows(app_spec)
    w = Worker(ctx.obj["db"], workflows, concurrency=concurrency, poll_seconds=poll,
               max_recoveries=max_recoveries, lease_seconds=_lease_seconds(), durability=ctx.obj["durability"],
               log=log, on_pause=hook, stats_seconds=stats_seconds, on_stats=stats)
    w.check_store()  # a missing, unusable or read-only store is one line, before the worker says it started
    say(f"worker on {shown(ctx.obj['db'])}: {', '.join(wf.name for wf in workflows)}, "
        f"concurrency {concurrency}{f'; pauses are announced to {command[0]}' if hook else ''}; "
        "SIGINT or SIGTERM stops it gracefully")
    with _steps_print_to_stderr():
        w.run()


@cli.command()
@APP_OPTION
@click.pass_context
def mcp(ctx: click.Context, app_spec: str | None) -> None:
    """Serve the store to an agent host: a Model Context Protocol server over stdio.

    Its tools list, show and decide runs (approve, reject, respond), fork and cancel them, and with
    --app resume them in a background process and enqueue new ones for a worker. Standard output
    carries only the protocol.
    """
    from .mcp_server import build_server

    # a missing or unusable store is one line, before the server starts
    Runtime(ctx.obj["db"], create=False, durability=ctx.obj["durability"]).close()
    server = build_server(ctx.obj["db"], app_spec=app_spec, durability=ctx.obj["durability"],
                          lease_seconds=_lease_seconds())
    server.run("stdio")


@cli.command()
@click.argument("run_id")
@click.pass_context
def delete(ctx: click.Context, run_id: str) -> None:
    """Delete a run and everything recorded of it, in one transaction."""
    _say(f"deleted run {_runtime(ctx).delete(run_id)}")


@cli.command()
@click.option("--days", required=True, type=click.FloatRange(0), help="Delete runs last updated more than this many days ago.")
@click.option("--status", "statuses", multiple=True, type=STATUS_CHOICE,
              help="Only runs with this status (repeatable; default: completed, rejected, cancelled).")
@click.pass_context
def prune(ctx: click.Context, days: float, statuses: tuple[str, ...]) -> None:
    """Delete old runs (by default only terminal ones)."""
    rt = _runtime(ctx)
    ids = rt.prune(timedelta(days=days), statuses) if statuses else rt.prune(timedelta(days=days))
    _say(f"deleted {len(ids)} run(s)")


@cli.command()
@click.option("--grant", "writers", multiple=True, metavar="ROLE",
              help="PostgreSQL: let ROLE use the store: every command, the worker, the console (repeatable).")
@click.option("--grant-read", "readers", multiple=True, metavar="ROLE",
              help="PostgreSQL: let ROLE browse the store read-only (repeatable).")
@click.pass_context
def migrate(ctx: click.Context, writers: tuple[str, ...], readers: tuple[str, ...]) -> None:
    """Make the store when there is none, or upgrade an older one to this relaypoint's schema.

    Any command that opens a store to write upgrades it the same way; this one does only that, so a team
    can run it once as the schema's owner (the everyday role may not change tables). --grant and
    --grant-read give roles the privileges relaypoint needs, now and after later upgrades.
    """
    with open_store(ctx.obj["db"], create=True, durability=ctx.obj["durability"]) as store:
        if store.upgraded_from is None:
            _say(f"{store.where} is at store schema version {store.schema_version}; nothing to upgrade")
        elif store.upgraded_from == 0:
            _say(f"made a store at {store.where} (schema version {store.schema_version})")
        else:
            _say(f"upgraded {store.where} from store schema version {store.upgraded_from} to {store.schema_version}")
        for roles, writes in ((writers, True), (readers, False)):
            for role in roles:
                store.grant(role, writes=writes)
                _say(f"granted {role} what it needs to {'use' if writes else 'browse'} the store")


@cli.command("copy")
@click.option("--from", "source_url", required=True, metavar="URL", help="The store to copy from (only read).")
@click.option("--to", "destination_url", required=True, metavar="URL",
              help="The store to copy into (made when missing, once there is a run to copy); it must hold none of "
                   "the runs.")
@click.option("--skip-existing", is_flag=True, help="Copy only the runs the destination does not hold yet.")
@click.option("--batch", default=BATCH_RUNS, show_default=True, type=click.IntRange(1),
              help="Runs per transaction of the destination.")
@click.pass_context
def copy(ctx: click.Context, source_url: str, destination_url: str, skip_existing: bool, batch: int) -> None:
    """Copy every run (steps, outputs, checkpoints, decisions, events) from one store to another.

    SQLite to PostgreSQL moves a local store to a team's server, and back. Refused, nothing written (nor a
    destination made), when the destination holds any of the runs or a run is executing; an interrupted copy leaves
    whole runs only (finish it with --skip-existing). The counts are checked before each batch commits.
    """
    durability = ctx.obj["durability"]

    def opened(role: str, url: str, **options: Any) -> RunStore:
        try:
            store = open_store(url, **options)
        except RelaypointError as e:
            raise click.ClickException(f"{role} {shown(url)}: {e}") from e
        ctx.call_on_close(store.close)
        return store

    source = opened("source", source_url, readonly=True)
    try:
        destination: RunStore | None = opened("destination", destination_url, durability=durability)
    except click.ClickException as e:
        if not isinstance(e.__cause__, StoreMissing):
            raise
        destination = None  # made by copy_runs once there is a run to write: a refused copy makes nothing
    # The bar holds only relaypoint's own text: drawn on the terminal's stderr itself, not through
    # the cleaning wrapper (which would show its control sequences as escapes).
    err = Console(file=getattr(sys.stderr, "replaced", sys.stderr))
    copied = 0
    with Progress(TextColumn("copying"), BarColumn(), MofNCompleteColumn(), TextColumn("runs"), TimeRemainingColumn(),
                  console=err, transient=True, disable=not err.is_terminal) as bar:
        task = bar.add_task("copy", total=None)

        def advance(runs: int) -> None:
            nonlocal copied
            copied += runs
            bar.advance(task, runs)

        try:
            report = copy_runs(source, destination, skip_existing=skip_existing, batch=batch,
                               create=lambda: opened("destination", destination_url, create=True,
                                                     durability=durability),
                               started=lambda total: bar.update(task, total=total), progress=advance)
        except KeyboardInterrupt:
            raise click.ClickException(f"interrupted: {copied:,} runs were copied to {shown(destination_url)}, each "
                                       "whole; copy the rest with --skip-existing") from None
    if destination is None and report.runs == 0:
        _say(f"nothing to copy: {shown(source_url)} holds no runs, so no store was made at {shown(destination_url)}")
    else:
        _say(report.summary(shown(source_url), shown(destination_url)))


class _CleanStderr(io.TextIOWrapper):
    """stderr with every write cleaned (newlines and tabs kept): whatever reaches it — a message,
    a step's own writes, a warning, a traceback — shows control characters as visible escapes."""

    def write(self, text: str) -> int:
        if not isinstance(text, str):  # refuse bytes as TextIOWrapper does (click probes with b"")
            return super().write(text)
        super().write(clean(text, multiline=True))
        return len(text)


def _clean_stderr() -> None:
    stream = sys.stderr
    if not isinstance(stream, io.TextIOWrapper) or isinstance(stream, _CleanStderr):
        return
    stream.flush()
    cleaned = _CleanStderr(stream.buffer, encoding=stream.encoding, errors=stream.errors, line_buffering=True)
    cleaned.replaced = stream  # kept alive: collecting it would close the shared buffer
    sys.stderr = cleaned


def main() -> None:
    """Console-script entry point: every error, usage mistakes included, is one line on stderr,
    cleaned (stored text in it is shown with escapes, never as terminal control). The process
    exits once the command is done even when a step's sync call hangs past its timeout (see
    :func:`_exit_past_hung_calls`)."""
    try:
        _main()
    except SystemExit as e:
        _exit_past_hung_calls(e.code if isinstance(e.code, int) else 0 if e.code is None else 1)
        raise
    _exit_past_hung_calls(0)


HUNG_CALL_SECONDS = 0.5
"""How long the CLI waits, once its command is done, for the runtime's call threads to end."""


def _exit_past_hung_calls(code: int) -> None:
    """Exit with ``code`` now, without waiting, when a call thread of the runtime is still running
    :data:`HUNG_CALL_SECONDS` after the command ended: a sync call past its timeout is abandoned in
    its thread (its step already failed, the late result is discarded), and the interpreter would
    otherwise wait for it at exit however long it hangs. Everything recorded is already durable."""
    deadline = time.monotonic() + HUNG_CALL_SECONDS
    hung = [t for t in threading.enumerate() if t.name.startswith(CALL_THREAD_PREFIX)]
    for thread in hung:
        thread.join(max(0.0, deadline - time.monotonic()))
    if any(t.is_alive() for t in hung):
        _say("a step's call is still running in its thread past the step's timeout; exiting without waiting "
             "for it (its result is discarded)", err=True)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _main() -> None:
    _clean_stderr()
    try:
        cli.main(prog_name="relaypoint", standalone_mode=False)
    except click.UsageError as e:
        hint = f" (see `{e.ctx.command_path} --help`)" if e.ctx else ""
        if "No such option" in e.format_message():
            hint += "; --db goes before the command, the command's options after it: " \
                    "relaypoint --db URL COMMAND [--app MODULE:ATTR] ..."
        _say(f"Error: {e.format_message()}{hint}", err=True)
        sys.exit(e.exit_code)
    except click.ClickException as e:
        _say(f"Error: {e.format_message()}", err=True)
        sys.exit(e.exit_code)
    except click.Abort:
        _say("Aborted.", err=True)
        sys.exit(1)
