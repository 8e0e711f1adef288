"""Our numbers beside the published ones, for every table of both papers.

One function, `paper_vs_ours`, joins any of our tables to a published one on shared keys
(matched case-insensitively: Fin-Bias Table 7 prints "Mistral-7B-It-v0.3" where Tables 4-6
print "-it-") and gives `diff = ours - paper` where both exist. Rows present on one side only
are kept and labelled, so a reader sees which models were not compared instead of a silently
shorter table. Stages 07/08 call the same function for the BizFinBench tables and save the
result with `write_comparison`; stage 06 collects every saved comparison. The Fin-Bias side of each
table (which of our numbers a published column is compared with) is `finlib.finbias.scoring.compare`.

Units: the caller puts both sides in the paper's unit (percent for Fin-Bias Tables 4-8).
A paper's printed "Average" is compared with our pooled average (Fin-Bias: `finlib.finbias.vocab.POOLED`): the
printed one matches the pooled rate (the sector-count-weighted mean) in most cells, the plain
mean of sectors in a few (see the paper tables' README and stage 04's captions).
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from finlib.core.config import RunConfig
from finlib.core.tables import read_table_csv, write_table

MATCHED, PAPER_ONLY, OURS_ONLY = "matched", "paper only", "ours only"
COMPARISON_PREFIX = "paper_vs_ours_"
COMPARISON_COLUMNS = ["table", "row", "column", "ours", "paper", "diff", "status"]
NOT_COMPARABLE = ("Synthetic default — not comparable: our numbers come from the seeded synthetic market "
                  "and a plumbing model; the differences only show that the comparison works.")


def _norm(values: pd.Series) -> pd.Series:
    return values.astype("string").str.strip().str.casefold()


def paper_vs_ours(ours: pd.DataFrame, paper: pd.DataFrame, keys: list[str], value: str,
                  paper_value: str | None = None, table: str = "") -> pd.DataFrame:
    """Join `ours` and `paper` on `keys` and return keys + ours, paper, diff (= ours - paper), status.

    `status` is "matched" where both sides have the row, else "paper only" / "ours only" (diff
    empty). Key matching ignores case and surrounding spaces; the paper's spelling is shown.
    A duplicated key on either side is an error (it would multiply rows silently).
    """
    paper_value = paper_value or value
    norm_keys = [f"_k{i}" for i in range(len(keys))]
    sides = []
    for side, df, col, name in (("ours", ours, value, "ours"), ("paper", paper, paper_value, "paper")):
        missing = [c for c in [*keys, col] if c not in df.columns]
        if missing:
            raise ValueError(f"paper_vs_ours({table or '?'}): {side} lacks column(s) {missing}")
        d = df[[*keys, col]].rename(columns={col: name})
        for k, nk in zip(keys, norm_keys):
            d[nk] = _norm(d[k])
        dup = d.duplicated(subset=norm_keys)
        if dup.any():
            raise ValueError(f"paper_vs_ours({table or '?'}): {side} has duplicate key "
                             f"{d.loc[dup, keys].iloc[0].tolist()} (keys match case-insensitively)")
        sides.append(d)
    a, b = sides
    merged = b.merge(a.drop(columns=keys), on=norm_keys, how="outer", indicator=True)
    ours_only = merged["_merge"] == "right_only"
    if ours_only.any():  # take our spelling of the keys for rows the paper lacks
        ours_keys = a.set_index(norm_keys)[keys]
        idx = pd.MultiIndex.from_frame(merged.loc[ours_only, norm_keys])
        merged.loc[ours_only, keys] = ours_keys.reindex(idx).to_numpy()
    merged["ours"] = pd.to_numeric(merged["ours"], errors="coerce")
    merged["paper"] = pd.to_numeric(merged["paper"], errors="coerce")
    merged["diff"] = merged["ours"] - merged["paper"]
    merged["status"] = merged["_merge"].map({"both": MATCHED, "left_only": PAPER_ONLY, "right_only": OURS_ONLY})
    merged.loc[merged["status"] != MATCHED, "diff"] = np.nan
    out = merged[[*keys, "ours", "paper", "diff", "status"]]
    return out.assign(table=table)[["table", *keys, "ours", "paper", "diff", "status"]].reset_index(drop=True)


def long_comparison(cmp: pd.DataFrame, row_keys: list[str], column: str) -> pd.DataFrame:
    """One comparison in the common long layout (table, row, column, ours, paper, diff, status)."""
    row = cmp[row_keys].astype("string").fillna("").agg(" | ".join, axis=1)
    return pd.DataFrame({"table": cmp["table"], "row": row, "column": column, "ours": cmp["ours"],
                         "paper": cmp["paper"], "diff": cmp["diff"], "status": cmp["status"]})


def write_comparison(cfg: RunConfig, table: str, long: pd.DataFrame, caption: str = "",
                     not_comparable: str | None = None) -> dict:
    """Save one table's comparison as `tables/paper_vs_ours_<table>.{csv,md,tex}` (stage 06 and the
    report collect them). `not_comparable`: the banner the caption carries (default: the synthetic-
    default banner on synthetic Fin-Bias runs; stages with their own caveat, e.g. BizFinBench's
    plumbing models on the published items, pass theirs, and then no synthetic-market caveat is added)."""
    missing = [c for c in COMPARISON_COLUMNS if c not in long.columns]
    if missing:
        raise ValueError(f"write_comparison({table}): missing column(s) {missing}")
    banner = not_comparable if not_comparable is not None else (NOT_COMPARABLE if cfg.is_synthetic else "")
    text = f"Paper vs ours, {table}: ours - paper where rows match" + (f". {caption}" if caption else "")
    return write_table(cfg, f"{COMPARISON_PREFIX}{table}", long[COMPARISON_COLUMNS],
                       text + (f" [{banner}]" if banner else ""), synthetic_caveat=not_comparable is None)


def read_comparisons(cfg: RunConfig) -> pd.DataFrame:
    """Every comparison saved under this run's tables (Fin-Bias from stage 06, BizFinBench from 07/08)."""
    frames = [read_table_csv(p) for p in sorted(cfg.tables_dir.glob(f"{COMPARISON_PREFIX}*.csv"))]
    frames = [f for f in frames if not f.empty and "status" in f.columns]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COMPARISON_COLUMNS)


def comparison_summary(long: pd.DataFrame) -> pd.DataFrame:
    """Per table and column: rows compared, rows on one side only, mean and mean absolute difference."""
    if long.empty:
        return pd.DataFrame(columns=["table", "column", "matched", "paper_only", "ours_only", "mean_diff",
                                     "mean_abs_diff"])
    g = long.groupby(["table", "column"], sort=True)
    out = pd.DataFrame({
        "matched": g["status"].apply(lambda s: int((s == MATCHED).sum())),
        "paper_only": g["status"].apply(lambda s: int((s == PAPER_ONLY).sum())),
        "ours_only": g["status"].apply(lambda s: int((s == OURS_ONLY).sum())),
        "mean_diff": g["diff"].mean(),
        "mean_abs_diff": g["diff"].apply(lambda d: d.abs().mean()),
    })
    return out.reset_index()


def split_by_table(long: pd.DataFrame) -> Iterable[tuple[str, pd.DataFrame]]:
    for table, g in long.groupby("table", sort=True):
        yield str(table), g.reset_index(drop=True)
