"""Rating extractor, the four conditions, and the stage-02 artifact."""
from __future__ import annotations

import pandas as pd
import pytest

from finlib.finbias.perturb.ratings import extract_analyst_rating, find_rating_mentions, replace_rating
from finlib.finbias.perturb.stage import remove_rating_sentence
from finlib.finbias.sentences import sentence_spans
from finlib.finbias.vocab import CONDITIONS, RATINGS, Rating

B, N, S = Rating.BULLISH, Rating.NEUTRAL, Rating.BEARISH

# Hand-written first sentences in real-world house styles, with the rating a reader assigns.
FIRST_SENTENCES: list[tuple[str, Rating | None]] = [
    # Argus / CFRA / Morningstar / sell-side styles
    ("We reiterate our BUY rating on Oracle Corp. (ORCL) and raise our target to $150.", B),
    ("Argus rates ORCL a BUY with a target price of $150.", B),
    ("We are maintaining our HOLD rating on Microsoft Corp. (MSFT).", N),
    ("We are downgrading Intel Corp. (INTC) to SELL from HOLD.", S),
    ("CFRA maintains its 4-STARS (buy) opinion on shares of JPMorgan Chase & Co.", B),
    ("Maintain Hold.", N),
    ("Maintain Buy; target price raised to $210.", B),
    ("Our rating is Bullish.", B),
    ("Our rating is Neutral, with a fair value estimate of $85.", N),
    ("Our rating is Bearish.", S),
    ("Rating: BUY (from HOLD); Target price: $150.", B),
    ("Rating: Positive.", B),
    ("Recommendation: Underweight.", S),
    ("We initiate coverage of Oracle with an Outperform rating.", B),
    ("We upgrade ORCL from Hold to Buy.", B),
    ("We upgrade ORCL to Buy from Hold on improving cloud margins.", B),
    ("We downgrade the shares to Market Perform from Outperform.", N),
    ("Moving from Neutral to Bullish on stronger free cash flow.", B),
    ("Morgan-style: we rate the stock Overweight.", B),
    ("We rate the shares Equal-Weight.", N),
    ("We remain neutral on the stock pending the merger vote.", N),
    ("Shares are a buy at current levels.", B),
    ("We are bullish on Duke Energy Corp. given rate-base growth.", B),
    ("We have a Strong Buy on Nvidia Corp.", B),
    ("We are reiterating our Sell rating on XYZ Inc. after another guidance cut.", S),
    ("Upgrade to Add from Reduce.", B),
    ("Maintain Reduce.", S),
    ("Buy-rated Oracle reported strong results.", B),
    ("BUY-RATED ORACLE REPORTED STRONG RESULTS.", B),  # the "-rated" suffix in any case
    ("We reiterate our Sector Perform rating.", N),
    ("Our In-Line rating reflects balanced risks.", N),
    ("We expect the shares to outperform the market over the next 12 months.", B),
    ("We are bearish on the stock, as leverage is rising.", S),
    # negations and previous ratings
    ("We are not bullish on the shares.", None),
    ("We are no longer a Buy on this name.", None),
    ("Although we are not bearish on the sector, we rate ORCL Buy.", B),
    ("The stock, previously rated Hold, is now a Buy.", B),
    # no rating: ordinary uses of rating words
    ("Oracle agreed to buy Cerner for $28.3 bn. in cash.", None),
    ("We reduce our EPS estimate to $4.10 from $4.25.", None),
    ("Results were in line with consensus.", None),
    ("Management expects a positive contribution from pricing in 2025.", None),
    ("Sell-side analysts expect revenue growth of 8%.", None),
    ("The company will add 200 stores next year.", None),
    ("Oracle To Buy Cerner For $28 Billion In Cash Deal.", None),
    ("Oracle Corp. reported third-quarter revenue of $13.3 billion.", None),
    ("We maintain that margins will reduce further.", None),
    ("Negative free cash flow weighed on the shares.", None),
    ("The board plans to hold its annual meeting in May.", None),
    ("Investors are likely to sell into strength.", None),
    # ambiguous: two different current ratings
    ("Buy/Hold/Sell ratings are explained on the last page.", None),
    ("We rate ORCL Buy and SAP Sell.", None),
]


