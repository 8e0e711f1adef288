"""Rule-based scorers of the six accuracy tasks (AEA, FNC, FTR, ER, SP, FNER).

Each scorer returns the **official** score, i.e. the rule of the published evaluation code
(`HiThink-Research/BizFinBench`, `benchmark_code/BizFinBench/eval_*.py`, read to learn the rules;
this is our own implementation), and **ours** beside it where an official rule looks wrong:

- FNC: the official rule compares numbers with an absolute 1e-6 tolerance, but gold answers are
  rounded to 4 decimals (the item asks for "最多小数点后保留4位"), so a correct 14.80649 fails;
  dates are compared as strings ("2024年10月2日" != "2024年10月02日"); a value with a unit inside
  the JSON string ("14.81亿元") is never read. Ours: same date / number / text matching as FTR,
  numbers equal within 5e-5 absolute or 1e-4 relative.
- FTR: the official regex reads the last `"answer":` value made only of digits, `./-年月日是否`
  or true/false; `"answer" :` (space before the colon) or a value with other characters is
  unread. Ours reads the JSON `answer` field; otherwise the same date/number/yes-no rules.
- AEA: the configuration names `eval_AEA.py`, which is not published; the published
  `eval_AEA_2.py` gives partial credit len(pred)/len(gold) when the predicted indices are a
  subset, counting duplicates ([1, 1] against gold 1,3 scores 1.0). Ours: the paper's metric is
  accuracy, so the exact set of news indices (1 or 0).
- FNER: the official score is recall over gold entities with multiplicity (extra entities cost
  nothing: listing every substring scores 1.0); the prompt names the type `Financial_Instruments`
  while its description and the gold use `Financial_Products`. Ours: micro-F1 with multiplicity,
  the two type names treated as one.
- ER, SP: the official rules (set equality of emotion labels; exact trend label) are kept as ours.

Unparsed answers score 0 under both rules and are flagged (`parsed=False`), never guessed.
JSON is read with the one shared extractor (`finlib.llm.answers.json_objects`); the official
extraction (JsonPaser: shortest parseable candidate) is approximated by the shortest object.
"""
from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Callable

from finlib.llm.answers import json_objects, strip_think


@dataclass(frozen=True)
class ItemScore:
    """One item's score under the published rule and ours (0..1; official NaN when the official
    code leaves the item out of its denominator), whether an answer was found, and why not."""

    official: float
    ours: float
    parsed: bool
    answer: str | None
    note: str = ""


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


_NUMBER_WITH_UNIT = re.compile(r"^([-+]?\d+(?:\.\d+)?)\s*[\u4e00-\u9fff]{0,3}$")


