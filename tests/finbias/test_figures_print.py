"""Every figure at print size, for both `figures.width` columns (single 3.5 in, double 7.2 in): saved width
that of the chosen column, text >= 7 pt once printed at it, no empty axes, text drawn literally ($, %, _, ^ and Chinese in model names and report text), heat-map
labels readable on their cell, captions beside the image (inside it only on request), and a figure
with no data not drawn but explained."""
from __future__ import annotations

import warnings
from pathlib import Path
from types import SimpleNamespace

import matplotlib
import numpy as np
import pandas as pd
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib import font_manager
from matplotlib.text import Text
from PIL import Image
from test_figures import make_cfg

from finlib.bizfin.benchmark import figures as bizfin_figures
from finlib.bizfin.tasks import TASK_ORDER
from finlib.core import tables
from finlib.core.config import RunConfig
from finlib.finbias.beyond.rating_sweep import ANSWER_ORDER, SHOWN_ORDER
from finlib.finbias.dpo import train
from finlib.finbias.figures import base as figure_base
from finlib.finbias.figures import beyond as figures_beyond
from finlib.finbias.figures import paper as figures_paper
from finlib.finbias.figures import stage as figures
from finlib.finbias.labels import stage as labels
from finlib.finbias.labels.market_model import METHODS
from finlib.finbias.perturb import subjectivity
from finlib.finbias.scoring import stage as scoring
from finlib.finbias.vocab import POOLED, SECTORS

pytestmark = pytest.mark.slow  # every test draws the full figure set first (a module fixture)

ROOT = Path(__file__).resolve().parents[2]
NASTY = "$111 mn and a $0.84 EPS, 5% up, x_1^2 — 贵州茅台"
MODELS = ("gpt-4.1 [generate]", "通义千问 $qwen_2.5^7B$ [score]")
MIN_PT, DPI = 7.0, 150
COLUMN_IN = {"single": 3.5, "double": 7.2}  # journal column widths, as the journals print them
TIGHT_BOX_SLACK_IN = 0.6  # a saved image may fall short of its column by savefig's trimmed margins
CJK = any(f.name in figure_base.CJK_FAMILIES for f in font_manager.fontManager.ttflist)


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def metrics_frame(value: float | None = None) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    recs = []
    for model in (*MODELS, "Analyst"):
        for cond in ("original", "no_rating", "fake_rating", "no_opinion"):
            for sector in (*SECTORS, POOLED):
                for metric in ("herding", "accuracy", "prob_herding"):
                    v = float(rng.uniform(0.02, 0.98)) if value is None else value
                    recs.append({"model": model, "condition": cond, "sector": sector, "metric": metric,
                                 "value": v, "ci_low": v - 0.05, "ci_high": v + 0.05, "n": 60, "parse_rate": 1.0})
    return pd.DataFrame(recs)


def conditions_frame() -> pd.DataFrame:
    original = (f"Acme Corp. is rated Buy by us. Revenue was {NASTY}. We think the outlook is superb. "
                + "Margins held at 41.2% as costs fell. " * 12)
    rows = [("original", original, None), ("no_rating", original.split(" us. ", 1)[1], None),
            ("fake_rating", original.replace("Buy", "Sell"), "bearish"),
            ("no_opinion", original.split(" us. ", 1)[1].replace(" We think the outlook is superb.", ""), None)]
    return pd.DataFrame([{"item_id": f"R1:{c}", "report_id": "R1", "condition": c, "text": t,
                          "analyst_rating": "bullish", "fake_rating": f, "reference_rating": "bullish",
                          "status": "ok", "skip_reason": None} for c, t, f in rows])


def predictions_frame() -> pd.DataFrame:
    return pd.DataFrame([{"model": MODELS[1], "report_id": "R1", "condition": c, "mode": "generate",
                          "status": "ok", "raw_text": f'{{"answer": "{a}", "reason": "Because {NASTY} ({c})."}}'}
                         for c, a in (("original", "bullish"), ("no_rating", "neutral"), ("fake_rating", "bearish"))])


def bizfin_scores() -> pd.DataFrame:
    """BizFinBench's long score table: every task and the Average for both models, N 1-3 per task."""
    return pd.DataFrame([{"model": mm, "task": t, "rule": "official", "score": 50.0 + i, "ci_low": 40.0,
                          "ci_high": 60.0 + i, "n_items": 1 + i % 3}
                         for mm in MODELS for i, t in enumerate((*TASK_ORDER, "Average"))])


