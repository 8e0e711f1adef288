"""The published BizFinBench scoring rules of one commit, re-implemented: the offline "official" column.

`PUBLISHED_COMMIT` is the evaluation code released with the paper (HiThink-Research/BizFinBench, `main`
at 6d2a4a6, 2025-05-22; its scorers were added at d355b5f). When `bizfin.official_code_dir` names a
checkout of that repository, stage 07 runs the checkout's own `eval_*.py` scripts instead
(`finlib.bizfin.authors_code`), and a differential test holds this module to them reply by reply on
every item of the published task files (tests/bizfin/test_bizfin_official_differential.py).

What "exactly" means here: the same reading of the reply, the same gold reading, the same
comparison, the same denominator — including the published code's quirks (no `<think>` stripping,
strict JSON, AEA's `int()` truncation, ER's unreadable answer scored correct, SP's and FQA's
exclusions from N). Where the published script itself raises on a reply (its whole run would stop),
the rule function raises `PublishedScriptError` here too; stage 07 shows such an item as not scorable under the
official rule (counted), never as a guess.

Every function takes the gold text (`choices[0].message.content[0].text` of the published record)
and the model's reply exactly as returned, and returns the item's score in 0..1, or None when the
published script leaves the item out of its denominator.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from datetime import datetime
from typing import Any

PUBLISHED_COMMIT = "6d2a4a6"
PUBLISHED_REPOSITORY = "HiThink-Research/BizFinBench"
# The published configuration routes FNER to the FTR script; eval_fin_ner.py is the scorer written for
# FNER. Which one the paper's Table 3 used is not stated: the official column uses eval_fin_ner.py (FNER's
# task record, `finlib.bizfin.tasks`, names it); `FNER_SCRIPTS` names both. Each task record names its
# script and its rule function below.
FNER_SCRIPTS = ("eval_fin_ner.py", "eval_financial_timereason.py")


class PublishedScriptError(RuntimeError):
    """The published script raises on this reply (its evaluation would stop): no official score exists."""


def official_label(code_commit: str | None = None) -> str:
    """What every caption says the official column is."""
    if code_commit:
        return f"the authors' evaluation scripts run verbatim from a checkout at commit {code_commit}"
    return f"rules of {PUBLISHED_REPOSITORY} commit {PUBLISHED_COMMIT}, re-implemented"


# ------------------------------------------------------------------ the shared JSON finder (utils/JsonPaser)

# Three alternatives tried at each position, left to right: a ```json fence (lazy), "json" then a greedy
# {...}, a greedy {...}. The greedy ones run to the last "}", so at most one of them is ever found.
_FENCE, _PREFIXED, _BRACED = r"```json\s*([\s\S]*?)\s*```", r"(json\s*\{[\s\S]*\})", r"(\{[\s\S]*\})"
_PASER = re.compile("|".join((_FENCE, _PREFIXED, _BRACED)))


def paser_json(text: str) -> Any:
    """The first candidate that strict `json.loads` reads (any JSON value: a fence may hold a list or a
    number), else None: the published `JsonPaser.extract_json_from_text`."""
    for fenced, prefixed, braced in _PASER.findall(text):
        if fenced:
            candidate = fenced
        elif prefixed:
            candidate = re.sub(r"^json\s*", "", prefixed)
        else:
            candidate = braced
        try:
            return json.loads(candidate.strip())
        except json.JSONDecodeError:
            continue
    return None


# ------------------------------------------------------------------ AEA (eval_AEA.py)

_AEA_OBJECT = re.compile(r'(\{.*?"相关新闻序号"\s*:\s*\[.*?\].*?\})', re.DOTALL)
_AEA_ARRAY = re.compile(r'"相关新闻序号"\s*:\s*\[(.*?)\]', re.DOTALL)


def _aea_indices(reply: str) -> Any:
    """The whole reply as JSON, else the first lazy {...} holding the key, else the bare array's digits."""
    try:
        return json.loads(reply).get("相关新闻序号", [])
    except json.JSONDecodeError:
        pass
    m = _AEA_OBJECT.search(reply)
    if not m:
        return []
    try:
        return json.loads(m.group(1)).get("相关新闻序号", [])
    except json.JSONDecodeError:
        a = _AEA_ARRAY.search(reply)
        if not a:
            return []
        return [int(x.strip()) for x in a.group(1).strip().split(",") if x.strip().isdigit()]


