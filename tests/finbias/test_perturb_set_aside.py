"""Stage 02 never stops on one report: failures are set aside with their reason, counted, and gated.

The messy broker corpus (finlib.finbias.data.messy_corpus) is checked against its planted metadata: the analyst
rating and the no_rating text come from what was written, not from the extractor the stage uses.
"""
from __future__ import annotations

import pandas as pd
import pytest

from finlib.core.artifacts import read_frame, read_json, write_frame
from finlib.finbias import conditions
from finlib.finbias.data import messy_corpus
from finlib.finbias.perturb import ratings
from finlib.finbias.perturb import stage as perturb
from finlib.finbias.perturb.stage import SET_ASIDE, build_conditions, check_set_aside_gate

REPORTS = pd.DataFrame({
    "report_id": ["A", "B", "C"],
    "text": ["We rate Acme Corp. (ACME) Accumulate with a $50 target. Revenue rose 4%. Costs fell.",
             "We maintain our Hold rating on Beta Inc. (BETA). Orders were flat. Margins held.",
             "We rate Gamma Reduce with a $30 target\nKey points:\n- Sales fell 2%\n- Debt rose"],
})


def test_reduce_add_positive_negative_in_line_are_read_and_faked():
    res = build_conditions(REPORTS, seed=3, mode="both", policy="ignore")
    orig = res.conditions[res.conditions["condition"] == "original"].set_index("report_id")
    assert orig["analyst_rating"].to_dict() == {"A": "bullish", "B": "neutral", "C": "bearish"}
    assert res.report["set_aside"]["n_reports"] == 0 and (res.checks["n_failed"] == 0).all()
    no_rating = res.conditions[res.conditions["condition"] == "no_rating"].set_index("report_id")
    assert no_rating.loc["C", "text"] == "Key points:\n- Sales fell 2%\n- Debt rose"


def test_a_report_whose_fake_cannot_be_written_is_set_aside_not_fatal(monkeypatch):
    real = ratings.rewrite_report_rating

    def broken(text, new, **_):
        if text.startswith("We maintain our Hold"):
            raise ValueError("seeded: no fake for this report")
        return real(text, new)

    monkeypatch.setattr(conditions, "rewrite_report_rating", broken)
    res = build_conditions(REPORTS, seed=3, mode="one", policy="ignore")
    rows = res.conditions[res.conditions["report_id"] == "B"]
    assert (rows["status"] == "skipped").all() and rows["skip_reason"].str.startswith(SET_ASIDE).all()
    assert list(res.set_aside["report_id"]) == ["B"] and "seeded" in res.set_aside["reason"].iloc[0]
    assert res.report["set_aside"]["n_reports"] == 1
    others = res.conditions[res.conditions["report_id"] != "B"]
    assert (others["status"] == "ok").all()


def test_a_report_failing_a_validation_check_is_set_aside_with_the_check(monkeypatch):
    real = ratings.rewrite_report_rating
    monkeypatch.setattr(conditions, "rewrite_report_rating",  # seeded: report A's fake changes nothing
                        lambda text, new, **_: (text, "plain") if text.startswith("We rate Acme") else real(text, new))
    res = build_conditions(REPORTS, seed=3, mode="one", policy="ignore")
    assert list(res.set_aside["report_id"]) == ["A"]
    assert res.set_aside["step"].iloc[0] == "validation"
    checks = res.checks.set_index("check")
    assert checks.loc["fake differs from original", "n_failed"] == 1
    assert checks.loc["fake differs from original", "n_set_aside"] == 1
    perturb.raise_on_failures(res.checks)  # set aside: not a stop
    assert (res.conditions.loc[res.conditions["report_id"] == "A", "status"] == "skipped").all()


def test_the_gate_fails_only_past_the_share():
    report = {"set_aside": {"n_reports": 1, "share": 0.01, "by_step_and_reason": {"validation | x": 1}}}
    check_set_aside_gate(report, 0.01)
    report["set_aside"]["share"] = 0.011
    with pytest.raises(perturb.SetAsideGateError, match="perturb_set_aside"):
        check_set_aside_gate(report, 0.01)


