"""User functions: which kind of callable a user gave, refused at definition time when it can be
neither a plain function nor a coroutine function.

A step, a pattern's agent and every decision a pattern asks of user code (judge, tally, route,
plan, replan, until, a loop's body) may be ``def`` or ``async def``. The executor awaits an async
one on an event loop and runs a sync one in a worker thread (see :mod:`relaypoint.execution`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from .errors import DefinitionError


def _unwrapped(fn: Any) -> Any:
    """``fn`` without its ``functools.partial`` layers; a callable object's ``__call__``."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if not (inspect.isfunction(fn) or inspect.ismethod(fn)) and callable(fn):
        call = getattr(type(fn), "__call__", None)
        return call if call is not None else fn
    return fn


def is_async(fn: Callable[..., Any]) -> bool:
    """Whether calling ``fn`` returns a coroutine to await (``async def``, also behind
    ``functools.partial`` or as a callable object's ``async def __call__``)."""
    return inspect.iscoroutinefunction(_unwrapped(fn))


def check_callable(fn: Any, what: str) -> None:
    """Refuse, with a one-line ``DefinitionError`` naming ``what`` (e.g. "step 'draft'"), a
    ``fn`` that is not callable, or whose call yields instead of returning (a generator or an
    async generator function: its output could not be recorded)."""
    if not callable(fn):
        raise DefinitionError(f"{what} must be a function of ctx (def or async def), not {type(fn).__name__}")
    inner = _unwrapped(fn)
    if inspect.isasyncgenfunction(inner) or inspect.isgeneratorfunction(inner):
        kind = "an async generator" if inspect.isasyncgenfunction(inner) else "a generator"
        raise DefinitionError(f"{what} is {kind} function (it yields); give a function (def or async def) that "
                              "returns its output")
