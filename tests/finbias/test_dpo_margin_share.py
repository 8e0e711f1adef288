"""The share of DPO's reward margin on rating tokens (`train.rating_margin_share`): per pair, bounded, with
a Student-t interval over pairs. Oracles: hand-computed shares, and scipy's own t interval."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from finlib.finbias.dpo import train as tr


def margins(total, rating) -> pd.DataFrame:
    return pd.DataFrame({"report_id": [f"R{i}" for i in range(len(total))], "margin": total, "rating_margin": rating})


def test_each_pair_counts_the_size_of_its_rating_part_whatever_the_signs():
    # pair 1: 1.5 of 2 on the rating (rest 0.5); pair 2: rating +0.5 against a rest of -1.5; pair 3: no margin
    got = tr.pair_rating_shares(margins([2.0, -1.0, 0.0], [1.5, 0.5, 0.0]))
    assert got[:2] == pytest.approx([0.75, 0.25]) and np.isnan(got[2])


def test_the_share_is_the_mean_over_pairs_with_scipys_t_interval():
    total = [1.0, 2.0, 0.5, -0.4, 3.0, 1.2]
    rating = [0.9, 0.5, 0.5, -0.1, 1.0, 1.2]
    per_pair = np.array([0.9 / 1.0, 0.5 / 2.0, 1.0, 0.1 / 0.4, 1.0 / 3.0, 1.0])
    lo, hi = stats.t.interval(0.95, len(per_pair) - 1, loc=per_pair.mean(), scale=stats.sem(per_pair))
    got = tr.rating_margin_share(margins(total, rating))
    assert got.pairs == 6 and got.share == pytest.approx(per_pair.mean())
    assert (got.ci_low, got.ci_high) == pytest.approx((max(0.0, lo), min(1.0, hi)))


def test_mixed_signs_keep_the_share_between_0_and_1():
    # a ratio of sums would read 0.9 / 0.1 = 900 % here
    got = tr.rating_margin_share(margins([1.0, -0.9], [0.8, 0.1]))
    assert 0.0 <= got.ci_low <= got.share <= got.ci_high <= 1.0
    assert got.share == pytest.approx((0.8 + 0.1 / 1.1) / 2)


def test_one_pair_has_no_interval_and_no_pair_no_share():
    one = tr.rating_margin_share(margins([2.0], [1.0]))
    assert one.share == pytest.approx(0.5) and np.isnan(one.ci_low) and one.pairs == 1
    none = tr.rating_margin_share(margins([0.0], [0.0]))
    assert none.pairs == 0 and np.isnan(none.share)
