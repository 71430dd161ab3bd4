"""Integrations with agent frameworks, each an optional extra: ``relaypoint.integrations.pydantic_ai``
(``relaypoint[pydantic-ai]``). Nothing else in relaypoint imports them."""
