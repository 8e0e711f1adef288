"""DPO preference triplets (x, y_w, y_l) and the leakage-safe train/test split (Fin-Bias §5.2).

- x   = the original report (rating and opinions included: the model learns on the raw, biased text).
- y_l = the *herded* answer (rejected): a teacher reasons along the analyst and ends in the analyst's rating.
- y_w = the *independent* answer (chosen): a teacher sees the `no_opinion` text plus the return-based
        label and derives a fundamentals-only reasoning chain that ends in that label.

Pairs where the analyst's rating equals the label are KEPT (the paper describes no filter; dropping
them would make the chosen ratings mostly the analysts' minority ratings and build a lower herding
rate into the training data): their rejected answer reasons from the same text to a rating the
returns contradict (`CONTRARY`). So the chosen ratings follow the labels.

Every pair that cannot teach anything is dropped and counted per split, never repaired: no label, no
`no_opinion` text, no analyst rating, a teacher error, or a teacher answer that stage 04's parser does
not read as the intended rating.
"""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from finlib.core.artifacts import require_columns
from finlib.finbias.answers import parse_rating_detail
from finlib.finbias.sentences import split_sentences
from finlib.finbias.vocab import RATINGS, Condition

TEMPLATE_TEACHER = "template teacher"
TRAIN, TEST, DROPPED = "train", "test", "dropped"
TRIPLET_COLUMNS = ["report_id", "ticker", "sector", "date", "split", "analyst_rating", "label", "rejected_rating",
                   "pair", "prompt_text", "independent_text", "chosen", "rejected", "teacher"]
ANALYST_WRONG, ANALYST_RIGHT = "analyst != label", "analyst = label"
# The rejected rating when the analyst was right: the rating the returns contradict most (bullish <->
# bearish); for a neutral label, bullish, the rating brokers give most often.
CONTRARY = {"bullish": "bearish", "bearish": "bullish", "neutral": "bullish"}
# The template teacher's reasoning tied to each rating: the only words besides the rating itself in which
# its chosen and rejected answers differ.
RATING_REASON = {"bullish": "point to returns above the market's", "neutral": "point to returns in line with the "
                 "market's", "bearish": "point to returns below the market's"}


# ----------------------------------------------------------------------------------------------
# Split
# ----------------------------------------------------------------------------------------------

HOLIDAY_MARGIN_DAYS = 5  # business days added to the label window when no trading calendar is given
                         # (US exchanges close <= 3 weekdays in any 60-trading-day stretch)


@dataclass
class Split:
    """Reports with `split` (train / test / dropped) and `drop_reason`, the cut-off and drop counts."""

    reports: pd.DataFrame
    cutoff: pd.Timestamp
    dropped: dict[str, int] = field(default_factory=dict)


def resolve_cutoff(dates: pd.Series, cutoff: str | None, train_share: float) -> pd.Timestamp:
    """The cut-off: the given date (must be 1 January), or the calendar-year boundary nearest to the
    `train_share` quantile of the report dates. A year boundary because labels are ranked within a
    calendar year: every training label is then ranked among training-period reports only."""
    if cutoff is not None:
        ts = pd.Timestamp(cutoff)
        if (ts.month, ts.day) != (1, 1):
            raise ValueError(f"dpo.split_cutoff must be a calendar-year boundary (YYYY-01-01), got {cutoff!r}")
        return ts
    if not 0.0 < train_share < 1.0:
        raise ValueError(f"dpo.train_share must be in (0, 1), got {train_share!r}")
    ordered = pd.to_datetime(dates).dropna().sort_values().reset_index(drop=True)
    if len(ordered) < 2:
        raise ValueError(f"dpo split: need at least 2 reports to split, got {len(ordered)}")
    q = ordered.iloc[min(int(train_share * len(ordered)), len(ordered) - 1)]
    years = range(ordered.iloc[0].year + 1, ordered.iloc[-1].year + 1)  # boundaries inside the date range
    if not years:
        raise ValueError("dpo split: every report is in one calendar year; no year boundary to cut at "
                         "(set dpo.split_cutoff or use a corpus spanning two years)")
    return min((pd.Timestamp(year=y, month=1, day=1) for y in years), key=lambda b: abs(b - q))


