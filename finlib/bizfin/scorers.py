"""Rule-based scorers of the six accuracy tasks (AEA, FNC, FTR, ER, SP, FNER): two columns per item.

- **official**: the published rule of the evaluation code released with the paper
  (`finlib.bizfin.official`: the rules of HiThink-Research/BizFinBench commit 6d2a4a6 re-implemented and
  held reply by reply to the authors' scripts; with `bizfin.official_code_dir` stage 07 runs the
  scripts themselves instead). Its quirks are kept: no `<think>` stripping, strict JSON, ER's
  unreadable answer scored 1. An item the published script raises on is NaN with a note.
- **ours**: the tolerant reading. Every difference from the official rule is listed with an example
  in docs/bizfinbench.md:
  - every task reads the reply with `<think>` blocks removed (reasoning is not the answer) and JSON
    through the one tolerant reader (`finlib.llm.replies.read_json_objects`: raw line breaks inside
    strings, fences, single quotes, trailing commas), the whole reply, however long;
  - FNC/FTR: the JSON `answer` field compared as dates, else as numbers at the gold's stated precision
    (half a unit of its last decimal) with units converted both ways (a bare number is in the unit the
    question asks for), else yes/no (true/false = 是/否), else text;
  - AEA: the set of indices under any published key (duplicates ignored);
  - FNER: micro-F1 with multiplicity (extra entities cost), `Financial_Instruments` read as the gold's
    `Financial_Products`;
  - ER: an unreadable answer scores 0 (official: 1); SP: the trend label of the first object holding it.

Unparsed answers score 0 under ours and are flagged (`parsed=False`), never guessed. A call that ended in
an error is not scored here at all (the stage counts it as not answered).
"""
from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from decimal import Decimal, InvalidOperation
from typing import Any

from finlib.bizfin import official as published
from finlib.llm.replies import read_json_objects, strip_think


def whole_reply_objects(text: str) -> list[dict]:
    """Every JSON object of the reply, `<think>` removed, the whole reply read (no length cut)."""
    return read_json_objects(text, max_chars=None)


@dataclass(frozen=True)
class ItemScore:
    """One item's score under the published rule and ours (official NaN when the published script
    leaves the item out of its denominator or raises on it), whether an answer was found, and why not."""

    official: float
    ours: float
    parsed: bool
    answer: str | None
    note: str = ""


OfficialRule = Callable[[str, str], float | None]


def official_value(rule: OfficialRule, gold: str, text: str) -> tuple[float, str]:
    """(official score, note) of one reply under a published rule (`finlib.bizfin.official`: gold, reply ->
    score or None outside N): NaN with the reason where the published script gives none."""
    try:
        v = rule(gold, text)
    except published.PublishedScriptError as exc:
        return math.nan, f"official: {exc}"
    return (math.nan, "official: outside the published N") if v is None else (float(v), "")


# ------------------------------------------------------------------ shared reading helpers

def answer_field(text: str, keys: tuple[str, ...] = ("answer",)) -> tuple[bool, Any]:
    """(found, value) of the first of `keys` in the reply's JSON objects (reasoning stripped)."""
    for obj in whole_reply_objects(text):
        for k in keys:
            if k in obj:
                return True, obj[k]
    return False, None


_DATE_FORMS = (re.compile(r"^(\d{4})年(\d{1,2})月(\d{1,2})日$"), re.compile(r"^(\d{4})-(\d{1,2})-(\d{1,2})$"),
               re.compile(r"^(\d{4})/(\d{1,2})/(\d{1,2})$"))


def parse_date(value: Any) -> date | None:
    """A calendar date written `YYYY年M月D日`, ISO `YYYY-MM-DD` or `YYYY/M/D` (zero padding optional)."""
    if not isinstance(value, str):
        return None
    s = value.strip().strip('"')
    for pat in _DATE_FORMS:
        m = pat.match(s)
        if m:
            try:
                return date(int(m[1]), int(m[2]), int(m[3]))
            except ValueError:
                return None
    return None