@pytest.mark.parametrize("sentence,expected", FIRST_SENTENCES, ids=[s[:40] for s, _ in FIRST_SENTENCES])
def test_extractor_on_first_sentences(sentence: str, expected: Rating | None) -> None:
    assert extract_analyst_rating(sentence + " Revenue rose 5% to $1.2 bn. in Q3.") == expected


def test_enough_and_varied_cases() -> None:
    assert len(FIRST_SENTENCES) >= 40
    assert {r for _, r in FIRST_SENTENCES} == {B, N, S, None}


def test_only_the_first_sentence_is_read() -> None:
    assert extract_analyst_rating("Revenue rose 5%. We rate the shares Buy.") is None
    assert extract_analyst_rating("Maintain Hold. We would Buy below $40.") == N


def test_returns_enum_and_none_for_bad_input() -> None:
    r = extract_analyst_rating("Our rating is Bullish.")
    assert r is Rating.BULLISH and isinstance(r, str)
    assert extract_analyst_rating("") is None
    assert extract_analyst_rating(None) is None  # type: ignore[arg-type]


def test_mention_roles_in_a_transition() -> None:
    roles = [(m.surface, m.role) for m in find_rating_mentions("We upgrade ORCL from Hold to Buy.")]
    assert roles == [("Hold", "previous"), ("Buy", "current")]


# ---- remove / replace -------------------------------------------------------------------

REPORT = ("Argus rates ORCL a BUY with a target price of $150. Oracle Corp. grew cloud revenue 28% "
          "vs. a year ago.\n\nWe think the valuation is compelling. Net debt was approx. $3 bn. at year end.")


def test_remove_rating_sentence_keeps_the_rest_byte_identical() -> None:
    out = remove_rating_sentence(REPORT)
    assert out == REPORT[REPORT.index("Oracle Corp. grew"):]
    assert remove_rating_sentence("Maintain Hold.") == ""
    with pytest.raises(ValueError):
        remove_rating_sentence("   ")


@pytest.mark.parametrize("sentence,new,expected", [
    ("Argus rates ORCL a BUY with a target.", S, "Argus rates ORCL a SELL with a target."),
    ("We initiate with an Outperform rating.", N, "We initiate with a Market Perform rating."),
    ("We initiate with an Outperform rating.", S, "We initiate with an Underperform rating."),
    ("Our rating is Bullish.", N, "Our rating is Neutral."),
    ("Maintain Equal-Weight.", B, "Maintain Overweight."),
    ("A Hold rating is warranted.", B, "A Buy rating is warranted."),
    ("A Hold rating is warranted.", S, "A Sell rating is warranted."),
    ("Shares are a buy.", N, "Shares are a hold."),
    ("We have an Add rating.", N, "We have a Hold rating."),
    ("We have a Hold rating.", B, "We have a Buy rating."),
    ("Rating: Reduce.", B, "Rating: Add."),
    ("We upgrade ORCL from Hold to Buy.", S, "We downgrade ORCL from Hold to Sell."),   # verb agrees
    ("We expect the shares to outperform the market.", N, "We expect the shares to market-perform the market."),
    ("We have a Strong Buy on NVDA.", S, "We have a Strong Sell on NVDA."),
    ("We rate the shares Market-Perform.", B, "We rate the shares Outperform."),
    ("RATING: NEUTRAL.", S, "RATING: BEARISH."),
])
def test_replace_rating_is_grammatical(sentence: str, new: Rating, expected: str) -> None:
    tail = " Revenue rose 5%.\n\nWe like it."
    assert replace_rating(sentence + tail, new) == expected + tail


def test_replace_rating_refuses_same_or_missing_rating() -> None:
    with pytest.raises(ValueError, match="differ"):
        replace_rating("Maintain Hold. Revenue fell.", N)
    with pytest.raises(ValueError, match="no unambiguous rating"):
        replace_rating("Revenue fell. Maintain Hold.", B)


