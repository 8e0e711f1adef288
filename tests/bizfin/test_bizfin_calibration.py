"""The judge-calibration study (Table 4): Spearman and its bootstrap against scipy on fixtures,
the rule-scored reference set, the correlation table's counting of invalid verdicts, Table 4's
layout, and the whole study end to end with a scripted fake judge behind the real engine."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from finlib.bizfin.iterajudge import calibration as C
from finlib.bizfin.iterajudge.records import calibration_tasks
from finlib.bizfin.tasks import judge_rubric
from finlib.llm import engine
from finlib.llm.store import ResponseStore, Result
from finlib.rehearsal.stub_server import stub_spec

FIXTURES = [
    ([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]),
    ([100, 80, 60, 30, 0], [90, 90, 40, 40, 10]),          # ties on both sides
    ([0.1, 0.4, 0.2, 0.9, 0.5, 0.3], [3, 1, 2, 6, 5, 4]),
    ([1, 2, 3, 4], [4, 3, 2, 1]),
]


@pytest.mark.parametrize("x, y", FIXTURES)
def test_spearman_matches_scipy(x, y):
    assert C.spearman_matrix(np.array(x), np.array(y))[0] == pytest.approx(stats.spearmanr(x, y).statistic)


def test_spearman_rows_match_scipy_and_constant_rows_are_nan():
    rng = np.random.default_rng(1)
    x, y = rng.integers(0, 5, size=(50, 7)), rng.integers(0, 5, size=(50, 7))
    x[0] = 3  # constant row: no rank correlation
    got = C.spearman_matrix(x, y)
    assert np.isnan(got[0])
    for i in range(1, 50):
        want = stats.spearmanr(x[i], y[i]).statistic
        assert (np.isnan(want) and np.isnan(got[i])) or got[i] == pytest.approx(want)


def test_bootstrap_ci_matches_a_plain_loop_with_scipy():
    x, y = [100, 80, 60, 30, 0, 50, 70], [70, 80, 40, 20, 30, 50, 90]
    out = C.spearman_ci(x, y, reps=300, ci=0.9, seed=7)
    idx = np.random.default_rng(7).integers(0, len(x), size=(300, len(x)))
    boots = [stats.spearmanr(np.array(x)[i], np.array(y)[i]).statistic for i in idx]
    boots = np.array([b for b in boots if np.isfinite(b)])
    assert out["boot_used"] == len(boots)
    assert out["ci_low"] == pytest.approx(np.quantile(boots, 0.05))
    assert out["ci_high"] == pytest.approx(np.quantile(boots, 0.95))
    assert out["ci_low"] <= out["spearman"] <= out["ci_high"]


def test_too_few_or_constant_scores_give_no_correlation():
    assert np.isnan(C.spearman_ci([1, 2], [1, 2])["spearman"])
    assert np.isnan(C.spearman_ci([50, 50, 50], [1, 2, 3])["spearman"])


def test_shipped_reference_sets_are_rule_scored_and_span_the_scale():
    ref = C.load_reference_sets(["FDD", "FTU"])
    assert set(ref["task"]) == {"FDD", "FTU"}
    for _, r in ref.iterrows():
        assert r["reference_score"] == C.rule_score(r["task"], r["errors"])
    for _, g in ref.groupby("question_id"):
        # the rubric's own levels span the scale (FDD has three: 100 / 60 / 0)
        assert g["reference_score"].nunique() >= 3 and g["reference_score"].max() == 100
        assert g["reference_score"].min() <= 20
    one = C.load_reference_sets(["FDD"], questions=1, answers=3)
    assert list(one["reference_score"]) == [100, 60, 0]


def test_reference_set_errors_name_file_line_and_field():
    good = {"id": "a", "task": "FDD", "question_id": "q", "question": "q?", "answer": "a", "errors": {"number": 1},
            "reference_score": 60}
    text = json.dumps(good) + "\n" + json.dumps({**good, "id": "b", "reference_score": 90})
    with pytest.raises(C.CalibrationDataError, match=r"x.jsonl, line 2, field 'reference_score': 90 but the rule"):
        C.read_reference_set("x.jsonl", text)
    with pytest.raises(C.CalibrationDataError, match="line 1, field 'errors'"):
        C.read_reference_set("x.jsonl", json.dumps({**good, "errors": {"typo": 1}}))
    with pytest.raises(C.CalibrationDataError, match="line 1, field 'answer': missing"):
        C.read_reference_set("x.jsonl", json.dumps({k: v for k, v in good.items() if k != "answer"}))
    with pytest.raises(C.CalibrationDataError, match="duplicate"):
        C.read_reference_set("x.jsonl", json.dumps(good) + "\n" + json.dumps(good))


def test_dimension_order_is_the_authors_or_reversed():
    # the authors' FDD revision checks the numbers (prompt_1) before the trend (prompt_2)
    assert C.ordered_dimensions("FDD") == ("数据一致性", "趋势准确性")
    assert C.ordered_dimensions("FTU") == judge_rubric("FTU").names() == ("工具选择", "参数准确性", "方案有效性")
    assert C.ordered_dimensions("FTU", "reversed") == tuple(reversed(judge_rubric("FTU").names()))
    with pytest.raises(ValueError, match="dimension_order"):
        C.ordered_dimensions("FTU", "random")


def test_correlation_table_counts_invalid_and_scores_only_valid():
    scores = pd.DataFrame({
        "judge": "j", "method": "vanilla", "task": "FDD",
        "score": [90, 70, None, 20, 10], "status": ["ok", "ok", "invalid", "ok", "ok"],
        "reference_score": [100, 80, 60, 30, 0]})
    [row] = C.correlation_table(scores, reps=50).to_dict(orient="records")
    assert row["n_items"] == 5 and row["n_invalid"] == 1 and row["n"] == 4
    assert row["spearman"] == pytest.approx(1.0)


def test_table4_layout_beside_the_paper():
    corr = pd.DataFrame([
        {"judge": "j1", "method": m, "task": t, "n": 5, "spearman": 0.5, "ci_low": 0.1, "ci_high": 0.9}
        for m in C.METHOD_LABELS for t in calibration_tasks()])
    table = C.table4(corr)
    assert list(table.columns) == ["source", "Methods", "FDD", "FTU"]
    assert list(table["Methods"][:2]) == ["LLM as a judge (j1)", "Ours (j1)"]
    assert table["FDD"].iloc[0] == "0.5000 [0.10, 0.90] (n=5)"
    paper = table[table["source"].str.startswith("paper")]
    assert len(paper) == 8
    assert paper.set_index("Methods").loc["Ours (GPT-4o)", "FDD"] == "0.5684"


class RankingJudge:
    """A fake judge that reads the answer under judgement and scores it by the reference set's own
    hidden quality (how many characters differ from the best answer): IteraJudge's contrastive
    call sees y and y_K, the vanilla call only y."""

    def __init__(self, scores: dict[str, int]):
        self.scores, self.sent = scores, []

    def __call__(self, spec, pending, store, **kw):
        results = []
        for req in pending:
            text = req.messages[-1]["content"]
            self.sent.append(text)
            if "修订者" in text:
                reply = text.split("【回答】\n", 1)[1].split("\n\n不要解释", 1)[0]
            else:
                answer = text.split("【回答】\n", 1)[1].split("\n\n", 1)[0]
                reply = json.dumps({"score": self.scores.get(answer, 50), "reason": "fake"})
            results.append(Result.for_request(req, status="ok", raw_text=reply, truncated_output=False))
        store.put_many(results)


def test_end_to_end_with_a_scripted_judge(tmp_path, monkeypatch):
    ref = C.load_reference_sets(["FDD", "FTU"], questions=1)
    judge = RankingJudge(dict(zip(ref["answer"], ref["reference_score"])))
    monkeypatch.setattr(engine, "send_pending", judge)
    specs = [stub_spec(), stub_spec(name="stub2", model_id="stub2-model")]
    with ResponseStore(tmp_path / "s.sqlite") as store:
        scores = C.judge_reference_set(ref, specs, store, progress=False)
    assert len(scores) == len(ref) * 2 * 2 and (scores["status"] == "ok").all()
    corr = C.correlation_table(scores, reps=100)
    assert len(corr) == 2 * 2 * 2 and np.allclose(corr["spearman"], 1.0)
    table = C.table4(corr)
    assert table["Methods"].tolist()[:4] == ["LLM as a judge (stub)", "Ours (stub)", "LLM as a judge (stub2)",
                                             "Ours (stub2)"]
    n_refine = sum(len(judge_rubric(t).names()) for t in ref["task"])
    assert len(judge.sent) == 2 * (len(ref) + n_refine + len(ref))


def test_stage08_end_to_end_on_the_smoke_params(tmp_run, monkeypatch):
    """Stage 08 with a scripted model: stage 07's FDD answer through IteraJudge, the reference set
    through both judges, every artifact, Table 4 and the paper-vs-ours comparison written."""
    from finlib.bizfin.benchmark.stage import bizfin_params, load_items
    from finlib.bizfin.iterajudge import stage as judge_stage
    from finlib.core.artifacts import read_frame, write_frame

    cfg = tmp_run
    item = load_items(cfg, bizfin_params(cfg))[0]["FDD"][0]
    write_frame(cfg, "bizfin_items", pd.DataFrame([
        {"model": "m", "task": "FDD", "kind": "judge", "item_id": item.id, "status": "ok", "raw_text": "示例股份上涨。"},
        {"model": "m", "task": "FQA", "kind": "judge", "item_id": "x", "status": "ok", "raw_text": "not in params"}]))
    ref = C.load_reference_sets(["FDD"], questions=1, answers=3)
    judge = RankingJudge(dict(zip(ref["answer"], ref["reference_score"])))
    monkeypatch.setattr(engine, "send_pending", judge)
    run = judge_stage.run(cfg)
    [traj] = run.trajectories
    assert traj.input.id == f"m|{item.id}" and len(traj.steps) == len(judge_rubric("FDD").names())
    assert traj.result.status == "ok"
    assert len(read_frame(cfg, "iterajudge_trajectories")) == 1 + len(traj.steps)
    assert len(read_frame(cfg, "judge_calibration_scores")) == 3 * 2
    assert np.allclose(read_frame(cfg, "judge_calibration")["spearman"], 1.0)
    assert (cfg.tables_dir / "bizfin_table4_judge.md").is_file()
    cmp_caption = (cfg.tables_dir / "paper_vs_ours_bizfin_table4.csv").read_text(encoding="utf-8").splitlines()[0]
    assert "expert scores" in cmp_caption and "synthetic market" not in cmp_caption
    assert "synthetic market" not in (cfg.tables_dir / "bizfin_table4_judge.md").read_text(encoding="utf-8")
    assert run.report["plumbing_models"] == ["qwen2.5-coder-0.5b"]
    assert "NOT the paper's expert scores" in judge_stage.summary(cfg, run)
    assert list(judge_stage.calibration_view(run.scores)["reference_score"]) == [100, 60, 0]
    assert run.report["degenerate"]          # 3 answers: every interval flagged, never shown as precise
    assert "paired" in (cfg.tables_dir / "bizfin_table4_judge.md").read_text(encoding="utf-8")
    n_sent = len(judge.sent)
    judge_stage.run(cfg)
    assert len(judge.sent) == n_sent  # a rerun is answered from the store


def test_stage08_params_are_checked(tmp_run):
    from finlib.bizfin.iterajudge import stage as judge_stage
    from finlib.core.config import ConfigError

    p = tmp_run.params["bizfin"]["iterajudge"]
    p["calibration_tasks"] = ["FQA"]
    with pytest.raises(ConfigError, match="no reference set"):
        judge_stage.iterajudge_params(tmp_run)
    p["calibration_tasks"] = ["FDD"]
    p["judge_temp"] = 0.0
    with pytest.raises(ConfigError, match="unknown key"):
        judge_stage.iterajudge_params(tmp_run)


def test_paired_difference_matches_a_plain_loop_with_scipy():
    ref = np.array([100, 90, 80, 70, 60, 50, 30, 0, 40, 20])
    van = np.array([90, 90, 40, 80, 40, 60, 10, 20, 50, 30])
    ite = np.array([95, 85, 75, 70, 55, 40, 35, 5, 45, 10])
    out = C.paired_difference(ref, van, ite, reps=400, ci=0.9, seed=3)
    want = stats.spearmanr(ite, ref).statistic - stats.spearmanr(van, ref).statistic
    assert out["difference"] == pytest.approx(want)
    idx = np.random.default_rng(3).integers(0, len(ref), size=(400, len(ref)))
    boots = np.array([stats.spearmanr(ite[i], ref[i]).statistic - stats.spearmanr(van[i], ref[i]).statistic
                      for i in idx])
    boots = boots[np.isfinite(boots)]
    assert out["boot_used"] == len(boots)
    assert (out["ci_low"], out["ci_high"]) == pytest.approx(tuple(np.quantile(boots, [0.05, 0.95])))


def test_degenerate_intervals_are_flagged():
    assert C.degenerate(49, 1000, 1000, 0.1, 0.6) == ""
    assert "only 3 answers" in C.degenerate(3, 174, 1000, 1.0, 1.0)
    assert "174/1000 resamples" in C.degenerate(30, 174, 1000, 0.2, 0.9)
    assert "zero-width" in C.degenerate(30, 1000, 1000, 1.0, 1.0)
    # a perfect judge on 3 answers: "1.0 [1.00, 1.00]" must not look precise
    scores = pd.DataFrame({"judge": "j", "method": "vanilla", "task": "FDD", "id": ["a", "b", "c"],
                           "score": [90, 50, 10], "status": "ok", "reference_score": [100, 60, 0]})
    [row] = C.correlation_table(scores, reps=1000).to_dict(orient="records")
    assert row["spearman"] == 1.0 and row["warning"].startswith("degenerate")


def test_difference_table_pairs_answers_both_methods_scored():
    rows = []
    for i, (r, v, it) in enumerate(zip([100, 80, 60, 40, 20, 0], [50, 70, 60, 20, 40, 10], [95, 75, 65, 35, 25, 5])):
        rows.append({"judge": "j", "task": "FDD", "id": f"a{i}", "method": "vanilla", "score": v,
                     "status": "ok", "reference_score": r})
        rows.append({"judge": "j", "task": "FDD", "id": f"a{i}", "method": "iterajudge",
                     "score": None if i == 5 else it, "status": "invalid" if i == 5 else "ok", "reference_score": r})
    [d] = C.difference_table(pd.DataFrame(rows), reps=200).to_dict(orient="records")
    assert d["n_answers"] == 6 and d["n_both_scored"] == 5
    ref, van, ite = [100, 80, 60, 40, 20], [50, 70, 60, 20, 40], [95, 75, 65, 35, 25]
    assert d["difference"] == pytest.approx(stats.spearmanr(ite, ref).statistic - stats.spearmanr(van, ref).statistic)
    table = C.table4(C.correlation_table(pd.DataFrame(rows), reps=200), diff=pd.DataFrame([d]))
    assert table["Methods"].iloc[2] == "Ours - LLM as a judge (j), paired"
    assert table["FDD"].iloc[2].startswith("+") and "resamples" in table["FDD"].iloc[2]


def test_reference_sets_have_at_least_40_graded_answers_and_match_their_builder():
    from importlib import resources

    from finlib.bizfin.iterajudge import reference_set

    for task in ("FDD", "FTU"):
        shipped = (resources.files("finlib.bizfin") / "format_samples" / f"calibration_{task}.jsonl").read_text(
            encoding="utf-8")
        assert shipped == reference_set.render(task)   # no hand edits: the file is the builder's output
        ref = C.load_reference_sets([task])
        assert len(ref) >= 40 and ref["answer"].is_unique
        assert ref["reference_score"].nunique() >= (3 if task == "FDD" else 6) and ref["reference_score"].max() == 100
        assert ref["reference_score"].min() <= 30      # the ladder reaches the bottom of the scale


def test_stage08_gate_fails_when_the_judge_calls_fail():
    from finlib.bizfin.benchmark.stage import CallsFailed
    from finlib.bizfin.iterajudge import stage as judge_stage

    def scores(statuses):
        return pd.DataFrame({"judge": "j", "method": "vanilla", "status": statuses,
                             "note": ["judge call failed: HTTP 401" if s == "not_answered" else "" for s in statuses]})

    with pytest.raises(CallsFailed, match=r"stage 08: .*j \(vanilla\): 3/3 judge calls failed \(judge call failed: HTTP 401\)"):
        judge_stage.check_judge_errors(scores(["not_answered"] * 3), [], 0.5)
    judge_stage.check_judge_errors(scores(["ok", "ok", "not_answered"]), [], 0.5)   # 1/3: within the share


# ------------------------------------------------------------------ power: questions, clustering, rubric order
def test_reference_sets_have_at_least_twenty_questions_per_task():
    ref = C.load_reference_sets(list(calibration_tasks()))
    assert (ref.groupby("task")["question_id"].nunique() >= 20).all()


def _perfect_rubric_judge(task: str, errors: dict) -> int:
    """A judge applying the rubric it is given, written from the rubric text, not from RULES: FDD 100/60/0
    (trend wrong -> 0, a number wrong -> 60); FTU tool choice 30 + parameters 20 + effectiveness 50."""
    if task == "FDD":
        return 0 if errors.get("trend") else 60 if errors.get("number") else 100
    lost = {"tool": 30, "param": 20, "coordination": 50}
    return 100 - sum(v for k, v in lost.items() if errors.get(k))


@pytest.mark.parametrize("task", ["FDD", "FTU"])
def test_reference_order_follows_the_rubric_the_judges_get(task):
    """A judge that follows the rubric perfectly reaches Spearman 1 with the reference scores."""
    ref = C.load_reference_sets([task])
    judge = [_perfect_rubric_judge(task, e) for e in ref["errors"]]
    assert C.spearman_ci(judge, ref["reference_score"], reps=0)["spearman"] == pytest.approx(1.0)


def _simulated_paired_coverage(cluster: bool, sims: int, questions: int = 20, seed: int = 0) -> float:
    """Share of `sims` paired intervals covering the true difference 0: both methods score every answer as
    reference + a per-question offset (SD 20, each method its own) + noise (SD 10): same distribution."""
    rng = np.random.default_rng(seed)
    ladder = np.array([100, 85, 70, 55, 40, 25, 10.0])
    ref, groups = np.tile(ladder, questions), np.repeat(np.arange(questions), len(ladder))
    covered = 0
    for s in range(sims):
        van = ref + rng.normal(0, 20, questions)[groups] + rng.normal(0, 10, ref.size)
        ite = ref + rng.normal(0, 20, questions)[groups] + rng.normal(0, 10, ref.size)
        out = C.paired_difference(ref, van, ite, reps=400, ci=0.95, seed=s, groups=groups if cluster else None)
        covered += out["ci_low"] <= 0 <= out["ci_high"]
    return covered / sims


@pytest.mark.slow
def test_question_clustered_interval_keeps_its_nominal_coverage():
    """With per-question judge offsets the question-clustered 95 % paired interval covers the true zero
    at least 93 % of the time; resampling answers (the fault this guards against) does not."""
    assert _simulated_paired_coverage(cluster=True, sims=300) >= 0.93
    assert _simulated_paired_coverage(cluster=False, sims=100) < 0.9


def test_clustered_resamples_keep_whole_questions():
    groups = np.repeat(["q1", "q2", "q3"], [2, 3, 4])
    for idx in C.resample_indices(len(groups), 50, 1, groups):
        drawn = pd.Series(groups[idx]).value_counts()
        sizes = {"q1": 2, "q2": 3, "q3": 4}
        assert all(n % sizes[q] == 0 for q, n in drawn.items())


def test_a_paired_row_is_not_computed_across_rubrics():
    rng = np.random.default_rng(0)
    ref = np.tile([100, 80, 60, 40, 20.0], 4)
    rows = []
    for method in ("vanilla", "iterajudge"):
        for i, r in enumerate(ref):
            rows.append({"judge": "j", "method": method, "task": "FTU", "id": f"a{i}", "question_id": f"q{i // 5}",
                         "status": "ok", "score": r + rng.normal(0, 5), "reference_score": r})
    scores = pd.DataFrame(rows)
    same = C.difference_table(scores, reps=50)
    assert np.isfinite(same["difference"].iat[0])
    mixed = C.difference_table(scores, reps=50, mixed_rubrics={"FTU": "different prompts"})
    assert np.isnan(mixed["difference"].iat[0]) and "not compared" in mixed["warning"].iat[0]
