"""Rule-based scorers of the six accuracy tasks (AEA, FNC, FTR, ER, SP, FNER).

Each scorer returns the **official** score, i.e. the rule of the published evaluation code
(`HiThink-Research/BizFinBench`, `benchmark_code/BizFinBench/eval_*.py` and `utils/JsonPaser.py`,
read to learn the rules; this is our own implementation) pinned to one revision,
`OFFICIAL_RULES_COMMIT` (also `bizfin.official_rules_commit` in params and in every BizFinBench
caption), and **ours** beside it where an official rule looks wrong. Where the first public release
(`FIRST_RELEASE_COMMIT`) scored differently, its score is kept too (`first_release`); the task by
task list is `RULE_REVISIONS` and docs/bizfinbench.md.

Every rule reads the reply with `<think>` blocks removed (all six tasks alike: reasoning is not the
answer) and JSON through the one tolerant reader (`finlib.llm.answers.json_objects`: raw line breaks
inside strings, fences, trailing commas), so a multi-line `cot` scores exactly like its one-line form.

- FNC: the official rule compares numbers with an absolute 1e-6 tolerance, dates as strings and never
  reads a unit. Ours: numbers equal at the gold's stated precision (half a unit of its last decimal),
  units 万 / 亿 / % converted to the unit the question asks for (a scaled answer for a gold whose unit is
  unknown is not a match), "10以上" is not a number; dates as dates.
- FTR: the official regex reads the last `"answer":` value made only of digits, `./-年月日是否` or
  true/false. Ours reads the JSON `answer` field with the FNC matching rules.
- AEA: the official partial credit is len(pred)/len(gold) when the predicted indices are a subset,
  counting duplicates, so [1, 3, 3] against "1,3" scores 1.5: kept as the official value and flagged
  in the note. Ours: the exact set of news indices (1 or 0).
- FNER: the official score is recall over gold entities with multiplicity (extra entities cost
  nothing); the prompt names the type `Financial_Instruments` while the gold uses
  `Financial_Products`. Ours: micro-F1 with multiplicity, the two type names treated as one.
- ER, SP: the official rules (set equality of emotion labels; exact trend label) are kept as ours.

Unparsed answers score 0 under both rules and are flagged (`parsed=False`), never guessed. A call
that ended in an error is not scored here at all (the stage counts it as not answered).
"""
from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any, Callable

from finlib.llm.answers import json_objects, strip_think

# The revision of the published evaluation code whose rules `official_*` implement (the commit that
# adds AEA's second script, eval_AEA_2.py), and the first public release, whose different rules are
# kept as `first_release` where they change a score.
OFFICIAL_RULES_COMMIT = "708d692bc6aba4f5f932512678dae4ad1b151aed"
FIRST_RELEASE_COMMIT = "d355b5f8aac502e0d5e8085a72f94f758720b9b7"

# Task by task: the published file the official rule follows, and what the first release did instead.
RULE_REVISIONS: dict[str, dict[str, str]] = {
    "AEA": {"file": "eval_AEA_2.py",
            "first_release": "eval_AEA.py (named by the configuration; not in the stored copy read here, described "
                             "by those who read it as exact list equality, no partial credit: unverified)"},
    "FNC": {"file": "eval_financial_calculation.py", "first_release": "same rule"},
    "FTR": {"file": "eval_financial_timereason.py (regex on the last \"answer\":)",
            "first_release": "JSON answer field via the first-release JsonPaser, dates as dates, else exact "
                             "string equality (no float comparison, no true/false -> 是/否)"},
    "ER": {"file": "eval_financial_sentiment.py",
           "first_release": "an answer that cannot be read (no JSON list, no 'result') scores 1, not 0"},
    "SP": {"file": "eval_stock_prediction.py", "first_release": "same rule (JSON reader differs, see AEA/ER/SP/FNER)"},
    "FNER": {"file": "eval_fin_ner.py",
             "first_release": "same rule, but the first-release configuration points FNER at the FTR script"},
    "JSON": {"file": "utils/JsonPaser.py (shortest readable candidate; raw line breaks escaped)",
             "first_release": "the first ```json fence / json{...} / greedy {...} span that parses, no repair"},
}


@dataclass(frozen=True)
class ItemScore:
    """One item's score under the published rule and ours (official NaN when the official code
    leaves the item out of its denominator), the first release's score (NaN for tasks whose
    first-release rule is the official one), whether an answer was found, and why not."""

    official: float
    ours: float
    parsed: bool
    answer: str | None
    note: str = ""
    first_release: float = math.nan


