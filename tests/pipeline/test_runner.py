"""The papermill runner: stages in order, a stage rerun alone, and the manifest."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import nbformat
import pytest

from finlib.pipeline.runner import discover_stages, run_pipeline, select_stages

PARAMS_CELL = 'run_name = "smoke"\nparams_file = None\n'
WRITER = (
    "import pandas as pd\nfrom finlib.core.config import load_run\nfrom finlib.core.artifacts import write_frame\n"
    "cfg = load_run(run_name, params_file)\n"
    "write_frame(cfg, 'reports', pd.DataFrame({'report_id': ['r1', 'r2'], 'n': [cfg.seed, 2]}))\n"
)
READER = (
    "from finlib.core.config import load_run\nfrom finlib.core.artifacts import read_frame, write_frame\n"
    "cfg = load_run(run_name, params_file)\n"
    "df = read_frame(cfg, 'reports')\n"
    "write_frame(cfg, 'labels', df.assign(label='bullish'))\n"
)


def _notebook(path: Path, body: str) -> None:
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell(PARAMS_CELL)
    params.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell("# test stage"), params, nbformat.v4.new_code_cell(body)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


@pytest.fixture()
def mini_repo(tmp_path: Path, repo_root: Path, monkeypatch) -> Path:
    root = tmp_path / "repo"
    (root / "notebooks").mkdir(parents=True)
    shutil.copytree(repo_root / "params", root / "params")
    (root / "pyproject.toml").write_text("[project]\nname='mini'\n")
    _notebook(root / "notebooks" / "00_write.ipynb", WRITER)
    _notebook(root / "notebooks" / "01_read.ipynb", READER)
    monkeypatch.chdir(root)
    return root


def test_select_stages():
    available = {"00": Path("a"), "01": Path("b"), "02": Path("c")}
    assert select_stages(available) == ["00", "01", "02"]
    assert select_stages(available, only=["2", "00"]) == ["00", "02"]
    assert select_stages(available, start="01") == ["01", "02"]
    with pytest.raises(SystemExit, match="unknown stage"):
        select_stages(available, only=["07"])


def test_repository_notebooks_are_numbered_stages(repo_root: Path):
    stages = discover_stages(repo_root / "notebooks")
    assert list(stages) == sorted(stages)
    assert all(len(k) == 2 and k.isdigit() for k in stages)


@pytest.mark.slow
def test_pipeline_then_stage_alone_reads_previous_artifacts(mini_repo: Path):
    manifest = run_pipeline("smoke")
    processed = mini_repo / "data" / "processed" / "smoke"
    assert (processed / "labels.parquet").is_file()
    first_end = manifest["stages"]["01"]["ended"]

    # Stage 01 alone: reads 00's artifact from disk; the manifest keeps 00's entry.
    manifest = run_pipeline("smoke", stages=["01"])
    on_disk = json.loads((mini_repo / "runs" / "smoke" / "manifest.json").read_text())
    assert on_disk["stages"]["00"]["status"] == "ok" and on_disk["stages"]["01"]["status"] == "ok"
    assert on_disk["stages"]["01"]["ended"] >= first_end
    assert "data/processed/smoke/labels.parquet" in on_disk["stages"]["01"]["artifacts"]
    assert len(on_disk["stages"]["01"]["artifacts"]["data/processed/smoke/labels.parquet"]) == 64
    assert (mini_repo / "runs" / "smoke" / "notebooks" / "01_read.ipynb").is_file()

    # The manifest records how the numbers were made.
    assert on_disk["params"]["data"]["synthetic"]["n_reports"] == 12
    assert "params/smoke.yaml" in on_disk["inputs"]
    assert on_disk["packages"]["pandas"] and on_disk["python"]
    assert {"commit", "dirty"} <= set(on_disk["git"])

    # Executed notebooks carry only the run name and params path as parameters.
    executed = nbformat.read(mini_repo / "runs" / "smoke" / "notebooks" / "01_read.ipynb", as_version=4)
    injected = [c for c in executed.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == 1
    assert "run_name = \"smoke\"" in injected[0].source and "params_file" in injected[0].source


def test_the_manifest_records_each_kernels_own_peak_memory(mini_repo: Path):
    """The kernel's peak, read by the runner: at least what the notebook held, and not the runner's."""
    _notebook(mini_repo / "notebooks" / "00_write.ipynb",
              WRITER + "held = bytearray(300 * 2**20)\nfor i in range(0, len(held), 4096):\n    held[i] = 1\n")
    manifest = run_pipeline("smoke")
    peaks = {k: v["peak_rss_mb"] for k, v in manifest["stages"].items()}
    assert peaks["00"] >= 300 and peaks["01"] < 300, peaks


@pytest.mark.slow
def test_stage_alone_without_predecessor_fails_and_says_which_stage(mini_repo: Path):
    with pytest.raises(Exception, match="run stage 00 first"):
        run_pipeline("smoke", stages=["01"])
    manifest = json.loads((mini_repo / "runs" / "smoke" / "manifest.json").read_text())
    assert manifest["stages"]["01"]["status"] == "failed"


@pytest.mark.slow
def test_params_file_outside_the_repository(mini_repo: Path, tmp_path: Path):
    outside = tmp_path / "elsewhere" / "custom.yaml"
    outside.parent.mkdir()
    outside.write_text(f"extends: {mini_repo / 'params' / 'smoke.yaml'}\nseed: 7\n")
    manifest = run_pipeline("custom", stages=["00"], params_file=str(outside))
    assert manifest["params_file"] == str(outside)
    assert manifest["params"]["seed"] == 7 and str(outside) in manifest["inputs"]
    assert manifest["stages"]["00"]["status"] == "ok"


def test_git_state_counts_untracked_files(tmp_path: Path):
    import subprocess

    from finlib.pipeline.runner import git_state

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "a.py").write_text("x = 1\n")
    subprocess.run(["git", "-C", str(tmp_path), "add", "a.py"], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-qm", "init"], check=True)
    assert git_state(tmp_path)["dirty"] is False
    (tmp_path / "new_module.py").write_text("y = 2\n")
    state = git_state(tmp_path)
    assert state["dirty"] is True and any("new_module.py" in f for f in state["changed_files"])


@pytest.mark.slow
def test_manifest_records_reruns_and_key_variable_names_only(mini_repo: Path, monkeypatch):
    """The manifest records which stages an invocation reran, and the NAMES of the key variables."""
    import yaml
    from llm_helpers import api_record, write_registry

    monkeypatch.setenv("RUNNER_TEST_KEY", "sk-runner-sentinel-42")
    registry = write_registry(mini_repo, api_record("keyed", "http://127.0.0.1:1/v1", "RUNNER_TEST_KEY"))
    smoke = yaml.safe_load((mini_repo / "params" / "smoke.yaml").read_text())
    smoke.setdefault("inference", {}).update(registry=registry, models=["keyed"])
    (mini_repo / "params" / "smoke.yaml").write_text(yaml.safe_dump(smoke))
    first = run_pipeline("smoke")
    assert first["invocation"]["rerun"] == [] and first["invocation"]["stages"] == ["00", "01"]
    assert first["env_vars"]["set"] == {"RUNNER_TEST_KEY": True}
    keyed = {m: v for m, v in first["env_vars"]["models"].items() if v is not None}  # the local models take no key
    assert keyed == {"keyed": "RUNNER_TEST_KEY"}
    second = run_pipeline("smoke", stages=["01"])
    assert second["invocation"]["rerun"] == ["01"] and second["invocation"]["previous_status"] == {"01": "ok"}
    text = (mini_repo / "runs" / "smoke" / "manifest.json").read_text()
    assert "RUNNER_TEST_KEY" in text and "sk-runner-sentinel-42" not in text


def test_failed_stage_exits_non_zero_with_one_clear_line(mini_repo: Path, capsys):
    from finlib.pipeline.runner import main

    _notebook(mini_repo / "notebooks" / "01_read.ipynb", "raise RuntimeError('most calls failed: HTTP 401')")
    assert main(["--run", "smoke"]) == 1
    err = capsys.readouterr().err
    assert "FAILED: RuntimeError: most calls failed: HTTP 401" in err
    manifest = json.loads((mini_repo / "runs" / "smoke" / "manifest.json").read_text())
    assert manifest["stages"]["01"]["status"] == "failed" and manifest["stages"]["00"]["status"] == "ok"


def test_a_stage_killed_mid_run_reads_running_and_the_rerun_says_so(mini_repo: Path, monkeypatch):
    """SIGKILL leaves no `finally`: the manifest must already say which stage was running."""
    import papermill

    from finlib.core.artifacts import load_manifest
    from finlib.core.config import load_run

    seen = {}

    def killed(*args, **kwargs):  # stands in for a run killed inside the notebook
        seen.update(load_manifest(load_run("smoke"))["stages"])
        raise SystemExit("killed")

    with monkeypatch.context() as m:
        m.setattr(papermill, "execute_notebook", killed)
        with pytest.raises(SystemExit):
            run_pipeline("smoke", stages=["00"])
    assert seen["00"]["status"] == "running"
    manifest = json.loads((mini_repo / "runs" / "smoke" / "manifest.json").read_text())
    assert manifest["stages"]["00"]["status"] == "interrupted"  # a catchable interruption is recorded as such
    manifest = json.loads((mini_repo / "runs" / "smoke" / "manifest.json").read_text())
    manifest["stages"]["00"]["status"] = "running"  # what a SIGKILL (no finally) leaves on disk
    (mini_repo / "runs" / "smoke" / "manifest.json").write_text(json.dumps(manifest))
    rerun = run_pipeline("smoke", stages=["00"])
    assert rerun["invocation"]["rerun"] == ["00"] and rerun["invocation"]["previous_status"] == {"00": "running"}
    assert rerun["stages"]["00"]["status"] == "ok"
