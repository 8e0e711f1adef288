"""Stage 05 (DPO): split, triplets and drops, teachers, the length guard, Table 8's layout, params.

The training run itself (needs the embedded model) is in test_dpo_train.py.
"""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from finlib.llm.answers import parse_rating_detail
from finlib.core.config import ConfigError
from finlib.finbias.dpo import evaluate as ev
from finlib.finbias.dpo import train as tr
from finlib.finbias.dpo import triplets as tp
from finlib.finbias.dpo.stage import dpo_params
from finlib.core.vocab import POOLED, SECTOR_MEAN, SECTORS


def reports_fixture() -> pd.DataFrame:
    """Six firms; AAA spans the cut-off (its early report must be dropped)."""
    rows = [("R1", "AAA", "2020-01-10"), ("R2", "BBB", "2020-03-01"), ("R3", "CCC", "2020-06-01"),
            ("R4", "AAA", "2021-02-01"), ("R5", "DDD", "2021-03-01"), ("R6", "EEE", "2019-12-01"),
            ("R7", "FFF", "2020-09-09")]
    df = pd.DataFrame(rows, columns=["report_id", "ticker", "date"])
    df["date"] = pd.to_datetime(df["date"])
    df["sector"] = "Technology"
    df["analyst_rating"] = ["bullish", "bullish", "bearish", "bullish", "neutral", "bullish", None]
    return df


ORIGINAL = "We rate Acme a Buy. Revenue rose 5 percent to $10 mn. We think the outlook is excellent. Margins were 12 percent."
NO_OPINION = "Revenue rose 5 percent to $10 mn. Margins were 12 percent."


def conditions_fixture(reports: pd.DataFrame, skip_no_opinion: tuple[str, ...] = ()) -> pd.DataFrame:
    rows = []
    for rid in reports["report_id"]:
        rows.append({"report_id": rid, "condition": "original", "status": "ok", "text": ORIGINAL})
        skipped = rid in skip_no_opinion
        rows.append({"report_id": rid, "condition": "no_opinion", "status": "skipped" if skipped else "ok",
                     "text": None if skipped else NO_OPINION})
    return pd.DataFrame(rows)


def labels_fixture() -> pd.DataFrame:
    # R2: analyst == label (dropped); R6: no label (excluded by stage 01)
    return pd.DataFrame({"report_id": ["R1", "R2", "R3", "R4", "R5", "R6", "R7"],
                         "label": ["bearish", "bullish", "neutral", "neutral", "bearish", None, "bullish"]})


# --- split ------------------------------------------------------------------------------------

def test_split_is_disjoint_in_firms_and_time_and_counts_drops():
    split = tp.split_reports(reports_fixture(), pd.Timestamp("2021-01-01"))
    df = split.reports.set_index("report_id")["split"]
    assert df.to_dict() == {"R1": "dropped", "R2": "train", "R3": "train", "R4": "test", "R5": "test",
                            "R6": "train", "R7": "train"}
    assert split.dropped == {"test_firm_before_cutoff": 1}
    tp.check_split(split.reports)  # no exception
    train = split.reports[split.reports["split"] == "train"]
    test = split.reports[split.reports["split"] == "test"]
    assert not set(train["ticker"]) & set(test["ticker"])
    assert train["date"].max() < test["date"].min()


def test_check_split_catches_leaks():
    df = reports_fixture().assign(split="train")
    df.loc[df["report_id"] == "R4", "split"] = "test"
    with pytest.raises(AssertionError, match="firms"):
        tp.check_split(df)  # AAA in both
    df = reports_fixture().assign(split="train")
    df.loc[df["report_id"] == "R3", "split"] = "test"   # 2020-06 test, but R4 (2021) is train
    df = df[df["ticker"] != "AAA"]
    df.loc[df["report_id"] == "R5", "split"] = "train"
    with pytest.raises(AssertionError, match="time"):
        tp.check_split(df)


