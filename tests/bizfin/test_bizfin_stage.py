"""Stage 07 end to end on the format samples against the local stub server: every call through the
engine and the store, judge outputs that are not a score recorded as invalid (never 0), Table 3
with the paper's rows, Table 6 with a named counter, a rerun answered from the store."""
from __future__ import annotations

import math

import pandas as pd
import pytest

import yaml

from finlib.bizfin import stage
from finlib.bizfin.tasks import TASK_ORDER
from finlib.core.config import ConfigError, RunConfig
from finlib.llm.stub_server import ThreadedStub
from llm_helpers import api_record, write_registry


@pytest.fixture()
def bizfin_run(tmp_path, repo_root):
    """A run with the repository's own `bizfin:` defaults and only the sections stage 07 reads
    (other stages' sections are theirs to validate)."""
    defaults = yaml.safe_load((repo_root / "params" / "default.yaml").read_text(encoding="utf-8"))
    root = tmp_path / "repo"
    (root / "params").mkdir(parents=True)
    params = {"seed": 7, "scoring": {"bootstrap_reps": 50, "ci": 0.95}, "bizfin": dict(defaults["bizfin"]),
              "inference": {"registry": "params/models.yaml", "store": "data/interim/responses.sqlite",
                            "budget_usd": 0.0, "model_cache": "data/interim/models", "progress": False,
                            "max_error_share": 0.5}}
    cfg = RunConfig(name="bizfin-test", params=params, root=root, params_file=root / "params" / "test.yaml")
    for d in (cfg.processed_dir, cfg.tables_dir, cfg.run_dir):
        d.mkdir(parents=True, exist_ok=True)
    return cfg


def _configure(cfg, base_url: str) -> None:
    rel = write_registry(cfg.root, api_record("stub", base_url, None, price_input_per_m=0.0,
                                              price_output_per_m=0.0))
    cfg.params["inference"]["registry"] = rel
    cfg.params["bizfin"].update({"models": ["stub"], "judge": "stub", "source": "format_sample",
                                 "sample_items_per_task": 2})


def test_stage_on_format_samples_with_stub(bizfin_run):
    cfg = bizfin_run
    with ThreadedStub() as stub:
        _configure(cfg, stub.base_url)
        run = stage.run_stage(cfg)
        n_requests = stub.stub.n_requests
        items = run.items
        assert len(items) == 2 * len(TASK_ORDER) and set(items["task"]) == set(TASK_ORDER)
        assert (items["status"] == "ok").all()
        judged = items[items["kind"] == "judge"]
        # the stub answers {"answer": "bullish"} to the judge too: not a score -> invalid, NaN, never 0
        assert (judged["judge_status"] == "invalid").all() and judged["official"].isna().all()
        acc = items[items["kind"] == "accuracy"]
        assert acc["official"].notna().all() and (acc["official"] == 0).all()
        assert run.report["judge"] == "stub" and run.report["tasks_from_format_samples"] == list(TASK_ORDER)
        assert run.report["judge_status"] == {"invalid": 6}

        tables = stage.make_tables(cfg, run, count_tokens=lambda texts: [len(t) for t in texts],
                                   tokenizer_name="characters")
        t3 = tables["table3"]
        assert {"this run", "paper Table 3"} == set(t3["row"]) and (t3["row"] == "paper Table 3").sum() == 25
        long = tables["table3_long"]
        fqa = long[(long["task"] == "FQA") & (long["rule"] == "official")].iloc[0]
        assert fqa["n_scored"] == 0 and fqa["judge_invalid"] == 2 and math.isnan(fqa["score"])
        avg = long[(long["task"] == "Average") & (long["rule"] == "official")].iloc[0]
        assert avg["score"] == 0.0
        t6 = tables["table6"]
        assert list(t6["task"]) == list(TASK_ORDER) and (t6["count"] == 2).all()
        csv = (cfg.tables_dir / "bizfin_table3.csv").read_text(encoding="utf-8")
        assert csv.startswith("# ") and "vanilla LLM-as-judge stub" in csv and "format sample" in csv
        assert cfg.is_synthetic and "synthetic market" not in csv      # BizFinBench never uses the Fin-Bias market
        assert (cfg.processed_dir / "bizfin_items.parquet").is_file()

        again = stage.run_stage(cfg)        # every answer and verdict from the store: nothing re-sent
        assert stub.stub.n_requests == n_requests
        pd.testing.assert_frame_equal(again.items.drop(columns="cached"), items.drop(columns="cached"))
        assert again.items["cached"].all()


