"""Stage 04: turn model outputs into ratings, score herding and accuracy, write Tables 4-7.

Three layers, each a set of small pure functions:

1. Parsing (`parse_rating`, `answer_from_probs`): a model's text becomes a `Rating` or
   `None` (unparsed). Unparsed is never turned into "neutral": a default answer would
   silently move herding and accuracy towards whatever the default happens to be.
2. Metrics and paired tests (`finlib.finbias.scoring.metrics`): Fin-Bias Section 4.1
   plus parse rates, confusion and macro-F1, by sector and overall, with cluster bootstrap
   intervals over firms from `finlib.core.stats`.
3. The stage (`run`, `summary`, `SECTION`: the contract of `finlib.core.stage`): reads the stage 00-03
   artifacts, writes `metrics.parquet`, `paired_tests.parquet`, `scoring_report.json` and Tables 4-7
   beside the paper's numbers.
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from finlib.core.artifacts import read_frame, require_columns, write_frame, write_json
from finlib.core.config import RunConfig
from finlib.core.tables import write_table
from finlib.finbias import conditions as condition_table
from finlib.finbias.answers import condition_texts, parse_predictions
from finlib.finbias.scoring.metrics import (
    ACCURACY,
    HERDING,
    confusion,
    fake_transitions,
    kl_metrics,
    metrics_long,
    paired_tests,
)
from finlib.finbias.scoring.paper_layout import (
    AVERAGE,
    TABLE_SPECS,
    averaging_note,
    base_model,
    build_table,
    caption_for,
    ci_table,
    printed_average_agreement,
)
from finlib.finbias.vocab import POOLED, RATINGS, SECTOR_MEAN, SECTORS, Condition, Rating
from finlib.llm.registry import load_registry

# --------------------------------------------------------------------------------------
# 2. Joining the artifacts
# --------------------------------------------------------------------------------------

PRED_COLUMNS = ("item_id", "report_id", "condition", "model", "mode", "raw_text",
                "p_bullish", "p_neutral", "p_bearish", "status")
COND_COLUMNS = ("item_id", "report_id", "condition", "analyst_rating", "fake_rating",
                "reference_rating", "status", "skip_reason")


def _check_ratings(df: pd.DataFrame, column: str, artifact: str) -> None:
    allowed = {r.value for r in RATINGS}
    bad = df[df[column].notna() & ~df[column].isin(allowed)]
    if len(bad):
        row = bad.index[0]
        raise ValueError(f"{artifact}.parquet row {row}: field '{column}' = {bad[column].iloc[0]!r} "
                         f"is not one of {sorted(allowed)}")


@dataclass
class Scored:
    """One row per (model, item) that was run, with everything the metrics need."""

    rows: pd.DataFrame
    skipped: pd.DataFrame          # model, condition, reason, n
    counts: dict = field(default_factory=dict)
    not_answered: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["model", "condition", "error",
                                                                                     "n"]))


def label_model_modes(pred: pd.DataFrame) -> pd.DataFrame:
    """Name a model run in two modes as two rows ("m [score]", "m [generate]"): label scoring and
    free generation are different measurements and must never be pooled into one score."""
    modes = pred.groupby("model")["mode"].nunique()
    multi = set(modes[modes > 1].index)
    if not multi:
        return pred
    out = pred.copy()
    hit = out["model"].isin(multi)
    out.loc[hit, "model"] = out.loc[hit, "model"] + " [" + out.loc[hit, "mode"] + "]"
    return out


def score_frame(predictions: pd.DataFrame, conditions: pd.DataFrame, labels: pd.DataFrame,
                reports: pd.DataFrame) -> Scored:
    """Parse answers and attach reference rating, sector, firm and return-based label.

    Skipped items (condition or inference status "skipped") are set aside with their reason:
    they are not zeros. Not-answered items (inference status "error": the server or network
    failed after retries) are set aside too and counted with their error: the model
    never answered, so they are outside N, unlike an answer that did not parse (inside N).
    Predictions for items missing from conditions/reports are an error.
    """
    require_columns(predictions, PRED_COLUMNS, "predictions.parquet")
    require_columns(conditions, COND_COLUMNS, "conditions.parquet")
    require_columns(labels, ("report_id", "label"), "labels.parquet")
    require_columns(reports, ("report_id", "ticker", "sector", "analyst_rating"), "reports.parquet")
    for frame, col, name in ((conditions, "reference_rating", "conditions"), (labels, "label", "labels"),
                             (reports, "analyst_rating", "reports")):
        _check_ratings(frame, col, name)
    pred = label_model_modes(parse_predictions(predictions, condition_texts(conditions)))
    cond = conditions[list(COND_COLUMNS)].rename(columns={"status": "condition_status",
                                                          "condition": "condition_c", "report_id": "report_id_c"})
    rows = pred.merge(cond, on="item_id", how="left", validate="many_to_one", indicator=True)
    orphan = rows[rows["_merge"] == "left_only"]
    if len(orphan):
        raise ValueError(f"predictions.parquet: {len(orphan)} item_id(s) not in conditions.parquet, "
                         f"e.g. row {orphan.index[0]} item_id={orphan['item_id'].iloc[0]!r} (predictions made from "
                         "older conditions? rerun stage 03 after stage 02)")
    mismatch = rows[(rows["condition"] != rows["condition_c"]) | (rows["report_id"] != rows["report_id_c"])]
    if len(mismatch):
        raise ValueError(f"predictions.parquet row {mismatch.index[0]}: condition/report_id disagree with "
                         f"conditions.parquet for item_id={mismatch['item_id'].iloc[0]!r}")
    rows = rows.drop(columns=["_merge", "condition_c", "report_id_c"])
    rows = rows.merge(reports[["report_id", "ticker", "sector"]], on="report_id", how="left",
                      validate="many_to_one", indicator=True)
    orphan = rows[rows["_merge"] == "left_only"]
    if len(orphan):
        raise ValueError(f"conditions/predictions: report_id={orphan['report_id'].iloc[0]!r} not in reports.parquet")
    rows = rows.drop(columns="_merge").merge(labels[["report_id", "label"]], on="report_id", how="left",
                                             validate="many_to_one")
    skip_mask = (rows["status"] == "skipped") | (rows["condition_status"] == "skipped")
    reason = rows["skip_reason"].where(rows["condition_status"] == "skipped")
    if "error" in rows.columns:
        reason = reason.fillna(rows["error"].where(rows["status"] == "skipped"))
    reason = reason.fillna("skipped (no reason recorded)")
    skipped = (rows[skip_mask].assign(reason=reason[skip_mask])
               .groupby(["model", "condition", "reason"], as_index=False).size().rename(columns={"size": "n"}))
    na_mask = ~skip_mask & ~rows["answered"].astype(bool)
    errors = (rows["error"] if "error" in rows.columns else pd.Series(None, index=rows.index, dtype=object))
    not_answered = (rows[na_mask].assign(error=errors[na_mask].fillna("error (no message)").astype(str).str[:160])
                    .groupby(["model", "condition", "error"], as_index=False).size().rename(columns={"size": "n"}))
    kept = rows[~skip_mask & ~na_mask].reset_index(drop=True)
    notes = kept.groupby(["model", "condition", "parse_note"]).size()
    counts = {
        "parse_notes": [{"model": m, "condition": c, "parse_note": n, "n": int(v)} for (m, c, n), v in notes.items()],
        "predictions": int(len(rows)),
        "skipped": int(skip_mask.sum()),
        "not_answered": int(na_mask.sum()),   # server/transport errors after retries: outside N
        "scored_rows": int(len(kept)),         # answered rows: the N of every rate
        "unparsed": int((~kept["parsed"]).sum()),   # answered but unparsed (incl. truncated): inside N
        "truncated": int((kept["parse_note"] == "truncated").sum()),   # cut before a rating: unparsed
        "truncated_read": int((kept["parse_note"] == "truncated_read").sum()),  # cut after its rating: read
        "rows_without_label": int(kept["label"].isna().sum()),
        "rows_without_reference_rating": int(kept["reference_rating"].isna().sum()),
        "rows_outside_paper_sectors": int((~kept["sector"].isin(SECTORS)).sum()),
    }
    return Scored(kept, skipped, counts, not_answered)


def analyst_rows(reports: pd.DataFrame, labels: pd.DataFrame) -> pd.DataFrame:
    """The analyst as a pseudo-model on `original`: the baseline row of Tables 6 and 7.

    Its "parse rate" is the share of labelled reports whose first sentence carries a rating.
    """
    df = reports[["report_id", "ticker", "sector", "analyst_rating"]].merge(
        labels[["report_id", "label"]], on="report_id", how="inner")
    return pd.DataFrame({
        "model": "Analyst", "mode": "analyst", "condition": Condition.ORIGINAL.value,
        "report_id": df["report_id"], "ticker": df["ticker"], "sector": df["sector"],
        "answer": df["analyst_rating"].astype(object), "parsed": df["analyst_rating"].notna(),
        "reference_rating": df["analyst_rating"].astype(object), "label": df["label"],
        "p_bullish": np.nan, "p_neutral": np.nan, "p_bearish": np.nan,
    })


# --------------------------------------------------------------------------------------
# 6. The stage
# --------------------------------------------------------------------------------------



@dataclass
class ScoringResult:
    """Everything stage 04 produced, for the notebook to display."""

    rows: pd.DataFrame
    metrics: pd.DataFrame
    tests: pd.DataFrame
    tables: dict[str, pd.DataFrame]
    transitions: pd.DataFrame
    confusion: pd.DataFrame
    report: dict
    plumbing: tuple[str, ...] = ()    # table rows whose registry record has `plumbing: true`
    figures: dict = field(default_factory=dict)   # name -> the saved figure (closed, displayable) or None


def confusion_long(rows: pd.DataFrame) -> pd.DataFrame:
    """Confusion matrices (label x answer counts) per model x condition, parsed & labelled rows,
    with each label row's N (all rows with that label) and parse rate (share of them parsed)."""
    recs = []
    for (model, cond), g in rows.groupby(["model", "condition"], sort=True):
        tab = confusion(g["answer"], g["label"])
        for lab in tab.index:
            with_label = g[g["label"] == lab]
            n = int(len(with_label))
            recs.append({"model": model, "condition": cond, "label": lab, **tab.loc[lab].to_dict(), "n": n,
                         "parse_rate": float(with_label["parsed"].mean()) if n else np.nan})
    return pd.DataFrame.from_records(recs)


