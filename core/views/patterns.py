"""What a pattern's records say, for the console and the CLI: labels, progress and the per-kind
summaries (rounds, routing decisions and per-agent counts, votes and tally, the judge's decision,
the plan as a tree), computed from its executions. Pure functions over
:class:`~relaypoint.models.StepRecord` values and driver state: no I/O, no UI.

A pattern is one top-level execution, its **group row**, whose options hold ``"pattern"`` (its
kind: debate, vote, loop, supervisor, planner, parallel or map) and its parameters; its **children**
(``parent`` = the group's seq, in seq order) are its agent calls and its own decisions (agents
``judge``, ``tally``, ``route``, ``plan``, ``replan``, ``items``). The calls of a vote, a parallel, a
map, a concurrent debate's round and a planner's ready subtasks may be running at once. The group row's output is the pattern's
result. While the run is inside the pattern, the driver state of its latest checkpoint is
``{"next": <group seq>, "in": <the pattern's state>}``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..models import Checkpoint, StepRecord
from ..patterns import NOUNS
from ..status import StepStatus

JUDGE, TALLY, ROUTE, PLAN, REPLAN, ITEMS = "judge", "tally", "route", "plan", "replan", "items"
"""The agent names of a pattern's own decisions (reserved: no user agent has them)."""


SHOWN_ITERATIONS = 12
"""Most iterations (the latest) a pattern's summary lists with their calls' outputs; the earlier
ones are counted, and each is still a row of the step chain."""


def undefined(parameters: Mapping[str, Any], agent: str | None) -> bool:
    """True for an agent a pattern's records name but its recorded definition (``parameters``: the
    group row's options, rewritten by an allowed drift) does not have: its records are still shown,
    marked, since reading never depends on the definition."""
    agents = parameters.get("agents")
    return agent is not None and agent not in _DECISIONS and isinstance(agents, list) and agent not in agents


def kind_of(step: StepRecord) -> str | None:
    """The pattern kind of a group row (``"debate"``, ...), None for a chain step or a child."""
    kind = step.options.get("pattern") if step.parent is None else None
    return kind if isinstance(kind, str) else None


def tree(tasks: Iterable[StepRecord]) -> list[tuple[StepRecord, list[StepRecord]]]:
    """The run's executions as (top-level execution, its children in seq order), top-level ones in
    seq order. Children whose group row is missing are left out (a damaged store)."""
    tops: list[StepRecord] = []
    children: dict[int, list[StepRecord]] = defaultdict(list)
    for step in tasks:
        if step.parent is None:
            tops.append(step)
        else:
            children[step.parent].append(step)
    return [(top, sorted(children.get(top.seq, ()), key=lambda s: s.seq)) for top in sorted(tops, key=lambda s: s.seq)]


def paused_execution(tasks: Sequence[StepRecord], checkpoint: Checkpoint) -> StepRecord | None:
    """The execution a pausing ``checkpoint`` is about (its ``paused_seq``) among the run's
    ``tasks``, or None when it names none that is there."""
    if checkpoint.paused_seq is None:
        return None
    return next((s for s in tasks if s.seq == checkpoint.paused_seq), None)


def inner_state(group: StepRecord, state: Any) -> Mapping[str, Any] | None:
    """The pattern's own state in the driver ``state`` of the run's latest checkpoint when the run
    is inside this pattern, else None."""
    if isinstance(state, Mapping) and state.get("next") == group.seq and isinstance(state.get("in"), Mapping):
        return state["in"]
    return None


def _task(child: StepRecord) -> str | None:
    task = child.options.get("task")
    return task if isinstance(task, str) else None