def parse_number(value: Any) -> float | None:
    """A number, or a numeric string with thousands commas or a short Chinese unit ("14.81亿元").
    Percent signs are not dropped (15% is not 15)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    if not isinstance(value, str):
        return None
    m = _NUMBER_WITH_UNIT.match(value.strip().replace(",", ""))
    return float(m[1]) if m else None


_YES_NO = {"true": "是", "false": "否", "是": "是", "否": "否", "yes": "是", "no": "否"}


def answers_match(gold: str, pred: Any, abs_tol: float = 5e-5, rel_tol: float = 1e-4) -> bool:
    """Our FNC/FTR rule: equal as dates, else as numbers (within the 4-decimal rounding of the
    gold), else as yes/no, else as stripped text."""
    if pred is None:
        return False
    gd, pd_ = parse_date(gold), parse_date(pred if isinstance(pred, str) else None)
    if gd is not None or pd_ is not None:
        return gd is not None and gd == pd_
    gn, pn = parse_number(gold), parse_number(pred)
    if gn is not None and pn is not None:
        return math.isclose(gn, pn, rel_tol=rel_tol, abs_tol=abs_tol)
    g, p = str(gold).strip(), str(pred).strip()
    yn_g, yn_p = _YES_NO.get(g.lower()), _YES_NO.get(p.lower())
    if yn_g is not None and yn_p is not None:
        return yn_g == yn_p
    return g == p


# ------------------------------------------------------------------ FNC


_FNC_REGEX = re.compile(r'"answer"\s*:\s*([^,}\s]+)')


def official_fnc_answer(text: str) -> Any:
    """The published FNC extraction: the whole reply as JSON, else a regex on `"answer":`."""
    t = _CONTROL.sub("", text or "")
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


def _score_answer_field(official: float, gold: str, text: str) -> ItemScore:
    """FNC and FTR: our rule reads the JSON answer field and compares it with `answers_match`."""
    found, value = answer_field(text)
    ours = float(found and answers_match(gold, value))
    return ItemScore(official, ours, found, None if value is None else str(value),
                     "" if found else "no JSON answer field")


def score_fnc(gold: str, text: str) -> ItemScore:
    return _score_answer_field(official_fnc(gold, text), gold, text)


# ------------------------------------------------------------------ FTR

_FTR_REGEX = re.compile(r'"answer":\s*"?((?:[0-9./\-年月日是否]+|true|false))', re.IGNORECASE)
_OFFICIAL_DATE_FORMATS = ("%Y年%m月%d日", "%Y-%m-%d", "%Y/%m/%d")


def _official_date(s: str) -> datetime | None:
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
    matches = _FTR_REGEX.findall(text or "")
    pred = matches[-1] if matches else ""
    gd, pdt = _official_date(gold), _official_date(pred)
    if gd and pdt:
        return float(gd == pdt)
    try:
        return float(float(gold) == float(pred))
    except (TypeError, ValueError):
        p = {"true": "是", "false": "否"}.get(pred.strip().lower(), pred)
        return float(str(gold).strip() == str(p).strip())


def score_ftr(gold: str, text: str) -> ItemScore:
    return _score_answer_field(official_ftr(gold, text), gold, text)


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


def score_aea(gold: str, text: str) -> ItemScore:
    gold_idx = parse_gold_indices(gold)
    pred = _ints(_aea_predicted(_shortest_object(text)))
    if pred is None:
        official = 0.0
    elif sorted(pred) == sorted(gold_idx):
        official = 1.0
    elif pred and set(pred) <= set(gold_idx):
        official = round(len(pred) / len(gold_idx), 2)
    else:
        official = 0.0
    ours_pred = None
    for obj in json_objects(text):
        ours_pred = _ints(_aea_predicted(obj))
        if ours_pred is not None:
            break
    ours = float(ours_pred is not None and set(ours_pred) == set(gold_idx))
    return ItemScore(official, ours, ours_pred is not None, None if ours_pred is None else str(sorted(set(ours_pred))),
                     "" if ours_pred is not None else "no index list under the published keys")


# ------------------------------------------------------------------ ER


def _bare_list(text: str) -> list | None:
    """A reply that is only a JSON list (the published ER rule accepts one)."""
    t = strip_think(text).strip()
    t = re.sub(r"^```(?:json)?\s*|\s*```$", "", t)
    try:
        v = json.loads(t)
    except json.JSONDecodeError:
        return None
    return v if isinstance(v, list) else None


def score_er(gold: str, text: str) -> ItemScore:
    """Set of predicted emotion labels (`result`, or a bare list) equals the gold JSON list."""
    gold_set = set(json.loads(gold))
    pred = _bare_list(text)
    if pred is None:
        obj = _shortest_object(text)
        pred = obj.get("result") if obj else None
    if not isinstance(pred, list):
        return ItemScore(0.0, 0.0, False, None, "no emotion list")
    try:
        ok = float(set(pred) == gold_set)
    except TypeError:  # unhashable entries (objects inside the list)
        return ItemScore(0.0, 0.0, False, None, "emotion list has non-text entries")
    return ItemScore(ok, ok, True, json.dumps(pred, ensure_ascii=False))


# ------------------------------------------------------------------ SP

SP_KEY = "涨跌情况"


def score_sp(gold: str, text: str) -> ItemScore:
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


def score_fner(gold: str, text: str) -> ItemScore:
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


ACCURACY_SCORERS: dict[str, Callable[[str, str], ItemScore]] = {
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
