"""`make reproduce RUN=mine` with params/mine.yaml extending a finished run: the parent's artifacts of the
stages before the first changed one are linked and not recomputed; the parent's timings give each stage
an expected duration; a DPO adapter trained from the same inputs in another run is taken, not retrained;
stage 05 says what it does after training; a page comparing two runs has its make target."""
from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import yaml

from finlib.core.config import RunConfig
from finlib.core.progress_feed import FEED_ENV
from finlib.finbias.dpo import stage as dpo_stage
from finlib.finbias.dpo import train as dpo_train
from finlib.pipeline import runner

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = {"00": "data", "01": "labels", "02": "perturb", "03": "inference", "04": "scoring", "05": "dpo",
            "06": "figures"}
PARAMS = {"seed": 1, **{sec: {"k": 1} for sec in SECTIONS.values()}}


def finished_parent(root: Path) -> dict:
    """runs/default/manifest.json of a finished run: stages 00-06 ok, one artifact file each, 2 min each."""
    stages = {}
    for stage, section in SECTIONS.items():
        rel = f"data/processed/default/out_{stage}.parquet"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(f"stage {stage}".encode())
        stages[stage] = {"status": "ok", "section": section, "artifacts": {rel: f"h{stage}"}, "seconds": 120.0}
    manifest = {"run": "default", "status": "ok", "params": copy.deepcopy(PARAMS), "stages": stages}
    (root / "runs" / "default").mkdir(parents=True)
    (root / "runs" / "default" / "manifest.json").write_text(json.dumps(manifest))
    return manifest


def mine(root: Path, change: dict) -> RunConfig:
    """params/mine.yaml: `extends: default.yaml` and one change."""
    (root / "params").mkdir(exist_ok=True)
    (root / "params" / "default.yaml").write_text(yaml.safe_dump(PARAMS))
    (root / "params" / "mine.yaml").write_text(yaml.safe_dump({"extends": "default.yaml", **change}))
    params = copy.deepcopy(PARAMS)
    for sec, values in change.items():
        params[sec] = {**params.get(sec, {}), **values}
    cfg = RunConfig(name="mine", params=params, root=root, params_file=root / "params" / "mine.yaml")
    cfg.run_dir.mkdir(parents=True, exist_ok=True)
    return cfg


def test_a_stage_04_change_reuses_stages_00_to_03_and_runs_the_rest(tmp_path, capsys):
    finished_parent(tmp_path)
    cfg = mine(tmp_path, {"scoring": {"k": 2}})
    name, parent = runner.parent_run(cfg)
    assert name == "default" and parent["status"] == "ok"
    manifest: dict = {}
    rest = runner.reuse_from_parent(cfg, manifest, list(SECTIONS), name, parent)
    assert rest == ["04", "05", "06"]
    for stage in ("00", "01", "02", "03"):
        linked = tmp_path / f"data/processed/mine/out_{stage}.parquet"
        assert linked.read_bytes() == f"stage {stage}".encode()
        entry = manifest["stages"][stage]
        assert entry["reused_from"] == "default" and entry["status"] == "ok"
        assert list(entry["artifacts"]) == [f"data/processed/mine/out_{stage}.parquet"]
    assert not (tmp_path / "data/processed/mine/out_04.parquet").exists()
    assert manifest["reused"]["rerun_from"] == "04"
    on_disk = json.loads((cfg.run_dir / "manifest.json").read_text())
    assert set(on_disk["reused"]["stages"]) == {"00", "01", "02", "03"}
    assert "stages 00, 01, 02, 03 reused from run 'default'" in capsys.readouterr().out


def test_a_partial_call_records_every_stage_it_links(tmp_path):
    """`make figures RUN=mine` (stages 04 on) on a fresh run: 00-03 are linked and recorded all the same."""
    parent = finished_parent(tmp_path)
    cfg = mine(tmp_path, {"scoring": {"k": 2}})
    manifest: dict = {}
    assert runner.reuse_from_parent(cfg, manifest, ["04", "05", "06"], "default", parent) == ["04", "05", "06"]
    assert sorted(manifest["stages"]) == ["00", "01", "02", "03"]
    assert (tmp_path / "data/processed/mine/out_03.parquet").is_file()


