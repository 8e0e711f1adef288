"""An exploration links its parent's artifacts for every stage before the first one whose params
section changed, and records which; a change no stage section names reuses nothing."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from finlib.core import lab
from finlib.core.config import load_run
from finlib.core.reuse import first_changed_stage, reuse_parent

SECTIONS = {
    "00": "data",
    "01": "labels",
    "02": "perturb",
    "03": "inference",
    "04": "scoring",
    "05": "dpo",
    "06": "figures",
}


def parent_on_disk(root: Path, run: str, params: dict) -> dict:
    """Stages 00-06 ok, each with its section and one artifact file written under the run's folders."""
    stages = {}
    for stage, section in SECTIONS.items():
        rel = f"data/processed/{run}/out_{stage}.parquet" if stage != "06" else f"figures/{run}/fig_{stage}.png"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(f"stage {stage}".encode())
        stages[stage] = {"status": "ok", "section": section, "artifacts": {rel: "hash"}}
    return {"run": run, "params": copy.deepcopy(params), "stages": stages}


def with_change(params: dict, section: str, key: str, value) -> dict:
    out = copy.deepcopy(params)
    out.setdefault(section, {})[key] = value
    return out


def test_first_changed_stage_follows_stage_order():
    params = {"seed": 1, **{s: {"k": 1} for s in SECTIONS.values()}}
    parent = {"params": params, "stages": {s: {"section": sec} for s, sec in SECTIONS.items()}}
    assert first_changed_stage(parent, with_change(params, "scoring", "k", 2)) == "04"
    assert first_changed_stage(parent, with_change(params, "figures", "k", 2)) == "06"
    assert first_changed_stage(parent, {**params, "seed": 2}) == ""  # any stage may read the seed
    assert first_changed_stage(parent, params) is None


def test_a_scoring_change_reuses_stages_00_to_03_only(tmp_path: Path):
    params = {"seed": 1, **{s: {"k": 1} for s in SECTIONS.values()}}
    parent = parent_on_disk(tmp_path, "default", params)
    rec = reuse_parent(tmp_path, "default", parent, "default-lab-1", with_change(params, "scoring", "k", 2))
    assert rec == {"from": "default", "stages": {"00": 1, "01": 1, "02": 1, "03": 1}, "rerun_from": "04"}
    mine = tmp_path / "data" / "processed" / "default-lab-1"
    assert sorted(p.name for p in mine.iterdir()) == [f"out_{s}.parquet" for s in ("00", "01", "02", "03")]
    assert (mine / "out_03.parquet").read_bytes() == b"stage 03"
    assert not (tmp_path / "figures" / "default-lab-1").exists()


def test_a_seed_change_reuses_nothing(tmp_path: Path):
    params = {"seed": 1, **{s: {"k": 1} for s in SECTIONS.values()}}
    parent = parent_on_disk(tmp_path, "default", params)
    rec = reuse_parent(tmp_path, "default", parent, "default-lab-2", {**params, "seed": 2})
    assert rec["stages"] == {} and rec["rerun_from"] is None
    assert not (tmp_path / "data" / "processed" / "default-lab-2").exists()


def test_a_notebook_exploration_opens_with_the_upstream_artifacts_in_place(repo: Path):
    cfg = load_run("default", root=repo)
    parent = parent_on_disk(repo, "default", json.loads(json.dumps(cfg.params, default=str)))
    (cfg.run_dir / "manifest.json").write_text(json.dumps(parent))
    mine = repo / "mine.yaml"
    mine.write_text("extends: default.yaml\nscoring:\n  bootstrap_reps: 200\n")
    explore = lab.open_run("default", params_file=str(mine), root=repo, quiet=True)
    assert explore.name.startswith("default-lab-")
    assert (explore.processed_dir / "out_03.parquet").read_bytes() == b"stage 03"
    assert not (explore.processed_dir / "out_04.parquet").exists()
    manifest = json.loads((explore.run_dir / "manifest.json").read_text())
    assert manifest["reused"]["rerun_from"] == "04" and manifest["reused"]["from"] == "default"
