"""The HTML report: every link resolves, and a real headless browser loads every figure and page."""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import matplotlib
import nbformat
import pandas as pd
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from finlib.core.config import RunConfig
from finlib.core.tables import save_figure, write_table
from finlib.pipeline import report


def _notebook_with_a_plot(path: Path) -> None:
    """An executed-looking notebook: markdown, code, a text output and an inline PNG."""
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1], [0, 1])
    import base64
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    png = base64.b64encode(buf.getvalue()).decode()
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# 04 — a stage\nCosts $5 and $6 (no MathJax needed)."),
        nbformat.v4.new_code_cell("print('hello')", outputs=[
            nbformat.v4.new_output("stream", name="stdout", text=f"hello from {path.parents[3]}/data\n"),
            nbformat.v4.new_output("stream", name="stderr", text=f"{sys.prefix}/lib/tqdm/auto.py:21: TqdmWarning: "
                                   "IProgress not found. Please update jupyter and ipywidgets.\n"
                                   "  from .autonotebook import tqdm as notebook_tqdm\n"),
            *[nbformat.v4.new_output("stream", name="stderr", text=f"\rscoring: {k:3d}%|{'#' * (k // 10)}| {k}/100")
              for k in (10, 50, 100)],
            nbformat.v4.new_output("display_data", data={"image/png": png, "text/plain": "<Figure>"})]),
    ], metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


@pytest.fixture()
def built(tmp_path: Path):
    """A small run on disk (notebook, figure + caption, table, manifest, stage reports) and its report."""
    cfg = RunConfig(name="r", params={"data": {"source": "synthetic"}}, root=tmp_path, params_file=tmp_path / "r.yaml")
    for d in (cfg.processed_dir, cfg.tables_dir, cfg.run_dir):
        d.mkdir(parents=True, exist_ok=True)
    _notebook_with_a_plot(cfg.run_dir / "notebooks" / "04_scoring.ipynb")
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.bar([0, 1], [1, 2])
    save_figure(cfg, fig, "fig_demo")
    save_figure(cfg, fig, "fig_stage04", caption="Pooled herding per condition (stage 04).")
    plt.close(fig)
    from finlib.core.tables import skip_figure

    skip_figure(cfg, "fig_dpo_training", "no DPO training step logged for m")
    write_table(cfg, "table4_demo", pd.DataFrame({"model": ["m"], "value": [0.5]}), "Demo table")
    sectors = {f"Sector {i} with a long name": ["50.0/40.0"] for i in range(11)}
    write_table(cfg, "table4_herding_with_without", pd.DataFrame({
        "Source": ["ours"], "Group": ["Open-Source Models"], "Model": ["SmolLM2-135M"], **sectors,
        "Average": ["51.5/42.5***"], "Mean of sectors": ["50.0/40.0"], "Average (pooled) 95 % CI": ["[48.6, 56.0]/[38.7, 46.6]"],
        "Parse rate %": ["98.0/95.5"], "N": ["200/200"]}), "Table 4: herding score (%) with/without the rating")
    from finlib.core.compare import write_comparison

    write_comparison(cfg, "bizfin_table3", pd.DataFrame({
        "table": ["bizfin_table3"], "row": ["GPT-4o | AEA"], "column": ["score"], "ours": [80.0],
        "paper": [79.42], "diff": [0.58], "status": ["matched"]}), "")
    (cfg.processed_dir / "figures_report.json").write_text(json.dumps([
        {"name": "fig_demo", "caption": "Demo caption (synthetic data).", "files": [], "skipped": None},
        {"name": "fig_dpo_accuracy", "caption": "", "files": [],
         "skipped": "stage 05 artifacts not found (dpo_accuracy): run stage 05"}]))
    (cfg.processed_dir / "scoring_report.json").write_text(json.dumps(
        {"parse_rate": [{"model": "m", "condition": "original", "n": 10, "parse_rate": 0.9}],
         "skipped": [{"model": "m", "condition": "no_opinion", "n": 10, "reason": "no lexicon"}]}))
    (cfg.processed_dir / "labels_report.json").write_text(json.dumps({"excluded": {"too_few_obs": 2}}))
    (cfg.run_dir / "manifest.json").write_text(json.dumps(
        {"params_file": "params/r.yaml", "git": {"commit": "abc", "dirty": False},
         "updated": "2026-01-01T08:00:00+00:00",
         "stages": {"04": {"notebook": "notebooks/04_scoring.ipynb", "status": "ok", "seconds": 1.5,
                           "started": "2026-01-01T08:00:00+00:00", "ended": "2026-01-01T09:30:00+00:00"}},
         "params": {"data": {"path": f"{tmp_path}/data/x.csv"}}}))
    return cfg, report.build_report(cfg)


def test_report_links_resolve_and_show_what_the_run_recorded(built):
    _, index = built
    links = report.local_links(index)
    assert {"notebooks/04_scoring.html", "figures/fig_demo.png", "figures/fig_demo.pdf", "tables/table4_demo.csv",
            "tables/table4_demo.md", "tables/table4_demo.tex", "manifest.json",
            "reports/scoring_report.json", "reports/labels_report.json"} <= set(links)
    for link in links:
        assert (index.parent / link).is_file(), link
    page = index.read_text()
    assert "Demo caption (synthetic data)." in page and "Synthetic data" in page
    assert "stage 05 artifacts not found" in page                        # figures not drawn, with the reason
    assert "too_few_obs" in page and "no lexicon" in page                # exclusions and skipped items
    assert "90.0" in page and "1.5" in page                              # parse rates in %, time per stage
    assert "finished 2026-01-01T09:30:00+00:00" in page                  # the run's end, not its start
    assert "Pooled herding per condition (stage 04)." in page            # a stage figure's own caption
    assert "(stage figure)" not in page
    assert "fig_dpo_training: not drawn — no DPO training step logged" in page
    paper_vs_ours = page.split('<h2 id="paper-vs-ours">Paper vs ours</h2>')[1].split("<h2")[0]
    assert "bizfin_table3" in paper_vs_ours and "0.58" in paper_vs_ours and "not comparable" in paper_vs_ours
    nb_page = (index.parent / "notebooks" / "04_scoring.html").read_text()
    assert "data:image/png;base64" in nb_page and "cdnjs" not in report.EXTERNAL_SCRIPT.pattern
    assert not report.EXTERNAL_SCRIPT.search(nb_page)                   # loads offline


