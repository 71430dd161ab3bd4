"""The base of the console's two screens, the runs list and the review queue: the live refresh, key
greying with its reasons, the command palette's hooks, and the decisions (their forms, the change
in a thread worker, what it did). Each screen adds what is its own: what a look reads and shows,
why an action does not apply, and the run a decision acts on."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

from textual import events, work
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.timer import Timer
from textual.worker import Worker, WorkerState, get_current_worker

from relaypoint.errors import RelaypointError
from relaypoint.models import Run
from relaypoint.runtime import Runtime
from relaypoint.views.display import clean

from .. import changes
from ..actions import RUN_ACTIONS, help_markdown
from ..data import REFRESH_SECONDS
from ..messages import ActionDone, ActionFailed, RefreshFailed
from ..palette import ConsoleCommands
from .forms import ApproveScreen, RejectScreen, RespondScreen
from .help import HelpScreen

if TYPE_CHECKING:
    from ..app import RelaypointConsole

LiveRead = Callable[[Runtime, int], Message | None]
"""What one look reads, run in a thread worker on the console's reader (its runtime, and the
reader's connection number, the first part of a :data:`~relaypoint.tui.data.Version`): the message
to post, or None when there is nothing to show (the store did not change)."""

LIVE_GROUP = "live"
FINISHED = (WorkerState.SUCCESS, WorkerState.ERROR, WorkerState.CANCELLED)
RUN_ACTION = {a.name: a for a in RUN_ACTIONS}


class BaseScreen(Screen[None]):
    """A screen on the store that follows changes made elsewhere and offers the decisions.

    Live refresh: a chained one-shot timer, so looks never overlap; a look is a read in a thread
    worker (:meth:`look` says what), and none is made while anything is open over the screen.
    Keys: the actions of :attr:`GREYABLE` are greyed out in the footer while :meth:`why_not`
    gives a reason, pressed anyway they say it, and the palette shows it. Decisions: a form, then
    the change in a thread worker; while it is recorded :attr:`deciding` is true, and what it did
    is said and read again (:meth:`changed`)."""

    COMMANDS = {ConsoleCommands}
    GREYABLE: ClassVar[Mapping[str, str]] = {}
    """Keys whose action can be greyed out, and the action (for the reason given when pressed)."""
    app: RelaypointConsole
    readonly_reason: str | None
    """Why the store is read-only as last read (None: writable)."""

    def __init__(self) -> None:
        super().__init__()
        self.deciding = False  # a decision made here is being recorded
        self.generation = 0  # moves on with every read or decision that supersedes a look under way
        self._timer: Timer | None = None
        self._live: Worker[None] | None = None
        self._live_again = False

    # ---- what each screen says ----------------------------------------------------------------

    def look(self) -> LiveRead | None:
        """On the UI thread, when the screen is on top: what the next look reads (None: not now,
        look again later)."""
        raise NotImplementedError

    def why_not(self, action: str) -> str | None:
        """Why ``action`` does not apply now, in one line; None when it does."""
        raise NotImplementedError

    @property
    def shown_run(self) -> Run | None:
        """The run the decisions act on (None: none shown)."""
        raise NotImplementedError

    def approve_form(self, run: Run) -> ApproveScreen:
        """The approve form for ``run``."""
        raise NotImplementedError

    def changed(self) -> None:
        """A change asked for here went through or was refused: read again."""
        raise NotImplementedError

    # ---- live refresh -------------------------------------------------------------------------

    def refresh_now(self) -> None:
        """Look for changes as soon as no look is in flight; with something open over the screen,
        or when :meth:`look` says not now, look again in :data:`REFRESH_SECONDS`."""
        if self._live is not None:
            self._live_again = True
            return
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        read = self.look() if self.app.screen is self else None
        if read is None:
            self.schedule()
        else:
            self._live = self._read_live(read)

    def schedule(self) -> None:
        """Look again in :data:`REFRESH_SECONDS`."""
        self._timer = self.set_timer(REFRESH_SECONDS, self.refresh_now)

    def supersede(self) -> None:
        """Make the answer of a look under way stale (see :meth:`is_stale`)."""
        self.generation += 1

    def cancel_look(self) -> None:
        """Cancel the look under way, if any: its answer is not posted (the next is scheduled)."""
        self.workers.cancel_group(self, LIVE_GROUP)

    def is_stale(self, generation: int) -> bool:
        """True when a look made at ``generation`` was superseded since, a decision made here is
        being recorded, or something is open over the screen: its answer is not shown."""
        return generation != self.generation or self.deciding or self.app.screen is not self

    @work(thread=True, exclusive=True, exit_on_error=False, group=LIVE_GROUP)
    def _read_live(self, read: LiveRead) -> None:
        reader = self.app.reader
        try:
            with reader.runtime() as rt:
                message = read(rt, reader.connection)
        except RelaypointError as e:  # shown by the screen; the next look retries
            self.post_message(RefreshFailed(str(e)))
            return
        if message is not None and not get_current_worker().is_cancelled:
            self.post_message(message)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR:  # a read failed (a change refused is ActionFailed)
            error = event.worker.error
            text = str(error) if isinstance(error, RelaypointError) else f"internal error: {error!r}"
            self.say(text, severity="error")
            if event.worker.group == "change":
                self.deciding = False
                self.changed()
        if event.worker is self._live and event.state in FINISHED:
            self._live = None
            if self._live_again:
                self._live_again = False
                self.call_later(self.refresh_now)
            else:
                self.schedule()

    # ---- keys and the palette -----------------------------------------------------------------

    def say(self, text: str, **kwargs: Any) -> None:
        """Notify ``text`` (stored text in it made inert, never parsed as markup)."""
        self.notify(clean(text), markup=False, **kwargs)

    def say_why_not(self, action: str, reason: str) -> None:
        """Say in one line why ``action`` does not apply."""
        self.say(f"{action.replace('_', ' ')}: {reason}", severity="warning")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Grey out (None) the actions of :attr:`GREYABLE` that do not apply now (see :meth:`why_not`)."""
        if action in self.GREYABLE.values():
            return True if self.why_not(action) is None else None
        return True

    def on_key(self, event: events.Key) -> None:
        """A key whose action is greyed out: say in one line why it does not apply."""
        action = self.GREYABLE.get(event.key)
        if action is not None and (reason := self.why_not(action)) is not None:
            event.stop()
            self.say_why_not(action, reason)

    def palette_why_not(self, action: str) -> str | None:
        """Why the palette's ``action`` does not apply now (as its key would say); None when it does."""
        return self.why_not(action) if action in self.GREYABLE.values() else None

    def palette_run(self, action: str, argument: str | None) -> None:
        """Run the palette's ``action``, or say in one line why it does not apply."""
        if (reason := self.palette_why_not(action)) is not None:
            self.say_why_not(action, reason)
        else:
            self.call_later(getattr(self, f"action_{action}"))

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen(help_markdown(), readonly_reason=self.readonly_reason))

    def action_quit(self) -> None:
        self.app.exit()

    # ---- decisions ----------------------------------------------------------------------------

    def refusal(self, action: str, run: Run) -> str | None:
        """Why run action ``action`` cannot act on ``run`` now: a read-only store, resuming without
        the workflows, else the registry's reason (the runtime's rules); None when it can."""
        if self.readonly_reason:
            return f"the store is read-only: {self.readonly_reason}"
        if action == "resume" and not self.app.app_spec:
            return ("resuming needs the workflow definitions: start the console with "
                    "`relaypoint console --app MODULE:ATTR`")
        return RUN_ACTION[action].why_not(run)

    def actionable(self, action: str) -> Run | None:
        """The run shown, if ``action`` applies to it now."""
        run = self.shown_run
        return run if run is not None and self.why_not(action) is None else None

    def decide(self, form: ModalScreen[Any], change: Callable[[Any, Runtime], str]) -> None:
        """Open ``form``; when it returns a result (not closed, not declined), make the change."""

        def done(result: Any) -> None:
            if result is not None and result is not False:
                self.deciding = True  # until it is recorded, a look would call it decided elsewhere
                self.supersede()
                self._change(partial(change, result))

        # A look under way was read before the form, for the decision as it was then: its answer,
        # landing as the form closes, would call a refusal's decision "decided elsewhere".
        self.supersede()
        self.app.push_screen(form, done)

    def action_approve(self) -> None:
        if (run := self.actionable("approve")) is not None:
            self.decide(self.approve_form(run),
                        partial(changes.approve, run, app_spec=self.app.app_spec, by=self.app.by))

    def action_reject(self) -> None:
        if (run := self.actionable("reject")) is not None:
            self.decide(RejectScreen(run), partial(changes.reject, run, by=self.app.by))

    def action_respond(self) -> None:
        if (run := self.actionable("respond")) is not None:
            self.decide(RespondScreen(run), partial(changes.respond, run, app_spec=self.app.app_spec, by=self.app.by))

    @work(thread=True, exit_on_error=False, group="change")
    def _change(self, call: Callable[[Runtime], str]) -> None:
        """Ask the runtime for a change (on a runtime of its own); ``call`` makes it and says what it did."""
        try:
            with self.app.open_runtime() as rt:
                summary = call(rt)
        except RelaypointError as e:
            self.post_message(ActionFailed(str(e)))
            return
        self.post_message(ActionDone(summary))

    def on_action_done(self, message: ActionDone) -> None:
        self.deciding = False
        self.say(message.summary)
        self.changed()

    def on_action_failed(self, message: ActionFailed) -> None:
        self.deciding = False
        self.say(message.error, severity="error")
        self.changed()
