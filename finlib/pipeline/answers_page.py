"""The report's per-answer viewer (`answers.html`): every answer of stage 03 with its prompt text, the
model's reply, the parsed answer, tokens and cost, filterable by model, condition and sector in the page
itself (a few lines of inline script, nothing fetched: the report opens offline).

Large runs are cut at `MAX_ROWS` rows, and the page says how many of how many it shows (the parquet has all).
"""

from __future__ import annotations

import html
import json

import pandas as pd

from finlib.core.artifacts import ArtifactTexts, MissingArtifactError, existing_artifact, read_frame, read_frame_head
from finlib.core.config import RunConfig

MAX_ROWS = 3000
PROMPT_CHARS = 600
COLUMNS = (
    "model",
    "condition",
    "sector",
    "item_id",
    "prompt",
    "reply",
    "answer",
    "parsed",
    "input_tokens",
    "output_tokens",
    "cost_usd",
)
FILTERS = ("model", "condition", "sector")
SCRIPT = """
function apply(){const f={};document.querySelectorAll('select[data-col]').forEach(s=>{if(s.value)f[s.dataset.col]=s.value});
let shown=0;document.querySelectorAll('#answers tbody tr').forEach(r=>{const ok=Object.entries(f).every(([k,v])=>r.dataset[k]===v);
r.style.display=ok?'':'none';if(ok)shown++});document.getElementById('shown').textContent=shown}
document.querySelectorAll('select[data-col]').forEach(s=>s.addEventListener('change',apply));apply();
"""


def answer_rows(cfg: RunConfig) -> tuple[pd.DataFrame, int]:
    """(rows shown, rows in the run): the first `MAX_ROWS` predictions joined to their condition's
    text and report's sector. Only the rows shown are read, and only their texts: at the paper's size
    the whole predictions joined to every prompt would take tens of GB for a page of 3,000 rows."""
    pred, total = read_frame_head(cfg, "predictions", MAX_ROWS)
    try:
        texts = ArtifactTexts(existing_artifact(cfg, "conditions")).subset(pred["item_id"])
        pred["prompt"] = pred["item_id"].map(texts)
    except MissingArtifactError:
        pred["prompt"] = ""
    try:
        reports = read_frame(cfg, "reports", ["report_id", "sector"])
        pred = pred.merge(reports, on="report_id", how="left")
    except (MissingArtifactError, KeyError):
        pred["sector"] = ""
    pred = pred.rename(columns={"raw_text": "reply"})
    for col in COLUMNS:
        if col not in pred.columns:
            pred[col] = ""
    pred["prompt"] = pred["prompt"].fillna("").astype(str).str.slice(0, PROMPT_CHARS)
    return pred[list(COLUMNS)], total


def _cell(v) -> str:
    return "" if v is None or (isinstance(v, float) and pd.isna(v)) else html.escape(str(v))


def answers_html(cfg: RunConfig) -> str | None:
    """The viewer page, or None when the run has no stage 03 predictions."""
    try:
        rows, total = answer_rows(cfg)
    except MissingArtifactError:
        return None
    selects = "".join(
        f'<label>{c} <select data-col="{c}"><option value="">all</option>'
        + "".join(f"<option>{_cell(v)}</option>" for v in sorted(rows[c].dropna().astype(str).unique()))
        + "</select></label> "
        for c in FILTERS
    )
    head = "".join(f"<th>{c}</th>" for c in COLUMNS)
    body = "".join(
        "<tr "
        + " ".join(f'data-{c}="{_cell(r[c])}"' for c in FILTERS)
        + ">"
        + "".join(f"<td>{_cell(r[c])}</td>" for c in COLUMNS)
        + "</tr>"
        for r in rows.to_dict("records")
    )
    note = f"{len(rows)} of {total} answers" + (
        f" (the first {MAX_ROWS}; all in predictions.parquet)" if total > len(rows) else ""
    )
    return f"""<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Answers — run {_cell(cfg.name)}</title>
<style>body{{font-family:system-ui,sans-serif;margin:1em}} table{{border-collapse:collapse;font-size:.8em}}
td,th{{border:1px solid #ddd;padding:.2em .4em;vertical-align:top;max-width:30em}} th{{position:sticky;top:0;background:#f7f7f7}}</style>
</head><body><h1>Answers of run <code>{_cell(cfg.name)}</code></h1><p>{note}; prompt: the condition's report text
(first {PROMPT_CHARS} characters). Showing <span id="shown">{len(rows)}</span>.</p><p>{selects}</p>
<table id="answers"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>
<script>{SCRIPT}</script>
<script type="application/json" id="columns">{json.dumps(list(COLUMNS))}</script></body></html>
"""