def score_all(predictions: pd.DataFrame, conditions: pd.DataFrame, labels: pd.DataFrame,
              reports: pd.DataFrame, reps: int, seed: int, ci: float = 0.95,
              registry: dict | None = None) -> ScoringResult:
    """Pure core of the stage (no disk): parse, score, test and lay out the tables.

    `registry` (name -> `ModelSpec`) supplies each model's `paper_name` (to point at the paper's
    row) and `plumbing` flag; without it no model is matched or flagged.
    """
    registry = registry or {}
    paper_names = {n: s.paper_name for n, s in registry.items() if getattr(s, "paper_name", None)}
    scored = score_frame(predictions, conditions, labels, reports)
    analyst = analyst_rows(reports, labels)
    all_rows = pd.concat([scored.rows, analyst], ignore_index=True)
    metrics = pd.concat([metrics_long(all_rows, reps, seed, ci), kl_metrics(scored.rows, reps, seed, ci)],
                        ignore_index=True)
    tests = paired_tests(scored.rows, reps=reps, seed=seed, ci=ci)
    tables = {}
    for spec in TABLE_SPECS:
        for parsed in (False, True):
            tables[spec.parsed_name if parsed else spec.name] = build_table(
                spec, metrics, tests, all_rows, scored.skipped, paper_names, ci, scored.not_answered, parsed)
        tables[f"{spec.name}_ci"] = ci_table(spec, metrics)
    parse = (scored.rows.groupby(["model", "condition"])["parsed"].agg(["size", "mean"])
             .rename(columns={"size": "n", "mean": "parse_rate"}).reset_index())
    report = {**scored.counts, "bootstrap_reps": reps, "ci": ci, "seed": seed,
              "skipped": scored.skipped.to_dict(orient="records"),
              "not_answered_by_error": scored.not_answered.to_dict(orient="records"),
              "parse_rate": parse.to_dict(orient="records"),
              "analyst_reports_with_label": int(len(analyst)),
              "main_cells": "Eq. 1 over all answered items (unparsed = no match); *_parsed tables: parsed only",
              "averages": f"'{AVERAGE}' = pooled rate ('{POOLED}'); '{SECTOR_MEAN}' beside it",
              "printed_average_agreement": printed_average_agreement()}
    plumbing = tuple(sorted(m for m in scored.rows["model"].unique()
                            if getattr(registry.get(base_model(m)), "plumbing", False)))
    return ScoringResult(all_rows, metrics, tests, tables, fake_transitions(scored.rows),
                         confusion_long(all_rows), report, plumbing)




