"""Stage 07 end to end on the format samples against the local stub server: every call through the
engine and the store, judge outputs that are not a score recorded as invalid (never 0), Table 3
with the paper's rows, Table 6 with a named counter, a rerun answered from the store."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml
from llm_helpers import api_record, write_registry

from finlib.bizfin.benchmark import stage
from finlib.bizfin.scorers import ItemScore
from finlib.bizfin.tasks import TASK_ORDER, TASKS
from finlib.core.config import ConfigError, RunConfig
from finlib.rehearsal.stub_server import ThreadedStub


@pytest.fixture()
def bizfin_run(tmp_path, repo_root):
    """A run with the repository's own `bizfin:` defaults and only the sections stage 07 reads
    (other stages' sections are theirs to validate)."""
    defaults = yaml.safe_load((repo_root / "params" / "default.yaml").read_text(encoding="utf-8"))
    root = tmp_path / "repo"
    (root / "params").mkdir(parents=True)
    params = {"seed": 7, "data": {"source": "synthetic"}, "scoring": {"bootstrap_reps": 50, "ci": 0.95},
              "bizfin": dict(defaults["bizfin"]),
              "figures": dict(defaults["figures"]),  # its figure's width (`figures.width`)
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


def char_count(texts: list[str]) -> list[int]:
    """Table 6's token counter in these tests: characters (no tokenizer download)."""
    return [len(t) for t in texts]


def test_stage_on_format_samples_with_stub(bizfin_run):
    cfg = bizfin_run
    with ThreadedStub() as stub:
        _configure(cfg, stub.base_url)
        run = stage.run(cfg, count_tokens=char_count, tokenizer_name="characters")
        n_requests = stub.stub.n_requests
        items = run.items
        assert len(items) == 2 * len(TASK_ORDER) and set(items["task"]) == set(TASK_ORDER)
        assert (items["status"] == "ok").all()
        judged = items[items["kind"] == "judge"]
        # the stub answers {"answer": "bullish"} to the judge too: not a score -> invalid. Ours: NaN, outside N;
        # official: the published N rule (FDD, FTU: 0 inside N; FQA: outside N)
        assert (judged["judge_status"] == "invalid").all() and judged["ours"].isna().all()
        assert (judged[judged["task"] != "FQA"]["official"] == 0).all()
        assert judged[judged["task"] == "FQA"]["official"].isna().all()
        acc = items[items["kind"] == "accuracy"]
        assert acc["official"].notna().all() and (acc[acc["task"] != "ER"]["official"] == 0).all()
        assert (acc[acc["task"] == "ER"]["official"] == 1).all()   # the published ER rule scores an unreadable reply 1
        assert run.report["judge"] == "stub" and run.report["tasks_from_format_samples"] == list(TASK_ORDER)
        assert run.report["judge_status"] == {"invalid": 6}

        tables = run.tables
        t3 = tables["table3"]
        assert {"this run", "paper Table 3"} == set(t3["row"]) and (t3["row"] == "paper Table 3").sum() == 25
        long = tables["table3_long"]
        fqa = long[(long["task"] == "FQA") & (long["rule"] == "official")].iloc[0]
        assert fqa["n_scored"] == 0 and fqa["judge_invalid"] == 2 and math.isnan(fqa["score"])
        avg = long[(long["task"] == "Average") & (long["rule"] == "official")].iloc[0]
        assert math.isnan(avg["score"]) and avg["missing_tasks"] == "FQA"   # never a mean over eight tasks
        assert run.report["answer_status"] == {"answered": 18, "not_answered": 0}
        t6 = tables["table6"]
        assert list(t6["task"]) == list(TASK_ORDER) and (t6["count"] == 2).all()
        csv = (cfg.tables_dir / "bizfin_table3.csv").read_text(encoding="utf-8")
        assert csv.startswith("# ") and "vanilla LLM-as-judge stub" in csv and "format sample" in csv
        assert "rules of HiThink-Research/BizFinBench commit 6d2a4a6, re-implemented" in csv
        assert "— (no score for FQA)" in csv
        assert cfg.is_synthetic and "synthetic market" not in csv      # BizFinBench never uses the Fin-Bias market
        assert (cfg.processed_dir / "bizfin_items.parquet").is_file()

        again = stage.run(cfg, count_tokens=char_count, tokenizer_name="characters")  # all from the store: nothing re-sent
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
    from finlib.bizfin.benchmark.plan import build_plan
    from finlib.llm.registry import load_registry

    cfg = bizfin_run
    cfg.params["inference"]["registry"] = str(repo_root / "params" / "models.yaml")
    cfg.params["bizfin"].update({"models": ["gpt-4o", "o3"], "judge": "gpt-4o", "real_items_per_task": None,
                                 "max_new_tokens": 1024, "judge_max_new_tokens": 256})
    cfg.params["bizfin"]["iterajudge"].update({"refiner": "gpt-4o", "judges": ["gpt-4o"], "max_items_per_task": None,
                                               "tasks": ["FDD", "FTU"], "calibration_tasks": ["FDD", "FTU"],
                                               "calibration_questions": None, "calibration_answers": None})
    plan = build_plan(cfg)
    answers = plan[plan["role"] == "answers"].set_index("model")
    assert (answers["requests"] == 6783).all()          # Table 2's counts (FNER 435)
    assert plan.set_index("role").loc["judge", "requests"] == 2 * (641 + 990 + 1461)
    registry = load_registry(repo_root / "params" / "models.yaml")
    a = answers.loc["gpt-4o"]
    assert a["usd_worst_case"] == pytest.approx(registry["gpt-4o"].cost(a["input_tokens"], 6783 * 1024), rel=1e-6)
    o3 = answers.loc["o3"]                               # o3's hidden reasoning is billed: priced at its budget
    assert o3["output_tokens_cap"] == 6783 * (1024 + registry["o3"].reasoning_tokens) > 6783 * 1024
    stage08 = plan[plan["role"].str.startswith("stage 08")]
    refine = stage08[stage08["role"] == "stage 08 refine (stage 07 answers)"].iloc[0]
    assert refine["requests"] == 2 * (1461 * 2 + 641 * 3)   # one refinement per rubric dimension per answer
    assert stage08["usd_worst_case"].sum() > 0


def _rows(task: str, official: float, ours: float, n: int = 1, **kw) -> list[dict]:
    return [{"model": "m", "task": task, "source": "benchmark", "parsed": True, "judge_status": None,
             "official": official, "ours": ours, "status": "ok", **kw} for _ in range(n)]


def test_average_is_the_plain_mean_of_all_nine_tasks():
    from finlib.bizfin.benchmark.results import task_scores

    rows = _rows("FNC", 1.0, 1.0, 4) + _rows("FTR", 0.0, 1.0)
    rows += _rows("FTR", float("nan"), float("nan"), parsed=False, status="error")          # not answered
    rows += [r for t in TASK_ORDER if t not in ("FNC", "FTR") for r in _rows(t, 0.5, 1.0)]
    long = task_scores(pd.DataFrame(rows), reps=200, seed=1).set_index(["rule", "task"])
    want = (100 + 0 + 7 * 50) / 9                   # a mean of task means, not of the 12 items pooled
    assert long.loc[("official", "Average"), "score"] == pytest.approx(want)
    assert long.loc[("ours", "Average"), "score"] == pytest.approx(100.0)
    ftr = long.loc[("official", "FTR")]
    assert (ftr["n_items"], ftr["not_answered"], ftr["n_scored"], ftr["parse_rate"]) == (2, 1, 1, 1.0)
    lo, hi = long.loc[("official", "Average"), ["ci_low", "ci_high"]]
    assert lo <= want <= hi


def test_an_item_whose_judge_call_failed_is_counted_not_answered():
    """Every item in exactly one status: answered and judged, judge verdict unreadable (judge_invalid), or not
    answered (its own call or its judge call failed), so the table's counts add up to n_items.

    Drill: a BizFinBench item whose judge call failed is counted not answered."""
    from finlib.bizfin.benchmark.results import task_scores

    rows = _rows("FDD", 1.0, 1.0, 3, judge_status="ok")
    rows += _rows("FDD", float("nan"), float("nan"), judge_status="not_answered")   # the judge call failed
    rows += _rows("FDD", float("nan"), float("nan"), judge_status="invalid")        # unreadable verdict
    rows += _rows("FDD", float("nan"), float("nan"), parsed=False, status="error")   # the answer call failed
    fdd = task_scores(pd.DataFrame(rows), reps=50, seed=1).set_index(["rule", "task"]).loc[("official", "FDD")]
    assert (fdd["n_items"], fdd["not_answered"], fdd["judge_invalid"], fdd["n_scored"]) == (6, 2, 1, 3)


def test_average_is_a_dash_naming_the_missing_tasks():
    """A task without any score (absent, or every verdict unreadable) makes the Average "—", never an
    eight-task mean."""
    from finlib.bizfin.benchmark.results import missing_average_note, task_scores

    rows = [r for t in TASK_ORDER if t not in ("FQA", "SP") for r in _rows(t, 1.0, 1.0)]
    rows += _rows("FQA", float("nan"), float("nan"), parsed=False, judge_status="invalid")
    long = task_scores(pd.DataFrame(rows), reps=50, seed=1)
    avg = long[(long["task"] == "Average") & (long["rule"] == "official")].iloc[0]
    assert math.isnan(avg["score"]) and avg["missing_tasks"] == "FQA, SP"
    assert long.loc[(long["task"] == "FQA") & (long["rule"] == "official"), "judge_invalid"].iat[0] == 1
    assert "— (no score for FQA, SP)" in missing_average_note(long)


def test_score_model_with_scripted_judge():
    """Judge verdicts ok / invalid / not_answered map to a 0..1 score, NaN + status, NaN + status;
    an answer call that failed is never judged."""
    from finlib.bizfin.data import load_format_samples
    from finlib.bizfin.iterajudge.judge import JudgeResult

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


REFERENCE = (Path(__file__).resolve().parents[2] / ".." / "shared" / "reference" / "bizfinbench-eval").resolve()


def test_official_code_dir_must_be_a_checkout(bizfin_run, tmp_path):
    cfg = bizfin_run
    cfg.params["bizfin"]["official_code_dir"] = str(tmp_path)
    with pytest.raises(ConfigError, match="official_code_dir.*not a checkout"):
        stage.bizfin_params(cfg)


def test_official_column_from_the_authors_scripts_when_a_checkout_is_named(bizfin_run, monkeypatch):
    """With official_code_dir, the official scores are the scripts' (a fault planted in the re-implementation
    does not reach them) and the caption names the checkout's commit."""
    if not (REFERENCE / "benchmark_code").is_dir():
        pytest.skip(f"the published evaluation code is absent ({REFERENCE})")
    cfg = bizfin_run
    for t, rec in list(TASKS.items()):   # a fault planted in every re-implemented rule and verdict reader
        planted = ({"scorer": lambda g, t, q="": ItemScore(0.77, 0.77, True, None)} if rec.kind == "accuracy"
                   else {"verdict_reader": lambda v: 0.77})
        monkeypatch.setitem(TASKS, t, dataclasses.replace(rec, **planted))
    with ThreadedStub() as stub:
        _configure(cfg, stub.base_url)
        cfg.params["bizfin"]["official_code_dir"] = str(REFERENCE)
        run = stage.run(cfg, count_tokens=char_count, tokenizer_name="chars")
    acc = run.items[run.items["kind"] == "accuracy"]
    assert not (acc["official"] == 0.77).any() and acc["official"].notna().any()
    er = acc[acc["task"] == "ER"]
    assert (er["official"] == 1.0).all()          # the script scores an unreadable ER answer 1
    judged = run.items[run.items["kind"] == "judge"]    # the stub's verdicts are unreadable: the scripts' N rules
    assert (judged[judged["task"] != "FQA"]["official"] == 0).all() and judged[judged["task"] == "FQA"]["official"].isna().all()
    assert "run verbatim from a checkout at commit 6d2a4a6" in run.report["official_rules"]
    assert "published prompt files" in run.report["rubric_source"]
    tables = run.tables
    assert "commit 6d2a4a6" in (cfg.tables_dir / "bizfin_table3.csv").read_text(encoding="utf-8")
    assert len(tables["table3_long"])


def test_a_dead_endpoint_stops_only_its_own_model(bizfin_run, monkeypatch):
    """Three models, one with a wrong key: the other two are answered and scored, the artifacts are
    written, the stage fails naming the dead model."""
    cfg = bizfin_run
    monkeypatch.setenv("BIZFIN_GOOD_KEY", "sk-good-key-123456")
    monkeypatch.setenv("BIZFIN_BAD_KEY", "sk-wrong-key-654321")
    with ThreadedStub(require_key="sk-good-key-123456") as stub:
        records = [api_record(n, stub.base_url, env, price_input_per_m=0.0, price_output_per_m=0.0,
                              breaker_failures=2)
                   for n, env in (("good-a", "BIZFIN_GOOD_KEY"), ("dead", "BIZFIN_BAD_KEY"),
                                  ("good-b", "BIZFIN_GOOD_KEY"))]
        (cfg.root / "params" / "models3.yaml").write_text(yaml.safe_dump({"models": records}))
        cfg.params["inference"]["registry"] = "params/models3.yaml"
        cfg.params["bizfin"].update({"models": ["good-a", "dead", "good-b"], "judge": "good-a",
                                     "source": "format_sample", "sample_items_per_task": 1})
        with pytest.raises(stage.CallsFailed, match="'dead'") as err:
            stage.run(cfg, count_tokens=char_count, tokenizer_name="chars")
    assert "good-a" not in str(err.value) and "good-b" not in str(err.value)
    items = pd.read_parquet(cfg.processed_dir / "bizfin_items.parquet")
    by_model = items.groupby("model")["status"].agg(lambda s: set(s))
    assert by_model["good-a"] == {"ok"} and by_model["good-b"] == {"ok"} and by_model["dead"] == {"error"}
    import json
    report = json.loads((cfg.processed_dir / "bizfin_report.json").read_text(encoding="utf-8"))
    assert report["answer_status"] == {"answered": 18, "not_answered": 9} and list(report["dead_models"]) == ["dead"]


def test_o_series_requests_carry_no_temperature(repo_root):
    from finlib.llm.engine import ChatItem, chat_requests
    from finlib.llm.openai_backend import request_kwargs
    from finlib.llm.registry import load_registry

    registry = load_registry(repo_root / "params" / "models.yaml")
    for name in ("o3", "o4-mini"):
        spec = registry[name]
        req = chat_requests(spec, [ChatItem("a", [{"role": "user", "content": "q"}], "v")], 1024,
                            {**spec.sampling, "temperature": 0.0})[0]
        kw = request_kwargs(spec, req)
        assert "temperature" not in kw and "top_p" not in kw and kw["max_completion_tokens"] == 1024
        assert stage.max_new_tokens_for(spec, {"max_new_tokens": 1024}) >= 1024 + 8192   # reasoning covered
    gpt4o = registry["gpt-4o"]
    req = chat_requests(gpt4o, [ChatItem("a", [{"role": "user", "content": "q"}], "v")], 64, {**gpt4o.sampling,
                                                                                            "temperature": 0.0})[0]
    assert request_kwargs(gpt4o, req)["temperature"] == 0.0          # the check can fail: others keep theirs


def test_a_reply_cut_inside_think_is_counted_per_model_and_noted():
    from finlib.bizfin.benchmark.results import out_of_budget_note
    from finlib.bizfin.data import load_format_samples

    asked = {"FNC": load_format_samples(["FNC"])["FNC"][:2]}
    ids = [it.id for it in asked["FNC"]]
    answers = pd.DataFrame({"id": ids, "status": ["ok", "ok"], "raw_text": ["<think>先算营收，再", '{"answer": 1}'],
                            "error": [None, None], "input_tokens": 1, "output_tokens": 1, "cost_usd": 0.0,
                            "cached": False})
    items = pd.DataFrame(stage.score_model("qwq", asked, answers, None, (0, 100)), columns=stage.ITEM_COLUMNS)
    assert stage.out_of_budget_counts(items) == {"qwq": 1}
    assert items["note"].str.contains("ran out while reasoning").sum() == 1
    assert "qwq 1" in out_of_budget_note({"out_of_budget_reasoning": stage.out_of_budget_counts(items)})
