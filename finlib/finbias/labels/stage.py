"""Stage 01: return-based ground-truth ratings (Fin-Bias Appendix A.1), as tables, a report and figures.

Analyst ratings are biased upward, so the paper grades every rating (the analyst's and each
model's) against what the stock did next: the 60-trading-day cumulative abnormal return (CAR)
after the report under the market model, bucketed per report year into the bottom 30 %
(bearish), middle 40 % (neutral) and top 30 % (bullish). The computation (both estimators,
timing, exclusions, buckets) is `finlib.finbias.labels.market_model`; this module runs it both ways for
a run, compares the methods, writes `labels.parquet` and the stage report, and draws the figures.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from finlib.core.config import RunConfig
from finlib.core.tables import figure_width, skip_figure, write_table
from finlib.finbias.data.stage import table3_half
from finlib.finbias.figures.base import (
    ALTERNATIVE_GREYS,
    RATING_COLORS,
    figure_style,
    finish,
    legend_outside,
)
from finlib.finbias.labels.market_model import (
    EXCLUSION_REASONS,
    METHODS,
    build_panel,
    labels_from_panel,
    options_from_params,
)
from finlib.finbias.vocab import POOLED, RATINGS, SECTOR_MEAN, SECTORS, Rating

SECTION = "labels"
NOTEBOOK_API = ("agreement_markdown", "recovery_view")  # what notebook 01 calls besides `run` and `summary`
# the tables of `result.tables` notebook 01 shows by name
TABLES = ("analyst_accuracy_by_sector", "labels_beta_distribution", "labels_car_by_year", "labels_exclusions",
          "labels_method_agreement", "labels_shares_by_year", "table3_return_ratings")
REPORT_KEYS = ("agreement",)  # the keys of `result.report` notebook 01 reads
# Average rows of the analyst accuracy table (the names stage 04 uses).
PRINTED = "Average (printed in the paper)"
SMALL_YEAR = 10  # years with fewer labelled events are flagged: 30/40/30 holds only up to rounding


# =========================================================================== stage 01

def other_method(method: str) -> str:
    """The robustness method reported beside the primary one."""
    if method not in METHODS:
        raise ValueError(f"labels.method must be one of {METHODS}, got '{method}'")
    return METHODS[1 - METHODS.index(method)]


def label_both_methods(events: pd.DataFrame, prices: pd.DataFrame, market: pd.Series | pd.DataFrame,
                       primary: str, options: dict) -> tuple[pd.DataFrame, dict]:
    """The primary method's columns plus the other method's with a `_<method>` suffix, and the
    price panel's diagnostics (counts for the stage report).

    ``options``: ``options_from_params(params)`` (window included).
    """
    other = other_method(primary)
    opts = dict(options)
    window = opts.pop("window")
    panel = build_panel(prices, market)
    a = labels_from_panel(events, panel, window=window, method=primary, **opts)
    b = labels_from_panel(events, panel, window=window, method=other, **opts)
    b = b.rename(columns={c: f"{c}_{other}" for c in b.columns if c != "report_id"})
    return a.merge(b, on="report_id", how="left", validate="one_to_one"), panel.diagnostics


def _suffix(method: str, primary: str) -> str:
    return "" if method == primary else f"_{method}"


def exclusion_counts(labels: pd.DataFrame, primary: str) -> pd.DataFrame:
    """Events per exclusion reason for both methods (every reason listed, zeros included)."""
    rows = []
    for reason in EXCLUSION_REASONS:
        row = {"reason": reason}
        for m in (primary, other_method(primary)):
            row[f"n_{m}"] = int((labels[f"excluded_reason{_suffix(m, primary)}"] == reason).sum())
        rows.append(row)
    total = {"reason": "total excluded"}
    for m in (primary, other_method(primary)):
        total[f"n_{m}"] = int(labels[f"excluded_reason{_suffix(m, primary)}"].notna().sum())
    return pd.DataFrame(rows + [total])


def _years(labels: pd.DataFrame, reports: pd.DataFrame) -> pd.Series:
    dates = reports.set_index("report_id")["date"]
    return pd.Series(pd.DatetimeIndex(pd.to_datetime(labels["report_id"].map(dates))).year,
                     index=labels.index, name="year")


def label_shares_by_year(labels: pd.DataFrame, reports: pd.DataFrame, suffix: str = "") -> pd.DataFrame:
    """Counts and shares of each label per report year: 30/40/30 up to rounding by construction."""
    lab = labels[f"label{suffix}"]
    df = pd.DataFrame({"year": _years(labels, reports), "label": lab})[lab.notna()]
    rows = []
    for year, g in df.groupby("year", sort=True):
        n = len(g)
        row = {"year": int(year), "n": n}
        for r in (Rating.BEARISH, Rating.NEUTRAL, Rating.BULLISH):
            row[r.value] = int((g["label"] == r.value).sum())
        for r in (Rating.BEARISH, Rating.NEUTRAL, Rating.BULLISH):
            row[f"share_{r.value}"] = 100.0 * row[r.value] / n
        row["small_year"] = n < SMALL_YEAR
        rows.append(row)
    cols = ["year", "n", "bearish", "neutral", "bullish", "share_bearish", "share_neutral", "share_bullish",
            "small_year"]
    return pd.DataFrame(rows, columns=cols)


def car_by_year(labels: pd.DataFrame, reports: pd.DataFrame, suffix: str = "") -> pd.DataFrame:
    """Distribution of CAR per report year, with the realised bucket boundaries."""
    df = pd.DataFrame({"year": _years(labels, reports), "car": labels[f"car{suffix}"],
                       "label": labels[f"label{suffix}"]}).dropna(subset=["car"])
    rows = []
    for year, g in df.groupby("year", sort=True):
        c = g["car"]
        rows.append({"year": int(year), "n": len(c), "mean": c.mean(), "std": c.std(ddof=1),
                     "min": c.min(), "p25": c.quantile(0.25), "median": c.median(), "p75": c.quantile(0.75),
                     "max": c.max(),
                     "bearish_max": g.loc[g.label == Rating.BEARISH.value, "car"].max(),
                     "bullish_min": g.loc[g.label == Rating.BULLISH.value, "car"].min()})
    return pd.DataFrame(rows, columns=["year", "n", "mean", "std", "min", "p25", "median", "p75", "max",
                                       "bearish_max", "bullish_min"])


def beta_distribution(labels: pd.DataFrame, primary: str) -> pd.DataFrame:
    """Summary of the estimated betas of both methods (plausibility: centred near 1)."""
    rows = []
    for m in (primary, other_method(primary)):
        b = labels[f"beta{_suffix(m, primary)}"].dropna()
        q = b.quantile([0.05, 0.25, 0.5, 0.75, 0.95]) if len(b) else pd.Series(np.nan, index=[0.05, 0.25, 0.5,
                                                                                              0.75, 0.95])
        rows.append({"method": m, "n": len(b), "mean": b.mean(), "std": b.std(ddof=1), "min": b.min(),
                     "p5": q[0.05], "p25": q[0.25], "median": q[0.5], "p75": q[0.75], "p95": q[0.95],
                     "max": b.max()})
    return pd.DataFrame(rows)


def method_agreement(labels: pd.DataFrame, primary: str) -> pd.DataFrame:
    """Cross-tabulation of the two methods' labels (excluded events as their own row/column)."""
    other = other_method(primary)
    cats = [r.value for r in RATINGS] + ["excluded"]
    a = labels["label"].fillna("excluded")
    b = labels[f"label_{other}"].fillna("excluded")
    tab = pd.crosstab(pd.Categorical(a, cats), pd.Categorical(b, cats), dropna=False)
    tab = tab.reindex(index=cats, columns=cats, fill_value=0).astype(int)
    tab.columns.name = None
    tab["total"] = tab.sum(axis=1)
    tab.insert(0, f"{primary} \\ {other}", cats)
    return tab.reset_index(drop=True)


