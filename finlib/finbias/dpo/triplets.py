"""DPO preference triplets (x, y_w, y_l) and the leakage-safe train/test split (Fin-Bias §5.2).

- x   = the original report (rating and opinions included: the model learns on the raw, biased text).
- y_l = the *herded* answer (rejected): a teacher reasons along the analyst and ends in the analyst's rating.
- y_w = the *independent* answer (chosen): a teacher sees the `no_opinion` text plus the return-based
        label and derives a fundamentals-only reasoning chain that ends in that label.

Every pair that cannot teach anything is dropped and counted per split, never repaired: analyst
rating equal to the label (chosen and rejected would agree), no label, no `no_opinion` text, a
teacher error, or a teacher answer that stage 04's parser does not read as the intended rating.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import pandas as pd

from finlib.llm.answers import parse_rating_detail
from finlib.core.artifacts import require_columns
from finlib.core.vocab import RATINGS, Condition
from finlib.finbias.sentences import split_sentences

TEMPLATE_TEACHER = "template teacher"
TRAIN, TEST, DROPPED = "train", "test", "dropped"
TRIPLET_COLUMNS = ["report_id", "ticker", "sector", "date", "split", "analyst_rating", "label", "prompt_text",
                   "independent_text", "chosen", "rejected", "teacher"]


# ----------------------------------------------------------------------------------------------
# Split
# ----------------------------------------------------------------------------------------------

@dataclass
class Split:
    """Reports with a `split` column (train / test / dropped) and why some were dropped."""

    reports: pd.DataFrame
    cutoff: pd.Timestamp
    dropped: dict[str, int] = field(default_factory=dict)


def resolve_cutoff(dates: pd.Series, cutoff: str | None, train_share: float) -> pd.Timestamp:
    """The cut-off date: given, or the report date at `train_share` of the sorted dates (the first
    test date), so roughly that share of reports is dated before it."""
    if cutoff is not None:
        return pd.Timestamp(cutoff)
    if not 0.0 < train_share < 1.0:
        raise ValueError(f"dpo.train_share must be in (0, 1), got {train_share!r}")
    ordered = pd.to_datetime(dates).sort_values().reset_index(drop=True)
    if len(ordered) < 2:
        raise ValueError(f"dpo split: need at least 2 reports to split, got {len(ordered)}")
    return ordered.iloc[min(max(int(round(train_share * len(ordered))), 1), len(ordered) - 1)]


def split_reports(reports: pd.DataFrame, cutoff: pd.Timestamp) -> Split:
    """Leakage-safe split (beyond the paper, which does not say).

    Test = reports dated on/after `cutoff`; their firms are test firms. Train = reports before
    `cutoff` of the other firms. A test firm's reports before the cut-off are dropped (counted):
    so no ticker is in both splits and every training report predates every test report.
    """
    require_columns(reports, ("report_id", "ticker", "date"), "reports.parquet")
    df = reports.copy()
    df["date"] = pd.to_datetime(df["date"])
    late = df["date"] >= cutoff
    test_firms = set(df.loc[late, "ticker"])
    early_test_firm = ~late & df["ticker"].isin(test_firms)
    df["split"] = TRAIN
    df.loc[late, "split"] = TEST
    df.loc[early_test_firm, "split"] = DROPPED
    return Split(df, pd.Timestamp(cutoff), {"test_firm_before_cutoff": int(early_test_firm.sum())})


def check_split(df: pd.DataFrame) -> None:
    """Fail loudly if a split leaks: a ticker in both, or a training report not before every test report."""
    train, test = df[df["split"] == TRAIN], df[df["split"] == TEST]
    both = set(train["ticker"]) & set(test["ticker"])
    if both:
        raise AssertionError(f"dpo split leaks firms: {sorted(both)[:5]} in both train and test")
    if len(train) and len(test) and not pd.to_datetime(train["date"]).max() < pd.to_datetime(test["date"]).min():
        raise AssertionError("dpo split leaks time: a training report is not before every test report")


def split_summary(df: pd.DataFrame, label_col: str = "label") -> pd.DataFrame:
    """Sizes, firms, date range and label balance per split (the notebook prints it)."""
    rows = []
    for name, g in df.groupby("split", sort=False):
        shares = g[label_col].value_counts(normalize=True) if label_col in g else pd.Series(dtype=float)
        rows.append({"split": name, "reports": len(g), "firms": g["ticker"].nunique(),
                     "first_date": pd.to_datetime(g["date"]).min().date(),
                     "last_date": pd.to_datetime(g["date"]).max().date(),
                     **{f"share_{r.value}": round(float(shares.get(r.value, 0.0)), 3) for r in RATINGS},
                     "without_label": int(g[label_col].isna().sum()) if label_col in g else len(g)})
    order = {TRAIN: 0, TEST: 1, DROPPED: 2}
    return pd.DataFrame(rows).sort_values("split", key=lambda s: s.map(order)).reset_index(drop=True)


# ----------------------------------------------------------------------------------------------
# Teachers
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TeacherCall:
    """One answer a teacher must write: which side, for which report, from which text, ending where."""

    id: str
    kind: str          # "herded" (y_l) | "independent" (y_w)
    text: str          # original report (herded) or no_opinion text (independent)
    rating: str        # analyst rating (herded) or return-based label (independent)
    opinions: str = ""  # herded side: sentences of the original that no_opinion removed (template teacher)


Teacher = Callable[[list[TeacherCall]], pd.DataFrame]   # -> id, status, raw_text, error


def answer_json(rating: str, reason: str) -> str:
    """An answer in the evaluation prompt's JSON format, `answer` first (the label-scoring prefix)."""
    return json.dumps({"answer": rating, "reason": reason}, ensure_ascii=False)