def label_window_end(dates: pd.Series, window: int, trading_days: pd.DatetimeIndex | None = None) -> pd.Series:
    """Last day of each report's return window (+1..+window trading days; stage 01's timing): on the
    market's trading calendar when given, else `window` + a holiday margin in business days (later
    than the true end, so the embargo errs on the side of dropping)."""
    d = pd.to_datetime(dates)
    if trading_days is None or len(trading_days) == 0:
        return d + pd.offsets.BDay(window + HOLIDAY_MARGIN_DAYS)
    cal = pd.DatetimeIndex(sorted(trading_days))
    start = cal.searchsorted(d.to_numpy(), side="left")   # day 0: the report date or the next trading day
    pos = start + window
    out = pd.Series(pd.NaT, index=d.index, dtype="datetime64[ns]")
    inside = pos < len(cal)
    out[inside] = cal[pos[inside]]
    out[~inside] = d[~inside] + pd.offsets.BDay(window + HOLIDAY_MARGIN_DAYS)  # beyond the calendar: bound it
    return out


def draw_test_firms(tickers: pd.Series, share: float, seed: int) -> set[str]:
    """A seeded random `share` of the firms (at least one, never all): the test firms."""
    if not 0.0 < share < 1.0:
        raise ValueError(f"dpo.test_firm_share must be in (0, 1), got {share!r}")
    firms = np.array(sorted(tickers.dropna().astype(str).unique()))
    if len(firms) < 2:
        raise ValueError(f"dpo split: need at least 2 firms, got {len(firms)}")
    n = min(max(int(round(share * len(firms))), 1), len(firms) - 1)
    return set(np.random.default_rng(seed).choice(firms, size=n, replace=False))


def split_reports(reports: pd.DataFrame, params: dict, *, label_window: int = 60,
                  trading_days: pd.DatetimeIndex | None = None) -> pd.DataFrame:
    """Leakage-safe split that keeps the data (beyond the paper, which does not say how it split).

    - test: every report of a seeded random `test_firm_share` of the firms (none of their reports trains);
    - train: the other firms' reports dated before `cut-off` (1 January) whose `label_window` return
      window also ends before it (later ones: dropped, `embargo_label_window`);
    - the other firms' reports on/after the cut-off: test as "seen firm, out of time" when
      `seen_firm_test` (the firm trained, on earlier reports only; nothing of the period trained), else
      dropped (`after_cutoff`); reports without a return label are dropped (`no_return_label`).
    Test reports on/after the cut-off are marked `out_of_time` (nothing of their period trained); those whose
    firm has other reports in the training split also `seen_firm` (a late report of a firm whose earlier
    reports were all dropped, or that had none, is out of time but not seen). Returns a copy of `reports` with `split`, `drop_reason`,
    `label_window_end`, `out_of_time`, `seen_firm`; the
    cut-off (YYYY-MM-DD) is in `.attrs["cutoff"]`, the test firms in `.attrs["test_firms"]`.
    """
    require_columns(reports, ("report_id", "ticker", "date"), "reports.parquet")
    df = reports.copy()
    df["date"] = pd.to_datetime(df["date"])
    labelled = df["label"].notna() if "label" in df else pd.Series(True, index=df.index)
    cutoff = resolve_cutoff(df.loc[labelled, "date"], params["split_cutoff"], float(params["train_share"]))
    test_firms = draw_test_firms(df.loc[labelled, "ticker"], float(params["test_firm_share"]),
                                 int(params["split_seed"]))
    df["label_window_end"] = label_window_end(df["date"], label_window, trading_days)
    is_test = df["ticker"].astype(str).isin(test_firms)
    reason = pd.Series(None, index=df.index, dtype=object)
    reason[~labelled] = "no_return_label"
    late = ~is_test & (df["date"] >= cutoff)
    seen = late & reason.isna() & bool(params["seen_firm_test"])   # a training firm's report after the cut-off
    reason[reason.isna() & late & ~seen] = "after_cutoff"
    reason[reason.isna() & ~is_test & ~seen & (df["label_window_end"] >= cutoff)] = "embargo_label_window"
    df["split"] = np.where(reason.notna(), DROPPED, np.where(is_test | seen, TEST, TRAIN))
    df["drop_reason"] = pd.Series([r if isinstance(r, str) else None for r in reason], index=df.index, dtype=object)
    df["out_of_time"] = (df["split"] == TEST) & (df["date"] >= cutoff)
    trained_firms = set(df.loc[df["split"] == TRAIN, "ticker"].astype(str))
    df["seen_firm"] = (df["split"] == TEST) & ~is_test & df["ticker"].astype(str).isin(trained_firms)
    df.attrs.update(cutoff=str(cutoff.date()), test_firms=sorted(test_firms))  # strings: parquet keeps attrs as JSON
    return df


