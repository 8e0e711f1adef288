"""The HTML report: every link resolves, and a real headless browser loads every figure and page."""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import matplotlib
import nbformat
import pandas as pd
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from finlib.core import report
from finlib.core.config import RunConfig
from finlib.core.tables import save_figure, write_table


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
            nbformat.v4.new_output("stream", name="stdout", text="hello\n"),
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
    plt.close(fig)
    write_table(cfg, "table4_demo", pd.DataFrame({"model": ["m"], "value": [0.5]}), "Demo table")
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
         "stages": {"04": {"notebook": "notebooks/04_scoring.ipynb", "status": "ok", "seconds": 1.5}}}))
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
    assert "0.9" in page and "1.5" in page                               # parse rates, time per stage
    paper_vs_ours = page.split("<h2>Paper vs ours</h2>")[1].split("<h2>")[0]
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
        images = driver.execute_script(IMAGES_OK)
        assert images and all(ok for _, ok in images), images
        assert not _severe(driver)
        pages = [a for a in report.local_links(index) if a.endswith(".html")]
        assert pages
        for page in pages:
            driver.get((index.parent / page).as_uri())
            assert driver.execute_script("return document.body.innerText.length") > 0, page
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
