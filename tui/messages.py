"""Messages posted by the console's thread workers to its screen; the handlers own every change."""

from __future__ import annotations

import subprocess
from typing import Any

from textual.message import Message

from .data import RefreshRead, ReviewRead, RunDetail, RunsPage, StepOutput, Upstream, Version


class Refreshed(Message):
    """A live-refresh read (nothing but the store's version when it did not change)."""

    def __init__(self, read: RefreshRead) -> None:
        super().__init__()
        self.read = read


class RefreshFailed(Message):
    """A live-refresh read failed (for example the store stayed busy); the next one will retry."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class PageLoaded(Message):
    """A page of the runs list the table asked for, read at store version ``version``."""

    def __init__(self, page: RunsPage, version: Version) -> None:
        super().__init__()
        self.page = page
        self.version = version


class DetailLoaded(Message):
    """The selected run, read after the selection changed."""

    def __init__(self, detail: RunDetail) -> None:
        super().__init__()
        self.detail = detail


class OutputLoaded(Message):
    """One step's output."""

    def __init__(self, output: StepOutput) -> None:
        super().__init__()
        self.output = output


class PagerReady(Message):
    """The whole of a step's output, formatted for ``$PAGER`` (UTF-8, terminal controls made visible)."""

    def __init__(self, output: StepOutput, text: bytes) -> None:
        super().__init__()
        self.output = output
        self.text = text


class ApprovalReady(Message):
    """The gated step's output was read (None: the step is not in the chain) for the approve form
    that opened without it."""

    def __init__(self, run_id: str, output: StepOutput | None) -> None:
        super().__init__()
        self.run_id = run_id
        self.output = output


class ActionDone(Message):
    """A change went through the runtime; ``summary`` says what it did."""

    def __init__(self, summary: str) -> None:
        super().__init__()
        self.summary = summary


class ActionFailed(Message):
    """The runtime refused a change or the store failed; ``error`` is its one-line message."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class ResumeStarted(Message):
    """A resume process was started for a run; its output is appended to the resume log from byte
    ``log_from`` on. ``allow_drift``: it was started with ``--allow-drift``."""

    def __init__(self, run_id: str, process: subprocess.Popen[Any], log_from: int, allow_drift: bool) -> None:
        super().__init__()
        self.run_id = run_id
        self.process = process
        self.log_from = log_from
        self.allow_drift = allow_drift


class ReviewLoaded(Message):
    """The review queue and the pending decision it picked (none: nothing to review), read at
    store version ``version``. ``live``: read by the review screen's live refresh, because the
    store changed, when the screen was at ``generation`` (see :class:`~relaypoint.tui.review.ReviewScreen`)
    and showed checkpoint ``shown``; None: read because the reviewer asked."""

    def __init__(self, read: ReviewRead, version: Version, live: int | None = None,
                 shown: int | None = None) -> None:
        super().__init__()
        self.read = read
        self.version = version
        self.live = live
        self.shown = shown


class UpstreamLoaded(Message):
    """The outputs a pending decision's step was built from."""

    def __init__(self, upstream: Upstream) -> None:
        super().__init__()
        self.upstream = upstream