def make_split(reports: pd.DataFrame, params: dict, **kw) -> Split:
    """`split_reports` with the leakage checks run and the drops counted by reason."""
    df = split_reports(reports, params, **kw)
    cutoff = pd.Timestamp(df.attrs["cutoff"])
    check_split(df, cutoff)
    return Split(df, cutoff, {str(k): int(v) for k, v in df["drop_reason"].value_counts().items()})


def check_split(df: pd.DataFrame, cutoff: pd.Timestamp) -> None:
    """Fail loudly if a split leaks: a firm in both train and test; a training report dated on/after the
    cut-off, in the cut-off's year or later (its label would be ranked among test-period reports), or
    whose return window reaches the cut-off (its label would use test-period returns)."""
    train, test = df[df["split"] == TRAIN], df[df["split"] == TEST]
    seen = test["seen_firm"].astype(bool) if "seen_firm" in test else pd.Series(False, index=test.index)
    both = set(train["ticker"]) & set(test.loc[~seen, "ticker"])
    if both:
        raise AssertionError(f"dpo split leaks firms: {sorted(both)[:5]} in both train and test")
    if (seen & (pd.to_datetime(test["date"]) < cutoff)).any():
        raise AssertionError("dpo split leaks time: a training firm's test report is dated before the cut-off "
                             "(seen firms are tested out of time only)")
    if set(test.loc[seen, "ticker"]) & set(df.attrs.get("test_firms", [])):
        raise AssertionError("dpo split: a 'seen firm' test report belongs to a test firm")
    if not set(test.loc[seen, "ticker"]) <= set(train["ticker"]):
        raise AssertionError("dpo split: a 'seen firm' test report belongs to a firm with no training report")
    if len(train) and not pd.to_datetime(train["date"]).max() < cutoff:
        raise AssertionError(f"dpo split leaks time: a training report is dated on/after the cut-off {cutoff.date()}")
    if len(train) and (pd.to_datetime(train["date"]).dt.year >= cutoff.year).any():
        raise AssertionError("dpo split leaks labels: a training report is in the cut-off's year or later "
                             "(labels are ranked within a calendar year)")
    if "label_window_end" in df and len(train) and not (pd.to_datetime(train["label_window_end"]) < cutoff).all():
        bad = train.loc[pd.to_datetime(train["label_window_end"]) >= cutoff, "report_id"].iloc[0]
        raise AssertionError(f"dpo split leaks labels: training report {bad!r} has a return window reaching "
                             f"the cut-off {cutoff.date()} (embargo)")
    if len(test) and "drop_reason" in df and test["drop_reason"].notna().any():
        raise AssertionError("dpo split: a test report carries a drop reason")


