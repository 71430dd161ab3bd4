"""The decision forms (approve, reject, respond, fork), modal screens. Each checks, before it
closes, everything it can know from what it shows (JSON parses, a fork input is an object, a reason
is given, the steps before a fork point completed) and stays open with the problem under the fields;
the runtime still decides whether the decision is allowed when it is made, and the screen reports
what it says.

Every dialog fits a 100x30 terminal: its fields scroll inside it, the error line and the buttons
stay at its bottom, and its bottom border names the keys (``ctrl+s``, ``esc``)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select, Static, TextArea

from relaypoint.encoding import parse_json_arg
from relaypoint.errors import InvalidValue
from relaypoint.models import Run
from relaypoint.status import StepStatus
from relaypoint.typed import fields
from relaypoint.views.display import clean, json_text, literal
from relaypoint.views.patterns import describe, paused_execution, shown_status, tree

from .. import format as fmt
from ..output import EDITABLE_CHARS, show_command
from ..readable import Readable, plain_text
from ..widgets.readable_output import ReadableOutput


def _paused_at(run: Run) -> Text:
    """The execution the run's pending checkpoint is about, in words (``argue, round 2 · con``
    for a person's turn in a pattern)."""
    cp = run.pending
    assert cp is not None
    paused = paused_execution(run.tasks, cp)
    return literal(describe(paused, run.tasks) if paused is not None else cp.step or "?", "bold")


def _in_pattern(run: Run) -> bool:
    """True when the run's pending checkpoint is a turn of a pattern's call (a person's turn)."""
    paused = paused_execution(run.tasks, run.pending) if run.pending is not None else None
    return paused is not None and paused.parent is not None


MODEL_FIELDS = 12
"""At most this many fields of a typed step's model are listed on the approve form."""


def model_fields(run: Run) -> Text | None:
    """The model a typed gated step's output must fit, from the schema its execution recorded:
    ``Output model Draft: title string required · words integer``; None for an untyped step or a
    person's turn (whose value is not the step's output). The runtime checks the edit."""
    cp = run.pending
    paused = paused_execution(run.tasks, cp) if cp is not None else None
    entry = paused.options.get("output") if paused is not None and paused.status != StepStatus.AWAITING_APPROVAL else None
    if not isinstance(entry, dict):
        return None
    found = fields(entry)
    out = Text.assemble(("Output model ", "dim"), literal(str(entry.get("name", "?")), "bold"))
    for i, (name, kind, required) in enumerate(found[:MODEL_FIELDS]):
        out.append_text(Text.assemble((": " if i == 0 else " · ", "dim"), literal(name, "bold"), " ",
                                      literal(kind), (" required", "yellow") if required else ""))
    if len(found) > MODEL_FIELDS:
        out.append(f" · and {len(found) - MODEL_FIELDS} more", style="dim")
    return out


def _run_line(run: Run) -> Text:
    return Text.assemble(("run ", "dim"), literal(fmt.short_id(run.run_id)), ("  workflow ", "dim"),
                         literal(run.workflow, "bold"), "  ", fmt.run_status(run.status))


class JsonEditor(TextArea):
    """A text area for JSON. ``ctrl+a`` selects all, as in most editors, so typing replaces the
    text shown (``home`` still goes to the line start; ``F7`` also selects all)."""

    BINDINGS = [Binding("ctrl+a", "select_all", "Select all", show=False)]

    def __init__(self, text: str, **kwargs: Any) -> None:
        super().__init__(text, soft_wrap=True, **kwargs)


def _hint_text(submit: str) -> Text:
    return Text.assemble(("ctrl+a", "bold"), " select all  ", ("ctrl+z", "bold"), " undo  ",
                         ("ctrl+s", "bold"), f" {submit}  ", ("esc", "bold"), " cancel")


def _editor_hint(submit: str) -> Static:
    """The line under a JSON editor naming its less obvious keys."""
    return Static(_hint_text(submit), classes="hint")


