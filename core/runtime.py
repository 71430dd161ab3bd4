"""The runtime: every operation on runs (start, enqueue, resume, approve, reject, respond, fork,
cancel, delete, announce, and the queries), shared by the Python API, the CLI and the console.

:class:`Runtime` is a thin facade: it opens the store and composes the modules that own each
concern, each given the store and the clock: :mod:`~relaypoint.claims` (claiming a run),
:mod:`~relaypoint.execution` (the run loop over a driver), :mod:`~relaypoint.recovery` (dead
owners), :mod:`~relaypoint.decisions`, :mod:`~relaypoint.forks` and :mod:`~relaypoint.retention`.
"""

from __future__ import annotations

import asyncio
import getpass
import inspect
import os
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from . import encoding, tracing
from .claims import Claims
from .clock import Clock, IdFactory, new_run_id, utcnow
from .decisions import Decisions, step_named
from .defaults import DURABILITY, LEASE_SECONDS
from .errors import DefinitionError, InvalidValue, RefusedTransition, UnknownWorkflow
from .execution import Claim, Executor
from .forks import Forks
from .models import CallRecord, Checkpoint, Event, PendingDecision, Run, RunSummary, StepRecord
from .recovery import Recovery, now_of
from .refusals import announce_refusal, resume_refusal
from .retention import Retention
from .runner import Runner
from .status import TERMINAL, AnnouncementOutcome, RunStatus
from .store import Change, Lookup, StoreReadOnly, open_store
from .store.group import CommitCounts
from .usage import Usage, forked_at, of_calls, own, per_execution, recorded_prices
from .workflow import Workflow, find_workflow

__all__ = ["Runtime", "os_user"]


def _input_text(input: dict[str, Any] | None) -> str:
    """A new run's input (None: an empty object) as stored; ``InvalidValue`` unless a JSON object."""
    input = {} if input is None else input
    if not isinstance(input, dict):
        raise InvalidValue("the run input must be a JSON object, e.g. '{\"topic\": \"x\"}'")
    return encoding.dumps(input, "input")


def os_user() -> str:
    """The operating-system user name, the default ``by`` of a decision."""
    try:
        return getpass.getuser()
    except Exception:  # no name for this uid (containers): record the uid
        return f"uid:{os.getuid()}"


