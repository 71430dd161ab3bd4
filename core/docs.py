"""Where the documentation explains each command: the one base address of the documentation site
and the page of each CLI command, so ``relaypoint --help`` and every command's help end with a link.

The site is built from ``docs/`` with MkDocs (``mkdocs build --strict``; ``mkdocs serve`` shows it at
``http://127.0.0.1:8000/``). :data:`DOCS_URL` is where it is published; ``RELAYPOINT_DOCS`` points the
links elsewhere (a local ``mkdocs serve``, a mirror), as ``PIP_INDEX_URL`` does for pip's index.
"""

from __future__ import annotations

import os

DOCS_URL = "https://relaypoint.readthedocs.io/en/latest/"
"""The documentation site's base address; pages are its paths (MkDocs' directory URLs)."""

PAGES = {
    None: "",  # `relaypoint --help`: the home page
    "console": "how-to/console/",
    "review": "how-to/console/#the-review-queue",
    "serve": "how-to/browser/",
    "demo": "tutorial/",
    "start": "concepts/workflows/",
    "list": "reference/cli/",
    "show": "reference/cli/",
    "resume": "concepts/ownership/",
    "approve": "concepts/pauses/",
    "reject": "concepts/pauses/",
    "respond": "concepts/pauses/",
    "fork": "concepts/forks/",
    "cancel": "concepts/pauses/",
    "events": "reference/cli/",
    "announce": "how-to/worker/#telling-the-reviewer-worker-on-pause",
    "worker": "how-to/worker/",
    "mcp": "how-to/mcp/",
    "delete": "reference/cli/",
    "prune": "reference/cli/",
    "migrate": "how-to/postgres/",
    "copy": "how-to/postgres/#copying-a-store-relaypoint-copy",
}
"""The page (path under :data:`DOCS_URL`, with its anchor) that explains each command; ``None`` is
the command line as a whole. A test checks every command has one and that each page and anchor
exists in ``docs/``."""


def docs_url(page: str = "") -> str:
    """The address of ``page`` (a path under the site, e.g. ``how-to/worker/``)."""
    base = os.environ.get("RELAYPOINT_DOCS") or DOCS_URL
    return base.rstrip("/") + "/" + page


def command_docs(command: str | None) -> str:
    """The address of the page that explains ``command`` (``None``: the command line)."""
    return docs_url(PAGES[command])
