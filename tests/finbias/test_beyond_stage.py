"""Both analyses beyond the paper end to end on a simulated multi-model server: stage 02's sweep
rows -> stage 03's k draws (keys, resume, the paper's rows untouched) -> stage 09's tables and
figures; the plan prices the extension; draw 0 keeps the paper's store key."""
from __future__ import annotations

import hashlib
import json

import pandas as pd
import pytest
import yaml
from llm_helpers import api_record

from finlib.core.artifacts import read_frame, write_frame
from finlib.finbias.perturb.stage import build_conditions
from finlib.llm.store import make_key
from finlib.rehearsal.stub_server import ThreadedStub

TEXTS = ["We rate Firm {i} a Buy. Revenue grew {i} percent. Costs fell.",
         "We rate Firm {i} a Sell. Revenue fell {i} percent. Costs rose."]
SECTORS = ["Energy", "Utilities"]


def _reports(n: int = 4) -> pd.DataFrame:
    return pd.DataFrame({"report_id": [f"R{i}" for i in range(n)], "text": [TEXTS[i % 2].format(i=i) for i in range(n)],
                         "ticker": [f"T{i}" for i in range(n)], "sector": [SECTORS[i % 2] for i in range(n)],
                         "analyst_rating": ["bullish" if i % 2 == 0 else "bearish" for i in range(n)]})


def test_draw_zero_keeps_the_papers_key():
    msgs = [{"role": "user", "content": "x"}]
    payload = {"backend": "openai", "model_id": "m", "messages": msgs, "params": {"temperature": 1.0},
               "prompt_version": "v", "mode": "generate"}
    old = hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
                         .encode("utf-8")).hexdigest()
    assert make_key("openai", "m", msgs, {"temperature": 1.0}, "v", "generate") == old
    assert make_key("openai", "m", msgs, {"temperature": 1.0}, "v", "generate", sample=0) == old
    keys = {make_key("openai", "m", msgs, {"temperature": 1.0}, "v", "generate", sample=s) for s in range(4)}
    assert len(keys) == 4


def _setup(run, base_url: str, k: int) -> pd.DataFrame:
    records = [api_record(n, base_url, "STUB_BEYOND_KEY", concurrency=4, max_attempts=2) for n in ("stub-a", "stub-b")]
    (run.root / "params" / "models_beyond.yaml").write_text(yaml.safe_dump({"models": records}))
    run.params["inference"].update(registry="params/models_beyond.yaml", models=["stub-a", "stub-b"], budget_usd=1.0,
                                   progress=False, samples_per_item=k, samples_reports=None, extension_models=None,
                                   generator_reports=None, constrained_json=[])
    reports = _reports()
    conditions = build_conditions(reports[["report_id", "text"]], seed=3, sweep_ids={"R0", "R1", "R2"}).conditions
    write_frame(run, "conditions", conditions)
    write_frame(run, "reports", reports)
    write_frame(run, "labels", pd.DataFrame({"report_id": reports["report_id"],
                                             "label": ["bullish", "neutral", "bearish", "bullish"]}))
    return conditions


@pytest.mark.slow
def test_k_draws_and_the_sweep_on_a_two_model_server_then_stage_09(tmp_run, monkeypatch):
    from finlib.finbias.beyond import stage as beyond
    from finlib.finbias.inference.stage import read_predictions
    from finlib.finbias.inference.stage import run as run_inference
    from finlib.pipeline.plan import build_plan

    monkeypatch.setenv("STUB_BEYOND_KEY", "k")
    k = 3
    with ThreadedStub() as stub:
        conditions = _setup(tmp_run, stub.base_url, k)
        report = run_inference(tmp_run).report
        pred = read_predictions(tmp_run)
        # sweep reports R0-R2: original (= its own sweep), no_rating, fake (= one sweep), the other sweep;
        # R3 (no sweep): original, no_rating, fake. no_opinion is skipped (no lexicon in this run)
        unique_texts = 3 * 4 + 3
        assert stub.stub.n_requests == unique_texts * k * 2  # two models, k draws each, every draw its own key
        run_inference(tmp_run)  # resumable: everything is stored, nothing is sent again
        assert stub.stub.n_requests == unique_texts * k * 2
    assert not pred["condition"].str.startswith("sweep_").any() and "sample" not in pred.columns
    draws = read_frame(tmp_run, "draws")
    ok = conditions[conditions["status"] == "ok"]
    assert len(draws) == len(ok) * k * 2
    assert all(sorted(g) == [0, 1, 2] for _, g in draws.groupby(["model", "item_id"])["sample"])
    first = draws[draws["sample"] == 0].merge(pred[["model", "item_id", "cache_key"]], on=["model", "item_id"])
    assert len(first) == len(ok[~ok["condition"].str.startswith("sweep_")]) * 2  # draw 0 = the paper's call
    assert first["cache_key_x"].eq(first["cache_key_y"]).all()
    assert report["draws"]["samples_per_item"] == k and report["draws"]["extension_models"] == ["stub-a", "stub-b"]

    res = beyond.run(tmp_run)
    est = res.estimates[(res.estimates["condition"] == "original") & (res.estimates["outcome"] == "herding")]
    assert len(est) == 2 and (est["n_reports"] == 4).all()
    # the stub always answers bullish: herding = share of bullish-rated reports, no draw-to-draw noise
    assert est["estimate"].tolist() == [0.5, 0.5] and (est["sigma2_within"] == 0).all()
    mat = res.matrix[(res.matrix["model"] == "stub-a")].set_index(["shown", "answer"])
    assert mat.loc[("bearish", "bullish"), "count"] == 3 * k and mat.loc[("bearish", "bearish"), "count"] == 0
    assert set(res.compare["paper_table"]) == {"Table 4", "Table 5", "Table 6"}
    assert (res.herded["n_reports"] == 3).all()
    for name in ("beyond_paper_vs_noise", "beyond_response_matrix", "beyond_sweep_lift"):
        assert (tmp_run.tables_dir / f"{name}.md").is_file()
    assert {r.name for r in res.figures if not r.skipped} == {"beyond_response_matrix", "beyond_sweep_lift",
                                                              "beyond_noise_gap"}

    plan = build_plan(tmp_run)
    extra = plan[plan["condition"].str.startswith(("sweep_", "draws"))]
    # per model: sweep 3 reports x 1 new text x k; draws 2..k of the paper conditions' ok rows of 4 reports
    n_paper = int((ok["condition"].isin(["original", "no_rating", "fake_rating", "no_opinion"])).sum())
    assert sorted(extra.groupby("condition")["requests"].sum().tolist()) == sorted([2 * 3 * k, 2 * (k - 1) * n_paper])


def test_paper_run_has_no_extension(tmp_run, monkeypatch):
    from finlib.finbias.beyond import stage as beyond
    from finlib.finbias.inference.stage import run as run_inference

    monkeypatch.setenv("STUB_BEYOND_KEY", "k")
    with ThreadedStub() as stub:
        _setup(tmp_run, stub.base_url, 1)
        conditions = read_frame(tmp_run, "conditions")
        write_frame(tmp_run, "conditions", conditions[~conditions["condition"].str.startswith("sweep_")])
        run_inference(tmp_run)
    assert read_frame(tmp_run, "draws").empty
    res = beyond.run(tmp_run)
    assert res.estimates.empty and res.matrix.empty and len(res.report["skipped"]) == 2
    assert all(r.skipped for r in res.figures)