@pytest.mark.parametrize("sentence", [s for s, r in FIRST_SENTENCES if r is not None])
def test_fake_reads_back_and_only_first_sentence_changes(sentence: str) -> None:
    text = sentence + " Oracle Corp. grew 28% vs. a year ago. We like it."
    original = extract_analyst_rating(text)
    for new in RATINGS:
        if new is original:
            continue
        fake = replace_rating(text, new)
        assert fake != text
        assert extract_analyst_rating(fake) is new
        a, b = sentence_spans(text), sentence_spans(fake)
        assert len(a) == len(b)
        assert text[a[0][1]:] == fake[b[0][1]:]  # everything after the first sentence identical


# ---- the stage artifact ----------------------------------------------------------------------

from finlib.finbias.conditions import fake_ratings_for  # noqa: E402
from finlib.finbias.perturb import stage as perturb_stage  # noqa: E402
from finlib.finbias.perturb.lexicon import Lexicon, parse_tff  # noqa: E402
from finlib.finbias.perturb.stage import (  # noqa: E402
    CONDITION_COLUMNS,
    SKIP_NO_RATING,
    build_conditions,
    conditions_summary,
    example_html,
    validate_conditions,
)

TINY_TFF = """\
type=strongsubj len=1 word1=compelling pos1=adj stemmed1=n priorpolarity=positive
type=strongsubj len=1 word1=terrific pos1=adj stemmed1=n priorpolarity=positive
type=strongsubj len=1 word1=worry pos1=anypos stemmed1=y priorpolarity=negative
type=weaksubj len=1 word1=strong pos1=adj stemmed1=n priorpolarity=positive
"""

REPORTS = pd.DataFrame({
    "report_id": ["R1", "R2", "R3", "R4"],
    "text": [
        "We reiterate our BUY rating on Acme Corp. (ACME). Revenue rose 5% vs. a year ago. "
        "We find the valuation compelling.\n\nInvestors worried about U.S. tariffs. Margins were strong.",
        "Our rating is Neutral. Sales in the U.S. fell 2%. The quarter was terrific.",
        "Acme Corp. reported revenue of $1.2 bn. in Q3. Margins rose.",
        "Maintain Hold.",
    ],
    "analyst_rating": ["bullish", "neutral", None, "neutral"],
})


@pytest.fixture()
def tiny_lex() -> Lexicon:
    entries, report = parse_tff(TINY_TFF.splitlines(), "tiny.tff")
    return Lexicon(entries, report, "tiny.tff")


def test_build_conditions_rows_and_schema(tiny_lex: Lexicon) -> None:
    res = build_conditions(REPORTS, seed=1, mode="one", lexicon=tiny_lex)
    df = res.conditions.set_index("item_id")
    assert list(res.conditions.columns) == list(CONDITION_COLUMNS)
    assert res.conditions["item_id"].is_unique and len(df) == 16
    # R1: every condition ok, hand-derived texts
    assert df.loc["R1:no_rating", "text"] == REPORTS.text[0][REPORTS.text[0].index("Revenue"):]
    assert df.loc["R1:no_opinion", "text"] == "Revenue rose 5% vs. a year ago.\n\nMargins were strong."
    assert df.loc["R1:fake_rating", "fake_rating"] in ("neutral", "bearish")
    assert df.loc["R1:fake_rating", "reference_rating"] == df.loc["R1:fake_rating", "fake_rating"]
    assert df.loc["R1:original", "reference_rating"] == "bullish"
    assert df.loc["R2:no_opinion", "text"] == "Sales in the U.S. fell 2%."
    # R3: no rating sentence -> every condition skipped with the reason, nothing guessed
    r3 = res.conditions[res.conditions.report_id == "R3"]
    assert (r3.status == "skipped").all() and (r3.skip_reason == SKIP_NO_RATING).all() and r3.text.isna().all()
    # R4: only the rating sentence -> no_rating / no_opinion skipped, fake still ok
    assert df.loc["R4:no_rating", "status"] == "skipped" and df.loc["R4:fake_rating", "status"] == "ok"
    assert res.report["n_reports_without_rating"] == 1
    assert set(res.lexicon_stats["policy"]) == {"respect", "respect_porter", "ignore"}  # side by side
    for policy in ("respect", "respect_porter", "ignore"):
        stats = res.lexicon_stats[res.lexicon_stats["policy"] == policy].set_index("report_id")
        assert stats.loc["R1", "n_sentences_removed"] == 2 and stats.loc["R1", "n_sentences"] == 4
    assert set(res.triggers["trigger"]) == {"compelling", "worried", "terrific"}
    assert res.triggers.set_index("trigger").loc["worried", "pos_respect"] == "verb 1"
    assert res.report["mpqa"]["mpqa_pos"] == "respect"
    assert res.report["mpqa"]["per_policy"]["respect"]["sentences_removed"] == 3


