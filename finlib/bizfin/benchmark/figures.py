"""BizFinBench Table 3 as a figure: each model's score per task under the official rule, with its
bootstrap interval and the number of items it rests on (a task scored on one item reads 0 or 100,
and the figure must say so at a glance).

bizfin may not import finbias (same layer), so the few style settings it shares with the Fin-Bias
figures (text >= 7 pt at print size) are repeated here as plain matplotlib rc values; its width is the
run's `figures.width` column, read through `finlib.core.tables.figure_width` like every Fin-Bias figure.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from finlib.bizfin.tasks import TASK_ORDER, task_order
from finlib.core.config import RunConfig
from finlib.core.tables import figure_width, print_column, save_figure

FIGURE_NAME = "bizfin_task_scores"
STYLE = {
    "font.size": 8,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "legend.fontsize": 7,
    "axes.titlesize": 8,
    "axes.labelsize": 8,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "pdf.fonttype": 42,
    "text.parse_math": False,
}
MARKERS = ("o", "s", "^", "D", "v", "P", "X")
MODEL_COLORS = ("#332288", "#44aa99", "#882255", "#999933", "#88ccee", "#ddcc77", "#117733")  # Paul Tol "muted"


def official_scores(long: pd.DataFrame) -> pd.DataFrame:
    """The official rule's per-task and Average rows that have a score, in the paper's task order."""
    d = long[(long["rule"] == "official") & long["score"].notna()]
    order = {t: i for i, t in enumerate((*task_order(), "Average"))}
    return d.assign(_o=d["task"].map(order)).sort_values(["_o", "model"]).drop(columns="_o")


def plot_task_scores(cfg: RunConfig, long: pd.DataFrame, ci: float):
    """Dots with intervals per task (Average last), one marker and colour per model, N under each task
    name; returns the saved figure, or None (nothing scored)."""
    import matplotlib.pyplot as plt

    d = official_scores(long)
    if d.empty:
        return None
    tasks = list(dict.fromkeys(d["task"]))
    models = sorted(d["model"].unique())
    n = d.groupby("task")["n_items"].agg(["min", "max"])
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(figure_width(cfg), 3.0), layout="constrained")
        width = 0.7 / max(len(models), 1)
        for i, m in enumerate(models):
            g = d[d["model"] == m].set_index("task").reindex(tasks)
            x = np.arange(len(tasks)) + (i - (len(models) - 1) / 2) * width
            err = np.vstack([g["score"] - g["ci_low"], g["ci_high"] - g["score"]]).clip(min=0)
            ax.errorbar(
                x,
                g["score"],
                yerr=np.nan_to_num(err),
                fmt=MARKERS[i % len(MARKERS)],
                ms=4,
                capsize=2,
                color=MODEL_COLORS[i % len(MODEL_COLORS)],
                label=m,
            )
        labels = [
            f"{t}\nN {int(n.at[t, 'min'])}" + (f"–{int(n.at[t, 'max'])}" if n.at[t, "min"] != n.at[t, "max"] else "")
            for t in tasks
        ]
        ax.set_xticks(range(len(tasks)), labels, rotation=45, ha="right")
        ax.set_ylim(-5, 105)
        ax.set_ylabel(f"score % (official rule, {100 * ci:g} % CI)")
        ax.legend(
            loc="lower left",
            bbox_to_anchor=(0, 1.02),
            ncol=min(len(models), 1 if print_column(cfg) == "single" else 4),
            frameon=False,
        )
    per_task = d.loc[d["task"] != "Average", "n_items"]
    lo, hi = int(per_task.min()), int(per_task.max())
    k = len(set(TASK_ORDER) | set(d["task"]) - {"Average"})   # the paper's nine and any other declared task scored
    averaged = "nine" if k == len(TASK_ORDER) else str(k)
    save_figure(
        cfg,
        fig,
        FIGURE_NAME,
        caption=(
            f"BizFinBench Table 3 as a figure: each model's score per task under the official rule, with its "
            f"{100 * ci:g} % bootstrap interval over items; N under each task is the items it rests on ({lo}–{hi} here: "
            f"a task on one item scores 0 or 100). Average: the plain mean over the {averaged} tasks (stage 07)."
        ),
    )
    plt.close(fig)
    return fig
