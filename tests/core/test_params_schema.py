"""One schema knows every key (finlib.core.params): every key of every params file is declared,
every declared key is written in params/default.yaml, deleting any of them fails at load naming it,
open mappings (model names, prompt versions, devices, rehearsal profiles, endpoints) are checked at
load, and every problem of a file is reported in one error naming the file, the key and the value.

The key lists here are read from the YAML files and from the code the schema mirrors (the prompt
registry, the simulated servers' Profile, the registry's endpoint fields), never from the schema's
own error messages."""
from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from finlib.core import params as schema
from finlib.core.config import ConfigError, registry_names

ROOT = Path(__file__).resolve().parents[2]
PARAMS_FILES = sorted(p.name for p in (ROOT / "params").glob("*.yaml") if p.name != "models.yaml")
DEFAULT = yaml.safe_load((ROOT / "params" / "default.yaml").read_text(encoding="utf-8"))
OPEN_MAPPINGS = {"inference.endpoints", "rehearsal.profiles"}  # keys of these are model names, not params keys


def _nested_model(annotation) -> type[BaseModel] | None:
    """The model a field holds directly (`LoraSection`, `... | None` of one), else None."""
    if typing.get_origin(annotation) is dict:
        return None
    for arg in (annotation, *typing.get_args(annotation)):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def _mapping_model(annotation) -> type[BaseModel] | None:
    """The value model of a `dict[str, Model]` field (inference.endpoints, rehearsal.profiles), else None."""
    if typing.get_origin(annotation) is dict:
        return _nested_model(typing.get_args(annotation)[1])
    return None


def _yaml_keys(mapping: dict, prefix: str = "") -> list[str]:
    """Every dotted key written in a params mapping (not inside the open mappings)."""
    out = []
    for key, value in mapping.items():
        dotted = f"{prefix}{key}"
        out.append(dotted)
        if isinstance(value, dict) and dotted not in OPEN_MAPPINGS:
            out += _yaml_keys(value, f"{dotted}.")
    return out


def _declared(model: type[BaseModel], prefix: str = "") -> list[tuple[str, bool]]:
    """Every dotted key the schema declares with whether it is required (nested models walked)."""
    out = []
    for name, field in model.model_fields.items():
        dotted = f"{prefix}{name}"
        out.append((dotted, field.is_required()))
        nested = _nested_model(field.annotation)
        if nested is not None:
            out += _declared(nested, f"{dotted}.")
    return out


def _deleted(mapping: dict, dotted: str) -> dict:
    import copy

    out = copy.deepcopy(mapping)
    *path, last = dotted.split(".")
    node = out
    for part in path:
        node = node[part]
    del node[last]
    return out


# ---- every key: declared, written, required ---------------------------------------------------------

@pytest.mark.parametrize("name", PARAMS_FILES)
def test_every_key_of_every_params_file_is_declared(name: str):
    """Walks the file's nested keys against the models' fields (closed mappings: their value model)."""
    raw = yaml.safe_load((ROOT / "params" / name).read_text(encoding="utf-8")) or {}

    def walk(model: type[BaseModel], value: dict, where: str) -> None:
        for key, sub in value.items():
            assert key in model.model_fields, f"{name}: {where}{key} is not declared"
            ann = model.model_fields[key].annotation
            nested, per_model = _nested_model(ann), _mapping_model(ann)
            if nested is not None and isinstance(sub, dict):
                walk(nested, sub, f"{where}{key}.")
            if per_model is not None and isinstance(sub, dict):
                for model_name, over in sub.items():
                    walk(per_model, over, f"{where}{key}.{model_name}.")

    walk(schema.PARAMS_MODEL, raw, "")


# The keys with a default in the schema, each on purpose (a comment in params.py says why): nothing else
# may have one, or a key deleted from default.yaml would load silently.
DEFAULTED = {"extends", "data.reports.columns.analyst_rating"}


def test_every_declared_key_is_written_in_default_yaml_and_required():
    written = set(_yaml_keys(DEFAULT))
    declared = _declared(schema.PARAMS_MODEL)
    assert {k for k, required in declared if not required} == DEFAULTED
    missing = sorted(k for k, required in declared if required and k not in written)
    assert missing == [], f"declared but not written in params/default.yaml: {missing}"
    for model in (schema.EndpointSection, schema.ProfileSection):  # per-model overrides: each field optional
        assert not any(f.is_required() for f in model.model_fields.values()), model.__name__


DEFAULT_KEYS = [k for k in _yaml_keys(DEFAULT) if k != "extends"]


def _load_without(params_root, dotted: str) -> str | None:
    """The error of loading params/default.yaml with `dotted` deleted (None: it loaded)."""
    params_root.write("default.yaml", _deleted(DEFAULT, dotted))
    try:
        params_root.load("default.yaml")
    except ConfigError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("dotted", DEFAULT_KEYS)
