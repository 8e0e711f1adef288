"""Which run a notebook opens (JupyterLab without injected parameters), and that an exploration with
other parameters never writes into a run made with different ones."""
from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import nbformat
import pytest

from finlib.core import lab
from finlib.core.artifacts import MissingArtifactError, read_frame, write_frame
from finlib.core.config import load_run
from finlib.core.errors import ConfigError


def _runner_manifest(root: Path, run: str, params_file: str | None = None, mtime: float | None = None) -> Path:
    """A manifest as the runner writes it (params resolved, a stage recorded)."""
    cfg = load_run(run, params_file, root=root)
    path = cfg.run_dir / "manifest.json"
    path.write_text(json.dumps({"run": run, "params": cfg.params, "params_file": f"params/{run}.yaml",
                                "stages": {"00": {"status": "ok"}}}, default=str))
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def test_no_run_on_disk_opens_default(repo: Path, capsys):
    cfg = lab.open_run(root=repo)
    assert cfg.name == "default"
    out = capsys.readouterr().out
    assert "run 'default'" in out and "params/default.yaml" in out and "no run on disk" in out


def test_the_most_recent_runner_run_is_opened_and_explorations_are_not(repo: Path):
    now = time.time()
    _runner_manifest(repo, "smoke", mtime=now - 100)
    _runner_manifest(repo, "default", mtime=now - 50)
    assert lab.resolve_run(None, repo)[0] == "default"
    os.utime(repo / "runs" / "smoke" / "manifest.json", (now, now))
    assert lab.resolve_run(None, repo)[0] == "smoke"
    # an exploration, newer than both, is only opened by name
    explore = repo / "runs" / "smoke-lab-0123abcd"
    explore.mkdir()
    (explore / "manifest.json").write_text(json.dumps({"origin": "notebook", "stages": {"00": {}}}))
    assert lab.resolve_run(None, repo)[0] == "smoke"
    assert lab.resolve_run("default", repo) == ("default", "given in the parameters cell")


def test_environment_variable_wins_over_the_disk(repo: Path, monkeypatch):
    _runner_manifest(repo, "default")
    monkeypatch.setenv(lab.RUN_ENV, "smoke")
    assert lab.open_run(root=repo, quiet=True).name == "smoke"


def test_params_path_from_the_notebooks_folder_and_from_the_root(repo: Path, monkeypatch):
    monkeypatch.chdir(repo / "notebooks")
    a = lab.open_run("smoke", "../params/smoke.yaml", root=repo, quiet=True)
    b = lab.open_run("smoke", "params/smoke.yaml", root=repo, quiet=True)
    assert a.params_file == b.params_file == (repo / "params" / "smoke.yaml").resolve()
    with pytest.raises(ConfigError, match="not found .*looked in"):
        lab.open_run("smoke", "params/nope.yaml", root=repo, quiet=True)


def test_run_given_as_a_path_takes_the_file_stem(repo: Path):
    cfg = lab.open_run("params/smoke.yaml", root=repo, quiet=True)
    assert cfg.name == "smoke" and cfg.params_file.name == "smoke.yaml"
    assert load_run("params/smoke.yaml", root=repo).name == "smoke"


def test_other_params_go_to_a_new_run_and_leave_the_run_untouched(repo: Path, capsys):
    manifest = _runner_manifest(repo, "default")
    before = manifest.read_bytes()
    cfg = lab.open_run("default", "params/smoke.yaml", root=repo)
    assert cfg.name.startswith("default-lab-") and cfg.name != "default"
    assert "stays as it is" in capsys.readouterr().out
    recorded = json.loads((cfg.run_dir / "manifest.json").read_text())
    assert recorded["params"] == json.loads(json.dumps(load_run("smoke", root=repo).params, default=str))
    assert recorded["params_file"] == "params/smoke.yaml" and recorded["derived_from"] == "default"
    assert manifest.read_bytes() == before
    # same params as the manifest: the run itself
    assert lab.open_run("default", root=repo, quiet=True).name == "default"
    # the same exploration twice: the same run name
    assert lab.open_run("default", "params/smoke.yaml", root=repo, quiet=True).name == cfg.name


