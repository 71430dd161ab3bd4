"""Multi-agent patterns, each a node of a workflow driven at every agent call: :class:`Loop`,
:class:`Debate`, :class:`Vote`, :class:`Supervisor`, :class:`Planner`, :class:`Parallel`, :class:`Map`,
and :func:`human`, a person
as an agent, and :func:`typed`, an agent whose output is a pydantic model. Register them with the :class:`relaypoint.Workflow` methods of the same names."""

from .base import Human, Pattern, Typed, human, typed
from .debate import Debate
from .loop import Loop
from .map import Map
from .parallel import Parallel
from .planner import Planner
from .supervisor import Supervisor
from .vote import Vote, majority

NOUNS = {p.kind: p.noun for p in (Debate, Loop, Map, Parallel, Planner, Supervisor, Vote)}
"""What one iteration of each pattern kind is called: ``{"debate": "round", ...}``."""

__all__ = ["NOUNS", "Debate", "Human", "Loop", "Map", "Parallel", "Pattern", "Planner", "Supervisor", "Typed", "Vote", "human", "majority",
           "typed"]