def scoring_params(cfg: RunConfig) -> dict:
    """The `scoring:` section, checked: every key documented in params/default.yaml, none defaulted."""
    return cfg.section("scoring")


SECTION = "scoring"
# what notebook 04 calls besides `run` and `summary`
NOTEBOOK_API = ("parse_note_table", "parse_rate_table", "pooled_views", "reading_note")
# the tables of `result.tables` notebook 04 shows by name
TABLES = ("table4_herding_with_without", "table4_herding_with_without_parsed", "table5_herding_fake",
          "table6_accuracy_with_without", "table7_accuracy_no_opinion")
REPORT_KEYS = ("not_answered", "not_answered_by_error")  # the keys of `result.report` notebook 04 reads


def run(cfg: RunConfig) -> ScoringResult:
    """Stage 04: read the 00-03 artifacts, score, write metrics/tests/report and Tables 4-7."""
    from finlib.finbias.inference.stage import (
        inference_params,  # here, not at the top: stage 03 imports this module's parser
    )

    sc = scoring_params(cfg)
    registry = load_registry(cfg.path(inference_params(cfg)["registry"]))
    res = score_all(read_frame(cfg, "predictions"), read_frame(cfg, "conditions"), read_frame(cfg, "labels"),
                    read_frame(cfg, "reports"), reps=int(sc["bootstrap_reps"]), seed=cfg.seed,
                    ci=float(sc["ci"]), registry=registry)
    write_frame(cfg, "metrics", res.metrics)
    write_frame(cfg, "paired_tests", res.tests)
    write_json(cfg, "scoring_report", res.report)
    write_tables(cfg, res)
    res.figures["fig_herding_accuracy"] = closed(plot_herding(cfg, res))
    return res