def call_label(kind: str | None, child: StepRecord) -> str:
    """A child's row label in the step chain: ``round 2 · pro``, ``judge``, ``turn 4 · route``,
    ``pass 3``, ``vote · a``, ``tally``, ``plan``, ``subtask 3 · t3 · code``, ``re-plan before
    subtask 3``, ``branch · web``, ``items``, ``item 7``."""
    agent = child.agent or ""
    if agent in (JUDGE, TALLY, PLAN, ITEMS):
        return agent
    if agent == REPLAN:  # the re-planned subtasks are numbered from its iteration on
        return f"re-plan before subtask {child.iteration}"
    word = NOUNS.get(kind or "", "iteration")
    if kind in ("vote", "parallel"):
        return f"{word} · {agent}"
    if kind == "planner":
        return " · ".join(p for p in (f"subtask {child.iteration}", _task(child), agent) if p)
    return f"{word} {child.iteration}" + (f" · {agent}" if agent else "")


def describe(step: StepRecord, tasks: Iterable[StepRecord]) -> str:
    """An execution in words: a step's (or a pattern's) name, or a pattern's call as
    ``argue, round 2 · pro`` (``tasks``: the run's executions, where its pattern's row is)."""
    if step.parent is None:
        return step.name
    group = next((t for t in tasks if t.seq == step.parent), None)
    return f"{step.name}, {call_label(kind_of(group) if group is not None else None, step)}"


def fork_point(kind: str | None, child: StepRecord) -> str:
    """Where a fork from ``child``'s iteration starts, in words: ``round 3``, ``the judge``,
    ``turn 4``, ``pass 2``, ``subtask 3 (t3)``, ``the plan``, ``the re-plan before subtask 3``,
    ``the vote``, ``the branches``, ``the items``, ``item 7``."""
    agent = child.agent or ""
    if agent == JUDGE:
        return "the judge"
    if agent == PLAN:
        return "the plan"
    if agent == REPLAN:
        return f"the re-plan before subtask {child.iteration}"
    if kind == "vote":
        return "the vote"
    if kind == "parallel":
        return "the branches"
    if agent == ITEMS:
        return "the items"
    word = NOUNS.get(kind or "", "iteration")
    task = _task(child) if kind == "planner" else None
    return f"{word} {child.iteration}" + (f" ({task})" if task else "")


def shown_status(group: StepRecord, children: Sequence[StepRecord]) -> StepStatus:
    """The status a pattern shows: its group row's, except while the row is pending with a call
    under way or stopped (running, awaiting a person, failed, interrupted): that call's status,
    and running while any of its calls runs (calls beside it may have stopped already)."""
    if group.status == StepStatus.PENDING and children:
        if any(c.status == StepStatus.RUNNING for c in children):
            return StepStatus.RUNNING
        if children[-1].status != StepStatus.COMPLETED:
            return children[-1].status
    return group.status


def _size(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, (list, tuple, dict)):
        return len(value)
    return None


def progress(group: StepRecord, children: Sequence[StepRecord], state: Any = None) -> str:
    """How far the pattern got, from its records, in a few words (it fits a narrow column):
    ``round 3/5``, ``judging`` (the judge's call not finished), ``pass 2/4``, ``turn 7``, ``2/3
    votes``, ``tallying``, ``4/6 subtasks``; before its first call, what it will do: ``3
    rounds``, ``up to 20 turns``... ``state``: the driver state of the run's latest checkpoint (a
    planner's current plan is in it while the run is inside the planner). Parameters missing from
    the row's options are left out. Several calls running at once: ``3 of 5 running`` (of the
    node's calls: its voters, branches, items, a round's speakers, the subtasks planned)."""
    kind = kind_of(group)
    options = group.options
    done = [c for c in children if c.status == StepStatus.COMPLETED]
    if not children and group.status != StepStatus.COMPLETED:
        return _not_started(kind, options)
    running = sum(1 for c in children if c.status == StepStatus.RUNNING)
    if running > 1:
        return f"{running} of {_width(kind, group, children, state, running)} running"
    decision = next((c for c in reversed(children) if c.agent in (JUDGE, TALLY)), None)
    if decision is not None and decision.status != StepStatus.COMPLETED:
        return "judging" if decision.agent == JUDGE else "tallying"
    calls = [c for c in children if c.agent not in _DECISIONS]
    reached = max((c.iteration for c in calls), default=0)
    if kind in ("debate", "loop"):
        limit = _size(options.get("rounds" if kind == "debate" else "max_iterations"))
        if limit is None:
            return f"{'round' if kind == 'debate' else 'pass'} {reached}"
        # an allowed drift may have lowered the limit below the iterations recorded (those are cancelled)
        return f"{'round' if kind == 'debate' else 'pass'} {min(reached, limit)}/{limit}"
    if kind == "supervisor":
        return f"turn {max((c.iteration for c in children), default=0)}"
    if kind == "vote":
        voters = _size(options.get("agents"))
        return f"{sum(1 for c in done if c.agent != TALLY)}/{voters if voters is not None else len(calls)} votes"
    if kind == "parallel":
        branches = _size(options.get("agents"))
        return f"{len([c for c in done if c.agent])}/{branches if branches is not None else len(calls)} branches"
    if kind == "map":
        listing = next((c for c in children if c.agent == ITEMS), None)
        if listing is not None and listing.status != StepStatus.COMPLETED:
            return "listing items"
        items = _items(group, children, state)
        return f"{len([c for c in done if c.agent is None])}/{items} items"
    if kind == "planner":
        finished = {_task(c) for c in calls if c.status == StepStatus.COMPLETED}
        inner = inner_state(group, state)
        plan = inner.get("plan") if inner is not None else None
        if isinstance(plan, list):  # the current plan: completed subtasks and those still to run
            planned = len(plan)
        elif group.status == StepStatus.COMPLETED:
            planned = len(finished)
        else:
            planned = len({_task(c) for c in calls})
        return f"{len(finished)}/{max(planned, len(finished))} subtasks"
    return f"{len(done)}/{len(children)} calls"


