"""The declared schema of a params file (pydantic), checked when a run is loaded.

Why a schema: a stage only sees its params when it runs, so a typo at the top level (`lables:`)
or a wrong type (`labels.window: 60.9`, silently cut to 60 by `int()`; `"sixty"`, a bare
ValueError naming no key) would surface late or never. Here every such mistake fails at load time
with the file, the dotted key, what was expected and the value found.

Design:
- The top level is a fixed list of sections (`TOP_LEVEL`); any other key is an error.
- Every section is a closed, strict model (`extra="forbid"`, `strict=True`): a misspelled key at
  any depth (`bizfin.iterajudge.judgs`) is refused, an integer key refuses 60.9 and "60" (YAML
  already gives real numbers), a float key accepts an integer. Dates may be quoted or YAML dates.
- Every key is optional here: `extends:` chains merge partial files over `params/default.yaml`,
  and each stage's `required=` list (the keys it reads, `*_KEYS`) says which must be present.
  A test checks that every stage's key list and every key of every `params/*.yaml` is declared.
- Value ranges that are facts about the method live here too (a share in [0, 1], quantiles
  0 <= lo <= hi <= 1, counts >= 1), so a stage never silently clamps or raises a value.
- The run's model list (`inference.models`) is checked against the model registry at load time
  (`check_model_names`); every other key that names models (`MODEL_NAME_STAGES`: bizfin.models,
  bizfin.judge, bizfin.iterajudge.judges, dpo.models, dpo.teacher, figures.case_model, ...) is checked
  by the runner for the stages it will run, before the first one starts, and by the preflight: an
  unknown name fails naming it, its key and the registry file.
"""
from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Iterable, Literal, Optional, Union

from pydantic import (BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError,
                      create_model, model_validator)
from typing_extensions import Annotated

from finlib.core.errors import ConfigError

TOP_LEVEL: tuple[str, ...] = ("seed", "extends", "data", "labels", "perturb", "inference", "scoring", "dpo",
                              "figures", "plan", "bizfin", "rehearsal")
Number = float  # strict float still accepts an integer
DateLike = Union[StrictStr, dt.date]
Count = Annotated[StrictInt, Field(ge=1)]          # a size that must be at least one
NonNegInt = Annotated[StrictInt, Field(ge=0)]      # 0 has a documented meaning (off / none)
Share = Annotated[float, Field(ge=0.0, le=1.0)]    # a proportion
OpenShare = Annotated[float, Field(gt=0.0, lt=1.0)]  # a proportion strictly inside (0, 1): CI levels, splits
Positive = Annotated[float, Field(gt=0.0)]
NonNeg = Annotated[float, Field(ge=0.0)]
Dtype = Literal["auto", "float32", "bfloat16", "float16"]  # auto: measured per machine (finlib.llm.precision)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


# ---- data (stage 00) -----------------------------------------------------------------------------

class SyntheticSection(_Section):
    """data.synthetic: the knobs of finlib.finbias.data.synth.SynthParams (a test keeps the two equal)."""
    n_reports: Optional[Count] = None
    n_firms: Optional[Count] = None
    start: Optional[DateLike] = None
    end: Optional[DateLike] = None
    first_report: Optional[DateLike] = None
    words_min: Optional[Count] = None
    words_max: Optional[Count] = None
    pre_days: Optional[Count] = None
    post_days: Optional[Count] = None
    drift_window: Optional[Count] = None
    target_corr: Optional[OpenShare] = None
    bullish_share: Optional[OpenShare] = None
    bearish_share: Optional[OpenShare] = None
    analyst_q_weight: Optional[Number] = None
    optimism_sd: Optional[NonNeg] = None
    standard_wording_share: Optional[Share] = None
    opinion_share: Optional[Share] = None
    market_vol: Optional[Positive] = None
    market_drift: Optional[Number] = None
    rating_wording: Optional[Literal["paper", "scales"]] = None
    layout: Optional[Literal["prose", "structured"]] = None
    block_share: Optional[Share] = None
    messy_share: Optional[Share] = None


class ReportsSection(_Section):
    path: Optional[str] = None
    hf_dataset: Optional[str] = None
    hf_revision: Optional[str] = None  # a commit of the dataset repository (pinned: the corpus cannot change under a run)
    hf_split: Optional[str] = None
    columns: Optional[dict[str, Optional[str]]] = None
    on_unknown_sector: Optional[Literal["error", "keep"]] = None


