"""The relaypoint terminal console (Textual): live runs list, run detail, and the decisions.

``relaypoint console`` calls :func:`run_console`; tests drive :class:`RelaypointConsole`.
"""

from __future__ import annotations

from relaypoint.runtime import Runtime

from .app import RelaypointConsole

__all__ = ["RelaypointConsole", "run_console"]


def run_console(db_path: str, app_spec: str | None = None, *, readonly: bool = False) -> None:
    """Open the console on the store at ``db_path`` until the user quits.

    ``app_spec`` (``MODULE:ATTR``) lets the console resume runs; ``readonly`` opens the store
    without recording anything. Raises ``StoreError`` when the store is missing or unusable
    (checked before the screen is taken over).
    """
    Runtime(db_path, create=False, readonly=readonly).close()
    RelaypointConsole(db_path, app_spec, readonly=readonly).run()