def test_deleting_a_key_of_default_yaml_fails_at_load_naming_it(params_root, dotted: str):
    error = _load_without(params_root, dotted)
    assert error is not None, f"params/default.yaml without {dotted} loaded"
    assert re.search(rf"default\.yaml: invalid params:\n(  - .*\n)*  - {re.escape(dotted)}: missing", error), error


def test_seeded_fault_a_key_given_a_default_again_is_caught(params_root, monkeypatch):
    """The deletion check fails when a field goes back to `... | None = None` (the schema before
    every key was required): the key deleted from default.yaml then loads without a word."""
    loose = pydantic_loose_scoring()
    monkeypatch.setitem(schema.SECTION_MODELS, "scoring", loose)
    monkeypatch.setattr(schema, "PARAMS_MODEL", schema.params_model())
    assert _load_without(params_root, "scoring.ci") is None
    assert {k for k, required in _declared(schema.PARAMS_MODEL) if not required} != DEFAULTED


def pydantic_loose_scoring() -> type[BaseModel]:
    """scoring as it was declared when `required` lived in the stages: every key nullable with a None default."""

    class LooseScoring(schema._Section):
        bootstrap_reps: schema.NonNegInt | None = None
        ci: schema.OpenShare | None = None

    return LooseScoring


def test_a_file_that_extends_nothing_must_write_every_key(params_root):
    lone = {k: v for k, v in DEFAULT.items() if k != "rehearsal"}
    params_root.write("lone.yaml", lone)
    with pytest.raises(ConfigError, match=r"lone\.yaml: invalid params:\n  - rehearsal: missing"):
        params_root.load("lone.yaml")


# ---- open mappings checked at load -----------------------------------------------------------------

ISSUE_EXAMPLES = [
    ({"inference": {"device": "cdua"}}, "inference.device", "'cdua'"),
    ({"inference": {"prompt_version": "finbias-authors-v9"}}, "inference.prompt_version", "'finbias-authors-v9'"),
    ({"dpo": {"models": ["no-such-model"]}}, "dpo.models", "'no-such-model'"),
    ({"figures": {"case_model": "no-such-model"}}, "figures.case_model", "'no-such-model'"),
    ({"rehearsal": {"profiles": {"smollm2-135m": {"folow": 0.9}}}}, "rehearsal.profiles.smollm2-135m.folow", "0.9"),
    ({"rehearsal": {"profiles": {"no-such-model": {"follow": 0.9}}}}, "rehearsal.profiles", "'no-such-model'"),
    ({"rehearsal": {"profiles": {"smollm2-135m": {"follow": 1.9}}}}, "rehearsal.profiles.smollm2-135m.follow", "1.9"),
    ({"inference": {"endpoints": {"gpt-4.1": {"rmp": 10}}}}, "inference.endpoints.gpt-4.1.rmp", "10"),
    ({"inference": {"endpoints": {"no-such-model": {"rpm": 10}}}}, "inference.endpoints", "'no-such-model'"),
    ({"inference": {"constrained_json": ["qwen-typo"]}}, "inference.constrained_json", "'qwen-typo'"),
    ({"bizfin": {"iterajudge": {"refiner": "gpt-typo"}}}, "bizfin.iterajudge.refiner", "'gpt-typo'"),
    ({"bizfin": {"table6_model": "gpt-typo"}}, "bizfin.table6_model", "'gpt-typo'"),
    ({"data": {"reports": {"columns": {"report_id": None}}}}, "data.reports.columns.report_id", "None"),
]


@pytest.mark.parametrize("override, key, value", ISSUE_EXAMPLES, ids=[e[1] for e in ISSUE_EXAMPLES])
def test_an_open_mapping_mistake_fails_at_load_naming_file_key_and_value(params_root, override, key, value):
    params_root.write("mine.yaml", {"extends": "default.yaml", **override})
    with pytest.raises(ConfigError) as err:
        params_root.load("mine.yaml")
    text = str(err.value)
    assert text.startswith(f"{params_root.root / 'params' / 'mine.yaml'} (merged over default.yaml): invalid params:")
    line = next((ln for ln in text.splitlines() if key in ln), None)
    assert line is not None and value in line, text


def test_the_prompt_version_literal_is_the_prompt_registry():
    from finlib.finbias.prompts import FINBIAS_PROMPTS

    assert set(typing.get_args(schema.FinbiasPromptVersion)) == set(FINBIAS_PROMPTS)


def test_closed_vocabularies_are_the_code_s_own():
    """Literals the schema declares for choices the stages define (text_cleaning: tests/finbias/test_data.py)."""
    from finlib.finbias.conditions import FAKE_MODES
    from finlib.finbias.data.synth_corpus import LAYOUTS, RATING_WORDINGS
    from finlib.finbias.perturb.lexicon import POS_POLICIES

    def literal(model: type[BaseModel], key: str) -> set:
        ann = model.model_fields[key].annotation
        return set(typing.get_args(typing.get_args(ann)[0] if typing.get_origin(ann) is list else ann))

    assert literal(schema.PerturbSection, "fake_rating") == set(FAKE_MODES)
    assert literal(schema.PerturbSection, "mpqa_pos") == set(POS_POLICIES)
    assert literal(schema.SyntheticSection, "rating_wording") == set(RATING_WORDINGS)
    assert literal(schema.SyntheticSection, "layout") == set(LAYOUTS)


