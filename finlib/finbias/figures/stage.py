"""Stage 06: the paper's figures and the results figures, in one matplotlib style.

Every figure is drawn from artifacts on disk (stages 00-05), saved as PNG + PDF under
`figures/<run>/`, and carries a caption that names its data source and, on the synthetic
default, says "synthetic data". A figure whose input is absent (e.g. stage 05 not run) is not
drawn; the figures report lists it with the reason instead of failing the stage.

The stage contract (`finlib.core.stage`): `SECTION`, `run(cfg)` (draws every figure, writes the
paper-vs-ours tables and `figures_report.json`) and `summary(cfg, result)`; notebook 06 shows each
drawn figure with `show(result, name)`.
"""
from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from finlib.core.artifacts import MissingArtifactError, read_frame, write_json
from finlib.core.config import RunConfig
from finlib.core.tables import figure_width
from finlib.finbias.figures.base import (
    CONDITION_COLORS,
    CONDITION_HATCHES,
    CONDITION_MARKERS,
    HEATMAP_CMAP,
    MIN_TEXT_PT,
    RATING_COLORS,
    VARIANT_COLORS,
    FigureRecord,
    chars_per_line,
    condition_order,
    data_source,
    figure_style,
    finish,
    label_share,
    legend_outside,
    model_colors,
    model_markers,
    panel_grid,
    single_column,
    text_color_on,
    wrap_lines,
)
from finlib.finbias.scoring.metrics import ACCURACY, HERDING
from finlib.finbias.vocab import POOLED, SECTORS, Condition, Rating

SECTION = "figures"
NOTEBOOK_API = ("show",)  # what notebook 06 calls besides `run` and `summary`
TABLES = ("figures", "paper_vs_ours_summary")  # the tables of `result.tables` notebook 06 shows by name
REPORT_KEYS = ()  # the keys of `result.report` notebook 06 reads



def ci_level(cfg: RunConfig) -> str:
    """The interval level every figure's CI was computed at (`scoring.ci`), as captions print it: "95 %"."""
    return f"{100 * float(cfg.section('scoring')['ci']):g} %"

def figures_params(cfg: RunConfig) -> dict:
    """The `figures:` section, checked by the params schema (`finlib.core.params.FiguresSection`:
    misspellings and wrong types are errors); every key is read, so every key is required."""
    return cfg.section("figures")


# ---- Results figures from stage 04's metrics ------------------------------------------------

def _metric(metrics: pd.DataFrame, metric: str) -> pd.DataFrame:
    return metrics[(metrics["metric"] == metric) & (metrics["model"] != "Analyst")]


def plot_herding_heatmap(cfg: RunConfig, metrics: pd.DataFrame) -> tuple[object, FigureRecord]:
    """Herding (%) model x sector, one panel per condition; N (all answered items, Eq. 1) in each cell."""
    import matplotlib.pyplot as plt

    h = _metric(metrics, HERDING)
    if h["value"].notna().sum() == 0:
        raise LookupError("no herding values in metrics.parquet (no answered item in any condition)")
    models = sorted(h["model"].unique())
    cols = [s for s in (*SECTORS, POOLED) if s in set(h["sector"])]
    cmap = plt.get_cmap(HEATMAP_CMAP)
    # a single column has no room for a dozen sector columns side by side: sectors go down the side there
    transpose = single_column(cfg)
    down, across = (cols, models) if transpose else (models, cols)
    row_in = 0.3 * len(cols) if transpose else 0.4 * max(len(models), 1)
    with figure_style():
        order = condition_order()
        rows_of_panels = (len(order) + 1) // 2
        fig, axes = plt.subplots(rows_of_panels, 2, figsize=(figure_width(cfg), rows_of_panels * (1.6 + row_in)),
                                 squeeze=False, constrained_layout=True)
        for ax in axes.ravel()[len(order):]:
            ax.set_axis_off()
        for k, (ax, cond) in enumerate(zip(axes.ravel(), order)):
            d = h[h["condition"] == cond]
            val = d.pivot(index="model", columns="sector", values="value").reindex(index=models, columns=cols)
            cell_n = d.pivot(index="model", columns="sector", values="n").reindex(index=models, columns=cols).fillna(0)
            if transpose:
                val, cell_n = val.T, cell_n.T
            im = ax.imshow(100 * val.to_numpy(float), vmin=0, vmax=100, cmap=cmap, aspect="auto")
            for i in range(len(down)):
                for j in range(len(across)):
                    v = val.iat[i, j]
                    label = "–" if pd.isna(v) else f"{100 * v:.0f}\nN{int(cell_n.iat[i, j])}"
                    ax.text(j, i, label, ha="center", va="center", fontsize=MIN_TEXT_PT,
                            color="#555555" if pd.isna(v) else text_color_on(cmap(float(v))))
            ax.set_xticks(range(len(across)), across if k >= len(order) - 2 else [""] * len(across), rotation=90)
            ax.set_yticks(range(len(down)), down)
            ax.tick_params(labelleft=k % 2 == 0)
            ax.set_title(cond)
            ax.grid(False)
        fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.8, label="herding %")
    n_range = h["n"].dropna()
    n_text = f"N per cell {int(n_range.min())}–{int(n_range.max())} answered items" if len(n_range) else "N unknown"
    rec = finish(cfg, fig, "fig_herding_heatmap",
                 "Herding score (Eq. 1: % of all N answers equal to the reference rating, an unparsed answer "
                 f"counting as no match) by {'sector and model' if transpose else 'model and sector'}, per condition; {n_text} (N under each value; per-cell N also in the "
                 "tables' *_ci companions), '–' = no answers (stage 04 metrics).")
    return fig, rec


