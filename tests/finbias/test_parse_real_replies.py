"""Answers real models write: list-valued answers, a rating heading then the rating, Chinese labels,
and JSON whose strings hold raw line breaks. Expected ratings are written by hand; None = unparsed."""
from __future__ import annotations

import pytest

from finlib.finbias.answers import parse_rating, parse_rating_detail
from finlib.finbias.vocab import RATING_SCALES, Rating, is_cjk, rating_of
from finlib.llm.replies import read_json_objects

B, N, S = Rating.BULLISH, Rating.NEUTRAL, Rating.BEARISH


@pytest.mark.parametrize("text,expected", [
    ('{"answer": ["bearish"], "reason": "Demand fell."}', S),
    ('{"answer": ["Bullish", "bullish"]}', B),                # repeated, one rating
    ('{"answer": ["bullish", "bearish"]}', None),             # two ratings: ambiguous
    ('{"answer": []}', None),
    ('{"answer": [["bearish"]]}', None),                      # nested lists are not an answer
])
def test_list_valued_answers(text, expected):
    assert parse_rating(text) == expected


@pytest.mark.parametrize("text,expected", [
    ("## Investment Rating\n**Neutral**\n\nThe quarter was mixed.", N),
    ("### My Rating\n\n**Bearish**", S),
    ("### Overall Assessment\n**Bullish**\n\n- revenue up", B),
    ("**Final Verdict**\n\n> **Bullish**", B),
    ("## Answer\n\n- **Neutral**", N),
    ("## Recommendation\nBuy the dip? No. **Neutral**", None),          # the line after is prose
    ("## Rating\n**Bullish** on growth, **bearish** on margins", None),  # two ratings after the heading
    ("## Rating\n**Bullish or Neutral**", None),
])
def test_heading_then_rating(text, expected):
    assert parse_rating(text) == expected


@pytest.mark.parametrize("text,expected", [
    ('{"answer": "看涨", "reason": "收入增长"}', B),
    ('{"answer": "看多"}', B),
    ('{"answer": "买入"}', B),
    ('{"answer": "增持"}', B),
    ('{"answer": "中性"}', N),
    ('{"answer": "持有"}', N),
    ('{"answer": "看跌"}', S),
    ('{"answer": "看空"}', S),
    ('{"answer": "卖出"}', S),
    ('{"answer": "减持"}', S),
    ("答案：看跌", S),
    ("最终答案是中性。", N),
    ("投资评级：买入", B),
    ("我们认为看空，因为需求下滑。", S),
    ("看多", B),
    ("中性。", N),
    ('{"answer": "中性偏多"}', None),        # "neutral leaning bullish": a hedge
    ("答案：看涨或中性", None),
    ("答案：不看涨", None),                   # negated
    ("公司持有大量现金。", None),             # 持有 "holds" in prose is no answer
    ("大股东增持股份。", None),               # 增持 "raised its stake" in prose
    ("市场情绪看涨。", None),                 # the market's mood, not the model's answer
])
def test_chinese_labels(text, expected):
    assert parse_rating(text) == expected


def test_chinese_labels_live_in_the_shared_scale_table():
    cjk = {t: r for sc in RATING_SCALES for r, terms in ((B, sc.bullish), (N, sc.neutral), (S, sc.bearish))
           for t in terms if is_cjk(t)}
    assert cjk == {"看涨": B, "看多": B, "买入": B, "增持": B, "中性": N, "持有": N,
                   "看跌": S, "看空": S, "卖出": S, "减持": S}
    assert all(rating_of(t) is r for t, r in cjk.items())


MULTILINE = '{"answer": "bearish",\n "reason": "Margins fell.\nDebt rose.\n\tGuidance cut."}'


def test_raw_line_breaks_inside_json_strings_read_as_json():
    assert read_json_objects(MULTILINE) == [{"answer": "bearish", "reason": "Margins fell.\nDebt rose.\n\tGuidance cut."}]
    assert parse_rating_detail(MULTILINE) == (S, "json")
    cot = "```json\n{'cot': 'step 1\nstep 2', 'answer': 'neutral',}\n```"     # Python-dict style, trailing comma
    assert read_json_objects(cot) == [{"cot": "step 1\nstep 2", "answer": "neutral"}]
    assert read_json_objects is not None and read_json_objects(cot) == read_json_objects(cot)


def test_json_reader_still_skips_what_it_cannot_read():
    assert read_json_objects('{"answer": "bearish", "reason": "cut off\nhere') == []
    assert read_json_objects('{"a": 1}\n{"b": "x\ny"}') == [{"a": 1}, {"b": "x\ny"}]