class _Form(ModalScreen[Any]):
    """A dialog with a title, a body, an error line and Submit / Cancel buttons.
    ``ctrl+s`` submits from anywhere in it; ``escape`` closes it without doing anything."""

    BINDINGS = [
        Binding("escape", "dismiss_form", "Close", id="close"),
        Binding("ctrl+s", "submit", "Submit", id="submit"),
    ]
    SUBMIT_LABEL = "Submit"
    SUBMIT_VARIANT = "primary"

    def __init__(self, title: str, run: Run) -> None:
        super().__init__()
        self.form_title = title
        self.run = run

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog form", can_focus=False) as dialog:
            dialog.border_title = self.form_title
            dialog.border_subtitle = f"ctrl+s {self.SUBMIT_LABEL.lower()} · esc cancel"
            yield Static(_run_line(self.run), classes="run-line")
            yield from self.body()
            with Vertical(classes="form-foot"):
                yield Label("", classes="form-error")
                with Horizontal(classes="buttons"):
                    yield Button(f"{self.SUBMIT_LABEL} (ctrl+s)", variant=self.SUBMIT_VARIANT, id="submit",
                                 compact=True)
                    yield Button("Cancel (esc)", id="close", compact=True)

    def body(self) -> ComposeResult:
        """The form's fields."""
        yield from ()

    def reason(self) -> Static:
        """Why the run waits (a gate's reason, a person's prompt), one page of it at most, with its
        size and the command that prints it whole: a prompt of megabytes would take the form
        seconds to lay out."""
        cp = self.run.pending
        assert cp is not None
        return Static(plain_text(cp.reason or "", show_command(self.app.db_url, self.run.run_id), pages=1),
                      classes="reason")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "submit":
            self.action_submit()
        else:
            self.dismiss(None)

    def action_dismiss_form(self) -> None:
        self.dismiss(None)

    def action_submit(self) -> None:
        try:
            result = self.collect()
        except InvalidValue as e:
            self.show_error(str(e))
            return
        if self.ready(result):
            self.dismiss(result)

    def ready(self, result: Any) -> bool:
        """Whether ``result`` (what :meth:`collect` gave) is to be recorded now; a form may first
        show something about it and wait for the next submit."""
        return True

    def collect(self) -> Any:
        """Read the fields; raise ``InvalidValue`` to keep the form open with a message."""
        raise NotImplementedError

    def show_error(self, message: str) -> None:
        """Show a problem under the fields, wrapped to the dialog's width (the form stays open)."""
        error = self.query_one(".form-error", Label)
        error.update(Text(clean(message), style="bold red"))
        error.display = True

    @property
    def error(self) -> str:
        """The problem shown under the fields ("" when none)."""
        return str(self.query_one(".form-error", Label).content)


def _edited_json(area: TextArea, original: Any, what: str) -> Any:
    """None when the text area is empty or still says ``original``; else the parsed value. Raises
    ``InvalidValue`` for text that is not JSON, or null in place of a recorded value (None means
    unedited to ``Runtime.approve``)."""
    text = area.text.strip()
    if not text:
        return None
    value = parse_json_arg(text, what)
    if value is None and original is not None:
        raise InvalidValue(f"{what} cannot be null; empty the editor to approve the output as it is")
    return None if value == original else value


_JSON_KINDS = ((bool, "true or false"), (dict, "an object"), (list, "a list"), (str, "a string"),
               ((int, float), "a number"), (type(None), "null"))


def _json_kind(value: Any) -> str:
    return next(name for kind, name in _JSON_KINDS if isinstance(value, kind))


@dataclass(frozen=True)
class Approval:
    """What the approve form collected: a comment and an edited output (None: unchanged)."""

    comment: str | None
    output: Any


_LOADING: Any = object()


TOO_LONG = (f"longer than {EDITABLE_CHARS:,} characters, too long to edit here: approving keeps it as is; "
            "relaypoint approve RUN --output JSON replaces it")


