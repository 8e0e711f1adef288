"""Fin-Bias stages 00-03 keep the one stage contract: SECTION, run(cfg) -> result with tables and a
report, summary(cfg, result) -> Markdown; their notebooks only display what `run` wrote, and the
captions of stage 01 follow `labels.quantiles` instead of printing the paper's split."""
from __future__ import annotations

import ast
import importlib
import json
from pathlib import Path

import pytest

from finlib.core.stage import contract_problems
from finlib.core.tables import read_table_csv

ROOT = Path(__file__).resolve().parents[2]
MODULES = {"00_data_prep": "finlib.finbias.data.stage", "01_labels": "finlib.finbias.labels.stage",
           "02_perturbations": "finlib.finbias.perturb.stage", "03_inference": "finlib.finbias.inference.stage"}
SECTIONS = {"00_data_prep": "data", "01_labels": "labels", "02_perturbations": "perturb", "03_inference": "inference"}
OLD_ENTRY_NAMES = ("prepare_data", "build_labels", "run_stage", "write_stage")


def called_names(source: str) -> set[str]:
    """Every function or attribute name called in a cell (`write_table(...)`, `x.write_table(...)`);
    IPython magics and shell lines are blanked so the cell parses."""
    text = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
    names = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call):
            f = node.func
            names.add(f.id if isinstance(f, ast.Name) else getattr(f, "attr", ""))
    return names


def notebook_calls(path: Path) -> set[str]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return set().union(*(called_names("".join(c["source"])) for c in cells if c["cell_type"] == "code"))


@pytest.mark.parametrize("notebook", sorted(MODULES))
def test_each_module_keeps_the_contract(notebook):
    module = importlib.import_module(MODULES[notebook])
    assert contract_problems(module) == []
    assert module.SECTION == SECTIONS[notebook]
    assert not [n for n in OLD_ENTRY_NAMES if hasattr(module, n)], "old entry names are removed, not aliased"


def test_the_contract_check_catches_a_missing_summary_and_a_wrong_run(monkeypatch):
    from finlib.finbias.labels import stage

    monkeypatch.delattr(stage, "summary")
    assert contract_problems(stage) == ["finlib.finbias.labels.stage: no `summary`"]
    monkeypatch.setattr(stage, "run", lambda cfg, models: None)
    assert any("run takes ['cfg', 'models']" in p for p in contract_problems(stage))


@pytest.mark.parametrize("notebook", sorted(MODULES))
def test_notebooks_00_to_03_write_no_table_and_call_their_stage(notebook):
    calls = notebook_calls(ROOT / "notebooks" / f"{notebook}.ipynb")
    assert "write_table" not in calls, f"{notebook} writes a table: tables and captions belong in its stage's run"
    assert {"run", "summary"} <= calls
    assert not calls & set(OLD_ENTRY_NAMES)


def test_the_notebook_scan_finds_a_table_write():
    assert "write_table" in called_names("from finlib.core.tables import write_table\nwrite_table(cfg, 'x', df, 'c')")
    assert "write_table" in called_names("tables.write_table(cfg, 'x', df, 'c')")
    assert "write_table" not in called_names("display(res.tables['x'])  # write_table is the stage's")


def test_bucket_split_reads_the_quantiles():
    from finlib.finbias.labels.stage import bucket_split

    assert bucket_split((0.30, 0.70)) == "30/40/30"
    assert bucket_split((0.25, 0.75)) == "25/50/25"
    assert bucket_split((0.1, 0.6)) == "10/50/40"


def caption_of(cfg, name: str) -> str:
    with open(cfg.tables_dir / f"{name}.csv", encoding="utf-8") as fh:
        return fh.readline()


