"""The planner: a plan of subtasks run in dependency order, re-planned when one fails.

Children: ``plan`` (its recorded output is the plan), the subtasks (agent = the subtask's agent,
iteration = the subtask's ordinal ``n``, given when the plan is folded; ``task`` in its options),
and ``replan`` after a subtask failed for good (iteration = one past the highest ordinal given).
Sub-state: ``{"plan": [{"id", "agent", "input", "after", "status", "n"}], "replans": n,
"ordinal": k}`` (k: the highest ordinal given) plus ``{"failed": {"task", "error"}}`` until the
re-plan is recorded, and ``{"decompose": true}`` when the operator asked for a new plan (``resume
--replan``). The plan commits with the ``plan`` record, so a resumed planner never decomposes its
goal again unless asked.

Every subtask whose dependencies are completed is asked for at once, under the ordinal it was
given, which never changes while it is in flight; folding one marks it completed by id, so the
state after a set of subtasks does not depend on the order they finished in. A state recorded
before ordinals were given (subtasks without ``n``, ``ordinal`` the last subtask run) is numbered
on reading, the ready subtasks first in plan order from ``ordinal + 1``: the one its run had in
flight gets the ordinal that run gave it, and the others, in the order they can run, those the
sequential planner would have given them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..calls import check_callable, wrap
from ..drivers import Turn
from ..errors import InvalidValue, quoted
from .base import Pattern, Sub, whole

if TYPE_CHECKING:
    from ..models import StepRecord
    from ..workflow import Context

PENDING, COMPLETED, FAILED = "pending", "completed", "failed"


class Planner(Pattern):
    """``wf.planner("build", plan=make_plan, agents={...}, replan=replan, max_replans=2)``.

    ``plan(ctx)`` returns ``[{"id": "t1", "agent": "code", "input": {...}, "after": ["t0"]}, ...]``
    (``input`` and ``after`` optional). A subtask's agent sees its ``input`` as ``ctx.input`` (the
    run's input when it has none) and the plan in ``ctx.state["plan"]``. A subtask that fails
    after its retries calls ``replan(ctx)`` with ``ctx.failed`` = ``{"task": {...}, "error": text}``;
    its answer (subtasks, same shape; ids already completed are kept, not run again) replaces the
    unfinished part of the plan. At most
    ``max_replans`` re-plans, then the run fails with the reason. An invalid plan (unknown agent,
    duplicate or unknown id, a cycle) fails the plan's execution with ``InvalidValue``. The result
    is ``{task id: output}``.
    """

    kind = "planner"
    noun = "subtask"
    roles = ("plan", "replan")

    def __init__(self, name: str, plan: Callable[[Context], Any], agents: Mapping[str, Any], *,
                 replan: Callable[[Context], Any] | None, max_replans: int, retries: int, on_orphan: str,
                 timeout: float | None, max_concurrency: int | None = None) -> None:
        super().__init__(name, agents, retries=retries, on_orphan=on_orphan, timeout=timeout,
                         max_concurrency=max_concurrency)
        for what, fn in (("plan", plan), ("replan", replan)):
            if fn is not None:
                check_callable(fn, f"planner {name!r}: {what}")
        self.max_replans = whole(max_replans, f"planner {name!r}: max_replans", least=0)
        self.replans = replan is not None
        self._add("plan", plan)
        if replan is not None:
            self._add("replan", wrap(replan, before=_with_failed))

    def settings(self) -> dict[str, Any]:
        return {"max_replans": self.max_replans, "replan": self.replans}

    def start(self) -> Sub:
        return {"plan": None, "replans": 0, "ordinal": 0}

    def next(self, sub: Sub) -> tuple[Turn, ...]:
        k = sub["ordinal"] + 1
        if sub.get("failed") is not None:
            return (Turn(k, "replan"),)
        if sub["plan"] is None or sub.get("decompose"):
            return (Turn(k, "plan"),)
        ready = sorted(runnable(numbered(sub)["plan"]), key=lambda t: t["n"])  # by ordinal: the order they can run
        return tuple(Turn(t["n"], t["agent"], t["id"], t["input"]) for t in ready)

    def fold(self, sub: Sub, turn: Turn, output: Any, ctx: Context | None) -> Sub:
        if turn.agent in self.roles:
            kept = [t for t in sub["plan"] or [] if t["status"] == COMPLETED]
            counted = turn.agent == "replan"
            rest = {k: v for k, v in sub.items() if k not in ("failed", "decompose")}
            return numbered({**rest, "plan": kept + self._checked(output, kept), "replans": sub["replans"] + counted})
        sub = numbered(sub)
        return {**sub, "plan": [{**t, "status": COMPLETED} if t["id"] == turn.task else t for t in sub["plan"]]}

    def failed(self, sub: Sub, turn: Turn, error: str) -> Sub | str | None:
        if turn.task is None:
            return None
        if not self.replans:
            return f"subtask '{turn.task}' of '{self.name}' failed: {error} (no replan function to recover)"
        if sub["replans"] >= self.max_replans:
            return (f"subtask '{turn.task}' of '{self.name}' failed: {error}; the plan was already re-planned "
                    f"{sub['replans']} times (max_replans={self.max_replans})")
        sub = numbered(sub)
        task = next(t for t in sub["plan"] if t["id"] == turn.task)
        plan = [{**t, "status": FAILED} if t is task else t for t in sub["plan"]]
        failed = {"task": {k: task[k] for k in ("id", "agent", "input", "after")}, "error": error}
        return {**sub, "plan": plan, "ordinal": max(sub["ordinal"], turn.iteration), "failed": failed}

    def replan(self, sub: Sub) -> Sub:
        if sub["plan"] is None or sub.get("decompose"):
            # stopped at a plan never recorded: past it, so its ordinal (and key) is not given again
            return {**sub, "decompose": True, "failed": None, "ordinal": sub["ordinal"] + 1}
        # every subtask the run may have started has an ordinal <= "ordinal" once numbered
        return {**numbered(sub), "decompose": True, "failed": None}

    def lacking(self, sub: Sub) -> str | None:
        if sub["plan"] is None or sub.get("decompose") or sub.get("failed") is not None:
            return None  # a plan is to be made, and checked against this definition
        gone = [t for t in sub["plan"] if t["status"] == PENDING and t["agent"] not in self.agents]
        if not gone:
            return None
        agents = list(dict.fromkeys(t["agent"] for t in gone))
        it = "it" if len(agents) == 1 else "them"
        if len(agents) == 1:
            which = (f"subtask{'s' if len(gone) > 1 else ''} {', '.join(quoted(t['id']) for t in gone)} for agent "
                     f"{quoted(agents[0])}, which")
        else:
            listed = ", ".join(f"{quoted(t['id'])} (agent {quoted(t['agent'])})" for t in gone)
            which = f"subtasks {listed}, whose agents"
        return (f"the plan of {quoted(self.name)} still has {which} the loaded definition does not have (an allowed "
                f"drift removed {it}); restore {it}, resume with --replan to plan again, or fork the run from an "
                "earlier step")

    def _checked(self, output: Any, kept: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The subtasks of a plan answer not completed already (``kept``: a re-plan may repeat them;
        they are never run again), normalised, with status pending; ``InvalidValue`` when the
        answer is not a valid plan."""
        def bad(why: str) -> InvalidValue:
            return InvalidValue(f"the plan of '{self.name}' is not valid: {why}")

        if not isinstance(output, list):
            raise bad(f"it must be a list of subtasks, not {type(output).__name__}")
        done = {t["id"] for t in kept}
        tasks: list[dict[str, Any]] = []
        for i, t in enumerate(output):
            if not isinstance(t, dict) or not isinstance(t.get("id"), str) or not t["id"]:
                raise bad(f"subtask {i + 1} must be a dict with a non-empty text 'id'")
            if t["id"] in done:
                continue  # completed already: kept, never run again
            if any(u["id"] == t["id"] for u in tasks):
                raise bad(f"subtask id {t['id']!r} is used twice")
            if t.get("agent") not in self.agents:
                raise bad(f"subtask {t['id']!r} names agent {t.get('agent')!r}, not one of: {', '.join(self.agents)}")
            after = t.get("after", [])
            if not isinstance(after, list) or not all(isinstance(a, str) for a in after):
                raise bad(f"subtask {t['id']!r}: 'after' must be a list of subtask ids")
            tasks.append({"id": t["id"], "agent": t["agent"], "input": t.get("input"), "after": after,
                          "status": PENDING})
        known = done | {t["id"] for t in tasks}
        for t in tasks:
            unknown = [a for a in t["after"] if a not in known]
            if unknown:
                raise bad(f"subtask {t['id']!r} waits on {', '.join(map(repr, unknown))}, not in the plan")
        ordered, left = set(done), list(tasks)
        while left:  # a cycle leaves subtasks that can never start
            ready = [t for t in left if set(t["after"]) <= ordered]
            if not ready:
                raise bad(f"subtasks {', '.join(repr(t['id']) for t in left)} wait on each other (a cycle)")
            ordered |= {t["id"] for t in ready}
            left = [t for t in left if t not in ready]
        return tasks

    def result(self, records: list[StepRecord]) -> Any:
        return {r.options["task"]: r.output for r in records if r.options.get("task") is not None}


