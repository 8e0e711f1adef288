"""Params validated against the declared schema (finlib.core.params) at load time: an unknown
top-level key or a wrong type fails with the file, the dotted key, the expected type and the value."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from finlib.core.config import ConfigError, load_params, load_run
from finlib.core.params import TOP_LEVEL, InferenceSection, ScoringSection, register_section, validate_params


@pytest.fixture(scope="module")
def default(repo_root: Path) -> dict:
    return load_params(repo_root / "params" / "default.yaml")


@pytest.mark.parametrize("name", ["default", "smoke", "real"])
def test_shipped_params_files_pass_the_schema(repo_root: Path, name: str):
    validate_params(load_params(repo_root / "params" / f"{name}.yaml"), name)


def _with(params: dict, dotted: str, value) -> dict:
    out = copy.deepcopy(params)
    *path, last = dotted.split(".")
    node = out
    for p in path:
        node = node[p]
    node[last] = value
    return out


@pytest.mark.parametrize("dotted, value, expect", [
    ("labels.window", 60.9, r"labels\.window: input should be a valid integer; got 60\.9 \(number\)"),
    ("labels.window", "sixty", r"labels\.window: input should be a valid integer; got 'sixty' \(string\)"),
    ("labels.window", True, r"labels\.window: .*integer; got True \(boolean\)"),
    ("labels.method", "capm", r"labels\.method: input should be 'paper' or 'mackinlay'; got 'capm'"),
    ("labels.quantiles", [0.3, "x"], r"labels\.quantiles\.1: .*valid number; got 'x'"),
    ("labels.mackinlay.gap", "30", r"labels\.mackinlay\.gap: .*integer; got '30'"),
    ("data.synthetic.n_reports", 12.5, r"data\.synthetic\.n_reports: .*integer; got 12\.5"),
    ("data.synthetic.start", 5, r"data\.synthetic\.start: expected a string or a date; got 5"),
    ("data.source", "s3", r"data\.source: input should be 'synthetic', 'local' or 'huggingface'"),
    ("inference.budget_usd", "ten", r"inference\.budget_usd: .*valid number; got 'ten'"),
    ("inference.progress", "yes", r"inference\.progress: .*valid boolean; got 'yes'"),
    ("inference.models", "smollm2-135m", r"inference\.models: .*valid list"),
    ("scoring.bootstrap_reps", 1e3, r"scoring\.bootstrap_reps: .*integer; got 1000\.0"),
    ("perturb.fake_rating", "all", r"perturb\.fake_rating: input should be 'one' or 'both'"),
    ("seed", "42", r"seed: .*integer; got '42'"),
])
def test_wrong_types_name_key_expected_type_and_value(default, dotted, value, expect):
    with pytest.raises(ConfigError, match=r"^x\.yaml: invalid params: .*" + expect):
        validate_params(_with(default, dotted, value), "x.yaml")


@pytest.mark.parametrize("params_key, expect", [
    ("lables", r"unknown key 'lables' \(top-level sections are \['seed'"),
    ("labels.windows", r"unknown key 'labels\.windows'"),
    ("data.synthetic.nreports", r"unknown key 'data\.synthetic\.nreports'"),
    ("data.reports.colums", r"unknown key 'data\.reports\.colums'"),
    ("labels.mackinlay.gaps", r"unknown key 'labels\.mackinlay\.gaps'"),
])
def test_unknown_keys_are_errors(default, params_key, expect):
    with pytest.raises(ConfigError, match=expect):
        validate_params(_with(default, params_key, 1), "x.yaml")


def test_a_float_key_accepts_an_integer_and_null_means_unset(default):
    validate_params(_with(default, "inference.budget_usd", 5), "x")
    validate_params(_with(default, "perturb.example_report", None), "x")


def test_free_form_sections_pass_until_a_model_is_registered(default):
    from pydantic import BaseModel, ConfigDict, StrictInt

    from finlib.core import params as params_schema

    params = {**default, "plan": {"anything": [1, 2]}}
    validate_params(params, "x")

    class Plan(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)
        n: StrictInt = 1

    saved = dict(params_schema.SECTION_MODELS)
    try:
        register_section("plan", Plan)
        with pytest.raises(ConfigError, match=r"unknown key 'plan\.anything'"):
            validate_params(params, "x")
        with pytest.raises(ValueError, match="unknown params section"):
            register_section("plans", Plan)
    finally:
        params_schema.SECTION_MODELS.clear()
        params_schema.SECTION_MODELS.update(saved)


def test_open_sections_declare_only_keys_their_stage_reads():
    """inference/scoring accept undeclared keys (their stage's key list refuses typos), so the
    schema must never declare a key the stage would refuse."""
    from finlib.finbias.data import DATA_KEYS, PRICES_KEYS, REPORTS_KEYS
    from finlib.finbias.labels import LABEL_KEYS, MACKINLAY_KEYS
    from finlib.finbias.inference import INFERENCE_KEYS
    from finlib.core.params import LabelsSection, MackinlaySection, PerturbSection, PricesSection, ReportsSection
    from finlib.finbias.perturb import PERTURB_KEYS
    from finlib.finbias.scoring import SCORING_KEYS

    assert set(ScoringSection.model_fields) <= set(SCORING_KEYS)
    assert set(PerturbSection.model_fields) <= set(PERTURB_KEYS)
    # closed sections: exactly the stage's keys (a key added to the stage must be declared here)
    for model, keys in ((LabelsSection, LABEL_KEYS), (MackinlaySection, MACKINLAY_KEYS),
                        (ReportsSection, REPORTS_KEYS), (PricesSection, PRICES_KEYS)):
        assert set(model.model_fields) == set(keys), model.__name__
    declared = set(InferenceSection.model_fields)
    assert declared <= set(INFERENCE_KEYS), declared - set(INFERENCE_KEYS)
    assert "bizfin" in TOP_LEVEL and "dpo" in TOP_LEVEL


def test_load_run_validates_the_merged_file(tmp_path: Path, repo_root: Path):
    root = tmp_path / "repo"
    (root / "params").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname='t'\n")
    (root / "params" / "default.yaml").write_text((repo_root / "params" / "default.yaml").read_text())
    (root / "params" / "bad.yaml").write_text(yaml.safe_dump({"extends": "default.yaml", "labels": {"window": 60.9}}))
    with pytest.raises(ConfigError, match=r"bad\.yaml: invalid params: labels\.window: .*got 60\.9"):
        load_run("bad", root=root)
    (root / "params" / "typo.yaml").write_text("extends: default.yaml\nlable: {window: 5}\n")
    with pytest.raises(ConfigError, match=r"typo\.yaml: invalid params: unknown key 'lable'"):
        load_run("typo", root=root)
