"""The declared schema of a params file (pydantic), checked when a run is loaded.

Why a schema on top of each stage's own key check: a stage only sees its params when it runs,
so a typo at the top level (`lables:`) or a wrong type (`labels.window: 60.9`, silently cut to
60 by `int()`; `"sixty"`, a bare ValueError naming no key) surfaced late or never. Here every
such mistake fails at load time with the file, the dotted key, the expected type and the value.

Design:
- The top level is a fixed list of sections (`TOP_LEVEL`); any other key is an error.
- data / labels are typed and closed (`extra="forbid"`). perturb / inference / scoring are typed
  for the keys declared here and *open*: their stages (`PERTURB_KEYS`, `INFERENCE_KEYS`,
  `SCORING_KEYS`) stay the one list of allowed keys, so a key added there does not have to be
  declared twice (a test checks that every declared key is one the stage reads).
- dpo / figures / plan / bizfin are free-form mappings validated by their own stages for now.
  Hook: write a pydantic model for the section and register it with `register_section(name, Model)`
  (from that stage's module, or here); from then on it is validated at load time like the rest.
- Types are strict: an integer key refuses 60.9 and "60" (YAML already gives real numbers);
  a float key accepts an integer. Dates may be quoted strings or YAML dates.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, ValidationError, create_model

TOP_LEVEL: tuple[str, ...] = ("seed", "extends", "data", "labels", "perturb", "inference", "scoring", "dpo",
                              "figures", "plan", "bizfin")
Number = float  # strict float still accepts an integer
DateLike = Union[str, dt.date]


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _Open(BaseModel):
    """Typed where declared; other keys pass here and are refused by the stage's own key list."""
    model_config = ConfigDict(extra="allow", strict=True)


def _synthetic_model() -> type[BaseModel]:
    """data.synthetic, built from finlib.finbias.synth.SynthParams's fields (the one list of its knobs)."""
    from finlib.finbias.synth import SynthParams

    kinds = {int: StrictInt, float: float, str: DateLike, "int": StrictInt, "float": float, "str": DateLike}
    fields = {f.name: (Optional[kinds.get(f.type, Any)], None) for f in dataclasses.fields(SynthParams)}
    return create_model("SyntheticSection", __base__=_Closed, **fields)


class ReportsSection(_Closed):
    path: Optional[str] = None
    hf_dataset: Optional[str] = None
    hf_split: Optional[str] = None
    columns: Optional[dict[str, Optional[str]]] = None
    on_unknown_sector: Optional[Literal["error", "keep"]] = None


class PricesSection(_Closed):
    path: Optional[str] = None
    market_path: Optional[str] = None
    market_column: Optional[str] = None
    market_ticker: Optional[str] = None
    yfinance_cache: Optional[str] = None


class MackinlaySection(_Closed):
    estimation_window: Optional[StrictInt] = None
    gap: Optional[StrictInt] = None
    min_obs: Optional[StrictInt] = None


class LabelsSection(_Closed):
    window: Optional[StrictInt] = None
    method: Optional[Literal["paper", "mackinlay"]] = None
    quantiles: Optional[list[float]] = None
    min_event_obs: Optional[StrictInt] = None
    mackinlay: Optional[MackinlaySection] = None


class PerturbSection(_Open):
    lexicon_path: Optional[str] = None
    lexicon_url: Optional[str] = None
    fake_rating: Optional[Literal["one", "both"]] = None
    top_triggers: Optional[StrictInt] = None
    example_report: Optional[str] = None
    mpqa_pos: Optional[Literal["respect", "ignore"]] = None
    tagger_model: Optional[str] = None
    tagger_processes: Optional[StrictInt] = None
    tag_cache: Optional[str] = None


