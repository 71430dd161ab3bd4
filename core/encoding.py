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
    """Parse JSON given by a person (``--input``, ``--value``, a console field).

    Raises ``InvalidValue`` with one line saying where the JSON broke and how to fix it.
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise InvalidValue(
            f"{what} is not valid JSON ({e.msg}: line {e.lineno}, column {e.colno}); "
            f"""quote strings, e.g. '"yes"' or '{{"key": 1}}'"""
        ) from None
    except (ValueError, RecursionError) as e:  # over-long integers, absurd nesting
        raise InvalidValue(f"{what} cannot be read: {type(e).__name__}: {e}") from None
    dumps(value, what)  # rejects NaN and friends the same way a step output would be
    return value