def test_nothing_is_reused_for_a_change_any_stage_may_read_or_a_run_with_history(tmp_path):
    parent = finished_parent(tmp_path)
    cfg = mine(tmp_path, {"seed_source": {"k": 2}})  # a section no stage names: every stage may read it
    assert runner.reuse_from_parent(cfg, {}, list(SECTIONS), "default", parent) == list(SECTIONS)
    cfg = mine(tmp_path, {"scoring": {"k": 2}})
    own = {"stages": {"00": {"status": "ok"}}}  # the run has stages of its own: its own history wins
    assert runner.reuse_from_parent(cfg, own, list(SECTIONS), "default", parent) == list(SECTIONS)
    unfinished = {**parent, "status": "failed"}
    assert runner.reuse_from_parent(cfg, {}, list(SECTIONS), "default", unfinished) == list(SECTIONS)


def test_a_run_without_a_parent_run_on_disk_has_no_parent(tmp_path):
    cfg = mine(tmp_path, {"scoring": {"k": 2}})
    assert runner.parent_run(cfg) == ("default", None)
    plain = RunConfig(name="default", params=PARAMS, root=tmp_path, params_file=tmp_path / "params" / "default.yaml")
    assert runner.parent_run(plain) == (None, None)


def test_expected_duration_from_the_parent_when_the_run_never_finished_the_stage():
    parent = {"run": "default", "stages": {"04": {"status": "ok", "seconds": 120.0}}}
    line = runner.expected_time({}, "04", parent)
    assert "took 2.0 min in run 'default'" in line and "expect it done around" in line
    own = {"stages": {"04": {"status": "ok", "seconds": 60.0}}}
    assert "took 1.0 min last time" in runner.expected_time(own, "04", parent)
    assert runner.expected_time({}, "05", parent) == ""


def adapter_folder(folder: Path, fp: str) -> None:
    (folder / "adapter").mkdir(parents=True)
    (folder / "adapter" / dpo_train.ADAPTER_FILES[1]).write_bytes(b"weights " + fp.encode())
    (folder / "fingerprint.json").write_text(json.dumps({"fingerprint": fp, "max_length": 64}))
    (folder / "train_log.csv").write_text("step,loss\n1,0.69\n")


def test_an_adapter_of_the_same_inputs_in_another_run_is_taken_not_retrained(tmp_path):
    cfg = RunConfig(name="mine", params=PARAMS, root=tmp_path, params_file=tmp_path / "mine.yaml")
    adapter_folder(tmp_path / "runs" / "default" / "dpo" / "m", "abc")
    adapter_folder(tmp_path / "runs" / "other" / "dpo" / "m", "xyz")
    out = tmp_path / "runs" / "mine" / "dpo" / "m"
    assert dpo_stage.adopt_adapter(cfg, out, "nothing-like-it") is None and not out.exists()
    assert dpo_stage.adopt_adapter(cfg, out, "abc") == Path("runs/default/dpo/m")
    assert (out / "adapter" / dpo_train.ADAPTER_FILES[1]).read_bytes() == b"weights abc"
    assert dpo_stage._adapter_fingerprint(out) == "abc" and (out / "train_log.csv").is_file()


def test_stage_05_steps_reach_the_runners_terminal(tmp_path, monkeypatch, capsys):
    feed = tmp_path / "05.log"
    monkeypatch.setenv(FEED_ENV, str(feed))
    dpo_train.step("dpo: per-token reward margins of the 6 training pairs")
    assert feed.read_text() == "dpo: per-token reward margins of the 6 training pairs\n"
    assert "reward margins" in capsys.readouterr().err


def test_compare_two_runs_has_a_make_target():
    out = subprocess.run(["make", "-n", "compare-tables", "RUN=a", "OTHER=b"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    assert "finlib.pipeline.compare_runs --run a --from-run b" in out
