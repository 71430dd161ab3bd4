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

# group_commit.py's runs: 200 no-op steps, and 20 steps each awaiting 10 ms (a short model call).
noop200 = Workflow("noop200")
for _i in range(200):
    noop200.step(name=f"n{_i}")(lambda ctx: None)


async def _wait10(ctx):
    await asyncio.sleep(0.01)


wait20 = Workflow("wait20")
for _i in range(20):
    wait20.step(name=f"w{_i}")(_wait10)

workflows += [noop200, wait20]
