"""`make plan`: request counts, tokens, cost and wall time by hand; preflight names what is missing."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pandas as pd
import pytest
import yaml

from finlib.core.config import RunConfig, deep_merge, load_params
from finlib.finbias.prompts import build_messages
from finlib.pipeline import plan

ROOT = Path(__file__).resolve().parents[2]
PLAN = {"corpus_reports": 100, "report_tokens": 1000, "estimate_chars": 4.0, "answer_tokens": 300,
        "gpu_tflops": 100.0, "gpu_hour_usd": 3.0,
        "output_cap": None, "latency_s": 10.0, "sample_texts": 50, "preflight": False}
REGISTRY = {"defaults": {"sampling": {"temperature": 1.0, "top_p": 1.0}},
            "models": [
                {"name": "api", "backend": "openai", "model_id": "x", "base_url": "https://api.example.invalid/v1",
                 "api_key_env": "G_PLAN_TEST_KEY", "supports_system": True, "context_length": 100000,
                 "price_input_per_m": 2.0, "price_output_per_m": 8.0, "concurrency": 10, "rpm": 60, "tpm": 0},
                {"name": "srv", "backend": "openai", "model_id": "y", "base_url": "http://localhost:1/v1",
                 "api_key_env": None, "supports_system": False, "context_length": 8192,
                 "price_input_per_m": 0.0, "price_output_per_m": 0.0, "concurrency": 4}]}


def make_cfg(tmp_path: Path, models=("api",), **over) -> RunConfig:
    reg = tmp_path / "models.yaml"
    reg.write_text(yaml.safe_dump(REGISTRY))
    # the declared params (params/default.yaml) with the paper's corpus, no extension calls and this registry
    declared = {k: v for k, v in load_params(ROOT / "params" / "default.yaml").items()
                if k in ("seed", "data", "perturb", "inference")}
    params = deep_merge(declared, {
        "seed": 1, "data": {"source": "huggingface"},
        "perturb": {"fake_rating": "one", "lexicon_path": None, "sweep_reports": 0},
        "inference": {"models": list(models), "registry": str(reg), "store": str(tmp_path / "s.sqlite"),
                      "max_new_tokens": 4096, "max_input_tokens": 16000, "batch": False,
                      "model_cache": str(tmp_path / "cache"), "samples_per_item": 1, "mode": "generate",
                      "endpoints": {}, "constrained_json": [], "extension_models": None,
                      "generator_reports": None}})
    params["plan"] = {**PLAN, **over}
    cfg = RunConfig(name="p", params=params, root=tmp_path, params_file=tmp_path / "p.yaml")
    cfg.processed_dir.mkdir(parents=True)
    return cfg


def test_plan_from_the_published_corpus_by_hand(tmp_path):
    cfg = make_cfg(tmp_path)
    p = plan.build_plan(cfg).set_index("condition")
    assert list(p.index) == ["original", "no_rating", "fake_rating", "no_opinion"]
    assert (p["requests"] == 100).all()
    system = len(build_messages("", True)[0]["content"])
    overhead = -(-system // 4) + 0 + 8                         # ceil(chars / 4) + empty user turn + 8
    assert p.loc["original", "input_tokens"] == 100 * (1000 + overhead)
    assert p.loc["original", "output_tokens_cap"] == 100 * 4096
    assert p.loc["original", "output_tokens_expected"] == 100 * 300
    in_tok = 100 * (1000 + overhead)
    assert p.loc["original", "cost_usd_expected"] == pytest.approx((in_tok * 2 + 30000 * 8) / 1e6)
    assert p.loc["original", "cost_usd_cap"] == pytest.approx((in_tok * 2 + 409600 * 8) / 1e6)
    # rpm 60 -> 100 requests take 100/60 min; concurrency 10 x 10 s -> 100 s: the rpm binds
    assert p.loc["original", "wall_hours"] == pytest.approx(100 / 60 / 60)
    assert p.loc["original", "binding_limit"] == "rpm"


def test_both_fake_ratings_double_the_fake_condition(tmp_path):
    cfg = make_cfg(tmp_path)
    cfg.params["perturb"]["fake_rating"] = "both"
    p = plan.build_plan(cfg).set_index("condition")
    assert p.loc["fake_rating", "requests"] == 200 and p.loc["original", "requests"] == 100


def test_plan_measures_this_runs_texts_and_stored_answer_lengths(tmp_path):
    cfg = make_cfg(tmp_path, models=("srv",))
    text = "x" * 400                                           # 100 estimated tokens
    pd.DataFrame({"item_id": ["a:original", "b:original", "a:no_rating"], "report_id": ["a", "b", "a"],
                  "condition": ["original", "original", "no_rating"], "text": [text, text, text],
                  "status": ["ok", "ok", "ok"]}).to_parquet(cfg.processed_dir / "conditions.parquet")
    with sqlite3.connect(tmp_path / "s.sqlite") as con:
        con.execute("CREATE TABLE responses (model TEXT, mode TEXT, status TEXT, output_tokens INTEGER)")
        con.executemany("INSERT INTO responses VALUES (?,?,?,?)",
                        [("srv", "generate", "ok", 100), ("srv", "generate", "ok", 300),
                         ("srv", "generate", "error", 0), ("srv", "score", "ok", 1)])
    p = plan.build_plan(cfg).set_index("condition")
    assert p.loc["original", "requests"] == 2 and p.loc["no_opinion", "requests"] == 0
    assert p.loc["original", "output_tokens_expected"] == 2 * 200          # mean of the two ok generations
    assert p.loc["original", "answer_source"] == "measured (n=2)"
    assert p.loc["original", "input_source"].startswith("estimate")
    # no rpm/tpm: concurrency 4 x latency 10 s
    assert p.loc["original", "wall_hours"] == pytest.approx(2 * 10 / 4 / 3600)
    # the cap is the context left after the output (8192 - 4096) when the report is longer
    assert plan.output_cap(cfg, None) == 4096


def test_markdown_table_has_totals(tmp_path):
    cfg = make_cfg(tmp_path, models=("api", "srv"))
    df, md = plan.write_plan(cfg)
    text = md.read_text()
    assert "TOTAL" in text and "| api" in text and "no calls made" in text
    assert (cfg.run_dir / "plan.csv").is_file()
    totals = plan.plan_totals(df).set_index("model")
    assert totals.loc["TOTAL (models one after another)", "requests"] == 800


def missing_everything(tmp_path, monkeypatch):
    """A run whose key, corpus revision, prices, lexicon and servers are all missing here."""
    monkeypatch.delenv("G_PLAN_TEST_KEY", raising=False)
    cfg = make_cfg(tmp_path, models=("api", "srv"))
    cfg.params["data"]["source"] = "huggingface"
    cfg.params["data"]["reports"].update(hf_dataset="Rain1998/Analyst-Report-Bias", hf_revision=None)
    cfg.params["data"]["prices"].update(path=None, market_path=None)
    cfg.params["perturb"]["lexicon_path"] = "data/external/none.tff"
    return cfg


def test_preflight_names_every_missing_piece(tmp_path, monkeypatch):
    cfg = missing_everything(tmp_path, monkeypatch)
    problems = plan.preflight(cfg, can_reach=lambda host, port: False)
    text = "\n".join(problems)
    for needle in ("Rain1998/Analyst-Report-Bias", "yfinance", "none.tff", "G_PLAN_TEST_KEY",
                   "localhost:1", "api.example.invalid:443"):
        assert needle in text, needle
    assert "hf_revision is not pinned" in text
    monkeypatch.setenv("G_PLAN_TEST_KEY", "dummy")
    cfg.params["data"]["reports"]["hf_revision"] = "0" * 40
    assert not [p for p in plan.preflight(cfg, can_reach=lambda h, p: True, list_models=lambda url: None)
                if "lexicon" not in p]


def test_preflight_names_a_model_its_server_does_not_serve(tmp_path, monkeypatch):
    """A vLLM server answering for another model is reported before any call, naming the model."""
    monkeypatch.setenv("G_PLAN_TEST_KEY", "dummy")
    cfg = make_cfg(tmp_path, models=("srv",))
    served = {"srv": ["some/other-model"]}
    problems = plan.preflight(cfg, can_reach=lambda h, p: True, list_models=lambda url: served["srv"])
    assert any("does not serve model 'srv'" in p and "some/other-model" in p for p in problems), problems
    spec_id = plan.run_registry(cfg)["srv"].model_id
    served["srv"] = [spec_id]
    assert not [p for p in plan.preflight(cfg, can_reach=lambda h, p: True, list_models=lambda url: served["srv"])
                if "server" in p]


def test_preflight_off_by_default_and_on_for_the_paper_run():
    assert load_params(ROOT / "params" / "default.yaml")["plan"]["preflight"] is False
    paper = load_params(ROOT / "params" / "paper.yaml")
    assert paper["plan"]["preflight"] is True
    assert len(paper["inference"]["models"]) == 19
    assert paper["data"]["source"] == "huggingface"
    from finlib.core.tables import paper_table
    from finlib.llm.registry import load_registry

    registry = load_registry(ROOT / "params" / "models.yaml")
    assert {registry[m].paper_name for m in paper["inference"]["models"]} == set(
        paper_table("finbias_table4")["model"])                       # exactly the 19 rows of Tables 4-7
    assert {registry[m].paper_name for m in paper["dpo"]["models"]} == set(
        paper_table("finbias_table8")["model"])                       # Table 8's three tuned models


def test_paper_run_fails_at_once_offline_naming_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(plan, "reachable", lambda host, port, timeout=2.0: False)
    for env in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(env, raising=False)
    path = ROOT / "params" / "paper.yaml"
    cfg = RunConfig(name="paper", params=load_params(path), root=ROOT, params_file=path)
    with pytest.raises(SystemExit) as exc:
        plan.check_preflight(cfg)
    msg = str(exc.value)
    assert "OPENAI_API_KEY" in msg and "ANTHROPIC_API_KEY" in msg and "Hugging Face" in msg
    assert "localhost:8001" in msg  # each open model has its own server (port) by default


def test_preflight_of_some_stages_asks_only_for_what_they_use(tmp_path, monkeypatch):
    """Stage 02 alone needs the lexicon, no model server; stage 03 its models, not the corpus."""
    cfg = missing_everything(tmp_path, monkeypatch)
    offline = dict(can_reach=lambda host, port: False)
    assert [p.split(":")[0] for p in plan.preflight(cfg, stages=["02"], **offline)] == ["lexicon"]
    only_03 = "\n".join(plan.preflight(cfg, stages=["03"], **offline))
    assert "G_PLAN_TEST_KEY" in only_03 and "localhost:1" in only_03 and "Rain1998" not in only_03
    assert "none.tff" not in only_03
    assert plan.preflight(cfg, stages=["04", "06"], **offline) == []
    whole = plan.preflight(cfg, **offline)
    assert set(whole) >= set(plan.preflight(cfg, stages=["00", "02", "03"], **offline))


def test_a_synthetic_run_plans_its_own_corpus_size(tmp_path):
    cfg = make_cfg(tmp_path)
    cfg.params["data"]["source"] = "synthetic"
    cfg.params["data"]["synthetic"]["n_reports"] = 12
    p = plan.build_plan(cfg).set_index("condition")
    assert (p["requests"] == 12).all()
    assert "n_reports = 12" in plan.plan_markdown(cfg, plan.build_plan(cfg))


def _stage03_report(root: Path, run: str, model: str, tokens_in: int, tokens_out: int, wall_s: float,
                    load_s: float, sent: int, requests: int) -> None:
    import json

    folder = root / "data" / "processed" / run
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "inference_report.json").write_text(json.dumps({
        "models": {model: {"sent": sent, "requests": requests, "wall_s": wall_s, "load_s": load_s}},
        "usage": [{"model": model, "condition": "original", "input_tokens": tokens_in, "output_tokens": tokens_out}]}))


def test_local_model_time_from_its_measured_throughput(tmp_path):
    """A llama.cpp model measured at (9,000 + 1,000) tokens x 1/2 sent in (6 - 1) s = 1,000 tok/s: the plan's
    hours are its planned tokens over that rate (hand-computed), not requests x latency."""
    REGISTRY["models"].append({"name": "loc", "backend": "llamacpp", "model_id": "q", "gguf_file": "q.gguf", "gguf_package": "q==1",
                               "api_key_env": None, "supports_system": True, "context_length": 32768,
                               "price_input_per_m": 0.0, "price_output_per_m": 0.0, "concurrency": 1})
    try:
        cfg = make_cfg(tmp_path, models=("loc",))
        _stage03_report(tmp_path, "earlier", "loc", 9000, 1000, 6.0, 1.0, sent=5, requests=10)
        p = plan.build_plan(cfg).set_index("condition")
        tokens = p.loc["original", "input_tokens"] + p.loc["original", "output_tokens_expected"]
        assert p.loc["original", "wall_hours"] == pytest.approx(tokens / 1000 / 3600, rel=1e-3)
        assert "1,000 tok/s" in p.loc["original", "binding_limit"] and "earlier" in p.loc["original", "binding_limit"]
        # a llama.cpp generator answers the first inference.generator_reports reports only (stage 03's subset)
        cfg.params["inference"]["generator_reports"] = 3
        assert (plan.build_plan(cfg)["requests"] == 3).all()
        cfg.params["inference"]["generator_reports"] = None
        # without a measurement: the latency bound, said as such
        (tmp_path / "data" / "processed" / "earlier" / "inference_report.json").unlink()
        p = plan.build_plan(cfg).set_index("condition")
        assert p.loc["original", "binding_limit"] .startswith("concurrency x latency; size unknown")
    finally:
        REGISTRY["models"].pop()


def test_make_plan_fails_in_one_line_naming_the_problem(tmp_path, capsys):
    """A params file with a bad key: one line on stderr (as the runner prints), exit 1, no traceback."""
    from finlib.pipeline import plan as plan_module

    bad = tmp_path / "bad.yaml"
    bad.write_text("extends: default.yaml\nscoring:\n  bootstrap_repz: 5\n")
    assert plan_module.main(["--run", "bad", "--params", str(bad)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("[bad] plan FAILED: ") and "bootstrap_repz" in err and "Traceback" not in err