def test_cutoff_from_share_and_explicit():
    dates = reports_fixture()["date"]
    assert tp.resolve_cutoff(dates, "2021-01-01", 0.7) == pd.Timestamp("2021-01-01")
    # 7 dates sorted: share 0.7 -> index round(4.9) = 5 -> the 6th date
    assert tp.resolve_cutoff(dates, None, 0.7) == sorted(dates)[5]
    with pytest.raises(ValueError, match="train_share"):
        tp.resolve_cutoff(dates, None, 1.5)


def test_split_summary_label_balance():
    split = tp.split_reports(reports_fixture(), pd.Timestamp("2021-01-01"))
    summ = tp.split_summary(split.reports.merge(labels_fixture(), on="report_id"))
    train = summ.set_index("split").loc["train"]
    assert train["reports"] == 4 and train["without_label"] == 1
    assert train["share_bullish"] == pytest.approx(2 / 3, abs=1e-3)  # R2 and R7 of the three labelled


# --- template teacher and triplets ------------------------------------------------------------

def test_template_teacher_answers_parse_to_the_intended_rating_and_say_template():
    calls = [tp.TeacherCall("a|independent", "independent", NO_OPINION, "bearish"),
             tp.TeacherCall("a|herded", "herded", ORIGINAL, "bullish", opinions="We think the outlook is excellent.")]
    out = tp.template_teacher(calls)
    assert list(out["status"]) == ["ok", "ok"]
    for (_, row), call in zip(out.iterrows(), calls):
        assert tp.TEMPLATE_TEACHER in row["raw_text"]
        assert json.loads(row["raw_text"])["answer"] == call.rating
        assert row["raw_text"].startswith('{"answer": "')  # the label-scoring prefix
        rating, _ = parse_rating_detail(row["raw_text"], call.text)
        assert rating.value == call.rating
    assert "Revenue rose" in out["raw_text"][0] and "excellent" in out["raw_text"][1]
    assert out.equals(tp.template_teacher(calls))  # deterministic


def test_opinion_sentences_are_those_removed():
    assert tp.opinion_sentences(ORIGINAL, NO_OPINION) == ["We rate Acme a Buy.", "We think the outlook is excellent."]


def test_triplets_labels_and_drop_counts_per_split():
    reports = reports_fixture()
    split = tp.split_reports(reports, pd.Timestamp("2021-01-01"))
    cond = conditions_fixture(reports, skip_no_opinion=("R5",))
    trip = tp.build_triplets(split, labels_fixture(), cond, tp.template_teacher, tp.TEMPLATE_TEACHER)
    t = trip.triplets.set_index("report_id")
    # R3 (train, bearish analyst, neutral label) is the one clean train pair; R4 the clean test pair
    assert sorted(t.index) == ["R3", "R4"]
    assert t.loc["R3", "split"] == "train" and t.loc["R4", "split"] == "test"
    assert json.loads(t.loc["R3", "chosen"])["answer"] == "neutral"       # the return-based label
    assert json.loads(t.loc["R3", "rejected"])["answer"] == "bearish"     # the analyst's rating
    assert (trip.triplets["teacher"] == tp.TEMPLATE_TEACHER).all()
    drops = {(r.split, r.reason): r.n for r in trip.drops.itertuples()}
    assert drops == {("train", "analyst_rating_equals_label"): 1, ("train", "no_return_label"): 1,
                     ("train", "no_analyst_rating"): 1, ("test", "no_opinion_text_unavailable"): 1}


def fake_teacher(answers: dict[str, str | None]):
    """A teacher that returns fixed raw texts per call kind (None = an error row)."""
    def teach(calls):
        rows = []
        for c in calls:
            text = answers[c.kind]
            rows.append({"id": c.id, "status": "ok" if text is not None else "error", "raw_text": text,
                         "error": None if text is not None else "boom"})
        return pd.DataFrame(rows)
    return teach