# Scale of a unit written after a number; 元 (or another currency written alone) carries none, "" = bare.
UNIT_SCALE: dict[str, Decimal] = {"万亿": Decimal(10) ** 12, "亿": Decimal(10) ** 8, "万": Decimal(10) ** 4,
                                  "千": Decimal(10) ** 3, "%": Decimal("0.01"), "元": Decimal(1), "": Decimal(1)}
_CURRENCY_NAMES = r"元|人民币|美元|港元|港币"
# mantissa, optional exponent (scientific notation: "1.5e3", a JSON number 1.2e-07), scale, currency
_QUANTITY = re.compile(r"^([-+]?\d+(?:\.\d+)?)(?:[eE]([-+]?\d+))?\s*(万亿|亿|万|千|%)?\s*(" + _CURRENCY_NAMES + r")?$")
_QUESTION_UNIT = re.compile(r"单位\s*[:：为是]*\s*[（(]?\s*((?:万亿|亿|万|千)?(?:" + _CURRENCY_NAMES
                            + r")|%|万亿|亿|万|千)")


@dataclass(frozen=True)
class Quantity:
    """A number as written: its value, the decimals it states and its unit ("" when bare, "元" for a
    currency without scale)."""

    value: Decimal
    decimals: int
    unit: str

    def scaled(self, bare_unit: str = "") -> Decimal:
        """The value in base units; a bare number is read in `bare_unit` (the unit the question asks for)."""
        return self.value * UNIT_SCALE[self.unit or bare_unit]


