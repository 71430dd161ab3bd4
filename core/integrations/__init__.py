"""Integrations with agent frameworks, each an optional extra: ``relaypoint.integrations.pydantic_ai``
(``relaypoint[pydantic-ai]``) and ``relaypoint.integrations.openai_agents``
(``relaypoint[openai-agents]``). Nothing else in relaypoint imports them."""

from __future__ import annotations

from .. import recorded
from ..errors import RelaypointError

__all__ = ["OutsideStep", "inside_step"]


class OutsideStep(RelaypointError):
    """An integration's agent was run outside a relaypoint step, where nothing records its calls."""


def inside_step() -> bool:
    """Whether a relaypoint step's execution is running here (:func:`relaypoint.recorded.current`)."""
    try:
        recorded.current()
    except TypeError:
        return False
    return True
