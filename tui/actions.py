"""The one registry of the console's keys: what each action is called, its key, its label and
when it applies. Bindings, detail-pane buttons and the help text are all built from it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from textual.binding import Binding

from relaypoint.models import Run
from relaypoint.refusals import APPROVAL_KINDS, INPUT_KINDS, cancel_refusal, decision_refusal, resume_refusal
from relaypoint.status import RUN_SYMBOLS


@dataclass(frozen=True)
class RunAction:
    """An action on the selected run: ``name`` (the screen's ``action_<name>``), ``key``, ``label``
    (footer and button), ``tooltip``, and ``why_not``: the one-line reason it cannot act on a run
    in its state, or None when it can. The reasons are the runtime's own
    (:mod:`relaypoint.refusals`); the runtime still decides when the action is taken, this only
    greys out what would certainly be refused and says why when its key is pressed anyway."""

    name: str
    key: str
    label: str
    tooltip: str
    why_not: Callable[[Run], str | None]

    def binding(self) -> Binding:
        """The footer binding of this action."""
        return Binding(self.key, self.name, self.label, id=self.name, tooltip=self.tooltip)


def _decision(kinds: tuple[str, ...], verb: str) -> Callable[[Run], str | None]:
    return lambda run: decision_refusal(run, run.pending, kinds, verb)


def _fork_refusal(run: Run) -> str | None:
    return None if run.tasks else f"run {run.run_id} has no steps to fork from"


RUN_ACTIONS: tuple[RunAction, ...] = (
    RunAction("approve", "a", "Approve", "Approve the pending checkpoint, optionally editing the output",
              _decision(APPROVAL_KINDS, "approve")),
    RunAction("reject", "x", "Reject", "Reject the pending checkpoint with a reason; the run ends",
              _decision(APPROVAL_KINDS, "reject")),
    RunAction("respond", "i", "Respond", "Answer the run's input request with a JSON value",
              _decision(INPUT_KINDS, "respond to")),
    RunAction("resume", "r", "Resume", "Continue the run in a separate process", resume_refusal),
    RunAction("fork", "f", "Fork", "Start a new run from the selected step, reusing earlier outputs", _fork_refusal),
    RunAction("cancel", "c", "Cancel", "Cancel the run (asks first)", cancel_refusal),
)

RUN_ACTION_NAMES = frozenset(a.name for a in RUN_ACTIONS)

GENERAL_BINDINGS: tuple[Binding, ...] = (
    # Priority: "/" is acted on before the next key is dispatched, so text typed right after it
    # reaches the search box and never the runs table's single-letter actions.
    Binding("/", "search", "Search", id="search", priority=True, tooltip="Filter runs by run id or workflow prefix"),
    Binding("s", "cycle_status", "Status", id="status", tooltip="Cycle the status filter"),
    Binding("question_mark", "help", "Help", key_display="?", id="help", tooltip="Show all keys"),
    Binding("escape", "back", "Back", show=False, id="back",
            tooltip="Close the search, return to the runs table, then clear filters"),
    Binding("q", "quit", "Quit", id="quit", tooltip="Quit the console (running resumes continue)"),
)

QUEUE_BINDINGS: tuple[Binding, ...] = (
    Binding("n", "next_pending", "Pending", id="next-pending",
            tooltip="Review the next pending decision of all runs (from the runs list: the oldest)"),
    Binding("N", "previous_pending", "Previous pending", id="previous-pending", show=False,
            tooltip="Review the previous pending decision (from the runs list: the newest)"),
)
"""The review queue's keys: pending decisions (approvals, input requests, orphan holds) of all runs."""

REVIEW_BINDINGS: tuple[Binding, ...] = (
    Binding("u", "upstream", "Upstream", id="upstream",
            tooltip="On the review screen: the outputs the step was built from (u again: its own output)"),
    Binding("e", "expand", "Expand", id="expand", tooltip="On the review screen: show long lists whole"),
    Binding("o", "open_run", "Open run", id="open-run",
            tooltip="On the review screen: show the run alone in the runs list (escape clears that filter)"),
)
"""Keys of the review screen besides the decisions and the queue's."""

OUTPUT_BINDINGS: tuple[Binding, ...] = (
    Binding("m", "more_output", "More", show=False, id="more-output",
            tooltip="Show another page of the selected step's long output"),
    Binding("e", "expand", "Expand", show=False, id="expand-output",
            tooltip="Show the selected step's output with its long lists whole"),
    Binding("p", "pager", "Pager", show=False, id="pager",
            tooltip="Open the selected step's whole output in $PAGER (less by default)"),
)
"""Keys on the selected step's output (not in the footer: the output says when they apply)."""

_PANES = "Move between the runs table and the step chain"
PANE_BINDINGS: tuple[Binding, ...] = (
    Binding("tab", "switch_pane(1)", "Next pane", show=False, id="next-pane", tooltip=_PANES),
    Binding("shift+tab", "switch_pane(-1)", "Previous pane", show=False, id="previous-pane", tooltip=_PANES),
)

PINNED_ACTIONS = frozenset({"help", "quit"})
"""Footer keys kept at its right end, visible however narrow the terminal."""

MOVE_KEYS: tuple[tuple[str, str], ...] = (
    ("j / down", "Next row of the runs table or the step chain"),
    ("k / up", "Previous row of the runs table or the step chain"),
    ("enter", "From the runs table: go to the run's step chain"),
    ("→ / ←", "Expand / collapse a pattern in the step chain (enter, space: either)"),
    ("tab", "Switch between the runs table and the step chain (shift+tab: backwards)"),
    ("pgdn", "In the step chain: scroll the step's output down (pgup: up)"),
    ("ctrl+p", "Command palette: every action above, a status filter, a run by id prefix"),
)

FORM_KEYS: tuple[tuple[str, str], ...] = (
    ("ctrl+s", "Submit the form (approve, reject, respond, fork); an edited output shows its diff first"),
    ("ctrl+e", "In the approve form: edit the output as JSON (it opens showing the output as it reads)"),
    ("escape", "Close the form without doing anything"),
    ("tab", "Next field (shift+tab: previous)"),
    ("ctrl+a", "In a JSON editor: select all, so typing replaces it (F7 too)"),
    ("ctrl+z", "In a JSON editor: undo (ctrl+y: redo)"),
)

CLOSE_HELP = "escape, q or ? closes this help"


def _row(key: str, what: str) -> str:
    return f"| `{key}` | {what} |"


def help_markdown() -> str:
    """The help text: every key from the registry, the form keys, and the status symbols."""
    lines = ["Press **escape** (or `q`, `?`) to close this help; ↑/↓ scroll it.", "",
             "## Keys", "", "| Key | Action |", "| --- | --- |"]
    lines += [_row(a.key, f"**{a.label}**: {a.tooltip}") for a in RUN_ACTIONS]
    lines += [_row(b.key_display or b.key, f"**{b.description}**: {b.tooltip}") for b in GENERAL_BINDINGS]
    lines += [_row(key, what) for key, what in MOVE_KEYS]
    lines += [_row(b.key, f"**{b.description}**: {b.tooltip}") for b in OUTPUT_BINDINGS]
    lines += ["", ("Keys that do not apply to the selected run are greyed out in the footer, and its "
                   "buttons are disabled; pressed anyway, they say why."), "",
              "## The review queue", "",
              ("`relaypoint review`, or `n` / `N` from the runs list: the pending decisions of all runs, "
               "one at a time, oldest first. `a`, `x`, `i` decide the one shown (`a` then `enter` approves "
               "it as shown) and the next comes into view."), "",
              "| Key | Action |", "| --- | --- |"]
    lines += [_row(b.key, f"**{b.description}**: {b.tooltip}") for b in (*QUEUE_BINDINGS, *REVIEW_BINDINGS)]
    lines += ["", "## In a form", "",
              "| Key | Action |", "| --- | --- |"]
    lines += [_row(key, what) for key, what in FORM_KEYS]
    lines += ["", "## Run statuses", "",
              "  ·  ".join(f"{symbol} {status.value}" for status, symbol in RUN_SYMBOLS.items()), "",
              ("The list refreshes every second; changes made by other processes appear without "
               "moving the cursor. A resume runs in its own process and keeps going if the console closes.")]
    return "\n".join(lines)
