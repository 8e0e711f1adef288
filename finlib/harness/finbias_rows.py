"""Fin-Bias reports as harness samples, and the project's statistics of the replies a harness got.

No harness import here: the inspect task (`finlib.harness.inspect_finbias`), the lm-eval task
(`finlib/harness/lm_eval_tasks`) and the equality test all go through these functions, and the
statistics are stage 04's (`score_frame`, Eq. 1 in `eq1_by_sector`, `paired_tests`): a harness only
decides which text was sent and what came back. One sample is one report with every condition of
it, so a harness's `--limit N` means N whole reports and a failed call never drops the report's
other conditions from the paired tests.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from finlib.core.artifacts import require_columns
from finlib.finbias.inference.stage import check_conditions
from finlib.finbias.scoring.metrics import ACCURACY, HERDING, eq1_by_sector, paired_tests
from finlib.finbias.scoring.stage import score_frame
from finlib.finbias.vocab import POOLED

ITEM_FIELDS = (
    "item_id",
    "condition",
    "text",
    "analyst_rating",
    "fake_rating",
    "reference_rating",
    "status",
    "skip_reason",
)
REPLY_FIELDS = ("item_id", "status", "raw_text", "error", "truncated_output")


def _plain(value: Any) -> Any:
    """A JSON-safe cell: pandas' missing values (NaN, NA, None) become None (harness logs are JSON)."""
    return None if value is None or (not isinstance(value, str) and pd.isna(value)) else value


