"""The generator's records read the four conditions without the project's extractor, and the closed form.

Oracles: the generator's own planted ratings (not stage 02's columns) for what each text shows, texts
edited by hand for a fake written wrongly, and hand-computed expectations for the closed form.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from finlib.finbias.data.synth_planted import PlantedIndex, expected_cells, own_view_probs
from finlib.finbias.vocab import POOLED, Rating


@pytest.fixture(scope="module")
def corpus():
    """A small generated corpus in every scale's wording and its stage 02 conditions."""
    from finlib.finbias.data.synth import generate_market
    from finlib.finbias.perturb.stage import build_conditions, shipped_lexicon

    m = generate_market({"n_reports": 60, "n_firms": 8, "words_min": 150, "words_max": 220,
                         "rating_wording": "scales", "layout": "structured"}, 5)
    cond = build_conditions(m.reports, 1, "one", shipped_lexicon(), policy="ignore").conditions
    return m, cond[cond["status"] == "ok"]


def test_each_condition_shows_what_the_generator_planted_without_the_extractor(corpus, monkeypatch):
    from finlib.finbias.perturb import ratings
    from finlib.finbias.perturb import stage as perturb

    def no_extractor(*_a, **_k):
        raise AssertionError("the simulated models must not read the rating with the project's extractor")
    monkeypatch.setattr(ratings, "extract_analyst_rating", no_extractor)
    monkeypatch.setattr(perturb, "extract_analyst_rating", no_extractor, raising=False)  # stage 02 may not import it
    m, cond = corpus
    index = PlantedIndex(m.planted)
    analyst = dict(zip(m.reports["report_id"], m.reports["analyst_rating"]))  # the generator's, not stage 02's
    for rec in cond.itertuples():
        reading = index.read(rec.text)
        assert reading.report_id == rec.report_id
        want = {"original": analyst[rec.report_id], "fake_rating": rec.fake_rating}.get(rec.condition)
        assert (reading.shown.value if reading.shown else None) == want, (rec.condition, rec.text[:120])
        assert reading.opinions == (rec.condition != "no_opinion") or not index.rows[rec.report_id]["opinion_keys"]


def test_a_fake_written_wrongly_shows_what_it_shows(corpus):
    m, cond = corpus
    index = PlantedIndex(m.planted)
    rec = cond[(cond["condition"] == "fake_rating")].iloc[0]
    first = index.rows[rec.report_id]["first_sentence"]
    a, b = index.rows[rec.report_id]["term_start"], index.rows[rec.report_id]["term_end"]
    rest = rec.text[rec.text.index("\n\n"):]
    analyst = Rating(m.reports.set_index("report_id").loc[rec.report_id, "analyst_rating"])
    other = next(r for r in Rating if r not in (analyst, Rating(rec.fake_rating)))
    word = {Rating.BULLISH: "Buy", Rating.NEUTRAL: "Hold", Rating.BEARISH: "Sell"}[other]
    assert index.read(first[:a] + word + first[b:] + rest).shown is other        # the wrong term is what shows
    assert index.read(first + rest).shown is analyst                              # an unchanged sentence: the analyst's
    assert index.read(first[:a] + "Lower Margins" + first[b:] + rest).shown is None  # no rating where it stood


def test_the_closed_form_by_hand():
    planted = pd.DataFrame({"report_id": ["r1", "r2"], "sector": ["Energy", "Utilities"],
                            "analyst_rating": ["bullish", "bearish"], "signal": [0.0, 0.0], "tone": [0.0, 0.0],
                            "opinion_keys": [[], []]})
    cases = pd.DataFrame({"model": "m", "condition": "original", "report_id": ["r1", "r2"], "fake_rating": None})
    labels = pd.Series({"r1": "bullish", "r2": "neutral"})
    prop = {"m": {"follow": 1.0, "skill": 0.0, "tilt": 0.0, "sway": 0.0, "unparsed": 0.5}}
    cells = expected_cells(planted, cases, labels, prop, ["Energy", "Utilities"]).set_index(["metric", "sector"])
    assert cells.loc[("herding", POOLED), "expected"] == pytest.approx(0.5)   # always follows, half unparsed
    assert cells.loc[("herding", POOLED), "sd"] == pytest.approx(np.sqrt(2 * 0.25) / 2)
    assert cells.loc[("accuracy", POOLED), "expected"] == pytest.approx(0.25)  # r1 right half the time, r2 never
    assert cells.loc[("herding", "Energy"), "n"] == 1
    refused = expected_cells(planted, cases.assign(refused=[False, True]), labels, prop, ["Energy", "Utilities"])
    herding = refused.set_index(["metric", "sector"]).loc[("herding", POOLED)]
    assert herding["expected"] == pytest.approx(0.25) and herding["n"] == 2  # a refused prompt: empty, inside N
    p = own_view_probs(0.0, 0.0, 0.0, np.zeros(1), np.zeros(1), False)[0]
    assert p.sum() == pytest.approx(1.0) and p[0] == pytest.approx(p[2]) and p[1] == pytest.approx(0.4514938, abs=1e-6)
