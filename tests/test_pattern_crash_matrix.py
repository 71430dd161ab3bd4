"""The crash matrix over patterns, in the normal suite: seeded trials of a real run of a workflow
with a step, a loop, a debate, a vote, a supervisor, a planner and a final step (the ``patterns``
workflow of tests/patternmatrix.py), SIGKILLed at random instants (and inside its transactions) and
resumed by racing processes until it completes, with the chain's invariants checked after each
trial (tests/crashmatrix.py) by execution: no completed agent call repeated (an execution runs at
most once more per kill that landed inside it), every output equal to an uninterrupted run's (each
agent's output digests what it saw, so a wrongly restored history or state shows), one executor at a
time, no recorded output lost or changed. On each backend (``store_url``: a SQLite file, or a
PostgreSQL schema, per trial).

The concurrent matrix (``spread``: a vote of five, a parallel of four, a map of six by three, a
concurrent debate and a planner of independent subtasks, sync calls in threads and async ones on
the loop, with staggered naps) is killed while several calls are in flight and inside the boundary
of one of several concurrent calls (or the start of one beside others), then resumed by racing
processes: the same invariants, each kill counted once per call in flight, and the calls run again
after a kill exactly those it cut short (none recorded completed runs again; each cut short does).

Trials: ``RELAYPOINT_PATTERN_TRIALS`` (default 3: about 15 s on two idle cores) and
``RELAYPOINT_SPREAD_TRIALS`` (default 4: about 30 s on SQLite, 50 s on PostgreSQL), seeds from
``RELAYPOINT_PATTERN_SEED`` (default 1) upward. The soak (one command)::

    RELAYPOINT_PATTERN_TRIALS=100 RELAYPOINT_SPREAD_TRIALS=100 \
        python -m pytest tests/test_pattern_crash_matrix.py -q -s [-k postgres]

or ``python tests/patternmatrix.py --spread --trials 100 [--db postgresql://...]`` for a line per trial.
"""

from __future__ import annotations

import os

import crashmatrix
import patternmatrix

TRIALS = int(os.environ.get("RELAYPOINT_PATTERN_TRIALS", "3"))
SPREAD_TRIALS = int(os.environ.get("RELAYPOINT_SPREAD_TRIALS", "4"))
SEED = int(os.environ.get("RELAYPOINT_PATTERN_SEED", "1"))


def test_pattern_crash_matrix(tmp_path, store_url):
    results = crashmatrix.run_trials(tmp_path, range(SEED, SEED + TRIALS), db=store_url,
                                     scenario=patternmatrix.PATTERNS)
    kills = crashmatrix.check(results, tmp_path)
    assert any(k.owner and k.step and "#" in k.step for k in kills), "no kill landed inside an agent call"
    assert any("main:_boundary" in k.txns for k in kills), "no kill landed inside a boundary transaction"


def test_concurrent_calls_crash_matrix(tmp_path, store_url):
    results = crashmatrix.run_trials(tmp_path, range(SEED, SEED + SPREAD_TRIALS), db=store_url,
                                     scenario=patternmatrix.SPREAD)
    # and one trial aimed: the start killed inside the boundary of the second of five voters to land
    # (three still in flight), its resumer inside the start of the third call it runs again
    results += crashmatrix.run_trials(tmp_path, [SEED + SPREAD_TRIALS], db=store_url, scenario=patternmatrix.SPREAD,
                                      dwell=0.02, aims=[("txn", "_boundary", 7), ("txn", "_boundary", 2)])
    kills = crashmatrix.check(results, tmp_path)
    several = [k for k in kills if k.owner and len(k.steps) >= 2]
    assert any("main:_boundary" in k.txns for k in several), \
        "no kill landed inside the boundary of one of several calls in flight"
    assert any(k.role == "resume" for k in several), "no resumer was killed with several calls in flight"