def _items(group: StepRecord, children: Sequence[StepRecord], state: Any) -> int:
    """How many items a map listed: its state's list while the run is inside it, else the item
    calls recorded (every item has one once the map completed)."""
    inner = inner_state(group, state)
    listed = inner.get("items") if inner is not None else None
    calls = len({c.iteration for c in children if c.agent is None})
    return max(len(listed), calls) if isinstance(listed, list) else calls


def _width(kind: str | None, group: StepRecord, children: Sequence[StepRecord], state: Any, running: int) -> int:
    """How many calls a node runs side by side, for ``3 of 5 running``: a vote's voters, a
    parallel's branches, a map's items, a debate's speakers, a planner's subtasks planned (at
    least those ``running``)."""
    options = group.options
    if kind in ("vote", "parallel", "debate"):
        size = _size(options.get("agents"))
    elif kind == "map":
        size = _items(group, children, state)
    elif kind == "planner":
        inner = inner_state(group, state)
        plan = inner.get("plan") if inner is not None else None
        size = sum(1 for t in plan if isinstance(t, Mapping) and t.get("status") != "failed") if isinstance(
            plan, list) else None
    else:
        size = None
    return max(size if size is not None else len(children), running)


def _not_started(kind: str | None, options: Mapping[str, Any]) -> str:
    """What a pattern that has not started will do: ``3 rounds``, ``3 voters``, ``up to 5
    passes``, ``up to 20 turns``, ``not planned yet``, ``3 branches``, ``not listed yet``."""
    sizes = {"debate": ("rounds", "{} rounds"), "vote": ("agents", "{} voters"), "parallel": ("agents", "{} branches"),
             "loop": ("max_iterations", "up to {} passes"), "supervisor": ("max_turns", "up to {} turns")}
    key, words = sizes.get(kind or "", ("", ""))
    size = _size(options.get(key)) if key else None
    if size is not None:
        return words.format(size)
    return {"planner": "not planned yet", "map": "not listed yet"}.get(kind or "", "not started")


# ---- the summary shown for a selected pattern --------------------------------------------------


@dataclass(frozen=True)
class Iteration:
    """One round, turn, pass or vote: its ``number``, ``label`` (``round 3``) and ``calls`` (the
    children of that iteration, in seq order; outputs loaded when the summary asked for them)."""

    number: int
    label: str
    calls: list[StepRecord]


@dataclass(frozen=True)
class AgentCounts:
    """A supervisor agent's ``activations`` (times called) and ``idle`` (its idle turns in a row:
    calls that returned None since its last other output)."""

    agent: str
    activations: int
    idle: int


