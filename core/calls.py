"""User functions: which kind of callable a user gave, refused at definition time when it can be
neither a plain function nor a coroutine function.

A step, a pattern's agent and every decision a pattern asks of user code (judge, tally, route,
plan, replan, until, a loop's body) may be ``def`` or ``async def``. The executor awaits an async
one on an event loop and runs a sync one in a worker thread (see :mod:`relaypoint.execution`).
"""

from __future__ import annotations

import asyncio
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


def _yields(fn: Any) -> str | None:
    """What kind of generator function ``fn`` is, in words ("a generator", "an async generator"),
    or None when calling it returns rather than yields."""
    inner = _unwrapped(fn)
    if inspect.isasyncgenfunction(inner):
        return "an async generator"
    return "a generator" if inspect.isgeneratorfunction(inner) else None


def check_callable(fn: Any, what: str) -> None:
    """Refuse, with a one-line ``DefinitionError`` naming ``what`` (e.g. "step 'draft'"), a
    ``fn`` that is not callable, or whose call yields instead of returning (a generator or an
    async generator function: its output could not be recorded)."""
    if not callable(fn):
        raise DefinitionError(f"{what} must be a function of ctx (def or async def), not {type(fn).__name__}")
    kind = _yields(fn)
    if kind is not None:
        raise DefinitionError(f"{what} is {kind} function (it yields); give a function (def or async def) that "
                              "returns its output")


def check_plain(fn: Any, what: str, of: str) -> None:
    """Refuse, with a one-line ``DefinitionError`` naming ``what``, a ``fn`` that is not a plain
    function of ``of`` (words like "a vote") returning its answer: one not callable, ``async def``,
    or yielding. For what relaypoint calls where nothing may be awaited (a vote's ``key``, used when
    the result is recorded)."""
    kind = type(fn).__name__ if not callable(fn) else "async def" if is_async(fn) else _yields(fn)
    if kind is not None:
        raise DefinitionError(f"{what} must be a function of {of}, not {kind} (a plain def returning its answer: "
                              "it is called where nothing is awaited)")


def loop_running() -> bool:
    """Whether an event loop runs in the calling thread (where nothing may block on a coroutine)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def wrap(fn: Callable[..., Any], *, before: Callable[..., Any] | None = None,
         after: Callable[..., Any] | None = None) -> Callable[..., Any]:
    """``fn`` between two plain functions of relaypoint's own: a callable of ``*args`` returning
    ``after(fn(before(*args)), *args)`` (without ``before``: ``fn(*args)``; without ``after``: what
    ``fn`` returns). For a pattern's decisions made of user code, e.g. ``wrap(route, after=check)``.

    The callable is ``async def`` when ``fn`` is (it awaits ``fn``, then applies ``after``), plain
    otherwise, so the executor runs it as it would run ``fn``. A plain ``fn`` (or ``after``) may
    return an awaitable: the callable then returns an awaitable doing the rest, as the executor
    awaits what a plain function returns when it is awaitable. ``before`` and ``after`` run where
    ``fn`` runs (on the event loop for an async ``fn``): keep them quick."""
    def argument(args: tuple[Any, ...]) -> tuple[Any, ...]:
        return args if before is None else (before(*args),)

    async def rest(value: Any, args: tuple[Any, ...]) -> Any:
        value = await value if inspect.isawaitable(value) else value
        if after is None:
            return value
        value = after(value, *args)
        return await value if inspect.isawaitable(value) else value

    if is_async(fn):
        async def awaited(*args: Any) -> Any:
            return await rest(fn(*argument(args)), args)
        return awaited

    def called(*args: Any) -> Any:
        value = fn(*argument(args))
        if inspect.isawaitable(value):
            return rest(value, args)
        return value if after is None else after(value, *args)
    return called