def _all_figures(cfg: RunConfig) -> dict[str, object]:
    """Every figure the project draws, from small frames whose text carries $, %, _, ^ and Chinese."""
    return {name: draw(cfg) for name, draw in figure_drawers().items()}


def figure_drawers() -> dict[str, object]:
    """Every figure the project draws, by name: a function of the run config returning the saved figure."""
    m = metrics_frame()
    reports = pd.DataFrame({"report_id": [f"R{i}" for i in range(30)],
                            "date": pd.to_datetime([f"{2020 + i % 3}-03-01" for i in range(30)])})
    lab = pd.DataFrame({"report_id": reports["report_id"], "car": np.linspace(-0.2, 0.2, 30),
                        "label": ["bearish"] * 9 + ["neutral"] * 12 + ["bullish"] * 9,
                        "beta": np.linspace(0.5, 1.5, 30), f"beta_{METHODS[1]}": np.linspace(0.6, 1.4, 30)})
    trans = pd.DataFrame({"model": [MODELS[1]] * 3, "analyst_rating": ["bullish"] * 3, "fake_rating": ["bearish"] * 3,
                          "answer": ["bearish", "bullish", "unparsed"], "n": [2, 1, 1], "share": [0.5, 0.25, 0.25]})
    dpo = pd.DataFrame([{"model": MODELS[1], "sector": s, "variant": v, "accuracy": 40.0 + i, "ci_low": 35.0,
                         "ci_high": 50.0 + i, "n": 20} for i, s in enumerate((*SECTORS[:4], POOLED))
                        for v in ("base", "dpo")])
    long = pd.concat([__import__("finlib.finbias.scoring.compare", fromlist=["x"]).finbias_metric_comparisons(m, {"gpt-4.1": "GPT-4"})])
    matrix = pd.DataFrame([{"model": mm, "shown": s, "answer": a, "share": (i + j) / 8, "count": i + j}
                           for mm in MODELS for i, s in enumerate(SHOWN_ORDER) for j, a in enumerate(ANSWER_ORDER)])
    lift = pd.DataFrame([{"model": mm, "sector": POOLED, "shown": s, "lift": 0.1, "ci_low": 0.0, "ci_high": 0.2}
                         for mm in MODELS for s in SHOWN_ORDER[1:]])
    gap = pd.DataFrame([{"model": mm, "paper_table": "Table 4", "outcome": "herding", "gap_pp": 5.0, "ci_low_pp": 1.0,
                         "ci_high_pp": 9.0, "noise_pm_pp": 4.0, "single_draw_gap_pp": 6.0} for mm in MODELS])
    stats = pd.DataFrame({"status": ["ok"] * 20, "policy": ["any"] * 10 + ["adjectives_only"] * 10,
                          "share_words_removed": np.linspace(0.01, 0.2, 20)})
    log = pd.DataFrame({"step": [1, 2, 3], "loss": [0.7, 0.6, 0.5], "rewards/margins": [0.0, 0.1, 0.2],
                        "rewards/accuracies": [0.5, 0.6, 0.7]})
    res = SimpleNamespace(metrics=m, plumbing=(), report={"ci": 0.95})
    return {
        "fig_herding_heatmap": lambda cfg: figures.plot_herding_heatmap(cfg, m)[0],
        "fig_herding_with_without": lambda cfg: figures.plot_with_without(cfg, m)[0],
        "fig_accuracy_vs_analyst": lambda cfg: figures.plot_accuracy_vs_analyst(cfg, m)[0],
        "fig_prob_herding": lambda cfg: figures.plot_prob_herding(cfg, m)[0],
        "fig_fake_transitions": lambda cfg: figures.plot_fake_transitions(cfg, trans)[0],
        "fig_labels_by_year": lambda cfg: figures.plot_labels_by_year(cfg, lab, reports)[0],
        "fig_dpo_accuracy": lambda cfg: figures.plot_dpo(cfg, dpo)[0],
        "fig_paper_vs_ours": lambda cfg: figures.plot_paper_vs_ours(cfg, long)[0],
        "fig_conditions_example": lambda cfg: figures_paper.plot_conditions_example(
            cfg, conditions_frame(), "R1", 1400)[0],
        "fig_case_study": lambda cfg: figures_paper.plot_case_study(cfg, predictions_frame(), conditions_frame())[0],
        "beyond_response_matrix": lambda cfg: figures_beyond.plot_response_matrix(cfg, matrix)[0],
        "beyond_sweep_lift": lambda cfg: figures_beyond.plot_lift(cfg, lift, 0.95)[0],
        "beyond_noise_gap": lambda cfg: figures_beyond.plot_noise_gap(cfg, gap, 0.95)[0],
        "fig_herding_accuracy": lambda cfg: scoring.plot_herding(cfg, res),
        "labels_car_by_year": lambda cfg: labels.plot_car_by_year(cfg, lab, reports, METHODS[0], 60),
        "labels_beta_distribution": lambda cfg: labels.plot_beta_distribution(cfg, lab, METHODS[0]),
        "fig_strongsubj_removed": lambda cfg: subjectivity.removal_figure(cfg, stats),
        "fig_dpo_training": lambda cfg: _saved(cfg, train.plot_log(log, f"DPO training log: {MODELS[1]}",
                                                                   tables.figure_width(cfg)), "fig_dpo_training"),
        bizfin_figures.FIGURE_NAME: lambda cfg: bizfin_figures.plot_task_scores(cfg, bizfin_scores(), 0.95),
    }


