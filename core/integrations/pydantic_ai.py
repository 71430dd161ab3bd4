"""A PydanticAI agent whose model requests and tool calls are recorded calls of the relaypoint step
that runs it (``relaypoint[pydantic-ai]``)::

    from relaypoint.integrations.pydantic_ai import RelaypointAgent

    agent = RelaypointAgent(Agent(model, tools=[web_search]))   # once, at import time

    @wf.step
    async def draft(ctx):
        return (await agent.run("Draft a post")).output

Each model request is a recorded call of kind ``model`` named "model request", each tool call one
of kind ``tool`` named "tool <name>": a step run again (after a kill, a retry, an answer to
``request_input``) gets their recorded results back and sends only the requests it had not finished.

Built on Pydantic AI's public surface for durable engines (``pydantic_ai.durable_exec``): a
:class:`RelaypointDurability` capability whose operation backend runs each durable unit as a
recorded call, with values journaled as JSON (``JSON_CODEC``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from pydantic_ai.agent import AbstractAgent, AgentRun, WrapperAgent
from pydantic_ai.durable_exec import (
    JSON_CODEC,
    BaseDurabilityCapability,
    DurabilityEngineSpec,
    DurableOperationBackend,
    DurableOperationId,
    JournalCallableOperationBackend,
    ModelRequestId,
    RoleBasedOperationConfig,
    ToolsetCallToolId,
    ToolsetValidateToolArgumentsId,
)
from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelResponse

from .. import recorded
from ..status import CallKind
from . import OutsideStep, inside_step

__all__ = ["OutsideStep", "RelaypointAgent", "RelaypointDurability"]


def _new_messages(messages: list[Any]) -> Any:
    """The messages a request adds to the conversation: those after its last response (the whole
    first request; then the tool returns and retries), as JSON, so a record holds no history twice."""
    last = max((i for i, m in enumerate(messages) if isinstance(m, ModelResponse)), default=-1)
    return ModelMessagesTypeAdapter.dump_python(messages[last + 1:], mode="json")


def _model_result(payload: Any, cache_key: tuple[object, ...]) -> recorded.Result:
    """A model request's record: ``payload`` (the JSON of its ``ModelResponse``) with the messages
    it sent (``cache_key``: Pydantic AI's projection of the request, messages second) and its usage."""
    usage = payload["usage"]
    return recorded.Result(payload, detail=_new_messages(list(cache_key[1])), model=payload.get("model_name"),
                           requests=1, input_tokens=usage.get("input_tokens"), output_tokens=usage.get("output_tokens"))


class _RecordedBackend(JournalCallableOperationBackend[None]):
    """Runs each durable unit of agent ``agent_name`` as a recorded call of the step running here: a
    model request (kind ``model``, named "model request", with its new messages and usage), a tool
    call (kind ``tool``, "tool <name>", with its arguments), any other unit (kind ``call``, under
    Pydantic AI's journal name). Argument validation, which only reads the recorded response, runs
    as it is. The names are persisted: a step run again matches its calls by them."""

    def __init__(self, agent_name: str) -> None:
        super().__init__(agent_name=agent_name, config=RoleBasedOperationConfig(model=None, event=None,
                                                                                 capability=None, tool=None))

    async def execute(self, *, operation_id: DurableOperationId, name: str, body: Callable[[], Awaitable[object]],
                      cache_key: tuple[object, ...], config: None) -> object:
        """``body()`` recorded as a call (a model request's payload is the JSON of its
        ``ModelResponse``); run again, the recorded payload."""
        if isinstance(operation_id, ToolsetValidateToolArgumentsId):
            return await body()
        if isinstance(operation_id, ModelRequestId):
            number = 1 + sum(isinstance(m, ModelResponse) for m in cache_key[1])  # of this agent run

            async def request() -> recorded.Result:
                recorded.current().progress(f"model request {number}")  # what the console shows while it runs
                return _model_result(await body(), cache_key)
            return await recorded.acall_as(CallKind.MODEL, "model request", request)
        if isinstance(operation_id, ToolsetCallToolId):
            tool_name, args = cache_key[0], JSON_CODEC.dump(Any, cache_key[1])

            async def tool() -> recorded.Result:
                recorded.current().progress(f"tool {tool_name}")
                return recorded.Result(await body(), detail={"tool": tool_name, "args": args})
            return await recorded.acall_as(CallKind.TOOL, f"tool {tool_name}", tool)
        return await recorded.acall_as(CallKind.CALL, name, body)


class RelaypointDurability(BaseDurabilityCapability[Any]):
    """The capability that makes an agent's model requests and tool calls recorded calls of the
    relaypoint step running it (in a step: :func:`relaypoint.recorded.current`); outside a step the
    agent runs as it is (:class:`RelaypointAgent` refuses to). Attach it as
    ``Agent(..., capabilities=[RelaypointDurability()])`` or wrap the agent in
    :class:`RelaypointAgent`."""

    engine_spec = DurabilityEngineSpec(
        engine_name="relaypoint",
        durable_unit_noun="recorded call",
        durable_container_noun="step",
        codec=JSON_CODEC,  # a recorded call's value is JSON
        # Tools given at run time would bypass the wrapping done when the agent is wrapped.
        unsupported_runtime_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        wrapped_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        toolset_lifecycles={"function": "enter-always", "mcp": "enter-in-durable-unit", "dynamic": "enter-never"},
        journal_discovery=False,  # listing tools reads, sends nothing: not worth a record on every request
        sequential_tools_in_durable_context=False,  # positions are taken in call order (recorded.Recorder)
        tool_config_key="relaypoint",
    )

    @property
    def in_durable_context(self) -> bool:
        """Whether a relaypoint step's execution is running here."""
        return inside_step()

    def get_durable_operation_backend(self) -> DurableOperationBackend[Any]:
        """The backend that records each durable unit as a call of the running step."""
        return _RecordedBackend(self.name)


class RelaypointAgent(WrapperAgent[Any, Any]):
    """``agent`` (a ``pydantic_ai.Agent``) whose runs, inside a relaypoint step, record every model
    request and tool call as a call of that step (see the module). ``run``, ``run_sync`` (from a
    sync step) and ``iter`` work as the agent's; outside a step they raise :class:`OutsideStep`.
    Wrap once, at import time: the agent's toolsets are wrapped then. ``name`` names the agent
    (default: the agent's name, else "agent")."""

    def __init__(self, agent: AbstractAgent[Any, Any], *, name: str | None = None) -> None:
        self._durability = RelaypointDurability(name=name or agent.name or "agent")
        super().__init__(agent)
        self._durable = self._durability.for_agent(agent)

    @asynccontextmanager
    async def iter(self, *args: Any, capabilities: Any = None, **kwargs: Any) -> AsyncIterator[AgentRun[Any, Any]]:
        """As ``Agent.iter``, inside a relaypoint step (else :class:`OutsideStep`)."""
        if not inside_step():
            raise OutsideStep(f"agent '{self._durability.name}' (RelaypointAgent) runs only inside a relaypoint step: "
                              "call it from the function of a step that a Runtime executes")
        async with self.wrapped.iter(*args, capabilities=[self._durable, *(capabilities or [])], **kwargs) as run:
            yield run