class PricesSection(_Section):
    path: Optional[str] = None
    market_path: Optional[str] = None
    market_column: Optional[str] = None
    market_ticker: Optional[str] = None
    yfinance_cache: Optional[str] = None


class DataSection(_Section):
    source: Optional[Literal["synthetic", "local", "huggingface"]] = None
    # stage 00's text cleaning rules (finlib.finbias.data.validation.CLEANING_RULES); []: the text as the authors send it
    text_cleaning: Optional[list[Literal["mojibake", "nbsp", "invisible", "control", "hyphenation",
                                         "whitespace"]]] = None
    synthetic: Optional[SyntheticSection] = None
    reports: Optional[ReportsSection] = None
    prices: Optional[PricesSection] = None
    # stage 00 stops (before any paid call) when the share of reports with prices on their date is at
    # or below this; 0.0 = only when no report can get a label
    min_priced_share: Optional[Annotated[float, Field(ge=0.0, le=1.0)]] = None


# ---- labels (stage 01) ---------------------------------------------------------------------------

class MackinlaySection(_Section):
    estimation_window: Optional[Count] = None
    gap: Optional[NonNegInt] = None
    min_obs: Optional[Count] = None


class LabelsSection(_Section):
    window: Optional[Count] = None
    method: Optional[Literal["paper", "mackinlay"]] = None
    quantiles: Optional[list[float]] = None
    min_event_obs: Optional[Count] = None  # null: two thirds of the window
    mackinlay: Optional[MackinlaySection] = None

    @model_validator(mode="after")
    def _ranges(self) -> "LabelsSection":
        q = self.quantiles
        if q is not None and not (len(q) == 2 and 0.0 <= q[0] <= q[1] <= 1.0):
            raise ValueError(f"labels.quantiles must be two shares 0 <= lo <= hi <= 1, got {q!r}")
        if self.min_event_obs is not None and self.window is not None and self.min_event_obs > self.window:
            raise ValueError(f"labels.min_event_obs ({self.min_event_obs}) exceeds labels.window ({self.window}): "
                             "no event could ever be labelled")
        if self.min_event_obs is not None and self.min_event_obs < 3 and (self.method or "paper") == "paper":
            raise ValueError(f"labels.min_event_obs must be >= 3 for method 'paper' (alpha and beta are fitted "
                             f"on the event window), got {self.min_event_obs}")
        return self


# ---- perturb (stage 02) --------------------------------------------------------------------------