def test_the_check_catches_a_manifest_it_does_not_compare(repo: Path, monkeypatch):
    """Seeded fault: a comparison that always says 'same' would write into the run."""
    _runner_manifest(repo, "default")
    monkeypatch.setattr(lab, "_same_params", lambda manifest, params: True)
    assert lab.open_run("default", "params/smoke.yaml", root=repo, quiet=True).name == "default"


def test_missing_artifact_names_the_run_that_has_it_and_the_command(repo: Path):
    import pandas as pd

    smoke = load_run("smoke", root=repo)
    write_frame(smoke, "predictions", pd.DataFrame({"a": [1]}))
    default = load_run("default", root=repo)
    with pytest.raises(MissingArtifactError) as err:
        read_frame(default, "predictions")
    msg = str(err.value)
    assert "make stage STAGE=03 RUN=default" in msg and "smoke" in msg and str(repo) not in msg
    explore = load_run("default-lab-0123abcd", "params/smoke.yaml", root=repo)
    with pytest.raises(MissingArtifactError, match=r"--run default-lab-0123abcd --params params/smoke.yaml "
                                                   r"--stages 03"):
        read_frame(explore, "predictions")


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_a_notebook_executed_with_other_params_leaves_the_run_unchanged(repo: Path):
    """End to end: the runner makes `default`, then a notebook run with smoke's params (as in Lab)."""
    import papermill as pm

    from finlib.pipeline.runner import run_pipeline

    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("run_name = None\nparams_file = None\n")
    params.metadata["tags"] = ["parameters"]
    body = ("import pandas as pd\nfrom finlib.core.lab import open_run\nfrom finlib.core.artifacts import write_frame\n"
            "cfg = open_run(run_name, params_file)\n"
            "written = write_frame(cfg, 'reports', pd.DataFrame({'n': [cfg.seed, len(cfg.params['data'])]}))\n")
    nb.cells = [params, nbformat.v4.new_code_cell(body)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, repo / "notebooks" / "00_write.ipynb")
    run_pipeline("default")
    before = {k: _digest(repo / k / "default") for k in ("runs", "data/processed")}
    pm.execute_notebook(str(repo / "notebooks" / "00_write.ipynb"), str(repo / "explored.ipynb"),
                        parameters={"params_file": "../params/smoke.yaml"}, cwd=str(repo / "notebooks"),
                        progress_bar=False)
    after = {k: _digest(repo / k / "default") for k in ("runs", "data/processed")}
    assert after == before
    explored = [p.name for p in (repo / "runs").iterdir() if p.name.startswith("default-lab-")]
    assert len(explored) == 1 and (repo / "data" / "processed" / explored[0] / "reports.parquet").is_file()
    outputs = json.dumps([c.get("outputs") for c in nbformat.read(repo / "explored.ipynb", as_version=4).cells])
    assert "stays as it is" in outputs and str(repo) not in outputs
    # the runner's executed notebook (published in the report) names no absolute path either
    assert str(repo) not in (repo / "runs" / "default" / "notebooks" / "00_write.ipynb").read_text()


def test_the_runners_stages_keep_the_params_the_run_started_with(repo: Path, monkeypatch, capsys):
    """A params file edited while the runner executes a run: its stages read the manifest's params,
    never a diverted run (which would leave the run's later stages without inputs)."""
    import yaml

    _runner_manifest(repo, "smoke")
    path = repo / "params" / "smoke.yaml"
    edited = yaml.safe_load(path.read_text())
    edited["seed"] = 999
    path.write_text(yaml.safe_dump(edited))
    assert lab.open_run("smoke", root=repo, quiet=True).name.startswith("smoke-lab-")   # in Lab: an exploration
    monkeypatch.setenv(lab.PINNED_ENV, "smoke")
    cfg = lab.open_run("smoke", root=repo)
    assert cfg.name == "smoke" and cfg.seed != 999 and "changed since run 'smoke' started" in capsys.readouterr().out
