"""The corpus-shaped synthetic market: every scale term read back, lists and tables, cached writes."""
from __future__ import annotations

import re

import pytest

from finlib.finbias.data.synth import SynthConfigError, generate_market
from finlib.finbias.data.synth_cache import cached_market
from finlib.finbias.data.synth_corpus import _TEMPLATES, display_term, english_scales
from finlib.finbias.vocab import Rating

SHAPED = {"n_reports": 300, "n_firms": 20, "start": "2013-06-01", "end": "2024-12-31",
          "first_report": "2015-01-01", "words_min": 600, "words_max": 800,
          "rating_wording": "scales", "layout": "structured", "block_share": 0.5}


@pytest.fixture(scope="module")
def shaped():
    return generate_market(SHAPED, seed=4)


def test_every_scale_term_and_action_is_read_back_by_the_extractor():
    from finlib.finbias.perturb.ratings import extract_analyst_rating

    assert len(english_scales()) >= 10
    for scale in english_scales():
        for rating, terms in ((Rating.BULLISH, scale.bullish), (Rating.NEUTRAL, scale.neutral),
                              (Rating.BEARISH, scale.bearish)):
            for term in terms:
                shown = display_term(term)
                for templates in _TEMPLATES.values():
                    for t in templates:
                        sent = t.format(R=shown, P="Underweight" if rating is not Rating.BEARISH else "Overweight",
                                        A="an" if shown[0] in "AEIOU" else "a", C="Corvanta Systems", T="CRVS", Q=2)
                        assert extract_analyst_rating(sent) is rating, sent


def test_generated_first_sentences_match_the_planted_rating(shaped):
    from finlib.finbias.perturb.ratings import extract_analyst_rating

    got = shaped.reports["text"].map(lambda t: str(extract_analyst_rating(t)))
    assert (got == shaped.reports["analyst_rating"]).all()
    first = shaped.reports["text"].str.split("\n").str[0]
    assert first.str.contains(r" to \w[\w -]* from ").any() and first.str.contains("initiat").any()
    assert first.str.contains("downgrade").any() and first.str.contains("upgrade").any()


def test_structured_layout_has_line_broken_lists_and_tables(shaped):
    joined = "\n".join(shaped.reports["text"])
    assert re.search(r"^(?:- |\* |\u2022 )\S", joined, flags=re.M)
    assert re.search(r"^Estimates +FY\d{4}A +FY\d{4}E", joined, flags=re.M)
    assert re.search(r"^Revenue \(\$ mn\) +[\d,]+ +[\d,]+", joined, flags=re.M)


def test_default_wording_and_layout_are_unchanged():
    m = generate_market({"n_reports": 30, "n_firms": 8, "words_min": 400, "words_max": 600}, seed=2)
    joined = "\n".join(m.reports["text"])
    assert not re.search(r"^Estimates +FY", joined, flags=re.M) and "\n- " not in joined
    assert not m.reports["text"].str.split("\n").str[0].str.contains(" from ").any()


def test_unknown_wording_or_layout_is_an_error():
    with pytest.raises(SynthConfigError, match="rating_wording"):
        generate_market({"n_reports": 5, "n_firms": 2, "rating_wording": "fancy"}, 1)
    with pytest.raises(SynthConfigError, match="layout"):
        generate_market({"n_reports": 5, "n_firms": 2, "layout": "pdf"}, 1)


def test_cached_market_reuses_files_for_same_params_and_regenerates_otherwise(tmp_path):
    cfg = {"n_reports": 10, "n_firms": 4}
    paths = cached_market(cfg, 3, tmp_path)
    before = paths["reports"].stat().st_mtime_ns
    assert cached_market(cfg, 3, tmp_path)["reports"].stat().st_mtime_ns == before
    (tmp_path / "fingerprint.txt").write_text("stale\n")
    cached_market(cfg, 3, tmp_path)
    assert (tmp_path / "fingerprint.txt").read_text().strip() != "stale"
    other = cached_market({**cfg, "n_reports": 11}, 3, tmp_path)
    import pandas as pd
    assert len(pd.read_parquet(other["reports"])) == 11
