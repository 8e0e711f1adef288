"""Stage 04's large-run shortcuts give the numbers the direct computation gives.

Metrics are evaluated once on all rows and sliced per model x condition; bootstrap replicate
weights are drawn once per (firms, replicates, seed). Oracles: `metrics_long` on each model x
condition's rows alone (rows shuffled, so slicing cannot lean on order), and
`stats.bootstrap_ci` drawing its own weights.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from test_scoring import frames

from finlib.core import stats
from finlib.finbias.scoring import metrics
from finlib.finbias.scoring import stage as scoring


def test_metrics_on_all_rows_equal_metrics_per_group():
    rows = pd.concat([scoring.score_frame(*frames()).rows,
                      scoring.analyst_rows(frames()[3], frames()[2])], ignore_index=True)
    rows = rows.sample(frac=1.0, random_state=3).reset_index(drop=True)
    together = metrics.metrics_long(rows, reps=40, seed=5)
    apart = pd.concat([metrics.metrics_long(g.reset_index(drop=True), reps=40, seed=5)
                       for _, g in rows.groupby(["model", "condition"], sort=True)], ignore_index=True)
    assert len(together) > 50
    pd.testing.assert_frame_equal(together, apart, check_exact=True)


def test_cached_bootstrap_weights_give_the_intervals_of_fresh_draws():
    rng = np.random.default_rng(0)
    for n_firms in (1, 7, 53):
        sums = np.c_[rng.integers(0, 5, n_firms), rng.integers(5, 9, n_firms)].astype(float)
        for _ in range(2):  # the second call is served from the cache
            got = metrics.bootstrap(sums, stats.ratio, 200, 11, 0.9)
            assert got == stats.bootstrap_ci(sums, stats.ratio, 200, 11, 0.9)
    assert not metrics._weights(7, 200, 11).flags.writeable