def test_rebuild_replaces_the_report(built):
    cfg, index = built
    (cfg.figures_dir / "fig_demo.png").unlink()
    (cfg.figures_dir / "fig_demo.pdf").unlink()
    index = report.build_report(cfg)
    assert not (index.parent / "figures" / "fig_demo.png").exists()


def _chrome():
    """A headless Chromium driven by Selenium, or a skip naming what is missing."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not binary or not driver:
        pytest.skip("Debian's chromium/chromium-driver not installed (.ci/run installs them with apt-get when it can)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed (pip install -e '.[dev]')")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 f"--user-data-dir={tempfile.mkdtemp(prefix='chromium-')}"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=opts)


IMAGES_OK = "return Array.from(document.images).map(i => [i.getAttribute('src').slice(0, 60), i.complete && i.naturalWidth > 0])"


def _severe(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def test_headless_browser_loads_every_figure_and_notebook_page(built):
    _, index = built
    driver = _chrome()
    try:
        driver.get(index.as_uri())
        assert driver.title == "Run r — report"
        assert str(index.parent.parent.parent.parent) not in driver.page_source   # no machine path
        assert driver.find_element("css selector", "nav.toc").is_displayed()
        assert driver.execute_script(AVERAGE_VISIBLE), "Table 4's Average column is off-screen"
        images = driver.execute_script(IMAGES_OK)
        assert images and all(ok for _, ok in images), images
        assert not _severe(driver)
        pages = [a for a in report.local_links(index) if a.endswith(".html")]
        assert pages
        for page in pages:
            driver.get((index.parent / page).as_uri())
            assert driver.execute_script("return document.body.innerText.length") > 0, page
            assert str(index.parent.parent.parent.parent) not in driver.page_source, page
            images = driver.execute_script(IMAGES_OK)
            assert all(ok for _, ok in images), (page, images)
            assert not _severe(driver), (page, _severe(driver))
    finally:
        driver.quit()


def test_browser_test_can_fail_on_a_broken_image(built):
    _, index = built
    (index.parent / "figures" / "fig_demo.png").write_bytes(b"not a png")
    driver = _chrome()
    try:
        driver.get(index.as_uri())
        assert not all(ok for _, ok in driver.execute_script(IMAGES_OK))
    finally:
        driver.quit()


def test_index_shows_tables_3_to_8_with_key_columns_first_and_contents(built):
    _, index = built
    page = index.read_text()
    toc = page.split('<nav class="toc">')[1].split("</nav>")[0]
    assert 'href="#tables-3-8"' in toc and 'href="#t-table4_herding_with_without"' in toc and 'href="#figures"' in toc
    section = page.split('id="t-table4_herding_with_without"')[1].split("<h3")[0]
    headers = [h for h in section.split("<th>")[1:]]
    names = [h.split("</th>")[0] for h in headers]
    assert names.index("Average") < names.index("Sector 0 with a long name")
    assert "51.5/42.5***" in section and "Table 4: herding score (%)" in section


def test_no_absolute_path_and_progress_collapsed(built):
    cfg, index = built
    root = str(cfg.root)
    for path in index.parent.rglob("*"):
        if path.is_file() and path.suffix in (".html", ".json", ".md"):
            text = path.read_text(encoding="utf-8")
            assert root not in text and sys.prefix not in text, path
    nb_page = (index.parent / "notebooks" / "04_scoring.html").read_text()
    assert "100/100" in nb_page and "50/100" not in nb_page           # the final redraw only
    assert "IProgress not found" not in nb_page and "hello from ./data" in nb_page


def test_collapse_keeps_what_a_terminal_shows():
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x", outputs=[
        nbformat.v4.new_output("stream", name="stderr", text="\rbar:  10%|#"),
        nbformat.v4.new_output("stream", name="stderr", text="\rbar: 100%|##########\n"),
        nbformat.v4.new_output("stream", name="stdout", text="done\n")])])
    report.collapse_progress(nb)
    outs = nb.cells[0].outputs
    assert [o.text for o in outs] == ["bar: 100%|##########\n", "done\n"]


AVERAGE_VISIBLE = ("const th = Array.from(document.querySelectorAll('.wide th')).find(t => t.textContent === 'Average');"
                   "const r = th.getBoundingClientRect(); return r.width > 0 && r.right <= window.innerWidth;")


def test_browser_check_fails_when_the_key_columns_stay_at_the_end(built, monkeypatch):
    """Seeded fault: the table in its file order puts Average after eleven sectors, off-screen."""
    cfg, _ = built
    monkeypatch.setattr(report, "key_columns_first", lambda df: df)
    index = report.build_report(cfg)
    driver = _chrome()
    try:
        driver.get(index.as_uri())
        assert driver.execute_script(AVERAGE_VISIBLE) is False
    finally:
        driver.quit()