def split_summary(df: pd.DataFrame, label_col: str = "label") -> pd.DataFrame:
    """Sizes, firms, date range, label balance per split and drops by reason (the notebook prints it)."""
    rows = []
    for name, g in df.groupby("split", sort=False):
        shares = g[label_col].value_counts(normalize=True) if label_col in g else pd.Series(dtype=float)
        rows.append({"split": name, "reports": len(g), "firms": g["ticker"].nunique(),
                     "first_date": pd.to_datetime(g["date"]).min().date(),
                     "last_date": pd.to_datetime(g["date"]).max().date(),
                     **{f"share_{r.value}": round(float(shares.get(r.value, 0.0)), 3) for r in RATINGS},
                     "without_label": int(g[label_col].isna().sum()) if label_col in g else len(g),
                     "out_of_time": int(g["out_of_time"].sum()) if "out_of_time" in g else 0,
                     "seen_firm_out_of_time": int(g["seen_firm"].sum()) if "seen_firm" in g else 0,
                     "drop_reasons": ", ".join(f"{k}: {v}" for k, v in g["drop_reason"].value_counts().items())
                     if "drop_reason" in g else ""})
    order = {TRAIN: 0, TEST: 1, DROPPED: 2}
    return pd.DataFrame(rows).sort_values("split", key=lambda s: s.map(order)).reset_index(drop=True)


# ----------------------------------------------------------------------------------------------
# Teachers
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TeacherCall:
    """One answer a teacher must write: which side, for which report, from which text, ending where."""

    id: str
    kind: str          # "herded" (y_l, analyst wrong) | "contrary" (y_l, analyst right) | "independent" (y_w)
    text: str          # original report (herded, contrary) or no_opinion text (independent)
    rating: str        # analyst rating (herded), a rating the returns contradict (contrary), the label (independent)
    facts: str = ""    # the no_opinion text: the template teacher's evidence on every side


Teacher = Callable[[list[TeacherCall]], pd.DataFrame]   # -> id, status, raw_text, error


def answer_json(rating: str, reason: str) -> str:
    """An answer in the evaluation prompt's JSON format, `answer` first (the label-scoring prefix)."""
    return json.dumps({"answer": rating, "reason": reason}, ensure_ascii=False)


def template_answer(call: TeacherCall, n_sentences: int = 3) -> str:
    """The deterministic template teacher: the same factual sentences on both sides of a pair, then
    the reasoning tied to the side's rating and the rating. Chosen and rejected thus differ only in the
    rating and the words tied to it (`RATING_REASON`), so DPO's reward margin sits on the rating rather
    than on fixed template wording. Every answer says it is a template."""
    if call.kind not in ("herded", "contrary", "independent"):
        raise ValueError(f"teacher call {call.id}: kind must be herded, contrary or independent, got {call.kind!r}")
    facts = " ".join(split_sentences(call.facts or call.text)[:n_sentences]) or "The report gives few facts."
    reason = f"[{TEMPLATE_TEACHER}] {facts} These facts {RATING_REASON[call.rating]}, so the rating is {call.rating}."
    return answer_json(call.rating, reason)


def template_teacher(calls: list[TeacherCall]) -> pd.DataFrame:
    """Answer every call with the template (no model, no store: deterministic and instant)."""
    return pd.DataFrame([{"id": c.id, "status": "ok", "raw_text": template_answer(c), "error": None}
                         for c in calls], columns=["id", "status", "raw_text", "error"])


