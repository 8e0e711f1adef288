"""Params loading: inheritance, secrets refusal, run folders."""
from __future__ import annotations

from pathlib import Path

import pytest

from finlib.core.config import ConfigError, deep_merge, load_params


def test_deep_merge_merges_dicts_and_replaces_leaves():
    base = {"a": {"x": 1, "y": [1, 2]}, "b": 2}
    out = deep_merge(base, {"a": {"y": [3]}, "c": 4})
    assert out == {"a": {"x": 1, "y": [3]}, "b": 2, "c": 4}
    assert base["a"]["y"] == [1, 2], "the base must not be mutated"


def test_smoke_extends_default_and_overrides_only_what_it_names(repo_root: Path):
    default = load_params(repo_root / "params" / "default.yaml")
    smoke = load_params(repo_root / "params" / "smoke.yaml")
    assert smoke["data"]["synthetic"]["n_reports"] < default["data"]["synthetic"]["n_reports"]
    assert smoke["labels"] == default["labels"]
    assert "extends" not in smoke


def test_params_with_a_secret_are_refused(tmp_path: Path):
    p = tmp_path / "bad.yaml"
    p.write_text("inference:\n  api_key: sk-abc\n")
    with pytest.raises(ConfigError, match=r"inference\.api_key.*environment"):
        load_params(p)


def test_naming_the_environment_variable_is_allowed(tmp_path: Path):
    p = tmp_path / "ok.yaml"
    p.write_text("models:\n  - api_key_env: OPENAI_API_KEY\n    max_tokens: 10\n")
    assert load_params(p)["models"][0]["api_key_env"] == "OPENAI_API_KEY"


def test_missing_and_malformed_params_name_the_file(tmp_path: Path):
    with pytest.raises(ConfigError, match="not found"):
        load_params(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match=str(bad)):
        load_params(bad)


def test_load_run_creates_isolated_folders(tmp_run):
    assert tmp_run.name == "smoke"
    for d in (tmp_run.processed_dir, tmp_run.tables_dir, tmp_run.run_dir):
        assert d.is_dir() and "smoke" in d.parts
    assert tmp_run.is_synthetic
    with pytest.raises(ConfigError, match="missing section 'nope'"):
        tmp_run["nope"]


@pytest.mark.parametrize("name", ["default", "smoke", "real"])
def test_every_shipped_run_file_loads_and_names_registered_models(repo_root: Path, name: str):
    from finlib.llm.registry import load_registry, select_models

    params = load_params(repo_root / "params" / f"{name}.yaml")
    registry = load_registry(repo_root / params["inference"]["registry"])
    assert [m.name for m in select_models(registry, params["inference"]["models"])] == params["inference"]["models"]
    assert params["data"]["source"] in {"synthetic", "local", "huggingface"}


def test_section_refuses_unknown_keys(tmp_run):
    assert tmp_run.section("labels")["window"] == 60
    tmp_run.params["labels"]["quantile"] = [0.3, 0.7]
    with pytest.raises(ConfigError, match=r"smoke\.yaml: invalid params:\n  - unknown key 'labels\.quantile' "
                                          r"\(value \[0\.3, 0\.7\]\)"):
        tmp_run.section("labels")


def test_section_requires_every_declared_key(tmp_run):
    """A stage reads `cfg.section(name)`: every key it may read is there, or the error names it."""
    assert tmp_run.section("scoring")["ci"] > 0
    del tmp_run.params["scoring"]["ci"]
    with pytest.raises(ConfigError, match=r"smoke\.yaml: invalid params:\n  - scoring\.ci: missing"):
        tmp_run.section("scoring")


def test_a_key_written_twice_is_refused_naming_both_lines(tmp_path):
    """YAML keeps the last copy of a repeated key without a word: an edit to the first copy would be
    ignored, so the loader refuses the file and names the key and both lines."""
    from finlib.core.config import ConfigError, read_yaml_mapping

    path = tmp_path / "twice.yaml"
    path.write_text("figures:\n  text_chars: 1400\nplan:\n  latency_s: 20.0\nfigures:\n  text_chars: 900\n")
    with pytest.raises(ConfigError, match=r"twice\.yaml.*'figures' appears twice.*lines 1 and 5"):
        read_yaml_mapping(path)
    nested = tmp_path / "nested.yaml"
    nested.write_text("labels:\n  window: 60\n  window: 30\n")
    with pytest.raises(ConfigError, match=r"'window' appears twice.*lines 2 and 3"):
        read_yaml_mapping(nested)


def test_every_shipped_params_file_has_each_key_once():
    from finlib.core.config import read_yaml_mapping, repo_root

    for path in sorted((repo_root() / "params").rglob("*.yaml")):
        assert isinstance(read_yaml_mapping(path), dict), path