class ApproveScreen(_Form):
    """Approve the run's pending checkpoint: an optional comment, and the gated step's output as
    JSON, editable (left as shown, the output is kept).

    ``editor``: the output as JSON, formatted off the UI thread (``StepOutput.editor``); None for
    an output too long to edit here, which the approval then keeps as is.

    ``shown``: the output as it reads (Markdown rendered, JSON folded), shown instead of the editor
    until ``ctrl+e`` opens it. An edited output is recorded only after its difference from the
    original has been shown: the first ``ctrl+s`` shows it, the second records. ``confirm_first``:
    the Approve button has the focus (``enter`` approves as shown; the review screen opens it so).

    Without ``output`` the form opens at once with the output still being read (so keys typed
    right after ``a`` land in the form, never on the screen under it); :meth:`load` fills it, and
    until then the form cannot be submitted."""

    SUBMIT_LABEL = "Approve"
    SUBMIT_VARIANT = "success"
    # priority: the comment box, focused when the form opens, takes ctrl+e itself (end of line)
    BINDINGS = [Binding("ctrl+e", "edit", "Edit output", id="edit", priority=True)]

    def __init__(self, run: Run, output: Any = _LOADING, recorded: bool = False, editor: str | None = None,
                 shown: Readable | None = None, *, confirm_first: bool = False) -> None:
        super().__init__("Approve", run)
        self.output = output
        self.recorded = recorded
        self.editor = editor
        self.shown = shown
        self._confirmed: Any = _LOADING  # the edited output whose diff was shown (ctrl+s again records it)
        if confirm_first:
            self.AUTO_FOCUS = "#submit"

    @property
    def loaded(self) -> bool:
        """True once the gated step's output is known."""
        return self.output is not _LOADING

    @property
    def too_long(self) -> bool:
        """True when the output is too long to edit here (it is approved as is)."""
        return self.loaded and self.recorded and self.editor is None

    def _editor_text(self) -> str:
        return (self.editor or "") if self.loaded and self.recorded else ""

    def _placeholder(self) -> str:
        if not self.loaded:
            return "reading the step's output…"
        if self.too_long:
            return TOO_LONG
        return "no output recorded; type JSON to record one"

    async def load(self, output: Any, recorded: bool, editor: str | None, shown: Readable | None) -> None:
        """Show the gated step's output, read after the form opened."""
        self.output = output
        self.recorded = recorded
        self.editor = editor
        self.shown = shown
        area = self.query_one("#output-json", JsonEditor)
        area.load_text(self._editor_text())
        area.placeholder = self._placeholder()
        area.disabled = self.too_long
        if shown is not None:
            await self.query_one("#output-read", ReadableOutput).show(shown)
        self._reading(shown is not None)

    def _reading(self, reading: bool) -> None:
        """Show the output as it reads (True) or its JSON editor (False)."""
        self.query_one("#output-read").display = reading
        self.query_one("#output-json").display = not reading
        self.query_one("#output-label", Label).update(self._label(reading))
        edit = () if self.too_long else (("ctrl+e", "bold"), " edit as JSON  ")
        hint = (Text.assemble(*edit, ("ctrl+s", "bold"), " approve  ", ("esc", "bold"), " cancel") if reading
                else _hint_text("approve"))
        self.query_one("#approve-hint", Static).update(hint)

    def _label(self, reading: bool) -> str:
        if _in_pattern(self.run):
            return 'Value (JSON, optional; the pattern gets it with the approval as its "value")'
        if self.too_long:
            return f"Output, as it reads ({TOO_LONG})"
        if reading:
            return "Output, as it reads (ctrl+e: edit it as JSON)"
        return "Output (JSON; edit to replace the step's output, leave as is to keep it)"

    def action_edit(self) -> None:
        """``ctrl+e``: edit the output as JSON (the editor takes the focus); an output too long to
        edit here says so."""
        if self.too_long:
            self.show_error(TOO_LONG)
            return
        self._reading(False)
        self.query_one("#output-json", JsonEditor).focus()

    def body(self) -> ComposeResult:
        cp = self.run.pending
        assert cp is not None
        yield Static(Text.assemble(("step ", "dim"), _paused_at(self.run),
                                   ("  checkpoint ", "dim"), str(cp.checkpoint_id)))
        yield self.reason()
        yield Label("Comment (optional)")
        yield Input(placeholder="why you approve", id="comment")
        reading = self.shown is not None
        yield Label(self._label(reading), id="output-label")
        model = model_fields(self.run)
        if model is not None:
            yield Static(model, id="output-model", classes="hint")
        yield ReadableOutput(self.shown, id="output-read")
        yield JsonEditor(self._editor_text(), id="output-json", placeholder=self._placeholder(),
                         disabled=not self.loaded or self.too_long)
        yield Static(id="output-diff")
        yield Static(id="approve-hint", classes="hint")

    def on_mount(self) -> None:
        self._reading(self.shown is not None)
        self.query_one("#output-diff").display = False

    def on_input_submitted(self, event: Input.Submitted) -> None:
        # enter in the comment approves, as enter in the reject form's reason rejects
        event.stop()
        self.action_submit()

    def collect(self) -> Approval:
        if not self.loaded:
            raise InvalidValue("the step's output is still being read; submit again in a moment")
        comment = self.query_one("#comment", Input).value.strip() or None
        area = self.query_one("#output-json", TextArea)
        original = self.output if self.recorded else None
        return Approval(comment, _edited_json(area, original, "the edited output"))

    def ready(self, result: Approval) -> bool:
        """An edit of a recorded output: its diff first, recorded at the next ``ctrl+s`` (a person's
        value, with nothing recorded, is not an edit)."""
        if not (self.recorded and result.output is not None and result.output != self._confirmed):
            return True
        self._confirmed = result.output
        diff = self.query_one("#output-diff", Static)
        diff.update(output_diff(self.output, result.output))
        diff.display = True
        self.show_error("the output was edited: check the changes above, then ctrl+s again to approve "
                        "with them (esc: cancel)")
        diff.scroll_visible(animate=False)
        return False


