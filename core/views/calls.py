"""What a recorded call shows a person, for the CLI and the console: its parts as labelled values.

A model request shows the messages it ``sent`` (the ones new since the step's last request) and its
``response``; a tool call its ``arguments`` and ``result``; any other call its ``detail`` (when it
recorded one) and ``result``. A failed call shows its ``error`` instead of a result.

A model request recorded by an integration is read as messages (:class:`Message`, one per part: who
said it and its text): Pydantic AI's message JSON (``{"kind", "parts": [{"part_kind", ...}]}``,
and a response's ``{"parts": [...]}``) and the OpenAI Agents SDK's items (``{"role", "content"}``,
``{"type": "function_call", ...}``, a response's ``{"output": [...]}``). Any other shape is shown as
the JSON it is. Every text is as stored (untrusted: show it through
:func:`relaypoint.views.display.literal`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..models import CallRecord
from ..status import CallKind, StepStatus

LABELS = {CallKind.MODEL: ("sent", "response"), CallKind.TOOL: ("arguments", "result"),
          CallKind.CALL: ("detail", "result")}
"""Per call kind: the labels of its detail and of its value."""


@dataclass(frozen=True)
class Message:
    """One part of a conversation: ``role`` (``instructions``, ``system``, ``user``, ``assistant``,
    ``thinking``, ``tool call NAME``, ``tool result NAME``, ``retry``) and its ``text`` (a
    non-text content as JSON)."""

    role: str
    text: str


def call_parts(call: CallRecord) -> list[tuple[str, Any]]:
    """``call``'s parts in the order shown: (label, value) pairs, the detail first when recorded,
    then its result, or ``("error", text)`` for a failed call. A model request's parts are lists
    of :class:`Message` when their shape is known; a tool call's arguments leave out the tool's
    name, which the call's name already says. An unknown kind (a newer writer's) is shown as a
    plain call."""
    detail_label, value_label = LABELS.get(call.kind, LABELS[CallKind.CALL])
    detail = call.detail
    if call.kind == CallKind.TOOL and isinstance(detail, dict) and set(detail) == {"tool", "args"}:
        detail = detail["args"]
    model = call.kind == CallKind.MODEL
    parts: list[tuple[str, Any]] = [] if detail is None else [(detail_label, (model and messages(detail)) or detail)]
    if call.status == StepStatus.COMPLETED:
        return [*parts, (value_label, (model and messages(call.value)) or call.value)]
    return [*parts, ("error", call.error or "")]


def messages(value: Any) -> list[Message] | None:
    """``value`` (a model request's recorded messages or response) as messages, or None when its
    shape is none this module reads (or it holds none)."""
    if isinstance(value, dict) and isinstance(value.get("parts"), list):  # a Pydantic AI response
        value = [value]
    elif isinstance(value, dict) and isinstance(value.get("input"), (str, list)):  # OpenAI Agents: what it sent
        value = [*([{"role": "instructions", "content": value["instructions"]}] if value.get("instructions") else []),
                 *([{"role": "user", "content": value["input"]}] if isinstance(value["input"], str) else value["input"])]
    elif isinstance(value, dict) and isinstance(value.get("output"), list):  # OpenAI Agents: its response
        value = value["output"]
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        return None
    found: list[Message] = []
    for item in value:
        if isinstance(item.get("parts"), list):
            if item.get("instructions"):
                found.append(Message("instructions", _text(item["instructions"])))
            found += [_pydantic_ai_part(p) for p in item["parts"] if isinstance(p, dict)]
        elif "role" in item or "type" in item:
            found.append(_openai_item(item))
        else:
            return None
    return found or None


_PART_ROLES = {"system-prompt": "system", "user-prompt": "user", "text": "assistant", "thinking": "thinking",
               "retry-prompt": "retry"}


def _pydantic_ai_part(part: dict[str, Any]) -> Message:
    kind = part.get("part_kind")
    if kind == "tool-call":
        return Message(f"tool call {part.get('tool_name')}", _text(part.get("args")))
    if kind == "tool-return":
        return Message(f"tool result {part.get('tool_name')}", _text(part.get("content")))
    return Message(_PART_ROLES.get(kind, str(kind)), _text(part.get("content")))


def _openai_item(item: dict[str, Any]) -> Message:
    kind = item.get("type")
    if kind == "function_call":
        return Message(f"tool call {item.get('name')}", _text(item.get("arguments")))
    if kind == "function_call_output":
        return Message("tool result", _text(item.get("output")))
    content = item.get("content")
    if isinstance(content, list):  # output_text / input_text pieces
        texts = [c.get("text") for c in content if isinstance(c, dict)]
        content = "\n".join(texts) if texts and all(isinstance(t, str) for t in texts) else content
    return Message(str(item.get("role") or kind), _text(content))


def _text(value: Any) -> str:
    """A part's content as text: a string as is, anything else as compact JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
