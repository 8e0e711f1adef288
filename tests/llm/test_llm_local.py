"""Local transformers backend with the real SmolLM2 (slow: model load), and the stage on it."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from finlib.core.artifacts import read_json, write_frame
from finlib.finbias.inference.stage import PREDICTION_COLUMNS, check_conditions, plan_requests, read_predictions
from finlib.finbias.inference.stage import run as run_inference
from finlib.finbias.prompts import FINBIAS_LABELS, build_messages
from finlib.llm.registry import load_registry
from finlib.llm.store import Request, make_key

ROOT = Path(__file__).resolve().parents[2]
MODEL_CACHE = ROOT / "data" / "interim" / "models"  # shared conversion cache (GGUF -> safetensors once)
TEXTS = ["We rate Acme Corp. a Buy. Revenue rose 20% and margins widened.",
         "We downgrade Beta Inc. to Sell. Demand collapsed, debt is rising and guidance was cut sharply for 2025.",
         "Hold."]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smol():
    pytest.importorskip("transformers")
    from finlib.llm.local_backend import LocalModel

    spec = load_registry(ROOT / "params" / "models.yaml")["smollm2-135m"]
    return LocalModel(spec, MODEL_CACHE, dtype="float32", batch_size=8, labels=FINBIAS_LABELS)


def score_request(model, text: str) -> Request:
    msgs = build_messages(text, True)
    return Request(make_key("local", "smol", msgs, {}, "t", "score"), "smollm2-135m", "local", "score", msgs, {})


def test_label_tokens_are_the_stems(smol):
    assert [smol.tok.decode([i]) for i in smol.label_ids] == ["bull", "neutral", "bear"]


def test_batched_scores_sum_to_one_and_match_direct_computation(smol):
    import torch

    requests = [score_request(smol, t) for t in TEXTS]
    results = {r.key: r for batch in smol.score(requests) for r in batch}
    for req, text in zip(requests, TEXTS):
        probs = results[req.key].probs
        assert math.isclose(sum(probs.values()), 1.0, abs_tol=1e-6)
        # direct: one unpadded forward pass over the full prompt, softmax over the whole vocabulary
        ids = smol.tok(smol.prompt_text(build_messages(text, True), "score"), add_special_tokens=False)["input_ids"]
        with torch.inference_mode():
            logits = smol.model(input_ids=torch.tensor([ids])).logits[0, -1].float()
        full = torch.softmax(logits, -1)
        stems = [smol.tok.encode(s, add_special_tokens=False)[0] for s in ("bull", "neutral", "bear")]
        expected = (full[stems] / full[stems].sum()).tolist()
        got = [probs["bullish"], probs["neutral"], probs["bearish"]]
        assert np.allclose(got, expected, atol=2e-4), (text, got, expected)
        assert results[req.key].input_tokens == len(ids)
        assert results[req.key].extra["label_mass"] == pytest.approx(float(full[stems].sum()), abs=2e-4)


def test_generation_respects_max_new_tokens(smol):
    msgs = build_messages(TEXTS[0], True)
    params = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 6}
    req = Request(make_key("local", "smol", msgs, params, "t", "generate"), "smollm2-135m", "local", "generate",
                  msgs, params)
    (res,) = next(smol.generate([req]))
    assert res.status == "ok" and isinstance(res.raw_text, str) and 1 <= res.output_tokens <= 6
    # SmolLM2 copies the report: 6 tokens never reach its end-of-turn, so the answer was cut
    assert res.output_tokens == 6 and res.truncated_output is True


def test_a_failing_item_becomes_an_error_row_and_the_rest_are_scored(smol, monkeypatch, tmp_path):
    from finlib.llm.local_backend import run_local
    from finlib.llm.store import ResponseStore

    requests = [score_request(smol, t) for t in TEXTS]
    poison = smol.tok(smol.prompt_text(requests[1].messages, "score"), add_special_tokens=False)["input_ids"]
    real = smol.label_logprobs

    def flaky(seqs):
        if any(s == poison for s in seqs):
            raise RuntimeError("CUDA out of memory (simulated)")
        return real(seqs)

    monkeypatch.setattr(smol, "label_logprobs", flaky)
    with ResponseStore(tmp_path / "r.sqlite") as store:
        assert run_local(smol, requests, store) == 3
        rows = store.get([r.key for r in requests])
    assert [rows[r.key]["status"] for r in requests] == ["ok", "error", "ok"]
    assert "out of memory" in rows[requests[1].key]["error"] and rows[requests[1].key]["p_bullish"] is None
    assert rows[requests[0].key]["p_bullish"] is not None


def test_truncation_with_real_tokenizer_keeps_first_sentence(smol):
    first = "We reiterate our Buy rating on Acme Corp. with a $50 target."
    text = first + " " + " ".join(f"Sentence number {i} about revenue and margins." for i in range(300))
    ok = pd.DataFrame([{"item_id": "R:original", "report_id": "R", "condition": "original", "text": text}])
    overhead = smol.n_tokens(smol.prompt_text(build_messages("", True), "score"))
    inf = {"max_input_tokens": 200, "max_new_tokens": 8, "dtype": "float32", "threads": None, "prompt_version": "finbias-authors-v1",
           "constrained_json": []}
    (req,) = plan_requests(ok, smol.spec, lambda row: ["score"], inf, smol.n_tokens, overhead)
    user = req.messages[-1]["content"]
    assert req.truncated and user.startswith(first) and len(user) < len(text)
    assert smol.n_tokens(smol.prompt_text(req.messages, "score")) <= 200


def fixture_conditions() -> pd.DataFrame:
    rows = []
    for i, text in enumerate(TEXTS[:2]):
        rid = f"R{i}"
        body = text.split(". ", 1)[1]
        for cond, t in (("original", text), ("no_rating", body), ("fake_rating", "We rate it Neutral. " + body),
                        ("no_opinion", body[:20])):
            rows.append({"item_id": f"{rid}:{cond}", "report_id": rid, "condition": cond, "text": t,
                         "analyst_rating": "bullish", "fake_rating": None, "reference_rating": "bullish",
                         "status": "ok", "skip_reason": None})
    rows[-1].update(status="skipped", skip_reason="lexicon unavailable", text=None)
    return pd.DataFrame(rows)


def test_stage_writes_contract_and_resumes(tmp_run):
    tmp_run.params["inference"].update(models=["smollm2-135m"], model_cache=str(MODEL_CACHE), generate_subset=1,
                                       max_new_tokens=4, progress=False)  # the torch backend alone
    write_frame(tmp_run, "conditions", fixture_conditions())
    report = run_inference(tmp_run).report
    pred = read_predictions(tmp_run)
    assert list(pred.columns) == PREDICTION_COLUMNS
    assert len(pred) == 8 + 4  # 7 scored + 1 skipped, + 4 generated (report R0, all conditions)
    scored = pred[(pred["mode"] == "score") & (pred["status"] == "ok")]
    assert len(scored) == 7
    assert np.allclose(scored[["p_bullish", "p_neutral", "p_bearish"]].sum(axis=1), 1.0)
    skipped = pred[pred["status"] == "skipped"]
    assert skipped["error"].tolist() == ["lexicon unavailable"] and skipped["p_bullish"].isna().all()
    gen = pred[pred["mode"] == "generate"]
    assert set(gen["report_id"]) == {"R0"} and gen["p_bullish"].isna().all() and gen["raw_text"].notna().all()
    assert pred["cache_key"].notna().sum() == 11
    assert report["models"]["smollm2-135m"]["sent"] == 11
    assert 0 < report["models"]["smollm2-135m"]["label_mass_min"] <= report["models"]["smollm2-135m"]["label_mass_mean"] <= 1
    assert read_json(tmp_run, "inference_report")["n_skipped_conditions"] == 1
    # rerun: everything comes from the store, same predictions
    report2 = run_inference(tmp_run).report
    pred2 = read_predictions(tmp_run)
    assert report2["models"]["smollm2-135m"]["sent"] == 0
    assert report2["models"]["smollm2-135m"]["cached"] == 11
    pd.testing.assert_frame_equal(pred.drop(columns="latency_s"), pred2.drop(columns="latency_s"))


def test_malformed_conditions_name_row_and_field():
    df = fixture_conditions()
    df.loc[2, "text"] = None
    with pytest.raises(ValueError, match="row 2.*R0:fake_rating.*'text'"):
        check_conditions(df)
    with pytest.raises(ValueError, match="missing column.*skip_reason"):
        check_conditions(df.drop(columns="skip_reason"))