def n_by_condition(rates: pd.DataFrame, model: str) -> str:
    """"N 40/38/40/39": the answers each condition's pooled rate of `model` rests on, in `condition_order`."""
    d = rates[(rates["model"] == model) & (rates["sector"] == POOLED)].set_index("condition")["n"]
    return "N " + "/".join(str(int(d[c])) if c in d.index and pd.notna(d[c]) else "0" for c in condition_order())


def _interval(d: pd.DataFrame) -> np.ndarray:
    return 100 * np.vstack([d["value"] - d["ci_low"], d["ci_high"] - d["value"]]).clip(min=0)


def min_sector_n(cfg: RunConfig) -> int:
    """`figures.min_sector_n`: the fewest answers a sector's rate may rest on and still be drawn; below
    it an interval is too wide (or, at N = 1-2, degenerate) for a reader to see at a glance."""
    return int(figures_params(cfg)["min_sector_n"])


def with_without_rows(h: pd.DataFrame, threshold: int) -> tuple[list[tuple[str, str]], int]:
    """(model, sector) rows of the with/without figure: every model's pooled row, then each sector whose
    rate in both conditions rests on at least `threshold` answers; also how many sector rows were left out."""
    rows, hidden = [], 0
    for m in sorted(h["model"].unique()):
        for s in (POOLED, *SECTORS):
            d = h[(h["model"] == m) & (h["sector"] == s) & h["value"].notna()]
            if d.empty:
                continue
            if s == POOLED or (len(d) == 2 and int(d["n"].min()) >= threshold):
                rows.append((m, s))
            else:
                hidden += 1
    return rows, hidden


def n_label(d: pd.DataFrame) -> str:
    """"N o/r" of one row: the answers each condition's rate rests on, in the conditions' order."""
    n = d.set_index("condition")["n"]
    return "N " + "/".join(str(int(n[c])) if c in n.index and pd.notna(n[c]) else "0"
                           for c in ("original", "no_rating"))


def plot_with_without(cfg: RunConfig, metrics: pd.DataFrame) -> tuple[object, FigureRecord]:
    """The headline: herding with vs without the rating, each model pooled over sectors with its interval
    and N, then the sectors whose rates rest on at least `figures.min_sector_n` answers."""
    import matplotlib.pyplot as plt

    h = _metric(metrics, HERDING)
    h = h[h["condition"].isin([Condition.ORIGINAL.value, Condition.NO_RATING.value])]
    threshold = min_sector_n(cfg)
    rows, hidden = with_without_rows(h, threshold)
    with figure_style():
        if not rows:
            raise LookupError("no herding value for original or no_rating in metrics.parquet")
        fig, ax = plt.subplots(figsize=(figure_width(cfg), 1.2 + 0.3 * len(rows)), layout="constrained")
        labels = []
        for y, (m, s) in enumerate(rows):
            d = h[(h["model"] == m) & (h["sector"] == s)]
            labels.append(f"{m} · {s}\n{n_label(d)}")
            d = d.set_index("condition")
            pts = [d.loc[c] if c in d.index else None for c in ("original", "no_rating")]
            xs = [100 * p["value"] for p in pts if p is not None and pd.notna(p["value"])]
            if len(xs) == 2:
                ax.plot(xs, [y, y], color="#bbbbbb", lw=2, zorder=1)
            for cond, p in zip(("original", "no_rating"), pts):
                if p is None or pd.isna(p["value"]):
                    continue
                err = _interval(p.to_frame().T)
                ax.errorbar(100 * p["value"], y, xerr=err, fmt=CONDITION_MARKERS[cond], ms=5 if s == POOLED else 4,
                            capsize=2, color=CONDITION_COLORS[cond], label=cond if y == 0 else None)
        ax.set_yticks(range(len(rows)), [wrap_lines(label, label_share(fig)) for label in labels])
        for tick, (_, s) in zip(ax.get_yticklabels(), rows):
            tick.set_fontweight("bold" if s == POOLED else "normal")
        ax.invert_yaxis()
        ax.set_xlabel(wrap_lines(f"herding % ({ci_level(cfg)} cluster-bootstrap CI)", 0.6 * figure_width(cfg)))
        ax.set_xlim(-2, 102)
        legend_outside(ax)
    n = h[h["sector"] == POOLED]["n"].dropna()
    n_text = f"pooled N {int(n.min())}–{int(n.max())} answers per model and condition" if len(n) else "N unknown"
    rec = finish(cfg, fig, "fig_herding_with_without",
                 "Herding with the analyst rating (original) vs without it (no_rating): each model pooled over "
                 f"sectors (bold), with {ci_level(cfg)} cluster-bootstrap intervals and N (original/no_rating) per "
                 f"row; {n_text}. Sectors are drawn only where both rates rest on N >= {threshold} answers "
                 f"(figures.min_sector_n); {hidden} sector row(s) below it are left out (Fin-Bias Table 4 has them).")
    return fig, rec


