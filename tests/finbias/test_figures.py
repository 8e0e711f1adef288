"""Stage 06: figures from artifacts, captions, missing inputs as notes, and paper_vs_ours."""
from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from params_helpers import with_defaults

from finlib.core import compare
from finlib.core.artifacts import write_frame
from finlib.core.config import RunConfig
from finlib.core.tables import paper_table, write_table
from finlib.finbias.figures import paper as figures_paper
from finlib.finbias.figures import stage as figures
from finlib.finbias.scoring import compare as finbias_compare
from finlib.finbias.vocab import POOLED, SECTORS

ROOT = Path(__file__).resolve().parents[2]


def make_cfg(tmp_path: Path, source: str = "synthetic", **fig_params) -> RunConfig:
    """A run rooted in tmp_path: the default params with stage 06's knobs (and the data source) set here."""
    params = with_defaults({"seed": 7, "data": {"source": source, "reports": {"hf_dataset": "x/y", "path": None}},
                            "inference": {"registry": str(ROOT / "params" / "models.yaml")},
                            "figures": {"example_report": None, "case_model": None, "case_report": None,
                                        "text_chars": 800, "caption_in_image": False, **fig_params}})
    cfg = RunConfig(name="t", params=params, root=tmp_path, params_file=tmp_path / "t.yaml")
    for d in (cfg.processed_dir, cfg.tables_dir, cfg.run_dir):
        d.mkdir(parents=True, exist_ok=True)
    return cfg


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


ORIGINAL = "Acme Corp. is rated Buy by us. Revenue grew 5% in the quarter. We think the outlook is superb."


def conditions_frame() -> pd.DataFrame:
    rows = [("original", ORIGINAL, None), ("no_rating", ORIGINAL.split(" us. ")[1], None),
            ("fake_rating", ORIGINAL.replace("Buy", "Sell"), "bearish"),
            ("no_opinion", "Revenue grew 5% in the quarter.", None)]
    return pd.DataFrame([{"item_id": f"R1:{c}", "report_id": "R1", "condition": c, "text": t,
                          "analyst_rating": "bullish", "fake_rating": f, "reference_rating": "bullish",
                          "status": "ok", "skip_reason": None} for c, t, f in rows])


def metrics_frame() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    recs = []
    for model in ("gpt-4.1 [generate]", "smollm2-135m [score]", "Analyst"):
        for cond in ("original", "no_rating", "fake_rating", "no_opinion"):
            for sector in (*SECTORS[:3], POOLED):
                for metric in ("herding", "accuracy", "prob_herding"):
                    v = float(rng.uniform(0.2, 0.9))
                    recs.append({"model": model, "condition": cond, "sector": sector, "metric": metric,
                                 "value": v, "ci_low": v - 0.1, "ci_high": v + 0.1, "n": 10, "parse_rate": 1.0})
    return pd.DataFrame(recs)


# ---- Figures 2-5 marks ------------------------------------------------------------------

def test_sentence_marks_show_removed_and_new_sentences():
    c = conditions_frame().set_index("condition")["text"]
    no_rating = figures_paper.sentence_marks(ORIGINAL, c["no_rating"])
    assert [m for _, m in no_rating] == ["removed", "same", "same"]
    assert no_rating[0][0] == "Acme Corp. is rated Buy by us."   # "Corp." is not a sentence end
    fake = figures_paper.sentence_marks(ORIGINAL, c["fake_rating"])
    assert [m for _, m in fake] == ["removed", "changed", "same", "same"]
    assert fake[1][0] == "Acme Corp. is rated Sell by us."
    assert [m for _, m in figures_paper.sentence_marks(ORIGINAL, ORIGINAL)] == ["same"] * 3


def test_pick_example_prefers_wanted_and_refuses_unknown():
    cond = conditions_frame()
    assert figures_paper.pick_example(cond, None) == "R1"
    with pytest.raises(ValueError, match="R9"):
        figures_paper.pick_example(cond, "R9")


# ---- every figure: PNG + PDF, caption names the source ----------------------------------

def test_result_figures_are_saved_with_a_caption_naming_synthetic_data(tmp_path):
    cfg = make_cfg(tmp_path)
    m = metrics_frame()
    for _fig, rec in (figures.plot_herding_heatmap(cfg, m), figures.plot_with_without(cfg, m),
                     figures.plot_accuracy_vs_analyst(cfg, m), figures.plot_prob_herding(cfg, m),
                     figures_paper.plot_conditions_example(cfg, conditions_frame(), "R1")):
        assert "synthetic data" in rec.caption and "Run 't'" in rec.caption
        for f in rec.files:
            assert (tmp_path / f).stat().st_size > 1000, f
        assert {Path(f).suffix for f in rec.files} == {".png", ".pdf"}


