"""The rehearsal's check of stage 02 on every generated report: the rating statement found where it was
planted and by the rule a front-matter reader names, removal leaving every other byte, the fake reading
back as the new rating.

Why: the table check (`finlib.rehearsal.rehearse.cells_recovery`) sees stage 02 only through the simulated
models' answers, so a statement found by the wrong rule, a removal that also takes the line after it, or a
fake whose number and label disagree may move no cell beyond its tolerance. Here every report is compared
with what the generator planted (`finlib.finbias.data.synth_planted.STATEMENT_FIELDS`): the rule, the
statement's span and the first byte removal keeps come from the generator's layout, and a provider
layout's fake is read at its planted slots on the providers' scales
(`finlib.finbias.data.provider_layouts.read_statement`), never with stage 02's reader.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pandas as pd

from finlib.finbias.data.provider_layouts import read_statement
from finlib.finbias.vocab import Rating

EXAMPLES = 5  # problems shown per kind


def expected_removal(text: str, start: int, keep_from: int) -> str:
    """The report without its planted statement: the front matter before it, then every byte from `keep_from`
    (a statement opening the report leaves the text from the next unit on, as the authors remove it)."""
    front = text[:start]
    return text[keep_from:] if not front.strip() else front + text[keep_from:]


def fake_problem(text: str, fake: str, rec: dict, new: Rating) -> str | None:
    """Why a fake is wrong (None when right): a byte outside the statement changed, or, for a provider
    layout, the rewritten statement does not read as `new` at its planted slots."""
    start, end = int(rec["statement_start"]), int(rec["statement_end"])
    tail = len(text) - end
    if fake[:start] != text[:start] or len(fake) < start + tail or fake[len(fake) - tail :] != text[end:]:
        return "bytes outside the statement changed"
    if not len(rec["slot_kinds"]):
        return None
    shown, why = read_statement(fake[start : len(fake) - tail], list(rec["statement_pieces"]), list(rec["slot_kinds"]))
    if shown is not new:
        return f"the statement {fake[start : len(fake) - tail]!r} does not read {new.value}: {why}"
    return None


def statement_check(
    planted: pd.DataFrame, texts: pd.Series, statements: pd.DataFrame, conditions: pd.DataFrame
) -> dict[str, Any]:
    """Every report's stage 02 rule and rows against its planted statement. `texts`: report_id -> the
    generated text; `statements`: stage 02's rating_statements artifact; `conditions`: its conditions.
    Returns counts per layout kind and rule, and the problems (empty when all agree)."""
    st = statements.set_index("report_id")
    rows = conditions[conditions["status"] == "ok"]
    no_rating = rows[rows["condition"] == "no_rating"].set_index("report_id")["text"]
    fakes = rows[rows["condition"] == "fake_rating"]
    bad: dict[str, list[str]] = {"rule": [], "removal": [], "fake": []}
    counts: Counter = Counter()
    recs = {str(r["report_id"]): r for r in planted.to_dict("records")}
    for rid, rec in recs.items():
        kind = "provider" if len(rec["slot_kinds"]) else "first_sentence"
        counts[f"{kind} reports"] += 1
        got = st.loc[rid] if rid in st.index else None
        if got is None or got["rule"] != rec["rule"] or got["rating"] != rec["analyst_rating"]:
            said = "no row" if got is None else f"{got['rule']} {got['rating']} ({got['detail']})"
            bad["rule"].append(f"{rid}: planted {rec['rule']} {rec['analyst_rating']}, stage 02 {said}")
            continue
        counts[f"{kind} found by {rec['rule']}"] += 1
        text = texts[rid]
        if rid in no_rating.index:
            want = expected_removal(text, int(rec["statement_start"]), int(rec["keep_from"]))
            if no_rating[rid] != want:
                bad["removal"].append(f"{rid}: no_rating starts {no_rating[rid][:80]!r}, planted {want[:80]!r}")
            counts[f"{kind} removals checked"] += 1
    for f in fakes.itertuples():
        rec = recs.get(str(f.report_id))
        if rec is None or str(f.report_id) not in texts.index:
            continue
        why = fake_problem(texts[str(f.report_id)], f.text, rec, Rating(f.fake_rating))
        counts[f"{'provider' if len(rec['slot_kinds']) else 'first_sentence'} fakes checked"] += 1
        if why:
            bad["fake"].append(f"{f.report_id} -> {f.fake_rating}: {why}")
    problems = [
        f"{len(v)} stage 02 {k} problems against the planted statements: " + "; ".join(v[:EXAMPLES])
        for k, v in bad.items()
        if v
    ]
    return {"counts": dict(counts), "problems": problems}
