"""Modal screens: the decision forms (approve, reject, respond, fork), the cancel confirmation
and help. Each form checks only that what was typed can be read (JSON parses, a reason is given);
the runtime decides whether the decision is allowed, and the screen reports what it says."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Markdown, Select, Static, TextArea

from relaypoint.encoding import parse_json_arg
from relaypoint.errors import InvalidValue
from relaypoint.models import Run

from . import format as fmt
from relaypoint.display import clean, json_text, literal


def _run_line(run: Run) -> Text:
    return Text.assemble(("run ", "dim"), literal(fmt.short_id(run.run_id)), ("  workflow ", "dim"),
                         literal(run.workflow, "bold"), "  ", fmt.run_status(run.status))


class _Form(ModalScreen[Any]):
    """A dialog with a title, a body, an error line and Submit / Cancel buttons.
    ``ctrl+s`` submits from anywhere in it; ``escape`` closes it without doing anything."""

    BINDINGS = [
        Binding("escape", "dismiss_form", "Close", id="close"),
        Binding("ctrl+s", "submit", "Submit", id="submit", priority=True),
    ]
    SUBMIT_LABEL = "Submit"
    SUBMIT_VARIANT = "primary"

    def __init__(self, title: str, run: Run) -> None:
        super().__init__()
        self.form_title = title
        self.run = run

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog") as dialog:
            dialog.border_title = self.form_title
            yield Static(_run_line(self.run), classes="run-line")
            yield from self.body()
            yield Label("", classes="form-error")
            with Horizontal(classes="buttons"):
                yield Button(f"{self.SUBMIT_LABEL} (ctrl+s)", variant=self.SUBMIT_VARIANT, id="submit")
                yield Button("Cancel (esc)", id="close")

    def body(self) -> ComposeResult:
        """The form's fields."""
        yield from ()

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
        self.dismiss(result)

    def collect(self) -> Any:
        """Read the fields; raise ``InvalidValue`` to keep the form open with a message."""
        raise NotImplementedError

    def show_error(self, message: str) -> None:
        """Show a one-line problem under the fields (the form stays open)."""
        self.query_one(".form-error", Label).update(Text(clean(message), style="bold red"))


def _edited_json(area: TextArea, original: Any, what: str) -> Any:
    """None when the text area is empty or still says ``original``; else the parsed value."""
    text = area.text.strip()
    if not text:
        return None
    value = parse_json_arg(text, what)
    return None if value == original else value


@dataclass(frozen=True)
class Approval:
    """What the approve form collected: a comment and an edited output (None: unchanged)."""

    comment: str | None
    output: Any


class ApproveScreen(_Form):
    """Approve the run's pending checkpoint: an optional comment, and the gated step's output as
    JSON, editable (left as shown, the output is kept)."""

    SUBMIT_LABEL = "Approve"
    SUBMIT_VARIANT = "success"

    def __init__(self, run: Run, output: Any, recorded: bool) -> None:
        super().__init__("Approve", run)
        self.output = output
        self.recorded = recorded

    def body(self) -> ComposeResult:
        cp = self.run.pending
        assert cp is not None
        yield Static(Text.assemble(("step ", "dim"), literal(cp.step or "?", "bold"),
                                   ("  checkpoint ", "dim"), str(cp.checkpoint_id)))
        yield Static(literal(cp.reason, multiline=True), classes="reason")
        yield Label("Comment (optional)")
        yield Input(placeholder="why you approve", id="comment")
        yield Label("Output (JSON; edit to replace the step's output, leave as is to keep it)")
        yield TextArea(json_text(self.output) if self.recorded else "", id="output-json", soft_wrap=True,
                       placeholder="no output recorded; type JSON to record one")

    def collect(self) -> Approval:
        comment = self.query_one("#comment", Input).value.strip() or None
        area = self.query_one("#output-json", TextArea)
        original = self.output if self.recorded else None
        return Approval(comment, _edited_json(area, original, "the edited output"))


class RejectScreen(_Form):
    """Reject the run's pending checkpoint; a reason is required (the run ends ``rejected``)."""

    SUBMIT_LABEL = "Reject"
    SUBMIT_VARIANT = "error"

    def __init__(self, run: Run) -> None:
        super().__init__("Reject", run)

    def body(self) -> ComposeResult:
        cp = self.run.pending
        assert cp is not None
        yield Static(literal(cp.reason, multiline=True), classes="reason")
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
        yield Static(Text.assemble(("step ", "dim"), literal(cp.step or "?", "bold"), (" asks:", "dim")))
        yield Static(literal(cp.reason, multiline=True), classes="reason")
        yield Label('Answer (JSON, e.g. "yes", 3 or {"title": "..."})')
        yield TextArea("", id="value-json", soft_wrap=True)

    def collect(self) -> Response:
        text = self.query_one("#value-json", TextArea).text.strip()
        if not text:
            raise InvalidValue('type an answer as JSON, e.g. "yes"')
        return Response(parse_json_arg(text, "the answer"))


@dataclass(frozen=True)
class ForkRequest:
    """What the fork form collected: the step to start from and a new input (None: the parent's)."""

    step: str
    input: Any


class ForkScreen(_Form):
    """Fork the run from a step: steps before it keep their outputs, it and later ones run again.
    The input is shown as JSON; left as is, the parent's input is used."""

    SUBMIT_LABEL = "Fork"

    def __init__(self, run: Run, step: str) -> None:
        super().__init__("Fork", run)
        self.step = step

    def body(self) -> ComposeResult:
        yield Label("Start from step")
        yield Select([(literal(s.name), s.name) for s in self.run.tasks], value=self.step, allow_blank=False,
                     id="from-step")
        yield Label("Input (JSON object; leave as is to reuse the run's input)")
        yield TextArea(json_text(self.run.input), id="input-json", soft_wrap=True)

    def collect(self) -> ForkRequest:
        step = self.query_one("#from-step", Select).value
        area = self.query_one("#input-json", TextArea)
        return ForkRequest(str(step), _edited_json(area, self.run.input, "the fork input"))


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question: ``y`` confirms, ``n`` or ``escape`` declines."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes", id="yes"),
        Binding("n", "answer(False)", "No", id="no"),
        Binding("escape", "answer(False)", "No", show=False, id="close"),
    ]

    def __init__(self, title: str, question: Text) -> None:
        super().__init__()
        self.confirm_title = title
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog confirm") as dialog:
            dialog.border_title = self.confirm_title
            yield Static(self.question)
            with Horizontal(classes="buttons"):
                yield Button("Yes (y)", variant="error", id="yes")
                yield Button("No (n)", id="no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class HelpScreen(ModalScreen[None]):
    """The keys, rendered from Markdown built out of the key registry."""

    BINDINGS = [Binding("escape,q,question_mark", "close", "Close", id="close")]

    def __init__(self, markdown: str) -> None:
        super().__init__()
        self.markdown = markdown

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog help") as dialog:
            dialog.border_title = "Help"
            yield Markdown(self.markdown)

    def action_close(self) -> None:
        self.dismiss(None)