def model_teacher(spec, store, *, max_new_tokens: int, budget=None, progress: bool = True,
                  model_cache=None, log_dir=None, local_model=None, dtype: str | None = None) -> Teacher:
    """A registry model as the teacher, through the inference engine (store-cached, resumable,
    cost-counted); prompts from `finlib.finbias.dpo.prompts` (their version is in every key)."""
    from finlib.finbias.dpo.prompts import build_dpo_teacher_messages, dpo_teacher_version
    from finlib.llm.engine import ChatItem, chat

    def teach(calls: list[TeacherCall]) -> pd.DataFrame:
        items = [ChatItem(c.id, build_dpo_teacher_messages(c.kind, c.text, c.rating), dpo_teacher_version(c.kind))
                 for c in calls]
        out = chat(spec, items, store, max_new_tokens=max_new_tokens, budget=budget, progress=progress,
                   local_model=local_model, dtype=dtype, model_cache=model_cache, log_dir=log_dir,
                   desc=f"{spec.name} teacher answers")
        return out[["id", "status", "raw_text", "error"]]
    return teach


# ----------------------------------------------------------------------------------------------
# Triplets
# ----------------------------------------------------------------------------------------------

@dataclass
class Triplets:
    """Kept triplets and, per split, how many candidates were dropped and why."""

    triplets: pd.DataFrame
    drops: pd.DataFrame            # split, reason, n
    teacher_name: str
    teacher_calls: int = 0         # answers requested (two per training candidate; none for test reports)


def _texts(conditions: pd.DataFrame, condition: Condition) -> pd.Series:
    c = conditions[(conditions["condition"] == condition.value) & (conditions["status"] == "ok")]
    return c.set_index("report_id")["text"]


def candidates(split: Split, labels: pd.DataFrame, conditions: pd.DataFrame,
               max_pairs: int | None = None) -> tuple[pd.DataFrame, list[dict]]:
    """Training reports joined with label, original and no_opinion texts; the rest counted as drops.

    Only the train split: test reports need no teacher answer (they are evaluated on their text and
    label), so no teacher call is made, or paid, for them. `max_pairs` keeps the earliest usable
    reports; the others are counted (`over_max_train_pairs`) and never sent to the teacher."""
    require_columns(labels, ("report_id", "label"), "labels.parquet")
    require_columns(conditions, ("report_id", "condition", "status", "text"), "conditions.parquet")
    df = split.reports[split.reports["split"] == TRAIN].drop(columns=["label"], errors="ignore")
    df = df.merge(labels[["report_id", "label"]], on="report_id", how="left", validate="one_to_one")
    df["prompt_text"] = df["report_id"].map(_texts(conditions, Condition.ORIGINAL))
    df["independent_text"] = df["report_id"].map(_texts(conditions, Condition.NO_OPINION))
    reasons = pd.Series(None, index=df.index, dtype=object)
    checks = [("no_return_label", df["label"].isna()),
              ("no_original_text", df["prompt_text"].isna()),
              ("no_analyst_rating", df["analyst_rating"].isna()),
              ("no_opinion_text_unavailable", df["independent_text"].isna())]
    for reason, mask in checks:  # first reason wins: each report is counted once
        reasons = reasons.where(reasons.notna() | ~mask.fillna(False), reason)
    usable = df[reasons.isna()].sort_values(["date", "report_id"])
    if max_pairs is not None and len(usable) > max_pairs:
        reasons[usable.index[max_pairs:]] = "over_max_train_pairs"
    drops = [{"split": s, "reason": r, "n": int(n)} for (s, r), n in
             Counter(zip(df.loc[reasons.notna(), "split"], reasons.dropna())).items()]
    out = df[reasons.isna()].sort_values(["date", "report_id"]).reset_index(drop=True)
    right = out["analyst_rating"] == out["label"]
    out["pair"] = np.where(right, ANALYST_RIGHT, ANALYST_WRONG)
    out["rejected_rating"] = np.where(right, out["label"].map(CONTRARY), out["analyst_rating"])
    return out, drops


