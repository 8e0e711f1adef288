"""Fin-Bias Tables 4-7 in the paper's own form, with the published numbers beside ours.

Kept apart from `finlib.finbias.scoring.stage` (metrics and tests) because layout changes for other reasons
than the statistics. The form follows the paper:

- main cells are the paper's Eq. 1 as defined once in `finlib.finbias.scoring.metrics` (`HERDING`,
  `ACCURACY`): the rate over *all* N answers of the cell, an answer that did not parse counting as
  no match; the parsed-only rates (`HERDING_PARSED`, `ACCURACY_PARSED`) are in the companion
  `*_parsed` tables, and the captions say which is which;
- the "Average" column holds the pooled rate (sector-count weighted), which is how most printed
  Averages were made (`printed_average_agreement` measures it on the published tables);
- rows are grouped "Private Models" / "Open-Source Models" as printed, named by the paper's row
  name (`paper_name` in the registry), with our registry name in a column of its own, and cells
  carry the paper's decimals per table; the parse rate, the not-answered count and N sit beside
  every model row.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from finlib.core.tables import paper_table
from finlib.finbias.scoring.metrics import ACCURACY, ACCURACY_PARSED, HERDING, HERDING_PARSED
from finlib.finbias.vocab import POOLED, SECTOR_MEAN, SECTORS, Condition

OURS, PAPER = "ours", "Fin-Bias (published)"
AVERAGE = "Average"   # ours: the pooled rate; the paper's rows: the printed Average
SIGNIF_NOTE = ("Markers: exact McNemar on paired reports (every report answered in both conditions, an unparsed "
               "answer counting as no match, as in the cells), Holm-adjusted across "
               "models per column: * p<0.05, ** p<0.01, *** p<0.001.")
GROUPS = {"private": "Private Models", "open": "Open-Source Models", "analyst": "Analyst"}
NOT_IN_PAPER = "Not in the paper"
GROUP_ORDER = ("Private Models", "Open-Source Models", NOT_IN_PAPER, "Analyst")


@dataclass(frozen=True)
class TableSpec:
    """One of the paper's Tables 4-7: which metric and conditions fill the cells."""

    name: str
    paper_key: str
    metric: str                             # the main cells: Eq. 1 over all answers (unparsed = no match)
    conditions: tuple[Condition, ...]       # one (single value) or two ("with/without")
    paper_columns: tuple[str, ...]
    test: str                               # PairedTest.name giving the marker
    analyst_row: bool
    caption: str
    paper_digits: int = 1                   # decimals as printed (T4/T6: 1, T5/T7: 2)
    extra_test: str = ""                    # a second paired test shown pooled in its own column
    extra_label: str = ""
    parsed_metric: str = ""                 # the companion table's parsed-only rate

    @property
    def parsed_name(self) -> str:
        return f"{self.name}_parsed"


TABLE_SPECS: tuple[TableSpec, ...] = (
    TableSpec("table4_herding_with_without", "finbias_table4", HERDING,
              (Condition.ORIGINAL, Condition.NO_RATING), ("with_rating", "without_rating"),
              "herding_with_vs_without", False,
              "Table 4: herding score (%) with/without the analyst rating in the report", 1,
              parsed_metric=HERDING_PARSED),
    TableSpec("table5_herding_fake", "finbias_table5", HERDING, (Condition.FAKE_RATING,),
              ("herding_fake",), "fake_herding_fake_vs_original", False,
              "Table 5: herding score (%) towards a fake rating that replaces the analyst's", 2,
              parsed_metric=HERDING_PARSED),
    TableSpec("table6_accuracy_with_without", "finbias_table6", ACCURACY,
              (Condition.ORIGINAL, Condition.NO_RATING), ("with_rating", "without_rating"),
              "accuracy_with_vs_without", True,
              "Table 6: accuracy (%) against return-based labels with/without the analyst rating", 1,
              parsed_metric=ACCURACY_PARSED),
    TableSpec("table7_accuracy_no_opinion", "finbias_table7", ACCURACY, (Condition.NO_OPINION,),
              ("accuracy",), "accuracy_no_opinion_vs_no_rating", True,
              "Table 7: accuracy (%) with MPQA strong-subjective sentences (and the rating) removed", 2,
              "herding_no_opinion_vs_no_rating", "Herding no_opinion/no_rating % (pooled pairs)",
              parsed_metric=ACCURACY_PARSED),
)


def _fmt(v: float | None, digits: int = 1) -> str:
    return "–" if v is None or not np.isfinite(v) else f"{100 * v:.{digits}f}"