class Runtime:
    """Operations on the runs of one store.

    ``url``: the store (a SQLite path or ``sqlite:///path``, created owner-only if missing and
    ``create`` is true; or ``postgresql://user@host/db[?schema=NAME]``, its schema created likewise). ``workflows``: definitions needed by ``start`` and ``resume``; decisions,
    forks, cancels and queries need none. ``clock``/``id_factory``: injectable for stable tests.
    ``lease_seconds``: how long an executor's lease lasts without a heartbeat (renewed every third
    of it). ``max_recoveries``: see :meth:`resume` (None: no limit). ``durability``: "full" (each
    boundary on disk when it returns) or "normal" (survives a process crash, not a power cut).

    One runtime may be shared between threads: every operation may be called from many at once
    (a web app's ``asyncio.to_thread``), each thread working on a store connection of its own, opened
    at its first call (on PostgreSQL, one server connection per thread). From a running event loop,
    use the ``a``-twins, which never block it: :meth:`astart` and :meth:`aresume` run the calls on
    that loop (sync ones in worker threads); :meth:`aget`, :meth:`alist`, :meth:`aapprove`,
    :meth:`areject`, :meth:`arespond`, :meth:`acancel` and :meth:`afork` run the operation in a
    worker thread.

    Raises ``StoreError`` when the store cannot be used, ``DefinitionError`` for two workflows with
    one name.
    """

    def __init__(self, url: str, workflows: Iterable[Workflow] = (), *, clock: Clock = utcnow,
                 id_factory: IdFactory = new_run_id, lease_seconds: float = LEASE_SECONDS,
                 create: bool = True, readonly: bool = False, max_recoveries: int | None = None,
                 durability: str = DURABILITY) -> None:
        self.workflows: dict[str, Workflow] = {}
        for wf in workflows:
            if wf.name in self.workflows:
                raise DefinitionError(f"two workflows are named {wf.name!r}")
            self.workflows[wf.name] = wf
        self.store = open_store(str(url), create=create, readonly=readonly, durability=durability)
        self.clock = clock
        self.id_factory = id_factory
        self.lease_seconds = lease_seconds
        self.max_recoveries = max_recoveries
        self._recovery = Recovery(self.store, clock)
        self._executor = Executor(self.store, clock, self._recovery)
        self._runner = Runner(self._executor, self._recovery)
        self._claims = Claims(self.store, clock, self._recovery, self._executor, lease_seconds=lease_seconds,
                              max_recoveries=max_recoveries)
        self._decisions = Decisions(self.store, clock, self._recovery, self.workflows)
        self._forks = Forks(self.store, clock, id_factory)
        self._retention = Retention(self.store, clock)

    def close(self) -> None:
        """Close the store's connections, every thread's; call it once the threads using the
        runtime are done. Its operations raise ``StoreError`` afterwards."""
        self._runner.close()
        self.store.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- queries --------------------------------------------------------------------------------

    def get(self, run_id: str, *, with_outputs: bool = True) -> Run:
        """The run (full id or unique prefix) with its input, step chain (with outputs and recorded
        calls unless ``with_outputs=False``: the console reads one at a time with :meth:`step_output`), pending
        checkpoint, forks, the iteration it was forked from, whether its parent was deleted, and the
        prices recorded when it was created (its usage: :mod:`relaypoint.usage`). Raises ``UnknownRun``."""
        self.sweep()
        rid = self.store.resolve(run_id)
        head = self.store.run(rid)
        tasks = self.store.steps(rid)
        if with_outputs:
            calls: dict[int, list[CallRecord]] = {}
            for c in self.store.calls(rid):
                calls.setdefault(c.seq, []).append(c)
            tasks = [t.model_copy(update={"output": self.store.output(rid, t.seq)[1] if t.has_output else None,
                                          "calls": calls.get(t.seq, [])}) for t in tasks]
        parent = head.parent_run_id
        return Run(
            **{k: getattr(head, k) for k in RunSummary.model_fields}, input=head.input or {}, tasks=tasks,
            pending=self.store.checkpoint(rid, Lookup.PENDING), forks=[f.run_id for f in self.store.list_runs(parent=rid, oldest_first=True, limit=None)], definition=head.definition,
            forked_from_iteration=self._forked_from_iteration(rid) if parent is not None else None,
            parent_deleted=parent is not None and not self.store.exists(parent),
            prices=self.prices(rid),
        )

    def _forked_from_iteration(self, run_id: str) -> int | None:
        """The iteration of a pattern the fork ``run_id`` was made from, as its fork checkpoint names
        it (see :mod:`relaypoint.forks`); None for a fork from a whole step."""
        cp = self.store.checkpoint(run_id, Lookup.FORK)
        origin = cp.state.get("fork") if cp is not None and isinstance(cp.state, dict) else None
        iteration = origin.get("iteration") if isinstance(origin, dict) else None
        return iteration if isinstance(iteration, int) and not isinstance(iteration, bool) else None

    def counts(self) -> dict[str, int]:
        """Number of runs per status (the console's status line), in time independent of the
        number of runs."""
        return self.store.count_by_status()

    def data_version(self) -> Any:
        """A value that changes whenever anything is committed on the store, by this runtime or by
        any other connection or process; comparable only between calls on this same runtime (from
        any thread). The console skips a refresh when it has not changed."""
        return self.store.data_version()

    @property
    def commit_counts(self) -> CommitCounts:
        """The store's running totals of changes, boundaries and transactions committed through this
        runtime (a worker's throughput line reads them; see :mod:`relaypoint.throughput`)."""
        return self.store.commit_counts

    @property
    def readonly_reason(self) -> str | None:
        """Why nothing can be recorded in this store, or None when it is writable."""
        return self.store.readonly_reason

    def read_only_error(self, consequence: str) -> StoreReadOnly:
        """The error to raise for something this read-only store cannot record (check
        :attr:`readonly_reason` first): a ``StoreReadOnly`` naming the store, why it is read-only and
        ``consequence`` (what cannot be done, e.g. "a worker ... needs a store it can write")."""
        return self.store.read_only_error(consequence)

    @property
    def url(self) -> str:
        """The store's URL as given to the runtime (what another process is handed to open it)."""
        return self.store.url

    def resolve(self, run_id: str) -> str:
        """The full run id for ``run_id``, a full id or a unique prefix. Raises ``UnknownRun`` for an
        empty id, no match, or a prefix matching several runs (the message names up to two)."""
        return self.store.resolve(run_id)

    def runnable(self, workflows: Iterable[str], limit: int) -> list[tuple[str, RunStatus]]:
        """Up to ``limit`` (run id, status) of the queued and interrupted runs of the workflows
        named ``workflows``, least recently updated first: a worker's candidates. A running run
        whose owner died counts only once :meth:`sweep` has marked it interrupted."""
        return [(r.run_id, r.status) for r in self.store.runs_in((RunStatus.QUEUED, RunStatus.INTERRUPTED),
                                                                 workflows=workflows, limit=limit)]

    def list(self, status: str | None = None, workflow: str | None = None, limit: int = 100, *,
             before: tuple[str, str] | None = None, after: tuple[str, str] | None = None,
             within: tuple[tuple[str, str], tuple[str, str]] | None = None, oldest_first: bool = False,
             search: str | None = None) -> list[RunSummary]:
        """Newest-first runs (``oldest_first``: oldest first), at most ``limit``. Positions are
        (created_at text, run_id): ``before``/``after`` continue past a page's last row, ``within``
        keeps the runs between two positions (newest, oldest; both included); ``search`` is a run
        id or workflow name prefix (see :meth:`RunStore.list_runs`). Never reads step outputs.
        Raises ``ValueError`` for a status outside the vocabulary."""
        if status is not None:
            RunStatus(status)
        self.sweep()
        return self.store.list_runs(status=status, workflow=workflow, limit=limit, before=before, after=after,
                                    within=within, oldest_first=oldest_first, search=search)

    def prices(self, run_id: str) -> dict[str, tuple[float, float]]:
        """The prices run ``run_id`` (a full id) recorded when it was created: model -> (US dollars
        per million input tokens, per million output tokens); empty when its workflow gave none."""
        return recorded_prices(self.store.events(run_id, limit=1))

    def run_usage(self, run_id: str) -> Usage:
        """Run ``run_id``'s (a full id) usage over the calls it made itself (a fork's leave out
        those it copied: :func:`relaypoint.usage.own`), priced as it recorded (what the console's
        run headers show; :meth:`get`'s ``shown()`` gives it per execution too)."""
        if run_id not in self.store.usage([run_id]):  # no model request recorded: no call read
            return Usage()
        head = self.store.run(run_id, documents=False)
        return of_calls(own(self.store.calls(run_id), forked_at(head.created_at, head.parent_run_id)),
                        self.prices(run_id))

    def execution_usage(self, run_id: str, seq: int) -> Usage:
        """Execution ``seq``'s usage in run ``run_id`` (a full id): its recorded calls' and, for a
        pattern's row, its calls' executions' (see :func:`relaypoint.usage.per_execution`), priced
        as the run recorded (what the console shows above a step's recorded calls)."""
        if run_id not in self.store.usage([run_id]):
            return Usage()
        calls: dict[int, list[CallRecord]] = {}
        for c in self.store.calls(run_id):
            calls.setdefault(c.seq, []).append(c)
        tasks = [t.model_copy(update={"calls": calls.get(t.seq, [])}) for t in self.store.steps(run_id)]
        return per_execution(tasks, self.prices(run_id)).get(seq, Usage())

    def usage(self, run_ids: Iterable[str]) -> dict[str, Usage]:
        """The token usage of each of ``run_ids`` (full ids) that recorded model requests, read in
        one grouped query (``list --tokens``); without cost: a run's cost is priced as it recorded
        (:meth:`run_usage`)."""
        return self.store.usage(list(run_ids))

    def pending_decisions(self, limit: int = 100) -> list[PendingDecision]:
        """The review queue: decisions owed across all runs (approvals, input requests, orphan
        holds), oldest first, at most ``limit``; each names the checkpoint a decision must cite
        (``checkpoint_id``, the stale-view guard of approve, reject and respond). Never reads step
        outputs."""
        return self.store.pending_decisions(limit)

    def announce_pauses(self, limit: int, until: datetime) -> list[PendingDecision]:
        """Claim the decisions owed that no one has announced, oldest first, at most ``limit``, until
        ``until`` (UTC): each is returned to one caller across any number of processes, and no one
        else claims it before ``until`` (``worker --on-pause``, whose hook tries to announce each).
        The caller ends each claim with :meth:`settle_announcement`; a claim not settled by
        ``until`` (its caller died) is claimed again by the next caller: at least once. A pause
        whose announcement failed is not claimed again until :meth:`announce` asks. Writes nothing
        when there is nothing to claim. Raises ``StoreReadOnly``."""
        return self.store.claim_announcements(limit, now_of(self.clock), until)

    def settle_announcement(self, checkpoint_id: int, until: datetime, outcome: AnnouncementOutcome) -> bool:
        """End the claim :meth:`announce_pauses` made until ``until`` on checkpoint ``checkpoint_id``:
        ``announced`` marks the pause announced, ``failed`` leaves it unannounced and unclaimed
        until :meth:`announce` asks, ``released`` lets the next caller claim it at once. Returns
        False, nothing written, when the claim is no longer the caller's (it expired and was claimed
        again, or :meth:`announce` reopened it). Raises ``StoreReadOnly``."""
        return self.store.settle_announcement(checkpoint_id, until, outcome, now_of(self.clock))

    def announce(self, run_id: str) -> Checkpoint:
        """Ask for the pause ``run_id`` waits on to be announced again (``relaypoint announce``):
        whether it was announced, its hook failed every attempt, or it was never tried, the next
        poll of a worker with ``--on-pause`` runs the hook for it. Returns the pause's checkpoint.
        Raises ``UnknownRun``, ``RefusedTransition`` (the run waits on no one), ``StoreReadOnly``."""
        with self.store.transaction():
            rid = self.store.resolve(run_id)
            pending = self.store.checkpoint(rid, Lookup.PENDING)
            if (refusal := announce_refusal(self.store.run(rid, documents=False), pending)) is not None:
                raise RefusedTransition(refusal)
            self.store.commit(Change(rid, now_of(self.clock), run=None, reopened=pending.checkpoint_id))
        return pending

    def events(self, run_id: str) -> list[Event]:
        """The run's audit trail, oldest first. Raises ``UnknownRun``."""
        return self.store.events(self.store.resolve(run_id))

    def steps(self, run_id: str) -> list[StepRecord]:
        """The run's step executions without outputs (cheap; see :meth:`step_output`). Raises ``UnknownRun``."""
        return self.store.steps(self.store.resolve(run_id))

    def step_output(self, run_id: str, step: str) -> Any:
        """One step's output. Raises ``UnknownRun`` or ``UnknownStep``."""
        rid = self.store.resolve(run_id)
        return self.store.output(rid, step_named(self.store, rid, step).seq)[1]

    # Reads by execution: a pattern's calls share its name, so these take the execution's seq, and
    # the full run id (as :meth:`get` and :meth:`list` give it): the console reads them per step.

    def execution(self, run_id: str, seq: int) -> StepRecord | None:
        """Execution ``seq`` of run ``run_id`` (a full id), without its output; None when the run
        has none (deleted, or its chain rebuilt by a drift-allowed resume)."""
        return self.store.step(run_id, seq)

    def execution_output(self, run_id: str, seq: int) -> Any:
        """The output of execution ``seq`` of run ``run_id`` (a full id), decoded leniently for
        display; None when none is recorded (or there is no such execution)."""
        return self.store.output(run_id, seq)[1]

    def execution_calls(self, run_id: str, seq: int) -> list[CallRecord]:
        """The calls execution ``seq`` of run ``run_id`` (a full id) recorded, in order, their results
        decoded leniently for display ([] when none)."""
        return self.store.calls(run_id, seq)

    def latest_checkpoint(self, run_id: str) -> Checkpoint | None:
        """The newest checkpoint of run ``run_id`` (a full id), of any kind, or None. Its ``state``
        is the driver state last committed (inside a pattern: ``{"next": <group seq>, "in": ...}``)."""
        return self.store.checkpoint(run_id, Lookup.LATEST)

    def sweep(self) -> list[str]:
        """Mark ``interrupted`` every running run whose owner is gone (see
        :func:`relaypoint.lease.owner_gone`: on this host a dead or reused pid, never a live process
        however late its heartbeat; on another host an expired lease). Each dead owner process is
        handled once, all its runs in one transaction. Returns the ids marked. Does nothing on a
        read-only store."""
        return self._recovery.sweep()

    # ---- starting and resuming ------------------------------------------------------------------

    def start(self, workflow: str, input: dict[str, Any] | None = None, *,
              on_created: Callable[[str], None] | None = None) -> str:
        """Create a run of ``workflow`` and execute it in this process until it completes, pauses or
        fails. Returns the run id (check ``get(run_id).status``). ``on_created`` is called with the
        id once the run is recorded, before its first step runs. Async functions run on the
        runtime's own event loop, sync ones in this thread or, beside others, in worker threads (see
        :mod:`relaypoint.runner`); from a coroutine, use :meth:`astart`.

        Raises ``UnknownWorkflow``, ``InvalidValue`` (input not a JSON object), ``LeaseLost``.
        """
        wf = find_workflow(self.workflows, workflow)
        run_id, input_text = self.id_factory(), _input_text(input)
        with tracing.run_span(wf.name, run_id) as span:
            claim = self._claims.start(run_id, wf, input_text, tracing.traceparent(span))
            if on_created is not None:
                on_created(claim.run_id)
            tracing.stopped(span, self._runner.drive(claim))
        return claim.run_id

    async def astart(self, workflow: str, input: dict[str, Any] | None = None, *,
                     on_created: Callable[[str], Any] | None = None) -> str:
        """:meth:`start` from a running event loop, without blocking it: the run's async functions
        run on this loop, its sync ones in worker threads, and the store is written from worker
        threads. Cancelling the awaiting task releases the run ``interrupted`` (``resume`` goes on
        from its last boundary). ``on_created`` is called on this loop's thread; an ``async def``
        one is awaited."""
        wf = find_workflow(self.workflows, workflow)
        run_id, input_text = self.id_factory(), _input_text(input)
        with tracing.run_span(wf.name, run_id) as span:
            claim = await asyncio.to_thread(self._claims.start, run_id, wf, input_text, tracing.traceparent(span))
            if on_created is not None and inspect.isawaitable(created := on_created(claim.run_id)):
                await created
            tracing.stopped(span, await self._runner.adrive(claim))
        return claim.run_id

    def enqueue(self, name: str, input: dict[str, Any] | None = None) -> str:
        """Create a run of workflow ``name`` ``queued``, for a worker (``relaypoint worker``, which
        picks each queued run up once, whatever the number of workers) or a resume to execute;
        nothing executes here. Returns the run id.

        Raises ``UnknownWorkflow``, ``InvalidValue`` (input not a JSON object), ``StoreReadOnly``.
        """
        wf = find_workflow(self.workflows, name)
        run_id, input_text = self.id_factory(), _input_text(input)
        with tracing.enqueue_span(wf.name, run_id) as span:
            self._claims.enqueue(run_id, wf, input_text, tracing.traceparent(span))
        return run_id

    def check_resumable(self, run_id: str) -> Run:
        """The run, if ``resume`` would act on it; otherwise ``RefusedTransition`` saying why and what
        to do instead. Used by the console before it starts a resume process."""
        run = self.get(run_id)
        if (refusal := resume_refusal(run)) is not None:
            raise RefusedTransition(refusal)
        return run

    def resume(self, run_id: str, *, allow_drift: bool = False, replan: bool = False,
               should_stop: Callable[[], bool | str] | None = None, only_if: RunStatus | None = None,
               skip_locked: bool = False) -> RunStatus:
        """Continue a queued, interrupted or failed run at its next step, in this process, until it
        completes, pauses or fails; returns the status it ends in.

        A step found interrupted (running when its owner died: its output was never recorded) is
        re-run with attempt + 1 (``on_orphan="retry"``), or with ``on_orphan="hold"`` the run pauses
        ``awaiting_approval`` for a person to approve a re-run or record the output.

        ``allow_drift``: resume even though the workflow's definition changed, mapping completed steps
        by name. ``replan``: the planner the run is inside decomposes its goal again (its recorded
        plan is otherwise kept across resumes); a ``replan_requested`` event records it.
        ``should_stop``: checked at each boundary; when it returns something true the
        finished step is recorded and the run is released ``queued`` for another executor (a worker's
        graceful stop), with the returned text, if any, as the reason in the ``released`` event.
        ``only_if``: resume only a run still in this status (a worker's list of candidates may be
        stale: a run it listed interrupted may since have failed as a poison pill), else
        ``RefusedTransition`` with nothing written; a run whose owner is gone counts as interrupted.
        ``skip_locked``: when another process holds the run in a transaction (claiming it, committing
        its boundary), refuse at once with ``RunLocked`` (a ``RefusedTransition``) instead of waiting
        for it to end, so workers going down the same candidates spread over them (PostgreSQL's
        ``FOR UPDATE SKIP LOCKED``; on SQLite the claim waits its turn as any write does).
        With ``max_recoveries`` set, an interrupted run whose executor has died more than that many
        times while executing it alone is marked ``failed`` instead (a poison-pill guard; see
        :mod:`relaypoint.recovery`).

        Raises ``UnknownRun``, ``RefusedTransition`` (paused, terminal, or owned by a live process,
        however long its step holds it — exactly one of several concurrent resumers executes; with
        ``replan``, not inside a planner),
        ``UnknownWorkflow``, ``DriftError``, ``LeaseLost``, ``StoreDamaged`` (a value the run needs
        cannot be read).
        """
        claim = self._claim(run_id, allow_drift, replan, only_if, skip_locked)
        if isinstance(claim, RunStatus):
            return claim
        with tracing.run_span(claim.workflow, claim.run_id) as span:
            if tracing.wants_origin(span):
                tracing.link_origin(span, self._origin(claim.run_id))
            status = self._runner.drive(claim, should_stop)
            tracing.stopped(span, status)
        return status

    async def aresume(self, run_id: str, *, allow_drift: bool = False, replan: bool = False,
                      should_stop: Callable[[], bool | str] | None = None, only_if: RunStatus | None = None,
                      skip_locked: bool = False) -> RunStatus:
        """:meth:`resume` from a running event loop, without blocking it (see :meth:`astart`); the
        same arguments, refusals and result."""
        claim = await asyncio.to_thread(self._claim, run_id, allow_drift, replan, only_if, skip_locked)
        if isinstance(claim, RunStatus):
            return claim
        with tracing.run_span(claim.workflow, claim.run_id) as span:
            if tracing.wants_origin(span):
                tracing.link_origin(span, await asyncio.to_thread(self._origin, claim.run_id))
            status = await self._runner.adrive(claim, should_stop)
            tracing.stopped(span, status)
        return status

    def _origin(self, run_id: str) -> str | None:
        """The ``traceparent`` recorded in the run's first event (see :mod:`relaypoint.tracing`)."""
        first = self.store.events(run_id, limit=1)
        return (first[0].detail or {}).get("traceparent") if first else None

    def _claim(self, run_id: str, allow_drift: bool, replan: bool, only_if: RunStatus | None,
               skip_locked: bool) -> Claim | RunStatus:
        self.sweep()
        rid = self.store.resolve(run_id)
        return self._claims.resume(rid, self._workflow_of, allow_drift, replan=replan, only_if=only_if,
                                   skip_locked=skip_locked)

    def _workflow_of(self, name: str) -> Workflow:
        if name not in self.workflows:
            if not self.workflows:
                raise UnknownWorkflow(f"resuming needs the definition of workflow {name!r}: pass --app MODULE:ATTR")
            raise UnknownWorkflow(f"workflow {name!r} is not defined by the loaded app (it defines: "
                                  f"{', '.join(sorted(self.workflows))}); pass the --app that defines it")
        return self.workflows[name]

    # ---- decisions ------------------------------------------------------------------------------

    def approve(self, run_id: str, by: str | None = None, comment: str | None = None, output: Any = None,
                *, checkpoint_id: int | None = None) -> Checkpoint:
        """Approve the run's pending approval checkpoint, once; the run becomes ``queued`` (a resume or
        worker continues it; approving never continues past a later gate).

        ``output`` (not None) replaces the gated step's output (an edited output), or for a held
        orphan step records it as the step's output instead of re-running it. A person's approval
        turn in a pattern (``human(kind="approval")``) re-runs when resumed and returns the
        decision, with ``output`` as its ``value``; nothing is written to its output meanwhile. ``checkpoint_id``: the
        checkpoint the person looked at; if the run has moved on, the approval is refused.
        ``by`` defaults to the OS user. Returns the decided checkpoint.

        A typed step's ``output`` (``@wf.step(output=Model)``) must fit its model: checked against
        the JSON Schema the run recorded, or by the model itself when its workflow is loaded here
        (then recorded as the model's JSON); nothing is recorded when it does not fit.

        Raises ``UnknownRun``, ``RefusedTransition`` (not awaiting approval, already decided, stale, or past
        its deadline: a pause whose deadline passed is expired first, as a worker would),
        ``InvalidValue`` (output not storable, or not fitting the step's model: one line naming the field).
        """
        return self._decisions.approve(run_id, by or os_user(), comment, output, checkpoint_id)

    def reject(self, run_id: str, comment: str, by: str | None = None, *,
               checkpoint_id: int | None = None) -> Checkpoint:
        """Reject the pending approval, once: the run becomes ``rejected`` (terminal) and its
        remaining steps ``cancelled``. ``comment`` (the reason) is required.

        Raises ``UnknownRun``, ``RefusedTransition`` (as :meth:`approve`), ``InvalidValue`` (empty reason).
        """
        return self._decisions.reject(run_id, comment, by or os_user(), checkpoint_id)

    def respond(self, run_id: str, value: Any, by: str | None = None, *,
                checkpoint_id: int | None = None) -> Checkpoint:
        """Record the answer to the run's pending input request, once; the run becomes ``queued`` and,
        when resumed, the asking step re-runs and its ``request_input`` returns ``value``.

        Raises ``UnknownRun``, ``RefusedTransition`` (as :meth:`approve`), ``InvalidValue``.
        """
        return self._decisions.respond(run_id, value, by or os_user(), checkpoint_id)

    def cancel(self, run_id: str, by: str | None = None) -> RunStatus:
        """Cancel a non-terminal run: it becomes ``cancelled``, open steps ``cancelled``, and any
        executor's lease is revoked, so a step still running is never recorded as completed.
        Returns the status the run had. Raises ``UnknownRun``, ``RefusedTransition`` (terminal)."""
        return self._decisions.cancel(run_id, by or os_user())

    def expire_deadlines(self) -> list[str]:
        """Reject every paused run whose pause deadline (UTC) has passed, with the reason. Returns
        the ids rejected. Safe to call from many workers at once: each checkpoint is decided once."""
        return self._decisions.expire_deadlines()

    # ---- deletion -------------------------------------------------------------------------------

    def delete(self, run_id: str) -> str:
        """Delete a run and everything of it (steps, outputs, checkpoints, events) in one
        transaction; returns its id. Forks of it keep their ``parent_run_id``, shown as a deleted
        parent.

        Raises ``UnknownRun``, ``RefusedTransition`` (a live process is executing it: cancel it first).
        """
        return self._retention.delete(run_id)

    def prune(self, older_than: timedelta, statuses: Iterable[str] = tuple(TERMINAL)) -> list[str]:
        """Delete runs in ``statuses`` (default: the terminal ones) last updated more than
        ``older_than`` ago, in one transaction; a run a live process executes is kept. Returns the
        ids deleted. Raises ``ValueError`` for a status outside the vocabulary."""
        return self._retention.prune(older_than, statuses)

    # ---- forks ----------------------------------------------------------------------------------

    def fork(self, run_id: str, from_step: str, input: dict[str, Any] | None = None, *,
             iteration: int | None = None) -> str:
        """Create a new ``queued`` run from the boundary before ``from_step``: steps before it are
        completed with the parent's outputs (copied, never re-run), ``from_step`` onward pending.
        ``input`` replaces the parent's input when given. The parent is untouched.
        Returns the new run id.

        ``iteration``: fork from the boundary before that iteration of pattern ``from_step`` (a
        debate's round, a supervisor's turn, a loop's pass, a planner's subtask ordinal): the
        pattern's executions before it are copied too (with their outputs, as recorded), and the
        fork starts from the driver state recorded where that iteration began, so resuming it runs
        that iteration onward and nothing before it again.

        A fork never turns an unapproved gated output into an approved one: a copied approval gate
        whose latest decision in the parent is ``approved`` stays approved (the decided checkpoint
        is copied into the fork, naming the parent's, with an ``approval_inherited`` event, so a
        fork of the fork sees it even once the parent is deleted); at the first copied gate that
        was not approved (rejected, expired, cancelled or still undecided) the fork pauses
        ``awaiting_approval`` with the copied output as what is reviewed, before anything
        downstream runs.

        Raises ``UnknownRun``, ``UnknownStep``, ``RefusedTransition`` (an upstream step has no output
        to reuse; with ``iteration``: ``from_step`` is not a pattern, or has not begun that
        iteration), ``InvalidValue``.
        """
        return self._forks.fork(run_id, from_step, input, iteration)


    # ---- async twins ----------------------------------------------------------------------------
    # Each runs its sync operation in a worker thread (asyncio.to_thread): usable from a running event
    # loop without blocking it, as the runtime is thread-safe. Same arguments, result and errors.

    async def aenqueue(self, name: str, input: dict[str, Any] | None = None) -> str:
        """``await asyncio.to_thread(self.enqueue, ...)``: :meth:`enqueue` from an event loop (a web
        handler handing a run to the workers), not blocking it."""
        return await asyncio.to_thread(self.enqueue, name, input)

    async def aget(self, run_id: str, *, with_outputs: bool = True) -> Run:
        """``await asyncio.to_thread(self.get, ...)``: :meth:`get` from an event loop, not blocking it."""
        return await asyncio.to_thread(self.get, run_id, with_outputs=with_outputs)

    async def alist(self, status: str | None = None, workflow: str | None = None, limit: int = 100, *,
                    before: tuple[str, str] | None = None, after: tuple[str, str] | None = None,
                    within: tuple[tuple[str, str], tuple[str, str]] | None = None, oldest_first: bool = False,
                    search: str | None = None) -> list[RunSummary]:
        """``await asyncio.to_thread(self.list, ...)``: :meth:`list` from an event loop, not blocking it."""
        return await asyncio.to_thread(self.list, status, workflow, limit, before=before, after=after,
                                       within=within, oldest_first=oldest_first, search=search)

    async def aapprove(self, run_id: str, by: str | None = None, comment: str | None = None, output: Any = None,
                       *, checkpoint_id: int | None = None) -> Checkpoint:
        """``await asyncio.to_thread(self.approve, ...)``: :meth:`approve` from an event loop, not
        blocking it."""
        return await asyncio.to_thread(self.approve, run_id, by, comment, output, checkpoint_id=checkpoint_id)

    async def areject(self, run_id: str, comment: str, by: str | None = None, *,
                      checkpoint_id: int | None = None) -> Checkpoint:
        """``await asyncio.to_thread(self.reject, ...)``: :meth:`reject` from an event loop, not
        blocking it."""
        return await asyncio.to_thread(self.reject, run_id, comment, by, checkpoint_id=checkpoint_id)

    async def arespond(self, run_id: str, value: Any, by: str | None = None, *,
                       checkpoint_id: int | None = None) -> Checkpoint:
        """``await asyncio.to_thread(self.respond, ...)``: :meth:`respond` from an event loop, not
        blocking it."""
        return await asyncio.to_thread(self.respond, run_id, value, by, checkpoint_id=checkpoint_id)

    async def acancel(self, run_id: str, by: str | None = None) -> RunStatus:
        """``await asyncio.to_thread(self.cancel, ...)``: :meth:`cancel` from an event loop, not
        blocking it."""
        return await asyncio.to_thread(self.cancel, run_id, by)

    async def afork(self, run_id: str, from_step: str, input: dict[str, Any] | None = None, *,
                    iteration: int | None = None) -> str:
        """``await asyncio.to_thread(self.fork, ...)``: :meth:`fork` from an event loop, not blocking it."""
        return await asyncio.to_thread(self.fork, run_id, from_step, input, iteration=iteration)