# ------------------------------------------------------------------ shared reading helpers

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _shortest_object(text: str) -> dict | None:
    """The official JsonPaser's choice: of all readable JSON objects, the shortest."""
    objs = json_objects(text)
    return min(objs, key=lambda o: len(json.dumps(o, ensure_ascii=False))) if objs else None


def answer_field(text: str, keys: tuple[str, ...] = ("answer",)) -> tuple[bool, Any]:
    """(found, value) of the first of `keys` in the reply's JSON objects (reasoning stripped)."""
    for obj in json_objects(text):
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


# Scale of a unit written after a number; 元 (and other currency names) carry no scale.
UNIT_SCALE: dict[str, Decimal] = {"万亿": Decimal(10) ** 12, "亿": Decimal(10) ** 8, "万": Decimal(10) ** 4,
                                  "千": Decimal(10) ** 3, "%": Decimal("0.01"), "": Decimal(1)}
_CURRENCY = r"(?:元|人民币|美元|港元|港币)?"
_QUANTITY = re.compile(r"^([-+]?\d+(?:\.\d+)?)\s*(万亿|亿|万|千|%)?\s*" + _CURRENCY + r"$")
_QUESTION_UNIT = re.compile(r"单位\s*[:：为是]*\s*[（(]?\s*((?:万亿|亿|万|千)?(?:元|人民币|美元|港元|港币)|%|万亿|亿|万|千)")


@dataclass(frozen=True)
class Quantity:
    """A number as written: its value, the decimals it states and the unit written after it."""

    value: Decimal
    decimals: int
    unit: str

    def scaled(self) -> Decimal:
        return self.value * UNIT_SCALE[self.unit]


def parse_quantity(value: Any) -> Quantity | None:
    """A number, or a numeric string with thousands commas and an optional unit (万 / 亿 / % with or
    without 元). Anything else after the number ("10以上", "约10") makes it not a number."""
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
    try:
        num = Decimal(m[1])
    except InvalidOperation:
        return None
    decimals = len(m[1].split(".")[1]) if "." in m[1] else 0
    return Quantity(num, decimals, m[2] or "")


def parse_number(value: Any) -> float | None:
    """The plain value of `parse_quantity` in the unit it is written in (None when not a number)."""
    q = parse_quantity(value)
    return None if q is None else float(q.value)


def question_unit(question: str) -> str | None:
    """The unit the question asks the answer in ("单位：亿元" -> "亿"; "" for 元), None when unstated."""
    found = _QUESTION_UNIT.findall(question or "")
    return re.sub(r"元|人民币|美元|港元|港币", "", found[-1]) if found else None


def numbers_match(gold: str, pred: Any, unit: str | None = None) -> tuple[bool, str]:
    """Our numeric rule: the prediction, converted to the gold's unit, equals the gold at the gold's
    stated precision (within half a unit of its last decimal). The gold's unit is the one written
    after it, else the one the question asks for (`unit`); a scaled prediction (万, 亿, %) for a gold
    whose unit is unknown is not a match."""
    g, p = parse_quantity(gold), parse_quantity(pred)
    if g is None or p is None:
        return False, "not a number"
    g_unit = g.unit or (unit or "")
    if p.unit and not g.unit and unit is None:
        return False, f"answer in {p.unit}, the gold's unit is not stated"
    p_value = p.scaled() / UNIT_SCALE[g_unit]
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


# ------------------------------------------------------------------ FNC


_FNC_REGEX = re.compile(r'"answer"\s*:\s*([^,}\s]+)')


def official_fnc_answer(text: str) -> Any:
    """The published FNC extraction: control characters removed, the whole reply as JSON, else a
    regex on `"answer":`."""
    t = _CONTROL.sub("", strip_think(text or ""))
    try:
        obj = json.loads(t)
        return obj.get("answer", "") if isinstance(obj, dict) else None
    except json.JSONDecodeError:
        m = _FNC_REGEX.search(t)
        if not m:
            return None
        v = m.group(1)
        return v[1:-1] if v.startswith('"') and v.endswith('"') and len(v) >= 2 else v


def official_fnc(gold: str, text: str) -> float:
    """Float equality within an absolute 1e-6, else exact string equality (published rule)."""
    pred = official_fnc_answer(text)
    try:
        p = float(pred) if pred is not None else None
        g = float(gold) if gold else None
        return float(p is not None and g is not None and abs(p - g) < 1e-6)
    except (TypeError, ValueError):
        return float(str(pred).strip() == str(gold).strip())


