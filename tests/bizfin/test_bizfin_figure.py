"""BizFinBench Table 3 shows N per task, and its figure draws every task score with its interval and N."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import pandas as pd

matplotlib.use("Agg")
from params_helpers import with_defaults

from finlib.bizfin.benchmark.figures import FIGURE_NAME, plot_task_scores
from finlib.bizfin.benchmark.results import table3, task_scores
from finlib.bizfin.tasks import TASK_ORDER
from finlib.core.config import RunConfig


def item_rows(task: str, score: float, n: int) -> list[dict]:
    return [
        {
            "model": "m",
            "task": task,
            "source": "benchmark",
            "parsed": True,
            "judge_status": None,
            "official": score,
            "ours": score,
            "status": "ok",
        }
        for _ in range(n)
    ]


def long_scores() -> pd.DataFrame:
    """One item in every task but FNC, which has three (as in a default run: one item per task)."""
    rows = [r for t in TASK_ORDER for r in item_rows(t, 1.0, 3 if t == "FNC" else 1)]
    return task_scores(pd.DataFrame(rows), reps=50, seed=1)


def test_table3_prints_items_per_task_for_each_of_our_rows():
    wide = table3(long_scores())
    ours = wide[wide["row"] == "this run"].set_index("rule")["N per task"]
    assert ours.to_dict() == {"official": "1–3", "ours": "1–3"}
    assert wide[wide["row"] == "paper Table 3"]["N per task"].isna().all()


def test_task_figure_labels_each_task_with_its_n(tmp_path: Path):
    cfg = RunConfig(name="t", params=with_defaults({}), root=tmp_path, params_file=tmp_path / "t.yaml")
    fig = plot_task_scores(cfg, long_scores(), 0.95)
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels[0] == f"{TASK_ORDER[0]}\nN {3 if TASK_ORDER[0] == 'FNC' else 1}"
    assert any(lab == "FNC\nN 3" for lab in labels) and labels[-1] == f"Average\nN {len(TASK_ORDER) + 2}"
    caption = (cfg.figures_dir / f"{FIGURE_NAME}.caption.txt").read_text(encoding="utf-8")
    assert "N under each task" in caption and "(1–3 here" in caption
    assert (cfg.figures_dir / f"{FIGURE_NAME}.pdf").stat().st_size > 1000


def test_nothing_scored_draws_nothing(tmp_path: Path):
    cfg = RunConfig(name="t", params=with_defaults({}), root=tmp_path, params_file=tmp_path / "t.yaml")
    assert plot_task_scores(cfg, long_scores().assign(score=float("nan")), 0.95) is None
