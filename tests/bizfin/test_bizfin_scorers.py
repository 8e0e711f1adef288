"""BizFinBench accuracy scorers: hand-made cases for the published rules and ours, including the
official rules' edge cases (absolute tolerance, date strings, partial AEA credit, NER recall)."""
from __future__ import annotations

import json
import math

import pytest

from finlib.bizfin.scorers import (ACCURACY_SCORERS, answers_match, official_fnc, official_ftr, official_unscorable,
                                   parse_date, parse_number, parse_quantity, question_unit, score_aea, score_er,
                                   score_fnc, score_fner, score_ftr, score_sp)


def js(**kw) -> str:
    return json.dumps(kw, ensure_ascii=False)


# ------------------------------------------------------------------ shared matching
@pytest.mark.parametrize("text,expected", [("2024年10月8日", (2024, 10, 8)), ("2024年10月08日", (2024, 10, 8)),
                                           ("2024-10-08", (2024, 10, 8)), ("2024/10/8", (2024, 10, 8)),
                                           ("2024年13月1日", None), ("10月8日", None), (None, None)])
def test_parse_date_forms(text, expected):
    d = parse_date(text)
    assert (None if d is None else (d.year, d.month, d.day)) == expected


@pytest.mark.parametrize("value,expected", [(14.8065, ("14.8065", 4, "")), ("14.8065", ("14.8065", 4, "")),
                                            ("1,234.5", ("1234.5", 1, "")), ("14.81亿元", ("14.81", 2, "亿")),
                                            ("-0.003", ("-0.003", 3, "")), ("15%", ("15", 0, "%")), ("8", ("8", 0, "")),
                                            ("10以上", None), ("约10", None), (True, None), ("abc", None),
                                            (float("nan"), None)])
def test_parse_quantity(value, expected):
    q = parse_quantity(value)
    assert (None if q is None else (str(q.value), q.decimals, q.unit)) == expected


def test_parse_number_never_reads_a_qualified_number():
    assert parse_number("10以上") is None and parse_number("15%") == 15.0


def test_answers_match_rules():
    assert answers_match("14.8065", 14.80649)          # within half a unit of the gold's 4th decimal
    assert not answers_match("14.8065", 14.81)
    assert not answers_match("-1509222038", -1509100000)  # an integer gold is matched to the unit
    assert answers_match("-1509222038", "-1,509,222,038")
    assert answers_match("2024年10月02日", "2024-10-2")
    assert not answers_match("2024年10月02日", "2024年10月3日")
    assert not answers_match("2024年10月02日", 20241002)  # a date gold is never matched by a number
    assert answers_match("是", True) and answers_match("否", "false")
    assert answers_match("每年一次", " 每年一次 ")
    assert not answers_match("10", "10以上")
    assert not answers_match("1", None)


def test_units_converted_to_the_unit_the_question_asks_for():
    assert question_unit("……请计算净利润（单位：亿元），保留4位小数") == "亿"
    assert question_unit("答案单位为元") == "" and question_unit("没有单位说明的问题") is None
    assert answers_match("14.8065", "14.8065亿元", unit="亿")
    assert answers_match("14.8065", "148065万元", unit="亿")
    assert not answers_match("14.8065", "14.8065万元", unit="亿")   # 10,000 times too small
    assert not answers_match("14.8065", "14.8065万元")              # gold's unit unknown: not comparable
    assert answers_match("12.5", "0.125", unit=None) is False
    assert answers_match("12.5", "12.5%", unit="%")


# ------------------------------------------------------------------ FNC
def test_fnc_official_absolute_tolerance_vs_ours():
    s = score_fnc("14.8065", js(cot="...", answer=14.80649))
    assert s.official == 0.0 and s.ours == 1.0 and s.parsed      # 1e-6 absolute: rejected; ours: accepted
    s = score_fnc("14.8065", js(cot="...", answer=14.8065))
    assert s.official == 1.0 and s.ours == 1.0


def test_fnc_official_dates_are_strings():
    s = score_fnc("2024年10月02日", js(cot="x", answer="2024年10月2日"))
    assert s.official == 0.0 and s.ours == 1.0
    assert official_fnc("2024年10月02日", js(cot="x", answer="2024年10月02日")) == 1.0


