"""The console application: which store it shows, how it resumes runs, and its clock."""

from __future__ import annotations

from typing import ClassVar

from textual.app import App

from relaypoint.apploader import load_workflows
from relaypoint.clock import Clock, utcnow
from relaypoint.defaults import DURABILITY
from relaypoint.runtime import Runtime
from relaypoint.store.url import store_name

from .data import StoreReader
from .screens.review import ReviewScreen
from .screens.runs import RunsScreen


class RelaypointConsole(App[None]):
    """A live console on the runs of one store.

    ``db_url``: the store, a path or a store URL (it must exist). ``app_spec``: ``MODULE:ATTR`` naming the workflows,
    passed to the separate process that resumes a run (without it, resuming explains how to give
    it), and loaded here so that an edited output is checked by its step's model, its own
    validators included (raises ``AppLoadError``). ``clock``: the current time, injectable so relative times are stable in tests.
    ``readonly``: browse without recording anything (actions greyed out, the reason in the status
    line); a store this user cannot write opens read-only anyway. ``review``: open on the review
    queue (the oldest pending decision); escape goes to the runs list. ``durability``: of what the
    console records, and of the resumes it starts (see :func:`relaypoint.store.open_store`).
    ``by``: who decides, the name its approvals, rejections, answers and cancels are recorded
    under, shown first in the status line (None: the OS user, not shown).
    """

    TITLE = "relaypoint console"
    COMMANDS: ClassVar[set] = set()  # not Textual's commands (theme, screenshot, keys...): the screens give theirs
    CSS_PATH = "console.tcss"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (130, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (40, "-tall")]

    def __init__(self, db_url: str, app_spec: str | None = None, *, clock: Clock = utcnow,
                 readonly: bool = False, durability: str = DURABILITY, review: bool = False,
                 by: str | None = None) -> None:
        super().__init__()
        self.by = by
        self.review = review
        self.db_url = str(db_url)
        self.durability = durability
        self.app_spec = app_spec
        self.workflows = load_workflows(app_spec) if app_spec else []
        self.clock = clock
        self.readonly = readonly
        self.store_name = store_name(self.db_url)
        self.reader = StoreReader(self.open_runtime)

    def get_default_screen(self) -> RunsScreen:
        return RunsScreen()

    def on_mount(self) -> None:
        if self.review:
            self.push_screen(ReviewScreen())

    @property
    def runs_screen(self) -> RunsScreen:
        """The runs list and detail (the bottom of the screen stack)."""
        screen = self.screen_stack[0]
        assert isinstance(screen, RunsScreen)
        return screen

    def open_runtime(self) -> Runtime:
        """A new runtime on the store (its own connection): one per change the console
        asks for. Reads go through :attr:`reader`, the one long-lived connection."""
        return Runtime(self.db_url, self.workflows, create=False, clock=self.clock, readonly=self.readonly,
                       durability=self.durability)

    def action_command_palette(self) -> None:
        # The palette's commands are the screen's (the runs list's, the review screen's); a form or
        # help has none, so ctrl+p opens nothing over it.
        if self.screen.COMMANDS:
            super().action_command_palette()

    def on_unmount(self) -> None:
        self.reader.close()
