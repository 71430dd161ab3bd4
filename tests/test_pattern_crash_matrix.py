"""The crash matrix over patterns, in the normal suite: seeded trials of a real run of a workflow
with a step, a loop, a debate, a vote, a supervisor, a planner and a final step (the ``patterns``
workflow of tests/patternmatrix.py), SIGKILLed at random instants (and inside its transactions) and
resumed by racing processes until it completes, with the chain's invariants checked after each
trial (tests/crashmatrix.py) by execution: no completed agent call repeated (an execution runs at
most once more per kill that landed inside it), every output equal to an uninterrupted run's (each
agent's output digests what it saw, so a wrongly restored history or state shows), one executor at a
time, no recorded output lost or changed. On each backend (``store_url``: a SQLite file, or a
PostgreSQL schema, per trial).

Trials: ``RELAYPOINT_PATTERN_TRIALS`` (default 3: about 15 s on two idle cores), seeds from
``RELAYPOINT_PATTERN_SEED`` (default 1) upward. The soak (one command)::

    RELAYPOINT_PATTERN_TRIALS=100 python -m pytest tests/test_pattern_crash_matrix.py -q -s [-k postgres]
"""

from __future__ import annotations

import os

import crashmatrix
import patternmatrix

TRIALS = int(os.environ.get("RELAYPOINT_PATTERN_TRIALS", "3"))
SEED = int(os.environ.get("RELAYPOINT_PATTERN_SEED", "1"))


def test_pattern_crash_matrix(tmp_path, store_url):
    results = crashmatrix.run_trials(tmp_path, range(SEED, SEED + TRIALS), db=store_url,
                                     scenario=patternmatrix.PATTERNS)
    kills = crashmatrix.check(results, tmp_path)
    assert any(k.owner and k.step and "#" in k.step for k in kills), "no kill landed inside an agent call"
    assert any("main:_boundary" in k.txns for k in kills), "no kill landed inside a boundary transaction"
