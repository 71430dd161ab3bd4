"""The workflows of ``store_v2.db`` (a store made by relaypoint 0.1.0, schema version 2, at commit
2526454): the migration tests define them again, unchanged, to resume the runs it holds."""

from __future__ import annotations

import os
import time

from relaypoint import Workflow

chain = Workflow("chain")


@chain.step
def a(ctx):
    return {"a": ctx.input.get("n", 0)}


@chain.step
def b(ctx):
    if os.environ.get("V2_SLOW_B"):
        time.sleep(60)
    if ctx.input.get("fail"):
        raise RuntimeError("b failed on purpose")
    return {"b": ctx.results["a"]["a"] + 1}


@chain.step
def c(ctx):
    return {"c": ctx.results["b"]["b"] * 10}


gated = Workflow("gated")


@gated.step
def draft(ctx):
    return {"text": f"draft of {ctx.input.get('topic', '?')}"}


@gated.step(approval=True, timeout=86_400 * 3650)
def review(ctx):
    return {"reviewed": ctx.results["draft"]["text"]}


@gated.step
def publish(ctx):
    return {"published": ctx.results["review"]["reviewed"]}


ask = Workflow("ask")


@ask.step
def question(ctx):
    return {"answer": ctx.request_input("what colour?")}


@ask.step
def report(ctx):
    return {"report": ctx.results["question"]["answer"]}


WORKFLOWS = [chain, gated, ask]