def agreement_rate(labels: pd.DataFrame, primary: str) -> dict:
    """Share of events labelled by both methods that get the same label."""
    other = other_method(primary)
    both = labels["label"].notna() & labels[f"label_{other}"].notna()
    same = int((labels.loc[both, "label"] == labels.loc[both, f"label_{other}"]).sum())
    n = int(both.sum())
    return {"n_both": n, "n_same": same, "rate": same / n if n else None}


def table3_return_ratings(labels: pd.DataFrame) -> pd.DataFrame:
    """Fin-Bias Table 3, lower half (return-based ratings), ours beside the paper's."""
    return table3_half(labels["label"], "return_based")


def analyst_accuracy_by_sector(labels: pd.DataFrame, reports: pd.DataFrame) -> pd.DataFrame:
    """The analyst's own rating scored against the return-based label, per sector (Tables 6-7, Analyst row).

    Reports without an analyst rating or without a label are left out and counted. Two
    averages, as in stage 04: "Average (pooled)" scores all reports together (large sectors
    weigh more), "Mean of sectors" is the unweighted mean over the paper's nine sectors that
    have scored reports. The paper's printed Average matches the pooled rate in most cells (the
    plain mean of sectors in a few); it is carried on its own row.
    """
    from finlib.core.tables import paper_table

    df = reports[["report_id", "sector", "analyst_rating"]].merge(
        labels[["report_id", "label"]], on="report_id", how="left", validate="one_to_one")
    scored = df["analyst_rating"].notna() & df["label"].notna()
    t6 = paper_table("finbias_table6")
    t6 = t6[t6["model"] == "Analyst"].set_index("sector")["with_rating"]
    t7 = paper_table("finbias_table7")
    t7 = t7[t7["model"] == "Analyst"].set_index("sector")["accuracy"]
    extra = sorted(set(df["sector"].dropna()) - set(SECTORS))
    rows = []
    for sector in list(SECTORS) + extra + [POOLED]:
        g = df if sector == POOLED else df[df["sector"] == sector]
        s = scored[g.index]
        hits = (g.loc[s, "analyst_rating"] == g.loc[s, "label"]).sum()
        rows.append({"sector": sector, "n_reports": len(g), "n_scored": int(s.sum()),
                     "n_no_analyst_rating": int(g["analyst_rating"].isna().sum()),
                     "n_no_label": int(g["label"].isna().sum()),
                     "accuracy": 100.0 * hits / s.sum() if s.sum() else np.nan,
                     "paper_table6": t6.get(sector, np.nan), "paper_table7": t7.get(sector, np.nan)})
    out = pd.DataFrame(rows)
    nine = out[out["sector"].isin(SECTORS)]
    mean_row = {"sector": SECTOR_MEAN, "n_reports": int(nine["n_reports"].sum()),
                "n_scored": int(nine["n_scored"].sum()),
                "n_no_analyst_rating": int(nine["n_no_analyst_rating"].sum()),
                "n_no_label": int(nine["n_no_label"].sum()),
                "accuracy": float(nine["accuracy"].mean()) if nine["accuracy"].notna().any() else np.nan,
                "paper_table6": float(nine["paper_table6"].mean()), "paper_table7": float(nine["paper_table7"].mean())}
    printed = {"sector": PRINTED, "n_reports": pd.NA, "n_scored": pd.NA, "n_no_analyst_rating": pd.NA,
               "n_no_label": pd.NA, "accuracy": np.nan,
               "paper_table6": t6.get("Average", np.nan), "paper_table7": t7.get("Average", np.nan)}
    out = pd.concat([out, pd.DataFrame([mean_row, printed])], ignore_index=True)
    for c in ("n_reports", "n_scored", "n_no_analyst_rating", "n_no_label"):
        out[c] = out[c].astype("Int64")
    return out