@pytest.mark.slow
def test_stage_01_captions_follow_the_quantiles(tmp_run):
    """Quantiles 0.2/0.8 give 20/60/20 buckets: the captions say so, and the tables' counts agree."""
    from finlib.finbias.data import stage as data
    from finlib.finbias.labels import stage as labels

    tmp_run.params["data"]["synthetic"]["n_reports"] = 150  # years of 10+ reports, where the split shows
    data.run(tmp_run)
    tmp_run.params["labels"]["quantiles"] = [0.2, 0.8]
    res = labels.run(tmp_run)
    for name in ("table3_return_ratings", "labels_shares_by_year"):
        caption = caption_of(tmp_run, name)
        assert "20/60/20" in caption and "30/40/30" not in caption, caption
        assert name in res.tables
    shares = read_table_csv(tmp_run.tables_dir / "labels_shares_by_year.csv")
    big = shares[shares["n"] >= 10]
    assert len(big), "the run needs a year with 10 labelled reports to check the split"
    for r in big.itertuples():  # bottom 20 % and top 20 %, rounded half down per year
        assert abs(r.bearish - 0.2 * r.n) <= 0.5 and abs(r.bullish - 0.2 * r.n) <= 0.5
    text = (tmp_run.figures_dir / "labels_car_by_year.caption.txt").read_text(encoding="utf-8")
    assert "20/60/20 per year" in text


@pytest.mark.slow
def test_stage_00_and_01_write_every_table_they_return(tmp_run):
    """What `run` returns as a written table is on disk with its caption, and `summary` names the caveat."""
    from finlib.core.tables import SYNTHETIC_CAVEAT
    from finlib.finbias.data import stage as data
    from finlib.finbias.labels import stage as labels

    for stage, written in ((data, ("table2_sectors", "table3_analyst_ratings")),
                           (labels, ("labels_exclusions", "table3_return_ratings", "labels_shares_by_year",
                                     "labels_car_by_year", "labels_beta_distribution", "labels_method_agreement",
                                     "analyst_accuracy_by_sector", "labels_synthetic_recovery"))):
        res = stage.run(tmp_run)
        for name in written:
            on_disk = read_table_csv(tmp_run.tables_dir / f"{name}.csv")
            assert list(on_disk.columns) == [str(c) for c in res.tables[name].columns]
            assert len(on_disk) == len(res.tables[name])
            assert caption_of(tmp_run, name).startswith("# ")
        assert SYNTHETIC_CAVEAT in stage.summary(tmp_run, res)
        assert set(res.report)


def test_labels_figures_draw_with_the_project_palette(tmp_run):
    """Ratings in the labels stage's figure take the colours of `figures.base.RATING_COLORS`, the
    estimators the fixed greys: the same colours stage 06 uses for the same ratings."""
    import matplotlib.pyplot as plt
    import numpy as np
    import pandas as pd
    from matplotlib.colors import to_hex

    from finlib.finbias.figures.base import ALTERNATIVE_GREYS, RATING_COLORS
    from finlib.finbias.labels import stage as labels

    rng = np.random.default_rng(0)
    n = 30
    lab = pd.DataFrame({"report_id": [f"r{i}" for i in range(n)], "car": rng.normal(0, 0.1, n),
                        "label": rng.choice(["bullish", "neutral", "bearish"], n), "beta": rng.normal(1, 0.2, n),
                        "beta_mackinlay": rng.normal(1, 0.2, n)})
    reports = pd.DataFrame({"report_id": lab["report_id"], "date": pd.to_datetime("2021-03-01")})
    fig = labels.plot_car_by_year(tmp_run, lab, reports, "paper", 60)
    points = {to_hex(c.get_facecolor()[0]) for c in fig.axes[0].collections if len(c.get_offsets())}
    assert points == {RATING_COLORS[r] for r in ("bullish", "neutral", "bearish")}
    fig2 = labels.plot_beta_distribution(tmp_run, lab, "paper")
    bars = {to_hex(p.get_facecolor()[:3]) for p in fig2.axes[0].patches}
    assert bars == set(ALTERNATIVE_GREYS[:2])
    plt.close("all")