def test_validation_checks_pass_and_can_fail(tiny_lex: Lexicon) -> None:
    res = build_conditions(REPORTS, seed=1, mode="both", lexicon=tiny_lex)
    checks = validate_conditions(res.conditions, res.subjectivity)
    paper = checks[~checks["check"].str.startswith("sweep")]  # no rating-sweep rows in this run
    assert (checks["n_failed"] == 0).all() and (paper["n_checked"] > 0).all()
    broken = res.conditions.copy()
    i = broken.index[broken.item_id == "R1:fake_rating:bearish"][0]
    broken.loc[i, "text"] = broken.loc[i, "text"].replace("Margins", "Margin")
    j = broken.index[broken.item_id == "R2:no_opinion"][0]
    broken.loc[j, "text"] = "Sales in the U.S. fell 2%. The quarter was terrific."  # a subjective sentence kept
    bad = validate_conditions(broken, res.subjectivity).set_index("check")
    assert bad.loc["fake: only the first sentence differs", "n_failed"] == 1
    assert bad.loc["no_opinion: no strongsubj word left", "n_failed"] == 1


def test_rematch_passed_with_the_same_filter_is_not_redone_but_a_changed_text_is(tiny_lex: Lexicon, tmp_path) -> None:
    from finlib.finbias.perturb.postag import PosTagger

    def run():
        tagger = PosTagger(tmp_path / "tags")
        res = build_conditions(REPORTS, seed=1, mode="one", lexicon=tiny_lex, tagger=tagger, validate=False)
        return res, res.subjectivity
    res, filt = run()
    first = validate_conditions(res.conditions, filt).set_index("check")
    row = "no_opinion: no strongsubj word left"
    assert first.loc[row, "n_checked"] > 0 and first.loc[row, "n_passed_in_an_earlier_run"] == 0
    res, filt = run()  # a rerun: the same texts and filter
    again = validate_conditions(res.conditions, filt).set_index("check")
    assert again.loc[row, "n_passed_in_an_earlier_run"] == again.loc[row, "n_checked"] == first.loc[row, "n_checked"]
    broken = res.conditions.copy()
    j = broken.index[broken.item_id == "R2:no_opinion"][0]
    broken.loc[j, "text"] = "Sales in the U.S. fell 2%. The quarter was terrific."  # a subjective sentence kept
    bad = validate_conditions(broken, filt).set_index("check")
    assert bad.loc[row, "n_failed"] == 1 and bad.loc[row, "n_passed_in_an_earlier_run"] == first.loc[row, "n_checked"] - 1
    assert validate_conditions(broken, filt).set_index("check").loc[row, "n_failed"] == 1  # a failure is never remembered


def test_both_mode_gives_two_fakes_and_item_ids(tiny_lex: Lexicon) -> None:
    res = build_conditions(REPORTS, seed=1, mode="both", lexicon=tiny_lex)
    fakes = res.conditions[(res.conditions.condition == "fake_rating") & (res.conditions.report_id == "R1")]
    assert sorted(fakes.item_id) == ["R1:fake_rating:bearish", "R1:fake_rating:neutral"]
    assert res.conditions.item_id.is_unique