@dataclass(frozen=True)
class Route:
    """A supervisor's routing decision of ``turn``: the ``candidates`` it chose from and its
    ``choice`` (None: stop); ``status`` of the route execution (its output is unknown until it
    completed: ``candidates`` empty, ``choice`` None)."""

    turn: int
    candidates: list[str]
    choice: str | None
    status: StepStatus


@dataclass
class PlanNode:
    """One subtask of a planner's plan: ``task`` id, ``agent``, ``after`` (the ids it waits for),
    ``replan`` (0: in the first plan; k: added by re-plan k), ``runs`` (its executions, in order),
    ``dropped_by`` (the re-plan that replaced it before it completed; None: not replaced), and the
    subtasks placed under it (those whose last dependency it is)."""

    task: str
    agent: str | None
    after: list[str]
    replan: int = 0
    runs: list[StepRecord] = field(default_factory=list)
    dropped_by: int | None = None
    children: list[PlanNode] = field(default_factory=list)

    @property
    def status(self) -> StepStatus | None:
        """The status of its latest execution; None when it has not run (planned, or dropped)."""
        return self.runs[-1].status if self.runs else None


@dataclass(frozen=True)
class Replan:
    """Change ``number`` of a planner's plan, by execution ``step``: a ``replan`` after
    ``failed`` (the task id of the subtask that failed, if known), or a ``plan`` made again
    (``resume --replan``; ``failed`` None)."""

    number: int
    failed: str | None
    step: StepRecord


@dataclass(frozen=True)
class PatternSummary:
    """What the console shows for a selected pattern. Every kind: ``kind``, ``progress``,
    ``status``, ``iterations`` (the latest :data:`SHOWN_ITERATIONS`; ``earlier``: how many more
    before them). Supervisor: ``counts`` (from the state while the run is inside it, else computed
    from the calls) and ``routes`` (the routing decisions of the turns listed). Vote: ``votes``
    (voter, vote), ``uncounted`` (voter, vote: votes an allowed drift withdrew, their voter no
    longer defined) and ``tally`` (recorded, value). Debate: ``judge`` (the judge's execution,
    output loaded). Planner: ``plan`` (the roots of the plan tree), ``replans`` and ``plan_step``
    (the first ``plan`` execution). ``parameters``: the group row's options (the pattern's
    parameters: ``rounds``, ``judge``, ``agents``...)."""

    kind: str
    progress: str
    status: StepStatus
    iterations: list[Iteration]
    earlier: int = 0
    counts: list[AgentCounts] = field(default_factory=list)
    counts_live: bool = False
    routes: list[Route] = field(default_factory=list)
    votes: list[tuple[str, Any]] = field(default_factory=list)
    uncounted: list[tuple[str, Any]] = field(default_factory=list)
    tally: tuple[bool, Any] = (False, None)
    judge: StepRecord | None = None
    plan: list[PlanNode] = field(default_factory=list)
    replans: list[Replan] = field(default_factory=list)
    plan_step: StepRecord | None = None
    parameters: Mapping[str, Any] = field(default_factory=dict)


_DECISIONS = frozenset({JUDGE, TALLY, ROUTE, PLAN, REPLAN, ITEMS})


def _iterations(kind: str, children: Sequence[StepRecord]) -> list[Iteration]:
    by_number: dict[int, list[StepRecord]] = defaultdict(list)
    for child in children:
        if child.agent not in _DECISIONS:
            by_number[child.iteration].append(child)
    word = NOUNS.get(kind, "iteration")
    if kind in ("vote", "parallel"):
        return [Iteration(1, "votes" if kind == "vote" else "branches", by_number[1])] if by_number else []
    if kind == "planner":  # one iteration per subtask, labelled with its task
        return [Iteration(n, call_label(kind, calls[0]), calls) for n, calls in sorted(by_number.items())]
    return [Iteration(n, f"{word} {n}", calls) for n, calls in sorted(by_number.items())]