class PerturbSection(_Section):
    lexicon_path: Optional[str] = None
    lexicon_url: Optional[str] = None
    lexicon_md5: Optional[Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")]] = None  # checked when the lexicon loads
    join_lines: Optional[StrictBool] = None  # single line breaks joined (a named normalisation; off = authors' text)
    fake_rating: Optional[Literal["one", "both"]] = None
    top_triggers: Optional[Count] = None
    example_report: Optional[str] = None
    mpqa_pos: Optional[Literal["respect", "respect_porter", "ignore"]] = None
    tagger_model: Optional[str] = None
    tagger_processes: Optional[Count] = None
    tag_cache: Optional[str] = None
    sweep_reports: Optional[NonNegInt] = None  # rating sweep (finlib.finbias.beyond.rating_sweep); null = all, 0 = off
    max_set_aside_share: Optional[Share] = None  # stage 02 fails when more reports than this share are set aside


# ---- inference (stage 03) ------------------------------------------------------------------------

class EndpointSection(_Section):
    """inference.endpoints.<model>: where an API-served record is sent (finlib.llm.registry.ENDPOINT_FIELDS)."""
    base_url: Optional[str] = None
    api_key_env: Optional[str] = None  # the NAME of the variable holding the key, never the key
    rpm: Optional[NonNegInt] = None    # 0: unlimited
    tpm: Optional[NonNegInt] = None
    concurrency: Optional[Count] = None


class InferenceSection(_Section):
    models: Optional[Annotated[list[StrictStr], Field(min_length=1)]] = None
    mode: Optional[Literal["score", "generate"]] = None
    prompt_version: Optional[str] = None
    generate_subset: Optional[NonNegInt] = None
    generator_reports: Optional[NonNegInt] = None  # null: every report
    constrained_json: Optional[list[StrictStr]] = None
    max_new_tokens: Optional[Union[Count, Literal["registry"]]] = None  # "registry": each record's limit
    max_input_tokens: Optional[Count] = None
    budget_usd: Optional[NonNeg] = None
    store: Optional[str] = None
    registry: Optional[str] = None
    model_cache: Optional[str] = None
    dtype: Optional[Dtype] = None
    batch_size: Optional[Count] = None
    score_batch_size: Optional[Count] = None
    max_batch_tokens: Optional[Count] = None
    threads: Optional[Count] = None  # null: every core
    device: Optional[str] = None
    progress: Optional[StrictBool] = None
    batch: Optional[StrictBool] = None
    batch_dir: Optional[str] = None
    batch_poll_s: Optional[NonNeg] = None
    max_error_share: Optional[Share] = None
    samples_per_item: Optional[Count] = None  # k draws per report x condition (1 = the paper)
    samples_reports: Optional[NonNegInt] = None   # reports (sorted id) that get the k draws; null = all
    extension_models: Optional[list[StrictStr]] = None  # models answering the sweep and the draws; null = all
    endpoints: Optional[dict[str, EndpointSection]] = None  # per-model server (finlib.llm.registry.apply_endpoints)
    prompt_length_by: Optional[Literal["model_tokenizer", "estimate"]] = None  # output room of server models


# ---- scoring (stage 04) --------------------------------------------------------------------------

class ScoringSection(_Section):
    bootstrap_reps: Optional[NonNegInt] = None  # 0: no bootstrap, the intervals are left empty
    ci: Optional[OpenShare] = None


# ---- dpo (stage 05) ------------------------------------------------------------------------------

class LoraSection(_Section):
    r: Optional[Count] = None
    alpha: Optional[Positive] = None
    dropout: Optional[Annotated[float, Field(ge=0.0, lt=1.0)]] = None
    target_modules: Optional[Annotated[list[StrictStr], Field(min_length=1)]] = None


class DpoSection(_Section):
    models: Optional[Annotated[list[StrictStr], Field(min_length=1)]] = None  # registry names, one Table 8 group each
    teacher: Optional[str] = None  # "template" or a registry name
    teacher_max_new_tokens: Optional[Count] = None
    split_cutoff: Optional[DateLike] = None
    train_share: Optional[OpenShare] = None
    test_firm_share: Optional[OpenShare] = None
    split_seed: Optional[NonNegInt] = None
    seen_firm_test: Optional[StrictBool] = None  # training firms' reports after the cut-off: test, out of time
    max_train_pairs: Optional[Count] = None  # null: every pair
    max_length_cap: Optional[Count] = None
    lora: Optional[LoraSection] = None
    beta: Optional[Positive] = None
    learning_rate: Optional[Positive] = None
    max_steps: Optional[Count] = None  # null: num_train_epochs passes over the pairs
    num_train_epochs: Optional[Positive] = None
    batch_size: Optional[Count] = None
    grad_accum: Optional[Count] = None
    gradient_checkpointing: Optional[StrictBool] = None
    dtype: Optional[Dtype] = None
    device: Optional[Literal["auto", "cpu", "cuda"]] = None
    eval_reports: Optional[Count] = None  # test reports whose answers are generated; null = all
    json_answer_prefix: Optional[StrictBool] = None  # generation starts from {"answer": " and stops at "}"


# ---- figures (stage 06) and plan -----------------------------------------------------------------

class FiguresSection(_Section):
    example_report: Optional[str] = None
    case_model: Optional[str] = None
    case_report: Optional[str] = None
    text_chars: Optional[Count] = None
    caption_in_image: Optional[StrictBool] = None  # true: caption burned under each image (slides)


class PlanSection(_Section):
    corpus_reports: Optional[Count] = None
    report_tokens: Optional[Count] = None
    estimate_chars: Optional[Positive] = None
    answer_tokens: Optional[Count] = None
    output_cap: Optional[Count] = None  # null: each record's max_new_tokens
    latency_s: Optional[Positive] = None
    sample_texts: Optional[Count] = None
    preflight: Optional[StrictBool] = None


# ---- bizfin (stages 07-08) -----------------------------------------------------------------------

class IteraJudgeSection(_Section):
    refiner: Optional[str] = None
    judges: Optional[Annotated[list[StrictStr], Field(min_length=1)]] = None
    score_range: Optional[Annotated[list[StrictInt], Field(min_length=2, max_length=2)]] = None
    temperature: Optional[NonNeg] = None
    dimension_order: Optional[Literal["published", "reversed"]] = None
    refine_max_new_tokens: Optional[Count] = None
    judge_max_new_tokens: Optional[Count] = None
    tasks: Optional[list[StrictStr]] = None
    max_items_per_task: Optional[Count] = None
    calibration_tasks: Optional[list[StrictStr]] = None
    calibration_questions: Optional[Count] = None  # null: every question
    calibration_answers: Optional[Count] = None    # null: every answer
    bootstrap_reps: Optional[NonNegInt] = None
    ci: Optional[OpenShare] = None

    @model_validator(mode="after")
    def _scale(self) -> "IteraJudgeSection":
        if self.score_range is not None and not self.score_range[0] < self.score_range[1]:
            raise ValueError(f"bizfin.iterajudge.score_range must be [low, high] with low < high, "
                             f"got {self.score_range!r}")
        return self


class BizfinSection(_Section):
    models: Optional[list[StrictStr]] = None
    judge: Optional[str] = None
    judge_method: Optional[Literal["vanilla"]] = None  # IteraJudge is stage 08
    source: Optional[Literal["auto", "local", "huggingface", "format_sample"]] = None
    data_dir: Optional[str] = None
    hf_dataset: Optional[str] = None
    hf_revision: Optional[str] = None  # a commit of the dataset repository (pinned)
    tasks: Optional[list[StrictStr]] = None
    real_items_per_task: Optional[Count] = None    # null: every item
    sample_items_per_task: Optional[Count] = None  # null: every format sample
    item_selection: Optional[Literal["shortest", "first"]] = None
    max_new_tokens: Optional[Count] = None
    judge_max_new_tokens: Optional[Count] = None
    temperature: Optional[NonNeg] = None  # null: the registry record's sampling
    table6_model: Optional[str] = None
    official_code_dir: Optional[str] = None  # a checkout of the published evaluation code: its scripts score the official column
    rubrics_dir: Optional[str] = None  # null: our judge rubrics; else a checkout of the published prompts
    iterajudge: Optional[IteraJudgeSection] = None


class RehearsalSection(_Section):
    """`make rehearse` (finlib.rehearsal.rehearse): the simulated servers and the checks of the offline rehearsal."""
    stages: Optional[list[StrictStr]] = None       # stage ids run through the runner (DPO, stage 05, is a GPU run)
    time_scale: Optional[NonNeg] = None            # multiplies every simulated latency and Retry-After (0 = none)
    profile_seed: Optional[StrictInt] = None       # spreads the planted propensities over the models
    profiles: Optional[dict[str, dict[str, Any]]] = None  # per model: finlib.rehearsal.simulated_servers.Profile fields
    cell_alpha: Optional[Annotated[float, Field(gt=0, lt=1)]] = None  # family-wise false-alarm rate of the
    # check of every Table 4-7 cell against the planted truth (Bonferroni over the cells)


SECTION_MODELS: dict[str, type[BaseModel]] = {
    "data": DataSection, "labels": LabelsSection, "perturb": PerturbSection, "inference": InferenceSection,
    "scoring": ScoringSection, "dpo": DpoSection, "figures": FiguresSection, "plan": PlanSection,
    "bizfin": BizfinSection, "rehearsal": RehearsalSection,
}


def params_model() -> type[BaseModel]:
    """The whole file's model: a closed top level, every section closed and typed."""
    fields: dict[str, Any] = {"seed": (Optional[StrictInt], None), "extends": (Optional[str], None)}
    fields.update({name: (Optional[model], None) for name, model in SECTION_MODELS.items()})
    return create_model("Params", __base__=_Section, **fields)


PARAMS_MODEL = params_model()


def declared_keys(section: str) -> set[str]:
    """The keys a section declares (its first level), for the tests that compare them with the stages."""
    return set(SECTION_MODELS[section].model_fields)


def _type_name(value: Any) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "list",
            dict: "mapping"}.get(type(value), type(value).__name__)


