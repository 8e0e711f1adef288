"""The rehearsal's stage 02 statement check (finlib.rehearsal.statements) on a small messy market, and its power.

A generated market whose every report is laid out as broker text (half provider front pages,
finlib.finbias.data.provider_layouts), run through stage 02's `build_conditions`; the oracle is what the
generator planted (rule, statement span, bytes kept, slots on the providers' scales). Seeded faults: a
statement reader of the first unit only, a removal that takes the next line, fakes whose verb points the
wrong way or whose Zacks number keeps its old point -- each must be reported."""

from __future__ import annotations

import re

import pytest

from finlib.finbias.data.synth_planted import PlantedIndex
from finlib.rehearsal.statements import statement_check

SECTION = {
    "n_reports": 80,
    "n_firms": 8,
    "words_min": 150,
    "words_max": 220,
    "rating_wording": "scales",
    "layout": "structured",
    "messy_share": 1.0,
}


def _conditions(market, reading=None):
    from finlib.finbias.perturb.stage import build_conditions, shipped_lexicon
    from finlib.finbias.perturb.statement import DEFAULT_READING

    # stage 00 reads the rating with the same reader, so the generator's rating column is left out here
    return build_conditions(
        market.reports.drop(columns="analyst_rating"),
        1,
        "one",
        shipped_lexicon(),
        policy="ignore",
        reading=reading or DEFAULT_READING,
    )


@pytest.fixture(scope="module")
def world():
    from finlib.finbias.data.synth import generate_market

    market = generate_market(SECTION, 5)
    return market, _conditions(market), market.reports.set_index("report_id")["text"]


def test_a_correct_stage02_passes_on_provider_pages(world):
    market, res, texts = world
    out = statement_check(market.planted, texts, res.statements, res.conditions)
    assert out["problems"] == []
    layouts = market.truth["report_layout"]
    n_provider = int(layouts.str.startswith("provider:").sum())
    assert n_provider >= 20 and layouts.str.startswith("messy:").sum() >= 20
    c = out["counts"]
    assert c["provider reports"] == n_provider and c["provider removals checked"] >= n_provider - 2
    assert c.get("provider found by rating_field", 0) >= 5 and c.get("provider found by front_matter_sentence", 0) >= 5
    assert c["provider fakes checked"] >= n_provider - 2


def test_the_simulated_models_read_provider_pages_at_their_slots(world):
    """The servers' reader (PlantedIndex) shows the analyst's rating, none, or the fake on provider pages."""
    market, res, _ = world
    index = PlantedIndex(market.planted)
    analyst = dict(zip(market.reports["report_id"], market.reports["analyst_rating"]))
    provider = set(market.truth.loc[market.truth["report_layout"].str.startswith("provider:"), "report_id"])
    ok = res.conditions[(res.conditions["status"] == "ok") & res.conditions["report_id"].isin(provider)]
    assert len(ok) >= 3 * len(provider)
    for rec in ok.itertuples():
        reading = index.read(rec.text)
        want = {"original": analyst[rec.report_id], "fake_rating": rec.fake_rating}.get(rec.condition)
        assert reading.report_id == rec.report_id
        assert (reading.shown.value if reading.shown else None) == want, (rec.condition, rec.text[:160])


def test_a_reader_of_the_first_unit_only_is_reported(world):
    from finlib.finbias.perturb.statement import AUTHORS_READING

    market, _, texts = world
    res = _conditions(market, AUTHORS_READING)
    out = statement_check(market.planted, texts, res.statements, res.conditions)
    assert len(out["problems"]) == 1 and "rule problems" in out["problems"][0]
    n = int(re.match(r"(\d+)", out["problems"][0]).group(1))
    assert n == int((market.planted["rule"] != "first_sentence").sum())


def test_a_removal_taking_the_next_line_is_reported(world):
    market, res, texts = world
    cond = res.conditions.copy()
    rows = cond.index[(cond["condition"] == "no_rating") & (cond["status"] == "ok")]
    cond.loc[rows, "text"] = cond.loc[rows, "text"].map(lambda t: t.split("\n", 1)[-1])
    out = statement_check(market.planted, texts, res.statements, cond)
    assert any("removal problems" in p for p in out["problems"])


def test_fakes_with_a_wrong_verb_or_a_stale_number_are_reported(world):
    """Provider pages' fakes edited: the first move verb flipped, a Zacks number set to #3 whatever its label."""
    market, res, texts = world
    cond = res.conditions.copy()
    provider = market.truth.loc[market.truth["report_layout"].str.startswith("provider:"), "report_id"]
    fake = cond.index[
        (cond["condition"] == "fake_rating") & (cond["status"] == "ok") & cond["report_id"].isin(provider)
    ]
    swap = {"upgrade": "downgrade", "downgrade": "upgrade"}
    before = cond.loc[fake, "text"]
    flipped = before.map(lambda t: re.sub(r"\b(upgrade|downgrade)\b", lambda m: swap[m.group(1)], t, count=1))
    stale = flipped.map(lambda t: re.sub(r"Zacks Rank(:?) #[1245]", r"Zacks Rank\1 #3", t, count=1))
    edited = int((stale != before).sum())
    cond.loc[fake, "text"] = stale
    out = statement_check(market.planted, texts, res.statements, cond)
    fake_problems = [p for p in out["problems"] if "fake problems" in p]
    assert edited >= 5 and len(fake_problems) == 1
    assert int(re.match(r"(\d+)", fake_problems[0]).group(1)) == edited