def parse_quantity(value: Any) -> Quantity | None:
    """A number, or a numeric string (scientific notation read) with thousands commas and an optional
    unit (万 / 亿 / % with or without 元, or 元 alone). Anything else after the number ("10以上", "约10") makes it not a number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            return None
        value = repr(value) if isinstance(value, float) else str(value)
    if not isinstance(value, str):
        return None
    m = _QUANTITY.match(value.strip().replace(",", ""))
    if not m:
        return None
    exponent = int(m[2]) if m[2] else 0
    if abs(exponent) > 400:   # beyond any float: not a quantity a model means
        return None
    try:
        num = Decimal(m[1]).scaleb(exponent)
    except InvalidOperation:
        return None
    # the decimals the number states: "1.25e-3" states five (0.00125); "1.5e3" states units
    decimals = max(0, (len(m[1].split(".")[1]) if "." in m[1] else 0) - exponent)
    return Quantity(num, decimals, m[3] or ("元" if m[4] else ""))


def parse_number(value: Any) -> float | None:
    """The plain value of `parse_quantity` in the unit it is written in (None when not a number)."""
    q = parse_quantity(value)
    return None if q is None else float(q.value)


def question_unit(question: str) -> str | None:
    """The unit the question asks the answer in ("单位：亿元" -> "亿", "单位：元" -> "元", "%"), None when unstated."""
    found = _QUESTION_UNIT.findall(question or "")
    if not found:
        return None
    scale = re.sub(_CURRENCY_NAMES, "", found[-1])
    return scale or "元"


def numbers_match(gold: str, pred: Any, unit: str | None = None) -> tuple[bool, str]:
    """Our numeric rule: both sides converted to base units, equal at the gold's stated precision (within
    half a unit of its last decimal, in the gold's unit). A bare number — gold or prediction — is in the
    unit the question asks for (`unit`); a prediction with a scale (万, 亿, %) for a gold whose unit is
    unknown is not a match."""
    g, p = parse_quantity(gold), parse_quantity(pred)
    if g is None or p is None:
        return False, "not a number"
    if p.unit not in ("", "元") and not g.unit and unit is None:
        return False, f"answer in {p.unit}, the gold's unit is not stated"
    bare = unit or ""
    g_scale = UNIT_SCALE[g.unit or bare]
    p_value = p.scaled(bare) / g_scale
    half = Decimal(5) * Decimal(10) ** (-(g.decimals + 1))
    return abs(p_value - g.value) <= half, ""


_YES_NO = {"true": "是", "false": "否", "是": "是", "否": "否", "yes": "是", "no": "否"}


def answers_match(gold: str, pred: Any, unit: str | None = None) -> bool:
    """Our FNC/FTR rule: equal as dates, else as numbers (`numbers_match`), else as yes/no, else as
    stripped text."""
    if pred is None:
        return False
    gd, pd_ = parse_date(gold), parse_date(pred if isinstance(pred, str) else None)
    if gd is not None or pd_ is not None:
        return gd is not None and gd == pd_
    if parse_quantity(gold) is not None:
        return numbers_match(gold, pred, unit)[0]
    g, p = str(gold).strip(), str(pred).strip()
    yn_g, yn_p = _YES_NO.get(g.lower()), _YES_NO.get(p.lower())
    if yn_g is not None and yn_p is not None:
        return yn_g == yn_p
    return g == p


# ------------------------------------------------------------------ FNC, FTR


def _score_answer_field(rule: OfficialRule, gold: str, text: str, question: str) -> ItemScore:
    """FNC and FTR: ours reads the JSON answer field and compares it with `answers_match`."""
    official, note = official_value(rule, gold, text)
    found, value = answer_field(text)
    ours = float(found and answers_match(gold, value, question_unit(question)))
    notes = [n for n in (note, "" if found else "no JSON answer field") if n]
    return ItemScore(official, ours, found, None if value is None else str(value), "; ".join(notes))


def score_fnc(gold: str, text: str, question: str = "") -> ItemScore:
    return _score_answer_field(published.fnc, gold, text, question)


def score_ftr(gold: str, text: str, question: str = "") -> ItemScore:
    return _score_answer_field(published.ftr, gold, text, question)


# ------------------------------------------------------------------ AEA

AEA_KEYS = ("相关新闻序号", "相关内容序号", "无关内容序号", "Relevant Content Numbers", "Irrelevant Content Numbers")


def _aea_predicted(obj: dict | None) -> list | None:
    """The index list under the first published key present with a list (None when absent)."""
    for k in AEA_KEYS:
        if isinstance((obj or {}).get(k), list):
            return obj[k]
    return None


def _ints(values: Any) -> list[int] | None:
    if not isinstance(values, list):
        return None
    try:
        return [int(v) for v in values]
    except (TypeError, ValueError):
        return None


def parse_gold_indices(gold: str) -> list[int]:
    """AEA gold: comma-separated news indices ("1,3")."""
    return [int(x) for x in gold.replace("，", ",").split(",") if x.strip()]


def _first(text: str, read: Callable[[dict], Any]) -> Any:
    """The first JSON object of the reply that `read` finds something in (None when none does)."""
    for obj in whole_reply_objects(text):
        v = read(obj)
        if v is not None:
            return v
    return None


def _with_official(rule: OfficialRule, gold: str, text: str, ours: float, parsed: bool, answer: str | None,
                   note: str = "") -> ItemScore:
    official, onote = official_value(rule, gold, text)
    return ItemScore(official, ours, parsed, answer, "; ".join(n for n in (onote, note) if n))


def score_aea(gold: str, text: str, question: str = "") -> ItemScore:
    gold_idx = parse_gold_indices(gold)
    pred = _ints(_first(text, _aea_predicted))
    ours = float(pred is not None and set(pred) == set(gold_idx))
    return _with_official(published.aea, gold, text, ours, pred is not None,
                          None if pred is None else str(sorted(set(pred))),
                          "" if pred is not None else "no index list under the published keys")


# ------------------------------------------------------------------ ER


def score_er(gold: str, text: str, question: str = "") -> ItemScore:
    """Set of predicted emotion labels (`result` of the first object holding a list) equals the gold
    JSON list; a reply that is only a list is read as the labels."""
    gold_set = set(json.loads(gold))
    pred = _first(text, lambda o: o.get("result") if isinstance(o.get("result"), list) else None)
    if pred is None:
        try:
            bare = json.loads(re.sub(r"^```(?:json)?\s*|\s*```$", "", strip_think(text)), strict=False)
        except (json.JSONDecodeError, RecursionError):   # RecursionError: hostile nesting, not an answer
            bare = None
        pred = bare if isinstance(bare, list) else None
    if pred is None or not all(isinstance(x, str) for x in pred):
        return _with_official(published.er, gold, text, 0.0, False, None, "no emotion list of labels")
    ok = float(set(pred) == gold_set)
    return _with_official(published.er, gold, text, ok, True, json.dumps(pred, ensure_ascii=False))


# ------------------------------------------------------------------ SP

SP_KEY = "涨跌情况"


def score_sp(gold: str, text: str, question: str = "") -> ItemScore:
    """The trend label under `涨跌情况` (first object holding a text label) equals the gold label."""
    value = _first(text, lambda o: o.get(SP_KEY) if isinstance(o.get(SP_KEY), str) and o[SP_KEY].strip() else None)
    ok = float(value is not None and value.strip() == gold.strip())
    return _with_official(published.sp, gold, text, ok, value is not None, value,
                          "" if value is not None else f"no '{SP_KEY}' field")


# ------------------------------------------------------------------ FNER

TYPE_ALIASES = {"Financial_Instruments": "Financial_Products"}


def gold_entities(gold: str) -> list[tuple[str, str]]:
    """FNER gold: a JSON list of groups {"群组1": [{type, text, start_pos, end_pos}, ...]}."""
    groups = json.loads(gold)
    out = []
    for g in groups:
        for ents in g.values():
            out += [(str(e.get("type", "")), str(e.get("text", ""))) for e in ents if isinstance(e, dict)]
    return out


def _entities(obj: dict | None) -> list[tuple[str, str]] | None:
    if not obj or not isinstance(obj.get("results"), list):
        return None
    return [(str(e.get("type", "")), str(e.get("text", ""))) if isinstance(e, dict) else ("", "")
            for e in obj["results"]]


def _hits(gold: list[tuple[str, str]], pred: list[tuple[str, str]]) -> int:
    g, p = Counter(gold), Counter(pred)
    return sum(min(n, p[k]) for k, n in g.items())


def score_fner(gold: str, text: str, question: str = "") -> ItemScore:
    gold_ents = gold_entities(gold)
    pred = _first(text, _entities)
    if pred is None:
        return _with_official(published.fner, gold, text, 0.0, False, None, "no 'results' entity list")
    alias = lambda es: [(TYPE_ALIASES.get(t, t), x) for t, x in es]  # noqa: E731
    hits = _hits(alias(gold_ents), alias(pred))
    denom = len(gold_ents) + len(pred)
    ours = 2 * hits / denom if denom else 1.0
    return _with_official(published.fner, gold, text, ours, True, f"{len(pred)} entities, {hits} hits")


def er_gold(gold: str) -> list:
    labels = json.loads(gold)
    if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
        raise ValueError("expected a JSON list of emotion labels")
    return labels


def fner_gold(gold: str) -> list:
    groups = json.loads(gold)
    if not isinstance(groups, list) or not all(isinstance(g, dict) and all(isinstance(v, list) for v in g.values())
                                               for g in groups):
        raise ValueError('expected a JSON list of groups {"群组1": [entity, ...]}')
    return gold_entities(gold)


def fner_unscorable(gold: str) -> str | None:
    """Why the published FNER rule can never score this gold 1 (None when it can): reported per task in the
    stage report so the official numbers can be read with their ceiling."""
    return None if gold_entities(gold) else "no gold entity: the official score is 0 whatever the answer"


def rule_pair(official: OfficialRule, tolerant: Callable[[str, str, str], tuple[float, bool, str | None, str]]):
    """A task record's scorer from its two readings: the published rule (gold, reply -> score or None) and
    the tolerant one (gold, reply, question -> (ours, parsed, answer, note)); both columns of one item."""

    def score(gold: str, text: str, question: str = "") -> ItemScore:
        ours, parsed, answer, note = tolerant(gold, text, question)
        return _with_official(official, gold, text, ours, parsed, answer, note)

    return score