def test_fake_draw_is_seeded_per_report() -> None:
    draws = [fake_ratings_for(f"R{i}", B, seed=7, mode="one")[0] for i in range(200)]
    assert draws == [fake_ratings_for(f"R{i}", B, seed=7, mode="one")[0] for i in range(200)]
    assert set(draws) == {N, S}  # both alternatives occur
    assert draws != [fake_ratings_for(f"R{i}", B, seed=8, mode="one")[0] for i in range(200)]


def test_fake_rating_mode_is_checked_with_the_params(tmp_run) -> None:
    from finlib.finbias.perturb.stage import perturb_params

    assert perturb_params(tmp_run)["fake_rating"] in ("one", "both")
    tmp_run.params["perturb"]["fake_rating"] = "all"
    with pytest.raises(ValueError, match=r"perturb.fake_rating(?s:.*)'all'"):   # the params schema or the stage
        perturb_params(tmp_run)


def test_without_a_lexicon_argument_the_shipped_lexicon_builds_no_opinion() -> None:
    res = build_conditions(REPORTS, seed=1, lexicon=None)
    no_op = res.conditions[res.conditions.condition == "no_opinion"].set_index("report_id")
    assert no_op.loc["R1", "status"] == "ok" and no_op.loc["R2", "status"] == "ok"
    assert "compelling" not in no_op.loc["R1", "text"]          # strongsubj adjective in the shipped lexicon
    assert res.report["lexicon"]["strongsubj_entries"] > 2000


def test_stale_stage00_rating_is_an_error() -> None:
    bad = REPORTS.assign(analyst_rating=["bearish", "neutral", None, "neutral"])
    with pytest.raises(ValueError, match=r"row 0 \(report_id 'R1'\), field 'analyst_rating'"):
        build_conditions(bad, seed=1)


def test_summary_and_example(tiny_lex: Lexicon) -> None:
    res = build_conditions(REPORTS, seed=1, lexicon=tiny_lex)
    summary = conditions_summary(res.conditions).set_index("condition")
    assert summary.loc["original", "items_ok"] == 3 and summary.loc["no_rating", "items_skipped"] == 2
    page = example_html(res.conditions, "R1")
    assert "<mark>BUY</mark>" in page and "<del>We reiterate our BUY rating" in page
    assert page.count("<td>") == 4 and "<del>We find the valuation compelling.</del>" in page


def test_stage_run_synthetic_with_the_default_lexicon_path(tmp_run) -> None:
    from finlib.core.artifacts import read_frame, read_json, write_frame

    write_frame(tmp_run, "reports", REPORTS)
    tmp_run.params["perturb"]["max_unread_rating_share"] = 0.5  # R3 states no rating: 1 of 4 by design
    perturb_stage.run(tmp_run)
    cond = read_frame(tmp_run, "conditions")
    paper = cond[cond.condition.isin([c.value for c in CONDITIONS])]
    assert len(paper) == 16 and not ((cond.condition == "no_opinion") & (cond.skip_reason.str.contains("lexicon",
                                                                                                       na=False))).any()
    assert read_json(tmp_run, "perturb_report")["lexicon"]["source"].endswith("subjclueslen1-HLTEMNLP05.tff")


def test_stage_run_synthetic_without_lexicon_raises(tmp_run) -> None:
    from finlib.core.artifacts import write_frame
    from finlib.finbias.perturb.lexicon import LexiconUnavailable

    tmp_run.params["perturb"]["lexicon_path"] = "data/external/none/missing.tff"
    write_frame(tmp_run, "reports", REPORTS)
    with pytest.raises(LexiconUnavailable, match="missing.tff"):
        perturb_stage.run(tmp_run)


def test_stage_run_real_data_without_lexicon_raises(tmp_run) -> None:
    from finlib.core.artifacts import write_frame
    from finlib.finbias.perturb.lexicon import LexiconUnavailable

    tmp_run.params["perturb"]["lexicon_path"] = "data/external/none/missing.tff"
    tmp_run.params["data"]["source"] = "local"
    write_frame(tmp_run, "reports", REPORTS)
    with pytest.raises(LexiconUnavailable, match="make data"):
        perturb_stage.run(tmp_run)


