"""The workflow the worker-throughput measurement queues and its workers execute: a chain of five
no-op steps (``relaypoint worker --app worker_app:workflows``, run from bench/)."""

from relaypoint import Workflow

STEPS = 5

bench = Workflow("bench")
for _i in range(STEPS):
    bench.step(name=f"s{_i}")(lambda ctx: None)

workflows = [bench]
