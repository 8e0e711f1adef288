"""The planted label truth (finlib.finbias.data.synth_planted.planted_labels) and the rehearsal's label
check (finlib.rehearsal.rehearse.label_differences).

Oracles: stage 01's market model (finlib.finbias.labels.market_model, a prefix-sum implementation)
agrees with the planted truth's per-report least squares on every report; hand-counted year buckets;
and faults planted one at a time in what stage 01 gives (a window edge moved by a day, a report left unlabelled, years pooled
into one bucket set, labels joined to the neighbouring report) each show up as differing labels.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from finlib.finbias.data.synth import generate_market
from finlib.finbias.data.synth_planted import planted_labels, year_buckets
from finlib.finbias.labels.market_model import compute_labels
from finlib.rehearsal.rehearse import label_differences

QUANTILES = (0.30, 0.70)


@pytest.fixture(scope="module")
def market():
    return generate_market({"n_reports": 160, "n_firms": 16, "words_min": 400, "words_max": 600}, 11)


def stage01(market, method: str = "paper", window: int = 60, **options) -> pd.DataFrame:
    events = market.reports[["report_id", "ticker", "date"]]
    return compute_labels(
        events, market.prices, market.market, window=window, method=method, quantiles=QUANTILES, **options
    )


def truth(market, method: str = "paper") -> pd.DataFrame:
    return planted_labels(market.reports, market.prices, market.market, 60, QUANTILES, method)


@pytest.mark.parametrize("method", ["paper", "mackinlay"])
def test_stage01_equals_the_planted_truth_on_every_report(market, method):
    ours, planted = stage01(market, method), truth(market, method)
    summary, problems = label_differences(planted, ours)
    assert problems == [] and summary["differ"] == summary["car_off"] == 0
    assert summary["reports"] == len(market.reports) and summary["car_max_gap"] < 1e-12


def test_the_planted_car_follows_the_planted_drift(market):
    planted = truth(market).merge(market.truth[["report_id", "drift"]], on="report_id")
    assert np.corrcoef(planted["car"], planted["drift"])[0, 1] > 0.3  # the generator aims at 0.5 per report


@pytest.mark.parametrize(
    "n, counts", [(1, (0, 1, 0)), (2, (1, 0, 1)), (3, (1, 1, 1)), (5, (1, 3, 1)), (10, (3, 4, 3)), (55, (16, 23, 16))]
)
def test_year_buckets_round_halves_to_the_middle(n, counts):
    car = pd.Series(np.linspace(-1, 1, n)[::-1])  # descending: the order comes from the CARs, not the rows
    got = year_buckets(car, pd.Series([2021] * n), pd.Series([f"R{i:03d}" for i in range(n)]), QUANTILES)
    assert tuple(int((got == r).sum()) for r in ("bearish", "neutral", "bullish")) == counts
    if counts[0]:
        assert got[car.idxmin()] == "bearish"


def test_years_are_bucketed_apart():
    car = pd.Series([0.1, 0.2, 0.3, -0.3, -0.2, -0.1])
    got = year_buckets(car, pd.Series([2020] * 3 + [2021] * 3), pd.Series(list("abcdef")), QUANTILES)
    assert got.tolist() == ["bearish", "neutral", "bullish"] * 2


def test_an_event_window_one_day_short_fails(market):
    summary, problems = label_differences(truth(market), stage01(market, window=59))
    assert problems and summary["car_off"] == len(market.reports)


def test_a_mackinlay_estimation_window_one_day_off_fails(market):
    summary, problems = label_differences(truth(market, "mackinlay"), stage01(market, "mackinlay", gap=31))
    assert problems and summary["car_off"] == len(market.reports)


def test_pooled_year_buckets_fail(market):
    ours = stage01(market)
    pooled = year_buckets(ours["car"], pd.Series([0] * len(ours)), ours["report_id"], QUANTILES)
    _, problems = label_differences(truth(market), ours.assign(label=pooled))
    assert problems


def test_labels_joined_to_the_neighbouring_report_fail(market):
    ours = stage01(market)
    summary, problems = label_differences(truth(market), ours.assign(report_id=np.roll(ours["report_id"], 1)))
    assert problems and summary["differ"] > 0 and summary["car_off"] == len(market.reports)


def test_a_report_stage01_did_not_label_fails(market):
    ours = stage01(market)
    summary, problems = label_differences(truth(market), ours.iloc[1:])
    assert summary["differ"] == 1 and summary["car_off"] == 1 and ours["report_id"].iloc[0] in problems[0]