def opinion_sentences(original: str, no_opinion: str) -> list[str]:
    """Sentences of the original report that are not in the no_opinion text: the rating sentence
    and the strong-subjective (opinion) sentences stage 02 removed."""
    kept = set(split_sentences(no_opinion))
    return [s for s in split_sentences(original) if s not in kept]


def template_answer(call: TeacherCall, n_sentences: int = 3) -> str:
    """The deterministic template teacher: factual sentences lead to the label (independent),
    opinion sentences lead to the analyst's rating (herded). Every answer says it is a template."""
    if call.kind == "independent":
        facts = " ".join(split_sentences(call.text)[:n_sentences])
        reason = (f"[{TEMPLATE_TEACHER}] From the firm's fundamentals alone, disregarding analyst opinions: "
                  f"{facts} On this evidence the rating is {call.rating}.")
    elif call.kind == "herded":
        views = " ".join(split_sentences(call.opinions)[:n_sentences]) or "The analyst's view is convincing."
        reason = (f"[{TEMPLATE_TEACHER}] Following the analyst: {views} "
                  f"I agree with the analyst, so the rating is {call.rating}.")
    else:
        raise ValueError(f"teacher call {call.id}: kind must be herded or independent, got {call.kind!r}")
    return answer_json(call.rating, reason)


def template_teacher(calls: list[TeacherCall]) -> pd.DataFrame:
    """Answer every call with the template (no model, no store: deterministic and instant)."""
    return pd.DataFrame([{"id": c.id, "status": "ok", "raw_text": template_answer(c), "error": None}
                         for c in calls], columns=["id", "status", "raw_text", "error"])


def model_teacher(spec, store, *, max_new_tokens: int, budget=None, progress: bool = True,
                  model_cache=None, log_dir=None, local_model=None, dtype: str | None = None) -> Teacher:
    """A registry model as the teacher, through the inference engine (store-cached, resumable,
    cost-counted); prompts from `finlib.llm.prompts` (DPO_TEACHER_VERSION is in every key)."""
    from finlib.llm.engine import ChatItem, chat
    from finlib.llm.prompts import DPO_TEACHER_VERSION, build_dpo_teacher_messages

    def teach(calls: list[TeacherCall]) -> pd.DataFrame:
        items = [ChatItem(c.id, build_dpo_teacher_messages(c.kind, c.text, c.rating), DPO_TEACHER_VERSION)
                 for c in calls]
        out = chat(spec, items, store, max_new_tokens=max_new_tokens, budget=budget, progress=progress,
                   local_model=local_model, dtype=dtype, model_cache=model_cache, log_dir=log_dir)
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