def _score_answer_field(official: float, gold: str, text: str, question: str,
                        first_release: float = math.nan) -> ItemScore:
    """FNC and FTR: our rule reads the JSON answer field and compares it with `answers_match`."""
    found, value = answer_field(text)
    ours = float(found and answers_match(gold, value, question_unit(question)))
    return ItemScore(official, ours, found, None if value is None else str(value),
                     "" if found else "no JSON answer field", first_release)


def score_fnc(gold: str, text: str, question: str = "") -> ItemScore:
    return _score_answer_field(official_fnc(gold, text), gold, text, question)


# ------------------------------------------------------------------ FTR

_FTR_REGEX = re.compile(r'"answer":\s*"?((?:[0-9./\-年月日是否]+|true|false))', re.IGNORECASE)
_OFFICIAL_DATE_FORMATS = ("%Y年%m月%d日", "%Y-%m-%d", "%Y/%m/%d")


def _official_date(s: Any) -> datetime | None:
    if not isinstance(s, str):
        return None
    s = s.strip()
    if s.startswith('"') and s.endswith('"'):
        s = s[1:-1]
    for fmt in _OFFICIAL_DATE_FORMATS:
        try:
            return datetime.strptime(s, fmt)
        except ValueError:
            continue
    return None


def official_ftr(gold: str, text: str) -> float:
    """Last regex match of `"answer":`; dates compared as dates, else floats, else text with
    true/false read as 是/否 (published rule)."""
    matches = _FTR_REGEX.findall(strip_think(text or ""))
    pred = matches[-1] if matches else ""
    gd, pdt = _official_date(gold), _official_date(pred)
    if gd and pdt:
        return float(gd == pdt)
    try:
        return float(float(gold) == float(pred))
    except (TypeError, ValueError):
        p = {"true": "是", "false": "否"}.get(pred.strip().lower(), pred)
        return float(str(gold).strip() == str(p).strip())


def first_release_ftr(gold: str, text: str) -> float:
    """The first release's FTR rule: the JSON answer field, dates as dates, else exact strings."""
    obj = _shortest_object(text)
    pred = obj.get("answer", "") if obj else ""
    gd, pdt = _official_date(gold), _official_date(pred)
    if gd and pdt:
        return float(gd == pdt)
    return float(str(gold).strip() == str(pred).strip())


def score_ftr(gold: str, text: str, question: str = "") -> ItemScore:
    return _score_answer_field(official_ftr(gold, text), gold, text, question, first_release_ftr(gold, text))


# ------------------------------------------------------------------ AEA

AEA_KEYS = ("相关新闻序号", "相关内容序号", "无关内容序号", "Relevant Content Numbers", "Irrelevant Content Numbers")


def _aea_predicted(obj: dict | None) -> list | None:
    """The index list under the published key order (first non-empty), None when absent."""
    if not obj:
        return None
    if obj.get("相关新闻序号"):
        return obj["相关新闻序号"]
    if any("序号" in k for k in obj):
        return obj.get("相关内容序号") or obj.get("无关内容序号")
    return obj.get("Relevant Content Numbers") or obj.get("Irrelevant Content Numbers")


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


def official_aea(gold_idx: list[int], pred: list[int] | None) -> float:
    """Sorted lists equal -> 1; a non-empty subset (duplicates counted) -> len(pred)/len(gold),
    rounded to 2 decimals, which exceeds 1 on repeated indices; else 0 (published rule)."""
    if pred is None:
        return 0.0
    if sorted(pred) == sorted(gold_idx):
        return 1.0
    if pred and set(pred) <= set(gold_idx):
        return round(len(pred) / len(gold_idx), 2)
    return 0.0


def score_aea(gold: str, text: str, question: str = "") -> ItemScore:
    gold_idx = parse_gold_indices(gold)
    pred = _ints(_aea_predicted(_shortest_object(text)))
    official = official_aea(gold_idx, pred)
    first = float(pred is not None and sorted(pred) == sorted(gold_idx))
    ours_pred = None
    for obj in json_objects(text):
        ours_pred = _ints(_aea_predicted(obj))
        if ours_pred is not None:
            break
    ours = float(ours_pred is not None and set(ours_pred) == set(gold_idx))
    notes = [] if ours_pred is not None else ["no index list under the published keys"]
    if official > 1:
        notes.append(f"official score {official:g} > 1 (repeated indices)")
    return ItemScore(official, ours, ours_pred is not None, None if ours_pred is None else str(sorted(set(ours_pred))),
                     "; ".join(notes), first)


