"""Messages posted by the console's thread workers to its screens; the handlers own every change."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from typing import Any

from textual.message import Message

from .data import RefreshRead, ReviewRead, RunDetail, RunsPage, StepOutput, Upstream, Version


@dataclass
class Refreshed(Message):
    """A live-refresh read (nothing but the store's version when it did not change)."""

    read: RefreshRead


@dataclass
class RefreshFailed(Message):
    """A live-refresh read failed (for example the store stayed busy); the next one will retry."""

    error: str


@dataclass
class PageLoaded(Message):
    """A page of the runs list the table asked for, read at store version ``version``."""

    page: RunsPage
    version: Version


@dataclass
class DetailLoaded(Message):
    """The selected run, read after the selection changed."""

    detail: RunDetail


@dataclass
class OutputLoaded(Message):
    """One step's output."""

    output: StepOutput


@dataclass
class PagerReady(Message):
    """The whole of a step's output, formatted for ``$PAGER`` (UTF-8, terminal controls made visible)."""

    output: StepOutput
    text: bytes


@dataclass
class ApprovalReady(Message):
    """The gated step's output was read (None: the step is not in the chain) for the approve form
    that opened without it."""

    run_id: str
    output: StepOutput | None


@dataclass
class ActionDone(Message):
    """A change went through the runtime; ``summary`` says what it did."""

    summary: str


@dataclass
class ActionFailed(Message):
    """The runtime refused a change or the store failed; ``error`` is its one-line message."""

    error: str


@dataclass
class ResumeStarted(Message):
    """A resume process was started for a run; its output is appended to the resume log from byte
    ``log_from`` on. ``allow_drift``: it was started with ``--allow-drift``."""

    run_id: str
    process: subprocess.Popen[Any]
    log_from: int
    allow_drift: bool


@dataclass
class ReviewLoaded(Message):
    """The review queue and the pending decision it picked (none: nothing to review), read at
    store version ``version``. ``live``: read by the review screen's live refresh, because the
    store changed, when the screen was at generation ``live`` (see
    :meth:`~relaypoint.tui.screens.base.BaseScreen.is_stale`) and showed checkpoint ``shown``;
    None: read because the reviewer asked."""

    read: ReviewRead
    version: Version
    live: int | None = None
    shown: int | None = None


@dataclass
class UpstreamLoaded(Message):
    """The outputs a pending decision's step was built from."""

    upstream: Upstream
