"""BizFinBench accuracy scorers: hand-made cases for our tolerant reading and, beside it, the official
column (the rules of the code released with the paper; held reply by reply to the authors' scripts in
test_bizfin_official_differential.py): absolute tolerance, strict JSON, no <think> stripping, NER recall."""
from __future__ import annotations

import json
import math

import pytest

from finlib.bizfin.scorers import (
    answers_match,
    parse_date,
    parse_number,
    parse_quantity,
    question_unit,
    score_aea,
    score_er,
    score_fnc,
    score_fner,
    score_ftr,
    score_sp,
)
from finlib.bizfin.tasks import TASKS, official_unscorable


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
    assert question_unit("答案单位为元") == "元" and question_unit("没有单位说明的问题") is None
    assert answers_match("14.8065", "14.8065亿元", unit="亿")
    assert answers_match("14.8065", "148065万元", unit="亿")
    assert not answers_match("14.8065", "14.8065万元", unit="亿")   # 10,000 times too small
    assert not answers_match("14.8065", "14.8065万元")              # gold's unit unknown: not comparable
    assert answers_match("12.5", "0.125", unit=None) is False
    assert answers_match("12.5", "12.5%", unit="%")


# ------------------------------------------------------------------ units, both directions
# (question's unit, gold in that unit, answers that must match, answers that must not)
UNIT_CASES = {
    "元": ("（单位：元）", "1480650000", ["1480650000", "1480650000元", "148065万", "14.8065亿元"], ["14.8065", "148065"]),
    "万": ("（单位：万）", "148065", ["148065", "148065万", "14.8065亿", "1480650000元"], ["1480650000", "14.8065"]),
    "亿": ("（单位：亿）", "14.8065", ["14.8065", "14.8065亿", "148065万", "1480650000元"], ["1480650000", "148065"]),
    "万元": ("（单位：万元）", "148065", ["148065", "148065万元", "14.8065亿元"], ["1480650000", "148065亿元"]),
    "亿元": ("（单位：亿元）", "14.8065", ["14.8065", "14.8065亿元", "148065万元", "1480650000元"],
           ["1480650000", "14.8065万元"]),
    "%": ("（单位：%）", "12.5", ["12.5", "12.5%"], ["0.125", "1250"]),
    "bare": ("请计算比率。", "12.5", ["12.5", "12.50"], ["12.5%", "12.5万", "0.125"]),
}


@pytest.mark.parametrize("unit", sorted(UNIT_CASES))
@pytest.mark.parametrize("scorer", [score_fnc, score_ftr])
def test_units_right_in_both_directions(unit, scorer):
    question, gold, right, wrong = UNIT_CASES[unit]
    for answer in right:
        assert scorer(gold, js(cot="x", answer=answer), question).ours == 1.0, (unit, answer)
    for answer in wrong:
        assert scorer(gold, js(cot="x", answer=answer), question).ours == 0.0, (unit, answer)


def test_a_bare_answer_in_the_questions_unit_is_right_and_a_base_unit_number_wrong():
    q = "净利润是多少？（单位：亿元）"
    assert score_fnc("14.8065", js(answer="14.8065"), q).ours == 1.0
    assert score_fnc("14.8065", js(answer="1480650000"), q).ours == 0.0


# ------------------------------------------------------------------ FNC
def test_fnc_official_absolute_tolerance_vs_ours():
    s = score_fnc("14.8065", js(cot="...", answer=14.80649))
    assert s.official == 0.0 and s.ours == 1.0 and s.parsed      # 1e-6 absolute: rejected; ours: accepted
    s = score_fnc("14.8065", js(cot="...", answer=14.8065))
    assert s.official == 1.0 and s.ours == 1.0


def test_fnc_official_dates_are_strings():
    s = score_fnc("2024年10月02日", js(cot="x", answer="2024年10月2日"))
    assert s.official == 0.0 and s.ours == 1.0
    assert score_fnc("2024年10月02日", js(cot="x", answer="2024年10月02日")).official == 1.0


def test_fnc_official_regex_fallback_and_units():
    # not valid JSON as a whole (text around it): the published regex reads the first "answer": token
    assert score_fnc("4.5", 'Sure: {"cot": "1.2+2.5+0.8", "answer": 4.5}').official == 1.0
    s = score_fnc("4.5", js(cot="x", answer="4.5亿元"), question="营业收入是多少？（单位：亿元）")
    assert s.official == 0.0 and s.ours == 1.0
    assert score_fnc("4.5", js(cot="x", answer="4.5亿元")).ours == 0.0


def test_fnc_unparsed_is_zero_and_flagged():
    s = score_fnc("4.5", "I think the answer is 4.5")
    assert s.official == 0.0 and s.ours == 0.0 and not s.parsed and s.note


def test_fnc_think_block_stripped_for_ours_only():
    s = score_fnc("4.5", '<think>{"answer": 9}</think>{"cot": "x", "answer": 4.5}')
    assert s.ours == 1.0 and s.answer == "4.5"
    assert s.official == 0.0          # the published regex reads the first "answer": the draft inside <think>


