"""The report reads in stage 06's order, and its wide tables and long captions fit a browser window."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib
import pandas as pd
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from test_report import _chrome

from finlib.core.config import RunConfig
from finlib.core.tables import save_figure, write_table
from finlib.pipeline import report

# stage 06's reading order is not the alphabetical one the file system lists
STAGE06_ORDER = ("fig_conditions_example", "fig_herding_with_without", "fig_accuracy_vs_analyst")
LONG_CAPTION = "Table 4: herding score (%) with/without the rating. " + "Each cell is a rate with its method. " * 30


@pytest.fixture()
def run(tmp_path: Path) -> RunConfig:
    """A run with three stage-06 figures, one figure of another stage, and a Table 4 of 14 sector columns
    under a 30-sentence caption (no executed notebook: the report must not need one)."""
    cfg = RunConfig(name="r", params={"data": {"source": "synthetic"}}, root=tmp_path, params_file=tmp_path / "r.yaml")
    for d in (cfg.processed_dir, cfg.tables_dir, cfg.run_dir):
        d.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1], [0, 1])
    for name in (*STAGE06_ORDER, "bizfin_task_scores"):
        save_figure(cfg, fig, name, caption=f"{name} caption.")
    plt.close(fig)
    (cfg.processed_dir / "figures_report.json").write_text(
        json.dumps([{"name": n, "caption": f"{n} caption.", "files": [], "skipped": None} for n in STAGE06_ORDER])
    )
    sectors = {f"Sector {i} with a long name": ["50.0/40.0"] for i in range(14)}
    write_table(
        cfg,
        "table4_herding_with_without",
        pd.DataFrame(
            {"Source": ["ours"], "Model": ["SmolLM2-135M"], **sectors, "Average": ["51.5/42.5***"], "N": ["200/200"]}
        ),
        LONG_CAPTION,
    )
    return cfg


def figure_order(page: str) -> list[str]:
    return [chunk.split('"', 1)[0] for chunk in page.split('<figure id="')[1:]]


def test_figures_follow_stage_06_reading_order_then_other_stages(run):
    page = report.build_report(run).read_text(encoding="utf-8")
    assert figure_order(page) == [*STAGE06_ORDER, "bizfin_task_scores"]


def test_long_captions_show_their_first_sentence_and_fold_the_rest(run):
    page = report.build_report(run).read_text(encoding="utf-8")
    table4 = page.split('id="t-table4_herding_with_without"')[1]
    assert table4.index("Table 4: herding score (%) with/without the rating.") < table4.index("<details>")
    assert report.caption_html("Short caption.") == "Short caption."


WINDOW = (
    "return [document.scrollingElement.scrollWidth, window.innerWidth,"
    " document.querySelector('.wide').getBoundingClientRect().right,"
    " document.querySelector('#t-table4_herding_with_without + .caption').getBoundingClientRect().height,"
    " parseFloat(getComputedStyle(document.body).fontSize)];"
)
AVERAGE_REACHABLE = (
    "const box = document.querySelector('.wide'); box.scrollLeft = box.scrollWidth;"
    "const th = Array.from(box.querySelectorAll('th')).find(t => t.textContent === 'Average');"
    "const r = th.getBoundingClientRect(); const first = box.querySelector('td').getBoundingClientRect();"
    "return [r.right <= window.innerWidth && r.width > 0, first.left >= 0];"
)


def test_in_a_browser_the_page_does_not_scroll_sideways_and_captions_are_short(run):
    index = report.build_report(run)
    driver = _chrome()
    try:
        driver.set_window_size(1100, 900)
        driver.get(index.as_uri())
        page_width, window, table_right, caption_h, font_px = driver.execute_script(WINDOW)
        assert page_width <= window, "the page scrolls sideways: a wide table escaped its box"
        assert table_right <= window
        assert caption_h <= 3 * 1.6 * font_px, f"caption {caption_h}px tall above the table"
        average_visible, row_names_pinned = driver.execute_script(AVERAGE_REACHABLE)
        assert average_visible and row_names_pinned
    finally:
        driver.quit()