def _first_shown(iterations: list[Iteration]) -> int:
    """The number of the first iteration a summary lists (0: it lists them all)."""
    return iterations[-SHOWN_ITERATIONS].number if len(iterations) > SHOWN_ITERATIONS else 0


def wanted_outputs(group: StepRecord, children: Sequence[StepRecord], state: Any = None) -> list[int]:
    """The seqs of the completed children whose outputs :func:`summary` uses, so that reading
    them stays bounded however long the pattern ran: the calls of the iterations it lists, their
    routing decisions, the plans and re-plans, the judge, the tally, every vote (those an allowed
    drift cancelled included); and every call of
    a supervisor the run has left (its idle counts are computed from them; inside it, the state
    has them). Read them, then call :func:`summary` (``state``: as for it)."""
    kind = kind_of(group) or ""
    first = _first_shown(_iterations(kind, children))
    every = kind == "vote" or (kind == "supervisor" and inner_state(group, state) is None)
    ended = (StepStatus.COMPLETED, StepStatus.CANCELLED) if kind == "vote" else (StepStatus.COMPLETED,)
    return [c.seq for c in children if c.status in ended and c.has_output
            and (every or c.iteration >= first or c.agent in (PLAN, REPLAN, JUDGE, TALLY))]


def with_outputs(children: Sequence[StepRecord], outputs: Mapping[int, Any]) -> list[StepRecord]:
    """``children`` with the outputs read (``outputs``: seq -> value) set on them."""
    return [c.model_copy(update={"output": outputs[c.seq]}) if c.seq in outputs else c for c in children]


def summary(group: StepRecord, children: Sequence[StepRecord], state: Any = None,
            result: tuple[bool, Any] = (False, None)) -> PatternSummary:
    """The summary of pattern ``group`` from its ``children`` (with the outputs of
    :func:`wanted_outputs` set, see :func:`with_outputs`), the driver ``state`` of the run's
    latest checkpoint, and ``result``: (recorded, value) of the group row's output."""
    kind = kind_of(group) or ""
    iterations = _iterations(kind, children)
    shown = iterations[-SHOWN_ITERATIONS:]
    base = PatternSummary(kind, progress(group, children, state), shown_status(group, children), shown,
                          earlier=len(iterations) - len(shown), parameters=group.options)
    if kind == "supervisor":
        counts, live = _counts(group, children, state)
        first = _first_shown(iterations)
        routes = [_route(c) for c in children if c.agent == ROUTE and c.iteration >= first]
        return replace(base, counts=counts, counts_live=live, routes=routes)
    if kind == "vote":
        return replace(base, **_votes(children, result))
    if kind == "debate":
        judge = next((c for c in reversed(children) if c.agent == JUDGE), None)
        return replace(base, judge=judge)
    if kind == "planner":
        plan, replans = plan_tree(children)
        plan_step = next((c for c in children if c.agent == PLAN), None)
        return replace(base, plan=plan, replans=replans, plan_step=plan_step)
    return base


def _counts(group: StepRecord, children: Sequence[StepRecord], state: Any) -> tuple[list[AgentCounts], bool]:
    """Per-agent counts: the pattern's own (``activations``, ``idle``) while the run is inside it,
    else computed from the completed calls (an idle call is one whose output is None)."""
    inner = inner_state(group, state)
    if inner is not None and isinstance(inner.get("activations"), Mapping):
        activations, idle = inner["activations"], inner.get("idle") or {}
        if isinstance(idle, Mapping):
            agents = list(dict.fromkeys([*activations, *idle]))
            return [AgentCounts(str(a), _int(activations.get(a)), _int(idle.get(a))) for a in agents], True
    calls: dict[str, list[StepRecord]] = defaultdict(list)
    for child in children:
        if child.agent is not None and child.agent != ROUTE and child.status == StepStatus.COMPLETED:
            calls[child.agent].append(child)
    counts = []
    for agent, made in calls.items():
        idle = 0
        for call in reversed(made):
            if call.output is not None:
                break
            idle += 1
        counts.append(AgentCounts(agent, len(made), idle))
    return counts, False


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _route(child: StepRecord) -> Route:
    out = child.output if isinstance(child.output, Mapping) else {}
    candidates = out.get("candidates")
    choice = out.get("choice")
    return Route(_int(out.get("turn")) or child.iteration,
                 [str(c) for c in candidates] if isinstance(candidates, list) else [],
                 None if choice is None else str(choice), child.status)