def synthetic_recovery(labels: pd.DataFrame, truth: pd.DataFrame, primary: str) -> pd.DataFrame:
    """Does the label pipeline recover the planted signal? corr(CAR, q), corr(mean AR, drift), corr(beta)."""
    df = labels.merge(truth.rename(columns={"beta": "beta_true"}), on="report_id", how="inner",
                      validate="one_to_one")
    rows = []
    for m in (primary, other_method(primary)):
        s = _suffix(m, primary)
        # mean daily abnormal return: the paper's is alpha itself (CAR = window x alpha)
        mean_ar = df[f"alpha{s}"] if m == "paper" else df[f"car{s}"] / df[f"n_obs{s}"]
        for quantity, est, true in (("CAR vs planted quality q", df[f"car{s}"], df["q"]),
                                    ("mean daily AR vs planted drift", mean_ar, df["drift"]),
                                    ("estimated vs true beta", df[f"beta{s}"], df["beta_true"])):
            ok = est.notna() & true.notna()
            n = int(ok.sum())
            rows.append({"method": m, "quantity": quantity, "n": n,
                         "pearson": est[ok].corr(true[ok]) if n > 2 else np.nan,
                         "spearman": est[ok].corr(true[ok], method="spearman") if n > 2 else np.nan})
    return pd.DataFrame(rows)