def test_fnc_official_reads_a_multi_line_reply_with_control_characters_removed():
    assert score_fnc("14.8065", '{"cot": "第一步\n第二步", "answer": 14.8065}').official == 1.0


# ------------------------------------------------------------------ FTR
def test_ftr_official_date_forms_and_no_boolean_mapping():
    assert score_ftr("2024年10月8日", '{"cot": "x", "answer": "2024-10-08"}').official == 1.0
    assert score_ftr("2024年10月8日", '{"cot": "x", "answer": "2024年10月08日"}').official == 1.0
    s = score_ftr("是", '{"answer": true}')
    assert s.official == 0.0 and s.ours == 1.0        # published: str(True) != "是"
    assert score_ftr("12.5", '{"answer": 12.50}').official == 1.0   # str(12.5) == "12.5"


def test_ftr_official_needs_strict_json_ours_reads_a_multi_line_cot():
    s = score_ftr("2024年10月8日", '{"cot": "国庆\n之后", "answer": "2024年10月8日"}')
    assert s.official == 0.0 and s.ours == 1.0        # a raw line break inside a string: strict JSON fails
    s = score_ftr("每年一次", js(cot="x", answer="每年一次"))
    assert s.official == 1.0 and s.ours == 1.0
    assert official_unscorable("FTR", "每年一次") is None


def test_ftr_official_takes_the_first_parsable_candidate():
    s = score_ftr("2024年1月4日", '```json\n{"answer": "2024年1月3日"}\n```\n{"answer": "2024年1月4日"}')
    assert s.official == 0.0


# ------------------------------------------------------------------ AEA
def test_aea_exact_only_and_int_truncation():
    exact = score_aea("1,3", js(cot="x", 相关新闻序号=[3, 1]))
    assert exact.official == 1.0 and exact.ours == 1.0
    part = score_aea("1,3", js(cot="x", 相关新闻序号=[1]))
    assert part.official == 0.0 and part.ours == 0.0       # no partial credit in the published script
    dup = score_aea("1,3", js(cot="x", 相关新闻序号=[1, 3, 3]))
    assert dup.official == 0.0 and dup.ours == 1.0          # sorted lists differ; ours compares sets
    assert score_aea("1,3", js(相关新闻序号=[1.9, 3])).official == 1.0   # int(1.9) == 1
    string_ids = score_aea("2", js(相关新闻序号=["2"]))
    assert string_ids.official == 1.0 and string_ids.ours == 1.0


def test_aea_other_keys_ours_only_and_unparsed():
    assert score_aea("2", js(相关内容序号=[2])).official == 0.0
    assert score_aea("2", js(**{"Relevant Content Numbers": [2]})).ours == 1.0
    s = score_aea("2", "news 2 is relevant")
    assert s.official == 0.0 and not s.parsed


# ------------------------------------------------------------------ ER, SP
def test_er_set_equality_and_unreadable_scored_one_officially():
    assert score_er('["焦虑", "后悔"]', js(cot="x", result=["后悔", "焦虑"])).official == 1.0
    assert score_er('["焦虑", "后悔"]', js(cot="x", result=["焦虑"])).official == 0.0
    assert score_er('["兴奋"]', '```json\n["兴奋"]\n```').ours == 1.0
    s = score_er('["兴奋"]', "我觉得是兴奋")
    assert s.official == 1.0 and s.ours == 0.0 and not s.parsed   # the published script scores an error 1


def test_sp_label_and_a_fenced_list_the_published_script_raises_on():
    assert score_sp("上涨", js(cot="x", 涨跌情况="上涨")).official == 1.0
    assert score_sp("上涨", js(cot="x", 涨跌情况="下跌")).official == 0.0
    s = score_sp("上涨", js(cot="x", answer="上涨"))
    assert s.official == 0.0 and not s.parsed
    raised = score_sp("上涨", '```json\n["上涨"]\n```')
    assert math.isnan(raised.official) and "raises" in raised.note


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


# ------------------------------------------------------------------ line breaks, <think>, whole replies
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
def test_multiline_cot_scores_like_its_one_line_form_under_ours(task):
    gold, multi = MULTILINE[task]
    one_line = multi.replace("\n", " ")
    a, b = TASKS[task].scorer(gold, multi), TASKS[task].scorer(gold, one_line)
    assert (a.ours, a.parsed) == (b.ours, b.parsed) == (1.0, True)
    assert b.official == 1.0


@pytest.mark.parametrize("task", sorted(MULTILINE))
def test_think_block_is_removed_for_ours(task):
    gold, answer = MULTILINE[task]
    decoy = '<think>{"answer": 9, "相关新闻序号": [2], "result": ["后悔"], "涨跌情况": "下跌", "results": []}</think>'
    s = TASKS[task].scorer(gold, decoy + answer.replace("\n", " "))
    assert s.ours == 1.0


@pytest.mark.parametrize("task", sorted(MULTILINE))
def test_replies_are_read_whole(task):
    """A 30,000-character reasoning before the answer: ours still finds it (no length cut)."""
    gold, answer = MULTILINE[task]
    s = TASKS[task].scorer(gold, "分析。" * 10_000 + answer.replace("\n", " "))
    assert s.ours == 1.0 and s.parsed