@pytest.mark.parametrize("answers, reason", [
    ({"herded": "I am not sure.", "independent": '{"answer": "neutral"}'}, "teacher_unparsed_rejected"),
    ({"herded": '{"answer": "bearish"}', "independent": '{"answer": "bullish"}'}, "teacher_wrong_rating_chosen"),
    ({"herded": '{"answer": "bearish"}', "independent": None}, "teacher_error_chosen"),
])
def test_teacher_answers_that_miss_the_intended_rating_are_dropped_and_counted(answers, reason):
    reports = reports_fixture()[lambda d: d["report_id"] == "R3"]
    split = tp.split_reports(reports, pd.Timestamp("2021-01-01"))
    trip = tp.build_triplets(split, labels_fixture(), conditions_fixture(reports), fake_teacher(answers), "fake")
    assert trip.triplets.empty
    assert trip.drops.to_dict(orient="records") == [{"split": "train", "reason": reason, "n": 1}]


def test_model_teacher_goes_through_the_engine_and_store(tmp_path, monkeypatch):
    """A registry model as teacher (stub server answers "bullish" to everything): the herded side
    of a bullish analyst parses, the independent side for a bearish label is counted as wrong."""
    from finlib.llm.store import ResponseStore
    from finlib.llm.stub_server import ThreadedStub, stub_spec

    monkeypatch.setenv("STUB_TEST_KEY", "dummy")
    reports = reports_fixture()[lambda d: d["report_id"].isin(["R1", "R7"])].assign(date=pd.Timestamp("2020-01-01"))
    reports.loc[reports["report_id"] == "R7", "analyst_rating"] = "bearish"
    split = tp.split_reports(reports.assign(ticker=["X", "Y"]), pd.Timestamp("2021-01-01"))
    with ThreadedStub() as stub, ResponseStore(tmp_path / "r.sqlite") as store:
        spec = stub_spec(stub.base_url)
        teach = tp.model_teacher(spec, store, max_new_tokens=32, progress=False)
        trip = tp.build_triplets(split, labels_fixture(), conditions_fixture(reports), teach, "stub (teacher)")
        again = teach(tp.teacher_calls(tp.candidates(split, labels_fixture(), conditions_fixture(reports))[0]))
    assert trip.triplets.empty
    drops = {r.reason: r.n for r in trip.drops.itertuples()}
    # R1: analyst bullish (stub agrees), label bearish (stub says bullish) -> chosen wrong;
    # R7: analyst bearish, stub says bullish -> rejected wrong
    assert drops == {"teacher_wrong_rating_chosen": 1, "teacher_wrong_rating_rejected": 1}
    assert again["status"].eq("ok").all()
    assert stub.stub.answers and sum(stub.stub.answers.values()) == 4  # the rerun came from the store


# --- length guard -----------------------------------------------------------------------------

class CharTokenizer:
    """One token per character of the rendered chat (enough to test the guard's arithmetic)."""

    def apply_chat_template(self, messages, add_generation_prompt=False, tokenize=True, return_dict=False):
        text = "".join(f"<{m['role']}>{m['content']}" for m in messages) + ("<assistant>" if add_generation_prompt else "")
        return list(text)


def test_max_length_is_computed_from_the_data_and_guarded():
    trip = pd.DataFrame({"report_id": ["a", "b"], "prompt_text": ["x" * 10, "y" * 50],
                         "chosen": ["c" * 5, "c"], "rejected": ["r", "r" * 20]})
    recs = tr.to_records(trip, lambda text: [{"role": "user", "content": text}])
    lengths = tr.sequence_lengths(recs, CharTokenizer())
    assert lengths.loc[1, "rejected"] == len("<user>") + 50 + len("<assistant>") + 20
    need = tr.required_max_length(lengths, cap=1000)
    assert need == lengths[["chosen", "rejected"]].to_numpy().max() + 1
    with pytest.raises(tr.SequenceTooLongError, match="'b'.*max_length_cap=50"):
        tr.required_max_length(lengths, cap=50)
    with pytest.raises(ValueError, match="no training records"):
        tr.required_max_length(lengths.iloc[:0], cap=50)