def _saved(cfg: RunConfig, fig, name: str):
    tables.save_figure(cfg, fig, name, caption="c")
    return fig


def math_texts(fig) -> list[str]:
    """Texts matplotlib would typeset as math (mathtext) instead of drawing literally."""
    return [t.get_text() for t in fig.findobj(Text) if t.get_text() and t._preprocess_math(t.get_text())[1]]


def small_texts(fig) -> list[tuple[str, float]]:
    return [(t.get_text()[:30], t.get_fontsize()) for t in fig.findobj(Text)
            if t.get_visible() and t.get_text().strip() and t.get_fontsize() < MIN_PT - 1e-6]


def empty_axes(fig) -> list[str]:
    out = []
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        drawn = ax.lines or ax.patches or ax.collections or ax.images or [t for t in ax.texts if t.get_text()]
        if not drawn:
            out.append(ax.get_title() or repr(ax))
    return out


@pytest.fixture(scope="module", params=sorted(COLUMN_IN))
def drawn(request, tmp_path_factory):
    cfg = make_cfg(tmp_path_factory.mktemp(f"figs_{request.param}"), width=request.param)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        figs = _all_figures(cfg)
    return cfg, figs, [str(w.message) for w in caught]


def printed_sizes(fig, saved_width_in: float, column_in: float) -> list[tuple[str, float]]:
    """(text, pt) of every visible text once the saved image is printed at `column_in` (scaled down
    only when wider than the column, as a journal does)."""
    scale = min(1.0, column_in / saved_width_in)
    return [(t.get_text()[:30], t.get_fontsize() * scale) for t in fig.findobj(Text)
            if t.get_visible() and t.get_text().strip()]


def test_every_figure_fits_its_column_with_print_size_text(drawn):
    cfg, figs, _ = drawn
    column = COLUMN_IN[cfg.section("figures")["width"]]
    assert len(figs) == 19
    failures = []
    for name, fig in figs.items():
        png = cfg.figures_dir / f"{name}.png"
        width_in = Image.open(png).size[0] / DPI
        if not column - TIGHT_BOX_SLACK_IN <= width_in <= column:
            failures.append(f"{name}: {width_in:.2f} in wide for a {column} in column")
        small = [(t, pt) for t, pt in printed_sizes(fig, width_in, column) if pt < MIN_PT - 1e-6]
        if small:
            failures.append(f"{name}: text under {MIN_PT} pt printed at {column} in: {small[:3]}")
        if empty_axes(fig):
            failures.append(f"{name}: empty axes {empty_axes(fig)}")
    assert not failures, "\n".join(failures)


def test_the_print_size_check_catches_a_figure_drawn_for_the_wrong_column(tmp_path):
    """Seeded fault: a figure drawn at the double width but printed in a single column halves its text."""
    cfg = make_cfg(tmp_path, width="double")
    fig = figure_drawers()["fig_prob_herding"](cfg)
    width_in = Image.open(cfg.figures_dir / "fig_prob_herding.png").size[0] / DPI
    assert width_in > COLUMN_IN["single"]
    assert min(pt for _, pt in printed_sizes(fig, width_in, COLUMN_IN["single"])) < MIN_PT


