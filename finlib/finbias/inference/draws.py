"""Repeated draws and the rating sweep at stage 03: which calls, and the `draws` artifact.

The paper samples every answer once (temperature 1.0). With `inference.samples_per_item: k`
each report x condition of the chosen reports is answered k times; the analyses beyond the
paper (`finlib.finbias.beyond.sampling_noise`, `finlib.finbias.beyond.rating_sweep`) read `draws.parquet`:
one row per model x item x draw.

What a draw is:
- generated answers (API, vLLM, llama.cpp, local generation): k independent calls at the run's
  sampling settings. Draw 0 is the paper's call (same store key); draws 1..k-1 carry their index
  in the store key (`finlib.llm.store.make_key(sample=s)`), so each is sent, stored and paid once
  and an interrupted run resumes.
- label scoring (local models, `inference.mode: score`): one forward pass gives the model's
  probability of each label after `{"answer": "`. A draw is a seeded sample from that
  distribution -- the answer the model would give at temperature 1.0 when it answers in the
  format, without paying k forward passes (the pass is deterministic: repeating it would give k
  identical rows). The seed is (run seed, CRC32 of model and item id, draw index): a report's
  draws do not depend on the other reports.
"""
from __future__ import annotations

import zlib

import numpy as np
import pandas as pd

from finlib.finbias.vocab import RATINGS, SWEEP_CONDITIONS

SWEEP_VALUES = frozenset(c.value for c in SWEEP_CONDITIONS.values())
DRAW_COLUMNS = ["model", "mode", "item_id", "report_id", "condition", "sample", "draw", "answer", "parsed",
                "answered", "parse_note", "status", "error", "p_bullish", "p_neutral", "p_bearish", "cache_key"]
DRAW_STORED, DRAW_LABELS = "stored answer", "label distribution"


def check_extension_params(inf: dict, source: str) -> None:
    """`inference.samples_per_item`, `samples_reports`, `extension_models`: checked, never defaulted."""
    from finlib.core.config import ConfigError

    k = inf["samples_per_item"]
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigError(f"{source}: inference.samples_per_item must be an integer >= 1 (1 = the paper's single "
                          f"draw), got {k!r}")
    n = inf["samples_reports"]
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
        raise ConfigError(f"{source}: inference.samples_reports must be null (all reports) or an integer >= 0, "
                          f"got {n!r}")
    ext = inf["extension_models"]
    if ext is not None and (not isinstance(ext, list) or not all(isinstance(m, str) for m in ext)):
        raise ConfigError(f"{source}: inference.extension_models must be null (every model) or a list of registry "
                          f"names, got {ext!r}")


def extension_models(inf: dict) -> set[str]:
    """The models of this run that answer the sweep and the repeated draws (null = every model).
    Listed names the run does not use (a params file that `extends:` the default with other
    models) answer nothing; `draws_summary` lists them in the stage report."""
    listed = inf["models"] if inf["extension_models"] is None else inf["extension_models"]
    return set(listed) & set(inf["models"])


def extension_report_ids(ok: pd.DataFrame, inf: dict) -> set[str]:
    """Reports whose conditions go to `draws.parquet`: the first `samples_reports` report ids
    (sorted; only when k > 1) and every report with sweep rows (their no_rating is the sweep's
    baseline). Empty in the paper's run (k = 1, no sweep)."""
    ids = set(ok.loc[ok["condition"].isin(SWEEP_VALUES), "report_id"].astype(str))
    if inf["samples_per_item"] > 1:
        paper = sorted(ok.loc[~ok["condition"].isin(SWEEP_VALUES), "report_id"].astype(str).unique())
        n = inf["samples_reports"]
        ids |= set(paper if n is None else paper[:n])
    return ids


def label_draws(probs: np.ndarray, k: int, seed: int, model: str, item_id: str) -> list[str | None]:
    """k seeded draws from one row's label distribution (renormalised over the three labels);
    None for every draw when a probability is missing (the row was not scored)."""
    p = np.asarray(probs, dtype=float)
    if not np.isfinite(p).all() or p.sum() <= 0:
        return [None] * k
    out = []
    for s in range(k):
        rng = np.random.default_rng([int(seed), zlib.crc32(f"{model}|{item_id}".encode()), s])
        out.append(RATINGS[int(rng.choice(3, p=p / p.sum()))].value)
    return out


def draws_frame(parsed: pd.DataFrame, k: int, seed: int) -> pd.DataFrame:
    """The `draws` artifact from stage 03's parsed rows of the extension (column `sample`).

    Generated rows are draws as they are; each label-scored row becomes k label draws (its
    `answer` is then the draw, `parse_note` "label_draw"; a row without probabilities stays
    unparsed). Not-answered rows keep `answered` False: outside N, like everywhere else."""
    if parsed.empty:
        return pd.DataFrame(columns=DRAW_COLUMNS)
    gen = parsed[parsed["mode"] != "score"].assign(draw=DRAW_STORED)
    rows = []
    for r in parsed[parsed["mode"] == "score"].itertuples(index=False):
        probs = [r.p_bullish, r.p_neutral, r.p_bearish]
        answers = label_draws(probs, k, seed, r.model, r.item_id) if r.answered else [None] * k
        for s, a in enumerate(answers):
            rows.append({**r._asdict(), "sample": s, "draw": DRAW_LABELS, "answer": a, "parsed": a is not None,
                         "parse_note": "label_draw" if a is not None else r.parse_note})
    out = pd.concat([gen, pd.DataFrame(rows, columns=list(parsed.columns) + ["draw"])], ignore_index=True)
    out["sample"] = out["sample"].astype("int64")
    out["answer"] = out["answer"].astype(object).where(out["answer"].notna(), None)
    for c in ("parsed", "answered"):
        out[c] = out[c].astype(bool)
    return (out[DRAW_COLUMNS].sort_values(["model", "item_id", "sample"], kind="stable").reset_index(drop=True))


def draws_summary(draws: pd.DataFrame, k: int, report_ids: set[str], inf: dict) -> dict:
    """Counts for inference_report.json: what the extension asked and what came back."""
    listed = inf["extension_models"] or []
    return {"samples_per_item": k, "reports": len(report_ids), "report_ids": sorted(report_ids)[:50],
            "extension_models": sorted(extension_models(inf)),
            "extension_models_not_in_run": sorted(set(listed) - set(inf["models"])), "rows": int(len(draws)),
            "by_model_condition": {f"{m}|{c}": {"draws": int(len(g)), "answered": int(g["answered"].sum()),
                                                "parsed": int(g["parsed"].sum())}
                                   for (m, c), g in draws.groupby(["model", "condition"])},
            "what_a_draw_is": {DRAW_STORED: "an independent call (sample index in the store key from draw 1 on)",
                               DRAW_LABELS: "a seeded sample from the label-scored distribution (one forward pass)"}}
