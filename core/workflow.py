"""Workflow definitions: an ordered chain of named steps (``@wf.step``) and patterns (``@wf.loop``,
``wf.debate``, ``wf.vote``, ``wf.supervisor``, ``wf.planner``, ``wf.parallel``, ``wf.map``; see
:mod:`relaypoint.patterns`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from .calls import check_callable
from .defaults import RETRIES
from .drivers import ChainDriver, Driver
from .encoding import is_unicode, readable
from .errors import DefinitionError, UnknownWorkflow, quoted
from .status import CheckpointKind
from .typed import check_model, described, returning
from .usage import checked_prices

NAME_RULE = "non-empty text without NUL characters or lone surrogates (valid Unicode)"


def is_name(value: Any) -> bool:
    """Whether ``value`` can name a workflow, step, pattern or agent (see ``NAME_RULE``): a NUL
    cannot be part of a key in PostgreSQL text, and a lone surrogate cannot be stored at all, so
    neither backend takes one."""
    return isinstance(value, str) and bool(value.strip()) and "\x00" not in value and is_unicode(value)


if TYPE_CHECKING:
    from pydantic import BaseModel

    from .patterns.base import Pattern
    from .recorded import Recorder

OnOrphan = Literal["retry", "hold"]
MAX_TIMEOUT_SECONDS = 10 * 365 * 86_400
"""The longest pause deadline a step may set (ten years): a deadline is stored as a UTC time, which
must stay within what a datetime can hold."""
StepFn = Callable[["Context"], Any]


@dataclass(frozen=True)
class StepSpec:
    """One step of a workflow: its name, function and options.

    ``approval``: after the step completes the run pauses ``awaiting_approval``.
    ``retries``: automatic re-executions after an exception (0 = none).
    ``on_orphan``: what resume does with a step found ``running`` under a dead owner:
    ``"retry"`` re-runs it (attempt + 1), ``"hold"`` pauses the run for a person to decide.
    ``timeout``: seconds a pause of this step (its approval, or its ``request_input``) may wait;
    the deadline is stored as an absolute UTC time when the pause begins, and a worker rejects the
    run once it passes. None: no deadline.
    ``output``: the pydantic model the execution's output is (see :mod:`relaypoint.typed`; ``fn``
    then validates what the step's function returns), or None (any JSON value).
    """

    name: str
    fn: StepFn
    approval: bool = False
    retries: int = RETRIES
    on_orphan: OnOrphan = "retry"
    timeout: float | None = None
    pattern: Pattern | None = None
    output: type[BaseModel] | None = None

    def options(self) -> dict[str, Any]:
        """The step's options as stored with each run (``steps.options``); a pattern's row adds
        ``"pattern"`` (its kind) and its parameters, so changing them is drift. A typed execution
        adds ``"output": {"name", "schema"}`` (its model's JSON Schema, what an approval's edit is
        checked against where the app is not loaded); an untyped one's options are as they were."""
        options = {"approval": self.approval, "retries": self.retries, "on_orphan": self.on_orphan,
                   "timeout": self.timeout}
        if self.output is not None:
            # Part of the definition, so of the fingerprint: a changed model is drift, like any changed
            # option. Outputs recorded under the old model may not read back as the new one, and the run's
            # recorded schema, which guards its approvals, would no longer be the model the code uses.
            options["output"] = described(self.output)
        if self.pattern is not None:
            options.update(pattern=self.pattern.kind, **self.pattern.parameters())
        return options