# ------------------------------------------------------------------ ER


def _bare_list(text: str) -> list | None:
    """A reply that is only a JSON list (the published ER rule accepts one)."""
    t = strip_think(text).strip()
    t = re.sub(r"^```(?:json)?\s*|\s*```$", "", t)
    try:
        v = json.loads(t, strict=False)
    except json.JSONDecodeError:
        return None
    return v if isinstance(v, list) else None


def score_er(gold: str, text: str, question: str = "") -> ItemScore:
    """Set of predicted emotion labels (`result`, or a bare list) equals the gold JSON list. The
    first release scored an unreadable answer 1 (kept as `first_release`)."""
    gold_set = set(json.loads(gold))
    pred = _bare_list(text)
    if pred is None:
        obj = _shortest_object(text)
        pred = obj.get("result") if obj else None
    if not isinstance(pred, list):
        return ItemScore(0.0, 0.0, False, None, "no emotion list", 1.0)
    try:
        ok = float(set(pred) == gold_set)
    except TypeError:  # unhashable entries (objects inside the list)
        return ItemScore(0.0, 0.0, False, None, "emotion list has non-text entries", 1.0)
    return ItemScore(ok, ok, True, json.dumps(pred, ensure_ascii=False), "", ok)


# ------------------------------------------------------------------ SP

SP_KEY = "涨跌情况"


def score_sp(gold: str, text: str, question: str = "") -> ItemScore:
    """The trend label under `涨跌情况` equals the gold label (published rule, kept as ours)."""
    obj = _shortest_object(text)
    value = obj.get(SP_KEY) if obj else None
    found = isinstance(value, str) and bool(value.strip())
    ok = float(found and value.strip() == gold.strip())
    return ItemScore(ok, ok, found, value if found else None, "" if found else f"no '{SP_KEY}' field")


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
    official_pred = _entities(_shortest_object(text)) or []
    official = _hits(gold_ents, official_pred) / len(gold_ents) if gold_ents else 0.0
    pred = None
    for obj in json_objects(text):
        pred = _entities(obj)
        if pred is not None:
            break
    if pred is None:
        return ItemScore(official, 0.0, False, None, "no 'results' entity list")
    alias = lambda es: [(TYPE_ALIASES.get(t, t), x) for t, x in es]  # noqa: E731
    hits = _hits(alias(gold_ents), alias(pred))
    denom = len(gold_ents) + len(pred)
    ours = 2 * hits / denom if denom else 1.0
    return ItemScore(official, ours, True, f"{len(pred)} entities, {hits} hits")


ACCURACY_SCORERS: dict[str, Callable[..., ItemScore]] = {
    "AEA": score_aea, "FNC": score_fnc, "FTR": score_ftr, "ER": score_er, "SP": score_sp, "FNER": score_fner,
}
OURS_DIFFERS = ("AEA", "FNC", "FTR", "FNER")   # tasks where our rule is not the official one


def _er_gold(gold: str) -> list:
    labels = json.loads(gold)
    if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
        raise ValueError("expected a JSON list of emotion labels")
    return labels


def _fner_gold(gold: str) -> list:
    groups = json.loads(gold)
    if not isinstance(groups, list) or not all(isinstance(g, dict) and all(isinstance(v, list) for v in g.values())
                                               for g in groups):
        raise ValueError('expected a JSON list of groups {"群组1": [entity, ...]}')
    return gold_entities(gold)


# Gold readers run at load time, so a malformed gold answer is a data error naming file and line,
# never a scoring crash (or a silent 0) in the middle of a run.
GOLD_CHECKS: dict[str, Callable[[str], Any]] = {"AEA": parse_gold_indices, "ER": _er_gold, "FNER": _fner_gold}


_FTR_READABLE = re.compile(r"^(?:[0-9./\-年月日是否]+|true|false)$", re.IGNORECASE)


def official_unscorable(task: str, gold: str) -> str | None:
    """Why the published rule can never score this gold 1 (None when it can): reported per task
    in the stage report so the official numbers can be read with their ceiling."""
    if task == "FTR" and not _FTR_READABLE.match(gold.strip()):
        return "gold outside the official answer regex (digits, ./-年月日是否, true/false)"
    if task == "FNER" and not gold_entities(gold):
        return "no gold entity: the official score is 0 whatever the answer"
    return None