def closed(fig):
    """The figure, saved already, closed in pyplot: a notebook shows it where it wants it (not at the end
    of the cell that ran the stage), and no figure piles up. None stays None (not drawn)."""
    if fig is not None:
        import matplotlib.pyplot as plt

        plt.close(fig)
    return fig


def write_tables(cfg: RunConfig, res: ScoringResult) -> None:
    """Tables 4-7 (all answers, parsed only, long form with CIs) and the stage's other tables, with
    their captions."""
    note = averaging_note(res.report["printed_average_agreement"])
    for spec in TABLE_SPECS:
        write_table(cfg, spec.name, res.tables[spec.name], caption_for(spec, note))
        write_table(cfg, spec.parsed_name, res.tables[spec.parsed_name], caption_for(spec, note, parsed=True))
        write_table(cfg, f"{spec.name}_ci", res.tables[f"{spec.name}_ci"],
                    f"{spec.caption}: values ({spec.metric} = Eq. 1 over all answers, {spec.parsed_metric} = parsed "
                    f"only), {ci_percent(res.report['ci'])} % cluster-bootstrap CIs over firms, N and parse rate "
                    "(long form)")
    write_table(cfg, "table5_fake_transitions", res.transitions,
                "Fake-rating transitions: analyst rating -> fake rating shown -> model answer (counts, shares; "
                "parse_rate = share of the analyst x fake group's answers that parsed)")
    write_table(cfg, "table_paired_tests", res.tests,
                "Paired tests between conditions on the same reports (exact McNemar with the paired difference "
                "rate_a - rate_b and its cluster-bootstrap CI; Stuart-Maxwell; p_holm: Holm across models)",
                float_format="{:.4g}")
    extra = res.metrics[res.metrics["metric"].isin(["prob_herding", "kl_divergence"])]
    write_table(cfg, "table_prob_herding_kl", extra,
                "Beyond the paper (label-scored models): mean probability on the reference rating per condition, "
                "and mean per-report KL divergence between conditions' label distributions", float_format="{:.4f}")
    write_table(cfg, "table_conditions", conditions_table(res.metrics),
                "Pooled herding and accuracy (Eq. 1 over all N answered items, %) per model and declared condition, "
                "the conditions in the condition table's order (finlib.finbias.conditions), N in parentheses; '–' = "
                "no answered item")
    write_table(cfg, "table_confusion", res.confusion,
                "Confusion matrices: return-based label (rows) x answer, over parsed answers; n = rows with "
                "that label, parse_rate = share of them parsed")


