"""Synthetic artifacts at Fin-Bias's full shape, built directly (no stages 00-03 needed).

8,868 reports x 4 conditions x 19 models = 673,968 answers, ~480 firms, the nine sectors, and
condition texts of about 3,000 words (stage 04 reads them as the parser's echo context). Answers
mix the forms real servers return: a JSON object with a reason, fenced JSON with text around it,
`<think>` reasoning before the JSON, plain "Answer: X" statements, a report copied back (echo),
prose without an answer, replies cut at the token limit, and a few transport errors. A fraction
of replies repeat exactly (short greedy answers), as they do with real models.

Used by benchmarks/bench_scale.py; also small enough at 1/64 of the corpus for equality checks.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from finlib.finbias.vocab import SECTORS, Condition

FULL_REPORTS = 8_868
N_MODELS = 19
N_FIRMS = 480
RATING_NAMES = ("bullish", "neutral", "bearish")
CONDITIONS = (Condition.ORIGINAL.value, Condition.NO_RATING.value, Condition.NO_OPINION.value,
              Condition.FAKE_RATING.value)
_WORDS = ("revenue margin guidance quarter growth demand pricing backlog cash flow capex dividend buyback "
          "segment outlook volume inventory supply costs headwinds tailwinds valuation multiple earnings").split()
_REASONS = ("Revenue growth and margin expansion support the outlook",
            "Guidance was cut and demand is weakening across segments",
            "Results were in line; valuation already reflects the upside",
            "Cash flow is strong but capex is rising faster than expected",
            "The backlog grew while pricing held, a constructive setup")


def _body(rng: np.random.Generator, n_words: int) -> str:
    """About `n_words` words of report prose with line-broken lists (one shared body per variant)."""
    words = rng.choice(_WORDS, size=n_words)
    lines = [" ".join(words[i:i + 14]) + "." for i in range(0, n_words, 14)]
    return "\n".join(f"- {ln}" if i % 9 == 0 else ln for i, ln in enumerate(lines))


def _answer(rng: np.random.Generator, rating: str, i: int, context_head: str) -> tuple[str, bool]:
    """One reply (text, cut at the token limit?) in one of the forms servers return."""
    reason = f"{_REASONS[i % len(_REASONS)]} (item {i})."
    u = rng.random()
    if u < 0.55:
        return f'{{"answer": "{rating}", "reason": "{reason}"}}', False
    if u < 0.65:
        return f'{{"answer": "{rating.capitalize()}"}}', False           # short greedy reply: repeats exactly
    if u < 0.72:
        return f'Here is my assessment.\n```json\n{{\n  "answer": "{rating}",\n  "reason": "{reason}"\n}}\n```', False
    if u < 0.79:
        return (f"<think>The report says growth; maybe {RATING_NAMES[(i + 1) % 3]}? Weighing it: {reason}</think>\n"
                f'{{"answer": "{rating}", "reason": "{reason}"}}'), False
    if u < 0.85:
        return f"Based on the report, {reason.lower()}\n\nAnswer: **{rating.capitalize()}**", False
    if u < 0.89:
        return context_head[:300], False                                 # the report copied back
    if u < 0.93:
        return f"The company reported results. {reason} Analysts remain cautious.", False
    if u < 0.97:
        return f'{{"answer": "{rating}", "reason": "{reason} Furthermore the', True   # cut at the limit
    return f"{rating.upper()}", False


def scale_frames(n_reports: int = FULL_REPORTS, n_models: int = N_MODELS, seed: int = 0,
                 words: int = 3_000) -> dict[str, pd.DataFrame]:
    """reports, labels, conditions (with text) and predictions for `n_reports` reports x 4 x models."""
    rng = np.random.default_rng(seed)
    firms = [f"F{j:03d}" for j in range(N_FIRMS)]
    firm_sector = {f: SECTORS[j % len(SECTORS)] for j, f in enumerate(firms)}
    rid = [f"r{i:05d}" for i in range(n_reports)]
    tick = [firms[i % N_FIRMS] for i in range(n_reports)]
    analyst = rng.choice(RATING_NAMES, size=n_reports, p=[0.6, 0.3, 0.1])
    reports = pd.DataFrame({"report_id": rid, "ticker": tick, "sector": [firm_sector[t] for t in tick],
                            "analyst_rating": analyst.astype(object)})
    labels = pd.DataFrame({"report_id": rid, "label": rng.choice(RATING_NAMES, size=n_reports).astype(object)})
    bodies = [_body(rng, words) for _ in range(8)]
    cond_rows = []
    for i in range(n_reports):
        fake = RATING_NAMES[(RATING_NAMES.index(analyst[i]) + 1) % 3]
        for c in CONDITIONS:
            shown = {"original": analyst[i], "fake_rating": fake}.get(c)
            head = (f"{tick[i]} maintained at {shown.capitalize()} with a revised target price; "
                    if shown else f"{tick[i]} reported quarterly results; ")
            skipped = c == "no_opinion" and i % 97 == 0                 # stage 02 sets a few aside
            cond_rows.append({"item_id": f"{rid[i]}:{c}", "report_id": rid[i], "condition": c,
                              "analyst_rating": analyst[i], "fake_rating": fake if c == "fake_rating" else None,
                              "reference_rating": shown if shown else analyst[i],
                              "status": "skipped" if skipped else "ok",
                              "skip_reason": "no rating sentence" if skipped else None,
                              "text": head + bodies[i % len(bodies)]})
    conditions = pd.DataFrame(cond_rows)
    pred_rows = []
    k = 0
    for m in range(n_models):
        follow = 0.3 + 0.03 * m                                         # how strongly it follows a shown rating
        for row in cond_rows:
            k += 1
            if row["status"] == "skipped":
                pred_rows.append((row["item_id"], row["report_id"], row["condition"], f"model-{m:02d}", None,
                                  "skipped", row["skip_reason"], None))
                continue
            ref = row["reference_rating"]
            rating = ref if rng.random() < follow else RATING_NAMES[rng.integers(3)]
            if rng.random() < 0.004:
                pred_rows.append((row["item_id"], row["report_id"], row["condition"], f"model-{m:02d}", None,
                                  "error", "HTTP 503 after 5 attempts", None))
                continue
            text, cut = _answer(rng, rating, k, row["text"])
            pred_rows.append((row["item_id"], row["report_id"], row["condition"], f"model-{m:02d}", text, "ok",
                              None, cut))
    pred = pd.DataFrame(pred_rows, columns=["item_id", "report_id", "condition", "model", "raw_text", "status",
                                            "error", "truncated_output"])
    pred["mode"] = "generate"
    for c in ("p_bullish", "p_neutral", "p_bearish"):
        pred[c] = np.nan
    pred["truncated_output"] = pred["truncated_output"].astype("boolean")
    return {"reports": reports, "labels": labels, "conditions": conditions, "predictions": pred}
