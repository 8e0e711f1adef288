"""`extends: default.yaml` in a params file kept outside params/ means params/default.yaml, as the docs
write it; a file beside the extending one wins; a name found nowhere is an error naming both places."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from finlib.core.config import load_params
from finlib.core.errors import ConfigError


@pytest.fixture()
def repo(tmp_path: Path, repo_root: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(repo_root / "params", root / "params")
    (root / "pyproject.toml").write_text("[project]\nname='tmp'\n")
    (root / "mine").mkdir()
    return root


def test_extends_outside_params_finds_the_params_folder(repo: Path):
    mine = repo / "mine" / "x.yaml"
    mine.write_text("extends: default.yaml\nscoring:\n  bootstrap_reps: 7\n")
    params = load_params(mine)
    assert params["scoring"]["bootstrap_reps"] == 7 and params["scoring"]["ci"] == 0.95  # rest from default


def test_a_file_beside_the_extending_one_wins(repo: Path):
    (repo / "mine" / "default.yaml").write_text("extends: ../params/default.yaml\nscoring:\n  ci: 0.9\n")
    mine = repo / "mine" / "x.yaml"
    mine.write_text("extends: default.yaml\n")
    assert load_params(mine)["scoring"]["ci"] == 0.9


def test_a_missing_parent_names_both_places(repo: Path):
    mine = repo / "mine" / "x.yaml"
    mine.write_text("extends: nowhere.yaml\n")
    with pytest.raises(
        ConfigError, match=r"extends: nowhere.yaml not found .*mine/nowhere.yaml or .*params/nowhere.yaml"
    ):
        load_params(mine)