def test_fnc_official_regex_fallback_and_units():
    # not valid JSON as a whole (text around it): the official regex reads the bare value
    assert official_fnc("4.5", 'Sure: {"cot": "1.2+2.5+0.8", "answer": 4.5}') == 1.0
    # a unit inside the string: the official float() fails, string compare fails; ours converts the
    # unit to the one the question asks for, and refuses it when the question states none
    s = score_fnc("4.5", js(cot="x", answer="4.5亿元"), question="营业收入是多少？（单位：亿元）")
    assert s.official == 0.0 and s.ours == 1.0
    assert score_fnc("4.5", js(cot="x", answer="4.5亿元")).ours == 0.0


def test_fnc_unparsed_is_zero_and_flagged():
    s = score_fnc("4.5", "I think the answer is 4.5")
    assert s.official == 0.0 and s.ours == 0.0 and not s.parsed and s.note


def test_fnc_think_block_stripped_for_ours():
    s = score_fnc("4.5", '<think>{"answer": 9}</think>{"cot": "x", "answer": 4.5}')
    assert s.ours == 1.0 and s.answer == "4.5"


# ------------------------------------------------------------------ FTR
def test_ftr_official_date_forms():
    assert official_ftr("2024年10月8日", '{"cot": "x", "answer": "2024-10-08"}') == 1.0
    assert official_ftr("2024年10月8日", '{"cot": "x", "answer": "2024年10月08日"}') == 1.0
    assert official_ftr("是", '{"answer": true}') == 1.0
    assert official_ftr("12.5", '{"answer": 12.50}') == 1.0


def test_ftr_official_regex_misses_space_before_colon_and_text_answers():
    s = score_ftr("2024年10月8日", '{"cot": "x", "answer" : "2024年10月8日"}')
    assert s.official == 0.0 and s.ours == 1.0
    s = score_ftr("每年一次", js(cot="x", answer="每年一次"))
    assert s.official == 0.0 and s.ours == 1.0
    assert official_unscorable("FTR", "每年一次") and official_unscorable("FTR", "2024年1月4日") is None


def test_ftr_official_uses_last_match():
    assert official_ftr("2024年1月4日", '"answer": "2024年1月3日" ... {"answer": "2024年1月4日"}') == 1.0


# ------------------------------------------------------------------ AEA
def test_aea_exact_partial_and_duplicates():
    exact = score_aea("1,3", js(cot="x", 相关新闻序号=[3, 1]))
    assert exact.official == 1.0 and exact.ours == 1.0
    part = score_aea("1,3", js(cot="x", 相关新闻序号=[1]))
    assert part.official == 0.5 and part.ours == 0.0
    dup = score_aea("1,3", js(cot="x", 相关新闻序号=[1, 1]))
    assert dup.official == 1.0 and dup.ours == 0.0             # official counts duplicates as partial credit
    over = score_aea("1,3", js(cot="x", 相关新闻序号=[1, 3, 3]))
    assert over.official == 1.5 and "> 1" in over.note and over.ours == 1.0  # official above 1: kept, flagged
    assert over.first_release == 0.0
    wrong = score_aea("1,3", js(cot="x", 相关新闻序号=[1, 2]))
    assert wrong.official == 0.0 and wrong.ours == 0.0
    string_ids = score_aea("2", js(相关新闻序号=["2"]))
    assert string_ids.official == 1.0 and string_ids.ours == 1.0


def test_aea_other_published_keys_and_unparsed():
    assert score_aea("2", js(相关内容序号=[2])).official == 1.0
    assert score_aea("2", js(**{"Relevant Content Numbers": [2]})).ours == 1.0
    s = score_aea("2", "news 2 is relevant")
    assert s.official == 0.0 and not s.parsed


# ------------------------------------------------------------------ ER, SP
def test_er_set_equality_and_bare_list():
    assert score_er('["焦虑", "后悔"]', js(cot="x", result=["后悔", "焦虑"])).official == 1.0
    assert score_er('["焦虑", "后悔"]', js(cot="x", result=["焦虑"])).official == 0.0
    assert score_er('["兴奋"]', '```json\n["兴奋"]\n```').ours == 1.0
    s = score_er('["兴奋"]', js(result=[{"a": 1}]))
    assert s.official == 0.0 and not s.parsed


def test_sp_label():
    assert score_sp("上涨", js(cot="x", 涨跌情况="上涨")).official == 1.0
    assert score_sp("上涨", js(cot="x", 涨跌情况="下跌")).official == 0.0
    s = score_sp("上涨", js(cot="x", answer="上涨"))
    assert s.official == 0.0 and not s.parsed