def test_interval_captions_and_axes_state_the_run_s_interval_level(tmp_path):
    """The intervals are computed at `scoring.ci`: a 90 % run must not be captioned 95 %."""
    cfg = make_cfg(tmp_path)
    cfg.params["scoring"]["ci"] = 0.9
    m = metrics_frame()
    (fig, rec), (fig2, rec2) = figures.plot_with_without(cfg, m), figures.plot_accuracy_vs_analyst(cfg, m)
    assert "90 % cluster-bootstrap" in rec.caption and "90 % cluster-bootstrap" in rec2.caption
    assert "95 %" not in rec.caption + rec2.caption
    assert "90 % cluster-bootstrap CI" in fig.axes[0].get_xlabel() and "90 % CI" in fig2.axes[0].get_ylabel()


def test_real_runs_name_their_corpus_and_do_not_say_synthetic(tmp_path):
    cfg = make_cfg(tmp_path, source="huggingface")
    _, rec = figures.plot_herding_heatmap(cfg, metrics_frame())
    assert "Hugging Face dataset x/y" in rec.caption and "synthetic" not in rec.caption


def test_case_study_reads_reason_and_answer_from_stored_json(tmp_path):
    cfg = make_cfg(tmp_path)
    pred = pd.DataFrame([
        {"model": "m", "report_id": "R1", "condition": c, "mode": "generate", "status": "ok",
         "raw_text": f'{{"answer": "{a}", "reason": "because {c}"}}'}
        for c, a in (("original", "bullish"), ("no_rating", "neutral"), ("fake_rating", "bearish"))])
    assert figures_paper.reason_and_answer(pred["raw_text"][1]) == ("because no_rating", "neutral")
    assert figures_paper.reason_and_answer("I cannot tell.") == ("I cannot tell.", "unparsed")
    fig, _ = figures_paper.plot_case_study(cfg, pred, conditions_frame())
    texts = " ".join([t.get_text() for ax in fig.axes for t in ax.texts] + [ax.get_title(loc="left") for ax in fig.axes])
    assert "because fake_rating" in texts and "m answer: bearish" in texts
    other = pred.assign(model="a-model", parsed=False)        # sorts first, same conditions, nothing parsed
    both = pd.concat([other, pred.assign(parsed=True)], ignore_index=True)
    assert set(figures_paper.case_rows(both, None, None)["model"]) == {"m"}   # the readable case first
    with pytest.raises(LookupError, match="generate_subset"):
        figures_paper.plot_case_study(cfg, pred.assign(mode="score"), conditions_frame())


def test_fake_transitions_figure_keeps_unparsed(tmp_path):
    cfg = make_cfg(tmp_path)
    t = pd.DataFrame({"model": ["m"] * 3, "analyst_rating": ["bullish"] * 3, "fake_rating": ["bearish"] * 3,
                      "answer": ["bearish", "bullish", "unparsed"], "n": [2, 1, 1], "share": [0.5, 0.25, 0.25],
                      "parse_rate": [0.75] * 3})
    fig, _ = figures.plot_fake_transitions(cfg, t)
    widths = sorted(round(p.get_width()) for p in fig.axes[0].patches)
    assert widths == [25, 25, 50]
    assert "unparsed" in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


# ---- the stage: absent inputs become notes ----------------------------------------------

def test_stage_with_nothing_on_disk_records_notes_instead_of_failing(tmp_path):
    cfg = make_cfg(tmp_path)
    figs = figures.FigureSet(cfg)
    for name in figs.drawers():
        figs.draw(name)
    assert all(r.skipped for r in figs.records)
    by = {r.name: r.skipped for r in figs.records}
    assert "run stage 04" in by["fig_herding_heatmap"]
    assert "stage 05 artifacts not found" in by["fig_dpo_accuracy"]
    assert any("stage 05 artifacts not found: run stage 05" in n for n in figs.missing_notes())
    assert figs.close().is_file()


def write_stage_inputs(cfg: RunConfig) -> None:
    """Two reports with labels, their conditions and stage 04's metrics: what most figures draw from."""
    reports = pd.DataFrame({"report_id": ["R1", "R2"], "sector": ["Energy", "Technology"],
                            "analyst_rating": ["bullish", "neutral"],
                            "date": pd.to_datetime(["2021-01-04", "2022-03-01"])})
    labels = pd.DataFrame({"report_id": ["R1", "R2"], "car": [0.05, -0.02], "label": ["bullish", "bearish"]})
    for name, df in (("reports", reports), ("labels", labels), ("conditions", conditions_frame()),
                     ("metrics", metrics_frame())):
        write_frame(cfg, name, df)