def plot_fake_transitions(cfg: RunConfig, transitions: pd.DataFrame) -> tuple[object, FigureRecord]:
    """Stacked shares of answers per (model, analyst rating -> fake rating): followed the fake?"""
    import matplotlib.pyplot as plt

    if transitions.empty:
        raise LookupError("no fake_rating rows scored (table5_fake_transitions is empty)")
    t = transitions.assign(group=transitions["model"] + ": " + transitions["analyst_rating"].astype(str)
                           + " → " + transitions["fake_rating"].astype(str))
    wide = t.pivot_table(index="group", columns="answer", values="share", aggfunc="sum", fill_value=0.0)
    n = t.groupby("group")["n"].sum()
    order = [c for c in RATING_COLORS if c in wide.columns]
    with figure_style():
        fig, ax = plt.subplots(figsize=(figure_width(cfg), 1.2 + 0.25 * len(wide)), layout="constrained")
        left = np.zeros(len(wide))
        for ans in order:
            ax.barh(range(len(wide)), 100 * wide[ans], left=left, color=RATING_COLORS[ans], label=ans)
            left += 100 * wide[ans].to_numpy()
        ax.set_yticks(range(len(wide)), [wrap_lines(f"{g} (N={int(n[g])})", label_share(fig)) for g in wide.index])
        ax.invert_yaxis()
        ax.set_xlabel("% of answers")
        legend_outside(ax)
    rec = finish(cfg, fig, "fig_fake_transitions",
                 "Answers under a fake rating: for each model and (analyst rating → fake rating shown), the "
                 "share of answers per label; unparsed answers shown, not dropped (stage 04 transitions).")
    return fig, rec


def plot_accuracy_vs_analyst(cfg: RunConfig, metrics: pd.DataFrame) -> tuple[object, FigureRecord]:
    """Pooled accuracy per model x condition with 95 % intervals, the analyst's accuracy as a band."""
    import matplotlib.pyplot as plt

    acc = metrics[(metrics["metric"] == ACCURACY) & (metrics["sector"] == POOLED)]
    analyst = acc[acc["model"] == "Analyst"]
    acc = acc[acc["model"] != "Analyst"]
    models = sorted(acc["model"].unique())
    if acc["value"].notna().sum() == 0:
        raise LookupError("no pooled accuracy value in metrics.parquet (no labelled, answered item)")
    order = condition_order()
    width = 0.8 / len(order)
    with figure_style():
        fig, ax = plt.subplots(figsize=(figure_width(cfg), 3.2), layout="constrained")
        if not analyst.empty:
            a = analyst.iloc[0]
            ax.axhspan(100 * a["ci_low"], 100 * a["ci_high"], color="#cccccc", alpha=0.5, lw=0)
            ax.axhline(100 * a["value"], color="black", lw=1, ls="--",
                       label=f"analyst {100 * a['value']:.1f} % (N={int(a['n']) if pd.notna(a['n']) else '?'})")
        for i, cond in enumerate(order):
            d = acc[acc["condition"] == cond].set_index("model").reindex(models)
            x = np.arange(len(models)) + (i - (len(order) - 1) / 2) * width
            ax.bar(x, 100 * d["value"], width, yerr=np.nan_to_num(_interval(d)), capsize=2,
                   color=CONDITION_COLORS[cond], hatch=CONDITION_HATCHES[cond], edgecolor="white",
                   label=cond)
        ax.axhline(100 / 3, color="#888888", lw=0.8, ls=":", label="chance (1/3)")
        ax.set_xticks(range(len(models)), [f"{m}\n{n_by_condition(acc, m)}" for m in models], rotation=15)
        ax.set_ylabel(f"accuracy % (pooled, {ci_level(cfg)} CI)")
        ax.set_ylim(0, 100)
        legend_outside(ax, ncol=3)
    rec = finish(cfg, fig, "fig_accuracy_vs_analyst",
                 "Accuracy against the return-based labels, pooled over sectors, per model and condition, with "
                 f"{ci_level(cfg)} cluster-bootstrap intervals; under each model, N per condition "
                 f"({'/'.join(order)}); dashed line and band: the analysts' own rating "
                 "and its interval.")
    return fig, rec


