"""One bad reply costs its own item only: hostile replies scored under both rules beside the authors'
scripts run verbatim, the tolerant reader on whole replies, the official FDD denominator, one status for
a reply that ran out of budget while reasoning, task files split as the authors read them."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from finlib.bizfin import scorers
from finlib.bizfin.authors_code import AuthorsCode
from finlib.bizfin.benchmark import stage
from finlib.bizfin.data import load_format_samples

ROOT = Path(__file__).resolve().parents[2]
# ../shared beside the clone (or beside the folder holding a git worktree of it)
SHARED = next(
    (p for p in (ROOT.parent / "shared", ROOT.parent.parent / "shared") if p.is_dir()), ROOT.parent / "shared"
)
REFERENCE = (SHARED / "reference" / "bizfinbench-eval").resolve()
NESTED_1000 = "[" * 1000 + "]" * 1000


@pytest.fixture(scope="module")
def authors() -> AuthorsCode:
    if not (REFERENCE / "benchmark_code").is_dir():
        pytest.skip(f"the published evaluation code ({REFERENCE}) is absent: these checks run it verbatim")
    return AuthorsCode(REFERENCE)


def _answers(asked: dict, texts: list) -> pd.DataFrame:
    ids = [it.id for its in asked.values() for it in its]
    return pd.DataFrame(
        {
            "id": ids,
            "status": "ok",
            "raw_text": texts,
            "error": None,
            "input_tokens": 1,
            "output_tokens": 1,
            "cost_usd": 0.0,
            "cached": False,
        }
    )


def test_er_reply_of_1000_nested_brackets_is_scored_not_raised():
    gold = '["乐观"]'
    s = scorers.score_er(gold, NESTED_1000)
    assert (s.ours, s.parsed) == (0.0, False)
    assert s.official == 1.0  # the published rule: any failure to read the labels scores 1


def test_er_nested_brackets_official_equals_the_authors_script(authors):
    got = authors.score_rules("ER", ['["乐观"]'], [NESTED_1000])[0]
    assert got.score == scorers.score_er('["乐观"]', NESTED_1000).official


def test_a_reply_whose_scoring_raises_costs_its_item_only(monkeypatch):
    """Seeded: the FNC reader raises on one reply. The other items are scored, the failing one is NaN
    under both rules with the error kept, counted per model, and named in the caption."""
    from finlib.bizfin.benchmark.results import scoring_error_note

    asked = {"FNC": load_format_samples(["FNC"])["FNC"][:2]}
    real = scorers.ACCURACY_SCORERS["FNC"]

    def flaky(gold, text, question=""):
        if "boom" in text:
            raise RecursionError("maximum recursion depth exceeded")
        return real(gold, text, question)

    monkeypatch.setitem(scorers.ACCURACY_SCORERS, "FNC", flaky)
    gold = asked["FNC"][1].gold
    rows = pd.DataFrame(
        stage.score_model("m", asked, _answers(asked, ["boom", f'{{"answer": "{gold}"}}']), None, (0, 100)),
        columns=stage.ITEM_COLUMNS,
    )
    bad, good = rows.iloc[0], rows.iloc[1]
    assert math.isnan(bad["official"]) and math.isnan(bad["ours"]) and "RecursionError" in bad["scoring_error"]
    assert good["ours"] == 1.0 and pd.isna(good["scoring_error"])
    counts = stage.scoring_error_counts(rows)
    assert counts == {"m": 1}
    assert "m 1" in scoring_error_note({"scoring_errors": counts})


def test_stage_scores_a_stored_er_reply_of_nested_brackets():
    asked = {"ER": load_format_samples(["ER"])["ER"][:1]}
    rows = pd.DataFrame(
        stage.score_model("m", asked, _answers(asked, [NESTED_1000]), None, (0, 100)), columns=stage.ITEM_COLUMNS
    )
    assert rows["ours"].iat[0] == 0.0 and rows["scoring_error"].isna().all()


# ---------------------------------------------------------------- the tolerant reader reads the whole reply

LATEX = "".join(f"第{k}步：$\\frac{{{k}}}{{{k + 1}}}$ 约等于 {k / (k + 1):.3f}；\n" for k in range(1, 301))


def test_answer_after_300_latex_fractions_is_read():
    """Reasoning written as the world writes it (LaTeX fractions, each a `{` that is no JSON) before the answer."""
    s = scorers.score_fnc("12.5", LATEX + '最终答案：\n```json\n{"answer": "12.5"}\n```')
    assert (s.ours, s.parsed, s.answer) == (1.0, True, "12.5")


def test_a_python_dict_answer_longer_than_20000_characters_is_read():
    reason = "营收增长，毛利率提升。" * 2500  # 27,500 characters of single-quoted reason
    s = scorers.score_fnc("12.5", f"{{'reason': '{reason}', 'answer': '12.5',}}")
    assert (s.ours, s.parsed) == (1.0, True)


@pytest.mark.parametrize(
    "gold,pred,want",
    [
        ("1500", 1.5e3, True),
        ("0.00000012", 1.2e-07, True),
        ("1500", "1.5E3", True),
        ("1500", "1.4e3", False),
        ("2.5亿", "2.5e8元", True),
        ("0.00125", "1.25e-3", True),
        ("0.00125", "1.26e-3", False),
    ],
)
def test_scientific_notation_is_a_number(gold, pred, want):
    assert scorers.answers_match(gold, pred) is want


def test_json_number_in_scientific_notation_scores():
    assert scorers.score_fnc("0.00000012", '{"answer": 1.2e-7}').ours == 1.0


def test_hostile_braces_read_as_nothing():
    from finlib.llm.replies import read_json_objects

    assert read_json_objects("{" * 1_000_000, max_chars=None) == []
    assert read_json_objects('{"a": ' * 100_000, max_chars=None) == []
    tail = '{"answer": "x"}'
    assert read_json_objects("{" * 100_000 + tail, max_chars=None) == [{"answer": "x"}]


def test_judge_verdict_longer_than_20000_characters_is_read():
    from finlib.bizfin.iterajudge.judge import parse_judge_score

    verdict = "评语：" + "数据描述准确。" * 3000 + '\n{"score": 80}'
    assert parse_judge_score(verdict, (0, 100)) == (80, "json")