def test_real_selection_shortest_first():
    from finlib.bizfin.data import load_format_samples

    loaded = load_format_samples(["FQA", "FNC"])
    p = {"real_items_per_task": 1, "sample_items_per_task": 1, "item_selection": "shortest"}
    sel = stage.select_items(loaded, p)
    assert all(len(v) == 1 for v in sel.values())
    assert sel["FQA"][0].question == min((i.question for i in loaded["FQA"]), key=len)


def test_params_refuse_unknown_and_bad_values(bizfin_run):
    cfg = bizfin_run
    cfg.params["bizfin"]["judge_method"] = "iterajudge"
    with pytest.raises(ConfigError, match="stage 08|'vanilla'"):
        stage.bizfin_params(cfg)
    cfg.params["bizfin"]["judge_method"] = "vanilla"
    cfg.params["bizfin"]["real_items"] = 3
    with pytest.raises(ConfigError, match="real_items"):
        stage.bizfin_params(cfg)


def test_plan_counts_requests_and_worst_case_cost(bizfin_run, repo_root):
    from finlib.bizfin.plan import build_plan
    from finlib.llm.registry import load_registry

    cfg = bizfin_run
    cfg.params["inference"]["registry"] = str(repo_root / "params" / "models.yaml")
    cfg.params["bizfin"].update({"models": ["gpt-4o"], "judge": "gpt-4o", "real_items_per_task": None,
                                 "max_new_tokens": 1024, "judge_max_new_tokens": 256})
    plan = build_plan(cfg).set_index("role")
    assert plan.loc["answers", "requests"] == 6783          # Table 2's counts (FNER 435)
    assert plan.loc["judge", "requests"] == 641 + 990 + 1461
    spec = load_registry(repo_root / "params" / "models.yaml")["gpt-4o"]
    a = plan.loc["answers"]
    assert a["usd_worst_case"] == pytest.approx(spec.cost(a["input_tokens"], 6783 * 1024), rel=1e-6)


def test_average_is_plain_mean_of_tasks_and_skips_unscored():
    from finlib.bizfin.results import task_scores

    rows = []
    for _ in range(4):
        rows.append({"model": "m", "task": "FNC", "source": "benchmark", "parsed": True, "judge_status": None,
                     "official": 1.0, "ours": 1.0, "status": "ok"})
    rows.append({"model": "m", "task": "FTR", "source": "benchmark", "parsed": True, "judge_status": None,
                 "official": 0.0, "ours": 1.0, "status": "ok"})
    rows.append({"model": "m", "task": "FTR", "source": "benchmark", "parsed": False, "judge_status": None,
                 "official": float("nan"), "ours": float("nan"), "status": "error"})   # not answered
    rows.append({"model": "m", "task": "FQA", "source": "benchmark", "parsed": False, "judge_status": "invalid",
                 "official": float("nan"), "ours": float("nan"), "status": "ok"})
    long = task_scores(pd.DataFrame(rows), reps=200, seed=1).set_index(["rule", "task"])
    assert long.loc[("official", "Average"), "score"] == pytest.approx(50.0)   # (100 + 0) / 2, not 4/5 pooled
    assert long.loc[("ours", "Average"), "score"] == pytest.approx(100.0)
    assert long.loc[("official", "FQA"), "judge_invalid"] == 1 and long.loc[("official", "FQA"), "n_scored"] == 0
    ftr = long.loc[("official", "FTR")]
    assert (ftr["n_items"], ftr["not_answered"], ftr["n_scored"], ftr["parse_rate"]) == (2, 1, 1, 1.0)
    lo, hi = long.loc[("official", "Average"), ["ci_low", "ci_high"]]
    assert lo <= 50.0 <= hi