def labels_report(labels: pd.DataFrame, reports: pd.DataFrame, primary: str, options: dict,
                  diagnostics: dict, truth: pd.DataFrame | None = None) -> dict:
    """The stage report: choices, counts, exclusions by reason, per-year shares, agreement."""
    other = other_method(primary)
    methods = {}
    for m in (primary, other):
        s = _suffix(m, primary)
        lab = labels[f"label{s}"]
        methods[m] = {
            "n_labelled": int(lab.notna().sum()),
            "n_excluded": int(labels[f"excluded_reason{s}"].notna().sum()),
            "exclusions": {r: int((labels[f"excluded_reason{s}"] == r).sum()) for r in EXCLUSION_REASONS},
            "label_counts": {r.value: int((lab == r.value).sum()) for r in RATINGS},
        }
    years = label_shares_by_year(labels, reports)
    rep = {
        "stage": "01_labels",
        "method": primary,
        "other_method": other,
        "options": {k: (list(v) if isinstance(v, tuple) else v) for k, v in options.items()},
        "timing": ("day 0 = the report date if a trading day, else the last trading day before it; "
                   "event window = days +1..+window; paper CAR = window x alpha"),
        "tie_rule": "per report year, stable sort by (car, report_id); counts round half down (ties -> neutral)",
        "n_events": int(len(labels)),
        "methods": methods,
        "agreement": agreement_rate(labels, primary),
        "years": {str(r.year): {"n": int(r.n), "bearish": int(r.bearish), "neutral": int(r.neutral),
                                "bullish": int(r.bullish)} for r in years.itertuples()},
        "small_years": [int(y) for y in years.loc[years["small_year"], "year"]],
        "small_year_threshold": SMALL_YEAR,
        "panel": diagnostics,
    }
    if truth is not None:
        rep["synthetic_recovery"] = synthetic_recovery(labels, truth, primary).to_dict(orient="records")
    return rep


def report_markdown(report: dict) -> str:
    """One line for notebook 01: events, labelled / excluded per method, small years, panel notes."""
    primary, other = report["method"], report["other_method"]
    m = report["methods"]
    return (f"**{report['n_events']} reports**; {primary}: {m[primary]['n_labelled']} labelled, "
            f"{m[primary]['n_excluded']} excluded; {other}: {m[other]['n_labelled']} labelled. "
            f"Small years (< {report['small_year_threshold']} reports): {report['small_years']}. "
            f"Panel: {report['panel']}")


def agreement_markdown(rate: dict) -> str:
    """The paper-vs-MacKinlay agreement as "n_same / n_both = x %" (no rate when nothing was labelled twice)."""
    pct = f" = {100 * rate['rate']:.1f} %" if rate["rate"] is not None else ""
    return f"Agreement: **{rate['n_same']} / {rate['n_both']}**{pct}"


@dataclass(frozen=True)
class LabelsResult:
    """What stage 01 produced, so the notebook needs no second read of the artifacts."""

    labels: pd.DataFrame
    report: dict
    reports: pd.DataFrame          # stage 00's reports (dates and sectors for the tables)
    truth: pd.DataFrame | None     # synthetic runs only: the planted signal
    primary: str                   # params labels.method
    window: int                    # params labels.window
    quantiles: tuple[float, float] = (0.30, 0.70)  # params labels.quantiles
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)   # written tables, by name
    figures: dict[str, Any] = field(default_factory=dict)           # drawn figures (None: not drawn)


def label_settings(cfg) -> tuple[str, dict]:
    """The primary method and compute_labels options, read once from params `labels:` (checked by the schema)."""
    params = cfg.section("labels")
    if "method" not in params:
        raise ValueError(f"{cfg.params_file}: labels.method is not set (one of {METHODS})")
    primary = params["method"]
    other_method(primary)  # validates the name
    return primary, options_from_params(params)


def bucket_split(quantiles: tuple[float, float]) -> str:
    """The per-year split the buckets make, in percent, as captions print it: (0.3, 0.7) -> "30/40/30"."""
    lo, hi = (float(q) for q in quantiles)
    return "/".join(f"{round(100 * share, 4):g}" for share in (lo, hi - lo, 1 - hi))


