"""What a step's recorded calls say, for people: each call's messages sent and what came back,
read from the shapes the integrations record (see :class:`~relaypoint.models.CallRecord`), as
plain labelled parts. Pure functions: no I/O, no rendering; the front ends bound and draw them.

- A PydanticAI model request (:mod:`relaypoint.integrations.pydantic_ai`): its detail is the list
  of messages it added (``{"parts": [...], "instructions"}``: the system and user prompts, tool
  returns, retries), its value the ``ModelResponse`` (``{"parts": [...]}``: text, tool calls,
  thinking).
- An OpenAI Agents SDK model request (:mod:`relaypoint.integrations.openai_agents`): its detail is
  ``{"instructions", "input"}`` (a prompt, or the items it added: messages, tool outputs), its
  value the ``ModelResponse`` (``{"output": [...]}``: messages, function calls, reasoning).
- A tool call of either: its detail ``{"tool", "args"}``, its value the tool's result (PydanticAI's
  wrapped as ``{"result", "kind": "tool_return"}``).
- Anything else (a plain ``ctx.call``, a shape not known here): its detail and its result as they are.

Stored values are not trusted to be well formed: a part that is not of a known shape is shown as
its JSON, never dropped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..models import CallRecord
from ..status import CallKind, StepStatus

PARTS = 8
"""Most parts one side of a call (what it sent, what came back) lists; the others are counted."""


@dataclass(frozen=True)
class Part:
    """One thing a call sent or got back: ``label`` says what it is ("user", "instructions",
    "tool return web_search", "text", "tool call web_search", "arguments", "result", "error"),
    ``value`` is a text (``str``: read as text, as Markdown when it reads so) or any JSON value;
    ``same_as``: a tool return that is the result of the execution's earlier call at that position
    (``value`` is then not worth showing again), else None."""

    label: str
    value: Any
    same_as: int | None = None


@dataclass(frozen=True)
class CallParts:
    """A call as it reads: ``sent`` (its messages, or arguments) and ``received`` (its response,
    result or error), at most :data:`PARTS` each, and how many more each had (``more_sent``,
    ``more_received``)."""

    call: CallRecord
    sent: tuple[Part, ...]
    received: tuple[Part, ...]
    more_sent: int = 0
    more_received: int = 0


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> Any:
    """A message's content: a text as is, a list of texts and content items joined when they are
    all text, anything else as its JSON value."""
    if isinstance(value, list) and value and all(isinstance(v, str) or _item_text(v) is not None for v in value):
        return "\n".join(v if isinstance(v, str) else _item_text(v) for v in value)
    return value


def _item_text(item: Any) -> str | None:
    """The text of a content item (``{"type": "input_text" | "output_text" | "text", "text"}``), else None."""
    if isinstance(item, dict) and isinstance(item.get("text"), str) and str(item.get("type", "text")).endswith("text"):
        return item["text"]
    return None


def _arguments(args: Any) -> Any:
    """Tool call arguments: a JSON text (as OpenAI sends them) parsed, anything else as it is."""
    if isinstance(args, str):
        try:
            return json.loads(args)
        except ValueError:
            return args
    return args


# ---- PydanticAI -----------------------------------------------------------------------------------


_PYDANTIC_TEXTS = {"system-prompt": "system", "user-prompt": "user", "text": "text", "thinking": "thinking"}
"""The part kinds of PydanticAI messages whose content is shown as it is, by their label."""


def _pydantic_part(part: dict[str, Any]) -> Part:
    """One part of a PydanticAI request (prompts, tool returns, retries) or response (text,
    thinking, tool calls); a kind not known here as its JSON."""
    kind = part.get("part_kind")
    if kind in _PYDANTIC_TEXTS:
        return Part(_PYDANTIC_TEXTS[kind], _text(part.get("content")))
    if kind in ("tool-return", "builtin-tool-return"):
        return Part(f"tool return {part.get('tool_name', '?')}", _text(part.get("content")))
    if kind == "retry-prompt":
        tool = part.get("tool_name")
        return Part("retry" + (f" {tool}" if tool else ""), _text(part.get("content")))
    if kind in ("tool-call", "builtin-tool-call"):
        return Part(f"tool call {part.get('tool_name', '?')}", _arguments(part.get("args")))
    return Part(str(kind or "part"), part)


def _pydantic_sent(detail: Any, seen: set[str]) -> list[Part] | None:
    """The parts of a PydanticAI request's messages, each message's instructions first unless an
    earlier request of the execution sent the same (``seen``); None when ``detail`` is not that shape."""
    if not (isinstance(detail, list) and detail and all(isinstance(m, dict) and isinstance(m.get("parts"), list)
                                                        for m in detail)):
        return None
    parts: list[Part] = []
    for message in detail:
        instructions = message.get("instructions")
        if isinstance(instructions, str) and instructions and instructions not in seen:
            seen.add(instructions)
            parts.append(Part("instructions", instructions))
        parts += [_pydantic_part(p) if isinstance(p, dict) else Part("part", p) for p in message["parts"]]
    return parts


def _pydantic_received(value: Any) -> list[Part] | None:
    parts = _dict(value).get("parts")
    if not isinstance(parts, list):
        return None
    return [_pydantic_part(p) if isinstance(p, dict) else Part("part", p) for p in parts]


# ---- OpenAI Agents SDK ----------------------------------------------------------------------------


def _openai_item(item: Any, tools: dict[str, str]) -> Part:
    """One input or output item: a message by its role, a function call and its output by the
    tool's name (``tools``: call id -> name, from the responses seen so far), reasoning."""
    if not isinstance(item, dict):
        return Part("part", item)
    kind = item.get("type")
    if kind == "function_call":
        name = str(item.get("name", "?"))
        if isinstance(item.get("call_id"), str):
            tools[item["call_id"]] = name
        return Part(f"tool call {name}", _arguments(item.get("arguments")))
    if kind == "function_call_output":
        name = tools.get(item.get("call_id"), "?") if isinstance(item.get("call_id"), str) else "?"
        return Part(f"tool return {name}", _arguments(item.get("output")))
    if kind == "reasoning":
        summary = item.get("summary")
        return Part("reasoning", _text(summary) if summary else item)
    if "role" in item and (kind in (None, "message")):
        role = str(item["role"])
        return Part("text" if role == "assistant" else role, _text(item.get("content")))
    return Part(str(kind or "item"), item)