_TYPE_TAGS = {"str": "a string", "date": "a date", "int": "an integer", "float": "a number", "bool": "a boolean"}


def _tag_text(tag: str) -> str:
    """A union branch's tag in words: `int`, `constrained-int` -> an integer; `literal['x']` -> 'x'."""
    base = tag.removeprefix("constrained-")
    return _TYPE_TAGS.get(base, base.removeprefix("literal[").removesuffix("]"))


def _is_tag(part: str) -> bool:
    return part in _TYPE_TAGS or part.startswith(("literal[", "constrained-"))


def _messages(errors: list[dict]) -> list[str]:
    """One line per bad key: dotted key, what was expected, the value found. A union's branches
    (`start: str | date`) become one line listing the accepted types; a range or cross-key rule
    (`labels.quantiles` ordered) gives its own sentence."""
    grouped: dict[str, dict] = {}
    for err in errors:
        loc = [str(p) for p in err["loc"]]
        tag = loc.pop() if len(loc) > 1 and _is_tag(loc[-1]) else None
        key = ".".join(loc)
        g = grouped.setdefault(key, {"types": [], "input": err.get("input"), "msgs": [], "tags": []})
        g["types"].append(err["type"])
        g["msgs"].append(err["msg"][:1].lower() + err["msg"][1:])
        if tag:
            g["tags"].append(_tag_text(tag))
    out = []
    for key, g in grouped.items():
        if "extra_forbidden" in g["types"]:
            top = "." not in key
            out.append(f"unknown key '{key}'" + (f" (top-level sections are {list(TOP_LEVEL)})" if top else ""))
            continue
        if "value_error" in g["types"]:  # a model's own rule: its message names the keys and values
            out.append(g["msgs"][g["types"].index("value_error")].removeprefix("value error, "))
            continue
        ranged = [m for m, t in zip(g["msgs"], g["types"]) if t in _RANGE_ERRORS]
        if ranged:
            expected = ranged[0]
        elif len(g["tags"]) > 1:
            expected = "expected " + " or ".join(dict.fromkeys(g["tags"]))
        else:
            expected = g["msgs"][0]
        got = g["input"]
        out.append(f"{key}: {expected}; got {got!r} ({_type_name(got)})")
    return out


