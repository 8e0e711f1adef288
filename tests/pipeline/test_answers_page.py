"""The report's per-answer viewer: prompt, reply, parsed answer, tokens, cost; filters work in a browser."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from test_report import _chrome

from finlib.core.artifacts import write_frame
from finlib.core.config import RunConfig
from finlib.pipeline import answers_page, report


@pytest.fixture()
def run(tmp_path: Path) -> RunConfig:
    cfg = RunConfig(name="r", params={"data": {"source": "synthetic"}}, root=tmp_path, params_file=tmp_path / "r.yaml")
    for d in (cfg.processed_dir, cfg.tables_dir, cfg.run_dir):
        d.mkdir(parents=True, exist_ok=True)
    rows = [
        {
            "item_id": f"R{i}:{c}",
            "report_id": f"R{i}",
            "condition": c,
            "model": m,
            "raw_text": f"<b>{m} says</b>",
            "answer": "bullish",
            "parsed": True,
            "input_tokens": 100 + i,
            "output_tokens": 5,
            "cost_usd": 0.001,
        }
        for i in range(3)
        for c in ("original", "no_rating")
        for m in ("m1", "m2")
    ]
    write_frame(cfg, "predictions", pd.DataFrame(rows))
    write_frame(
        cfg,
        "conditions",
        pd.DataFrame(
            [{"item_id": r["item_id"], "text": f"Report text of {r['item_id']}"} for r in rows]
        ).drop_duplicates("item_id"),
    )
    write_frame(
        cfg,
        "reports",
        pd.DataFrame({"report_id": ["R0", "R1", "R2"], "sector": ["Technology", "Energy", "Technology"]}),
    )
    return cfg


def test_every_answer_is_listed_with_prompt_reply_tokens_and_cost(run: RunConfig):
    rows, total = answers_page.answer_rows(run)
    assert total == len(rows) == 12
    r = rows[(rows["item_id"] == "R1:no_rating") & (rows["model"] == "m2")].iloc[0]
    assert (r["prompt"], r["reply"], r["sector"], r["input_tokens"]) == (
        "Report text of R1:no_rating",
        "<b>m2 says</b>",
        "Energy",
        101,
    )
    page = answers_page.answers_html(run)
    assert "&lt;b&gt;m2 says&lt;/b&gt;" in page and "<b>m2 says</b>" not in page  # replies escaped
    assert "12 of 12 answers" in page


def test_a_large_run_says_how_many_it_shows(run: RunConfig, monkeypatch):
    monkeypatch.setattr(answers_page, "MAX_ROWS", 5)
    assert "5 of 12 answers (the first 5; all in predictions.parquet)" in answers_page.answers_html(run)


@pytest.mark.parametrize("shown", [5, 12])
def test_the_rows_shown_are_the_first_predictions_joined_whole(run: RunConfig, monkeypatch, shown):
    """Equal to pandas joining every prediction to every text and sector, then taking the head; only
    the texts of the rows shown are read."""
    monkeypatch.setattr(answers_page, "MAX_ROWS", shown)
    asked: list[str] = []
    subset = answers_page.ArtifactTexts.subset
    monkeypatch.setattr(answers_page.ArtifactTexts, "subset", lambda self, keys: subset(self, asked.extend(keys) or asked))
    rows, total = answers_page.answer_rows(run)
    pred = pd.read_parquet(run.processed_dir / "predictions.parquet")
    cond = pd.read_parquet(run.processed_dir / "conditions.parquet")
    whole = (pred.merge(cond.rename(columns={"text": "prompt"}), on="item_id", how="left")
             .merge(pd.read_parquet(run.processed_dir / "reports.parquet"), on="report_id", how="left")
             .rename(columns={"raw_text": "reply"}).head(shown))
    assert total == 12 and len(rows) == shown and sorted(set(asked)) == sorted(set(whole["item_id"]))
    for col in ("model", "condition", "sector", "item_id", "prompt", "reply", "answer", "input_tokens"):
        assert rows[col].tolist() == whole[col].tolist(), col


def test_no_predictions_no_page(tmp_path: Path):
    cfg = RunConfig(name="e", params={}, root=tmp_path, params_file=tmp_path / "e.yaml")
    assert answers_page.answers_html(cfg) is None


def test_filters_work_in_a_browser(run: RunConfig):
    index = report.build_report(run)
    assert "answers.html" in report.local_links(index)
    driver = _chrome()
    try:
        driver.get((index.parent / "answers.html").as_uri())
        visible = "return Array.from(document.querySelectorAll('#answers tbody tr')).filter(r => r.style.display !== 'none').length"
        assert driver.execute_script(visible) == 12
        choose = (
            "const s = document.querySelector(\"select[data-col='{c}']\"); s.value = '{v}';"
            "s.dispatchEvent(new Event('change'));"
        )
        driver.execute_script(choose.format(c="model", v="m1"))
        assert driver.execute_script(visible) == 6
        driver.execute_script(choose.format(c="sector", v="Technology"))
        assert driver.execute_script(visible) == 4
        assert driver.find_element("id", "shown").text == "4"
    finally:
        driver.quit()