CELL_KEY = ("model", "condition", "metric", "sector")
Cells = dict[tuple[str, str, str, str], dict[str, Any]]


def index_cells(metrics: pd.DataFrame) -> Cells:
    """`metrics` rows by (model, condition, metric, sector), so a table looks each cell up once
    instead of filtering the long frame per cell. A repeated key is an error (two values for
    one cell)."""
    keys = list(CELL_KEY)
    dup = metrics.duplicated(keys)
    if dup.any():
        raise ValueError(f"metrics: more than one row for cell {tuple(metrics.loc[dup, keys].iloc[0])}")
    return dict(zip(metrics[keys].itertuples(index=False, name=None), metrics.to_dict("records")))


def _cell(cells: Cells, model: str, conds: tuple[Condition, ...], metric: str, sector: str,
          skipped: dict[tuple[str, str], str], digits: int) -> str:
    parts = []
    for c in conds:
        if (model, c.value) in skipped:
            parts.append("skipped")
            continue
        hit = cells.get((model, c.value, metric, sector))
        parts.append(_fmt(hit["value"], digits) if hit is not None else "–")
    return "/".join(parts)


def _skip_map(skipped: pd.DataFrame, rows: pd.DataFrame, partial: bool = False) -> dict[tuple[str, str], str]:
    """(model, condition) -> "reason (n)" for conditions where *nothing* was scored for the model
    (or, with `partial`, where some items were skipped and the rest scored)."""
    out: dict[tuple[str, str], str] = {}
    if skipped is None or skipped.empty:
        return out
    # distinct pairs first: a set over every row walks each scored answer in Python, once per table
    scored = set(rows[["model", "condition"]].drop_duplicates().itertuples(index=False, name=None))
    for (model, cond), g in skipped.groupby(["model", "condition"]):
        if ((model, cond) in scored) == partial:
            out[(model, cond)] = "; ".join(f"{r} ({n})" for r, n in zip(g["reason"], g["n"]))
    return out


def paper_rows(spec: TableSpec) -> pd.DataFrame:
    """The published rows of a table, reshaped to our layout (cells as printed, e.g. '82.7/70.2')."""
    p = paper_table(spec.paper_key)
    cols = list(spec.paper_columns)

    def fmt(row: pd.Series) -> str:
        return "/".join("" if pd.isna(row[c]) else f"{float(row[c]):.{spec.paper_digits}f}"
                        for c in cols).rstrip("/")

    p = p.assign(cell=p.apply(fmt, axis=1))
    wide = p.pivot(index="model", columns="sector", values="cell")
    order = list(dict.fromkeys(p["model"]))
    wide = wide.reindex(order)
    groups = p.drop_duplicates("model").set_index("model")["group"].reindex(order)
    out = pd.DataFrame({"Source": PAPER, "Group": groups.map(GROUPS).fillna(NOT_IN_PAPER).to_numpy(),
                        "Model": wide.index, "Registry name": ""})
    for s in SECTORS:
        out[s] = wide[s].to_numpy()
    out[AVERAGE] = wide["Average"].to_numpy()
    out[SECTOR_MEAN] = ""
    return out


POOLED_CI = f"{POOLED} {{ci}} CI"


def base_model(model: str) -> str:
    """Registry name of a table row ("m [score]" -> "m"; see `scoring.label_model_modes`)."""
    return re.sub(r" \[(?:score|generate)\]$", "", model)


def paper_row_name(model: str, paper_names: dict[str, str], paper_models: Iterable[str]) -> str | None:
    """The paper's row for one of our models, via the registry's `paper_name` (case-insensitive:
    Table 7 prints "Mistral-7B-It-v0.3" where Tables 4-6 print "Mistral-7B-it-v0.3")."""
    want = paper_names.get(base_model(model))
    if not want:
        return None
    hits = [p for p in paper_models if p.lower() == want.lower()]
    return hits[0] if hits else None


def _pooled_columns(pooled: list[dict[str, Any] | None], digits: int) -> dict[str, str]:
    """The pooled cells' interval, parse rate and N per condition ("a/b"); '–' (N 0) for no rows."""
    return {
        "ci": "/".join(f"[{_fmt(h['ci_low'], digits)}, {_fmt(h['ci_high'], digits)}]" if h else "[–, –]"
                       for h in pooled),
        "parse_rate": "/".join(_fmt(h["parse_rate"]) if h else "–" for h in pooled),
        "n": "/".join(str(int(h["n"])) if h else "0" for h in pooled),
    }


