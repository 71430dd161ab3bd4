"""An OpenAI Agents SDK agent whose model requests and tool calls are recorded calls of the relaypoint
step that runs it (``relaypoint[openai-agents]``)::

    from relaypoint.integrations.openai_agents import RelaypointRunner

    @wf.step
    async def draft(ctx):
        return (await RelaypointRunner.run(agent, "Draft a post")).final_output

``RelaypointRunner`` takes ``agents.Runner``'s arguments, as DBOS's ``DBOSRunner`` does. Each model
request is a recorded call of kind ``model`` named "model request", each function tool call one of
kind ``tool`` named "tool <name>": a step run again (after a kill, a retry, an answer to
``request_input``) gets their recorded results back and sends only the requests it had not finished.

Built on the SDK's public interface: the run's ``ModelProvider`` and every ``Model`` an agent holds
are wrapped so that ``get_response`` and ``stream_response`` are recorded calls (the value: the
``ModelResponse`` as JSON, validated back on return), and every ``FunctionTool``'s
``on_invoke_tool`` is; agents reached by handoffs are wrapped alike, each once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import typing
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from agents import (Agent, FunctionTool, Handoff, Model, ModelProvider, ModelResponse, ModelSettings, RunConfig,
                    Runner, RunResult, RunResultStreaming, Usage)
from agents.tool import ApplyPatchTool, ComputerTool, CustomTool, LocalShellTool, ShellTool
from openai.types.responses import (Response, ResponseCompletedEvent, ResponseOutputItem, ResponseOutputItemDoneEvent,
                                    ResponseUsage)
from pydantic import TypeAdapter
from pydantic_core import to_jsonable_python

from .. import recorded
from ..errors import RelaypointError
from ..status import CallKind
from . import OutsideStep, inside_step

__all__ = ["OutsideStep", "RelaypointRunner", "Unsupported"]

_RESPONSE = TypeAdapter(ModelResponse)

# The item types only a model produces: of the conversation's item types, those that are not a
# message (also the prompt's type), a tool's output or a person's answer to an approval request.
_MODEL_ITEM_TYPES = frozenset(
    t for item in typing.get_args(typing.get_args(ResponseOutputItem)[0])
    for t in typing.get_args(item.model_fields["type"].annotation)
    if t not in ("message", "mcp_approval_response") and not t.endswith("_output"))


_END = object()  # the end of a streamed request's events


class Unsupported(RelaypointError):
    """An agent given to :class:`RelaypointRunner` uses something whose calls cannot be recorded."""


def _dump(response: ModelResponse) -> Any:
    """``response`` as JSON; fields never set stay out, so it validates back equal (and is sent
    back to the model as it came)."""
    return _RESPONSE.dump_python(response, mode="json", by_alias=True, exclude_unset=True)


def _new_items(input: str | list[Any]) -> Any:
    """What a request adds to the conversation: the items after the last one a model produced (the
    whole first input; then the tool outputs), so a record holds no history twice."""
    if isinstance(input, str):
        return input
    items = to_jsonable_python(input)
    produced = [i for i, item in enumerate(items) if isinstance(item, dict) and (
        item.get("role") == "assistant" or item.get("type") in _MODEL_ITEM_TYPES)]
    return items[produced[-1] + 1:] if produced else items


def _refuse_runner_retries(settings: ModelSettings) -> None:
    # A retry the runner makes is another call to the model, so another recorded call: run again,
    # the failed one's position would be sent again and the retry's record read as the next request.
    retry = settings.retry
    if retry is not None and not (retry.max_retries is not None and retry.max_retries <= 0):
        raise Unsupported("runner-managed model retries (ModelSettings.retry) cannot be recorded in a relaypoint step: "
                          "remove them; a failed model request fails the step, which @wf.step(retries=...) runs again")


class _Run:
    """One :class:`RelaypointRunner` run: the model requests it has made, to number them."""

    def __init__(self) -> None:
        self.requests = 0

    def next_request(self) -> int:
        self.requests += 1
        return self.requests


class _RecordedModel(Model):
    """``model`` (named ``name``, the model's name when known) whose requests are recorded calls of
    the step running them."""

    def __init__(self, model: Model, name: str | None, run: _Run) -> None:
        self._model, self._name, self._run = model, name, run

    def _result(self, payload: Any, instructions: str | None, input: str | list[Any]) -> recorded.Result:
        usage = payload["usage"]
        return recorded.Result(payload, detail={"instructions": instructions, "input": _new_items(input)},
                               model=self._name, requests=1, input_tokens=usage.get("input_tokens"),
                               output_tokens=usage.get("output_tokens"))

    async def get_response(self, system_instructions: str | None, input: str | list[Any], model_settings: ModelSettings,
                           *args: Any, **kwargs: Any) -> ModelResponse:
        """The model's response, recorded; run again, the recorded response."""
        _refuse_runner_retries(model_settings)
        number = self._run.next_request()

        async def request() -> recorded.Result:
            recorded.current().progress(f"model request {number}")  # what the console shows while it runs
            response = await self._model.get_response(system_instructions, input, model_settings, *args, **kwargs)
            return self._result(_dump(response), system_instructions, input)
        return _RESPONSE.validate_python(await recorded.acall_as(CallKind.MODEL, "model request", request))

    async def stream_response(self, system_instructions: str | None, input: str | list[Any],
                              model_settings: ModelSettings, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        """The model's events as they come, its response recorded when it completes (as
        :meth:`get_response` records it); run again, one ``response.completed`` event made from the
        recorded response."""
        _refuse_runner_retries(model_settings)
        number = self._run.next_request()
        events: asyncio.Queue[Any] = asyncio.Queue()
        sent = False

        async def request() -> recorded.Result:
            nonlocal sent
            sent = True
            recorded.current().progress(f"model request {number}")
            items, completed = [], None
            async for event in self._model.stream_response(system_instructions, input, model_settings, *args,
                                                           **kwargs):
                events.put_nowait(event)
                if isinstance(event, ResponseOutputItemDoneEvent):
                    items.append(event.item)
                elif isinstance(event, ResponseCompletedEvent):
                    completed = event.response
            if completed is None:
                raise RuntimeError("the model's stream ended without a response.completed event")
            return self._result(_dump(_streamed(completed, items)), system_instructions, input)

        call = asyncio.ensure_future(recorded.acall_as(CallKind.MODEL, "model request", request))
        call.add_done_callback(lambda _: events.put_nowait(_END))  # after every event the request put
        try:
            while (event := await events.get()) is not _END:
                yield event
            payload = call.result()
        finally:
            call.cancel()  # a no-op once it ended; a stream closed before then records nothing
        if not sent:
            yield _completed_event(_RESPONSE.validate_python(payload), self._name)

    def get_retry_advice(self, request: Any) -> Any:
        """The wrapped model's advice."""
        return self._model.get_retry_advice(request)

    async def close(self) -> None:
        """Closes the wrapped model."""
        await self._model.close()

    async def _cleanup_on_run_end(self, owner: object) -> None:
        # The runner calls this hook of Model on the model it used (a websocket model frees its connection).
        await self._model._cleanup_on_run_end(owner)


def _streamed(response: Response, items: list[Any]) -> ModelResponse:
    """The ``ModelResponse`` the runner makes of a streamed ``response`` (``items``: the output
    items streamed, for streams whose completed response leaves them out)."""
    usage = Usage() if response.usage is None else Usage(
        requests=1, input_tokens=response.usage.input_tokens, output_tokens=response.usage.output_tokens,
        total_tokens=response.usage.total_tokens, input_tokens_details=response.usage.input_tokens_details,
        output_tokens_details=response.usage.output_tokens_details)
    return ModelResponse(output=list(response.output or items), usage=usage, response_id=response.id)


def _completed_event(response: ModelResponse, model: str | None) -> ResponseCompletedEvent:
    """A stream's last event for a recorded ``response``, from which the runner makes it again."""
    usage = response.usage
    done = Response(id=response.response_id or "", created_at=0, model=model or "", object="response",
                    output=response.output, tool_choice="auto", tools=[], parallel_tool_calls=False,
                    status="completed",
                    usage=ResponseUsage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                                        total_tokens=usage.total_tokens,
                                        input_tokens_details=usage.input_tokens_details,
                                        output_tokens_details=usage.output_tokens_details))
    return ResponseCompletedEvent(type="response.completed", response=done, sequence_number=0)


class _RecordedProvider(ModelProvider):
    """``provider`` (the run's: it resolves model names) whose models are :class:`_RecordedModel`."""

    def __init__(self, provider: ModelProvider, run: _Run) -> None:
        self._provider, self._run = provider, run

    def get_model(self, model_name: str | None) -> Model:
        """The model named ``model_name`` (None: the provider's default), recorded."""
        model = self._provider.get_model(model_name)
        return _RecordedModel(model, model_name or _model_name(model), self._run)

    async def aclose(self) -> None:
        """Closes the wrapped provider."""
        await self._provider.aclose()


def _model_name(model: Model) -> str | None:
    # The SDK's OpenAI and LiteLLM models keep their name as `model`; a Model has no name otherwise.
    name = getattr(model, "model", None)
    return name if isinstance(name, str) else None


def _runs_here(tool: Any) -> bool:
    """Whether ``tool`` runs in this process outside a function tool (hosted tools run in the response)."""
    return (isinstance(tool, (ComputerTool, CustomTool, LocalShellTool, ApplyPatchTool))
            or (isinstance(tool, ShellTool) and tool.executor is not None))


def _arguments(text: str) -> Any:
    try:
        return json.loads(text) if text else {}
    except ValueError:
        return text  # shown as the model sent it


def _recorded_tool(tool: FunctionTool) -> FunctionTool:
    """``tool`` whose calls are recorded calls (kind ``tool``, "tool <name>", its arguments as detail)."""
    invoke = tool.on_invoke_tool

    async def on_invoke_tool(context: Any, arguments: str) -> Any:
        async def call() -> recorded.Result:
            recorded.current().progress(f"tool {tool.name}")
            return recorded.Result(await invoke(context, arguments),
                                   detail={"tool": tool.name, "args": _arguments(arguments)})
        return await recorded.acall_as(CallKind.TOOL, f"tool {tool.name}", call)
    return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)