def plot_labels_by_year(cfg: RunConfig, labels: pd.DataFrame, reports: pd.DataFrame) -> tuple[object, FigureRecord]:
    """CAR distribution per report year and the label shares per year (`labels.quantiles` by construction)."""
    import matplotlib.pyplot as plt

    df = labels.merge(reports[["report_id", "date"]], on="report_id", how="left")
    df = df.dropna(subset=["car"]).assign(year=lambda d: pd.to_datetime(d["date"]).dt.year)
    years = sorted(df["year"].unique())
    if not years:
        raise LookupError("no labelled report with a CAR (stage 01 excluded every report)")
    with figure_style():
        nrows, ncols = panel_grid(cfg, 2, 2)
        fig, (a1, a2) = plt.subplots(nrows, ncols, figsize=(figure_width(cfg), 3.2 * nrows))
        if years:
            a1.boxplot([100 * df.loc[df.year == y, "car"] for y in years], positions=range(len(years)),
                       widths=0.5, showfliers=True)
            a1.set_xticks(range(len(years)), [str(y) for y in years])
            shares = pd.crosstab(df["year"], df["label"], normalize="index").reindex(years)
            bottom = np.zeros(len(years))
            for lab in (Rating.BEARISH.value, Rating.NEUTRAL.value, Rating.BULLISH.value):
                if lab in shares.columns:
                    a2.bar(range(len(years)), 100 * shares[lab], bottom=bottom, color=RATING_COLORS[lab], label=lab)
                    bottom += 100 * shares[lab].to_numpy()
            counts = df["year"].value_counts().reindex(years)
            a2.set_xticks(range(len(years)), [f"{y}\nN={counts[y]}" for y in years])
            a2.legend(ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.25))
        a1.axhline(0, color="black", lw=0.5)
        a1.set_ylabel("CAR % (days +1..+window)")
        a1.set_title("CAR per report year")
        a2.set_ylabel("% of labelled reports")
        a2.set_title("return-based labels per year")
        fig.tight_layout()
    rec = finish(cfg, fig, "fig_labels_by_year",
                 "Cumulative abnormal returns and return-based label shares per report year (stage 01 labels; "
                 "excluded reports left out).")
    return fig, rec


def plot_prob_herding(cfg: RunConfig, metrics: pd.DataFrame) -> tuple[object, FigureRecord]:
    """Mean probability on the reference rating per condition (label-scored models), 95 % CIs."""
    import matplotlib.pyplot as plt

    p = metrics[(metrics["metric"] == "prob_herding") & (metrics["sector"] == POOLED)]
    p = p[p["value"].notna()]
    if p.empty:
        raise LookupError("no label-scored model in this run (prob_herding needs inference.mode: score)")
    conds = list(condition_order())
    colors, markers = model_colors(p["model"].unique()), model_markers(p["model"].unique())
    with figure_style():
        fig, ax = plt.subplots(figsize=(figure_width(cfg), 3.0), layout="constrained")
        for m, d in p.groupby("model"):
            d = d.set_index("condition").reindex(conds)
            ax.errorbar(range(len(conds)), 100 * d["value"], yerr=np.nan_to_num(_interval(d)), marker=markers[m],
                        capsize=3, label=wrap_lines(f"{m} ({n_by_condition(p, m)})", label_share(fig)), color=colors[m])
        ax.set_xticks(range(len(conds)), conds)
        ax.set_ylabel(f"mean p(reference rating) % ({ci_level(cfg)} CI)")
        ax.set_ylim(0, 100)
        legend_outside(ax, ncol=2)
    rec = finish(cfg, fig, "fig_prob_herding",
                 "Probability-level herding: the label-scored models' mean probability on the reference rating per "
                 "condition (pooled), a finer view of the shift than the argmax herding score; N per condition "
                 f"({'/'.join(conds)}) beside each model.")
    return fig, rec