def test_synthetic_market_round_trip(shared_data) -> None:
    """The generator's first sentences are read back exactly and every invariant holds."""
    from finlib.finbias.data.synth import generate_market
    from finlib.finbias.perturb.lexicon import load_lexicon

    path = shared_data / "mpqa" / "subjclueslen1-HLTEMNLP05.tff"
    if not path.is_file():
        pytest.skip(f"{path} absent")
    reports = generate_market({"n_reports": 150, "n_firms": 40, "bearish_share": 0.1, "words_min": 400, "words_max": 600}, 5).reports
    read = reports["text"].map(lambda t: extract_analyst_rating(t).value)
    assert (read == reports["analyst_rating"]).all()
    lex = load_lexicon(path)
    for policy, some in (("ignore", reports), ("respect", reports.head(20))):  # spaCy tagging: a subset
        res = build_conditions(some, seed=5, mode="both", lexicon=lex, policy=policy)
        checks = validate_conditions(res.conditions, res.subjectivity)
        assert (checks["n_failed"] == 0).all(), (policy, checks.to_string())
        assert (res.conditions["status"] == "ok").all()


@pytest.mark.parametrize("bad", ["fake_ratings", "lexicon_pth", "top_trigger"])
def test_misspelled_perturb_keys_are_errors(tmp_run, bad) -> None:
    from finlib.core.artifacts import write_frame
    from finlib.core.config import ConfigError

    tmp_run.params["perturb"][bad] = "both"
    write_frame(tmp_run, "reports", REPORTS)
    with pytest.raises(ConfigError, match=rf"unknown key(?s:.*){bad}"):
        perturb_stage.run(tmp_run)


def test_example_note_names_path_and_synthetic(tmp_run) -> None:
    from finlib.finbias.perturb.stage import example_note

    path = tmp_run.figures_dir / "example_conditions.html"
    assert example_note(tmp_run, path) == "Saved to `figures/smoke/example_conditions.html` (synthetic data)."
    tmp_run.params["data"]["source"] = "local"
    assert example_note(tmp_run, path) == "Saved to `figures/smoke/example_conditions.html`."


def test_lexicon_latin1_lines_reach_the_stage_report(tmp_run, tmp_path) -> None:
    from finlib.core.artifacts import read_json, write_frame

    lex = tmp_path / "lex.tff"
    lex.write_bytes(b"type=strongsubj len=1 word1=superb pos1=adj stemmed1=n priorpolarity=positive\n"
                    b"type=strongsubj len=1 word1=caf\xe9 pos1=noun stemmed1=n priorpolarity=neutral\n")
    tmp_run.params["perturb"]["lexicon_path"] = str(lex)
    tmp_run.params["perturb"]["lexicon_md5"] = None   # a test lexicon, not the MPQA file
    tmp_run.params["perturb"]["max_unread_rating_share"] = 0.5  # R3 states no rating: 1 of 4 by design
    write_frame(tmp_run, "reports", REPORTS)
    perturb_stage.run(tmp_run)
    lines = read_json(tmp_run, "perturb_report")["lexicon"]["lines_not_utf8_decoded_as_latin1"]
    assert len(lines) == 1 and lines[0].startswith("line 2:") and "caf\u00e9" in lines[0]


def test_mpqa_pos_policy_is_checked_with_the_params(tmp_run) -> None:
    from finlib.finbias.perturb.stage import perturb_params

    assert perturb_params(tmp_run)["mpqa_pos"] == "respect"  # the default: the lexicon's POS honoured
    tmp_run.params["perturb"]["mpqa_pos"] = "sometimes"
    with pytest.raises(ValueError, match=r"perturb.mpqa_pos(?s:.*)'respect', 'respect_porter'(?s:.*)'sometimes'"):
        perturb_params(tmp_run)