def _votes(children: Sequence[StepRecord], result: tuple[bool, Any]) -> dict[str, Any]:
    """The votes counted (from the group's result once recorded, else from the voters' recorded
    calls), the votes not counted (cast, then cancelled by an allowed drift) and the tally (the
    result's ``"result"``, else a tally call's output)."""
    uncounted = [(c.agent or "?", c.output) for c in children
                 if c.agent != TALLY and c.status == StepStatus.CANCELLED and c.has_output]
    recorded, value = result
    if recorded and isinstance(value, Mapping) and isinstance(value.get("votes"), Mapping):
        votes = list(value["votes"].items())
        return {"votes": [(str(v), vote) for v, vote in votes], "uncounted": uncounted,
                "tally": (True, value.get("result"))}
    votes = [(c.agent or "?", c.output) for c in children
             if c.agent != TALLY and c.status == StepStatus.COMPLETED]
    tally = next((c for c in children if c.agent == TALLY and c.status == StepStatus.COMPLETED), None)
    return {"votes": votes, "uncounted": uncounted,
            "tally": (True, tally.output) if tally is not None else (False, None)}


def plan_tree(children: Sequence[StepRecord]) -> tuple[list[PlanNode], list[Replan]]:
    """A planner's plan as a tree, from its children in seq order (outputs of ``plan`` and
    ``replan`` loaded): every subtask planned, each with its executions; a re-plan (or a plan made
    again) replaces the subtasks not yet completed (they are kept, marked ``dropped_by``, unless
    they ran: a failed one stays, failed). Each subtask sits under its last dependency (``after``) that is in the
    tree; one that has none is a root. A subtask executed but absent from the recorded plans
    (a drifted definition) is a root of its own."""
    nodes: list[PlanNode] = []
    current: dict[str, PlanNode] = {}
    replans: list[Replan] = []
    last_failed: str | None = None

    def add(subtasks: Any, origin: int) -> None:
        for entry in subtasks if isinstance(subtasks, list) else []:
            if not isinstance(entry, Mapping) or entry.get("id") is None:
                continue
            after = entry.get("after")
            node = PlanNode(str(entry["id"]), None if entry.get("agent") is None else str(entry["agent"]),
                            [str(a) for a in after] if isinstance(after, list) else [], origin)
            nodes.append(node)
            current[node.task] = node

    planned = False
    for child in children:
        if child.agent == PLAN and not planned:
            planned = child.status == StepStatus.COMPLETED
            add(child.output if planned else None, 0)
        elif child.agent in (PLAN, REPLAN):
            replans.append(Replan(len(replans) + 1, last_failed if child.agent == REPLAN else None, child))
            last_failed = None
            if child.status != StepStatus.COMPLETED:
                continue
            for node in list(current.values()):
                if node.status != StepStatus.COMPLETED:
                    if not node.runs:
                        node.dropped_by = len(replans)
                    del current[node.task]
            add(child.output, len(replans))
        else:
            task = _task(child) or f"#{child.iteration}"
            node = current.get(task)
            if node is None:
                node = PlanNode(task, child.agent, [], len(replans))
                nodes.append(node)
                current[task] = node
            node.runs.append(child)
            if child.status == StepStatus.FAILED:
                last_failed = task
    return _arrange(nodes), replans


def _arrange(nodes: list[PlanNode]) -> list[PlanNode]:
    """Place each node under its last dependency that precedes it (the latest node with that id
    before it); the others are roots. Order is kept."""
    roots: list[PlanNode] = []
    latest: dict[str, PlanNode] = {}
    for node in nodes:
        parent = next((latest[a] for a in reversed(node.after) if a in latest), None)
        (parent.children if parent is not None else roots).append(node)
        latest[node.task] = node
    return roots
