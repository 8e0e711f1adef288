"""results.json holds every headline number with its interval and N, the params, versions and commit;
a run ends with its total time, those numbers and where its outputs are."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from finlib.core.artifacts import write_frame
from finlib.core.config import RunConfig
from finlib.core.tables import write_table
from finlib.pipeline import results

POOLED = "Average (pooled)"


def metrics_rows(model: str, condition: str, metric: str, value: float, n: int, sector: str = POOLED) -> dict:
    return {
        "model": model,
        "condition": condition,
        "sector": sector,
        "metric": metric,
        "value": value,
        "ci_low": value - 0.05,
        "ci_high": value + 0.05,
        "n": n,
        "parse_rate": 1.0,
    }


@pytest.fixture()
def cfg(tmp_path: Path) -> RunConfig:
    cfg = RunConfig(
        name="r",
        params={"data": {"source": "synthetic"}, "scoring": {"ci": 0.9}},
        root=tmp_path,
        params_file=tmp_path / "r.yaml",
    )
    for d in (cfg.processed_dir, cfg.tables_dir, cfg.run_dir):
        d.mkdir(parents=True, exist_ok=True)
    return cfg


MANIFEST = {
    "params_file": "params/r.yaml",
    "params": {"scoring": {"ci": 0.9}},
    "python": "3.11.9",
    "packages": {"numpy": "2.0"},
    "git": {"commit": "abc123", "dirty": False},
    "updated": "2026-01-01T00:00:00",
    "invocation": {"started": "2026-01-01T00:00:00+00:00"},
}


def test_results_hold_headline_numbers_with_interval_n_and_provenance(cfg: RunConfig):
    write_frame(
        cfg,
        "metrics",
        pd.DataFrame(
            [
                metrics_rows("m", "original", "herding", 0.6, 40),
                metrics_rows("m", "no_rating", "herding", 0.4, 38),
                metrics_rows("m", "original", "herding", 1.0, 1, sector="Technology"),  # a sector: not headline
                metrics_rows("Analyst", "original", "accuracy", 0.5, 40),  # not a model
                metrics_rows("m", "original", "accuracy", 0.45, 40),
            ]
        ),
    )
    path = results.write_results(cfg, MANIFEST)
    doc = json.loads(path.read_text())
    by = {(e["metric"], e["condition"]): e for e in doc["results"]}
    assert set(by) == {("herding", "original"), ("herding", "no_rating"), ("accuracy", "original")}
    h = by[("herding", "original")]
    assert (h["value"], h["ci_low"], h["ci_high"], h["n"], h["model"]) == (60.0, 55.0, 65.0, 40, "m")
    assert doc["git"] == {"commit": "abc123", "dirty": False} and doc["versions"]["numpy"] == "2.0"
    assert doc["config"] == MANIFEST["params"] and doc["ci_level"] == 0.9 and doc["synthetic_data"] is True
    assert doc["absent"] == ["dpo_metrics (stage 05)", "bizfin_table3_ci (stage 07)"]


def test_bizfin_average_comes_from_table3_long_form(cfg: RunConfig):
    write_table(
        cfg,
        "bizfin_table3_ci",
        pd.DataFrame(
            [
                {
                    "model": "g",
                    "rule": "official",
                    "task": "Average",
                    "score": 55.5,
                    "ci_low": 40.0,
                    "ci_high": 70.0,
                    "n_items": 9,
                },
                {
                    "model": "g",
                    "rule": "ours",
                    "task": "Average",
                    "score": 60.0,
                    "ci_low": 45.0,
                    "ci_high": 75.0,
                    "n_items": 9,
                },
            ]
        ),
        "c",
        synthetic_caveat=False,
    )
    numbers, absent = results.headline_numbers(cfg)
    assert [(e["benchmark"], e["value"], e["ci_low"], e["n"]) for e in numbers] == [("bizfinbench", 55.5, 40.0, 9)]
    assert absent == ["metrics (stage 04)", "dpo_metrics (stage 05)"]


def test_closing_lines_give_total_time_numbers_and_paths(cfg: RunConfig):
    write_frame(cfg, "metrics", pd.DataFrame([metrics_rows("m", "original", "herding", 0.6, 40)]))
    path = results.write_results(cfg, MANIFEST)
    lines = results.closing_lines(cfg, {**MANIFEST, "report": {"index": "runs/r/report/index.html"}}, 754.0, path)
    text = "\n".join(lines)
    assert "total time 12.6 min (754 s)" in lines[0]
    assert "fin-bias herding m original: 60.0 % [55.0, 65.0] N=40" in text
    assert "results: runs/r/results.json" in text and "report: runs/r/report/index.html" in text
    assert "tables: figures/r/tables" in text and "synthetic data" in text


def test_a_long_stage_says_how_long_it_took_last_time():
    from finlib.pipeline.runner import expected_time

    manifest = {"stages": {"03": {"status": "ok", "seconds": 432.0}, "04": {"status": "ok", "seconds": 3.0},
                           "05": {"status": "failed", "seconds": 400.0}}}
    assert expected_time(manifest, "03").startswith(" (took 7.2 min last time, expect it done around ")
    assert expected_time(manifest, "04") == "" and expected_time(manifest, "05") == ""
    assert expected_time({}, "03") == ""