def output_diff(original: Any, edited: Any) -> Text:
    """What an edit changed: a unified diff of the pretty JSON of ``original`` and ``edited``,
    removed lines red, added ones green, hunk headers cyan (stored text shown literally)."""
    lines = difflib.unified_diff(json_text(original).splitlines(), json_text(edited).splitlines(),
                                 "recorded output", "edited output", lineterm="", n=2)
    styles = {"+": "green", "-": "red", "@": "cyan"}
    out = Text(style="")
    for line in lines:
        if out:
            out.append("\n")
        out.append_text(literal(line, "bold " + styles[line[0]] if line[:3] in ("+++", "---")
                                else styles.get(line[:1], "")))
    return out


class RejectScreen(_Form):
    """Reject the run's pending checkpoint; a reason is required (the run ends ``rejected``)."""

    SUBMIT_LABEL = "Reject"
    SUBMIT_VARIANT = "error"

    def __init__(self, run: Run) -> None:
        super().__init__("Reject", run)

    def body(self) -> ComposeResult:
        yield self.reason()
        yield Label("Reason (required)")
        yield Input(placeholder="why the run must stop", id="reason")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_submit()

    def collect(self) -> str:
        reason = self.query_one("#reason", Input).value.strip()
        if not reason:
            raise InvalidValue("a rejection needs a reason")
        return reason


@dataclass(frozen=True)
class Response:
    """What the respond form collected: the answer (any JSON value, ``null`` included)."""

    value: Any


class RespondScreen(_Form):
    """Answer the run's input request with a JSON value."""

    SUBMIT_LABEL = "Respond"

    def __init__(self, run: Run) -> None:
        super().__init__("Respond", run)

    def body(self) -> ComposeResult:
        cp = self.run.pending
        assert cp is not None
        yield Static(Text.assemble(("step ", "dim"), _paused_at(self.run), (" asks:", "dim")))
        yield self.reason()
        yield Label('Answer (JSON, e.g. "yes", 3 or {"title": "..."})')
        yield JsonEditor("", id="value-json")
        yield _editor_hint("respond")

    def collect(self) -> Response:
        text = self.query_one("#value-json", TextArea).text.strip()
        if not text:
            raise InvalidValue('type an answer as JSON, e.g. "yes"')
        return Response(parse_json_arg(text, "the answer"))