# ------------------------------------------------------------------ FNER
GOLD_NER = json.dumps([{"群组1": [{"type": "Organization", "start_pos": 0, "end_pos": 4, "text": "信义硅业"},
                                 {"type": "Organization", "start_pos": 9, "end_pos": 13, "text": "信义硅业"},
                                 {"type": "Financial_Products", "start_pos": 20, "end_pos": 24, "text": "小康股份"}]}],
                      ensure_ascii=False)


def ents(*pairs) -> str:
    return js(results=[{"type": t, "text": x} for t, x in pairs])


def test_fner_multiplicity_and_recall():
    once = score_fner(GOLD_NER, ents(("Organization", "信义硅业")))
    assert once.official == pytest.approx(1 / 3)               # repeated gold entity needs repeated hits
    full = score_fner(GOLD_NER, ents(("Organization", "信义硅业"), ("Organization", "信义硅业"),
                                     ("Financial_Products", "小康股份")))
    assert full.official == 1.0 and full.ours == 1.0


def test_fner_extra_entities_free_officially_penalised_by_ours():
    spam = ents(("Organization", "信义硅业"), ("Organization", "信义硅业"), ("Financial_Products", "小康股份"),
                *[("Market", f"x{i}") for i in range(9)])
    s = score_fner(GOLD_NER, spam)
    assert s.official == 1.0
    assert s.ours == pytest.approx(2 * 3 / (3 + 12))


def test_fner_type_alias_in_ours_only():
    s = score_fner(GOLD_NER, ents(("Organization", "信义硅业"), ("Organization", "信义硅业"),
                                  ("Financial_Instruments", "小康股份")))
    assert s.official == pytest.approx(2 / 3) and s.ours == 1.0


def test_fner_empty_gold_and_unparsed():
    empty = '[{"群组1": []}]'
    assert official_unscorable("FNER", empty)
    assert score_fner(empty, ents()).official == 0.0 and score_fner(empty, ents()).ours == 1.0
    s = score_fner(GOLD_NER, "信义硅业 is an organisation")
    assert s.official == 0.0 and s.ours == 0.0 and not s.parsed and not math.isnan(s.ours)


# ------------------------------------------------------------------ line breaks, <think>, first release
MULTILINE = {
    "FNC": ("14.8065", '{"cot": "第一步：营收 100\n第二步：除以 6.754", "answer": 14.8065}'),
    "FTR": ("2024年10月8日", '{"cot": "国庆假期\n之后第一个交易日", "answer": "2024年10月8日"}'),
    "AEA": ("1,3", '{"cot": "新闻1相关\n新闻3相关", "相关新闻序号": [1, 3]}'),
    "ER": ('["焦虑"]', '{"cot": "用户担心\n亏损", "result": ["焦虑"]}'),
    "SP": ("上涨", '{"cot": "放量\n突破", "涨跌情况": "上涨"}'),
    "FNER": (GOLD_NER, '{"cot": "两处\n机构", "results": [{"type": "Organization", "text": "信义硅业"}, '
                       '{"type": "Organization", "text": "信义硅业"}, {"type": "Financial_Products", "text": "小康股份"}]}'),
}


@pytest.mark.parametrize("task", sorted(MULTILINE))
def test_multiline_cot_scores_like_its_one_line_form(task):
    gold, multi = MULTILINE[task]
    one_line = multi.replace("\n", " ")
    a, b = ACCURACY_SCORERS[task](gold, multi), ACCURACY_SCORERS[task](gold, one_line)
    assert (a.official, a.ours, a.parsed) == (b.official, b.ours, b.parsed) == (1.0, 1.0, True)


@pytest.mark.parametrize("task", sorted(MULTILINE))
def test_think_block_is_removed_for_every_official_rule(task):
    gold, answer = MULTILINE[task]
    decoy = '<think>{"answer": 9, "相关新闻序号": [2], "result": ["后悔"], "涨跌情况": "下跌", "results": []}</think>'
    s = ACCURACY_SCORERS[task](gold, decoy + answer.replace("\n", " "))
    assert (s.official, s.ours) == (1.0, 1.0)


def test_first_release_rules_kept_beside_the_official_ones():
    unread = score_er('["兴奋"]', "我觉得是兴奋")
    assert unread.official == 0.0 and unread.first_release == 1.0     # the first release scored it 1
    s = score_ftr("是", '{"answer": true}')
    assert s.official == 1.0 and s.first_release == 0.0               # first release: no true -> 是
    assert math.isnan(score_sp("上涨", js(涨跌情况="上涨")).first_release)  # same rule: no separate value
