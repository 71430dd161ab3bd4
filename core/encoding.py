"""The one encoding of stored values (step outputs, inputs, decisions): strict JSON.

Accepted: None, bool, int, finite float, str (valid Unicode), list/tuple (or any other
``collections.abc.Sequence`` but bytes-like, e.g. ``ctx.history``, read whole), dict (or any other
``collections.abc.Mapping``, e.g. ``ctx.results``, read whole) with str keys, and pydantic models
(stored as ``model_dump(mode="json")``). Anything else fails with an ``InvalidValue`` naming the
path, e.g. ``output.obj: object is not JSON serializable``.
Nothing is ever pickled; reading a value never imports or executes anything.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from .errors import InvalidValue

MAX_DEPTH = 200


def is_unicode(text: str) -> bool:
    """Whether ``text`` is valid Unicode: it holds no lone surrogate (Python makes them of bytes that
    are not UTF-8, in command-line arguments and file names). Only such text can be stored or looked up."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _text(value: str, path: str, what: str = "text") -> str:
    if not is_unicode(value):
        raise InvalidValue(f"{path}: {what} contains a lone surrogate and is not valid Unicode")
    return value


def readable(text: str) -> str:
    """``text`` as valid Unicode, each lone surrogate in it written as its escape (``\\udc80``): an
    error message or traceback quoting a value that is not valid Unicode can then be stored as text."""
    return text if is_unicode(text) else text.encode("utf-8", "backslashreplace").decode("utf-8")


def _plain(value: Any, path: str, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise InvalidValue(f"{path}: nested deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        try:
            str(value)  # Python refuses to print ints over sys.get_int_max_str_digits() digits
        except ValueError:
            raise InvalidValue(f"{path}: integer with more than {sys.get_int_max_str_digits()} digits "
                               "cannot be stored; store it as a string") from None
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidValue(f"{path}: {value} is not valid JSON (only finite numbers are)")
        return value
    if isinstance(value, str):
        return _text(value, path)
    if isinstance(value, BaseModel):
        return _plain(value.model_dump(mode="json"), path, depth + 1)
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray, memoryview)):
        return [_plain(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise InvalidValue(f"{path}: key {k!r} is not a string (JSON keys are text)")
            key = _text(k, path, "a key")  # before the value: its path quotes the key
            out[key] = _plain(v, f"{path}.{key}", depth + 1)
        return out
    raise InvalidValue(f"{path}: {type(value).__name__} is not JSON serializable")


def dumps(value: Any, path: str = "output") -> str:
    """Encode ``value`` as JSON text for the store.

    Raises ``InvalidValue`` naming ``path`` and the offending element.
    """
    if value is None:
        return "null"  # a step's most common output, without the walk
    return json.dumps(_plain(value, path, 0), ensure_ascii=False, separators=(",", ":"))


def dumps_trusted(value: Any, path: str) -> str:
    """Encode a value relaypoint's own code built (a driver's state or definition, a step's options:
    str keys, plain JSON types) without :func:`dumps`'s element walk, which a boundary cannot afford for every state.

    Anything ``json`` itself refuses (a NaN, a pydantic model, a set) falls back to :func:`dumps`,
    so it fails the same way: ``InvalidValue`` naming ``path``.
    """
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return dumps(value, path)


def loads(text: str | None) -> Any:
    """Decode stored JSON text (None stays None).

    Raises ``ValueError`` (``json.JSONDecodeError`` included) or ``RecursionError`` on damaged text.
    """
    return None if text is None else json.loads(text)


def parse_json_arg(text: str, what: str) -> Any:
    """Parse JSON given by a person (``--input``, ``--value``, a console field, an MCP argument).

    Raises ``InvalidValue`` with one line saying where the JSON broke and how to fix it, or which
    value is nested deeper than :data:`MAX_DEPTH` (its path, as :func:`dumps` names it, however
    deep the text goes: Python's parser would give up at its recursion limit).
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise InvalidValue(
            f"{what} is not valid JSON ({e.msg}: line {e.lineno}, column {e.colno}); "
            f"""quote strings, e.g. '"yes"' or '{{"key": 1}}'"""
        ) from None
    except RecursionError:  # nested far past MAX_DEPTH
        raise InvalidValue(f"{_too_deep(text, what) or what}: nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as e:  # over-long integers
        raise InvalidValue(f"{what} cannot be read: {type(e).__name__}: {e}") from None
    dumps(value, what)  # rejects NaN and friends the same way a step output would be
    return value


# A token of JSON text: a string (its end may be missing), a bracket, a comma or a colon, or a run of
# anything else (a number, true, false, null).
_TOKEN = re.compile(r'"(?:[^"\\]+|\\.)*"?|[\[\]{},:]|[^\s\[\]{},:"]+')


def _too_deep(text: str, what: str) -> str | None:
    """The path of the first value of the JSON ``text`` (named ``what``) nested deeper than
    :data:`MAX_DEPTH`, as :func:`dumps` names it (``what[0].key``), read as far as the text goes
    (it may stop short); None when there is none. Costs one pass over the text, without building
    any value."""
    frames: list[list[Any]] = []  # each open container: [its path, is an object, next index or key, key due]
    for m in _TOKEN.finditer(text):
        token = m.group()
        frame = frames[-1] if frames else None
        if token in ("]", "}"):
            if frames:
                frames.pop()
        elif token == ",":
            if frame is not None and frame[1]:
                frame[3] = True
            elif frame is not None:
                frame[2] += 1
        elif token == ":":
            continue
        elif frame is not None and frame[1] and frame[3]:  # an object's key
            try:
                frame[2] = readable(json.loads(token))
            except ValueError:
                return None
            frame[3] = False
        else:  # a value begins
            path = what if frame is None else f"{frame[0]}.{frame[2]}" if frame[1] else f"{frame[0]}[{frame[2]}]"
            if len(frames) > MAX_DEPTH:
                return path
            if token in ("[", "{"):
                frames.append([path, token == "{", 0, True])
    return None
