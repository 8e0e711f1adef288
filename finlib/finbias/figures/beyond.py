"""Figures of the analyses beyond the paper (stage 09), in stage 06's style and captions.

- `beyond_response_matrix`: the herding response matrix of the rating sweep as a heat map per
  model (row shares, counts written in the cells);
- `beyond_sweep_lift`: the herding lift over no_rating per shown rating with its interval;
- `beyond_noise_gap`: Tables 4-6's with/without gaps with their k-draw intervals beside the band a
  single-draw study moves by from re-sampling alone.
Captions go to `beyond_figures.json` (the HTML report reads them beside stage 06's).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from finlib.core.artifacts import write_json
from finlib.core.config import RunConfig
from finlib.core.tables import figure_width
from finlib.finbias.beyond.rating_sweep import ANSWER_ORDER, SHOWN_ORDER
from finlib.finbias.figures.base import (
    MIN_TEXT_PT,
    RATING_COLORS,
    FigureRecord,
    figure_style,
    finish,
    label_share,
    legend_outside,
    panel_grid,
    text_color_on,
    wrap_lines,
)
from finlib.finbias.vocab import POOLED

FIGURES_JSON = "beyond_figures"


def plot_response_matrix(cfg: RunConfig, matrix: pd.DataFrame) -> tuple[object, FigureRecord]:
    """One heat map per model: rows = rating shown, columns = answer, colour = row share."""
    import matplotlib.pyplot as plt

    models = sorted(matrix["model"].unique())
    nrows, ncols = panel_grid(cfg, len(models), 2)
    cmap = plt.get_cmap("Blues")
    with figure_style():
        fig, axes = plt.subplots(nrows, ncols, figsize=(figure_width(cfg), 2.8 * nrows),
                                 squeeze=False)
        for ax in axes.ravel()[len(models):]:
            ax.remove()
        for ax, model in zip(axes.ravel(), models):
            m = matrix[matrix["model"] == model]
            share = m.pivot(index="shown", columns="answer", values="share").reindex(SHOWN_ORDER)[list(ANSWER_ORDER)]
            count = m.pivot(index="shown", columns="answer", values="count").reindex(SHOWN_ORDER)[list(ANSWER_ORDER)]
            ax.imshow(share.fillna(0).to_numpy(float), cmap=cmap, vmin=0, vmax=1, aspect="auto")
            for i in range(share.shape[0]):
                for j in range(share.shape[1]):
                    v = share.iat[i, j]
                    ax.text(j, i, "" if pd.isna(v) else f"{v:.2f}\n({int(count.iat[i, j])})", ha="center",
                            va="center", fontsize=MIN_TEXT_PT, color=text_color_on(cmap(0.0 if pd.isna(v) else float(v))))
            ax.set_xticks(range(len(ANSWER_ORDER)), ANSWER_ORDER)
            ax.set_yticks(range(len(SHOWN_ORDER)), SHOWN_ORDER)
            ax.set_xlabel("answer")
            ax.set_ylabel("rating shown")
            ax.set_title(model)
            ax.grid(False)
        fig.tight_layout()
    text = ("Herding response matrix of the rating sweep: each report shown with each rating (and without one); "
            "row shares of the answered draws, counts in brackets.")
    return fig, finish(cfg, fig, "beyond_response_matrix", text)


def plot_lift(cfg: RunConfig, lift: pd.DataFrame, ci: float) -> tuple[object, FigureRecord]:
    """Lift over no_rating per shown rating and model, with the two-level bootstrap interval."""
    import matplotlib.pyplot as plt

    d = lift[(lift["sector"] == POOLED) & lift["shown"].isin(SHOWN_ORDER[1:])]
    models = sorted(d["model"].unique())
    hatches = ("", "//", "..", "xx", "\\\\", "++")
    with figure_style():
        fig, ax = plt.subplots(figsize=(figure_width(cfg), 2.8))
        width = 0.8 / max(len(models), 1)
        for i, model in enumerate(models):
            m = d[d["model"] == model].set_index("shown").reindex(SHOWN_ORDER[1:])
            x = np.arange(3) + (i - (len(models) - 1) / 2) * width
            err = np.vstack([m["lift"] - m["ci_low"], m["ci_high"] - m["lift"]]).clip(min=0)
            ax.bar(x, 100 * m["lift"], width, color=[RATING_COLORS[r] for r in SHOWN_ORDER[1:]], alpha=0.85,
                   edgecolor="black", linewidth=0.4, label=wrap_lines(model, label_share(fig)),
                   hatch=hatches[i % len(hatches)])
            ax.errorbar(x, 100 * m["lift"], yerr=100 * np.nan_to_num(err), fmt="none", ecolor="black", capsize=3)
        ax.axhline(0, color="black", linewidth=0.6)
        ax.set_xticks(range(3), [f"shown {r}" for r in SHOWN_ORDER[1:]])
        ax.set_ylabel("lift over no_rating (points)")
        if len(models) > 1:
            legend_outside(ax)
        fig.tight_layout()
    text = (f"Herding lift of each shown rating: share of answers equal to it when shown minus when no rating is "
            f"shown, mean over reports, {ci:.0%} two-level bootstrap intervals (reports, then draws).")
    return fig, finish(cfg, fig, "beyond_sweep_lift", text)


def plot_noise_gap(cfg: RunConfig, compare: pd.DataFrame, ci: float) -> tuple[object, FigureRecord]:
    """Each with/without gap (k-draw mean, interval) beside the +- band of a single-draw study."""
    import matplotlib.pyplot as plt

    d = compare.reset_index(drop=True)
    with figure_style():
        fig, ax = plt.subplots(figsize=(figure_width(cfg), 0.45 * len(d) + 1.2))
        y = np.arange(len(d))
        ax.barh(y, 2 * d["noise_pm_pp"], left=-d["noise_pm_pp"], color="#dddddd", label="single-draw noise band")
        err = np.vstack([d["gap_pp"] - d["ci_low_pp"], d["ci_high_pp"] - d["gap_pp"]]).clip(min=0)
        ax.errorbar(d["gap_pp"], y, xerr=np.nan_to_num(err), fmt="o", color="#333333", capsize=3,
                    label="k-draw gap")
        ax.plot(d["single_draw_gap_pp"], y, "x", color="#888888", label="single-draw gap (draw 0)")
        ax.set_yticks(y, [wrap_lines(f"{r.model}: {r.paper_table} {r.outcome}", label_share(fig))
                          for r in d.itertuples()])
        ax.axvline(0, color="black", linewidth=0.6)
        ax.set_xlabel("gap between conditions (points)")
        legend_outside(ax, ncol=2)
        fig.tight_layout()
    text = (f"Paper difference vs sampling noise: each with/without gap of Tables 4-6 from k draws per report "
            f"({ci:.0%} two-level interval), the single-draw gap, and the band a single-draw study of the run's N "
            "moves by from re-sampling alone.")
    return fig, finish(cfg, fig, "beyond_noise_gap", text)


def draw_figures(cfg: RunConfig, matrix: pd.DataFrame, lift: pd.DataFrame, compare: pd.DataFrame,
                 ci: float) -> list[FigureRecord]:
    """Every figure whose table has rows; the others are listed with why they were not drawn."""
    records = []
    for name, frame, draw in (("beyond_response_matrix", matrix, lambda: plot_response_matrix(cfg, matrix)),
                              ("beyond_sweep_lift", lift, lambda: plot_lift(cfg, lift, ci)),
                              ("beyond_noise_gap", compare, lambda: plot_noise_gap(cfg, compare, ci))):
        if frame.empty:
            records.append(FigureRecord(name, "", skipped="no rows (the extension is off in this run)"))
            continue
        records.append(draw()[1])
    write_json(cfg, FIGURES_JSON, [r.__dict__ for r in records])
    return records
