"""Figures for a paper: colours that colour-blind readers can tell apart (backed by markers and hatches),
a single-column width whose text prints at >= 7 pt, and PDFs that are the same bytes on every run."""

from __future__ import annotations

import hashlib

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from colour_vision import MACHADO_2009, delta_e, worst_pair
from matplotlib.backends.backend_agg import FigureCanvasAgg
from test_figures import make_cfg, metrics_frame
from test_figures_n import dpo_frame, headline_metrics
from test_figures_print import figure_drawers

from finlib.finbias.figures import base
from finlib.finbias.figures import stage as figures

MIN_DELTA_E = 20.0  # CIELAB CIE76: well above the ~2-5 where two hues read as one


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_simulation_reproduces_a_known_confusion():
    """The simulation can fail: red and green, far apart for normal vision, nearly merge for a deuteranope."""
    assert delta_e("#d62728", "#2ca02c", "normal") > 60
    assert delta_e("#d62728", "#2ca02c", "deuteranopia") < 25
    assert delta_e("#d62728", "#2ca02c", "tritanopia") > 40
    assert set(MACHADO_2009) == {"normal", "protanopia", "deuteranopia", "tritanopia"}


def test_condition_colours_stay_apart_for_every_simulated_vision():
    worst, vision, a, b = worst_pair(base.CONDITION_COLORS)
    assert worst >= MIN_DELTA_E, f"{a} vs {b} Delta E {worst:.1f} for {vision}"


def test_every_condition_has_its_own_marker_and_hatch():
    conds = set(base.CONDITION_COLORS)
    assert set(base.CONDITION_MARKERS) == conds and len(set(base.CONDITION_MARKERS.values())) == len(conds)
    assert set(base.CONDITION_HATCHES) == conds and len(set(base.CONDITION_HATCHES.values())) == len(conds)


def test_accuracy_bars_carry_a_hatch_per_condition(tmp_path):
    fig, _ = figures.plot_accuracy_vs_analyst(make_cfg(tmp_path), metrics_frame())
    hatches = {p.get_hatch() or "" for p in fig.axes[0].patches}
    assert set(base.CONDITION_HATCHES.values()) <= hatches


def renderer(fig):
    """The figure's renderer, drawn; a figure its module closed after saving gets a fresh Agg canvas."""
    if not hasattr(fig.canvas, "get_renderer"):
        FigureCanvasAgg(fig)
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def texts_at_print_size(fig, column_in: float) -> list[float]:
    """Font sizes (pt) of every visible text once the saved figure is scaled to a `column_in` column."""
    box = fig.get_tightbbox(renderer(fig))
    scale = min(1.0, column_in / box.width)
    return [t.get_fontsize() * scale for t in fig.findobj(matplotlib.text.Text) if t.get_visible() and t.get_text()]


@pytest.mark.parametrize(
    "draw",
    [lambda cfg: figures.plot_with_without(cfg, headline_metrics()), lambda cfg: figures.plot_dpo(cfg, dpo_frame())],
)
def test_single_column_figures_print_their_text_at_7_pt(tmp_path, draw):
    single = make_cfg(tmp_path / "s", width="single", min_sector_n=10)
    fig, _ = draw(single)
    assert fig.get_figwidth() <= base.SINGLE_COLUMN_IN
    sizes = texts_at_print_size(fig, 3.5)
    assert sizes and min(sizes) >= base.MIN_TEXT_PT - 0.05
    double, _ = draw(make_cfg(tmp_path / "d", width="double", min_sector_n=10))
    assert min(texts_at_print_size(double, 3.5)) < base.MIN_TEXT_PT  # a double-column figure shrinks there


COLUMN_IN = {"single": 3.5, "double": 7.2}  # as the journals print them


@pytest.mark.slow
@pytest.mark.parametrize("width", sorted(COLUMN_IN))
@pytest.mark.parametrize("name", sorted(figure_drawers()))
def test_every_figure_is_drawn_for_the_chosen_column(tmp_path, name, width):
    """Each figure the project draws, at each `figures.width`: drawn at its column less the savefig padding
    (and so not at the other column's width), everything drawn inside that column, text >= 7 pt there."""
    fig = figure_drawers()[name](make_cfg(tmp_path, width=width))
    column = COLUMN_IN[width]
    assert fig.get_figwidth() == pytest.approx(column - 0.2)
    box_in = fig.get_tightbbox(renderer(fig)).width
    assert box_in <= column, f"{name}: drawn {box_in:.2f} in wide for a {column} in column"
    sizes = texts_at_print_size(fig, column)
    assert sizes and min(sizes) >= base.MIN_TEXT_PT - 0.05


def test_pdfs_and_pngs_are_byte_reproducible(tmp_path):
    digests = []
    for run in ("a", "b"):
        cfg = make_cfg(tmp_path / run)
        _, rec = figures.plot_with_without(cfg, headline_metrics())
        digests.append(
            {f.rsplit(".", 1)[1]: hashlib.sha256((tmp_path / run / f).read_bytes()).hexdigest() for f in rec.files}
        )
        pdf = (tmp_path / run / next(f for f in rec.files if f.endswith(".pdf"))).read_bytes()
        assert b"CreationDate" not in pdf and b"Matplotlib" not in pdf
    assert digests[0] == digests[1]