def whole(value: Any, what: str, *, least: int) -> int:
    """``value`` if it is a whole number >= ``least``; ``DefinitionError`` naming ``what`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise DefinitionError(f"{what} must be a whole number >= {least}, not {value!r}")
    return value


def check_options(owner: str, *, approval: bool = False, retries: int = RETRIES, on_orphan: str = "retry",
                  timeout: float | None = None) -> None:
    """Refuse invalid step options of ``owner`` (words like "step 'draft'") with ``DefinitionError``."""
    if on_orphan not in ("retry", "hold"):
        raise DefinitionError(f"{owner}: on_orphan must be 'retry' or 'hold', not {on_orphan!r}")
    if not isinstance(approval, bool):
        raise DefinitionError(f"{owner}: approval must be True or False")
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise DefinitionError(f"{owner}: retries must be a whole number >= 0")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not 0 < timeout <= MAX_TIMEOUT_SECONDS):
        raise DefinitionError(f"{owner}: timeout must be a number of seconds > 0 and at most "
                              f"{MAX_TIMEOUT_SECONDS:,} (ten years)")


@dataclass
class Workflow:
    """A named, ordered chain of steps.

    >>> wf = Workflow("review")
    >>> @wf.step
    ... def draft(ctx): return {"text": "..."}
    >>> @wf.step(approval=True)
    ... def review(ctx): return ctx.results["draft"]

    ``max_concurrency``: at most how many independent calls of a pattern (a vote's voters, a
    parallel's branches, a map's items...) are in flight at once, for the patterns that set none
    of their own (None: all of them). It bounds how calls run, not what runs, so it is not part of
    the definition (nor of its fingerprint). ``prices``: model name -> (US dollars per million
    input tokens, per million output tokens), recorded with each run when it is created so that
    its usage shows a cost (see :mod:`relaypoint.usage`); not part of the definition either.

    Raises ``DefinitionError`` for an empty workflow name, a duplicate step name or an invalid option.
    """

    name: str
    steps: list[StepSpec] = field(default_factory=list)
    max_concurrency: int | None = None
    prices: Mapping[str, tuple[float, float]] | None = None
    _driver: tuple[tuple[Any, ...], Driver, str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not is_name(self.name):
            raise DefinitionError(f"a workflow name must be {NAME_RULE}, not {self.name!r}")
        if self.max_concurrency is not None:
            whole(self.max_concurrency, f"workflow {self.name!r}: max_concurrency", least=1)
        self.prices = checked_prices(self.prices, self.name)

    def step(
        self,
        fn: StepFn | None = None,
        *,
        name: str | None = None,
        approval: bool = False,
        retries: int = RETRIES,
        on_orphan: OnOrphan = "retry",
        timeout: float | None = None,
        output: type[BaseModel] | None = None,
    ) -> Any:
        """Register a step; usable as ``@wf.step``, ``@wf.step(...)`` or ``wf.step(name=...)(fn)``.

        ``fn``: a function of ctx, ``def`` or ``async def``. ``name``: the step's name (default: the
        function's name); the other options are those of :class:`StepSpec`. ``output``: a pydantic
        model: what the function returns (the model, or a dict it validates) is validated and stored
        as its JSON, and ``ctx.results[name]`` gives the model back; a value that does not fit fails
        the step at once, in one line naming the field, without spending its retries. Raises
        ``DefinitionError`` for a duplicate name, an invalid option, a function that yields (see
        :func:`relaypoint.calls.check_callable`), an ``output`` that is not a pydantic model class,
        or a function without a name of its own and no ``name``.
        """

        def register(f: StepFn) -> StepFn:
            step_name = self._name_of(f, name, "step")
            self._check_new(step_name)
            check_callable(f, f"step {step_name!r}")
            check_options(f"step {step_name!r}", approval=approval, retries=retries, on_orphan=on_orphan,
                          timeout=timeout)
            if output is not None:
                check_model(output, f"step {step_name!r}")
            run = f if output is None else returning(f, output)
            self.steps.append(StepSpec(step_name, run, approval, retries, on_orphan, timeout, output=output))
            return f

        return register(fn) if fn is not None else register

    def _name_of(self, fn: Any, name: str | None, what: str) -> Any:
        """``name``, else ``fn``'s own; ``DefinitionError`` when neither is given (a callable object
        or a ``functools.partial`` has no name of its own)."""
        given = getattr(fn, "__name__", None) if name is None else name
        if given is None:
            check_callable(fn, f"workflow {self.name!r}: a {what}")  # a value that is no function at all: say so
            raise DefinitionError(f"workflow {self.name!r}: a {what} of {type(fn).__name__} needs name=..., "
                                  "it has no __name__")
        return given

    def _check_new(self, name: Any) -> None:
        """Refuse a node name that is not text or is taken, with ``DefinitionError``."""
        if not is_name(name):
            raise DefinitionError(f"workflow {self.name!r}: a step name must be {NAME_RULE}, not {name!r}")
        if any(s.name == name for s in self.steps):
            raise DefinitionError(f"workflow {self.name!r} already has a step named {name!r}")

    def _add_pattern(self, pattern: Pattern) -> Pattern:
        self._check_new(pattern.name)
        o = pattern.options
        self.steps.append(StepSpec(pattern.name, pattern.finish, False, o.retries, o.on_orphan, o.timeout, pattern))
        return pattern

    def loop(self, fn: StepFn | None = None, *, max_iterations: int, until: Callable[[Context], Any] | None = None,
             name: str | None = None, retries: int = RETRIES, on_orphan: OnOrphan = "retry",
             timeout: float | None = None, output: type[BaseModel] | None = None) -> Any:
        """Register a loop: ``@wf.loop(max_iterations=5, until=lambda ctx: ...)``. Each pass runs the
        function (``ctx.iteration`` 1-based, ``ctx.history`` the earlier passes) and is recorded
        on its own; after each pass ``until(ctx)`` is called with ``ctx.output`` set to that pass's
        output, and a true answer (or ``max_iterations`` passes) ends the loop. The loop's result
        is the last pass's output. The body and ``until`` may each be ``def`` or ``async def``.
        ``output``: a pydantic model each pass returns (validated as a typed step's output, see
        :meth:`step`), which ``until`` and ``ctx.history`` read as the model.
        Raises ``DefinitionError`` for invalid parameters."""
        from .patterns import Loop

        def register(f: StepFn) -> StepFn:
            self._add_pattern(Loop(self._name_of(f, name, "loop"), f, max_iterations=max_iterations,
                                   until=until, retries=retries, on_orphan=on_orphan, timeout=timeout,
                                   output=output))
            return f

        return register(fn) if fn is not None else register

    def debate(self, name: str, *, agents: Mapping[str, Any], rounds: int, judge: StepFn | None = None,
               concurrent: bool = False, max_concurrency: int | None = None, retries: int = RETRIES,
               on_orphan: OnOrphan = "retry", timeout: float | None = None) -> None:
        """Register a debate: every agent (``name -> function``, :func:`relaypoint.typed` or
        :func:`relaypoint.human`) speaks
        once per round, in the given order, for ``rounds`` rounds, then ``judge(ctx)`` decides;
        the result is the judge's output (without a judge: the last round's outputs by agent).
        ``concurrent=True``: the speakers of a round speak at once (at most ``max_concurrency``),
        each seeing only the rounds before in ``ctx.history``; by default each sees the earlier
        speakers of its round too."""
        from .patterns import Debate
        self._add_pattern(Debate(name, agents, rounds=rounds, judge=judge, concurrent=concurrent,
                                 max_concurrency=max_concurrency, retries=retries, on_orphan=on_orphan,
                                 timeout=timeout))

    def vote(self, name: str, *, voters: Mapping[str, Any], tally: Any = "majority",
             key: Callable[[Any], Any] | None = None, max_concurrency: int | None = None, retries: int = RETRIES,
             on_orphan: OnOrphan = "retry", timeout: float | None = None) -> None:
        """Register a vote: each voter runs once (independent calls, each recorded on its own),
        then ``tally`` ("majority", or a function of ``{voter: vote}``) decides; the result is
        ``{"result": <the tally's output>, "votes": {voter: vote}}``. ``key``: with the majority, a
        function of one vote returning what is counted (a JSON value), e.g. ``key=lambda v:
        v["score"]``; the tally then names the winning key and adds ``"keys": {voter: key}`` (see
        :func:`relaypoint.patterns.majority`). The definition records the key by its qualified
        name. The voters run at once (at most ``max_concurrency``), none seeing another's vote.
        Raises ``DefinitionError`` for a key that is not a plain ``def`` (it runs when the result is
        recorded, where nothing is awaited), or given with a tally function."""
        from .patterns import Vote
        self._add_pattern(Vote(name, voters, tally=tally, key=key, max_concurrency=max_concurrency, retries=retries,
                               on_orphan=on_orphan, timeout=timeout))

    def supervisor(self, name: str, *, agents: Mapping[str, Any], route: StepFn, max_turns: int = 20,
                   max_idle: int = 3, retries: int = RETRIES, on_orphan: OnOrphan = "retry",
                   timeout: float | None = None) -> None:
        """Register a supervisor: each turn ``route(ctx)`` names the next agent (or None to stop)
        and that agent runs; see :class:`relaypoint.patterns.Supervisor` for the counts it keeps
        and when it stops. The result is the last agent call's output."""
        from .patterns import Supervisor
        self._add_pattern(Supervisor(name, agents, route=route, max_turns=max_turns, max_idle=max_idle,
                                     retries=retries, on_orphan=on_orphan, timeout=timeout))

    def planner(self, name: str, *, plan: StepFn, agents: Mapping[str, Any], replan: StepFn | None = None,
                max_replans: int = 2, max_concurrency: int | None = None, retries: int = RETRIES,
                on_orphan: OnOrphan = "retry", timeout: float | None = None) -> None:
        """Register a planner: ``plan(ctx)`` returns subtasks ``[{"id", "agent", "input", "after"}]``
        run in dependency order; a subtask that fails (after its retries) calls ``replan(ctx)``
        (``ctx.failed`` set), whose answer replaces the unfinished part of the plan, at most
        ``max_replans`` times. The subtasks whose dependencies are done run at once (at most
        ``max_concurrency``). The result is ``{task id: output}``. See
        :class:`relaypoint.patterns.Planner`."""
        from .patterns import Planner
        self._add_pattern(Planner(name, plan, agents, replan=replan, max_replans=max_replans,
                                  max_concurrency=max_concurrency, retries=retries, on_orphan=on_orphan,
                                  timeout=timeout))

    def parallel(self, name: str, *, branches: Mapping[str, Any], max_concurrency: int | None = None,
                 retries: int = RETRIES, on_orphan: OnOrphan = "retry", timeout: float | None = None) -> None:
        """Register a parallel node: every branch (``name -> function`` or :func:`relaypoint.human`)
        runs once, all at once (at most ``max_concurrency``), each recorded as it finishes and
        seeing none of the others; the result is ``{branch: output}`` in the given order. Raises
        ``DefinitionError`` for invalid branches or options."""
        from .patterns import Parallel
        self._add_pattern(Parallel(name, branches, max_concurrency=max_concurrency, retries=retries,
                                   on_orphan=on_orphan, timeout=timeout))

    def map(self, name: str, fn: StepFn, *, items: StepFn, max_concurrency: int | None = None,
            retries: int = RETRIES, on_orphan: OnOrphan = "retry", timeout: float | None = None,
            output: type[BaseModel] | None = None) -> None:
        """Register a map: ``items(ctx)`` returns a list, recorded once (the ``items`` call); then
        ``fn(ctx)`` runs once per item, all at once (at most ``max_concurrency``), with
        ``ctx.input`` the item and ``ctx.iteration`` its 1-based index (``ctx.results`` as any
        step). The result is the list of outputs in item order. An ``items`` answer that is not a
        list fails the items call (``InvalidValue``, not retried). ``output``: a pydantic model each
        item's call returns (validated as a typed step's output, see :meth:`step`). Raises
        ``DefinitionError`` for a ``fn`` or ``items`` that is not a function, or an invalid option."""
        from .patterns import Map
        self._add_pattern(Map(name, fn, items=items, max_concurrency=max_concurrency, retries=retries,
                              on_orphan=on_orphan, timeout=timeout, output=output))

    def get(self, step_name: str) -> StepSpec | None:
        """The step named ``step_name``, or None."""
        return next((s for s in self.steps if s.name == step_name), None)

    def _built(self) -> tuple[Driver, str]:
        # Built once per set of steps: a resume compares fingerprints, which must not cost a pass
        # over a 10,000-step definition each time.
        steps = (*self.steps, self.max_concurrency)
        if self._driver is None or self._driver[0] != steps:
            driver = self.make_driver()
            self._driver = (steps, driver, fingerprint(driver.definition()))
        return self._driver[1], self._driver[2]

    def make_driver(self) -> Driver:
        """A new driver for this workflow: a :class:`~relaypoint.drivers.ChainDriver` (its steps in
        order). A pattern overrides this to return its own driver."""
        return ChainDriver(self)

    def driver(self) -> Driver:
        """The driver that runs this workflow (see :mod:`relaypoint.drivers`), built once per set of
        steps."""
        return self._built()[0]

    def definition(self) -> list[dict[str, Any]]:
        """The driver's definition: the ordered step names and options, what a run records to
        detect drift later."""
        return self.driver().definition()

    def fingerprint(self) -> str:
        """A short hash of :meth:`definition` (16 hex characters)."""
        return self._built()[1]


def fingerprint(definition: Any) -> str:
    """A short hash (16 hex characters) of a driver's JSON definition: equal definitions, equal
    fingerprints, whatever the step functions' bodies."""
    blob = json.dumps(definition, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


class InputRequested(BaseException):
    """Raised inside a step by ``ctx.request_input`` when no response is recorded yet.

    A BaseException so a step's own ``except Exception`` does not swallow the pause.
    """

    def __init__(self, prompt: str, index: int, kind: CheckpointKind = CheckpointKind.INPUT) -> None:
        prompt = readable(prompt)  # a lone surrogate is recorded as its escape, as in an error message
        super().__init__(prompt)
        self.prompt = prompt
        self.index = index
        self.kind = kind


@dataclass
class Context:
    """What a step function receives.

    ``input``: the run's input (a dict). ``results``: name of each completed upstream step ->
    its output (None is a valid output; a typed step's, ``output=Model``, is the model); an
    output is read from the store when first used, so use it while the step runs. ``attempt``: 1-based count of executions of this step.
    ``idempotency_key``: stable across attempts of this step of this run, new in a fork; pass it
    to external services so a re-executed step does not repeat a side effect. ``iteration``: which
    repetition of the step this is (1 for a chain step; a pattern's round, turn, pass or subtask
    ordinal). ``agent``: the agent the step runs as (None for a chain step). ``state``: a read-only
    view of the driver's state (inside a pattern: the pattern's own state). ``history``: inside a
    pattern, its recorded results so far, in order, as ``{"iteration", "agent", "output"}`` dicts
    (plus ``"task"`` for a planner's subtasks; a typed agent's output is its model), read when first used. ``output``: a loop's pass
    output, for ``until``. ``failed``: for a planner's ``replan``, ``{"task": {...}, "error": text}``.
    :meth:`call` and :meth:`acall`: recorded calls (a model request, a tool call) that the step's
    execution, run again, does not repeat.
    """

    run_id: str
    step: str
    attempt: int
    idempotency_key: str
    input: dict[str, Any]
    results: Mapping[str, Any]
    responses: Sequence[Any] = ()
    iteration: int = 1
    agent: str | None = None
    state: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    history: Sequence[dict[str, Any]] = ()
    output: Any = None
    failed: dict[str, Any] | None = None
    _asked: int = 0
    _until: bool | None = field(default=None, repr=False)  # a loop's verdict on this pass, once asked
    _approved: Callable[[], dict[str, Any] | None] = field(default=lambda: None, repr=False)
    _recorder: Recorder | None = field(default=None, repr=False)

    def call(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Return ``fn(*args, **kwargs)``, called once per execution of this step and its result
        recorded as the call returns (a JSON value, returned as recorded: a tuple comes back a
        list); when the execution runs again (after a crash, a retry, an answer to
        ``request_input``, an orphan re-run) the recorded result is returned and ``fn`` is not
        called. Calls are matched by their order in the execution and their name: another name at
        the same position fails the step, without retries (its code changed). A call that raises
        is recorded failed and runs again with the execution. For an ``async def`` function use
        ``await ctx.acall(...)``. Raises ``TypeError`` outside a step's execution or for an async
        ``fn``, ``InvalidValue`` when the result is not JSON, and what ``fn`` raises."""
        return self._calls().call(self, str(name), fn, args, kwargs)

    async def acall(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """As :meth:`call`, awaited: an ``async def`` ``fn`` is awaited, a sync one runs in a worker
        thread. Calls gathered at once (``asyncio.gather``) are numbered in the order they were made."""
        return await self._calls().acall(self, str(name), fn, args, kwargs)

    def progress(self, text: str) -> None:
        """Show ``text`` as this running execution's progress line (e.g. "model request 3"): one
        line, bounded, not part of the output; the console shows it on the running step within a
        second and ``show`` prints it. Writes are rate-limited and never wait on the store. Raises
        ``TypeError`` outside a step's execution."""
        self._calls().progress(text)

    def _calls(self) -> Recorder:
        if self._recorder is None:
            raise TypeError(f"ctx.call: '{self.step}' is not a step's execution here (a recorded call is made "
                            "from the function of a step or of a pattern's agent)")
        return self._recorder

    def request_input(self, prompt: str) -> Any:
        """Return the answer to ``prompt``; if none is recorded yet, pause the run ``awaiting_input``.

        After ``respond`` and a resume the step runs again from its top, and this call returns the
        recorded response. Several calls in one step are matched to responses by their order.
        """
        index = self._asked
        self._asked += 1
        if index < len(self.responses):
            return self.responses[index]
        raise InputRequested(str(prompt), index)

    def request_approval(self, prompt: str) -> dict[str, Any]:
        """Return the recorded approval of this execution; if none is recorded yet, pause the run
        ``awaiting_approval`` (a person's turn in a pattern, see :func:`relaypoint.human`). The
        answer: ``{"approved": True, "by", "comment", "value"}`` (``value``: what the approver
        recorded with ``approve --output``, else None). A rejection ends the run instead."""
        answer = self._approved()
        if answer is not None:
            return answer
        raise InputRequested(str(prompt), 0, CheckpointKind.APPROVAL)


def find_workflow(workflows: dict[str, Workflow], name: str) -> Workflow:
    """The workflow named ``name``; ``UnknownWorkflow`` listing the known ones otherwise."""
    if name not in workflows:
        known = ", ".join(sorted(workflows)) or "none loaded; pass --app MODULE:ATTR"
        raise UnknownWorkflow(f"unknown workflow {quoted(name)} (known: {known})")
    return workflows[name]


def describe_drift(recorded: list[dict[str, Any]], defined: list[dict[str, Any]]) -> str:
    """One line listing how a definition changed: steps added, removed, renamed (a removed and an
    added step at the same position), and steps whose options (a pattern's parameters included)
    changed, each with its old and new values, e.g. ``options changed for argue (rounds: 3 -> 5)``."""
    old = [d["name"] for d in recorded]
    new = [d["name"] for d in defined]
    renamed = [(o, n) for o, n in zip(old, new) if o != n and o not in new and n not in old]
    gone = {o for o, _ in renamed} | {n for _, n in renamed}
    added = [n for n in new if n not in old and n not in gone]
    removed = [o for o in old if o not in new and o not in gone]
    before = {d["name"]: d for d in recorded}
    changed = [f"{d['name']} ({changes(before[d['name']], d)})" for d in defined
               if d["name"] in before and before[d["name"]] != d]
    parts = [f"added {', '.join(added)}" if added else "",
             f"removed {', '.join(removed)}" if removed else "",
             f"renamed {', '.join(f'{o} -> {n}' for o, n in renamed)}" if renamed else "",
             f"options changed for {', '.join(changed)}" if changed else ""]
    return "; ".join(p for p in parts if p) or "steps reordered"


def changes(old: dict[str, Any], new: dict[str, Any]) -> str:
    """``key: old -> new`` for each key whose value differs (JSON values; ``-`` for absent). An
    output model is named, not its schema printed: ``output: Draft -> Draft (schema changed)``."""
    def shown(d: dict[str, Any], key: str) -> str:
        return json.dumps(_named(key, d[key]), sort_keys=True) if key in d else "-"

    def said(key: str) -> str:
        before, after = shown(old, key), shown(new, key)
        return f"{key}: {before} -> {after}" + (" (schema changed)" if before == after else "")

    return ", ".join(said(k) for k in dict.fromkeys([*old, *new]) if old.get(k, ...) != new.get(k, ...))


def _named(key: str, value: Any) -> Any:
    """An option as :func:`changes` shows it: a typed output (``output``, a pattern's ``outputs``)
    by its model's name."""
    def name(entry: Any) -> Any:
        return entry.get("name") if isinstance(entry, dict) else entry

    if key == "output":
        return name(value)
    if key == "outputs" and isinstance(value, dict):
        return {label: name(entry) for label, entry in value.items()}
    return value