def _extra_test_cell(tests: pd.DataFrame, name: str, model: str, digits: int) -> str:
    """"rate_a/rate_b marker" of a pooled paired McNemar test, '–' when it could not run."""
    if tests.empty:
        return "–"
    hit = tests[(tests["test"] == name) & (tests["model"] == model) & (tests["sector"] == POOLED)]
    if not len(hit) or not hit["n_pairs"].iloc[0]:
        return "–"
    h = hit.iloc[0]
    return f"{_fmt(h['rate_a'], digits)}/{_fmt(h['rate_b'], digits)}{h['marker']} (pairs {int(h['n_pairs'])})"


def _not_answered_map(not_answered: pd.DataFrame | None) -> dict[tuple[str, str], int]:
    if not_answered is None or not_answered.empty:
        return {}
    return {k: int(v) for k, v in not_answered.groupby(["model", "condition"])["n"].sum().items()}


def _row_identity(model: str, paper_names: dict[str, str], paper: pd.DataFrame) -> tuple[str, str, int]:
    """(group, shown name, order) of one of our rows: the paper's group and row name when the
    registry's `paper_name` matches a printed row (a mode suffix kept), else "Not in the paper"."""
    if model == "Analyst":
        return "Analyst", "Analyst", len(paper)
    hit = paper_row_name(model, paper_names, list(paper["Model"]))
    if hit is None:
        return NOT_IN_PAPER, model, len(paper)
    suffix = model[len(base_model(model)):]
    idx = int(np.flatnonzero(paper["Model"].to_numpy() == hit)[0])
    return str(paper["Group"].iloc[idx]), hit + suffix, idx


def build_table(spec: TableSpec, metrics: pd.DataFrame, tests: pd.DataFrame, rows: pd.DataFrame,
                skipped: pd.DataFrame, paper_names: dict[str, str] | None = None,
                ci: float = 0.95, not_answered: pd.DataFrame | None = None, parsed: bool = False) -> pd.DataFrame:
    """Our rows (grouped and named as printed) x sector columns, then the paper's rows.

    Cells are percentages with the paper's decimals, "with/without" where the paper has two
    numbers; `parsed=False` fills them with Eq. 1 over all answers (`spec.metric`), `parsed=True`
    with the parsed-only rate (`spec.parsed_metric`, the companion table). The marker after a
    cell is the table's paired test (Holm across models). "Average" is the pooled rate for our
    rows and the printed Average for the paper's. Skipped conditions read "skipped" with the
    reason in Notes, never 0; not-answered items (server errors) are counted in their own column
    and are outside N.
    """
    metric = spec.parsed_metric if parsed else spec.metric
    digits = spec.paper_digits
    paper_names = paper_names or {}
    skip = _skip_map(skipped, rows)
    partial = _skip_map(skipped, rows, partial=True)
    unanswered = _not_answered_map(not_answered)
    paper = paper_rows(spec)
    models = sorted(m for m in set(rows["model"].unique()) | {m for m, _ in skip} if m != "Analyst")
    if spec.analyst_row:
        models.append("Analyst")
    ident = {m: _row_identity(m, paper_names, paper) for m in models}
    models.sort(key=lambda m: (GROUP_ORDER.index(ident[m][0]), ident[m][2], m))
    cells = index_cells(metrics[metrics["metric"] == metric])
    markers = ({} if tests.empty else
               {(m, s): mk for m, s, mk in tests.loc[tests["test"] == spec.test, ["model", "sector", "marker"]]
                .itertuples(index=False, name=None)})
    ci_col = POOLED_CI.format(ci=f"{100 * ci:g} %")
    records = []
    for model in models:
        conds = (Condition.ORIGINAL,) if model == "Analyst" else spec.conditions
        group, shown, _ = ident[model]
        rec = {"Source": OURS if model != "Analyst" else f"{OURS} (analyst baseline)", "Group": group,
               "Model": shown, "Registry name": "" if model == "Analyst" else model}
        for sector, col in (*((s, s) for s in SECTORS), (POOLED, AVERAGE), (SECTOR_MEAN, SECTOR_MEAN)):
            cell = _cell(cells, model, conds, metric, sector, skip, digits)
            if model != "Analyst" and sector != SECTOR_MEAN:
                cell += markers.get((model, sector), "")
            rec[col] = cell
        pooled = _pooled_columns([cells.get((model, c.value, metric, POOLED)) for c in conds], digits)
        rec[ci_col] = pooled["ci"]
        if spec.extra_test:
            rec[spec.extra_label] = "" if model == "Analyst" else _extra_test_cell(tests, spec.extra_test, model,
                                                                                     digits)
        rec["Parse rate %"] = pooled["parse_rate"]
        rec["Not answered"] = "/".join(str(unanswered.get((model, c.value), 0)) for c in conds)
        rec["N"] = pooled["n"]
        notes = [f"{c.value} skipped: {skip[(model, c.value)]}" for c in conds if (model, c.value) in skip]
        notes += [f"{c.value}: some items skipped, {partial[(model, c.value)]}" for c in conds
                  if (model, c.value) in partial]
        if group not in (NOT_IN_PAPER, "Analyst"):
            notes.append(f"in the paper as '{shown.split(' [')[0]}' (see published rows)")
        rec["Notes"] = "; ".join(notes)
        records.append(rec)
    columns = ["Source", "Group", "Model", "Registry name", *SECTORS, AVERAGE, SECTOR_MEAN, ci_col,
               *([spec.extra_label] if spec.extra_test else []), "Parse rate %", "Not answered", "N", "Notes"]
    ours = pd.DataFrame.from_records(records, columns=columns)
    paper = paper.assign(**{"Parse rate %": "", "Not answered": "", "N": "", "Notes": "published, as printed",
                            ci_col: ""})
    if spec.extra_test:
        paper[spec.extra_label] = ""
    return pd.concat([ours, paper[columns]], ignore_index=True)