def test_stage_writes_the_set_aside_artifact_and_fails_past_the_gate(tmp_run, monkeypatch):
    tmp_run.params["perturb"]["mpqa_pos"] = "ignore"
    tmp_run.params["perturb"]["sweep_reports"] = 0
    write_frame(tmp_run, "reports", REPORTS)
    res = perturb.run(tmp_run)
    assert read_frame(tmp_run, "perturb_set_aside").empty
    assert read_json(tmp_run, "perturb_report")["set_aside"]["max_share"] == 0.01
    assert res.report["first_sentences_differing_from_punkt"] == 1  # report C's rating line
    real = ratings.rewrite_report_rating
    monkeypatch.setattr(conditions, "rewrite_report_rating", lambda text, new, **_: (_ for _ in ()).throw(
        ValueError("seeded")) if text.startswith("We rate Gamma") else real(text, new))
    with pytest.raises(perturb.SetAsideGateError):
        perturb.run(tmp_run)
    aside = read_frame(tmp_run, "perturb_set_aside")
    assert list(aside["report_id"]) == ["C"]  # written before the gate stops the stage


def _check_against_planted(res, corpus: pd.DataFrame) -> None:
    """The stage's output agrees with what the messy corpus planted (not with the stage's own extractor)."""
    assert res.report["set_aside"]["n_reports"] == 0, res.set_aside.head()
    assert res.report["n_reports_without_rating"] == 0
    c = res.conditions
    orig = c[c["condition"] == "original"].set_index("report_id")
    planted = corpus.set_index("report_id")
    assert (orig["analyst_rating"] == planted["planted_rating"]).all()
    no_rating = c[c["condition"] == "no_rating"].set_index("report_id")["text"]
    after = {r.report_id: r.text[len(r.rating_sentence):].lstrip() for r in corpus.itertuples()}
    assert all(no_rating[rid] == rest for rid, rest in after.items())
    fakes = c[c["condition"] == "fake_rating"]
    assert (fakes["status"] == "ok").all() and (fakes["fake_rating"] != fakes["analyst_rating"]).all()
    for rec in fakes.itertuples():
        assert rec.text.endswith(after[rec.report_id])


def test_stage_02_completes_on_the_messy_corpus_with_every_term_in_every_template():
    corpus = messy_corpus.messy_reports()
    res = build_conditions(corpus[["report_id", "text"]], seed=7, mode="one", policy="ignore")
    _check_against_planted(res, corpus)
    assert res.report["first_sentences_differing_from_punkt"] > len(corpus) // 10


@pytest.mark.slow
def test_stage_02_completes_on_the_messy_corpus_with_the_tagger():
    corpus = messy_corpus.messy_reports()
    res = build_conditions(corpus[["report_id", "text"]], seed=7, mode="both", policy="respect")
    _check_against_planted(res, corpus)


def test_stage_02_completes_on_every_scale_term_in_every_generator_template():
    """Every term of every English scale in every first-sentence template of the rehearsal's generator
    (finlib.finbias.data.synth_corpus), with both fakes: nothing set aside, every planted rating read."""
    from finlib.finbias.data import synth_corpus as sc
    from finlib.finbias.vocab import RATINGS, Rating

    rank = {Rating.BEARISH: 0, Rating.NEUTRAL: 1, Rating.BULLISH: 2}
    rows, planted = [], {}
    for scale in sc.english_scales():
        for rating in RATINGS:
            for term in sc._terms(scale, rating):
                for action, templates in sc._TEMPLATES.items():
                    prev = [t for r in RATINGS if r is not rating and (rank[r] < rank[rating]) == (action == "upgrade")
                            for t in sc._terms(scale, r)] if action in ("upgrade", "downgrade") else [None]
                    if not prev:
                        continue
                    for template in templates:
                        r = sc.display_term(term)
                        first = template.format(R=r, P=sc.display_term(prev[0]) if prev[0] else None,
                                                A="an" if r[0] in "AEIOU" else "a", C="Acme Corp.", T="ACME", Q=3)
                        rid = f"G{len(rows):04d}"
                        rows.append({"report_id": rid, "text": first + " Revenue rose 4%. Costs fell.\n\n"
                                     "Key points:\n- Orders rose\n- Debt fell"})
                        planted[rid] = rating.value
    reports = pd.DataFrame(rows)
    res = build_conditions(reports, seed=11, mode="both", policy="ignore")
    assert res.report["set_aside"]["n_reports"] == 0, res.set_aside.head()
    orig = res.conditions[res.conditions["condition"] == "original"].set_index("report_id")["analyst_rating"]
    assert orig.to_dict() == planted