def test_stage_draws_from_artifacts_and_writes_comparisons(tmp_path):
    cfg = make_cfg(tmp_path)
    write_stage_inputs(cfg)
    figs = figures.FigureSet(cfg)
    for name in ("fig_conditions_example", "fig_labels_by_year", "fig_herding_heatmap"):
        figs.draw(name)
    assert [r.skipped for r in figs.records] == [None, None, None]
    later = pd.DataFrame([{"table": "bizfin_table4", "row": "m", "column": "FDD", "ours": 1.0, "paper": 2.0,
                           "diff": -1.0, "status": compare.MATCHED}])
    compare.write_comparison(cfg, "bizfin_table4", later)        # stage 08 of an earlier run, in the same folder
    summary = figs.write_comparisons().set_index(["table", "column"])
    assert not summary.index.get_level_values("table").str.startswith("bizfin").any()   # same table on a rerun
    assert summary.loc[("finbias_table4", "with_rating"), "matched"] == 4    # GPT-4: 3 sectors + Average
    assert summary.loc[("finbias_table4", "without_rating"), "matched"] == 4
    assert summary.loc[("finbias_table2", "num"), "matched"] == 3            # Energy, Technology, Total
    assert (cfg.tables_dir / "paper_vs_ours_summary.md").read_text().count("not comparable") == 1
    figs.draw("fig_paper_vs_ours")
    assert figs.records[-1].skipped is None


def test_run_draws_every_figure_it_can_and_summary_names_the_rest(tmp_path, capsys):
    """`run` is the whole stage: every figure attempted once, the comparisons written, the report
    saved; `summary` names each figure not drawn with its reason; `show` prints that reason."""
    cfg = make_cfg(tmp_path)
    write_stage_inputs(cfg)
    res = figures.run(cfg)
    assert [r.name for r in res.records] == list(figures.FigureSet(cfg).drawers())
    assert res.figures["fig_herding_heatmap"] is not None and res.figures["fig_dpo_accuracy"] is None
    assert res.tables["figures"]["drawn"].sum() == len(res.report["drawn"]) >= 3
    assert "paper_vs_ours_summary" in res.tables and (cfg.processed_dir / "figures_report.json").is_file()
    text = figures.summary(cfg, res)
    assert "`fig_dpo_accuracy` not drawn: stage 05 artifacts not found" in text
    assert f"{len(res.report['drawn'])} of {len(res.records)}" in text
    figures.show(res, "fig_dpo_accuracy")
    assert "fig_dpo_accuracy: not drawn" in capsys.readouterr().out


# ---- paper_vs_ours ------------------------------------------------------------------------

def test_paper_vs_ours_hand_computed():
    ours = pd.DataFrame({"model": ["mistral-7B-it-v0.3", "Mine"], "sector": ["Energy", "Energy"], "v": [40.0, 1.0]})
    paper = pd.DataFrame({"model": ["Mistral-7B-It-v0.3", "Other"], "sector": ["Energy", "Energy"], "p": [35.5, 2.0]})
    out = compare.paper_vs_ours(ours, paper, ["model", "sector"], "v", "p", table="t").set_index("model")
    assert out.loc["Mistral-7B-It-v0.3", "diff"] == pytest.approx(4.5)    # paper's spelling shown
    assert out.loc["Mistral-7B-It-v0.3", "status"] == compare.MATCHED
    assert out.loc["Other", "status"] == compare.PAPER_ONLY and np.isnan(out.loc["Other", "diff"])
    assert out.loc["Mine", "status"] == compare.OURS_ONLY and out.loc["Mine", "ours"] == 1.0


def test_paper_vs_ours_refuses_duplicates_and_missing_columns():
    df = pd.DataFrame({"k": ["a", "A"], "v": [1.0, 2.0]})
    with pytest.raises(ValueError, match="duplicate"):
        compare.paper_vs_ours(df.iloc[:1], df, ["k"], "v")
    with pytest.raises(ValueError, match="lacks"):
        compare.paper_vs_ours(df.iloc[:1], df.iloc[:1], ["k"], "w")