def test_ignore_policy_reports_itself_only(tiny_lex: Lexicon) -> None:
    res = build_conditions(REPORTS, seed=1, lexicon=tiny_lex, policy="ignore")
    assert set(res.lexicon_stats["policy"]) == {"ignore"} and "pos_respect" not in res.triggers.columns
    assert res.report["mpqa"]["tagging"] is None and res.subjectivity.tagger is None
    with pytest.raises(ValueError, match="perturb.mpqa_pos must be one of"):
        build_conditions(REPORTS, seed=1, lexicon=tiny_lex, policy="blind")


def test_an_overlong_first_sentence_is_not_searched_for_a_rating():
    from finlib.finbias.perturb.ratings import MAX_RATING_SENTENCE_CHARS, extract_analyst_rating

    filler = "word " * (MAX_RATING_SENTENCE_CHARS // 5)
    assert extract_analyst_rating("We rate Acme a Buy. " + filler) is not None
    assert extract_analyst_rating("We rate Acme a Buy " + filler + ".") is None


def test_conditions_keep_the_line_structure_unless_join_lines(tiny_lex: Lexicon) -> None:
    text = "We reiterate our BUY rating on Acme Corp. (ACME).\nKey points:\n- Revenue rose 4%\n- Margins fell\n\nOk."
    reports = pd.DataFrame({"report_id": ["L1"], "text": [text]})
    kept = build_conditions(reports, seed=1, lexicon=tiny_lex, policy="ignore").conditions.set_index("condition")
    assert kept.loc["original", "text"] == text and "\n- Revenue rose 4%\n- Margins fell" in kept.loc["no_rating", "text"]
    joined = build_conditions(reports, seed=1, lexicon=tiny_lex, policy="ignore", join=True)
    cond = joined.conditions.set_index("condition")
    assert cond.loc["original", "text"] == ("We reiterate our BUY rating on Acme Corp. (ACME). Key points: "
                                            "- Revenue rose 4% - Margins fell\n\nOk.")
    assert joined.report["join_lines"] is True


def test_fake_examples_and_policy_differences_for_the_notebook(tiny_lex: Lexicon) -> None:
    from finlib.finbias.perturb.subjectivity import policy_differences

    reports = pd.DataFrame({"report_id": ["T1", "T2"],
                            "text": ["We upgrade Acme (ACM) to Buy from Hold. Sales rose.", "Maintain Hold. Sales fell."]})
    res = build_conditions(reports, seed=1, mode="both", lexicon=tiny_lex)
    ex = perturb_fake_examples(res.conditions, n=3)
    assert len(ex) == 3 and ex.loc[0, "kind"].startswith("transition")
    t1 = ex[ex.report_id == "T1"].set_index("fake_rating")
    assert t1.loc["bearish", "fake_first_sentence"] == "We downgrade Acme (ACM) to Sell from Hold."
    assert t1.loc["neutral", "fake_first_sentence"] == "We downgrade Acme (ACM) to Hold from Buy."
    assert sum(res.report["fake_rating_rewrites_by_kind"].values()) == 4
    diff = policy_differences(res.report)
    assert list(diff["policies"]) == ["respect vs respect_porter", "respect vs ignore"]


def perturb_fake_examples(conditions, n):
    from finlib.finbias.perturb.stage import fake_examples

    return fake_examples(conditions, n)


def test_joined_subsequence_reads_the_kept_sentences_or_refuses():
    from finlib.finbias.perturb.stage import joined_subsequence

    pool = ["Sales fell 2%.", "Margins rose.", "We love it.", "Costs fell."]
    assert joined_subsequence("Sales fell 2%.\n\nMargins rose. Costs fell.", pool) == ["Sales fell 2%.", "Margins rose.",
                                                                                       "Costs fell."]
    assert joined_subsequence("", pool) == []
    assert joined_subsequence("Costs fell. Margins rose.", pool) is None            # order changed
    assert joined_subsequence("Sales fell 2%. New words. Costs fell.", pool) is None  # a sentence not in the pool
    assert joined_subsequence("Sales fell 2%.;Costs fell.", pool) is None           # more than whitespace between
    assert joined_subsequence("Sales fell 2%. Costs fell", pool) is None            # a sentence cut short