class InferenceSection(_Open):
    models: Optional[list[str]] = None
    mode: Optional[Literal["score", "generate"]] = None
    generate_subset: Optional[StrictInt] = None
    max_new_tokens: Optional[Union[StrictInt, Literal["registry"]]] = None  # "registry": each record's limit
    max_input_tokens: Optional[StrictInt] = None
    budget_usd: Optional[Number] = None
    store: Optional[str] = None
    registry: Optional[str] = None
    model_cache: Optional[str] = None
    dtype: Optional[Literal["auto", "float32", "bfloat16", "float16"]] = None  # auto: finlib.llm.precision
    batch_size: Optional[StrictInt] = None
    score_batch_size: Optional[StrictInt] = None
    max_batch_tokens: Optional[StrictInt] = None
    threads: Optional[StrictInt] = None
    device: Optional[str] = None
    progress: Optional[StrictBool] = None
    batch: Optional[StrictBool] = None
    batch_dir: Optional[str] = None
    batch_poll_s: Optional[Number] = None
    max_error_share: Optional[Number] = None


class ScoringSection(_Open):
    bootstrap_reps: Optional[StrictInt] = None
    ci: Optional[float] = None


# Sections with a declared model; dpo/figures/plan/bizfin join through register_section.
SECTION_MODELS: dict[str, type[BaseModel]] = {
    "labels": LabelsSection, "perturb": PerturbSection, "inference": InferenceSection, "scoring": ScoringSection,
}


def register_section(name: str, model: type[BaseModel]) -> None:
    """Validate top-level section `name` with `model` from now on (the hook for dpo/figures/plan/bizfin)."""
    if name not in TOP_LEVEL:
        raise ValueError(f"unknown params section {name!r}; sections are {TOP_LEVEL}")
    SECTION_MODELS[name] = model


def _data_model() -> type[BaseModel]:
    return create_model("DataSection", __base__=_Closed,
                        source=(Optional[Literal["synthetic", "local", "huggingface"]], None),
                        synthetic=(Optional[_synthetic_model()], None), reports=(Optional[ReportsSection], None),
                        prices=(Optional[PricesSection], None))


def params_model() -> type[BaseModel]:
    """The whole file's model: closed top level, each section typed or free-form."""
    free = (Optional[dict[str, Any]], None)
    fields: dict[str, Any] = {name: free for name in TOP_LEVEL}
    fields.update(seed=(Optional[StrictInt], None), extends=(Optional[str], None), data=(Optional[_data_model()], None))
    fields.update({name: (Optional[model], None) for name, model in SECTION_MODELS.items()})
    return create_model("Params", __base__=_Closed, **fields)


def _type_name(value: Any) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "list",
            dict: "mapping"}.get(type(value), type(value).__name__)


_TYPE_TAGS = {"str": "a string", "date": "a date", "int": "an integer", "float": "a number", "bool": "a boolean"}


def _messages(errors: list[dict]) -> list[str]:
    """One line per bad key: dotted key, what was expected, the value found. A union's branches
    (`start: str | date`) become one line listing the accepted types."""
    grouped: dict[str, dict] = {}
    for err in errors:
        loc = [str(p) for p in err["loc"]]
        tag = loc.pop() if len(loc) > 1 and (loc[-1] in _TYPE_TAGS or loc[-1].startswith("literal[")) else None
        key = ".".join(loc)
        g = grouped.setdefault(key, {"type": err["type"], "input": err.get("input"), "msgs": [], "tags": []})
        g["msgs"].append(err["msg"][:1].lower() + err["msg"][1:])
        if tag:
            g["tags"].append(_TYPE_TAGS.get(tag, tag.removeprefix("literal[").removesuffix("]")))
    out = []
    for key, g in grouped.items():
        if g["type"] == "extra_forbidden":
            top = "." not in key
            out.append(f"unknown key '{key}'" + (f" (top-level sections are {list(TOP_LEVEL)})" if top else ""))
            continue
        expected = "expected " + " or ".join(g["tags"]) if g["tags"] else g["msgs"][0]
        got = g["input"]
        out.append(f"{key}: {expected}; got {got!r} ({_type_name(got)})")
    return out


def validate_params(params: dict, path: str | Path = "params") -> dict:
    """Check a resolved params mapping against the schema; returns it unchanged, or raises
    ConfigError naming the file, each bad key, the expected type and the value found."""
    from finlib.core.config import ConfigError

    try:
        params_model().model_validate(params)
    except ValidationError as exc:
        lines = _messages(exc.errors())
        raise ConfigError(f"{path}: invalid params: " + "; ".join(lines[:10])) from None
    return params
