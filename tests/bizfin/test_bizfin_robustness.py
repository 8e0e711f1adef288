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
