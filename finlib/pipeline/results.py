"""`runs/<run>/results.json`: the run's headline numbers in one machine-readable file, the way lm-eval,
inspect and HELM users expect one -- every headline number with its interval and N, the params, the
package versions and the git commit that made it -- and the few lines a run ends with.

Headline numbers: Fin-Bias herding and accuracy (Eq. 1) pooled over sectors per model and condition
(stage 04), accuracy before/after DPO pooled per model (stage 05), and BizFinBench's Average per model
under the official rule (stage 07). A stage the run did not make contributes nothing, and is named.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from finlib.core.artifacts import MissingArtifactError, producer, read_frame
from finlib.core.config import RunConfig

HEADLINE_METRICS = ("herding", "accuracy")
POOLED = "Average (pooled)"
RESULTS_FILE = "results.json"


def _number(x: Any) -> float | None:
    """A JSON number, or null for NaN/missing (JSON has no NaN)."""
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else round(f, 6)


def _entry(benchmark: str, metric: str, model: str, condition: str | None, value, low, high, n, scale: float) -> dict:
    return {
        "benchmark": benchmark,
        "metric": metric,
        "model": model,
        "condition": condition,
        "value": _number(value if value is None else scale * float(value)),
        "ci_low": _number(low if low is None else scale * float(low)),
        "ci_high": _number(high if high is None else scale * float(high)),
        "n": None if n is None or pd.isna(n) else int(n),
        "unit": "%",
    }


def finbias_headline(metrics: pd.DataFrame) -> list[dict]:
    """Pooled herding and accuracy per model and condition, in percent (the analysts' row left out)."""
    m = metrics[
        (metrics["sector"] == POOLED) & metrics["metric"].isin(HEADLINE_METRICS) & (metrics["model"] != "Analyst")
    ]
    return [
        _entry("fin-bias", r.metric, r.model, r.condition, r.value, r.ci_low, r.ci_high, r.n, 100)
        for r in m.sort_values(["metric", "model", "condition"]).itertuples(index=False)
    ]


def dpo_headline(dpo: pd.DataFrame) -> list[dict]:
    """Pooled accuracy on the original condition, base and DPO-tuned (stage 05's generated answers)."""
    a = dpo[(dpo["sector"] == POOLED) & (dpo["metric"] == "accuracy") & (dpo["condition"] == "original")]
    return [
        _entry("fin-bias dpo", "accuracy", r.model, r.condition, r.value, r.ci_low, r.ci_high, r.n, 100)
        for r in a.sort_values("model").itertuples(index=False)
    ]


def bizfin_headline(long: pd.DataFrame) -> list[dict]:
    """BizFinBench Average per model under the official rule (already in percent)."""
    a = long[(long["task"] == "Average") & (long["rule"] == "official")]
    return [
        _entry("bizfinbench", "average score", r.model, None, r.score, r.ci_low, r.ci_high, r.n_items, 1)
        for r in a.itertuples(index=False)
    ]


def headline_numbers(cfg: RunConfig) -> tuple[list[dict], list[str]]:
    """Every headline number the run's artifacts hold, and the sources it lacks (named, not silently empty)."""
    numbers, absent = [], []
    for name, build in (("metrics", finbias_headline), ("dpo_metrics", dpo_headline)):
        try:
            numbers += build(read_frame(cfg, name))
        except MissingArtifactError:
            absent.append(f"{name} (stage {producer(name)})")
    from finlib.bizfin.benchmark.stage import SCORES_TABLE

    path = cfg.tables_dir / f"{SCORES_TABLE}.csv"
    if path.is_file():
        from finlib.core.tables import read_table_csv

        numbers += bizfin_headline(read_table_csv(path))
    else:
        absent.append(f"{SCORES_TABLE} (stage 07)")
    return numbers, absent


def build_results(cfg: RunConfig, manifest: dict[str, Any]) -> dict[str, Any]:
    """The results document: headline numbers, what is absent, the CI level, params, versions, commit."""
    numbers, absent = headline_numbers(cfg)
    git = manifest.get("git") or {}
    return {
        "run": cfg.name,
        "synthetic_data": cfg.is_synthetic,
        "ci_level": (cfg.params.get("scoring") or {}).get("ci"),
        "results": numbers,
        "absent": absent,
        "params_file": manifest.get("params_file"),
        "config": manifest.get("params", cfg.params),
        "versions": {"python": manifest.get("python"), **(manifest.get("packages") or {})},
        "git": {"commit": git.get("commit"), "dirty": git.get("dirty")},
        "finished": manifest.get("updated"),
    }


def write_results(cfg: RunConfig, manifest: dict[str, Any]) -> Path:
    """Write `runs/<run>/results.json` (sorted keys, so two runs diff cleanly) and return its path."""
    path = cfg.run_dir / RESULTS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(
        json.dumps(build_results(cfg, manifest), indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8"
    )
    tmp.replace(path)
    return path


def _shown(e: dict) -> str:
    ci = f" [{e['ci_low']:.1f}, {e['ci_high']:.1f}]" if e["ci_low"] is not None and e["ci_high"] is not None else ""
    value = "–" if e["value"] is None else f"{e['value']:.1f} %"
    return f"{value}{ci} N={e['n'] if e['n'] is not None else '?'}"


def closing_lines(cfg: RunConfig, manifest: dict[str, Any], total_s: float, results_path: Path | None) -> list[str]:
    """What a run ends with: total time, the headline numbers with intervals and N, and where to look."""
    lines = [f"[{cfg.name}] total time {total_s / 60:.1f} min ({total_s:.0f} s)"]
    numbers = json.loads(results_path.read_text(encoding="utf-8"))["results"] if results_path else []
    for e in numbers:
        if e["benchmark"] == "fin-bias" and e["condition"] not in ("original", "no_rating"):
            continue
        cond = f" {e['condition']}" if e["condition"] else ""
        lines.append(f"[{cfg.name}]   {e['benchmark']} {e['metric']} {e['model']}{cond}: {_shown(e)}")
    report = (manifest.get("report") or {}).get("index")
    where = {
        "tables": cfg.tables_dir,
        "figures": cfg.figures_dir,
        "results": results_path,
        "manifest": cfg.run_dir / "manifest.json",
    }
    lines += [f"[{cfg.name}] {k}: {_relative(v, cfg.root)}" for k, v in where.items() if v is not None]
    if report:
        lines.append(f"[{cfg.name}] report: {report}")
    if cfg.is_synthetic:
        lines.append(f"[{cfg.name}] synthetic data: these numbers test the pipeline, they are not research results")
    return lines


def _relative(path: Path, root: Path) -> str:
    path = Path(path)
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
