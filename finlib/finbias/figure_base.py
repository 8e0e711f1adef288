"""What every stage-06 figure shares: one matplotlib style, colours per rating and condition, and a
caption naming the run and its data source under each saved figure.

Kept apart from `figures` (results figures and the stage) and `figures_paper` (the paper's
example and case-study figures) so that both import it and neither imports the other.
"""
from __future__ import annotations

import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from finlib.core.config import RunConfig
from finlib.core.tables import save_figure
from finlib.core.vocab import Condition, Rating

CONDITION_ORDER = (Condition.ORIGINAL, Condition.NO_RATING, Condition.NO_OPINION, Condition.FAKE_RATING)
RATING_COLORS = {Rating.BULLISH.value: "#2a9d55", Rating.NEUTRAL.value: "#8c8c8c", Rating.BEARISH.value: "#c8423b",
                 "unparsed": "#e0b040"}
CONDITION_COLORS = {"original": "#1f5a99", "no_rating": "#e08a1e", "no_opinion": "#6a4c93", "fake_rating": "#c8423b"}
STYLE = {
    "figure.dpi": 100, "savefig.dpi": 150, "font.size": 8, "axes.titlesize": 9, "axes.labelsize": 8,
    "xtick.labelsize": 7, "ytick.labelsize": 7, "legend.fontsize": 7, "legend.frameon": False,
    "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True, "grid.alpha": 0.3,
    "font.family": "DejaVu Sans", "pdf.fonttype": 42,
}


@contextmanager
def figure_style() -> Iterator[None]:
    """One look for every stage-06 figure (fonts, grid, no top/right spines)."""
    import matplotlib.pyplot as plt

    with plt.rc_context(STYLE):
        yield


def data_source(cfg: RunConfig) -> str:
    """Where the numbers come from, in words, for every caption."""
    data = cfg.params.get("data", {})
    source = data.get("source", "synthetic")
    if source == "synthetic":
        return f"seeded synthetic market (finlib.finbias.synth, seed {cfg.seed}) — synthetic data"
    if source == "huggingface":
        return f"Hugging Face dataset {data.get('reports', {}).get('hf_dataset')}"
    return f"local corpus {data.get('reports', {}).get('path')}"


def caption(cfg: RunConfig, text: str) -> str:
    """Caption = what the figure shows + run + data source (says "synthetic data" when synthetic)."""
    return f"{text} Run '{cfg.name}'; data: {data_source(cfg)}."


@dataclass
class FigureRecord:
    """One figure of the stage: its name, caption and files, or why it was not drawn."""

    name: str
    caption: str
    files: list[str] = field(default_factory=list)
    skipped: str | None = None


def finish(cfg: RunConfig, fig, name: str, text: str) -> FigureRecord:
    """Put the caption under the figure, save PNG + PDF, return the record."""
    cap = caption(cfg, text)
    # below everything already drawn (rotated tick labels reach under the axes)
    box = fig.get_tightbbox(fig.canvas.get_renderer())
    left, bottom = box.x0 / fig.get_figwidth(), box.y0 / fig.get_figheight()
    fig.text(min(left, 0.01), min(bottom, 0.0) - 0.02, "\n".join(textwrap.wrap(cap, 150)), ha="left", va="top",
             fontsize=6.5, color="#333333")
    paths = save_figure(cfg, fig, name)
    return FigureRecord(name, cap, [str(p.relative_to(cfg.root)) for p in paths])