def test_adapter_hash_names_the_content(tmp_path):
    for name in tr.ADAPTER_FILES:
        (tmp_path / name).write_bytes(b"1")
    h1 = tr.adapter_hash(tmp_path)
    (tmp_path / tr.ADAPTER_FILES[1]).write_bytes(b"2")
    assert tr.adapter_hash(tmp_path) != h1
    with pytest.raises(FileNotFoundError):
        tr.adapter_hash(tmp_path / "missing")


def test_engine_key_includes_the_adapter_hash():
    from finlib.llm.engine import engine_key
    from finlib.llm.registry import load_registry
    from finlib.core.config import repo_root

    spec = load_registry(repo_root() / "params" / "models.yaml")["smollm2-135m"]
    base = engine_key(spec, "float32")
    assert "adapter_sha256" not in base
    assert engine_key(spec, "float32", adapter_sha256="abc") == {**base, "adapter_sha256": "abc"}


def test_step_log_keeps_training_steps_only():
    hist = [{"loss": 0.69, "rewards/margins": 0.0, "step": 1}, {"loss": 0.5, "rewards/margins": 0.3, "step": 2},
            {"train_runtime": 3.0, "step": 2}]
    log = tr.step_log(hist)
    assert list(log["step"]) == [1, 2] and list(log.columns) == tr.LOG_COLUMNS


# --- Table 8 ----------------------------------------------------------------------------------

def metrics_fixture() -> pd.DataFrame:
    rows = []
    for model, acc in (("m", 0.30), ("m + DPO", 0.40)):
        for sector in (*SECTORS, POOLED, SECTOR_MEAN):
            rows.append({"model": model, "condition": "original", "sector": sector, "metric": "accuracy",
                         "value": acc, "ci_low": acc - 0.1, "ci_high": acc + 0.1, "n": 10, "parse_rate": 1.0})
    return pd.DataFrame(rows)


def test_table8_layout_ours_and_the_papers_rows():
    tests = pd.DataFrame([{"outcome": "accuracy", "sector": POOLED, "pvalue": 0.25}])
    t8 = ev.table8(metrics_fixture(), tests, "m", "m + DPO")
    assert list(t8.columns) == ["model", "variant", "source", *SECTORS, POOLED, SECTOR_MEAN, "Average (printed)",
                                "N", "McNemar p (pooled)"]
    ours = t8[t8["source"] == ev.OURS].set_index("variant")
    assert ours.loc["base", "Technology"] == pytest.approx(30.0)
    assert ours.loc["DPO", POOLED] == pytest.approx(40.0)
    assert ours.loc["delta DPO - base", "Energy"] == pytest.approx(10.0)
    assert ours.loc["delta DPO - base", "McNemar p (pooled)"] == 0.25
    paper = t8[t8["source"] == ev.PAPER]
    assert sorted(paper["model"].unique()) == ["Meta-Llama-3-8B-it", "Qwen2-7B-it", "Qwen3-8B"]
    q = paper[paper["model"] == "Qwen3-8B"].set_index("variant")
    assert q.loc["DPO (Table 8)", "Average (printed)"] == pytest.approx(38.23)           # published Table 8
    assert q.loc["base (Table 6, with rating)", "Healthcare"] == pytest.approx(31.7)       # published Table 6
    assert q.loc["delta DPO - base", "Healthcare"] == pytest.approx(38.90 - 31.7)


