"""Stage 03 refuses to "succeed" when most calls fail (the probe: a wrong key, 36 x HTTP 401,
runner printed "done"), and stage-level fault accounting: failures are 'not answered', never ratings."""
from __future__ import annotations

import pandas as pd
import pytest
from llm_helpers import api_record, write_registry
from test_llm_secrets import conditions

from finlib.core.artifacts import read_frame, write_frame
from finlib.core.config import ConfigError
from finlib.finbias.inference.stage import InferenceFailed, check_error_share, inference_params, read_predictions
from finlib.finbias.inference.stage import run as run_inference
from finlib.rehearsal.stub_server import ThreadedStub


def _use_stub(run, base_url: str, key_env: str = "STUB_RELIABILITY_KEY", **fields) -> None:
    registry = write_registry(run.root, api_record("stub-api", base_url, key_env, concurrency=4, max_attempts=2,
                                                   **fields))
    run.params["inference"].update(registry=registry, models=["stub-api"], budget_usd=1.0, progress=False)
    write_frame(run, "conditions", conditions())


def test_wrong_key_fails_the_stage_naming_the_error(tmp_run, monkeypatch):
    """Drill: most calls of a model fail (error share over inference.max_error_share)."""
    monkeypatch.setenv("STUB_RELIABILITY_KEY", "sk-wrong-key-000000")
    with ThreadedStub(require_key="sk-right-key-111111") as stub:
        _use_stub(tmp_run, stub.base_url)
        with pytest.raises(InferenceFailed, match=r"model 'stub-api': 6/6 calls failed; most frequent error \(6x\): "
                                                  r"HTTP 401"):
            run_inference(tmp_run)
        assert stub.stub.n_requests == 6  # 401 is not retried
    pred = read_frame(tmp_run, "predictions")  # written before failing: the failures can be inspected
    assert (pred["status"] == "error").sum() == 6 and pred["answer"].isna().all()


def test_a_few_failures_pass_and_are_not_answers(tmp_run, monkeypatch):
    monkeypatch.setenv("STUB_RELIABILITY_KEY", "k")
    cond = conditions()
    cond.loc[0, "text"] = cond.loc[0, "text"] + " [[500x9]]"  # 1 of 6 calls fails after its retries
    with ThreadedStub() as stub:
        _use_stub(tmp_run, stub.base_url)
        write_frame(tmp_run, "conditions", cond)
        report = run_inference(tmp_run).report
        pred = read_predictions(tmp_run)
    failed = pred[pred["status"] == "error"]
    assert len(failed) == 1 and "HTTP 500" in failed["error"].iloc[0]
    assert failed["answer"].isna().all() and not failed["parsed"].any()
    assert not failed["answered"].any() and (failed["parse_note"] == "not_answered").all()
    assert pred.loc[pred["status"] == "ok", "answered"].all()
    assert report["errors"] and list(report["errors"].values()) == [1]


def test_threshold_is_a_param_checked_like_the_others(tmp_run):
    assert inference_params(tmp_run)["max_error_share"] == 0.5
    for bad in (1.5, "half", True, -0.1):
        tmp_run.params["inference"]["max_error_share"] = bad
        with pytest.raises(ConfigError, match="max_error_share"):
            inference_params(tmp_run)


def test_error_share_is_judged_per_model_on_sent_calls():
    rows = [{"model": "a", "status": "ok", "error": None}] * 3 + [{"model": "a", "status": "error", "error": "x"}] * 3
    rows += [{"model": "b", "status": "skipped", "error": "no rating"}] * 10 + [{"model": "b", "status": "ok"}]
    pred = pd.DataFrame(rows)
    check_error_share(pred, 0.5)  # a: exactly half failed (not more); b: skipped rows do not count
    with pytest.raises(InferenceFailed, match=r"model 'a': 3/6 calls failed; most frequent error \(3x\): x"):
        check_error_share(pred, 0.4)
    check_error_share(pred.iloc[:0], 0.0)


def test_transport_failures_are_outside_n_and_cut_or_refused_answers_inside_n(tmp_run, monkeypatch):
    """End to end (stage 03 -> stage 04's score_frame): HTTP failures after retries are 'not
    answered' (outside N, counted with their error); an answer cut at the token limit whose JSON
    already holds the rating is read ('truncated_read', inside N); a prompt the server refuses for
    its context length is an empty answer inside N (the authors' vLLM), counted by its reason."""
    from finlib.finbias.inference.stage import usage_table
    from finlib.finbias.scoring.stage import score_frame
    from finlib.llm.context import CONTEXT_REFUSED

    monkeypatch.setenv("STUB_RELIABILITY_KEY", "k")
    cond = conditions()
    cond.loc[0, "text"] += " [[500x9]]"   # fails after its retries
    cond.loc[1, "text"] += " [[length]]"  # answered, cut at the output-token limit after its answer
    cond.loc[2, "text"] += " [[context]]"  # the server: the prompt alone exceeds the context
    with ThreadedStub() as stub:
        _use_stub(tmp_run, stub.base_url)
        write_frame(tmp_run, "conditions", cond)
        report = run_inference(tmp_run).report
        pred = read_predictions(tmp_run)
    reports = pd.DataFrame({"report_id": [f"R{i}" for i in range(3)], "ticker": ["AAA", "BBB", "CCC"],
                            "sector": "Technology", "analyst_rating": "bullish"})
    labels = pd.DataFrame({"report_id": [f"R{i}" for i in range(3)], "label": ["bullish", "neutral", "bearish"]})
    scored = score_frame(pred, cond, labels, reports)
    c = scored.counts
    assert c["not_answered"] == 1 and c["skipped"] == 1 and c["scored_rows"] == 5
    assert c["truncated"] == 0 and c["truncated_read"] == 1 and c["unparsed"] == 1
    assert "HTTP 500" in scored.not_answered["error"].iloc[0] and scored.not_answered["n"].sum() == 1
    cut = scored.rows[scored.rows["item_id"] == cond.loc[1, "item_id"]].iloc[0]
    assert cut["parse_note"] == "truncated_read" and cut["answer"] == "bullish" and bool(cut["truncated_output"])
    refused = scored.rows[scored.rows["item_id"] == cond.loc[2, "item_id"]].iloc[0]
    assert refused["raw_text"] == "" and refused["parse_note"] == "empty" and not refused["parsed"]
    assert refused["error"].startswith(CONTEXT_REFUSED) and "maximum context length" in refused["error"]
    assert cond.loc[0, "item_id"] not in set(scored.rows["item_id"])
    assert report["empty_answers_by_reason"] == {CONTEXT_REFUSED: 1, "model_replied_empty": 0}
    assert report["answer_status"]["answered_truncated_read"] == 1 and not report["errors"].get(refused["error"])
    assert report["models"]["stub-api"]["context_refused"] == 1
    usage = usage_table(report).set_index("condition")
    assert usage["cut_read"].sum() == 1 and usage["context_refused"].sum() == 1 and usage["cut_unparsed"].sum() == 0
    assert usage.loc[cond.loc[2, "condition"], "context_refused"] == 1
    assert stub.stub.attempts[[t for t in stub.stub.attempts if "[[context]]" in t][0]] == 1  # not retried


