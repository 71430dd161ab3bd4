"""The relaypoint terminal console (Textual): live runs list, run detail, and the decisions.

``relaypoint console`` calls :func:`run_console`; tests drive :class:`RelaypointConsole`.
"""

from __future__ import annotations

from relaypoint.defaults import DURABILITY
from relaypoint.runtime import Runtime

from .app import RelaypointConsole

__all__ = ["RelaypointConsole", "run_console"]


def run_console(db_url: str, app_spec: str | None = None, *, readonly: bool = False,
                durability: str = DURABILITY, review: bool = False, by: str | None = None) -> None:
    """Open the console on the store at ``db_url`` (a path or a store URL) until the user quits.

    ``app_spec`` (``MODULE:ATTR``) lets the console resume runs; ``readonly`` opens the store
    without recording anything; ``durability`` applies to what the console records; ``review``
    opens it on the review queue (``relaypoint review``); ``by`` is who decides (None: the OS
    user). Raises ``StoreError`` when the store is missing or unusable and ``AppLoadError`` when
    ``app_spec`` cannot be loaded (checked before the screen is taken over).
    """
    Runtime(db_url, create=False, readonly=readonly, durability=durability).close()
    RelaypointConsole(db_url, app_spec, readonly=readonly, durability=durability, review=review, by=by).run()
