"""Params validated against the declared schema (finlib.core.params) at load time: an unknown
top-level key or a wrong type fails with the file, the dotted key, the expected type and the value."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest

from finlib.core.config import ConfigError, load_params
from finlib.core.params import SECTION_MODELS, TOP_LEVEL, validate_params


@pytest.fixture(scope="module")
def default(repo_root: Path) -> dict:
    return load_params(repo_root / "params" / "default.yaml")


PARAMS_FILES = sorted(p.name for p in (Path(__file__).resolve().parents[2] / "params").glob("*.yaml")
                      if p.name != "models.yaml")


@pytest.mark.parametrize("name", PARAMS_FILES)
def test_every_shipped_params_file_passes_the_schema(repo_root: Path, name: str):
    validate_params(load_params(repo_root / "params" / name), name)


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
    with pytest.raises(ConfigError, match=r"(?s)^x\.yaml: invalid params:\n.*" + expect):
        validate_params(_with(default, dotted, value), "x.yaml")


@pytest.mark.parametrize("params_key, expect", [
    ("lables", r"unknown key 'lables' \(value 1; top-level sections are \['seed'"),
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


def test_every_section_is_declared_closed_and_strict():
    assert set(SECTION_MODELS) == set(TOP_LEVEL) - {"seed", "extends"}

    def models(model):
        yield model
        for f in model.model_fields.values():
            for arg in (f.annotation, *getattr(f.annotation, "__args__", ())):
                if isinstance(arg, type) and hasattr(arg, "model_fields"):
                    yield from models(arg)

    for section in SECTION_MODELS.values():
        for model in models(section):
            assert model.model_config.get("extra") == "forbid" and model.model_config.get("strict"), model.__name__


@pytest.mark.parametrize("dotted", ["dpo.lora.alhpa", "bizfin.iterajudge.judgs", "plan.anything", "figures.caption",
                                    "inference.max_new_token", "scoring.bootstrap", "perturb.lexicon"])
def test_misspelled_keys_are_refused_in_every_section(default, dotted):
    with pytest.raises(ConfigError, match=rf"unknown key '{dotted}'"):
        validate_params(_with(default, dotted, 1), "x.yaml")


@pytest.mark.parametrize("dotted, value, expect", [
    ("scoring.bootstrap_reps", -1, r"scoring\.bootstrap_reps: input should be greater than or equal to 0; got -1"),
    ("labels.min_event_obs", 0, r"labels\.min_event_obs: input should be greater than or equal to 1; got 0"),
    ("labels.min_event_obs", 2, r"labels\.min_event_obs must be >= 3 for method 'paper'"),
    ("labels.min_event_obs", 61, r"labels\.min_event_obs \(61\) exceeds labels\.window \(60\)"),
    ("labels.quantiles", [0.7, 0.3], r"labels\.quantiles must be two shares 0 <= lo <= hi <= 1"),
    ("labels.quantiles", [0.3, 1.2], r"labels\.quantiles must be two shares"),
    ("labels.quantiles", [0.3], r"labels\.quantiles must be two shares"),
    ("inference.max_error_share", 1.5, r"inference\.max_error_share: input should be less than or equal to 1"),
    ("inference.max_error_share", -0.1, r"inference\.max_error_share: input should be greater than or equal to 0"),
    ("inference.max_new_tokens", 0, r"inference\.max_new_tokens: input should be greater than or equal to 1"),
    ("inference.max_new_tokens", "all", r"inference\.max_new_tokens: expected an integer or 'registry'; got 'all'"),
    ("scoring.ci", 1.0, r"scoring\.ci: input should be less than 1"),
    ("dpo.train_share", 0, r"dpo\.train_share: input should be greater than 0"),
    ("dpo.lora.r", 0, r"dpo\.lora\.r: input should be greater than or equal to 1"),
    ("bizfin.iterajudge.score_range", [100, 0], r"score_range must be \[low, high\] with low < high"),
    ("bizfin.source", "s3", r"bizfin\.source: input should be"),
    ("plan.preflight", "yes", r"plan\.preflight: input should be a valid boolean"),
    ("data.synthetic.bearish_share", 0.3, r"bullish_share \+ bearish_share must be < 1, got 0\.72 \+ 0\.3"),
    ("data.synthetic.optimism_sd", 0.95, r"analyst_q_weight\^2 \+ optimism_sd\^2 must be < 1, got 0\.35\^2 \+ 0\.95"),
    ("data.synthetic.words_max", 50, r"data\.synthetic\.words_max \(50\) is below data\.synthetic\.words_min \(70\)"),
])
def test_values_out_of_range_are_refused_at_load_time(default, dotted, value, expect):
    with pytest.raises(ConfigError, match=r"(?s)^x\.yaml: invalid params:\n.*" + expect):
        validate_params(_with(default, dotted, value), "x.yaml")


def test_endpoint_overrides_are_closed_and_typed(default):
    params = _with(default, "inference.endpoints", {"gpt-4.1": {"rmp": 10}})
    with pytest.raises(ConfigError, match=r"unknown key 'inference\.endpoints\.gpt-4\.1\.rmp'"):
        validate_params(params, "x.yaml")
    params = _with(default, "inference.endpoints", {"gpt-4.1": {"concurrency": 0}})
    with pytest.raises(ConfigError, match=r"inference\.endpoints\.gpt-4\.1\.concurrency: input should be greater"):
        validate_params(params, "x.yaml")
    validate_params(_with(default, "inference.endpoints", {"gpt-4.1": {"rpm": 0, "base_url": "http://h/v1"}}), "x")


def test_unknown_model_names_fail_at_load_time_naming_the_registry(params_root):
    params_root.write("typo.yaml", "extends: default.yaml\ninference: {models: [smollm2-135n, gpt-4.1]}\n")
    with pytest.raises(ConfigError, match=r"typo\.yaml \(merged over default\.yaml\): invalid params:\n"
                                          r"  - inference\.models: unknown model name 'smollm2-135n' "
                                          r"\(not a record of the model registry .*params/models\.yaml"):
        params_root.load("typo.yaml")
    params_root.write("template.yaml", "extends: default.yaml\ndpo: {teacher: template}\n")
    params_root.load("template.yaml")  # the template teacher is not a registry name


def test_a_section_changed_after_loading_is_checked_again(tmp_run):
    tmp_run.params["labels"]["quantile"] = [0.2, 0.8]
    with pytest.raises(ConfigError, match=r"unknown key 'labels\.quantile'"):
        tmp_run.section("labels")


def test_load_run_validates_the_merged_file(params_root):
    params_root.write("bad.yaml", {"extends": "default.yaml", "labels": {"window": 60.9}})
    with pytest.raises(ConfigError, match=r"bad\.yaml \(merged over default\.yaml\): invalid params:\n"
                                          r"  - labels\.window: .*got 60\.9"):
        params_root.load("bad.yaml")
    params_root.write("typo.yaml", "extends: default.yaml\nlable: {window: 5}\n")
    with pytest.raises(ConfigError, match=r"typo\.yaml \(merged over default\.yaml\): invalid params:\n"
                                          r"  - unknown key 'lable'"):
        params_root.load("typo.yaml")