def aea(gold: str, reply: str) -> float | None:
    """1 when the predicted indices (each through `int()`) sorted equal the gold's, else 0; any error
    (a non-object reply, an index int() refuses) scores 0 and counts."""
    try:
        pred = _aea_indices(reply)
        if not isinstance(pred, list):
            pred = []
        want = [int(x) for x in gold.split(",")]
        return 1.0 if sorted(int(x) for x in pred) == sorted(want) else 0.0
    except Exception:  # noqa: BLE001 - the published script scores every failure 0, inside N
        return 0.0


# ------------------------------------------------------------------ FNC (eval_financial_calculation.py)

_CONTROL = re.compile(r"[\x00-\x1F\x7F]")
_FNC_ANSWER = re.compile(r'"answer"\s*:\s*([^,}\s]+)')


def fnc_answer(reply: str) -> Any:
    """Control characters removed (a multi-line reply becomes one line), then the whole reply as JSON
    (`.get("answer", "")`, which raises on a non-object), else the first `"answer": <token>` with one
    pair of surrounding double quotes removed."""
    text = _CONTROL.sub("", reply)
    try:
        return json.loads(text).get("answer", "")
    except json.JSONDecodeError:
        m = _FNC_ANSWER.search(text)
        if not m:
            return None
        token = m.group(1)
        return token[1:-1] if token.startswith('"') and token.endswith('"') else token


def fnc(gold: str, reply: str) -> float | None:
    """Floats within an absolute 1e-6; where float() refuses either side, the texts (the prediction as
    converted so far) stripped and compared; any other error scores 0 inside N."""
    pred = None
    try:
        pred = fnc_answer(reply)
        if pred is not None:
            pred = float(pred)
        want = float(gold) if gold else None
        return 1.0 if pred is not None and want is not None and abs(pred - want) < 1e-6 else 0.0
    except (ValueError, TypeError):
        return 1.0 if str(pred).strip() == str(gold).strip() else 0.0
    except Exception:  # noqa: BLE001 - e.g. a non-object JSON reply, float() overflowing: 0 inside N
        return 0.0


# ------------------------------------------------------------------ FTR (eval_financial_timereason.py)

_DATE_FORMATS = ("%Y年%m月%d日", "%Y-%m-%d", "%Y/%m/%d")