def dpo_panels(dpo: pd.DataFrame, threshold: int) -> list[tuple[str, str, pd.DataFrame]]:
    """(model, measure, rows) per panel of the DPO figure: the pooled row always, a sector only where
    both variants rest on at least `threshold` answers; a panel with no answered item is left out."""
    dpo = dpo.assign(measure=dpo["measure"] if "measure" in dpo.columns else "generated answers")
    panels = []
    for (m, measure), g in dpo.groupby(["model", "measure"], sort=True):
        g = g[g["n"].fillna(0) > 0]
        if g.empty:
            continue
        n_min = g.groupby("sector")["n"].min()
        n_variants = g.groupby("sector")["variant"].nunique()
        keep = [s for s in (*SECTORS, POOLED) if s in n_min.index
                and (s == POOLED or (n_min[s] >= threshold and n_variants[s] == g["variant"].nunique()))]
        panels.append((m, measure, g[g["sector"].isin(keep)]))
    return panels


def plot_dpo(cfg: RunConfig, dpo: pd.DataFrame) -> tuple[object, FigureRecord]:
    """Fin-Bias Table 8 as a figure: accuracy base vs DPO-tuned per model and measure (generated answers,
    label scoring), as points with intervals and N (a 0 % bar would be invisible), sectors where N allows."""
    import matplotlib.pyplot as plt

    need = {"model", "sector", "variant", "accuracy", "n"}
    if not need <= set(dpo.columns):
        raise ValueError(f"stage 05 DPO accuracy: needs columns {sorted(need)}, has {list(dpo.columns)}")
    threshold = min_sector_n(cfg)
    panels = dpo_panels(dpo[dpo["accuracy"].notna()], threshold)
    if not panels:
        raise LookupError("stage 05 scored no item (N = 0): no DPO accuracy to draw")
    nrows, ncols = panel_grid(cfg, len(panels), 2)
    width = figure_width(cfg)
    with figure_style():
        fig, axes = plt.subplots(nrows, ncols, figsize=(width, 2.6 * nrows), squeeze=False, sharey=True)
        for ax in axes.ravel()[len(panels):]:
            ax.remove()
        for ax, (m, measure, g) in zip(axes.ravel(), panels):
            sectors = [s for s in (*SECTORS, POOLED) if s in set(g["sector"])]
            for i, variant in enumerate(sorted(g["variant"].unique())):
                d = g[g["variant"] == variant].set_index("sector").reindex(sectors)
                err = np.vstack([d["accuracy"] - d["ci_low"], d["ci_high"] - d["accuracy"]]).clip(min=0)
                x = np.arange(len(sectors)) + (i - 0.5) * 0.3
                ax.errorbar(x, d["accuracy"], yerr=np.nan_to_num(err), fmt="o" if variant == "base" else "s",
                            ms=4, capsize=2, color=VARIANT_COLORS.get(variant, "#777777"), label=variant,
                            mfc="white" if variant == "base" else None)
                for xi, (acc, n) in enumerate(zip(d["accuracy"], d["n"])):
                    if pd.notna(acc):
                        ax.annotate(f"{int(n)}", (x[xi], acc), textcoords="offset points", xytext=(0, 5),
                                    ha="center", fontsize=MIN_TEXT_PT, color="#333333")
            ax.set_xticks(range(len(sectors)), sectors, rotation=60, ha="right")
            ax.set_title(f"{m}\n{measure}")
            ax.set_ylim(-5, 110)
            legend_outside(ax)
        axes[0][0].set_ylabel(f"accuracy % ({ci_level(cfg)} CI)")
        fig.tight_layout()
    rec = finish(cfg, fig, "fig_dpo_accuracy",
                 "Accuracy on the whole test split of each model before (base, open circle) and after DPO fine-tuning "
                 f"(filled square), per measure (generated answers; label scoring), with {ci_level(cfg)} "
                 "cluster-bootstrap intervals; the number over each point is its N. The pooled rate is always drawn, a "
                 f"sector only where both variants rest on N >= {threshold} answers (figures.min_sector_n); "
                 "stage 05; Fin-Bias Table 8.")
    return fig, rec