def test_rehearsal_profile_fields_are_the_simulated_profile_less_the_registry_fields():
    from finlib.rehearsal.simulated_servers import Profile

    from_registry = {"name", "model_id", "context_length", "thinks"}
    assert set(schema.ProfileSection.model_fields) == {f.name for f in dataclasses.fields(Profile)} - from_registry


def test_endpoint_fields_are_the_registry_endpoint_fields():
    from finlib.llm.registry import ENDPOINT_FIELDS

    assert set(schema.EndpointSection.model_fields) == set(ENDPOINT_FIELDS)


def test_report_columns_are_the_validator_columns():
    from finlib.finbias.data.validation import OPTIONAL_REPORT_COLUMNS, REPORT_COLUMNS, REQUIRED_REPORT_COLUMNS

    fields = schema.ColumnsSection.model_fields
    assert set(fields) == set(REPORT_COLUMNS) | set(OPTIONAL_REPORT_COLUMNS)
    nullable = {k for k, f in fields.items() if type(None) in typing.get_args(f.annotation)}
    assert nullable == set(fields) - set(REQUIRED_REPORT_COLUMNS)


def _string_values(mapping: dict, prefix: str = ""):
    """(dotted key, string) for every string a params mapping holds (list items and open-mapping keys too)."""
    for key, value in mapping.items():
        dotted = f"{prefix}{key}"
        if dotted in OPEN_MAPPINGS and isinstance(value, dict):
            yield from ((dotted, name) for name in value)
        elif isinstance(value, dict):
            yield from _string_values(value, f"{dotted}.")
        elif isinstance(value, str):
            yield dotted, value
        elif isinstance(value, list):
            yield from ((dotted, v) for v in value if isinstance(v, str))


def test_every_key_that_names_a_registry_model_is_checked_at_load(repo_root: Path):
    """A key of any shipped file holding a registry name is one the load checks (MODEL_NAME_STAGES):
    a new model-naming key left off that list fails here."""
    from finlib.core.config import load_params

    names = registry_names(repo_root / "params" / "models.yaml")
    naming = {key for f in PARAMS_FILES for key, v in _string_values(load_params(repo_root / "params" / f))
              if v in names}
    assert naming <= set(schema.MODEL_NAME_STAGES), naming - set(schema.MODEL_NAME_STAGES)
    for dotted in schema.MODEL_NAME_STAGES:  # each names a declared key
        model: type[BaseModel] | None = schema.PARAMS_MODEL
        for part in dotted.split("."):
            assert model is not None and part in model.model_fields, dotted
            model = _nested_model(model.model_fields[part].annotation)


# ---- every error at once ---------------------------------------------------------------------------

THREE_KINDS = """extends: default.yaml
labels:
  window: 60.9          # a field error
  min_event_obs: 2      # a rule between keys: below 3 with method paper
dpo:
  models: [no-such-model]   # a model name the registry lacks
figures:
  caption: yes          # an unknown key
"""


def test_every_error_of_a_file_is_reported_at_once(params_root):
    params_root.write("three.yaml", THREE_KINDS)
    with pytest.raises(ConfigError) as err:
        params_root.load("three.yaml")
    lines = str(err.value).splitlines()
    assert lines[0].endswith("three.yaml (merged over default.yaml): invalid params:")
    assert len(lines) == 5, lines
    assert "labels.window: input should be a valid integer; got 60.9 (number)" in lines[1]
    assert "labels.min_event_obs must be >= 3 for method 'paper'" in lines[2] and "got 2" in lines[2]
    assert "figures.caption" in lines[3] and "True" in lines[3]
    assert "dpo.models: unknown model name 'no-such-model'" in lines[4] and "models.yaml" in lines[4]


def test_seeded_fault_a_rule_run_after_the_fields_hides_behind_a_field_error(params_root, monkeypatch):
    """Why the rules between keys are field validators: as a model validator (mode='after', the earlier
    schema) the min_event_obs rule is not reported while another key of its section is wrong."""
    from pydantic import model_validator

    class AfterLabels(schema._Section):
        window: schema.Count
        method: typing.Literal["paper", "mackinlay"]
        quantiles: list[float]
        min_event_obs: schema.Count | None
        mackinlay: schema.MackinlaySection

        @model_validator(mode="after")
        def _rules(self):
            if self.min_event_obs is not None and self.min_event_obs < 3 and self.method == "paper":
                raise ValueError("labels.min_event_obs must be >= 3 for method 'paper'")
            return self

    monkeypatch.setitem(schema.SECTION_MODELS, "labels", AfterLabels)
    monkeypatch.setattr(schema, "PARAMS_MODEL", schema.params_model())
    params_root.write("three.yaml", THREE_KINDS)
    with pytest.raises(ConfigError) as err:
        params_root.load("three.yaml")
    assert "min_event_obs" not in str(err.value)
