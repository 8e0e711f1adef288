"""Stage 06, the paper's own figures: Fin-Bias Figures 2-5 (one report in its four conditions)
and 6-9 (a case study of one model's answers), drawn from this run's artifacts in the shared style
of `finlib.finbias.figures.stage`.
"""
from __future__ import annotations

import difflib
import textwrap

import numpy as np
import pandas as pd

from finlib.core.config import RunConfig
from finlib.core.tables import figure_width
from finlib.finbias.figures.base import (
    MIN_TEXT_PT,
    RATING_COLORS,
    FigureRecord,
    chars_per_line,
    condition_order,
    figure_style,
    finish,
    panel_grid,
)
from finlib.finbias.sentences import split_sentences
from finlib.finbias.vocab import Condition

# ---- Figures 2-5: one report in its four conditions ---------------------------------------

def sentence_marks(original: str, text: str | None) -> list[tuple[str, str]]:
    """(sentence, mark) for a condition's text against the original: "same", "removed" (in the
    original only) or "changed" (new or rewritten), in reading order."""
    a = split_sentences(original)
    if text is None:
        return [(s, "removed") for s in a]
    b = split_sentences(text)
    out: list[tuple[str, str]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op == "equal":
            out += [(s, "same") for s in a[i1:i2]]
        else:
            out += [(s, "removed") for s in a[i1:i2]] + [(s, "changed") for s in b[j1:j2]]
    return out


PAGE_HEIGHT_IN = 9.0  # Figures 2-5 fill a journal page's text height

MARK_STYLE = {"same": ("#222222", ""), "removed": ("#c8423b", "[removed] "), "changed": ("#1a7f3c", "[new] ")}


def _draw_text(ax, marks: list[tuple[str, str]], max_chars: int, width: int) -> None:
    """Sentences line by line at print size; the line step follows the panel's height in points."""
    ax.set_axis_off()
    bbox = ax.get_position()
    height_pt = bbox.height * ax.figure.get_figheight() * 72
    step = 1.2 * MIN_TEXT_PT / height_pt
    y, used = 0.98, 0
    for sentence, mark in marks:
        color, prefix = MARK_STYLE[mark]
        lines = textwrap.wrap(prefix + sentence, width)
        for line in lines:
            if used > max_chars or y < step:
                ax.text(0.0, y, "…", transform=ax.transAxes, fontsize=MIN_TEXT_PT, va="top")
                return
            ax.text(0.0, y, line, transform=ax.transAxes, fontsize=MIN_TEXT_PT, va="top", color=color)
            y -= step
            used += len(line)


def pick_example(conditions: pd.DataFrame, wanted: str | None) -> str:
    """The report shown: `wanted`, else the first with all four conditions ok."""
    if wanted is not None:
        if wanted not in set(conditions["report_id"].astype(str)):
            raise ValueError(f"figures.example_report: report {wanted!r} is not in conditions.parquet")
        return wanted
    ok = conditions[conditions["status"] == "ok"].groupby("report_id")["condition"].nunique()
    full = sorted(ok[ok == ok.max()].index.astype(str)) if len(ok) else []
    if not full:
        raise ValueError("conditions.parquet has no report with an ok condition")
    return full[0]


def plot_conditions_example(cfg: RunConfig, conditions: pd.DataFrame, report_id: str,
                            max_chars: int = 1400) -> tuple[object, FigureRecord]:
    """Fin-Bias Figures 2-5: the same report original / without rating / fake rating / without
    opinions, removed sentences in red, new or rewritten ones in green."""
    import matplotlib.pyplot as plt

    rows = conditions[conditions["report_id"].astype(str) == report_id].set_index("condition")
    original = str(rows.loc[Condition.ORIGINAL.value, "text"])
    order = condition_order()
    nrows, ncols = panel_grid(cfg, len(order), 2)
    width = figure_width(cfg)
    wrap = chars_per_line(0.95 * width / ncols)  # a panel's share of the width, less the gap between panels
    how_many = "the four" if len(order) == 4 else f"the {len(order)}"
    title = textwrap.wrap(f"Report {report_id} in {how_many} conditions (analyst rating: "
                          f"{rows.iloc[0]['analyst_rating']})", chars_per_line(width, 9))
    with figure_style():  # a page's height whichever the column: a single column shows less text per condition
        fig, axes = plt.subplots(nrows, ncols, figsize=(width, PAGE_HEIGHT_IN), squeeze=False)
        top_in = 0.3 + 0.18 * len(title)  # the suptitle's 9 pt lines above the first panels' titles
        fig.subplots_adjust(left=0.01, right=0.99, top=1 - top_in / PAGE_HEIGHT_IN, bottom=0.01, wspace=0.08,
                            hspace=0.08 * nrows / 2)
        for ax in axes.ravel()[len(order):]:
            ax.set_axis_off()
        for ax, cond in zip(axes.ravel(), order):
            r = rows.loc[cond] if cond in rows.index else None
            if r is None or r["status"] != "ok":
                reason = "not built" if r is None else f"skipped: {r['skip_reason']}"
                ax.set_axis_off()
                ax.set_title(cond, loc="left")
                ax.text(0.0, 0.97, "\n".join(textwrap.wrap(reason, wrap)[:12]), va="top", fontsize=MIN_TEXT_PT,
                        color="#a33", transform=ax.transAxes)
                continue
            extra = f" (fake: {r['fake_rating']})" if cond == Condition.FAKE_RATING.value else ""
            ax.set_title(f"{cond}{extra}", loc="left")
            _draw_text(ax, sentence_marks(original, str(r["text"])), max_chars, wrap)
        fig.suptitle("\n".join(title), x=0.01, ha="left")
    rec = finish(cfg, fig, "fig_conditions_example",
                 "Fin-Bias Figures 2–5 equivalent: one report as each condition shows it; red = removed "
                 "sentence, green = new or rewritten sentence (the rating sentence), black = unchanged.")
    return fig, rec


# ---- Figures 6-9: case study of one model's answers ----------------------------------------

def reason_and_answer(raw: str | None) -> tuple[str, str]:
    """The `reason` and `answer` of a generated reply (JSON via `finlib.finbias.answers`), else the raw text."""
    from finlib.finbias.answers import parse_rating
    from finlib.llm.replies import read_json_objects

    if raw is None or (isinstance(raw, float) and np.isnan(raw)):
        return "(no reply stored)", "unparsed"
    objs = read_json_objects(str(raw))
    answer = parse_rating(str(raw))
    answer_s = answer.value if answer is not None else "unparsed"
    for obj in objs:
        if isinstance(obj, dict) and "reason" in obj:
            return str(obj["reason"]), answer_s
    return str(raw), answer_s


def case_rows(predictions: pd.DataFrame, model: str | None, report_id: str | None) -> pd.DataFrame:
    """Generated answers of one model on one report: unless given, the (model, report) with the most
    conditions answered, then the most answers parsed (a readable case first), then sorted order."""
    gen = predictions[(predictions["mode"] == "generate") & (predictions["status"] == "ok")]
    if model is not None:
        gen = gen[gen["model"] == model]
    if report_id is not None:
        gen = gen[gen["report_id"].astype(str) == report_id]
    if gen.empty:
        return gen
    parsed = gen["parsed"].fillna(False).astype(bool) if "parsed" in gen.columns else pd.Series(False, gen.index)
    rank = gen.assign(_parsed=parsed).groupby(["model", "report_id"]).agg(
        conds=("condition", "nunique"), parsed=("_parsed", "sum")).reset_index()
    best = rank.sort_values(["conds", "parsed", "model", "report_id"], ascending=[False, False, True, True]).iloc[0]
    m, r = best["model"], best["report_id"]
    return gen[(gen["model"] == m) & (gen["report_id"] == r)]


def plot_case_study(cfg: RunConfig, predictions: pd.DataFrame, conditions: pd.DataFrame,
                    model: str | None = None, report_id: str | None = None) -> tuple[object, FigureRecord]:
    """Fin-Bias Figures 6-9: what one model answered (reason + answer) with and without the
    rating and under a fake rating, from the stored responses."""
    import matplotlib.pyplot as plt

    rows = case_rows(predictions, model, report_id)
    if rows.empty:
        raise LookupError("no generated (chain-of-thought) answers in predictions.parquet"
                          + (f" for model {model!r}" if model else "") + ": set inference.generate_subset > 0")
    m, rid = rows["model"].iloc[0], str(rows["report_id"].iloc[0])
    ctx = conditions[conditions["report_id"].astype(str) == rid].set_index("condition")
    conds = [c for c in (Condition.ORIGINAL, Condition.NO_RATING, Condition.FAKE_RATING)
             if c.value in set(rows["condition"])]
    width = figure_width(cfg)
    _, ncols = panel_grid(cfg, 2, 2)  # context beside the answer, or above it in a single column
    ctx_chars, out_chars = (chars_per_line(0.95 * width * share) for share in ((1, 1) if ncols == 1 else (0.43, 0.57)))
    with figure_style():
        # a panel holds up to 10 lines of 7 pt text (1.3 in with its title); side by side each row has room for more
        panel_in = 1.9 if ncols == 2 else 1.5
        fig, axes = plt.subplots(len(conds) * (3 - ncols), ncols, figsize=(width, panel_in * len(conds) * (3 - ncols)),
                                 squeeze=False, gridspec_kw={"width_ratios": [1, 1.3][:ncols]})
        for (ax_ctx, ax_out), cond in zip(axes.reshape(len(conds), 2), conds):
            r = rows[rows["condition"] == cond.value].iloc[0]
            first = split_sentences(str(ctx.loc[cond.value, "text"]))[:2] if cond.value in ctx.index else []
            reason, answer = reason_and_answer(r["raw_text"])
            ax_ctx.set_axis_off()
            ax_ctx.set_title(f"context: {cond.value} (first sentences)", loc="left")
            ax_ctx.text(0, 0.95, "\n".join(textwrap.wrap(" ".join(first), ctx_chars)[:9]), va="top", fontsize=MIN_TEXT_PT,
                        transform=ax_ctx.transAxes)
            ax_out.set_axis_off()
            ax_out.set_title(f"{m} answer: {answer}", loc="left", color=RATING_COLORS.get(answer, "black"))
            ax_out.text(0, 0.95, "\n".join(textwrap.wrap(reason, out_chars)[:10]), va="top", fontsize=MIN_TEXT_PT,
                        transform=ax_out.transAxes)
        title = f"Case study: {m} on report {rid} (analyst rating {ctx.iloc[0]['analyst_rating']})"
        fig.suptitle("\n".join(textwrap.wrap(title, chars_per_line(width, 9))), x=0.01, ha="left")
        fig.tight_layout()
    rec = finish(cfg, fig, "fig_case_study",
                 f"Fin-Bias Figures 6–9 equivalent: {m}'s stored chain-of-thought answers (reason, answer) "
                 "to the same report with the rating, without it and with a fake one.")
    return fig, rec