def test_text_is_drawn_literally_and_chinese_has_glyphs(drawn):
    _, figs, caught = drawn
    for name, fig in figs.items():
        assert not math_texts(fig), f"{name}: typeset as math: {math_texts(fig)[:2]}"
    shown = " ".join(t.get_text() for t in figs["fig_case_study"].findobj(Text))
    assert "$111 mn and a $0.84" in shown and "贵州茅台" in shown
    if CJK:
        assert not [w for w in caught if "missing from" in w], [w for w in caught if "missing from" in w][:2]


def test_the_literal_text_check_catches_mathtext(tmp_path, monkeypatch):
    """Seeded fault: without literal_text and the style's parse_math, "$111 mn and a $0.84" is math."""
    monkeypatch.setattr(tables, "literal_text", lambda fig: None)
    monkeypatch.setitem(figure_base.STYLE, "text.parse_math", True)
    fig, _ = figures_paper.plot_case_study(make_cfg(tmp_path), predictions_frame(), conditions_frame())
    assert math_texts(fig)


def test_heatmap_labels_follow_the_cell_luminance(tmp_path):
    for value, want in ((0.97, "black"), (0.03, "white")):  # viridis: yellow at the top, dark violet at the bottom
        fig, _ = figures.plot_herding_heatmap(make_cfg(tmp_path), metrics_frame(value))
        colours = {t.get_color() for ax in fig.axes for t in ax.texts if t.get_text() not in ("", "–")}
        assert colours == {want}


def test_text_colour_rule_against_hand_computed_luminance():
    assert figure_base.text_color_on((1.0, 1.0, 0.0, 1.0)) == "black"   # yellow: luminance 0.93
    assert figure_base.text_color_on((0.0, 0.0, 0.5, 1.0)) == "white"   # navy: luminance 0.016


def test_captions_beside_the_image_unless_asked_for_slides(tmp_path):
    m = metrics_frame()
    fig, rec = figures.plot_accuracy_vs_analyst(make_cfg(tmp_path / "a"), m)
    assert not any(rec.caption[:40] in t.get_text() for t in fig.texts)
    assert (tmp_path / "a" / "figures" / "t" / "fig_accuracy_vs_analyst.caption.txt").read_text().startswith(
        rec.caption[:40])
    fig, rec = figures.plot_accuracy_vs_analyst(make_cfg(tmp_path / "b", caption_in_image=True), m)
    assert any(rec.caption[:40] in t.get_text() for t in fig.texts)


def test_one_colour_per_concept():
    models = set(figure_base.MODEL_COLORS)
    meanings = set(figure_base.CONDITION_COLORS.values()) | set(figure_base.RATING_COLORS.values())
    assert not models & meanings and not set(figure_base.VARIANT_COLORS.values()) & (models | meanings)


def test_a_figure_without_data_is_not_drawn_and_says_why(tmp_path):
    cfg = make_cfg(tmp_path)
    dpo = pd.DataFrame([{"model": "m", "sector": POOLED, "variant": "base", "accuracy": np.nan, "n": 0}])
    with pytest.raises(LookupError, match="N = 0"):
        figures.plot_dpo(cfg, dpo)
    with pytest.raises(LookupError, match="no herding values"):
        figures.plot_herding_heatmap(cfg, metrics_frame().assign(value=np.nan))
    assert scoring.plot_herding(cfg, SimpleNamespace(metrics=metrics_frame().assign(value=np.nan), plumbing=(), report={"ci": 0.95})) is None
    note = cfg.figures_dir / "fig_herding_accuracy.skipped.txt"
    assert "no pooled" in note.read_text() and not (cfg.figures_dir / "fig_herding_accuracy.png").exists()


def test_a_notebook_shows_the_caption_under_the_figure(tmp_path, monkeypatch):
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj))
    cfg = make_cfg(tmp_path)
    fig, rec = figures.plot_accuracy_vs_analyst(cfg, metrics_frame())
    figure_base.show_figure(cfg, fig)
    assert shown[0] is fig and rec.caption[:40] in shown[1].data
    figure_base.show_figure(cfg, None)   # not drawn: nothing more shown
    assert len(shown) == 2