def _openai_sent(detail: Any, seen: set[str], tools: dict[str, str]) -> list[Part] | None:
    detail = _dict(detail)
    if "input" not in detail:
        return None
    parts: list[Part] = []
    instructions = detail.get("instructions")
    if isinstance(instructions, str) and instructions and instructions not in seen:
        seen.add(instructions)
        parts.append(Part("instructions", instructions))
    given = detail["input"]
    if isinstance(given, list):
        parts += [_openai_item(item, tools) for item in given]
    else:
        parts.append(Part("user", given))
    return parts


def _openai_received(value: Any, tools: dict[str, str]) -> list[Part] | None:
    output = _dict(value).get("output")
    if not isinstance(output, list):
        return None
    return [_openai_item(item, tools) for item in output]


# ---- any call -------------------------------------------------------------------------------------


def _tool_result(value: Any) -> Any:
    """A tool call's result: PydanticAI's journal wrapping (``{"result", "kind": "tool_return"}``,
    a ``ToolReturn``'s ``return_value``) taken off; anything else as it is."""
    if isinstance(value, dict) and value.get("kind") in ("tool_return", "tool_content_result") and "result" in value:
        value = value["result"]
        if isinstance(value, dict) and value.get("kind") == "tool-return" and "return_value" in value:
            value = value["return_value"]
    return value


def _bounded(parts: Sequence[Part]) -> tuple[tuple[Part, ...], int]:
    return tuple(parts[:PARTS]), max(0, len(parts) - PARTS)


def _repeated(parts: list[Part], results: dict[str, list[tuple[int, Any]]]) -> list[Part]:
    """``parts`` with each tool return that is an earlier tool call's result (``results``: tool
    name -> (position, result) of the calls so far) marked as the same as it."""
    out = []
    for part in parts:
        tool = part.label.removeprefix("tool return ")
        if tool != part.label:
            # A tool return's content is read as text (a list of texts joined): compare it so too.
            same = next((position for position, result in results.get(tool, ())
                         if part.value in (result, _text(result))), None)
            part = Part(part.label, part.value, same)
        out.append(part)
    return out


def read_calls(calls: Iterable[CallRecord]) -> Iterator[CallParts]:
    """Each of an execution's ``calls`` (in order) as it reads. Instructions a model request sends
    again unchanged are left out after the first (an agent sends them with every request), a tool's
    output is named by the tool the model called, and one that an earlier tool call of the
    execution returned is marked as its result (:attr:`Part.same_as`)."""
    seen: set[str] = set()
    tools: dict[str, str] = {}
    results: dict[str, list[tuple[int, Any]]] = {}
    for call in calls:
        sent: list[Part] | None = None
        received: list[Part] | None = None
        if call.kind == CallKind.MODEL:
            sent = _pydantic_sent(call.detail, seen)
            if sent is None:
                sent = _openai_sent(call.detail, seen, tools)
            received = _pydantic_received(call.value)
            if received is None:
                received = _openai_received(call.value, tools)
        elif call.kind == CallKind.TOOL and isinstance(call.detail, dict) and "args" in call.detail:
            sent = [Part("arguments", call.detail["args"])]
            received = [Part("result", _tool_result(call.value))]
            if call.status == StepStatus.COMPLETED:
                results.setdefault(str(call.detail.get("tool")), []).append((call.position, received[0].value))
        if sent is None:
            sent = [] if call.detail is None else [Part("detail", call.detail)]
        sent = _repeated(sent, results)
        if call.status != StepStatus.COMPLETED:
            received = [Part("error", call.error or "")]
        elif received is None:
            received = [Part("result", call.value)]
        (shown_sent, more_sent), (shown_received, more_received) = _bounded(sent), _bounded(received)
        yield CallParts(call, shown_sent, shown_received, more_sent, more_received)