class _Wrapping:
    """The agents of one run, each wrapped once (a handoff back to an agent finds its wrapped copy)."""

    def __init__(self, run: _Run) -> None:
        self._run = run
        self._wrapped: dict[int, tuple[Agent[Any], Agent[Any]]] = {}

    def agent(self, agent: Agent[Any]) -> Agent[Any]:
        """A copy of ``agent`` whose model (when the agent holds one), function tools and handoffs
        are recorded. Raises :class:`Unsupported` for MCP servers and tools that run here outside a
        function tool."""
        known = self._wrapped.get(id(agent))
        if known is not None:
            return known[1]
        if agent.mcp_servers:
            raise Unsupported(f"agent '{agent.name}' has MCP servers, whose tool calls relaypoint cannot record: "
                              "give their tools to the agent as function tools")
        for tool in agent.tools:
            if _runs_here(tool):
                raise Unsupported(f"agent '{agent.name}' has tool '{tool.name}' ({type(tool).__name__}), which runs "
                                  "outside a function tool: relaypoint records function tools' calls only")
        changes: dict[str, Any] = {"tools": [_recorded_tool(t) if isinstance(t, FunctionTool) else t
                                             for t in agent.tools], "handoffs": []}
        if isinstance(agent.model, Model):  # else the run's provider resolves its name (and is wrapped)
            changes |= {"model": _RecordedModel(agent.model, _model_name(agent.model), self._run),
                        "model_settings": agent.model_settings}  # kept as they were
        copy = agent.clone(**changes)
        self._wrapped[id(agent)] = (agent, copy)
        copy.handoffs = [self.agent(h) if isinstance(h, Agent) else self._handoff(h) for h in agent.handoffs]
        return copy

    def _handoff(self, handoff: Handoff[Any, Any]) -> Handoff[Any, Any]:
        invoke: Callable[[Any, str], Awaitable[Any]] = handoff.on_invoke_handoff

        async def on_invoke_handoff(context: Any, arguments: str) -> Any:
            return self.agent(await invoke(context, arguments))
        return dataclasses.replace(handoff, on_invoke_handoff=on_invoke_handoff)