def test_finbias_metric_comparison_against_the_published_csv():
    m = metrics_frame()
    long = finbias_compare.finbias_metric_comparisons(m, {"gpt-4.1": "GPT-4"})
    t4 = long[(long["table"] == "finbias_table4") & (long["column"] == "with_rating")]
    row = t4[t4["row"] == f"GPT-4 | {SECTORS[0]}"].iloc[0]
    published = pd.read_csv(ROOT / "finlib/reference/paper_tables/finbias_table4_herding_with_without.csv")
    want_paper = published[(published.model == "GPT-4") & (published.sector == SECTORS[0])]["with_rating"].item()
    ours = m[(m.model == "gpt-4.1 [generate]") & (m.condition == "original") & (m.sector == SECTORS[0])
             & (m.metric == "herding")]["value"].item()
    assert row["paper"] == want_paper and row["diff"] == pytest.approx(100 * ours - want_paper)
    avg = t4[t4["row"] == "GPT-4 | Average"].iloc[0]   # printed Average vs our pooled value
    assert avg["status"] == compare.MATCHED
    t6 = long[(long["table"] == "finbias_table6") & (long["row"].str.startswith("Analyst"))]
    assert (t6["status"] == compare.MATCHED).sum() == 4     # analyst baseline: 3 sectors + Average
    t7 = long[(long["table"] == "finbias_table7") & (long["row"] == f"Analyst | {SECTORS[0]}")].iloc[0]
    analyst = m[(m.model == "Analyst") & (m.condition == "original") & (m.sector == SECTORS[0])
                & (m.metric == "accuracy")]["value"].item()     # one analyst accuracy, printed in T6 and T7
    assert t7["ours"] == pytest.approx(100 * analyst)
    assert not long[long["table"] == "finbias_table4"]["row"].str.startswith("Analyst").any()
    assert not long["row"].str.contains("smollm2").any()  # no paper_name: not compared


def test_comparisons_round_trip_and_summary(tmp_path):
    cfg = make_cfg(tmp_path)
    long = compare.long_comparison(
        compare.paper_vs_ours(pd.DataFrame({"task": ["AEA"], "v": [80.0]}),
                              paper_table("bizfin_table3").query("model == 'GPT-4o'")[["AEA"]]
                              .assign(task="AEA").rename(columns={"AEA": "v"}),
                              ["task"], "v", table="bizfin_table3"), ["task"], "score")
    compare.write_comparison(cfg, "bizfin_table3", long, "")
    back = compare.read_comparisons(cfg)
    assert back["diff"].item() == pytest.approx(80.0 - 79.42)
    s = compare.comparison_summary(back)
    assert s["column"].item() == "score" and s["matched"].item() == 1 and s["mean_abs_diff"].item() == pytest.approx(0.58)
    first = (cfg.tables_dir / "paper_vs_ours_bizfin_table3.md").read_text().splitlines()[0]
    assert "not comparable" in first and "Synthetic data" in first           # default: the synthetic banner
    compare.write_comparison(cfg, "bizfin_table3", long, "", not_comparable="plumbing model on the published items")
    first = (cfg.tables_dir / "paper_vs_ours_bizfin_table3.md").read_text().splitlines()[0]
    assert "plumbing model on the published items" in first and "Synthetic data" not in first
    write_table(cfg, "unrelated", pd.DataFrame({"a": [1]}), "x")
    assert len(compare.read_comparisons(cfg)) == 1


def test_dpo_figure_and_table8_comparison_from_stage05_metrics(tmp_path):
    cfg = make_cfg(tmp_path)
    recs = []
    for model, v in (("qwen2-7b-it", 0.30), ("qwen2-7b-it + DPO", 0.40)):
        for sector in ("Energy", POOLED):
            recs.append({"model": model, "condition": "original", "sector": sector, "metric": "accuracy",
                         "value": v, "ci_low": v - 0.05, "ci_high": v + 0.05, "n": 20, "parse_rate": 1.0})
    write_frame(cfg, figures.DPO_METRICS, pd.DataFrame(recs))
    acc = figures.dpo_accuracy(pd.DataFrame(recs))
    assert set(acc["variant"]) == {"base", "dpo"} and set(acc["model"]) == {"qwen2-7b-it"}
    figs = figures.FigureSet(cfg)
    figs.draw("fig_dpo_accuracy")
    assert figs.records[-1].skipped is None
    assert not any("stage 05" in n for n in figs.missing_notes())
    long = finbias_compare.finbias_dpo_comparison(acc[acc["variant"] == "dpo"], {"qwen2-7b-it": "Qwen2-7B-it"})
    t8 = paper_table("finbias_table8")
    energy = long[long["row"] == "Qwen2-7B-it | Energy"].iloc[0]
    published = t8[(t8.model == "Qwen2-7B-it") & (t8.sector == "Energy")]["accuracy"].item()
    assert energy["diff"] == pytest.approx(40.0 - published)
    assert long[long["row"] == "Qwen2-7B-it | Average"]["status"].item() == compare.MATCHED