def runnable(plan: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pending subtasks of ``plan`` whose dependencies are all completed, in plan order."""
    done = {t["id"] for t in plan if t["status"] == COMPLETED}
    return [t for t in plan if t["status"] == PENDING and set(t["after"]) <= done]


def numbered(sub: Sub) -> Sub:
    """``sub`` with an ordinal ``n`` given to each pending subtask that has none, from
    ``sub["ordinal"] + 1`` in the order they can run: the ready ones first, then those ready once
    those are done, and so on, each wave in plan order (``ordinal`` becomes the highest given). A
    subtask keeps its ordinal once given."""
    plan = sub["plan"]
    left = [t for t in plan if t["status"] == PENDING and "n" not in t]
    if not left:
        return sub
    known = {t["id"] for t in plan if t["status"] == COMPLETED or (t["status"] == PENDING and "n" in t)}
    order: list[str] = []
    while left:
        wave = [t for t in left if set(t["after"]) <= known] or left  # waiting on a failed subtask: last
        order += [t["id"] for t in wave]
        known |= {t["id"] for t in wave}
        left = [t for t in left if t["id"] not in known]
    k = sub["ordinal"]
    given = {task: k + 1 + j for j, task in enumerate(order)}
    return {**sub, "plan": [{**t, "n": given[t["id"]]} if t["id"] in given else t for t in plan],
            "ordinal": k + len(order)}


def _with_failed(ctx: Context) -> Context:
    """``ctx`` for ``replan``: ``ctx.failed`` is the failed subtask and its error."""
    ctx.failed = dict(ctx.state["failed"]) if ctx.state.get("failed") else None
    return ctx
