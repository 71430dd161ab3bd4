"""The workflow the worker-throughput measurement queues and its workers execute: a chain of five
no-op steps (``relaypoint worker --app worker_app:workflows``, run from bench/), and the one async
step awaiting 1 s of ``worker_async.py``."""

import asyncio

from relaypoint import Workflow

STEPS = 5

bench = Workflow("bench")
for _i in range(STEPS):
    bench.step(name=f"s{_i}")(lambda ctx: None)

workflows = [bench]

asleep = Workflow("asleep")  # one async step awaiting 1 s: worker_async.py's runs


@asleep.step
async def nap(ctx):
    await asyncio.sleep(1)


workflows.append(asleep)