def plot_paper_vs_ours(cfg: RunConfig, long: pd.DataFrame) -> tuple[object, FigureRecord]:
    """Ours against the published value for every matched cell, one panel per paper table."""
    import matplotlib.pyplot as plt

    from finlib.core.compare import MATCHED, NOT_COMPARABLE

    m = long[(long["status"] == MATCHED) & (long["column"] != "num")]  # counts scale with the corpus size
    if m.empty:
        raise LookupError("no row of our run matches a published row (models/tasks differ from the papers')")
    tables = sorted(m["table"].unique())
    nrows, ncols = panel_grid(cfg, len(tables), 3)
    markers = ("o", "s", "^", "D", "v", "P", "X")
    with figure_style():
        fig, axes = plt.subplots(nrows, ncols, figsize=(figure_width(cfg), 2.6 * nrows + 0.4), squeeze=False)
        for ax in axes.ravel()[len(tables):]:
            ax.remove()
        for ax, t in zip(axes.ravel(), tables):
            d = m[m["table"] == t]
            for i, (col, g) in enumerate(d.groupby("column")):
                ax.scatter(g["paper"], g["ours"], s=12, label=col, marker=markers[i % len(markers)],
                           edgecolors="#333333", facecolors="none" if i % 2 else "#333333")
            lo = float(np.nanmin(d[["paper", "ours"]].to_numpy()))
            hi = float(np.nanmax(d[["paper", "ours"]].to_numpy()))
            ax.plot([lo, hi], [lo, hi], color="black", lw=0.6)
            ax.set_title(f"{t.replace('finbias_', '').replace('bizfin_', 'BizFin ')} (N={len(d)})")
            ax.set_xlabel("published")
            ax.set_ylabel("ours")
            legend_outside(ax, ncol=1)
        if cfg.is_synthetic:
            fig.suptitle("\n".join(textwrap.wrap(NOT_COMPARABLE, chars_per_line(figure_width(cfg)))),
                         fontsize=MIN_TEXT_PT, color="#c8423b")
        fig.tight_layout()
    rec = finish(cfg, fig, "fig_paper_vs_ours",
                 "Paper vs ours: every cell where our run has the published row (same model via the registry's "
                 "paper_name, same sector/task), ours against the published value; the line is equality. Counts (Tables "
                 "2-3 'num') are left out: they scale with the corpus size; the tables keep them.")
    return fig, rec


# ---- the stage ------------------------------------------------------------------------------

def optional_frame(cfg: RunConfig, name: str) -> pd.DataFrame | None:
    """An artifact that may legitimately be absent (a later or optional stage)."""
    try:
        return read_frame(cfg, name)
    except MissingArtifactError:
        return None


def attempt(records: list[FigureRecord], name: str, draw: Callable[[], tuple[object, FigureRecord]]):
    """Draw one figure; a missing input is recorded (name + reason), not raised. Returns the figure or None."""
    try:
        fig, rec = draw()
    except (LookupError, MissingArtifactError) as exc:
        records.append(FigureRecord(name, "", skipped=str(exc).strip("'\"")))
        return None
    records.append(rec)
    return fig


def write_figures_report(cfg: RunConfig, records: list[FigureRecord]) -> Path:
    """`figures_report.json`: every figure with its caption and files, or why it was not drawn."""
    return write_json(cfg, "figures_report", [r.__dict__ for r in records])


DPO_METRICS = "dpo_metrics"  # stage 05: base and tuned ("<model> + DPO") metrics in stage 04's long layout
DPO_OTHER_MEASURES = "dpo_metrics_label_scoring"  # stage 05: label scoring, and every measure per test part
WHOLE_SPLIT = "whole test split"
DPO_SUFFIX = " + DPO"


def dpo_accuracy(dpo_metrics: pd.DataFrame) -> pd.DataFrame:
    """Stage 05's accuracy on the original condition as (model, sector, variant base|dpo, accuracy %, CI %)."""
    from finlib.finbias.scoring.paper_layout import base_model

    a = dpo_metrics[(dpo_metrics["metric"] == ACCURACY) & (dpo_metrics["condition"] == Condition.ORIGINAL.value)]
    name = a["model"].map(base_model)
    tuned = name.str.endswith(DPO_SUFFIX)
    return pd.DataFrame({"model": name.str.removesuffix(DPO_SUFFIX), "sector": a["sector"],
                         "variant": np.where(tuned, "dpo", "base"), "accuracy": 100 * a["value"],
                         "ci_low": 100 * a["ci_low"], "ci_high": 100 * a["ci_high"], "n": a["n"],
                         "measure": a["measure"] if "measure" in a.columns else "generated answers"}
                        ).reset_index(drop=True)


def dpo_accuracy_all_measures(generated: pd.DataFrame, others: pd.DataFrame | None) -> pd.DataFrame:
    """`dpo_accuracy` on the whole test split for every measure stage 05 wrote (its generated answers,
    which the paper compares, and its label scoring, often the one with the larger N)."""
    frames = [generated]
    if others is not None and "test_part" in others.columns:
        frames.append(others[others["test_part"] == WHOLE_SPLIT])
    return dpo_accuracy(pd.concat(frames, ignore_index=True))


