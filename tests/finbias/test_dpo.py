"""Stage 05 (DPO): split, triplets and drops, teachers, the length guard, Table 8's layout, params.

The training run itself (needs the embedded model) is in test_dpo_train.py.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from finlib.core.config import ConfigError
from finlib.finbias.answers import parse_rating_detail
from finlib.finbias.dpo import evaluate as ev
from finlib.finbias.dpo import train as tr
from finlib.finbias.dpo import triplets as tp
from finlib.finbias.dpo.stage import dpo_params
from finlib.finbias.vocab import POOLED, SECTOR_MEAN, SECTORS


def reports_fixture() -> pd.DataFrame:
    """Seven firms around a 2021-01-01 cut-off; AAA (the test firm in these tests) spans it."""
    rows = [("R1", "AAA", "2020-01-10"), ("R2", "BBB", "2020-03-01"), ("R3", "CCC", "2020-06-01"),
            ("R4", "AAA", "2021-02-01"), ("R5", "DDD", "2021-03-01"), ("R6", "EEE", "2019-12-01"),
            ("R7", "FFF", "2020-11-20"), ("R8", "GGG", "2020-09-09")]
    df = pd.DataFrame(rows, columns=["report_id", "ticker", "date"])
    df["date"] = pd.to_datetime(df["date"])
    df["sector"] = "Technology"
    df["analyst_rating"] = ["bullish", "bullish", "bearish", "bullish", "neutral", "bullish", None, "bearish"]
    return df


ORIGINAL = "We rate Acme a Buy. Revenue rose 5 percent to $10 mn. We think the outlook is excellent. Margins were 12 percent."
NO_OPINION = "Revenue rose 5 percent to $10 mn. Margins were 12 percent."
SPLIT_PARAMS = {"test_firm_share": 0.2, "split_cutoff": "2021-01-01", "train_share": 0.8, "split_seed": 7,
                "seen_firm_test": False}


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
    return pd.DataFrame({"report_id": ["R1", "R2", "R3", "R4", "R5", "R6", "R7", "R8"],
                         "label": ["bearish", "bullish", "neutral", "neutral", "bearish", None, "bullish", "neutral"]})


@pytest.fixture()
def aaa_is_the_test_firm(monkeypatch):
    """Fix the seeded draw to firm AAA, so the rules can be checked by hand."""
    monkeypatch.setattr(tp, "draw_test_firms", lambda tickers, share, seed: {"AAA"})


def labelled_reports() -> pd.DataFrame:
    return reports_fixture().merge(labels_fixture(), on="report_id")


# --- split ------------------------------------------------------------------------------------

def test_split_rules_by_hand(aaa_is_the_test_firm):
    df = tp.split_reports(labelled_reports(), SPLIT_PARAMS, label_window=60)
    got = df.set_index("report_id")[["split", "drop_reason"]].to_dict(orient="index")
    # R7 (2020-11-20) + 60 trading days (+5 holiday margin: 65 business days) = 2021-02-19 >= cut-off: embargo;
    # R8 (2020-09-09) + 65 business days = 2020-12-09 < cut-off: trains
    assert {k: (v["split"], v["drop_reason"]) for k, v in got.items()} == {
        "R1": ("test", None), "R4": ("test", None),             # every report of the test firm, both periods
        "R2": ("train", None), "R3": ("train", None), "R8": ("train", None),
        "R5": ("dropped", "after_cutoff"), "R6": ("dropped", "no_return_label"),
        "R7": ("dropped", "embargo_label_window")}
    assert df.set_index("report_id")["out_of_time"].to_dict()["R4"] and not df["out_of_time"].iloc[0]
    assert df.attrs["cutoff"] == "2021-01-01" and df.attrs["test_firms"] == ["AAA"]
    tp.check_split(df, pd.Timestamp(df.attrs["cutoff"]))  # no exception


def test_training_firms_later_reports_are_tested_out_of_time(aaa_is_the_test_firm):
    """seen_firm_test: the non-test firms' 2021 reports are test reports, out of time; `seen_firm` only
    where the firm itself has a report in training: R9 (BBB, trained on R2), not R5 (DDD's only report)
    nor R10 (FFF, whose one earlier report R7 was embargoed). The in-time test part is still test firms
    only, and every other rule is unchanged."""
    late = pd.DataFrame({"report_id": ["R9", "R10"], "ticker": ["BBB", "FFF"],
                         "date": pd.to_datetime(["2021-04-01", "2021-05-03"]), "sector": "Technology",
                         "analyst_rating": ["bullish", "neutral"], "label": ["neutral", "bearish"]})
    reports = pd.concat([labelled_reports(), late], ignore_index=True)
    df = tp.split_reports(reports, {**SPLIT_PARAMS, "seen_firm_test": True}, label_window=60)
    got = df.set_index("report_id")
    assert (got.loc["R5", "split"], got.loc["R5", "drop_reason"]) == ("test", None)
    assert got.loc[["R5", "R9", "R10"], "out_of_time"].all()
    assert got["seen_firm"][got["seen_firm"]].index.tolist() == ["R9"]
    assert got.loc["R7", "drop_reason"] == "embargo_label_window" and got.loc["R2", "split"] == "train"
    parts = ev.part_ids(df)
    assert parts[ev.IN_TIME] == {"R1"} and parts[ev.OUT_OF_TIME] == {"R4", "R5", "R9", "R10"}
    assert parts[ev.WHOLE] == {"R1", "R4", "R5", "R9", "R10"}
    tp.check_split(df, pd.Timestamp(df.attrs["cutoff"]))
    bad = df.copy()
    bad.loc[bad["report_id"] == "R2", ["split", "seen_firm", "out_of_time"]] = ["test", True, False]  # before the cut-off
    with pytest.raises(AssertionError, match="seen firms are tested out of time only"):
        tp.check_split(bad, pd.Timestamp(df.attrs["cutoff"]))
    unseen = df.copy()
    unseen.loc[unseen["report_id"] == "R5", "seen_firm"] = True  # DDD has no training report
    with pytest.raises(AssertionError, match="no training report"):
        tp.check_split(unseen, pd.Timestamp(df.attrs["cutoff"]))


def test_generated_reports_come_from_both_parts():
    items = pd.DataFrame({"report_id": ["a", "b", "c", "d", "e"]})
    assert ev.eval_report_ids(items, 2, {"d", "e"}) == {"a", "d"}
    assert ev.eval_report_ids(items, 3, {"d", "e"}) == {"a", "d", "e"}   # alternately: d, a, e, b, c
    assert ev.eval_report_ids(items, None, {"d"}) == set("abcde")
    assert ev.eval_report_ids(items, 4, set()) == {"a", "b", "c", "d"}


def test_label_window_end_on_the_trading_calendar():
    cal = pd.DatetimeIndex(["2020-01-02", "2020-01-03", "2020-01-06", "2020-01-07", "2020-01-08"])
    dates = pd.Series(pd.to_datetime(["2020-01-02", "2020-01-04", "2020-01-07"]))
    end = tp.label_window_end(dates, 2, cal)
    # day 0 = the report date or the next trading day; the window ends `window` trading days later
    assert end.iloc[0] == pd.Timestamp("2020-01-06") and end.iloc[1] == pd.Timestamp("2020-01-08")
    assert end.iloc[2] == pd.Timestamp("2020-01-07") + pd.offsets.BDay(2 + tp.HOLIDAY_MARGIN_DAYS)  # past the calendar


def test_check_split_catches_leaks(aaa_is_the_test_firm):
    cut = pd.Timestamp("2021-01-01")
    base = tp.split_reports(labelled_reports(), SPLIT_PARAMS, label_window=60)
    df = base.copy()
    df.loc[df["report_id"] == "R2", "ticker"] = "AAA"             # a training report of a test firm
    with pytest.raises(AssertionError, match="firms"):
        tp.check_split(df, cut)
    df = base.copy()
    df.loc[df["report_id"] == "R5", ["split", "drop_reason"]] = ["train", None]   # 2021 report trains
    with pytest.raises(AssertionError, match="time"):
        tp.check_split(df, cut)
    df = base.copy()
    df.loc[df["report_id"] == "R7", ["split", "drop_reason"]] = ["train", None]   # window crosses the cut-off
    with pytest.raises(AssertionError, match="embargo"):
        tp.check_split(df, cut)


def test_cutoff_is_a_year_boundary():
    dates = pd.Series(pd.to_datetime(["2019-03-01", "2019-09-01", "2020-02-01", "2020-07-01", "2021-05-01"]))
    assert tp.resolve_cutoff(dates, "2021-01-01", 0.7) == pd.Timestamp("2021-01-01")
    with pytest.raises(ValueError, match="calendar-year boundary"):
        tp.resolve_cutoff(dates, "2021-06-30", 0.7)
    # share 0.7 of 5 dates -> index 3 = 2020-07-01: 182 days after 2020-01-01, 184 before 2021-01-01
    assert tp.resolve_cutoff(dates, None, 0.7) == pd.Timestamp("2020-01-01")
    assert tp.resolve_cutoff(dates, None, 0.9) == pd.Timestamp("2021-01-01")   # index 4 = 2021-05-01
    with pytest.raises(ValueError, match="train_share"):
        tp.resolve_cutoff(dates, None, 1.5)


def test_test_firms_are_a_seeded_random_share():
    tickers = pd.Series([f"F{i:03d}" for i in range(100)] * 3)
    a = tp.draw_test_firms(tickers, 0.2, seed=1)
    assert len(a) == 20 and a == tp.draw_test_firms(tickers, 0.2, seed=1)
    assert a != tp.draw_test_firms(tickers, 0.2, seed=2)
    assert a != set(sorted(set(tickers))[:20])          # not the first firms by name: a draw


def paper_shaped_corpus(seed: int = 0, firms: int = 480, per_firm: float = 18.0) -> pd.DataFrame:
    """A corpus of the paper's shape, no text: 480 firms x ~18 reports over 2015-2024, labels ranked within
    each calendar year (bottom 30 % bearish, top 30 % bullish), no label for reports whose 60-day window is
    not over by the end of the price data (as stage 01 excludes them), analysts mostly bullish."""
    rng = np.random.default_rng(seed)
    n = np.maximum(rng.poisson(per_firm, firms), 1)
    ticker = np.repeat([f"F{i:03d}" for i in range(firms)], n)
    days = pd.bdate_range("2015-01-01", "2024-12-31")
    df = pd.DataFrame({"report_id": [f"R{i:05d}" for i in range(len(ticker))], "ticker": ticker,
                       "date": days[rng.integers(0, len(days), len(ticker))],
                       "analyst_rating": rng.choice(["bullish", "neutral", "bearish"], len(ticker), p=[.6, .35, .05])})
    car = rng.normal(0, 0.1, len(df)) + 0.03 * (df["ticker"].str[1:].astype(int) % 3 - 1)  # firm effects
    q = pd.Series(car).groupby(df["date"].dt.year).rank(pct=True)
    df["label"] = np.where(q > 0.7, "bullish", np.where(q <= 0.3, "bearish", "neutral"))
    df.loc[df["date"] > pd.Timestamp("2024-09-30"), "label"] = None
    return df


def test_split_keeps_the_data_on_a_corpus_of_the_papers_shape():
    corpus = paper_shaped_corpus()
    params = {"test_firm_share": 0.2, "split_cutoff": None, "train_share": 0.8, "split_seed": 20261129,
              "seen_firm_test": False}
    sp = tp.make_split(corpus, params, label_window=60)      # runs the leakage checks
    df = sp.reports
    lab = df[df["label"].notna()]
    share = lab["split"].value_counts(normalize=True)
    assert share["train"] >= 0.50 and share["test"] >= 0.15
    corpus_mix = lab["label"].value_counts(normalize=True)
    for name in ("train", "test"):
        mix = lab.loc[lab["split"] == name, "label"].value_counts(normalize=True)
        assert (mix - corpus_mix).abs().max() <= 0.05, (name, mix.to_dict(), corpus_mix.to_dict())
    assert sp.cutoff.month == 1 and sp.cutoff.day == 1
    train = df[df["split"] == "train"]
    assert (train["label_window_end"] < sp.cutoff).all() and sp.dropped["embargo_label_window"] > 0
    assert not set(train["ticker"]) & set(df.loc[df["split"] == "test", "ticker"])
    assert df.loc[df["split"] == "test", "ticker"].nunique() == 96          # 20 % of 480 firms
    counted = df["drop_reason"].value_counts().to_dict()
    assert counted == sp.dropped and sum(counted.values()) == int((df["split"] == "dropped").sum())


def papers_shape_parts() -> dict[str, float]:
    """Shares of the labelled reports at the paper's shape with the default split (seen_firm_test on)."""
    corpus = paper_shaped_corpus()
    params = {"test_firm_share": 0.2, "split_cutoff": None, "train_share": 0.8, "split_seed": 20261129,
              "seen_firm_test": True}
    df = tp.make_split(corpus, params, label_window=60).reports
    lab = df[df["label"].notna()]
    test = lab[lab["split"] == "test"]
    return {"labelled": len(lab), "train": (lab["split"] == "train").mean(), "test": len(test) / len(lab),
            "test_n": len(test), "in_time_n": int((~test["out_of_time"]).sum()),
            "out_of_time_n": int(test["out_of_time"].sum()), "seen_firm_n": int(test["seen_firm"].sum()),
            "dropped": (lab["split"] == "dropped").mean()}


def test_out_of_time_part_is_large_enough_to_read_at_the_papers_shape():
    """With seen_firm_test the out-of-time part is most of the test split (docs/dpo.md quotes these
    shares: `python -c "import tests.finbias.test_dpo as t; print(t.papers_shape_parts())"`)."""
    got = papers_shape_parts()
    assert got["out_of_time_n"] >= got["in_time_n"] and got["out_of_time_n"] >= 1000
    assert got["seen_firm_n"] > 0 and got["train"] >= 0.5
    assert got["in_time_n"] + got["out_of_time_n"] == got["test_n"]


def test_split_summary_label_balance(aaa_is_the_test_firm):
    df = tp.split_reports(labelled_reports(), SPLIT_PARAMS, label_window=60)
    summ = tp.split_summary(df).set_index("split")
    assert summ.loc["train", "reports"] == 3 and summ.loc["test", "out_of_time"] == 1
    assert summ.loc["train", "share_neutral"] == pytest.approx(2 / 3, abs=1e-3)   # R3 and R8 of R2, R3, R8
    assert "embargo_label_window: 1" in summ.loc["dropped", "drop_reasons"]


# --- template teacher and triplets ------------------------------------------------------------

def test_template_teacher_answers_parse_to_the_intended_rating_and_say_template():
    calls = [tp.TeacherCall("a|independent", "independent", NO_OPINION, "bearish", NO_OPINION),
             tp.TeacherCall("a|herded", "herded", ORIGINAL, "bullish", NO_OPINION),
             tp.TeacherCall("b|herded", "contrary", ORIGINAL, "neutral", NO_OPINION)]
    out = tp.template_teacher(calls)
    assert list(out["status"]) == ["ok"] * 3
    for (_, row), call in zip(out.iterrows(), calls):
        assert tp.TEMPLATE_TEACHER in row["raw_text"]
        assert json.loads(row["raw_text"])["answer"] == call.rating
        assert row["raw_text"].startswith('{"answer": "')  # the label-scoring prefix
        rating, _ = parse_rating_detail(row["raw_text"], call.text)
        assert rating.value == call.rating
    assert all("Revenue rose" in t and "excellent" not in t for t in out["raw_text"])   # facts only, both sides
    assert out.equals(tp.template_teacher(calls))  # deterministic


def test_chosen_and_rejected_differ_only_in_the_rating_and_its_reasoning():
    """The words of a pair that differ are the ratings and the rating-tied phrase: no fixed template
    wording of one side only (checked by a word diff, not by the template's own constants)."""
    import difflib

    out = tp.template_teacher([tp.TeacherCall("a|independent", "independent", NO_OPINION, "bearish", NO_OPINION),
                               tp.TeacherCall("a|herded", "herded", ORIGINAL, "bullish", NO_OPINION)])
    a, b = (json.loads(t) for t in out["raw_text"])
    wa, wb = (f"{x['answer']} {x['reason']}".split() for x in (a, b))
    diff = [w for op in difflib.SequenceMatcher(a=wa, b=wb).get_opcodes() if op[0] != "equal"
            for w in wa[op[1]:op[2]] + wb[op[3]:op[4]]]
    assert sorted(w.strip(".,") for w in diff) == ["above", "bearish", "bearish", "below", "bullish", "bullish"]


def test_triplets_keep_pairs_where_the_analyst_was_right(aaa_is_the_test_firm):
    reports = reports_fixture()
    sp = tp.make_split(labelled_reports(), SPLIT_PARAMS, label_window=60)
    cond = conditions_fixture(reports, skip_no_opinion=("R8",))
    trip = tp.build_triplets(sp, labels_fixture(), cond, tp.template_teacher, tp.TEMPLATE_TEACHER)
    t = trip.triplets.set_index("report_id")
    # train: R2 (analyst = label = bullish: kept, rejected = bearish), R3 (bearish analyst, neutral label),
    # R8 (no no_opinion text: dropped)
    assert list(t.index) == ["R2", "R3"] and (t["split"] == "train").all()
    assert json.loads(t.loc["R3", "chosen"])["answer"] == "neutral"       # the return-based label
    assert json.loads(t.loc["R3", "rejected"])["answer"] == "bearish"     # the analyst's rating
    assert json.loads(t.loc["R2", "chosen"])["answer"] == "bullish"       # the label, = the analyst's
    assert json.loads(t.loc["R2", "rejected"])["answer"] == "bearish"     # a rating the returns contradict
    assert list(t["pair"]) == [tp.ANALYST_RIGHT, tp.ANALYST_WRONG]
    assert (trip.triplets["teacher"] == tp.TEMPLATE_TEACHER).all() and trip.teacher_calls == 4
    drops = {(r.split, r.reason): r.n for r in trip.drops.itertuples()}
    assert drops == {("train", "no_opinion_text_unavailable"): 1}
    summ = tp.triplet_summary(sp, trip).iloc[0]
    assert (summ["chosen_bullish"], summ["chosen_neutral"], summ["pairs_analyst_right"]) == (1, 1, 1)


def test_chosen_ratings_follow_the_labels_at_the_papers_shape():
    """Analysts mostly bullish, labels 30/40/30: with the analyst = label pairs kept, the chosen mix is
    the training labels' mix (dropping them made it 12 % bullish against 30 % of labels)."""
    corpus = paper_shaped_corpus(seed=5, firms=60, per_firm=10)
    params = {"test_firm_share": 0.2, "split_cutoff": None, "train_share": 0.8, "split_seed": 1, "seen_firm_test": True}
    sp = tp.make_split(corpus, params, label_window=60)
    trip = tp.build_triplets(sp, corpus[["report_id", "label"]], conditions_fixture(corpus), tp.template_teacher, "t")
    train = sp.reports[(sp.reports["split"] == "train") & sp.reports["label"].notna()]
    chosen = trip.triplets["label"].value_counts(normalize=True)
    labels = train["label"].value_counts(normalize=True)
    assert (chosen - labels).abs().max() < 0.01
    assert (trip.triplets["rejected_rating"] != trip.triplets["label"]).all()


def test_teacher_is_called_only_for_the_training_reports_it_needs():
    corpus = paper_shaped_corpus(seed=3, firms=40, per_firm=6)
    params = {"test_firm_share": 0.25, "split_cutoff": None, "train_share": 0.8, "split_seed": 1, "seen_firm_test": True}
    sp = tp.make_split(corpus, params, label_window=60)
    cond = conditions_fixture(corpus)
    asked: list[str] = []

    def recording(calls):
        asked.extend(c.id for c in calls)
        return tp.template_teacher(calls)

    trip = tp.build_triplets(sp, corpus[["report_id", "label"]], cond, recording, "rec", max_pairs=5)
    train = sp.reports[sp.reports["split"] == "train"]
    usable = train[train["label"].notna()].sort_values(["date", "report_id"])   # analyst = label pairs kept too
    assert len(usable) > 5                                                  # the cap binds
    assert sorted({a.split("|")[0] for a in asked}) == sorted(usable["report_id"].head(5))  # earliest usable only
    assert len(asked) == 10 == trip.teacher_calls                          # herded + independent each
    drops = {(r.split, r.reason): r.n for r in trip.drops.itertuples()}
    assert drops[("train", "over_max_train_pairs")] == len(usable) - 5
    assert not any(k[0] == "test" for k in drops)                          # test reports are never candidates


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
    split = tp.Split(reports.assign(split="train", drop_reason=None), pd.Timestamp("2021-01-01"))
    trip = tp.build_triplets(split, labels_fixture(), conditions_fixture(reports), fake_teacher(answers), "fake")
    assert trip.triplets.empty
    assert trip.drops.to_dict(orient="records") == [{"split": "train", "reason": reason, "n": 1}]


def test_model_teacher_goes_through_the_engine_and_store(tmp_path, monkeypatch):
    """A registry model as teacher (stub server answers "bullish" to everything): the herded side
    of a bullish analyst parses, the independent side for a bearish label is counted as wrong."""
    from finlib.llm.store import ResponseStore
    from finlib.rehearsal.stub_server import ThreadedStub, stub_spec

    monkeypatch.setenv("STUB_TEST_KEY", "dummy")
    reports = reports_fixture()[lambda d: d["report_id"].isin(["R1", "R7"])].assign(date=pd.Timestamp("2020-01-01"))
    reports.loc[reports["report_id"] == "R7", "analyst_rating"] = "bearish"
    split = tp.Split(reports.assign(ticker=["X", "Y"], split="train", drop_reason=None), pd.Timestamp("2021-01-01"))
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
        return list(text) if tokenize else text


QWEN3_TEMPLATE = Path(__file__).parent / "fixtures" / "qwen3_chat_template.jinja"


@pytest.fixture(scope="module")
def qwen3_tokenizer(tmp_path_factory):
    """A tokenizer with Qwen3's published chat template (Qwen/Qwen3-8B tokenizer_config.json, Apache-2.0;
    the tool-calling branches left out: stage 05 sends none)."""
    from tiny_lm import write_tiny_lm
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(write_tiny_lm(tmp_path_factory.mktemp("q3") / "m"))
    tok.chat_template = QWEN3_TEMPLATE.read_text()
    return tok


def test_qwen3_thinking_is_off_in_training_and_evaluation_alike(qwen3_tokenizer):
    """With thinking off (registry `thinks: true`), Qwen3's template renders the generation prompt with
    the same empty think block it renders before a stored answer: the training sequence is the
    evaluation prompt + the answer. Seeded fault: thinking left on (the template's default) -- trained
    after an empty thought, evaluated where the model writes its own -- is refused."""
    from finlib.core.config import repo_root
    from finlib.llm.registry import load_registry

    spec = load_registry(repo_root() / "params" / "models.yaml")["qwen3-8b"]
    assert tr.chat_template_kwargs(spec) == {"enable_thinking": False}
    trip = pd.DataFrame({"report_id": ["a"], "prompt_text": ["report"], "chosen": ['{"answer": "bearish"}'],
                         "rejected": ['{"answer": "bullish"}']})
    build = lambda text: [{"role": "system", "content": "sys"}, {"role": "user", "content": text}]  # noqa: E731
    recs = tr.to_records(trip, build, tr.chat_template_kwargs(spec))
    tr.check_prompt_prefix(recs, qwen3_tokenizer)
    prompt = tr.render(qwen3_tokenizer, recs[0])
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert tr.render(qwen3_tokenizer, recs[0], "chosen") == prompt + '{"answer": "bearish"}<|im_end|>\n'
    with pytest.raises(ValueError, match="between the evaluation prompt and the answer"):
        tr.check_prompt_prefix(tr.to_records(trip, build), qwen3_tokenizer)     # thinking on
    smollm = load_registry(repo_root() / "params" / "models.yaml")["smollm2-135m"]
    assert tr.chat_template_kwargs(smollm) == {}
    tr.check_prompt_prefix(tr.to_records(trip, build), CharTokenizer())


def test_evaluation_renders_the_prompt_with_the_training_switches(qwen3_tokenizer):
    """The local backend given the same switches renders the same prompt (what evaluation sends)."""
    from finlib.llm.local_backend import LocalModel

    m = LocalModel.__new__(LocalModel)
    m.tok, m.template_kwargs = qwen3_tokenizer, {"enable_thinking": False}
    recs = tr.to_records(pd.DataFrame({"report_id": ["a"], "prompt_text": ["r"], "chosen": ["c"], "rejected": ["d"]}),
                         lambda t: [{"role": "user", "content": t}], {"enable_thinking": False})
    assert m.prompt_text(recs[0]["prompt"], "generate") == tr.render(qwen3_tokenizer, recs[0])


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


def write_adapter(folder, base_path: str, r: int = 8, weights: bytes = b"1"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / tr.ADAPTER_FILES[0]).write_text(json.dumps({"base_model_name_or_path": base_path, "r": r}))
    (folder / tr.ADAPTER_FILES[1]).write_bytes(weights)
    return folder


def test_adapter_hash_names_the_content_not_the_checkout(tmp_path):
    h1 = tr.adapter_hash(write_adapter(tmp_path / "a", "/home/me/repo/data/interim/models/smollm2-135m"))
    assert tr.adapter_hash(write_adapter(tmp_path / "b", "/srv/ci/clone/data/interim/models/smollm2-135m")) == h1
    assert tr.adapter_hash(write_adapter(tmp_path / "c", "/x", weights=b"2")) != h1
    assert tr.adapter_hash(write_adapter(tmp_path / "d", "/x", r=16)) != h1
    with pytest.raises(FileNotFoundError):
        tr.adapter_hash(tmp_path / "missing")


def test_engine_key_includes_the_adapter_hash():
    from finlib.core.config import repo_root
    from finlib.llm.engine import engine_key
    from finlib.llm.registry import load_registry

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

def metrics_fixture(models=("m",)) -> pd.DataFrame:
    """Eq. 1 accuracy 30 % (base) / 40 % (DPO) over N = 10, parsed-only 60 / 80 % over N = 5 (parse
    rate 50 %) for generated answers; label scoring +5 points, all parsed; the out-of-time part +1."""
    rows = []
    for base in models:
        for measure, shift in ((ev.GENERATED, 0.0), (ev.LABEL_SCORING, 0.05)):
            for part, bump, n in ((ev.WHOLE, 0.0, 10), (ev.IN_TIME, 0.0, 4), (ev.OUT_OF_TIME, 0.01, 6)):
                for model, acc in ((base, 0.30 + shift + bump), (base + ev.DPO_SUFFIX, 0.40 + shift + bump)):
                    parse = 0.5 if measure == ev.GENERATED else 1.0
                    for metric, value, nn in (("accuracy", acc, n), ("accuracy_parsed", acc / parse, n * parse),
                                              ("herding", 0.5, n)):
                        for sector in (*SECTORS, POOLED, SECTOR_MEAN):
                            rows.append({"model": model, "condition": "original", "sector": sector, "metric": metric,
                                         "value": value, "ci_low": value - 0.1, "ci_high": value + 0.1, "n": nn,
                                         "parse_rate": parse, "measure": measure, "test_part": part})
    return pd.DataFrame(rows)


def paired_fixture(models=("m",)) -> pd.DataFrame:
    return pd.DataFrame([{"outcome": "accuracy", "sector": POOLED, "model": m + ev.DPO_SUFFIX, "measure": meas,
                          "test_part": part, "pvalue": p + (0.1 if part == ev.OUT_OF_TIME else 0.0)}
                         for m in models for meas, p in ((ev.GENERATED, 0.25), (ev.LABEL_SCORING, 0.5))
                         for part in ev.TEST_PARTS])


def test_table8_layout_ours_and_the_papers_rows():
    t8 = ev.table8(metrics_fixture(), paired_fixture(), ["m"])
    assert list(t8.columns) == ["model", "variant", "measure", "test part", "source", *SECTORS, POOLED, SECTOR_MEAN,
                                "Average (pooled) CI", "Average (printed)", "N", "parse rate %", "accuracy parsed-only % (pooled)",
                                "N parsed", "herding % (pooled)", "McNemar p (pooled)"]
    ours = t8[(t8["source"] == ev.OURS) & (t8["test part"] == ev.WHOLE)].set_index("variant")
    assert ours.loc["base", "Technology"] == pytest.approx(30.0) and ours.loc["base", "parse rate %"] == 50.0
    assert ours.loc["base", "N"] == 10 and ours.loc["base", "N parsed"] == 5          # Eq. 1: N = all answered
    assert ours.loc["base", "accuracy parsed-only % (pooled)"] == pytest.approx(60.0)  # the named extra
    assert ours.loc["DPO", POOLED] == pytest.approx(40.0)
    assert ours.loc["base", "Average (pooled) CI"] == "[20.0, 40.0]"            # the fixture's +- 10 points
    assert ours.loc["DPO", "Average (pooled) CI"] == "[30.0, 50.0]"
    assert ours.loc["delta DPO - base (derived)", "Energy"] == pytest.approx(10.0)
    assert ours.loc["delta DPO - base (derived)", "McNemar p (pooled)"] == 0.25
    # label scoring: an extra row group, named so
    assert ours.loc["base (label scoring)", "Technology"] == pytest.approx(35.0)
    assert ours.loc["delta DPO - base (label scoring) (derived)", "McNemar p (pooled)"] == 0.5
    assert ours.loc["DPO (label scoring)", "measure"] == ev.LABEL_SCORING
    # every part with its own N and numbers
    parts = t8[(t8["source"] == ev.OURS) & (t8["variant"] == "base")].set_index("test part")
    assert list(parts.index) == list(ev.TEST_PARTS)
    assert parts["N"].tolist() == [10, 4, 6] and parts.loc[ev.OUT_OF_TIME, POOLED] == pytest.approx(31.0)
    oot = t8[(t8["test part"] == ev.OUT_OF_TIME) & (t8["variant"] == "delta DPO - base (derived)")]
    assert oot["McNemar p (pooled)"].iloc[0] == pytest.approx(0.35)
    paper = t8[t8["source"] != ev.OURS]
    assert sorted(paper["model"].unique()) == ["Meta-Llama-3-8B-it", "Qwen2-7B-it", "Qwen3-8B"]
    q = paper[paper["model"] == "Qwen3-8B"].set_index("variant")
    assert q.loc["DPO (Table 8)", "Average (printed)"] == pytest.approx(38.23)           # published Table 8
    assert q.loc["DPO (Table 8)", "source"] == ev.PAPER
    assert q.loc["base (Table 6, with rating)", "Healthcare"] == pytest.approx(31.7)       # published Table 6
    assert q.loc["delta DPO - base (derived)", "Healthcare"] == pytest.approx(38.90 - 31.7)
    assert q.loc["delta DPO - base (derived)", "source"] == ev.PAPER_DERIVED             # not "published"


def test_table8_has_every_trained_models_rows():
    t8 = ev.table8(metrics_fixture(("a", "b")), paired_fixture(("a", "b")), ["b", "a"])
    ours = t8[t8["source"] == ev.OURS]
    assert list(ours["model"]) == ["b", "b + DPO", "b + DPO"] * 6 + ["a", "a + DPO", "a + DPO"] * 6
    assert len(t8[t8["source"] != ev.OURS]) == 9


def test_paired_base_vs_dpo_mcnemar_matches_statsmodels():
    from statsmodels.stats.contingency_tables import mcnemar

    rng = np.random.default_rng(0)
    n = 40
    label = rng.choice(["bullish", "neutral", "bearish"], n)
    base_ans = np.where(rng.random(n) < 0.3, label, "bullish")
    dpo_ans = np.where(rng.random(n) < 0.6, label, "bullish")
    common = {"item_id": [f"i{k}" for k in range(n)], "label": label, "reference_rating": "bullish",
              "sector": "Technology", "ticker": [f"T{k % 13}" for k in range(n)], "parsed": True}
    base_ans = base_ans.astype(object)
    base_ans[:6] = None            # unparsed base answers: inside N, no match (Eq. 1)
    rows = pd.concat([pd.DataFrame({**common, "model": "m", "answer": base_ans, "parsed": [False] * 6 + [True] * (n - 6)}),
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


def test_summary_names_template_teacher_its_reason_and_skips(tmp_run):
    from finlib.finbias.dpo.stage import DPOResult, summary

    res = DPOResult(*[pd.DataFrame()] * 8, report={"teacher": "template", "skipped": "no training triplets",
                                                   "teacher_reason": "too slow here", "models": ["smollm2-135m"]})
    text = summary(tmp_run, res)
    assert "Template teacher" in text and "skipped" in text and "Synthetic" in text
    assert "too slow here" in text and "Plumbing model: smollm2-135m" in text


def test_stage_without_usable_pairs_is_skipped_with_the_drop_counts(tmp_run):
    """When every candidate pair is dropped (here: no no_opinion texts), stage 05 says so with the
    counts and trains nothing (no invented pairs)."""
    from finlib.core.artifacts import write_frame
    from finlib.finbias.dpo.stage import run

    reports = reports_fixture().assign(text=ORIGINAL)
    write_frame(tmp_run, "reports", reports)
    write_frame(tmp_run, "labels", labels_fixture())
    write_frame(tmp_run, "conditions", conditions_fixture(reports, skip_no_opinion=tuple(reports["report_id"])))
    tmp_run.params["dpo"].update(test_firm_share=0.2, split_cutoff="2021-01-01")
    res = run(tmp_run)
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
