"""Stage 02 on provider front pages: every report's rule is recorded and counted, the authors' protocol is
kept as the first reading, and reports without a readable rating are gated with their own threshold."""

from __future__ import annotations

import pandas as pd
import pytest
from provider_corpus import layouts, render, sentences, takes

from finlib.core.artifacts import read_frame, read_json, write_frame
from finlib.finbias.perturb import stage as perturb
from finlib.finbias.perturb.provider_scales import provider_scales
from finlib.finbias.perturb.stage import UnreadRatingGateError, build_conditions, check_unread_gate
from finlib.finbias.perturb.statement import AUTHORS_READING, RatingReading, find_rating_statement

LAYOUTS = {lay.name: lay for lay in layouts()}
RATED = [s for s in sentences() if s.rating != "none"]


def _frame(names: list[str]) -> pd.DataFrame:
    """One report per layout, the slot filled with the next rated statement that layout takes."""
    rows = []
    for k, name in enumerate(names):
        lay = LAYOUTS[name]
        s = next(x for x in RATED[k:] + RATED if lay.rating != "slot" or takes(lay, x))
        rows.append({"report_id": f"P{k:02d}", "text": render(lay, s.text).text})
    return pd.DataFrame(rows)


FRONT = [
    "plain_first",
    "caps_company_date",
    "summary_heading",
    "header_block",
    "argus_rating_field",
    "zacks_rank_field",
    "cfra_stars_box",
    "morningstar_valuation_field",
    "control_no_rating",
    "unknown_scale_field",
]


def test_rules_are_recorded_per_report_and_counted():
    res = build_conditions(_frame(FRONT), seed=1, mode="one", policy="ignore")
    rules = dict(zip(res.statements["report_id"], res.statements["rule"]))
    assert rules["P00"] == "first_sentence" and rules["P04"] == "rating_field"
    assert rules["P01"] == rules["P02"] == rules["P03"] == "front_matter_sentence"
    assert rules["P08"] == rules["P09"] == "unread"
    block = res.report["rating_statements"]
    assert block["by_rule"] == {"first_sentence": 1, "rating_field": 4, "front_matter_sentence": 3, "unread": 2}
    assert block["unread_share"] == pytest.approx(0.2) and len(block["unread_examples"]) == 2
    assert "P09" in block["unread_examples"][1] and "no known rating scale" in block["unread_examples"][1]
    assert res.report["set_aside"]["n_reports"] == 0 and (res.checks["n_failed"] == 0).all()
    ok = res.conditions[(res.conditions["status"] == "ok") & (res.conditions["condition"] == "original")]
    assert len(ok) == 8


def test_authors_protocol_on_the_same_reports_keeps_only_first_sentence_reports():
    res = build_conditions(_frame(FRONT), seed=1, mode="one", policy="ignore", reading=AUTHORS_READING)
    block = res.report["rating_statements"]
    assert block["by_rule"]["first_sentence"] == 1 and block["by_rule"]["unread"] == 9


def test_guard_stops_with_share_and_five_examples_naming_the_rule():
    names = [
        "control_no_rating",
        "control_headline_prose",
        "unknown_scale_field",
        "not_rated_field",
        "control_no_rating",
        "control_no_rating",
        "plain_first",
        "plain_first",
    ]
    res = build_conditions(_frame(names), seed=1, mode="one", policy="ignore")
    with pytest.raises(UnreadRatingGateError) as err:
        check_unread_gate(res.report, 0.5)
    msg = str(err.value)
    assert "6 reports have no readable rating (75.00%)" in msg and "max_unread_rating_share = 50.00%" in msg
    assert msg.count("P0") == 5 and "no rating statement in the first" in msg and "no known rating scale" in msg
    check_unread_gate(res.report, 0.75)  # at the threshold: passes


def test_stage_writes_the_rule_table_and_applies_the_guard(tmp_run):
    write_frame(tmp_run, "reports", _frame(FRONT))
    tmp_run.params["perturb"]["max_unread_rating_share"] = 0.1
    with pytest.raises(UnreadRatingGateError, match="20.00%"):
        perturb.run(tmp_run)
    table = read_frame(tmp_run, "rating_statements")  # written before the stop
    assert list(table["rule"]).count("unread") == 2
    assert read_json(tmp_run, "perturb_report")["rating_statements"]["max_unread_share"] == 0.1
    tmp_run.params["perturb"]["max_unread_rating_share"] = 0.25
    res = perturb.run(tmp_run)
    assert set(res.tables["rating_statements"]["rule"]) >= {"first_sentence", "rating_field", "unread"}


def test_provider_scale_override_changes_the_reading_and_unlisted_points_are_unread():
    text = "Arista Networks (ANET)\nZacks Rank: #2 (Buy)\n\nEstimates moved up."
    strict = RatingReading(8, provider_scales({"zacks_rank": ["bullish", None, "neutral", "bearish", "bearish"]}))
    got = find_rating_statement(text, strict)
    assert got.rating is None and got.rule == "unread" and "zacks_rank 2" in got.detail
    assert find_rating_statement(text).rating.value == "bullish"
    with pytest.raises(ValueError, match="zacks_rank"):
        provider_scales({"zacks_rank": ["bullish", "neutral"]})
    with pytest.raises(ValueError, match="unknown scale"):
        provider_scales({"tipranks": ["bullish"] * 5})
