"""The crash matrix in the normal suite: seeded, bounded trials of a real six-step run SIGKILLed at
random instants (and inside its transactions) and resumed by racing processes until it completes,
with every crash-safety invariant checked after each trial, on each backend (``store_url``: a
SQLite file, or a PostgreSQL schema, per trial). The harness and the list of invariants are in
tests/crashmatrix.py.

Trials: ``RELAYPOINT_CRASH_TRIALS`` (default 10: about 40 s on two idle cores), seeds from
``RELAYPOINT_CRASH_SEED`` (default 1) upward. A trial's seed fixes its input, sleeps, lease, racers
and kill triggers; where the kills land depends on timing, and the summary line says where.

The soak (one command)::

    RELAYPOINT_CRASH_TRIALS=300 python -m pytest tests/test_crash_matrix.py -q -s [-k postgres]

or, with a line per trial: ``python tests/crashmatrix.py --trials 300 --seed 1 [--db postgresql://...]``.
"""

from __future__ import annotations

import os

import crashmatrix

TRIALS = int(os.environ.get("RELAYPOINT_CRASH_TRIALS", "10"))
SEED = int(os.environ.get("RELAYPOINT_CRASH_SEED", "1"))


def test_crash_matrix(tmp_path, store_url):
    results = crashmatrix.run_trials(tmp_path, range(SEED, SEED + TRIALS), db=store_url)
    kills = crashmatrix.check(results, tmp_path)
    if TRIALS >= 8:  # the kills reach the places that matter
        assert any(k.owner and k.step for k in kills), "no kill landed inside a step"
        assert any("main:_boundary" in k.txns for k in kills), "no kill landed inside a boundary transaction"