@dataclass(frozen=True)
class ForkRequest:
    """What the fork form collected: the step to start from, a new input (None: the parent's),
    and, for a fork inside a pattern, the ``iteration`` to start from and ``at``, that iteration
    in words (``round 3``)."""

    step: str
    input: Any
    iteration: int | None = None
    at: str | None = None


@dataclass(frozen=True)
class ForkPoint:
    """An iteration of a pattern to fork from: its ``pattern`` (name), ``iteration`` and ``at``
    (the iteration in words, see :func:`~relaypoint.views.patterns.fork_point`)."""

    pattern: str
    iteration: int
    at: str


class ForkScreen(_Form):
    """Fork the run from a step: steps before it keep their outputs, it and later ones run again.
    The step starts as the one highlighted in the step chain and can be changed here. From one of
    a pattern's calls (``point``), the fork starts at that call's iteration of the pattern: the
    form says so (``fork from round 3 of argue``) while that pattern is the chosen step. The input
    is shown as JSON and has the focus when the form opens; left as is, the parent's input is used."""

    SUBMIT_LABEL = "Fork"
    AUTO_FOCUS = "#input-json"

    def __init__(self, run: Run, step: str, point: ForkPoint | None = None) -> None:
        super().__init__("Fork", run)
        self.step = step
        self.point = point
        self.tops = [top for top, _ in tree(run.tasks)]
        self._shown = {top.name: shown_status(top, calls) for top, calls in tree(run.tasks)}

    def body(self) -> ComposeResult:
        yield Label("Start from step (earlier steps keep their outputs; it and the later ones run again)")
        yield Select([(Text.assemble(literal(s.name), "  ", fmt.step_status(self._shown[s.name])), s.name)
                      for s in self.tops], value=self.step, allow_blank=False, id="from-step")
        yield Static(self._where(), id="fork-point", classes="reason")
        yield Label("Input (JSON object; leave as is to reuse the run's input)")
        yield JsonEditor(json_text(self.run.input), id="input-json")
        yield _editor_hint("fork")

    def on_mount(self) -> None:
        self.query_one("#fork-point", Static).display = self._inside(self.step)

    def _inside(self, step: Any) -> bool:
        """True when a fork from ``step`` starts inside the pattern at :attr:`point`."""
        return self.point is not None and step == self.point.pattern

    def _where(self) -> Text:
        """What a fork from the iteration at :attr:`point` keeps and runs again, in words."""
        point = self.point
        if point is None:
            return Text()
        return Text.assemble(("fork from ", "bold"), literal(point.at, "bold"), (" of ", "bold"),
                             literal(point.pattern, "bold"), ": what came before ", literal(point.at),
                             " keeps its results (and the pattern its state there); ", literal(point.at),
                             " onward runs again")

    def on_select_changed(self, event: Select.Changed) -> None:
        self.query_one("#fork-point", Static).display = self._inside(event.value)

    def collect(self) -> ForkRequest:
        step = str(self.query_one("#from-step", Select).value)
        for earlier in self.tops:
            if earlier.name == step:
                break
            if earlier.status != StepStatus.COMPLETED:
                raise InvalidValue(f"step '{earlier.name}' has not completed, so there is no output to reuse; "
                                   f"fork from '{earlier.name}' or an earlier step")
        text = self.query_one("#input-json", TextArea).text.strip()
        if not text:
            raise InvalidValue('the fork input is empty; type a JSON object such as {"topic": "x"} ({} for none)')
        value = parse_json_arg(text, "the fork input")
        if not isinstance(value, dict):
            raise InvalidValue('the fork input must be a JSON object such as {"topic": "x"}, '
                               f"not {_json_kind(value)}")
        new_input = None if value == self.run.input else value
        if self.point is not None and self._inside(step):
            return ForkRequest(step, new_input, self.point.iteration, self.point.at)
        return ForkRequest(step, new_input)