def label_run(cfg) -> LabelsResult:
    """Read stage 00's artifacts, label both ways, write labels.parquet and labels_report.json
    (the tables and figures are `run`'s)."""
    from finlib.core.artifacts import artifact_path, read_frame, write_frame, write_json

    primary, options = label_settings(cfg)
    reports = read_frame(cfg, "reports")
    prices = read_frame(cfg, "prices")
    market = read_frame(cfg, "market")
    truth = read_frame(cfg, "truth") if artifact_path(cfg, "truth").is_file() else None
    labels, diagnostics = label_both_methods(reports[["report_id", "ticker", "date"]], prices, market,
                                             primary, options)
    report = labels_report(labels, reports, primary, options, diagnostics, truth)
    write_frame(cfg, "labels", labels)
    write_json(cfg, "labels_report", report)
    return LabelsResult(labels, report, reports, truth, primary, int(options["window"]),
                        tuple(options["quantiles"]))


def write_tables(cfg: RunConfig, res: LabelsResult) -> dict[str, pd.DataFrame]:
    """Stage 01's tables, written with captions built from the run's params (method, window, quantiles)."""
    labels, reports, primary, window = res.labels, res.reports, res.primary, res.window
    split, rate = bucket_split(res.quantiles), res.report["agreement"]
    specs = [
        ("labels_exclusions", exclusion_counts(labels, primary),
         f"Reports without a return-based label, by reason ({window}-day event window; both estimators).", {}),
        ("table3_return_ratings", table3_return_ratings(labels),
         f"Return-based ratings (Fin-Bias Table 3, lower half): {primary} market model, {window}-day CAR, "
         f"year-specific {split} buckets; the paper's counts and shares beside ours.", {}),
        ("labels_shares_by_year", label_shares_by_year(labels, reports),
         f"Return-based labels per report year ({primary} method): counts and shares (%); "
         f"small_year = fewer than {SMALL_YEAR} labelled reports, where {split} holds only up to rounding.", {}),
        ("labels_car_by_year", car_by_year(labels, reports),
         f"Distribution of the {window}-day CAR by report year ({primary} method), with the realised "
         "bucket boundaries.", {"float_format": "{:.4f}"}),
        ("labels_beta_distribution", beta_distribution(labels, primary),
         "Estimated market-model betas: event window (paper) and pre-event estimation window (MacKinlay).",
         {"float_format": "{:.3f}"}),
        ("labels_method_agreement", method_agreement(labels, primary),
         f"Labels under the paper's estimator vs MacKinlay's: same label for {rate['n_same']} of "
         f"{rate['n_both']} reports labelled by both.", {}),
        ("analyst_accuracy_by_sector", analyst_accuracy_by_sector(labels, reports),
         f"Analyst rating accuracy (%) against the return-based labels ({primary} method) by sector; "
         "the paper's Analyst rows of Tables 6 and 7 beside.", {}),
    ]
    tables = {}
    for name, table, text, options in specs:
        write_table(cfg, name, table, text, **options)
        tables[name] = table
    recovery = write_recovery_table(cfg, res.report)
    if isinstance(recovery, pd.DataFrame):
        tables["labels_synthetic_recovery"] = recovery
    return tables


def draw_figures(cfg: RunConfig, res: LabelsResult) -> dict[str, Any]:
    """Stage 01's figures, saved and closed (the notebook shows them with `show_figure`)."""
    import matplotlib.pyplot as plt

    figures = {"labels_car_by_year": plot_car_by_year(cfg, res.labels, res.reports, res.primary, res.window,
                                                      res.quantiles),
               "labels_beta_distribution": plot_beta_distribution(cfg, res.labels, res.primary)}
    for fig in figures.values():
        if fig is not None:
            plt.close(fig)  # drawn once, shown where the notebook tells the story
    return figures


def run(cfg) -> LabelsResult:
    """Stage 01: read stage 00's artifacts, label both ways, write labels + report, the tables and figures."""
    res = label_run(cfg)
    return dataclasses.replace(res, tables=write_tables(cfg, res), figures=draw_figures(cfg, res))


def summary(cfg, result: LabelsResult) -> str:
    """Notebook 01's first output: the synthetic-data caveat (when it applies) and the headline counts."""
    from finlib.core.tables import SYNTHETIC_CAVEAT

    lines = [f"**{SYNTHETIC_CAVEAT}**"] if cfg.is_synthetic else []
    lines.append(f"Primary method `{result.primary}`, {result.window}-day CAR, year-specific "
                 f"{bucket_split(result.quantiles)} buckets (`labels.quantiles`).")
    lines.append(report_markdown(result.report))
    return "\n\n".join(lines)


