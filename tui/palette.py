"""The command palette (``ctrl+p``): its commands are generated from the action registry
(:mod:`relaypoint.tui.actions`: the run actions, the queue's keys, the general keys, on the review
screen its own), plus one status filter per run status and, for what is typed, the runs whose id
or workflow starts with it (read with the core listing, ``Runtime.list(search=...)``, off the UI
thread). A command that does not apply now shows why instead of acting, as its key does."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from rich.text import Text
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.content import Content

from relaypoint.models import RunSummary
from relaypoint.status import RUN_SYMBOLS, RunStatus
from relaypoint.views.display import literal

from . import format as fmt
from .actions import GENERAL_BINDINGS, QUEUE_BINDINGS, REVIEW_BINDINGS, RUN_ACTIONS

if TYPE_CHECKING:
    from .app import RelaypointConsole

RUN_HITS = 10
"""Most runs listed for a typed id or workflow prefix."""


@dataclass(frozen=True)
class PaletteEntry:
    """One palette command: the screen's ``action`` (``argument``: its one argument, a status
    for ``filter_status``), its ``title`` (with the key that does the same), and ``help``."""

    action: str
    title: str
    help: str
    argument: str | None = None


def palette_entries(review: bool = False) -> list[PaletteEntry]:
    """Every palette command, from the registry: the run actions, the queue's keys, the general
    keys (escape excepted: it closes the palette), a filter per run status, and with ``review``
    the review screen's keys."""
    entries = [PaletteEntry(a.name, f"{a.label} ({a.key})", a.tooltip) for a in RUN_ACTIONS]
    bindings = (*QUEUE_BINDINGS, *(REVIEW_BINDINGS if review else ()), *GENERAL_BINDINGS)
    entries += [PaletteEntry(b.action, f"{b.description} ({b.key_display or b.key})", b.tooltip or "")
                for b in bindings if b.action != "back"]
    entries.append(PaletteEntry("filter_status", "Filter: all statuses", "Show runs of every status"))
    entries += [PaletteEntry("filter_status", f"Filter: status {RUN_SYMBOLS[s]} {s.value}",
                             f"Show only the runs that are {s.value}", s.value) for s in RunStatus]
    return entries


class PaletteScreen(Protocol):
    """What a screen offers the palette: why a command does not apply now (None: it does), and
    running it."""

    def palette_why_not(self, action: str) -> str | None: ...

    def palette_run(self, action: str, argument: str | None) -> None: ...

    def open_run(self, run_id: str) -> None: ...


def run_hit_text(run: RunSummary) -> Content:
    """A run as the palette lists it: ``Open run 1a2b3c4d · workflow · ⏸ awaiting_approval``
    (stored text literal: palette text would otherwise be parsed as markup)."""
    text = Text.assemble("Open run ", literal(fmt.short_id(run.run_id)), " · ", literal(run.workflow), " · ",
                         f"{RUN_SYMBOLS[run.status]} {run.status.value}")
    return Content(text.plain)


class ConsoleCommands(Provider):
    """The console's commands (see the module's doc) for the screen the palette was opened on."""

    @property
    def target(self) -> PaletteScreen:
        """The screen the commands act on."""
        return self.screen  # type: ignore[return-value]

    def _entries(self) -> list[PaletteEntry]:
        from .screens.review import ReviewScreen  # the review screen imports the palette

        return palette_entries(review=isinstance(self.screen, ReviewScreen))

    def _run(self, entry: PaletteEntry) -> None:
        self.target.palette_run(entry.action, entry.argument)

    def _help(self, entry: PaletteEntry) -> str:
        reason = self.target.palette_why_not(entry.action)
        return entry.help if reason is None else f"not now: {reason}"

    async def discover(self) -> Hits:
        for entry in self._entries():
            yield DiscoveryHit(Content(entry.title), partial(self._run, entry), entry.title, self._help(entry))

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for entry in self._entries():
            score = matcher.match(entry.title)
            if score > 0:
                yield Hit(score, matcher.highlight(entry.title), partial(self._run, entry), entry.title,
                          self._help(entry))
        prefix = query.strip()
        if prefix and " " not in prefix:
            app: RelaypointConsole = self.app  # type: ignore[assignment]
            for run in await asyncio.to_thread(_runs, app, prefix):
                shown = run_hit_text(run)
                yield Hit(1.0, shown, partial(self.target.open_run, run.run_id), shown.plain,
                          "Show this run in the runs list")


def _runs(app: Any, prefix: str) -> list[RunSummary]:
    """The newest runs whose id or workflow starts with ``prefix`` (in a thread: it reads the store)."""
    with app.reader.runtime() as rt:
        return rt.list(search=prefix, limit=RUN_HITS)