def teacher_calls(cands: pd.DataFrame) -> list[TeacherCall]:
    """Two calls per candidate: the rejected answer (herded, or contrary when the analyst was right)
    and the independent (chosen) answer."""
    calls = []
    for _, r in cands.iterrows():
        kind = "contrary" if r["pair"] == ANALYST_RIGHT else "herded"
        calls.append(TeacherCall(f"{r['report_id']}|herded", kind, r["prompt_text"], r["rejected_rating"],
                                 r["independent_text"]))
        calls.append(TeacherCall(f"{r['report_id']}|independent", "independent", r["independent_text"], r["label"],
                                 r["independent_text"]))
    return calls


def _check_answer(row: pd.Series | None, intended: str, context: str) -> str | None:
    """None when the teacher's answer parses (stage 04's parser) to `intended`; else the drop reason."""
    if row is None or row["status"] != "ok":
        return "teacher_error"
    rating, _ = parse_rating_detail(row["raw_text"], context)
    if rating is None:
        return "teacher_unparsed"
    return None if rating.value == intended else "teacher_wrong_rating"


def build_triplets(split: Split, labels: pd.DataFrame, conditions: pd.DataFrame, teacher: Teacher,
                   teacher_name: str, max_pairs: int | None = None) -> Triplets:
    """Training candidates -> teacher answers -> parsed and checked triplets, every drop counted."""
    cands, drops = candidates(split, labels, conditions, max_pairs)
    answers = teacher(teacher_calls(cands)) if len(cands) else pd.DataFrame(columns=["id", "status", "raw_text"])
    by_id = {r["id"]: r for _, r in answers.iterrows()}
    kept, extra = [], Counter()
    for _, r in cands.iterrows():
        rej, cho = by_id.get(f"{r['report_id']}|herded"), by_id.get(f"{r['report_id']}|independent")
        bad_rej = _check_answer(rej, r["rejected_rating"], r["prompt_text"])
        bad = f"{bad_rej}_rejected" if bad_rej else None
        if bad is None:
            bad_cho = _check_answer(cho, r["label"], r["independent_text"])
            bad = f"{bad_cho}_chosen" if bad_cho else None
        if bad:
            extra[(r["split"], bad)] += 1
            continue
        kept.append({**{c: r.get(c) for c in TRIPLET_COLUMNS if c in r.index},
                     "chosen": cho["raw_text"], "rejected": rej["raw_text"], "teacher": teacher_name})
    drops += [{"split": s, "reason": reason, "n": n} for (s, reason), n in extra.items()]
    drop_df = pd.DataFrame(drops, columns=["split", "reason", "n"]).sort_values(["split", "reason"])
    return Triplets(pd.DataFrame(kept, columns=TRIPLET_COLUMNS), drop_df.reset_index(drop=True), teacher_name,
                    2 * len(cands))


def triplet_summary(split: Split, trip: Triplets) -> pd.DataFrame:
    """Training side: reports, teacher calls, kept triplets, drops by reason (wide), the chosen and
    rejected rating mix, the pairs where the analyst was right, and the label mix of the training
    reports (the chosen mix should follow it)."""
    rep = split.reports
    lab = rep.loc[(rep["split"] == TRAIN) & rep["label"].notna(), "label"] if "label" in rep else pd.Series(dtype=object)
    t = trip.triplets[trip.triplets["split"] == TRAIN]
    d = trip.drops[trip.drops["split"] == TRAIN].set_index("reason")["n"]
    return pd.DataFrame([{"split": TRAIN, "reports": int((rep["split"] == TRAIN).sum()),
                          "teacher_calls": int(trip.teacher_calls), "triplets": len(t),
                          **{f"dropped_{k}": int(v) for k, v in d.items()},
                          **{f"chosen_{r.value}": int((t["label"] == r.value).sum()) for r in RATINGS},
                          **{f"rejected_{r.value}": int((t["rejected_rating"] == r.value).sum()) for r in RATINGS},
                          "pairs_analyst_right": int((t["pair"] == ANALYST_RIGHT).sum()),
                          **{f"label_share_{r.value}": round(float((lab == r.value).mean()), 3) if len(lab) else np.nan
                             for r in RATINGS}}])