def _durable(agent: Agent[Any], run_config: RunConfig | dict[str, Any] | None) -> tuple[Agent[Any], RunConfig]:
    """``agent`` and ``run_config`` with every model request and function tool call recorded."""
    if not inside_step():
        raise OutsideStep(f"agent '{agent.name}' (RelaypointRunner) runs only inside a relaypoint step: call it from "
                          "the function of a step that a Runtime executes")
    config = RunConfig(**run_config) if isinstance(run_config, dict) else run_config or RunConfig()
    run = _Run()
    model = config.model
    if isinstance(model, Model):
        model = _RecordedModel(model, _model_name(model), run)
    config = dataclasses.replace(config, model=model, model_provider=_RecordedProvider(config.model_provider, run))
    return _Wrapping(run).agent(agent), config


class RelaypointRunner:
    """``agents.Runner`` for a relaypoint step: ``run``, ``run_sync`` (from a sync step) and
    ``run_streamed`` take the same arguments and return the same results, with every model request
    and function tool call of the run recorded as a call of the step running it (see the module).
    Outside a step they raise :class:`OutsideStep`; for an agent with MCP servers, or a local tool
    that is not a function tool (computer, shell, apply-patch, custom), :class:`Unsupported`; a model
    request with runner-managed retries (``ModelSettings.retry``) raises :class:`Unsupported`.
    The agents given are left as they are: each run uses wrapped copies."""

    @classmethod
    async def run(cls, starting_agent: Agent[Any], input: Any, *, run_config: RunConfig | dict[str, Any] | None = None,
                  **kwargs: Any) -> RunResult:
        """As ``Runner.run``."""
        agent, config = _durable(starting_agent, run_config)
        return await Runner.run(agent, input, run_config=config, **kwargs)

    @classmethod
    def run_sync(cls, starting_agent: Agent[Any], input: Any, *,
                 run_config: RunConfig | dict[str, Any] | None = None, **kwargs: Any) -> RunResult:
        """As ``Runner.run_sync`` (in a sync step)."""
        agent, config = _durable(starting_agent, run_config)
        return Runner.run_sync(agent, input, run_config=config, **kwargs)

    @classmethod
    def run_streamed(cls, starting_agent: Agent[Any], input: Any, *,
                     run_config: RunConfig | dict[str, Any] | None = None, **kwargs: Any) -> RunResultStreaming:
        """As ``Runner.run_streamed`` (in an async step): a request run again from its record
        streams one ``response.completed`` event instead of its deltas."""
        agent, config = _durable(starting_agent, run_config)
        return Runner.run_streamed(agent, input, run_config=config, **kwargs)