def _texts(conditions: pd.DataFrame, condition: Condition) -> pd.Series:
    c = conditions[(conditions["condition"] == condition.value) & (conditions["status"] == "ok")]
    return c.set_index("report_id")["text"]


def candidates(split: Split, labels: pd.DataFrame, conditions: pd.DataFrame) -> tuple[pd.DataFrame, list[dict]]:
    """Train/test reports joined with label, original and no_opinion texts; the rest counted as drops."""
    require_columns(labels, ("report_id", "label"), "labels.parquet")
    require_columns(conditions, ("report_id", "condition", "status", "text"), "conditions.parquet")
    df = split.reports[split.reports["split"].isin([TRAIN, TEST])]
    df = df.merge(labels[["report_id", "label"]], on="report_id", how="left", validate="one_to_one")
    df["prompt_text"] = df["report_id"].map(_texts(conditions, Condition.ORIGINAL))
    df["independent_text"] = df["report_id"].map(_texts(conditions, Condition.NO_OPINION))
    reasons = pd.Series(None, index=df.index, dtype=object)
    checks = [("no_return_label", df["label"].isna()),
              ("no_original_text", df["prompt_text"].isna()),
              ("no_analyst_rating", df["analyst_rating"].isna()),
              ("analyst_rating_equals_label", df["analyst_rating"] == df["label"]),
              ("no_opinion_text_unavailable", df["independent_text"].isna())]
    for reason, mask in checks:  # first reason wins: each report is counted once
        reasons = reasons.where(reasons.notna() | ~mask.fillna(False), reason)
    drops = [{"split": s, "reason": r, "n": int(n)} for (s, r), n in
             Counter(zip(df.loc[reasons.notna(), "split"], reasons.dropna())).items()]
    return df[reasons.isna()].reset_index(drop=True), drops


def teacher_calls(cands: pd.DataFrame) -> list[TeacherCall]:
    """Two calls per candidate: the herded (rejected) and the independent (chosen) answer."""
    calls = []
    for _, r in cands.iterrows():
        calls.append(TeacherCall(f"{r['report_id']}|herded", "herded", r["prompt_text"], r["analyst_rating"],
                                 " ".join(opinion_sentences(r["prompt_text"], r["independent_text"]))))
        calls.append(TeacherCall(f"{r['report_id']}|independent", "independent", r["independent_text"], r["label"]))
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
                   teacher_name: str) -> Triplets:
    """Candidates -> teacher answers -> parsed and checked triplets, with every drop counted per split."""
    cands, drops = candidates(split, labels, conditions)
    answers = teacher(teacher_calls(cands)) if len(cands) else pd.DataFrame(columns=["id", "status", "raw_text"])
    by_id = {r["id"]: r for _, r in answers.iterrows()}
    kept, extra = [], Counter()
    for _, r in cands.iterrows():
        rej, cho = by_id.get(f"{r['report_id']}|herded"), by_id.get(f"{r['report_id']}|independent")
        bad_rej = _check_answer(rej, r["analyst_rating"], r["prompt_text"])
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
    return Triplets(pd.DataFrame(kept, columns=TRIPLET_COLUMNS), drop_df.reset_index(drop=True), teacher_name)


def triplet_summary(split: Split, trip: Triplets) -> pd.DataFrame:
    """Per split: candidate reports, kept triplets, drops by reason (wide), label balance of the kept."""
    rep = split.reports
    rows = []
    for name in (TRAIN, TEST):
        t = trip.triplets[trip.triplets["split"] == name]
        d = trip.drops[trip.drops["split"] == name].set_index("reason")["n"]
        rows.append({"split": name, "reports": int((rep["split"] == name).sum()), "triplets": len(t),
                     **{f"dropped_{k}": int(v) for k, v in d.items()},
                     **{f"chosen_{r.value}": int((t["label"] == r.value).sum()) for r in RATINGS}})
    return pd.DataFrame(rows).fillna(0)
