"""Every rate a figure draws carries its N; thin sectors are left out of the headline and DPO figures."""

from __future__ import annotations

import matplotlib
import numpy as np
import pandas as pd
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from test_figures import make_cfg

from finlib.finbias.figures import stage as figures
from finlib.finbias.vocab import POOLED, SECTORS


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def herding_rows(model: str, sector: str, n: int, original: float, no_rating: float) -> list[dict]:
    return [
        {
            "model": model,
            "condition": c,
            "sector": sector,
            "metric": "herding",
            "value": v,
            "ci_low": max(v - 0.1, 0) if n > 2 else v,
            "ci_high": min(v + 0.1, 1) if n > 2 else v,
            "n": n,
            "parse_rate": 1.0,
        }
        for c, v in (("original", original), ("no_rating", no_rating))
    ]


def headline_metrics() -> pd.DataFrame:
    """A pooled rate on 40 answers, one sector on 12 and one on a single answer (100 -> 0: noise)."""
    return pd.DataFrame(
        herding_rows("m", POOLED, 40, 0.6, 0.4)
        + herding_rows("m", SECTORS[0], 12, 0.7, 0.5)
        + herding_rows("m", SECTORS[1], 1, 1.0, 0.0)
    )


def tick_texts(ax) -> list[str]:
    return [t.get_text() for t in ax.get_yticklabels()]


def test_headline_draws_pooled_with_n_and_leaves_out_thin_sectors(tmp_path):
    cfg = make_cfg(tmp_path, min_sector_n=10)
    fig, rec = figures.plot_with_without(cfg, headline_metrics())
    ticks = tick_texts(fig.axes[0])
    assert ticks == [f"m · {POOLED}\nN 40/40", f"m · {SECTORS[0]}\nN 12/12"]
    assert "N >= 10" in rec.caption and "1 sector row(s) below it are left out" in rec.caption
    assert "pooled N 40–40" in rec.caption


def test_headline_threshold_is_the_params_knob(tmp_path):
    fig, rec = figures.plot_with_without(make_cfg(tmp_path, min_sector_n=1), headline_metrics())
    assert len(tick_texts(fig.axes[0])) == 3 and "0 sector row(s)" in rec.caption
    fig, rec = figures.plot_with_without(make_cfg(tmp_path / "b", min_sector_n=13), headline_metrics())
    assert tick_texts(fig.axes[0]) == [f"m · {POOLED}\nN 40/40"]


def dpo_frame() -> pd.DataFrame:
    """Generated answers at N = 1 (both 0 %), label scoring at N = 17, as stage 05 writes them."""
    rows = []
    for measure, n, acc in (("generated answers", 1, 0.0), ("label scoring", 17, 41.2)):
        for variant in ("base", "dpo"):
            for sector, nn in ((POOLED, n), (SECTORS[0], n), (SECTORS[1], 12 if n > 1 else n)):
                rows.append(
                    {
                        "model": "m",
                        "sector": sector,
                        "variant": variant,
                        "accuracy": acc,
                        "ci_low": max(acc - 10, 0),
                        "ci_high": acc + 10,
                        "n": nn,
                        "measure": measure,
                    }
                )
    return pd.DataFrame(rows)


def test_dpo_figure_draws_every_measure_with_visible_points_and_n(tmp_path):
    fig, rec = figures.plot_dpo(make_cfg(tmp_path, min_sector_n=10), dpo_frame())
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["m\ngenerated answers", "m\nlabel scoring"]
    gen, lab = fig.axes
    assert [t.get_text() for t in gen.get_xticklabels()] == [POOLED]  # N = 1 sectors left out
    assert [t.get_text() for t in lab.get_xticklabels()] == [s for s in SECTORS if s in SECTORS[:2]] + [POOLED]
    # a 0 % accuracy is a marker at 0, not a zero-height bar
    ys = [y for line in gen.get_lines() for y in np.atleast_1d(line.get_ydata()) if line.get_marker() in ("o", "s")]
    assert ys and all(y == 0 for y in ys)
    assert {"1"} == {t.get_text() for t in gen.texts} and {"17", "12"} == {t.get_text() for t in lab.texts}
    assert "N >= 10" in rec.caption and "label scoring" in rec.caption


def test_dpo_accuracy_keeps_label_scoring_of_the_whole_split():
    def metrics(measure: str, part: str, n: int) -> pd.DataFrame:
        return pd.DataFrame(
            [
                {
                    "model": f"m{suffix} [score]",
                    "condition": "original",
                    "sector": POOLED,
                    "metric": "accuracy",
                    "value": 0.5,
                    "ci_low": 0.4,
                    "ci_high": 0.6,
                    "n": n,
                    "measure": measure,
                    "test_part": part,
                }
                for suffix in ("", " + DPO")
            ]
        )

    gen = metrics("generated answers", "whole test split", 1)
    other = pd.concat([metrics("label scoring", "whole test split", 17), metrics("label scoring", "in time", 9)])
    acc = figures.dpo_accuracy_all_measures(gen, other)
    assert sorted(zip(acc["measure"], acc["n"], acc["variant"])) == [
        ("generated answers", 1, "base"),
        ("generated answers", 1, "dpo"),
        ("label scoring", 17, "base"),
        ("label scoring", 17, "dpo"),
    ]
    assert set(acc["model"]) == {"m"}


def test_every_rate_figure_prints_its_n(tmp_path):
    """Heatmap cells, accuracy and probability figures: N is on the figure, not only in a table."""
    from test_figures import metrics_frame

    cfg = make_cfg(tmp_path)
    m = metrics_frame()  # N = 10 in every cell
    heat, _ = figures.plot_herding_heatmap(cfg, m)
    cells = [t.get_text() for ax in heat.axes for t in ax.texts]
    assert cells and all(t.endswith("\nN10") for t in cells if t != "–")
    acc, rec = figures.plot_accuracy_vs_analyst(cfg, m)
    assert all(t.get_text().endswith("\nN 10/10/10/10") for t in acc.axes[0].get_xticklabels())
    assert any("(N=10)" in t.get_text() for t in acc.axes[0].get_legend().get_texts())
    prob, _ = figures.plot_prob_herding(cfg, m)
    assert all("(N 10/10/10/10)" in t.get_text() for t in prob.axes[0].get_legend().get_texts())