_RANGE_ERRORS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal", "too_short", "too_long")


def validate_params(params: dict, path: str | Path = "params") -> dict:
    """Check a resolved params mapping against the schema; returns it unchanged, or raises
    ConfigError naming the file, each bad key, what was expected and the value found."""
    try:
        PARAMS_MODEL.model_validate(params)
    except ValidationError as exc:
        lines = _messages(exc.errors())
        raise ConfigError(f"{path}: invalid params: " + "; ".join(lines[:10])) from None
    return params


def validate_section(name: str, value: Any, path: str | Path = "params") -> dict:
    """One top-level section checked against its model (what `RunConfig.section` returns to a
    stage): the same messages as a whole file, so a value changed after loading is refused too."""
    if name not in SECTION_MODELS:
        raise ConfigError(f"{path}: unknown params section {name!r}; sections are {list(TOP_LEVEL)}")
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: section '{name}' must be a mapping, got {_type_name(value)}")
    validate_params({name: value}, path)
    return value


# Every key that names registry records -> the stage that calls those models. `load_run` checks
# `inference.models` (every run has it); the runner checks every key of the stages it will run before
# the first one starts, and the preflight lists them too: a typo in a judge or a teacher fails before
# stage 00, not when its stage starts after earlier stages' paid calls -- while a run of stage 03 alone
# with a one-model registry is not refused for names only other stages use.
MODEL_NAME_STAGES: dict[str, str] = {
    "inference.models": "03", "inference.extension_models": "03", "dpo.models": "05", "dpo.teacher": "05",
    "figures.case_model": "06", "bizfin.models": "07", "bizfin.judge": "07", "bizfin.iterajudge.judges": "08"}
MODEL_NAME_KEYS: tuple[str, ...] = ("inference.models",)  # checked at load
NOT_MODEL_NAMES = frozenset({"template"})


def model_names_used(params: dict, keys: Iterable[str] = MODEL_NAME_KEYS) -> dict[str, list[str]]:
    """Dotted key -> the registry names it holds (absent and null keys are left out)."""
    out: dict[str, list[str]] = {}
    for dotted in keys:
        value: Any = params
        for part in dotted.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        names = [value] if isinstance(value, str) else list(value or [])
        names = [n for n in names if n not in NOT_MODEL_NAMES]
        if names:
            out[dotted] = names
    return out


def check_model_names(params: dict, registry_names: set[str], path: str | Path, registry_file: str | Path,
                      keys: Iterable[str] = MODEL_NAME_KEYS) -> None:
    """Every model name of `keys` in params must be a record of the registry; the error names each
    unknown name, its key, and the registry file (so a typo fails before any call, not mid-run)."""
    bad = [f"{key}: {name!r}" for key, names in model_names_used(params, keys).items() for name in names
           if name not in registry_names]
    if bad:
        raise ConfigError(f"{path}: unknown model name(s) {'; '.join(bad)} — not records of the model registry "
                          f"{registry_file} (add a record there or fix the name)")
