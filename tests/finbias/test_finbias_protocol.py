"""Stage 03 runs the authors' protocol by default: their prompt (a named version in the store key)
and their decoding (temperature/top_p 1.0, 4,096 output tokens per registry record), with the
embedded run's smaller output cap explicit in params."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest

from finlib.core.config import ConfigError
from finlib.finbias.inference.stage import inference_params, max_new_tokens_for, plan_requests
from finlib.llm.registry import load_registry
from finlib.llm.spec import ModelSpec

ROOT = Path(__file__).resolve().parents[2]
API = ModelSpec(name="api", backend="openai", model_id="m", supports_system=False, context_length=8192,
                price_input_per_m=0.0, price_output_per_m=0.0, sampling={"temperature": 1.0, "top_p": 1.0},
                base_url="http://127.0.0.1:1/v1", api_key_env=None)
OK = pd.DataFrame([{"item_id": "R0:original", "report_id": "R0", "condition": "original",
                    "text": "We rate Acme a Buy. Sales rose."}])
INF = {"max_input_tokens": 512, "max_new_tokens": "registry", "dtype": "float32",
       "prompt_version": "finbias-authors-v1", "constrained_json": []}


def plan(**inf):
    (req,) = plan_requests(OK, API, lambda row: ["generate"], {**INF, **inf}, lambda t: len(t.split()), 10)
    return req


def test_default_request_is_the_authors_protocol():
    req = plan()
    assert req.params == {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 4096}
    # no system role: one user turn, system + "\n" + report (run_vllm.py)
    assert req.messages[0]["content"].startswith("You are an investor. Analyze the firm analyst report logically.\n")
    assert req.messages[0]["content"].endswith("\nWe rate Acme a Buy. Sales rose.")


def test_prompt_version_and_output_cap_are_in_the_store_key():
    base = plan().key
    assert plan(prompt_version="finbias-cot-v1").key != base
    assert plan(max_new_tokens=256).key != base
    assert plan(max_new_tokens=256).params["max_new_tokens"] == 256


def test_run_override_is_explicit_and_registry_is_the_default_record_value():
    assert max_new_tokens_for(API, {"max_new_tokens": "registry"}) == 4096
    assert max_new_tokens_for(dataclasses.replace(API, max_new_tokens=1000), {"max_new_tokens": "registry"}) == 1000
    assert max_new_tokens_for(API, {"max_new_tokens": 48}) == 48


@pytest.mark.parametrize("field,value", [("prompt_version", "finbias-v0"), ("max_new_tokens", "all"),
                                         ("max_new_tokens", 0), ("max_new_tokens", True)])
def test_bad_protocol_params_are_errors(tmp_run, field, value):
    tmp_run.params["inference"][field] = value
    with pytest.raises(ConfigError, match=f"inference.{field}"):
        inference_params(tmp_run)


def test_shipped_params_default_to_the_authors_prompt_and_real_runs_to_their_decoding():
    from finlib.core.config import read_yaml_mapping

    default = read_yaml_mapping(ROOT / "params" / "default.yaml", "params", ValueError)
    real = read_yaml_mapping(ROOT / "params" / "real.yaml", "params", ValueError)
    assert default["inference"]["prompt_version"] == "finbias-authors-v1"
    assert real["inference"]["max_new_tokens"] == "registry"


def test_registry_says_which_models_think_and_keeps_the_authors_decoding():
    reg = load_registry(ROOT / "params" / "models.yaml")
    thinkers = {n for n, s in reg.items() if s.thinks}
    assert {"gpt-5.1", "qwen3-8b"} <= thinkers
    assert "gpt-4.1" not in thinkers and "llama-3.1-8b-it" not in thinkers
    for spec in reg.values():
        if spec.backend == "openai":
            assert spec.max_new_tokens == 4096, spec.name
            assert (spec.sampling["temperature"], spec.sampling["top_p"]) == (1.0, 1.0), spec.name


def test_stage_report_separates_not_answered_from_unparsed_and_truncated():
    import numpy as np

    from finlib.finbias.inference.stage import summarise, to_frame

    base = {"report_id": "R", "condition": "original", "model": "m", "mode": "generate", "p_bullish": np.nan,
            "p_neutral": np.nan, "p_bearish": np.nan, "input_tokens": 1, "output_tokens": 1, "cost_usd": 0.0,
            "latency_s": 0.0, "truncated": False, "cache_key": "k"}
    rows = [{**base, "item_id": "a", "raw_text": '{"answer": "bullish"}', "status": "ok", "error": None,
             "truncated_output": False},
            {**base, "item_id": "b", "raw_text": '{"answer": "bullish", "reason": "cut', "status": "ok",
             "error": None, "truncated_output": True},
            {**base, "item_id": "c", "raw_text": "I am not sure.", "status": "ok", "error": None,
             "truncated_output": False},
            {**base, "item_id": "d", "raw_text": None, "status": "error", "error": "HTTP 503 after 6 attempts",
             "truncated_output": None}]
    pred = to_frame(rows)
    assert pred.set_index("item_id")["parse_note"].to_dict() == {"a": "json", "b": "truncated_read",
                                                                 "c": "no_rating_found", "d": "not_answered"}
    status = summarise(pred, {})["answer_status"]
    assert status == {"answered": 3, "not_answered": 1, "skipped": 0, "answered_unparsed": 1,
                      "answered_truncated": 0, "answered_truncated_read": 1}