def test_score_model_with_scripted_judge():
    """Judge verdicts ok / invalid / not_answered map to a 0..1 score, NaN + status, NaN + status;
    an answer call that failed is never judged."""
    from finlib.bizfin.data import load_format_samples
    from finlib.bizfin.judge import JudgeResult

    asked = {"FQA": load_format_samples(["FQA"])["FQA"], "FNC": load_format_samples(["FNC"])["FNC"][:1]}
    ids = [it.id for its in asked.values() for it in its]
    answers = pd.DataFrame({"id": ids, "status": ["ok", "ok", "error"], "raw_text": ["答案一", "答案二", None],
                            "error": [None, None, "timeout"], "input_tokens": 1, "output_tokens": 1,
                            "cost_usd": 0.0, "cached": False})
    script = iter([(60.0, "ok"), (None, "invalid")])
    seen = []

    def fake_judge(inputs):
        seen.extend(inputs)
        return [JudgeResult(i.id, *next(script), raw_text="x", note="scripted") for i in inputs]

    rows = pd.DataFrame(stage.score_model("m", asked, answers, fake_judge, (0, 100))).set_index("item_id")
    fqa = [it.id for it in asked["FQA"]]
    assert [i.id for i in seen] == [f"m|{x}" for x in fqa]
    assert rows.loc[fqa[0], "official"] == pytest.approx(0.6) and rows.loc[fqa[0], "judge_status"] == "ok"
    assert math.isnan(rows.loc[fqa[1], "official"]) and rows.loc[fqa[1], "judge_status"] == "invalid"
    fnc = asked["FNC"][0].id
    # a failed answer call is not answered: NaN under both rules (outside N), never a wrong answer
    assert math.isnan(rows.loc[fnc, "official"]) and math.isnan(rows.loc[fnc, "ours"])
    assert not rows.loc[fnc, "parsed"] and "not answered: timeout" in rows.loc[fnc, "note"]


def _failing_answers(asked, status_of):
    ids = [it.id for its in asked.values() for it in its]
    return pd.DataFrame({"id": ids, "status": [status_of(i) for i in range(len(ids))],
                         "raw_text": ['{"answer": 1}' if status_of(i) == "ok" else None for i in range(len(ids))],
                         "error": [None if status_of(i) == "ok" else "HTTP 401: invalid api key" for i in range(len(ids))],
                         "input_tokens": 1, "output_tokens": 1, "cost_usd": 0.0, "cached": False})


def test_error_share_gate_fails_the_stage_with_one_line():
    """A wrong key (every call 401) must fail stage 07, not print a table of zeros; a share of
    failures within inference.max_error_share passes, its items counted as not answered."""
    from finlib.bizfin.data import load_format_samples

    asked = {"FNC": load_format_samples(["FNC"])["FNC"], "FTR": load_format_samples(["FTR"])["FTR"]}
    dead = pd.DataFrame(stage.score_model("m", asked, _failing_answers(asked, lambda i: "error"), None, (0, 100)))
    assert dead["official"].isna().all()
    with pytest.raises(stage.CallsFailed) as err:
        stage.check_error_share(dead, 0.5, "stage 07")
    msg = str(err.value)
    assert "\n" not in msg and "stage 07" in msg and "4/4 answer calls failed" in msg and "401" in msg
    some = pd.DataFrame(stage.score_model("m", asked, _failing_answers(asked, lambda i: "error" if i == 0 else "ok"),
                                          None, (0, 100)))
    stage.check_error_share(some, 0.5, "stage 07")   # 1/4 failed: the stage goes on
    counts = stage.not_answered_counts(some)["m"]
    assert counts["answers"] == 1 and counts["of"] == 4 and "401" in counts["top_error"]


def test_rule_revision_is_pinned_and_named(bizfin_run):
    from finlib.bizfin.scorers import OFFICIAL_RULES_COMMIT

    cfg = bizfin_run
    assert stage.bizfin_params(cfg)["official_rules_commit"] == OFFICIAL_RULES_COMMIT
    cfg.params["bizfin"]["official_rules_commit"] = "d355b5f8aac502e0d5e8085a72f94f758720b9b7"
    with pytest.raises(ConfigError, match="only revision implemented"):
        stage.bizfin_params(cfg)