def ci_table(spec: TableSpec, metrics: pd.DataFrame) -> pd.DataFrame:
    """Long companion of a table: every cell's value (Eq. 1 over all answers and parsed-only),
    95 % cluster-bootstrap CI, N and parse rate."""
    conds = {c.value for c in spec.conditions} | ({Condition.ORIGINAL.value} if spec.analyst_row else set())
    m = metrics[(metrics["metric"].isin([spec.metric, spec.parsed_metric])) & metrics["condition"].isin(conds)]
    if not spec.analyst_row:
        m = m[m["model"] != "Analyst"]
    out = m.assign(**{c: 100 * m[c] for c in ("value", "ci_low", "ci_high", "parse_rate")})
    return out.sort_values(["model", "metric", "condition", "sector"]).reset_index(drop=True)


def printed_average_agreement() -> dict[str, int]:
    """How the published Averages of Tables 4-7 were made, measured on the printed numbers: cells
    whose printed Average equals the sector-count-weighted (pooled, Table 2 counts) mean, or the
    plain mean of the nine sectors, after rounding to the printed decimals."""
    counts = paper_table("finbias_table2")
    counts = counts[counts["sector"] != "Total"].set_index("sector")["num"].astype(float)
    out = {"cells": 0, "pooled": 0, "plain_mean": 0}
    for spec in TABLE_SPECS:
        p = paper_table(spec.paper_key)
        for _, g in p.groupby("model", sort=False):
            g = g.set_index("sector")
            for c in spec.paper_columns:
                printed = g.loc["Average", c] if "Average" in g.index else np.nan
                if pd.isna(printed):
                    continue
                sec = g.drop(index="Average")[c].astype(float)
                w = counts.reindex(sec.index)
                out["cells"] += 1
                out["pooled"] += round(float((sec * w).sum() / w.sum()), spec.paper_digits) == float(printed)
                out["plain_mean"] += round(float(sec.mean()), spec.paper_digits) == float(printed)
    return out


def averaging_note(agreement: dict[str, int] | None = None) -> str:
    """The caption's sentence on the Average column, from the measured agreement."""
    a = agreement or printed_average_agreement()
    return (f"Our '{AVERAGE}' is the pooled rate over all reports (sector-count weighted); the paper's printed "
            f"Average equals the Table 2 count-weighted mean in {a['pooled']} of its {a['cells']} cells and the plain "
            f"mean of sectors in {a['plain_mean']} (rounded to the printed decimals), so the pooled rate is the "
            f"closer reading; '{SECTOR_MEAN}' (ours) is the unweighted mean of the nine sectors")


def caption_for(spec: TableSpec, note: str, parsed: bool = False) -> str:
    what = ("Companion table: rates over PARSED answers only (unparsed answers left out of N)" if parsed else
            "Main cells follow the paper's Eq. 1: rate over ALL N answered items, an unparsed or truncated answer "
            "counting as no match (parsed-only rates: the *_parsed companion table)")
    return (f"{spec.caption}. {what}. Not-answered items (server/network errors after retries) are outside N and "
            f"counted in 'Not answered'. Rows grouped and named as printed; 'Registry name' is ours. {note}. "
            f"Cells are %, '–' = no rows; parse rate and N per condition. {SIGNIF_NOTE} "
            f"'{POOLED} … CI': percentile interval of the pooled cell (cluster bootstrap over firms); "
            "every cell's interval is in the companion *_ci table.")