def conditions_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per model and metric (herding, accuracy), one column per declared condition in its place
    (`finlib.finbias.conditions`), headed by its label: the pooled rate in % with its N. Every declared
    condition gets its column, so a condition no model answered shows as '–' instead of vanishing."""
    m = metrics[(metrics["sector"] == POOLED) & metrics["metric"].isin([HERDING, ACCURACY])
                & (metrics["model"] != "Analyst")]
    recs = condition_table.in_table_order()
    rows = []
    for (model, metric), g in m.groupby(["model", "metric"], sort=True):
        cells = g.set_index("condition")
        row = {"Model": model, "Metric": metric}
        for rec in recs:
            c = cells.loc[rec.name] if rec.name in cells.index else None
            ok = c is not None and pd.notna(c["value"])
            row[rec.label] = f"{100 * c['value']:.1f} (N={int(c['n'])})" if ok else "–"
        rows.append(row)
    return pd.DataFrame(rows, columns=["Model", "Metric", *(r.label for r in recs)])


def ci_percent(ci: float) -> str:
    """`scoring.ci` as the captions print it: 0.95 -> "95", 0.9 -> "90"."""
    return f"{100 * ci:g}"


# --------------------------------------------------------------------------------------
# 7. Notebook helpers (display only)
# --------------------------------------------------------------------------------------

def reading_note(cfg: RunConfig, res: ScoringResult) -> str:
    """How to read this run's tables, from the run itself: its data source, the models it scored and
    which of them are plumbing models (the notebook's prose names what the run has, not one model)."""
    models = sorted(m for m in res.metrics["model"].unique() if m != "Analyst")
    plumbing = [m for m in models if m in set(res.plumbing)]
    data = "**synthetic** (finlib's seeded market)" if cfg.is_synthetic else "real reports"
    named = ", ".join(f"`{m}`" + (" (plumbing model)" if m in plumbing else "") for m in models) or "none"
    text = f"This run's data are {data}; models scored: {named}."
    if plumbing:
        text += (" A plumbing model (`plumbing: true` in the registry) tests the pipeline: when its label preference "
                 "barely depends on the report (stage 03's probabilities), herding mostly measures how often the "
                 "reference rating happens to be the one it prefers, and accuracy how often the label is.")
    if cfg.is_synthetic or plumbing:
        text += (" The tables show that parsing, joins, intervals, tests and the paper side by side work end to end; "
                 "research conclusions need real reports and capable models (`params/<run>.yaml`).")
    return text


def plumbing_summary(rows: pd.DataFrame, model: str) -> pd.DataFrame:
    """This run's own numbers for a plumbing model, per condition: N, parse rate, mean
    p_bullish (label-scored rows) and share of parsed answers that are bullish."""
    g = rows[rows["model"] == model]
    out = g.groupby("condition").agg(n=("parsed", "size"), parse_rate=("parsed", "mean"),
                                     mean_p_bullish=("p_bullish", "mean"))
    parsed = g[g["parsed"]]
    out["share_bullish"] = (parsed["answer"] == Rating.BULLISH.value).groupby(parsed["condition"]).mean()
    order = list(condition_table.names())
    return out.reindex([c for c in order if c in out.index] + [c for c in out.index if c not in order])


def _summary_line(model: str, summ: pd.DataFrame) -> str:
    parts = []
    for cond, r in summ.iterrows():
        p = f"mean p_bullish {r['mean_p_bullish']:.2f}, " if np.isfinite(r["mean_p_bullish"]) else ""
        sb = f"{100 * r['share_bullish']:.0f} %" if np.isfinite(r["share_bullish"]) else "–"
        parts.append(f"{cond}: {p}bullish answers {sb}, parsed {100 * r['parse_rate']:.0f} % of {int(r['n'])}")
    return (f"**Plumbing model: {model}** (registry `plumbing: true`): it only tests the pipeline. Measured "
            f"in this run — {'; '.join(parts)}. When one label dominates whatever the report says, herding "
            "and accuracy mostly reflect how often the reference rating or the label is that label.")


def summary(cfg: RunConfig, result: ScoringResult) -> str:
    """Markdown warning shown above the tables: synthetic data, plumbing model(s) with this run's
    own measured label preference (never a number quoted from another run)."""
    res = result
    lines = []
    if cfg.is_synthetic:
        lines.append("**Synthetic data.** These numbers come from the seeded synthetic market and synthetic "
                     "reports: they test the pipeline, they are not research results.")
    for model in res.plumbing:
        lines.append(_summary_line(model, plumbing_summary(res.rows, model)))
    return "\n\n".join(f"> ⚠️ {line}" for line in lines) or "(real data, no plumbing model)"


def pooled_views(res: ScoringResult) -> dict[str, pd.DataFrame]:
    """The pooled rows the notebook shows: Table 4's intervals, paired tests, probability-level
    herding and KL, and the confusion matrices."""
    t4 = res.tables["table4_herding_with_without_ci"]
    m = res.metrics
    return {
        "table4_ci_pooled": t4[t4["sector"] == POOLED].reset_index(drop=True),
        "paired_tests_pooled": (res.tests[res.tests["sector"] == POOLED].reset_index(drop=True)
                                if not res.tests.empty else res.tests),
        "prob_herding_kl_pooled": m[m["metric"].isin(["prob_herding", "kl_divergence"])
                                    & (m["sector"] == POOLED)].reset_index(drop=True),
        "confusion": res.confusion,
    }


def parse_rate_table(res: ScoringResult) -> pd.DataFrame:
    """Parse rate and row counts per model x condition (skipped conditions listed with reason)."""
    pr = pd.DataFrame(res.report["parse_rate"])
    if pr.empty:
        pr = pd.DataFrame(columns=["model", "condition", "n", "parse_rate"])
    sk = pd.DataFrame(res.report["skipped"])
    if not sk.empty:
        sk = sk.rename(columns={"n": "n_skipped", "reason": "skip_reason"})
        pr = pr.merge(sk, on=["model", "condition"], how="outer")
    pr["parse_rate"] = (100 * pd.to_numeric(pr["parse_rate"], errors="coerce")).round(1)  # % like every table
    pr = pr.rename(columns={"parse_rate": "parse rate %"})
    return pr.sort_values(["model", "condition"]).reset_index(drop=True)


def parse_note_table(res: ScoringResult) -> pd.DataFrame:
    """How each model x condition's answers were read (json, statement, echo, ambiguous, …)."""
    notes = pd.DataFrame(res.report.get("parse_notes", []))
    if notes.empty:
        return notes
    return notes.pivot_table(index=["model", "condition"], columns="parse_note", values="n",
                             fill_value=0, aggfunc="sum").reset_index()


def plot_herding(cfg: RunConfig, res: ScoringResult):
    """Pooled herding (and accuracy) per condition with `scoring.ci` intervals; PNG + PDF under figures/<run>/.

    Bars are the tables' main cells (the paper's Eq. 1 over all answered items, unparsed = no
    match), with N (answered items) on each bar and "no parsed answers" in the legend when none parsed.
    A run without any pooled value draws nothing and says so (no empty panels).

    The title says "synthetic data" on synthetic runs and names the plumbing models when any
    (registry `plumbing: true`): their numbers only test the pipeline.
    """
    import matplotlib.pyplot as plt

    from finlib.core.tables import figure_width, save_figure, skip_figure, synthetic_title
    from finlib.finbias.figures.base import (
        MIN_TEXT_PT,
        caption,
        chars_per_line,
        figure_style,
        label_share,
        legend_row_in,
        model_colors,
        panel_grid,
        wrap_lines,
    )

    m = res.metrics[(res.metrics["sector"] == POOLED) & res.metrics["metric"].isin([HERDING, ACCURACY])
                    & (res.metrics["model"] != "Analyst")]
    if m["value"].notna().sum() == 0:
        skip_figure(cfg, "fig_herding_accuracy", "no pooled herding or accuracy value (no answered item)")
        return None
    models = sorted(m["model"].unique())
    colors = model_colors(models)
    conds = list(condition_table.names())
    title = synthetic_title(cfg, "Herding and accuracy by condition (N = answered items; unparsed = no match)")
    if res.plumbing:  # name them only when some bars are not plumbing models
        which = "" if set(res.plumbing) >= set(models) else f" ({', '.join(res.plumbing)})"
        title += f" — plumbing model{which}: not a research result"
    with figure_style():
        nrows, ncols = panel_grid(cfg, 2, 2)
        fig, axes = plt.subplots(nrows, ncols, figsize=(figure_width(cfg), 3.4 * nrows), sharey=True, squeeze=False)
        axes = axes.ravel()
        width = 0.8 / max(len(models), 1)
        for ax, metric in zip(axes, [HERDING, ACCURACY]):
            for i, model in enumerate(models):
                d = m[(m["model"] == model) & (m["metric"] == metric)].set_index("condition").reindex(conds)
                x = np.arange(len(conds)) + i * width
                err = np.vstack([d["value"] - d["ci_low"], d["ci_high"] - d["value"]]).clip(min=0)
                shown = model if (d["parse_rate"].fillna(0) > 0).any() else f"{model} (no parsed answers)"
                bars = ax.bar(x, 100 * d["value"], width, yerr=100 * np.nan_to_num(err), label=shown, capsize=3,
                              color=colors[model])
                # N under each bar: a 100 % from one answer must not read like a result.
                ax.bar_label(bars, labels=[f"N={int(n)}" if pd.notna(n) else "" for n in d["n"]],
                             label_type="center", fontsize=MIN_TEXT_PT, color="white")
            ax.set_xticks(np.arange(len(conds)) + width * (len(models) - 1) / 2, conds, rotation=20)
            ax.set_title(f"{metric.removesuffix('_all')} (Eq. 1, pooled, {ci_percent(res.report['ci'])} % CI)")
            ax.set_ylabel("%")
        handles, labels = axes[0].get_legend_handles_labels()
        labels = [wrap_lines(label, label_share(fig)) for label in labels]
        ncol = min(len(handles), 3)
        while ncol > 1 and legend_row_in(labels, ncol) > fig.get_figwidth():  # never wider than the figure
            ncol -= 1
        fig.legend(handles, labels, loc="lower center", ncol=ncol, bbox_to_anchor=(0.5, 0.0))
        fig.suptitle("\n".join(textwrap.wrap(title, chars_per_line(figure_width(cfg), MIN_TEXT_PT + 1))),
                     fontsize=MIN_TEXT_PT + 1)
        legend_in = 0.15 * sum(label.count("\n") + 1 for label in labels[::ncol]) + 0.1  # 7 pt lines + gap
        fig.tight_layout(rect=(0, legend_in / fig.get_figheight(), 1, 1))
    save_figure(cfg, fig, "fig_herding_accuracy", caption=caption(
        cfg, "Pooled herding and accuracy per condition and model (Eq. 1 over all N answered items, an unparsed "
             f"answer counting as no match) with {ci_percent(res.report['ci'])} % cluster-bootstrap intervals; N on "
             "each bar (stage 04)."))
    return fig