def test_paired_base_vs_dpo_mcnemar_matches_statsmodels():
    from statsmodels.stats.contingency_tables import mcnemar

    rng = np.random.default_rng(0)
    n = 40
    label = rng.choice(["bullish", "neutral", "bearish"], n)
    base_ans = np.where(rng.random(n) < 0.3, label, "bullish")
    dpo_ans = np.where(rng.random(n) < 0.6, label, "bullish")
    common = {"item_id": [f"i{k}" for k in range(n)], "label": label, "reference_rating": "bullish",
              "sector": "Technology", "ticker": [f"T{k % 13}" for k in range(n)], "parsed": True}
    rows = pd.concat([pd.DataFrame({**common, "model": "m", "answer": base_ans}),
                      pd.DataFrame({**common, "model": "m + DPO", "answer": dpo_ans})], ignore_index=True)
    tests = ev.paired_base_vs_dpo(rows, "m", "m + DPO", reps=50, seed=1, ci=0.95)
    pooled = tests[(tests["outcome"] == "accuracy") & (tests["sector"] == POOLED)].iloc[0]
    a, b = dpo_ans == label, base_ans == label
    table = [[int((a & b).sum()), int((a & ~b).sum())], [int((~a & b).sum()), int((~a & ~b).sum())]]
    assert pooled["pvalue"] == pytest.approx(mcnemar(table, exact=True).pvalue)
    assert pooled["rate_dpo"] == pytest.approx(a.mean()) and pooled["n_pairs"] == n
    assert pooled["diff"] == pytest.approx(a.mean() - b.mean())


# --- params -----------------------------------------------------------------------------------

def test_dpo_params_refuse_misspelled_and_missing_keys(tmp_run):
    dp = dpo_params(tmp_run)
    assert dp["teacher"] == "template"
    tmp_run.params["dpo"]["max_step"] = 3
    with pytest.raises(ConfigError, match="max_step"):
        dpo_params(tmp_run)
    del tmp_run.params["dpo"]["max_step"]
    tmp_run.params["dpo"]["lora"] = {"r": 8}
    with pytest.raises(ConfigError, match="lora"):
        dpo_params(tmp_run)


def test_caveat_names_template_teacher_and_skips():
    from finlib.finbias.dpo.stage import DPOResult, caveat

    res = DPOResult(*[pd.DataFrame()] * 8, report={"teacher": "template", "skipped": "no training triplets"})
    text = caveat(SimpleNamespace(is_synthetic=True), res)
    assert "Template teacher" in text and "skipped" in text and "Synthetic" in text


def test_stage_without_no_opinion_texts_is_skipped_with_the_drop_counts(tmp_run):
    """A fresh clone without the MPQA lexicon has no no_opinion texts: stage 05 says so and trains
    nothing (no invented pairs), so `make test` still passes there."""
    from finlib.core.artifacts import write_frame
    from finlib.finbias.dpo.stage import run_stage

    reports = reports_fixture().assign(text=ORIGINAL)
    write_frame(tmp_run, "reports", reports)
    write_frame(tmp_run, "labels", labels_fixture())
    write_frame(tmp_run, "conditions", conditions_fixture(reports, skip_no_opinion=tuple(reports["report_id"])))
    res = run_stage(tmp_run)
    assert "no training triplets" in res.report["skipped"]
    assert "no_opinion_text_unavailable" in res.report["skipped"]
    assert res.table8.empty and res.train_log.empty
    assert res.tests[res.tests["n_pairs"] > 0].empty  # what notebook 05 displays: columns present, no rows
    assert not (tmp_run.run_dir / "dpo").exists()


def test_open_api_records_are_evaluated_locally_from_their_weights():
    from finlib.core.config import repo_root
    from finlib.finbias.dpo.stage import as_local
    from finlib.llm.registry import load_registry

    reg = load_registry(repo_root() / "params" / "models.yaml")
    q = as_local(reg["qwen3-8b"])
    assert q.backend == "local" and q.hf_path == reg["qwen3-8b"].model_id and q.name == "qwen3-8b"
    assert as_local(reg["smollm2-135m"]) is reg["smollm2-135m"]