def recovery_view(result: LabelsResult) -> pd.DataFrame | str:
    """The planted-signal recovery table of a synthetic run, or why a real run has none."""
    return result.tables.get("labels_synthetic_recovery",
                             "No truth.parquet in this run (real data): there is no planted signal to recover.")


# --------------------------------------------------------------------------- figures

def plot_car_by_year(cfg, labels: pd.DataFrame, reports: pd.DataFrame, primary: str, window: int,
                     quantiles: tuple[float, float] = (0.30, 0.70)):
    """Each report's CAR by year, coloured by its label: the buckets are year-relative."""
    import matplotlib.pyplot as plt

    df = pd.DataFrame({"year": _years(labels, reports), "car": labels["car"], "label": labels["label"]})
    df = df.dropna(subset=["car"])
    years = sorted(df["year"].unique())
    if not years:
        skip_figure(cfg, "labels_car_by_year", "no report has a CAR (every report excluded)")
        return None
    with figure_style():
        fig, ax = plt.subplots(figsize=(figure_width(cfg), 3.4), layout="constrained")
        ax.boxplot([df.loc[df.year == y, "car"] for y in years], positions=range(len(years)), widths=0.5,
                   showfliers=False)
        jitter = np.random.default_rng(0).uniform(-0.15, 0.15, len(df))
        pos = df["year"].map({y: i for i, y in enumerate(years)}).to_numpy() + jitter
        for lab in (Rating.BEARISH.value, Rating.NEUTRAL.value, Rating.BULLISH.value):
            sel = (df["label"] == lab).to_numpy()
            ax.scatter(pos[sel], df["car"].to_numpy()[sel], s=10, color=RATING_COLORS[lab], label=lab, alpha=0.7)
        ax.set_xticks(range(len(years)), [str(y) for y in years])
        ax.axhline(0, color="black", lw=0.5)
        ax.set_xlabel("report year")
        ax.set_ylabel(f"CAR, days +1..+{window} ({primary} method)")
        legend_outside(ax, ncol=3)
    finish(cfg, fig, "labels_car_by_year",
           f"{window}-day CAR (days +1..+{window}, {primary} method) of each report by report year, coloured by "
           f"its return-based label; boxes per year. The buckets are year-relative ({bucket_split(quantiles)} "
           "per year).")
    return fig


def plot_beta_distribution(cfg, labels: pd.DataFrame, primary: str):
    """Histogram of estimated betas for both methods."""
    import matplotlib.pyplot as plt

    betas = {m: labels[f"beta{_suffix(m, primary)}"].dropna() for m in (primary, other_method(primary))}
    if not any(len(b) for b in betas.values()):
        skip_figure(cfg, "labels_beta_distribution", "no market beta estimated (every report excluded)")
        return None
    with figure_style():
        fig, ax = plt.subplots(figsize=(figure_width(cfg), 3.0), layout="constrained")
        for (m, b), color in zip(betas.items(), ALTERNATIVE_GREYS):
            if len(b):
                ax.hist(b, bins=min(40, max(5, len(b) // 3)), alpha=0.6, color=color, label=f"{m} (n={len(b)})")
        ax.axvline(1.0, color="black", lw=0.5)
        ax.set_xlabel("estimated market beta")
        ax.set_ylabel("reports")
        legend_outside(ax, ncol=2)
    finish(cfg, fig, "labels_beta_distribution",
           "Market-model beta per report: event-window estimate (the paper's) beside the estimation-window "
           "estimate (MacKinlay).")
    return fig


def write_recovery_table(cfg, report: dict) -> pd.DataFrame | str:
    """On synthetic runs, write and return the stage report's planted-signal recovery table;
    otherwise say why not."""
    if "synthetic_recovery" not in report:
        return "No truth.parquet in this run (real data): there is no planted signal to recover."
    table = pd.DataFrame(report["synthetic_recovery"])
    write_table(cfg, "labels_synthetic_recovery", table,
                "Recovery of the planted signal: correlation of the estimated CAR with the latent quality q, "
                "of the mean daily abnormal return (alpha for the paper's method, CAR / n_obs for MacKinlay's) with the "
                "planted daily drift, and of estimated with true beta.", float_format="{:.3f}")
    return table