def _date(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    s = value.strip()
    if s.startswith('"') and s.endswith('"'):
        s = s[1:-1]
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(s, fmt)
        except ValueError:
            continue
    return None


def ftr(gold: str, reply: str) -> float | None:
    """The JsonPaser value's `answer` (a falsy value means ""); dates compared as dates, else the texts
    stripped; a missing key or a non-object value scores 0 inside N."""
    try:
        found = paser_json(reply)
        pred = found["answer"] if found else ""
        g, p = _date(gold), _date(pred)
        if g and p:
            return 1.0 if g == p else 0.0
        return 1.0 if str(gold).strip() == str(pred).strip() else 0.0
    except Exception:  # noqa: BLE001
        return 0.0


# ------------------------------------------------------------------ ER (eval_financial_sentiment.py)

def er(gold: str, reply: str) -> float | None:
    """Set of labels (a JSON list, or an object's `result`) equals the gold set; ANY error — no JSON,
    no `result`, unhashable labels — is scored correct (1), as the published script does."""
    try:
        found = paser_json(reply)
        if isinstance(found, list):
            labels = found
        elif isinstance(found, dict):
            labels = found["result"]
        else:
            raise ValueError("no prediction")
        return 1.0 if set(labels) == set(json.loads(gold)) else 0.0
    except Exception:  # noqa: BLE001
        return 1.0


# ------------------------------------------------------------------ SP (eval_stock_prediction.py)

def sp(gold: str, reply: str) -> float | None:
    """`涨跌情况` of the JsonPaser object equals the gold text (both stripped). A found value that is not
    an object (a fenced list) makes the published script raise; a KeyError/TypeError/ValueError leaves
    the item out of N."""
    try:
        found = paser_json(reply)
        pred = found.get("涨跌情况", "") if found else ""
    except (KeyError, TypeError, ValueError):
        return None
    except Exception as exc:  # noqa: BLE001 - e.g. .get on a fenced list: the published run stops
        raise PublishedScriptError(f"eval_stock_prediction.py raises {type(exc).__name__}: {exc}") from None
    return 1.0 if str(gold).strip() == str(pred).strip() else 0.0


# ------------------------------------------------------------------ FNER (eval_fin_ner.py)

def _gold_entities(gold: str) -> list:
    try:
        parsed = json.loads(gold)
    except json.JSONDecodeError:
        return []
    out: list = []
    if isinstance(parsed, list):
        for group in parsed:
            for entities in group.values():
                out.extend(entities)
    return out


def _pair(entity: Any) -> tuple:
    return entity.get("type", ""), entity.get("text", "")


def fner(gold: str, reply: str) -> float | None:
    """Recall over the gold (type, text) pairs with multiplicity; extra entities cost nothing; no gold
    entity scores 0. A found value that is not an object, or entries that are not objects, make the
    published script raise."""
    try:
        found = paser_json(reply)
        pred = found.get("results", []) if found else []
        std = _gold_entities(gold)
        want, got = Counter(_pair(e) for e in std), Counter(_pair(e) for e in pred)
    except Exception as exc:  # noqa: BLE001 - the published script catches only JSONDecodeError
        raise PublishedScriptError(f"eval_fin_ner.py raises {type(exc).__name__}: {exc}") from None
    hits = sum(min(n, got.get(k, 0)) for k, n in want.items())
    return hits / len(std) if std else 0.0


# ------------------------------------------------------------------ judge verdicts

_JSON_FENCE = re.compile(r"```json\s*({.*?})\s*```", re.DOTALL)
_FQA_TOTAL = re.compile(r'"总分"\s*:\s*(\d+(\.\d+)?)')
_FTU_SCORE = re.compile(r"评分\s*：\s*\[?\s*\[?\s*(\d+)\s*\]?\s*\]?")


def _fdd_json_text(verdict: str) -> str:
    found = _JSON_FENCE.findall(verdict)
    return found[0] if found else verdict.split("\n\n")[0].strip()


def fdd_verdict(verdict: str) -> float | None:
    """FDD (eval_financial_description.py): the first ```json fence, else the text before the first blank
    line, read as JSON; `int(评分分数)` / 100; anything unreadable scores 0 inside N (`fdd_verdict_n`:
    counted twice when the JSON reads but its score does not)."""
    try:
        return int(json.loads(_fdd_json_text(verdict))["评分分数"]) / 100
    except Exception:  # noqa: BLE001
        return 0.0


def fdd_verdict_n(verdict: str) -> int:
    """How many times eval_financial_description.py counts this verdict in N: twice when its JSON reads
    but `int(评分分数)` raises (the script adds 1 after `json.loads`, then 1 again in the handler of
    the KeyError / TypeError / ValueError), else once."""
    try:
        parsed = json.loads(_fdd_json_text(verdict))
    except Exception:  # noqa: BLE001 - unreadable JSON: counted once, in the JSONDecodeError handler
        return 1
    try:
        int(parsed["评分分数"])
    except Exception:  # noqa: BLE001
        return 2
    return 1


def _fqa_parsed(verdict: str) -> Any:
    found = _JSON_FENCE.findall(verdict)
    text = (found[0] if found else verdict).strip().strip("```").lstrip("json").strip()  # noqa: B005 - as the published script
    try:
        return json.loads(text)
    except Exception:  # noqa: BLE001
        return text


def fqa_verdict(verdict: str) -> float | None:
    """FQA (eval_financial_encyclopedia.py): `总评分.总分` of the JSON verdict, else the first `"总分": n`
    in the text; only a total above 0 enters N (an unreadable or zero verdict is left out), / 100."""
    parsed = _fqa_parsed(verdict)
    try:
        if isinstance(parsed, dict) and "总评分" in parsed and "总分" in parsed["总评分"]:
            total = float(parsed["总评分"]["总分"])
        elif isinstance(parsed, str):
            m = _FQA_TOTAL.search(parsed)
            total = float(m.group(1)) if m else 0
        else:
            total = 0
    except Exception:  # noqa: BLE001 - the published loop catches it and leaves the line out
        return None
    return total / 100 if total > 0 else None


def ftu_verdict(verdict: str) -> float | None:
    """FTU (eval_multi_tools_use.py): the integer after `评分：` (full-width colon, optional [[ ]]); a
    missing or zero score adds 0 inside N; the published mean is on 0-100, here / 100."""
    if not isinstance(verdict, str):
        return 0.0
    m = _FTU_SCORE.search(verdict)
    return int(m.group(1)) / 100 if m else 0.0


def fqa_verdict_n(verdict: str) -> int:
    """How many times eval_financial_encyclopedia.py counts this verdict in N: 1 for a total above 0, else 0."""
    return 0 if fqa_verdict(verdict) is None else 1


# ------------------------------------------------------------------ FTU judge input (data_preprocess)

_FTU_START, _FTU_END = "下面是用户的输入和历史对话信息：", "请按照输出格式要求，输出你的Thought和Actions!"
_FTU_PATTERNS = (r"```json\s*([\s\S]+?)\s*```", r"```\s*([\s\S]+?)\s*```", r"json\s*(\{[\s\S]+\})", r"(\{[\s\S]+\})")


def _ftu_json(text: str) -> Any:
    """The FTU script's own JSON finder: text after the first `</think>`, then four patterns in turn,
    the first match of each tried."""
    if "</think>" in text:
        text = text.split("</think>", 1)[-1].strip()
    for pat in _FTU_PATTERNS:
        m = re.search(pat, text, re.DOTALL)
        if m:
            try:
                return json.loads(m.group(1).strip())
            except json.JSONDecodeError:
                continue
    return None


def ftu_judge_input(query: str, reply: str) -> tuple[str, Any]:
    """(question, answer) the published FTU judge sees: the user segment between the prompt's two
    markers, and the reply's `Actions` as a list of {Action: ActionInput}; {} when unreadable."""
    start = query.find(_FTU_START) + len(_FTU_START)
    question = query[start:query.find(_FTU_END)].strip()
    try:
        actions = [{a["Action"]: a.get("ActionInput", a.get("Action Input", ""))}
                   for a in _ftu_json(reply)["Actions"]]
    except Exception:  # noqa: BLE001
        actions = {}
    return question, actions


def ftu_judge_view(query: str, reply: str) -> tuple[str, str]:
    """What the FTU judge is shown (the authors' `data_preprocess`): the user segment of the query (a
    query without the published markers whole) and the reply's `Actions` as a list of {Action: ActionInput}."""
    segment, actions = ftu_judge_input(query, reply)
    return (segment if _FTU_START in query else query), str(actions)


__all__ = ["PUBLISHED_COMMIT", "FNER_SCRIPTS", "PublishedScriptError", "official_label", "paser_json", "fdd_verdict",
           "fdd_verdict_n", "fqa_verdict", "fqa_verdict_n", "ftu_verdict", "ftu_judge_input", "ftu_judge_view"]
