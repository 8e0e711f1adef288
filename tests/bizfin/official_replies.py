"""Replies in the shapes models write them, right and wrong, for the differential test of the official
column against the authors' scripts (tests/bizfin/test_bizfin_official_differential.py).

The replies are built from the published items only (gold answers, entity lists); nothing here reads
a reply with project code, so the comparison shares no part with either scorer.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

LONG = "根据题目给出的数据逐步分析。" * 2200          # ~30k characters of reasoning


def _js(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


def shaped(obj: dict, key: str, value: Any, long_reply: bool) -> Iterator[tuple[str, str]]:
    """(shape, reply) for one answer object: the five everyday shapes and the adversarial ones."""
    one = _js(obj)
    yield "one_line_json", one
    multi = "{\n" + ",\n".join(f'  "{k}": ' + (f'"{v}"' if isinstance(v, str) else _js(v))
                               for k, v in obj.items()) + "\n}"
    yield "multi_line_cot", multi
    yield "fenced", f"```json\n{_js(obj)}\n```"
    yield "think_first", f"<think>\n先看题目。草稿：{{\"{key}\": \"草稿\"}}\n再核对一遍。\n</think>\n\n{one}"
    yield "prose", f"经过计算与核对，{key} 是 {value}。"
    yield "prose_then_json", f"分析如下：\n数据来自题干。\n\n最终结果：{one}\n以上。"
    yield "python_dict", repr(obj)
    yield "two_objects", _js({key: "不确定"}) + "\n" + one
    yield "bare_list", _js([value])
    yield "fenced_list", f"```json\n{_js([obj])}\n```"
    yield "json_prefix", f"json{one}"
    yield "unclosed_think", f"<think>\n还在想 {one}"
    if long_reply:
        yield "30k_reply", f"{LONG}\n{one}"


def value_forms(gold: str) -> list[Any]:
    """The gold as a string and, when it is a number, as a JSON number too."""
    forms: list[Any] = [gold]
    try:
        x = float(gold)
        forms.append(int(x) if x.is_integer() and "." not in gold else x)
    except ValueError:
        pass
    return forms


def wrong_value(gold: str) -> str:
    """A wrong answer of the same kind."""
    try:
        return repr(float(gold) + 1.5)
    except ValueError:
        return gold + "之后" if gold else "错误"


def answer_replies(gold: str, long_reply: bool) -> Iterator[tuple[str, str]]:
    """FNC/FTR: {"cot", "answer"} replies, right (every value form) and wrong, plus booleans and null."""
    for value in value_forms(gold):
        for shape, text in shaped({"cot": "先求和，再相除。", "answer": value}, "answer", value, long_reply):
            yield f"right/{shape}", text
    for shape, text in shaped({"cot": "估算。", "answer": wrong_value(gold)}, "answer", wrong_value(gold), False):
        yield f"wrong/{shape}", text
    yield "bool", _js({"answer": True})
    yield "null", _js({"answer": None})
    yield "unit", _js({"answer": f"{gold}亿元"})


def fner_replies(gold: str, long_reply: bool) -> Iterator[tuple[str, str]]:
    """FNER: the gold entities as `results` (right), one dropped and one retyped (wrong), adversarial."""
    ents = [e for group in json.loads(gold) for es in group.values() for e in es]
    pairs = [{"type": e.get("type"), "text": e.get("text")} for e in ents]
    for shape, text in shaped({"results": pairs}, "results", pairs, long_reply):
        yield f"right/{shape}", text
    wrong = pairs[1:] + [{"type": "Location", "text": p["text"]} for p in pairs[:1]]
    for shape, text in shaped({"results": wrong}, "results", wrong, False):
        yield f"wrong/{shape}", text
    yield "results_null", _js({"results": None})
    yield "results_strings", _js({"results": [p["text"] for p in pairs] or ["x"]})
    yield "duplicated", _js({"results": pairs + pairs})


def fdd_verdicts(i: int) -> Iterator[tuple[str, str]]:
    """FDD judge replies: the published {"评分分数", "描述"} verdict, high (right) and low (wrong)."""
    for label, s in (("right", 100 if i % 2 else 60), ("wrong", 0)):
        v = {"评分分数": str(s), "描述": "趋势与数据一致。"}
        yield f"{label}/one_line_json", _js(v)
        yield f"{label}/multi_line", f'{{\n  "评分分数": "{s:d}",\n  "描述": "第一行\n第二行"\n}}'
        yield f"{label}/fenced", f"```json\n{_js(v)}\n```\n补充说明。"
        yield f"{label}/think_first", f"<think>先看数据。</think>\n{_js(v)}"
        yield f"{label}/prose", f"评分分数：{s}。描述：数据一致。"
        yield f"{label}/number", _js({"评分分数": s, "描述": "x"})
        yield f"{label}/float", _js({"评分分数": f"{s}.5"})
        yield f"{label}/python_dict", repr(v)
        yield f"{label}/list", _js([v])
        yield f"{label}/no_score", _js({"描述": "趋势描述错误。"})   # JSON without the score: twice in the published N


def fqa_verdicts(i: int) -> Iterator[tuple[str, str]]:
    """FQA judge replies: the published {"评分结果", "总评分": {..., "总分"}} verdict, high and low."""
    for label, total in (("right", 87.2 + i % 7), ("wrong", 0)):
        v = {"评分结果": {"准确性": {"得分": 23, "描述": "正确"}}, "总评分": {"最终评分": 21.8, "总分": total}}
        yield f"{label}/one_line_json", _js(v)
        yield f"{label}/multi_line", _js(v).replace(", ", ",\n  ")
        yield f"{label}/fenced", f"```json\n{_js(v)}\n```"
        yield f"{label}/think_first", f"<think>逐项打分。</think>\n{_js(v)}"
        yield f"{label}/prose", f'各维度得分如下，"总分": {total}'
        yield f"{label}/string_total", _js({"总评分": "总分很高"})
        yield f"{label}/python_dict", repr(v)
        yield f"{label}/negative", _js({"总评分": {"总分": -5}})
