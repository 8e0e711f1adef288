"""The answer parser: realistic model replies, malformed JSON, hedges and hostile text.

Expected ratings are written by hand from reading each reply as a human grader would; None
means "unparsed" (the reply does not commit to exactly one rating).
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from finlib.finbias.answers import answer_from_probs, parse_rating, parse_rating_detail, rating_from_value
from finlib.finbias.vocab import RATING_SYNONYMS, RATINGS, Rating

B, N, S = Rating.BULLISH, Rating.NEUTRAL, Rating.BEARISH

VALID_JSON = [
    ('{"answer": "bullish", "reason": "Revenue beat and guidance raised."}', B),
    ('{"reason": "Margins compress as costs rise.", "answer": "bearish"}', S),
    ('{"answer":"neutral"}', N),
    ('{"Answer": "BULLISH"}', B),
    ('{\n  "reason": "Mixed quarter; valuation fair.",\n  "answer": "Neutral"\n}', N),
    ('```json\n{"reason": "Strong pipeline", "answer": "Bullish"}\n```', B),
    ('```\n{"answer": "bearish", "reason": "Debt load"}\n```', S),
    ('Here is my assessment:\n{"answer": "neutral", "reason": "in line"}\nLet me know if you need more.', N),
    ('{"answer": "Buy", "reason": "cheap"}', B),
    ('{"answer": "Strong Sell"}', S),
    ('{"answer": "Hold"}', N),
    ('{"answer": "Outperform"}', B),
    ('{"answer": "underweight"}', S),
    ('{"answer": "Equal-Weight"}', N),
    ('{"answer": "equal weight"}', N),
    ('{"answer": "Bullish (high conviction)"}', B),
    ('{"result": {"answer": "bearish"}}', S),
    ('{"final_answer": "neutral"}', N),
    ('{"answer": "bullish", "reason": "The analyst says sell, but I disagree {strongly}."}', B),
    ('{"answer": "bearish", "confidence": 0.8, "flags": [1, 2, {"x": null}]}', S),
]
MALFORMED_JSON = [
    ("{'answer': 'bullish', 'reason': 'solid growth'}", B),          # single quotes
    ('{"answer": "neutral", "reason": "fair value",}', N),            # trailing comma
    ("{'answer': 'bearish',}", S),                                   # both
    ('{"answer": "bullish", "reason": "The company reported strong', B),   # cut off in reason
    ('```json\n{"answer": "bearish", "reason": "Falling demand and', S),  # fence + cut off
    ('{"answer": "neutral", "reason": "The company\'s outlook is "balanced"}', N),  # bad inner quotes
    ("{'answer': 'sell', 'reason': 'the firm's debt'}", S),           # apostrophe breaks the dict
    ('{answer: bullish}', B),                                        # unquoted: read as a statement
    ('{"answer": "Neutral" "reason": "missing comma"}', N),
    ('{"answer" : "BEARISH" , "reason" : "x" }', S),
    ('{"reason": "The outlook is bullish because', None),           # cut off before the answer
    ('{"reason": "Bullish catalysts dominate"}', None),               # no answer key at all
    ('{"answer": "bull', None),                                      # cut inside the value
    ('{"answer": ""}', None),
    ('{"answer": null}', None),
    ('{"answer": 1}', None),
    ('{"answer": "N/A", "reason": "insufficient information"}', None),
]
STATEMENTS = [
    ("Answer: Bullish", B),
    ("Final answer: bearish.", S),
    ("my rating is **neutral**", N),
    ("I would rate this a Buy", B),
    ("I'd give it a sell rating.", S),
    ("**Final Answer:** **Bearish**", S),
    ("Rating: Outperform", B),
    ("Recommendation - Hold", N),
    ("Investment rating: Underperform", S),
    ("Neutral.", N),
    ("Bullish", B),
    ("  BEARISH!  ", S),
    ("Hold", N),
    ("I recommend a hold on this stock.", N),
    ("Overall, I am bullish on the company's prospects.", B),
    ("After weighing growth against valuation, my recommendation is: SELL", S),
    ("The analyst's rating is Buy. Having read the report, my final answer: Neutral", N),
    ("Considering everything, the verdict would be neutral.", N),
    ("Answer: Neutral\nReason: The company is in line with peers.", N),
    ("### Answer\nBearish", S),
    ("“Answer”: “Bullish”", B),
    ("My rating is bullish, although the analyst rating is bearish.", B),  # the analyst's is not a slot
    ("**Rating**\nHold", N),
    ("We would rate the shares a Sell.", S),
    ("Answer - Bullish. The market was bearish last year, but demand recovered.", B),
]
# Rating words in free prose describe the report, the market or other people: never an answer.
# (Before the fix any lone strong rating word in prose was read as the answer.)
PROSE = [
    ("The market was bearish last year, but the company grew revenue 12%.", None),
    ("Analysts are bullish on the sector.", None),
    ("Corylstone Aerospace Inc. still stands neutral for the next twelve months while remaining one of "
     "the largest investors in the sector.", None),                  # a default-run fake_rating reply
    ("Investors turned bearish after the earnings miss.", None),
    ("The report describes a bullish trend in cloud revenue.", None),
    ("Sentiment across the sector has been neutral for months.", None),
    ("The consensus rating is bullish.", None),
    ("Analysts consider the stock bullish.", None),
    ("Their view is bearish given the macro backdrop.", None),
    ("The CEO remains bullish on demand in China.", None),
    ("Is the stock bullish? The report gives mixed signals.", None),
    ("The stock is a strong buy.", None),
    ("The revenue outlook looks bullish overall.", None),
    ("Management sounded bullish on the call, although margins were weak.", None),
    ("The analyst rating is bearish.", None),
]
AMBIGUOUS = [
    ("bullish or neutral", None),
    ("Answer: Bullish or Neutral", None),
    ('{"answer": "Neutral to Bullish"}', None),
    ("Rating: neutral/bullish", None),
    ("I am not bullish", None),
    ("My rating is not bearish.", None),
    ("Answer: Bullish\nAnswer: Bearish", None),
    ('{"answer": "bullish"} and then {"answer": "bearish"}', None),
    ("The stock is bullish in the short term but bearish in the long term.", None),
    ("It is between neutral and bullish.", None),
    ("I can't decide between buy and sell.", None),
]
EMPTY_OR_IRRELEVANT = [
    ("", None),
    ("   \n\t ", None),
    (None, None),
    (float("nan"), None),
    ("The company will buy back shares this year.", None),            # common word "buy"
    ("Revenue was in line with expectations.", None),                 # "in line"
    ("The sell-side consensus is positive.", None),                   # "sell-side", weak "positive"
    ("We add capacity and reduce costs.", None),                      # "add", "reduce"
    ("Apple Inc. reported Q3 results. Revenue grew 5% year over year.", None),
    ("I'm sorry, I cannot provide investment advice.", None),
    ("{}", None),
    ("{{{{", None),
    ("]]]}}}'\"\"", None),
    ("<|im_end|>", None),
    ("The company holds a 20% stake.", None),
]
CASES = VALID_JSON + MALFORMED_JSON + STATEMENTS + AMBIGUOUS + EMPTY_OR_IRRELEVANT + PROSE


def test_there_are_at_least_sixty_cases():
    assert len(CASES) >= 60


@pytest.mark.parametrize(("text", "expected"), CASES, ids=[repr(c[0])[:40] for c in CASES])
def test_parse_rating(text, expected):
    assert parse_rating(text) == expected


def test_json_answer_wins_over_rating_words_in_the_reason():
    assert parse_rating('{"reason": "bullish bullish bullish", "answer": "bearish"}') == S


def test_never_defaults_to_neutral():
    assert parse_rating("zzz") is None and parse_rating("Answer: maybe") is None


@pytest.mark.parametrize("rating", RATINGS)
def test_every_synonym_in_an_answer_slot_maps_to_its_rating(rating):
    for term in RATING_SYNONYMS[rating]:
        assert rating_from_value(term) == rating, term
        assert parse_rating(json.dumps({"answer": term.title()})) == rating, term


@pytest.mark.parametrize(("probs", "expected"), [
    ((0.7, 0.2, 0.1), B), ((0.1, 0.6, 0.3), N), ((0.2, 0.3, 0.5), S),
    ((0.4, 0.4, 0.2), None),              # tie at the top: no argmax
    ((0.2, 0.4, 0.4), None),
    ((0.5, 0.25, 0.25), B),               # tie below the top is fine
    ((np.nan, 0.5, 0.5), None),
])
def test_answer_from_probs(probs, expected):
    assert answer_from_probs(*probs) == expected


# ---------------------------------------------------------------- property-based


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_parser_never_raises_on_arbitrary_text(text):
    assert parse_rating(text) in (None, *RATINGS)


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from(list('{}[]"\':,\\ answerbulishNeutralBEAR\n')), max_size=200))
def test_parser_never_raises_on_json_like_noise(text):
    assert parse_rating(text) in (None, *RATINGS)


@settings(max_examples=200, deadline=None)
@given(rating=st.sampled_from(RATINGS), reason=st.text(max_size=200),
       reason_first=st.booleans(), prefix=st.sampled_from(["", "Sure.\n", "```json\n"]),
       case=st.sampled_from([str.lower, str.upper, str.title]), ascii_only=st.booleans(),
       indent=st.sampled_from([None, 2]))
def test_valid_json_answer_parses_to_itself(rating, reason, reason_first, prefix, case, ascii_only, indent):
    obj = {"reason": reason, "answer": case(rating.value)} if reason_first else \
        {"answer": case(rating.value), "reason": reason}
    assert parse_rating(prefix + json.dumps(obj, ensure_ascii=ascii_only, indent=indent)) == rating


# ---------------------------------------------------------------- echoes of the input

REPORT = ("We are initiating coverage of Fenylmora Financial (FNYL). Our rating: Bullish. Recent results. "
          "The shares trade at 17.7x forward earnings vs. a peer median of 14.3x.")


def test_copied_report_is_not_an_answer():
    # a small model that copies the report would otherwise "herd" with the analyst perfectly
    assert parse_rating(REPORT) == B  # "Our rating: Bullish" is a slot when not copied
    assert parse_rating(REPORT, context=REPORT) is None
    assert parse_rating_detail(REPORT[:120], context=REPORT) == (None, "echo_of_input")


def test_own_answer_after_a_copied_passage_still_parses():
    reply = REPORT[:90] + " ... Considering the valuation, my final answer: Neutral"
    assert parse_rating(reply, context=REPORT) == N


def test_echo_guard_ignores_short_coincidences():
    assert parse_rating("Bullish", context="The outlook is Bullish.") == B
    assert parse_rating('{"answer": "bullish"}', context=REPORT) == B


@pytest.mark.parametrize(("text", "note"), [
    ('{"answer": "bearish"}', "json"), ('{"answer": "maybe"}', "json_unreadable"),
    ('{"reason": "cut', "json_without_answer"), ("Answer: Hold", "statement"), ("Neutral", "whole_reply"),
    ("Looks bullish to me overall.", "prose_only"), ("bullish or bearish", "ambiguous"),
    ("Nothing to see.", "no_rating_found"), ("", "empty"),
])
def test_parse_notes(text, note):
    assert parse_rating_detail(text)[1] == note


def test_prose_cases_are_many_and_each_has_a_rating_word():
    """Guard the PROSE list itself: every case must contain a rating word the old fallback took."""
    assert len(PROSE) >= 10
    for text, _ in PROSE:
        assert parse_rating_detail(text)[1] == "prose_only", text


def test_prompt_echo_is_unparsed():
    prompt = ('Respond only with a JSON object of the form {"answer": "...", "reason": "..."}, where '
              '"answer" is one of "bullish", "neutral" or "bearish".')
    assert parse_rating(prompt) is None
    assert parse_rating('{"answer": "bullish|neutral|bearish"}') is None


def test_everyday_rating_words_need_a_slot_but_neutral_is_a_stance():
    # "positive", "buy back", "reduce" are ordinary English (schema.AMBIGUOUS_RATING_TERMS) ...
    assert parse_rating_detail("We are positive on the long-term outlook.") == (None, "no_rating_found")
    assert parse_rating_detail("The company will buy back shares and reduce debt.") == (None, "no_rating_found")
    assert parse_rating("Rating: Reduce") == S
    # ... but in a model's reply "neutral" is the label itself (scoring's local adjustment)
    assert parse_rating("I am neutral on the shares.") == N


# --- reasoning models and the public JSON extractor ----------------------------------------
from finlib.llm.replies import read_json_objects, strip_think  # noqa: E402


@pytest.mark.parametrize("text,expected", [
    ('<think>The analyst says Buy, so maybe bullish?</think>\n{"answer": "bearish"}', S),
    ('Okay, the report is upbeat: bullish.\n</think>\n\n{"answer": "neutral", "reason": "x"}', N),
    ('<think>bullish? bearish? I keep going and run out of tokens', None),
    ('<THINK>answer: bullish</THINK>Answer: Bearish', S),
])
def test_reasoning_is_stripped_before_parsing(text, expected):
    assert parse_rating(text) == expected


def test_thinking_only_is_its_own_reason():
    assert parse_rating_detail("<think>answer: bullish, no wait")[1] == "thinking_only"


def test_strip_think_keeps_the_answer_only():
    assert strip_think('<think>a</think> x <think>b</think> y') == "x  y"
    assert strip_think("reasoning</think>answer") == "answer"
    assert strip_think("answer <think>unfinished") == "answer"
    assert strip_think("no tags") == "no tags"


def test_json_objects_fenced_and_thinking():
    reply = ('<think>{"answer": "bullish"}</think>Here:\n```json\n{"answer": "Bearish", "reason": "x"}\n```\n'
             "and {'score': 3,}")
    assert read_json_objects(reply) == [{"answer": "Bearish", "reason": "x"}, {"score": 3}]
    assert read_json_objects("no json here") == []
    assert read_json_objects('{"a": {"b": 1}}') == [{"a": {"b": 1}}]  # nested stays inside its parent


def test_json_objects_bounded_on_hostile_input():
    assert read_json_objects("{" * 1_000_000) == []


# --- the JSON keys models use for their answer; strict about prose ------------------------
@pytest.mark.parametrize("text,expected", [
    ('{"rating": "Buy", "reason": "x"}', B),
    ('{"recommendation": "underweight"}', S),
    ('{"Investment Rating": "Hold"}', N),
    ('{"decision": "bearish", "reasoning": "weak demand"}', S),
    ('{"final_recommendation": "Outperform"}', B),
    ('{"analysis": {"rating": "neutral"}}', N),
    ('{"answer": "bearish", "recommendation": "buy"}', S),      # the authors' field wins
    ('{"rating": "buy", "recommendation": "sell"}', None),       # two different answers: ambiguous
    ('{"analyst_rating": "buy", "reason": "..."}', None),        # someone else's view is no answer
    ('{"consensus": "bullish"}', None),
    ('```json\n{"rating": "Sell", "reason": "cut off', S),        # broken JSON, alternative key
    ('The rating is buy according to the analyst.', None),       # prose stays unparsed
])
def test_alternative_answer_keys(text, expected):
    assert parse_rating(text) == expected


def _pred(**kw):
    import pandas as pd

    from finlib.finbias.answers import parse_predictions

    row = {"item_id": "r:original", "model": "m", "mode": "generate", "raw_text": '{"answer": "bullish"}',
           "p_bullish": np.nan, "p_neutral": np.nan, "p_bearish": np.nan, "status": "ok",
           "truncated_output": False, **kw}
    return parse_predictions(pd.DataFrame([row])).iloc[0]


def test_a_cut_reply_holding_its_answer_is_read_as_its_own_status():
    row = _pred(truncated_output=True, raw_text='{"answer": "bullish", "reason": "The company')
    assert row["answer"] == "bullish" and row["parse_note"] == "truncated_read" and bool(row["answered"])
    row = _pred(truncated_output=True, raw_text='Answer: Bearish. The margins fell and the guidance was')
    assert row["answer"] == "bearish" and row["parse_note"] == "truncated_read"


@pytest.mark.parametrize("text", [
    '{"reason": "The company grew its sales while',          # cut before its answer
    '<think>The report says Buy, so bullish seems',           # cut while thinking: never read
    '{"answer": "bulli',                                      # the value itself cut
    "Answer: bullish",                                        # the cut fell on the rating ("bullish or neutral"?)
    "",
])
def test_a_cut_reply_without_a_whole_answer_stays_unparsed(text):
    row = _pred(truncated_output=True, raw_text=text)
    assert row["answer"] is None and row["parse_note"] == "truncated" and bool(row["answered"])


def test_not_answered_is_apart_from_unparsed():
    row = _pred(status="error", raw_text=None)
    assert row["answer"] is None and row["parse_note"] == "not_answered" and not row["answered"]
    row = _pred(raw_text="I cannot decide.")
    assert row["answer"] is None and row["parse_note"] != "not_answered" and bool(row["answered"])
    assert _pred(truncated_output=None)["answer"] == "bullish"   # unknown finish reason: read normally


@pytest.mark.parametrize("text,expected", [
    ('{"answer": "Sector Weight"}', N),
    ("Rating: Perform", N),
    ("We expect the shares to perform in line with the market.", None),   # everyday English in prose
    ('{"recommendation": "Market Weight"}', N),
])
def test_broker_scale_terms(text, expected):
    assert parse_rating(text) == expected