class FigureSet:
    """The stage's working set: loads each artifact once, draws the named figures, saves the
    paper-vs-ours tables and the figures report. Missing inputs become recorded notes."""

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg
        self.params = figures_params(cfg)
        self.records: list[FigureRecord] = []
        self._frames: dict[str, pd.DataFrame | None] = {}

    def frame(self, name: str) -> pd.DataFrame | None:
        if name not in self._frames:
            self._frames[name] = optional_frame(self.cfg, name)
        return self._frames[name]

    def need(self, name: str) -> pd.DataFrame:
        df = self.frame(name)
        if df is None:
            from finlib.finbias.artifacts import PRODUCERS

            stage = PRODUCERS.get(name, "05" if name.startswith("dpo") else "??")
            raise MissingArtifactError(f"stage {stage} artifacts not found ({name}): run stage {stage} "
                                       f"(`make stage STAGE={stage} RUN={self.cfg.name}`)")
        return df

    def _transitions(self) -> pd.DataFrame:
        from finlib.core.tables import read_table_csv

        path = self.cfg.tables_dir / "table5_fake_transitions.csv"
        if not path.is_file():
            raise MissingArtifactError(f"{path} not found: run stage 04")
        return read_table_csv(path)

    def drawers(self) -> dict[str, Callable[[], tuple[object, FigureRecord]]]:
        from finlib.finbias.figures.paper import (
            pick_example,
            plot_case_study,
            plot_conditions_example,
        )

        cfg, p = self.cfg, self.params
        return {
            "fig_conditions_example": lambda: plot_conditions_example(
                cfg, self.need("conditions"), pick_example(self.need("conditions"), p["example_report"]),
                int(p["text_chars"])),
            "fig_case_study": lambda: plot_case_study(cfg, self.need("predictions"), self.need("conditions"),
                                                      p["case_model"], p["case_report"]),
            "fig_herding_heatmap": lambda: plot_herding_heatmap(cfg, self.need("metrics")),
            "fig_herding_with_without": lambda: plot_with_without(cfg, self.need("metrics")),
            "fig_fake_transitions": lambda: plot_fake_transitions(cfg, self._transitions()),
            "fig_accuracy_vs_analyst": lambda: plot_accuracy_vs_analyst(cfg, self.need("metrics")),
            "fig_labels_by_year": lambda: plot_labels_by_year(cfg, self.need("labels"), self.need("reports")),
            "fig_prob_herding": lambda: plot_prob_herding(cfg, self.need("metrics")),
            "fig_dpo_accuracy": lambda: plot_dpo(cfg, dpo_accuracy_all_measures(
                self.need(DPO_METRICS), self.frame(DPO_OTHER_MEASURES))),
            "fig_paper_vs_ours": lambda: plot_paper_vs_ours(cfg, self.comparisons()),
        }

    def draw(self, name: str):
        """Draw and save one figure, then close it (the figure object stays displayable; no figures
        pile up in pyplot, none is shown by a notebook's end-of-cell flush); None when not drawn, its
        reason recorded."""
        import matplotlib.pyplot as plt

        fig = attempt(self.records, name, self.drawers()[name])
        if fig is not None:
            plt.close(fig)
        return fig

    def paper_names(self) -> dict[str, str]:
        from finlib.llm.registry import load_registry

        reg = load_registry(self.cfg.path(self.cfg.section("inference")["registry"]))
        return {name: spec.paper_name for name, spec in reg.items() if spec.paper_name}

    def write_comparisons(self) -> pd.DataFrame:
        """Fin-Bias Tables 2-8 beside ours (those whose inputs exist); saved per table; summary returned."""
        from finlib.core import compare
        from finlib.finbias.scoring import compare as finbias_compare

        parts = [finbias_compare.finbias_data_comparisons(self.need("reports"), self.frame("labels"))]
        if self.frame("metrics") is not None:
            parts.append(finbias_compare.finbias_metric_comparisons(self.need("metrics"), self.paper_names()))
        dpo = self.frame(DPO_METRICS)
        if dpo is not None:
            acc = dpo_accuracy(dpo)
            parts.append(finbias_compare.finbias_dpo_comparison(acc[acc["variant"] == "dpo"], self.paper_names()))
        for table, long in compare.split_by_table(pd.concat(parts, ignore_index=True)):
            compare.write_comparison(self.cfg, table, long, "")
        self.check_comparisons()
        summary = compare.comparison_summary(self.comparisons())
        from finlib.core.tables import write_table

        write_table(self.cfg, "paper_vs_ours_summary", summary,
                    "Paper vs ours per published Fin-Bias table: rows matched, rows on one side only, mean and mean absolute "
                    "difference (ours - paper)" + (f" [{compare.NOT_COMPARABLE}]" if self.cfg.is_synthetic else ""))
        return summary

    def check_comparisons(self) -> pd.DataFrame:
        """Every "ours" cell of the Fin-Bias comparisons beside the same cell of our written Tables
        4-8 (`finlib.finbias.scoring.consistency`), saved as `comparison_consistency`; a cell that differs
        stops the stage: a comparison must report the statistic our tables print."""
        from finlib.core.tables import write_table
        from finlib.finbias.scoring.consistency import comparison_consistency

        check = comparison_consistency(self.cfg.tables_dir, self.paper_names())
        write_table(self.cfg, "comparison_consistency", check,
                    "Each 'ours' cell of paper_vs_ours_finbias_table4-8 beside the same cell of our Tables 4-8 "
                    "as written (agrees: within half a unit of the table's last printed digit)", float_format="{:.4g}")
        bad = check[~check["agrees"]]
        if len(bad):
            raise ValueError(f"paper-vs-ours disagrees with our own tables in {len(bad)} of {len(check)} cells, "
                             f"e.g. {bad.iloc[0].to_dict()} (see tables/comparison_consistency.csv)")
        return check

    def comparisons(self) -> pd.DataFrame:
        """The Fin-Bias comparisons this stage wrote. BizFinBench's (stages 07/08, which run after this
        one) are left out, so the summary does not depend on whether a later stage already ran."""
        from finlib.core.compare import read_comparisons

        cmp = read_comparisons(self.cfg)
        return cmp[cmp["table"].astype(str).str.startswith("finbias_")].reset_index(drop=True)

    def missing_notes(self) -> list[str]:
        """One line per later stage whose artifacts are absent (shown by the notebook, never an error)."""
        notes = []
        if self.frame(DPO_METRICS) is None:
            notes.append("stage 05 artifacts not found: run stage 05 (DPO) for Table 8 and its figure")
        bizfin = list(self.cfg.tables_dir.glob("paper_vs_ours_bizfin_*.csv"))
        if not bizfin:
            notes.append("BizFinBench comparisons not found yet: stages 07/08 run after this one and save theirs; "
                         "the HTML report's paper-vs-ours summary includes them (`make report`)")
        return notes

    def close(self) -> Path:
        return write_figures_report(self.cfg, self.records)

    def summary_frame(self) -> pd.DataFrame:
        """One row per figure: drawn or not, and its caption or the reason it was not drawn."""
        return pd.DataFrame([{"figure": r.name, "drawn": r.skipped is None, "note": r.skipped or r.caption}
                             for r in self.records])