def read_run(data_dir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(conditions, reports, labels) of a run's processed folder (`data/processed/<run>/`, stages 00-02),
    checked as stage 03 checks them; a missing file names the stage that writes it."""
    d = Path(data_dir)
    frames = []
    for name, stage in (("conditions", "02"), ("reports", "00"), ("labels", "01")):
        path = d / f"{name}.parquet"
        if not path.exists():
            raise FileNotFoundError(f"{path}: not found (stage {stage} writes it; pass the run's processed folder)")
        frames.append(pd.read_parquet(path))
    conditions, reports, labels = frames
    check_conditions(conditions, str(d / "conditions.parquet"))
    require_columns(reports, ("report_id", "ticker", "sector", "analyst_rating"), str(d / "reports.parquet"))
    require_columns(labels, ("report_id", "label"), str(d / "labels.parquet"))
    return conditions, reports, labels


def report_samples(conditions: pd.DataFrame, reports: pd.DataFrame, labels: pd.DataFrame) -> list[dict]:
    """One JSON-safe record per report (its firm, sector, label and every condition item), in
    report_id order; a report without conditions is not a sample (stage 02 made none for it)."""
    label_of = dict(zip(labels["report_id"], labels["label"]))
    info = reports.set_index("report_id")[["ticker", "sector", "analyst_rating"]]
    out = []
    for report_id, items in conditions.sort_values(["report_id", "item_id"]).groupby("report_id", sort=True):
        if report_id not in info.index:
            raise ValueError(f"conditions.parquet: report_id={report_id!r} not in reports.parquet")
        r = info.loc[report_id]
        out.append(
            {
                "report_id": str(report_id),
                "ticker": _plain(r["ticker"]),
                "sector": _plain(r["sector"]),
                "analyst_rating": _plain(r["analyst_rating"]),
                "label": _plain(label_of.get(report_id)),
                "items": [
                    {f: _plain(row[f]) if f in row else None for f in ITEM_FIELDS}
                    for row in items.to_dict(orient="records")
                ],
            }
        )
    return out


def frames_of(samples: Iterable[Mapping]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(conditions, reports, labels) of sample records: what stage 04 reads, rebuilt from a
    harness's samples so that a metric needs nothing but the samples it scored."""
    samples = list(samples)
    cond = pd.DataFrame(
        [
            {**{k: v for k, v in it.items() if k != "text"}, "report_id": s["report_id"]}
            for s in samples
            for it in s["items"]
        ],
        columns=["item_id", "report_id", *ITEM_FIELDS[1:]],
    ).drop(columns="text")
    reports = pd.DataFrame(
        [{k: s[k] for k in ("report_id", "ticker", "sector", "analyst_rating")} for s in samples],
        columns=["report_id", "ticker", "sector", "analyst_rating"],
    )
    labels = pd.DataFrame(
        [{"report_id": s["report_id"], "label": s["label"]} for s in samples], columns=["report_id", "label"]
    )
    return cond, reports, labels


def predictions_frame(samples: Iterable[Mapping], replies: Mapping[str, Mapping], model: str) -> pd.DataFrame:
    """Stage 03's predictions columns for the items of `samples`: `replies` maps item_id -> reply
    record (status "ok" | "error", raw_text, error, truncated_output). A skipped item is "skipped"
    (never sent); an item with no reply (the harness stopped first) is "error", not answered."""
    rows = []
    for s in samples:
        for it in s["items"]:
            rep = replies.get(it["item_id"])
            if it["status"] == "skipped":
                rep = {"status": "skipped", "raw_text": None, "error": it.get("skip_reason"), "truncated_output": None}
            elif rep is None:
                rep = {"status": "error", "raw_text": None, "error": "no reply recorded", "truncated_output": None}
            rows.append(
                {
                    "item_id": it["item_id"],
                    "report_id": s["report_id"],
                    "condition": it["condition"],
                    "model": model,
                    "mode": "generate",
                    "raw_text": rep.get("raw_text"),
                    "p_bullish": math.nan,
                    "p_neutral": math.nan,
                    "p_bearish": math.nan,
                    "status": rep["status"],
                    "error": rep.get("error"),
                    "truncated_output": rep.get("truncated_output"),
                }
            )
    return pd.DataFrame(
        rows,
        columns=[
            "item_id",
            "report_id",
            "condition",
            "model",
            "mode",
            "raw_text",
            "p_bullish",
            "p_neutral",
            "p_bearish",
            "status",
            "error",
            "truncated_output",
        ],
    )


def item_answers(samples: Iterable[Mapping], replies: Mapping[str, Mapping], model: str) -> dict[str, str]:
    """item_id -> what stage 04 read from its reply: a rating, "unparsed" (answered, in N) or
    "not_answered" / "skipped" (outside N). The per-item view the harnesses are compared on."""
    samples = list(samples)
    cond, reports, labels = frames_of(samples)
    scored = score_frame(predictions_frame(samples, replies, model), cond, labels, reports)
    out = {r["item_id"]: r["answer"] if r["parsed"] else "unparsed" for r in scored.rows.to_dict(orient="records")}
    for s in samples:
        for it in s["items"]:
            if it["item_id"] not in out:
                out[it["item_id"]] = "skipped" if it["status"] == "skipped" else "not_answered"
    return dict(sorted(out.items()))


def herding_statistics(samples: Iterable[Mapping], replies: Mapping[str, Mapping], model: str) -> dict[str, float]:
    """The pooled statistics of stage 04 on the replies: Eq. 1 herding and accuracy per condition
    (`eq1_by_sector`, unparsed = no match, not answered outside N), the counts behind N, and the
    paired tests (`paired_tests`: exact McNemar pairs and p-values, Stuart-Maxwell), flat
    `name -> number` as harness metrics are. Partial input (some reports, some conditions, no
    answer yet) gives the statistics it defines; an undefined one (NaN) is left out."""
    samples = list(samples)
    cond, reports, labels = frames_of(samples)
    scored = score_frame(predictions_frame(samples, replies, model), cond, labels, reports)
    out: dict[str, float] = {k: float(scored.counts[k]) for k in ("scored_rows", "not_answered", "unparsed", "skipped")}
    rows = scored.rows
    if rows.empty:
        return out
    for outcome in (HERDING, ACCURACY):
        cells = eq1_by_sector(rows, outcome)
        for rec in cells[cells["sector"] == POOLED].to_dict(orient="records"):
            out[f"{outcome}/{rec['condition']}"] = float(rec["value"])
            out[f"{outcome}_n/{rec['condition']}"] = float(rec["n"])
    tests = paired_tests(rows)
    if not tests.empty:
        for rec in tests[tests["sector"] == POOLED].to_dict(orient="records"):
            fields = (
                ("n_pairs", "only_a", "only_b", "rate_a", "rate_b", "pvalue")
                if rec["method"] == "exact McNemar"
                else ("n_pairs", "statistic", "df", "pvalue")
            )
            for f in fields:
                out[f"{rec['test']}/{f}"] = float(rec[f])
    return {k: v for k, v in out.items() if not math.isnan(v)}
