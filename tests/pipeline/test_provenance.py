"""Published numbers change only through a run whose manifest says how they were made: a notebook cell
that edits cfg cannot write, and a partial rerun with other params refuses, naming the keys."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pandas as pd
import pytest

from finlib.core import lab
from finlib.core.artifacts import write_frame, write_json
from finlib.core.config import ParamsEditedError, changed_keys, load_run
from finlib.core.tables import write_table
from finlib.pipeline import provenance, runner

SECTIONS = {
    "00": "data",
    "01": "labels",
    "02": "perturb",
    "03": "inference",
    "04": "scoring",
    "05": "dpo",
    "06": "figures",
}


def published(root: Path, run: str = "default") -> dict:
    """A manifest as the runner leaves it after a whole run: its params, stages 00-06 ok."""
    cfg = load_run(run, root=root)
    manifest = {
        "run": run,
        "params": copy.deepcopy(cfg.params),
        "params_file": f"params/{run}.yaml",
        "stages": {s: {"status": "ok"} for s in SECTIONS},
    }
    (cfg.run_dir / "manifest.json").write_text(json.dumps(manifest, default=str))
    return json.loads(json.dumps(manifest, default=str))


# ---- a notebook cell edits cfg, then Run All -------------------------------------------------


def test_a_cell_edit_of_cfg_cannot_overwrite_the_opened_run(repo: Path):
    published(repo)
    cfg = lab.open_run("default", root=repo, quiet=True)
    assert cfg.name == "default"
    write_json(cfg, "before_edit", {"ok": 1})  # unedited: writes as usual
    cfg["scoring"]["bootstrap_reps"] = 200  # the cell edit
    for write in (
        lambda: write_frame(cfg, "metrics", pd.DataFrame({"a": [1]})),
        lambda: write_json(cfg, "scoring_report", {}),
        lambda: write_table(cfg, "table4_herding_with_without", pd.DataFrame({"a": [1]}), "c"),
    ):
        with pytest.raises(ParamsEditedError, match=r"scoring\.bootstrap_reps 1000 -> 200"):
            write()
    assert not (cfg.processed_dir / "metrics.parquet").exists()
    assert not (cfg.tables_dir / "table4_herding_with_without.csv").exists()


def test_a_config_not_opened_by_a_notebook_is_not_checked(repo: Path):
    cfg = load_run("default", root=repo)
    cfg["scoring"]["bootstrap_reps"] = 200
    assert write_json(cfg, "scoring_report", {}).is_file()


def test_changed_keys_names_leaves_both_sides():
    a = {"scoring": {"bootstrap_reps": 1000, "ci": 0.95}, "figures": {"width": "double"}}
    b = {"scoring": {"bootstrap_reps": 200, "ci": 0.95}, "figures": {}, "extra": 1}
    assert changed_keys(a, b) == {
        "scoring.bootstrap_reps": (1000, 200),
        "figures.width": ("double", None),
        "extra": (None, 1),
    }


# ---- a one-stage rerun with another params file of the same stem ----------------------------


def test_rerunning_one_stage_with_changed_params_refuses_naming_keys_and_stale_stages(repo: Path):
    manifest = published(repo)
    params = copy.deepcopy(manifest["params"])
    params["scoring"]["bootstrap_reps"] = 200
    with pytest.raises(provenance.StaleStagesError) as err:
        provenance.check_rerun("default", manifest, params, ["04"], SECTIONS)
    text = str(err.value)
    assert "scoring.bootstrap_reps 1000 -> 200" in text and "stage(s) 05, 06" in text and "--from 04" in text


def test_rerunning_from_the_changed_stage_on_is_allowed():
    manifest = {"params": {"scoring": {"bootstrap_reps": 1000}}, "stages": {s: {"status": "ok"} for s in SECTIONS}}
    changed = provenance.check_rerun("r", manifest, {"scoring": {"bootstrap_reps": 200}}, ["04", "05", "06"], SECTIONS)
    assert changed == {"scoring.bootstrap_reps": (1000, 200)}


def test_an_earlier_stage_whose_section_changed_is_stale_too():
    manifest = {"params": {"data": {"n": 1}}, "stages": {s: {"status": "ok"} for s in SECTIONS}}
    stale = provenance.stale_stages(
        manifest, ["04", "05", "06"], changed_keys({"data": {"n": 1}}, {"data": {"n": 2}}), SECTIONS
    )
    assert stale == ["00"]


def test_unchanged_params_and_first_runs_pass():
    manifest = {"params": {"scoring": {"bootstrap_reps": 1000}}, "stages": {s: {"status": "ok"} for s in SECTIONS}}
    assert provenance.check_rerun("r", manifest, {"scoring": {"bootstrap_reps": 1000}}, ["04"], SECTIONS) == {}
    assert provenance.check_rerun("r", {}, {"scoring": {}}, ["04"], SECTIONS) == {}


def test_runner_refuses_before_any_stage_runs(repo: Path, monkeypatch):
    """run_pipeline with RUN=other/default.yaml-like params: the refusal comes before a notebook runs."""
    published(repo)
    other = repo / "other"
    other.mkdir()
    (other / "default.yaml").write_text("extends: ../params/default.yaml\nscoring:\n  bootstrap_reps: 200\n")
    for stage in SECTIONS:
        (repo / "notebooks" / f"{stage}_x.ipynb").write_text("{}")
    monkeypatch.setattr(runner, "repo_root", lambda *a, **k: repo)
    ran = []
    monkeypatch.setattr(runner, "execute_stage", lambda *a, **k: ran.append(a[1]))
    monkeypatch.setattr("finlib.core.config.repo_root", lambda *a, **k: repo)
    with pytest.raises(provenance.StaleStagesError, match=r"scoring\.bootstrap_reps 1000 -> 200"):
        runner.run_pipeline("default", ["04"], params_file=str(other / "default.yaml"))
    assert ran == []
    assert (
        json.loads((repo / "runs" / "default" / "manifest.json").read_text())["params"]["scoring"]["bootstrap_reps"]
        == 1000
    )