PAPER_VS_OURS = "fig_paper_vs_ours"  # drawn last: from the comparison tables the stage writes first


@dataclass
class FiguresResult:
    """What stage 06 produced: every figure (closed matplotlib figures, displayable; None when not
    drawn), their records, and the tables notebook 06 shows."""

    figures: dict[str, object | None]
    records: list[FigureRecord]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    report: dict = field(default_factory=dict)


def run(cfg: RunConfig) -> FiguresResult:
    """Stage 06: draw every figure whose inputs exist, write the paper-vs-ours tables (and their
    consistency check, which stops the stage on a disagreement), then `figures_report.json`."""
    figs = FigureSet(cfg)
    drawn = {name: figs.draw(name) for name in figs.drawers() if name != PAPER_VS_OURS}
    comparison = figs.write_comparisons()
    drawn[PAPER_VS_OURS] = figs.draw(PAPER_VS_OURS)
    report_path = figs.close()
    report = {"data_source": data_source(cfg), "notes": figs.missing_notes(),
              "drawn": [r.name for r in figs.records if r.skipped is None],
              "not_drawn": {r.name: r.skipped for r in figs.records if r.skipped is not None},
              "figures_report": str(report_path.relative_to(cfg.root))}
    return FiguresResult(drawn, figs.records, {"paper_vs_ours_summary": comparison, "figures": figs.summary_frame()},
                         report)


def summary(cfg: RunConfig, result: FiguresResult) -> str:
    """Markdown above the figures: the data source (synthetic or not), how many figures were drawn,
    each one not drawn with its reason, and the later stages whose artifacts are absent."""
    r = result.report
    head = [f"**Data:** {r['data_source']}.", f"**Figures drawn:** {len(r['drawn'])} of {len(result.records)}."]
    if cfg.is_synthetic:
        head.insert(0, "> ⚠️ **Synthetic data.** The figures test the pipeline; they are not research results, and "
                       "the paper-vs-ours comparison is not comparable.")
    items = [f"- `{name}` not drawn: {why}" for name, why in r["not_drawn"].items()]
    items += [f"- NOTE: {note}" for note in r["notes"]]
    return "\n\n".join(head + (["\n".join(items)] if items else []))


def show(result: FiguresResult, name: str) -> None:
    """Show one figure of the stage with its caption under it (not burned into it), or why it was not drawn."""
    from IPython.display import Markdown, display

    fig = result.figures.get(name)
    record = next(r for r in result.records if r.name == name)
    if fig is None:
        print(f"{name}: not drawn — {record.skipped}")
        return
    display(fig)
    display(Markdown(f"*{record.caption}*"))
