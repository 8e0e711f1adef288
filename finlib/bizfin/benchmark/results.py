"""BizFinBench Table 3 (models x nine tasks + Average) and Table 6 (query token lengths), with
the paper's published rows beside ours.

Scores are the share of the maximum (accuracy, or judge score / its scale) in percent, as the
paper prints them. Average = the plain mean of all nine task scores (the paper's); with a task
missing it is "—" (NaN) and the caption names the missing tasks. Intervals: percentile bootstrap over items (the item is the
unit the benchmark samples); the Average's interval resamples all items at once and averages
the per-task means of each replicate. Judge verdicts: the official column follows the published
scripts (FDD, FTU: unreadable = 0 inside N; FQA: no total above 0 = outside N); ours leaves an
unreadable verdict out of N (counted).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from finlib.bizfin.data import BizFinItem
from finlib.bizfin.tasks import TASK_ORDER, TASKS, judge_task_names, task_order
from finlib.core.stats import bootstrap_ci, mean_over_groups, ratio
from finlib.core.tables import paper_table

RULES = ("official", "ours")
LONG_COLUMNS = ["model", "rule", "task", "source", "n_items", "not_answered", "n_scored", "parse_rate",
                "judge_invalid", "score", "ci_low", "ci_high", "missing_tasks"]


def _sums(values: np.ndarray, counts: np.ndarray | None = None) -> np.ndarray:
    """Items x 2 [score x count, count] for the defined scores (NaN = not scored, left out); `count` is
    how many times the item enters N (1, or the published FDD script's 2 for a JSON verdict without
    a readable score; `official_n`)."""
    ok = np.isfinite(values)
    n = np.ones(int(ok.sum())) if counts is None else counts[ok].astype(float)
    return np.column_stack([values[ok] * n, n])


def n_counts(g: pd.DataFrame, rule: str) -> np.ndarray | None:
    """The official column's per-item N counts (`official_n`) where recorded; ours counts each item once."""
    if rule != "official" or "official_n" not in g:
        return None
    n = pd.to_numeric(g["official_n"], errors="coerce").to_numpy(dtype=float)
    return np.where(np.isfinite(n), n, 1.0)


def task_scores(items: pd.DataFrame, reps: int, seed: int, ci: float = 0.95) -> pd.DataFrame:
    """One row per model x rule x task (plus `Average`): score, CI, N, parse rate, in percent."""
    rows = []
    for model in items["model"].drop_duplicates():
        for rule in RULES:
            rows += _model_rows(items[items["model"] == model], model, rule, reps, seed, ci)
    return pd.DataFrame(rows, columns=LONG_COLUMNS)


def _model_rows(g: pd.DataFrame, model: str, rule: str, reps: int, seed: int, ci: float) -> list[dict]:
    rows = []
    tasks = [t for t in task_order() if t in set(g["task"])]
    blocks, weights = [], []
    for t in tasks:
        gt = g[g["task"] == t]
        vals = gt[rule].to_numpy(dtype=float)
        counts = n_counts(gt, rule)
        est = bootstrap_ci(_sums(vals, counts), ratio, reps, seed, ci)
        answered = gt[gt["status"] == "ok"]   # a failed call is not answered: outside N and the parse rate
        # a judged answer whose judge call failed has no verdict either: not answered, as the runner counts it
        missing = (gt["status"] != "ok") | (gt["judge_status"] == "not_answered")
        rows.append({"model": model, "rule": rule, "task": t, "source": ",".join(sorted(set(gt["source"]))),
                     "n_items": len(gt), "not_answered": int(missing.sum()),
                     "n_scored": int(np.isfinite(vals).sum()),
                     "parse_rate": float(answered["parsed"].mean()) if len(answered) else np.nan,
                     "judge_invalid": int((gt["judge_status"] == "invalid").sum()),
                     "score": 100 * est.value, "ci_low": 100 * est.ci_low, "ci_high": 100 * est.ci_high,
                     "missing_tasks": ""})
        blocks.append(vals)
        weights.append(np.ones_like(vals) if counts is None else counts)
    rows.append(average_row(model, rule, tasks, blocks, reps, seed, ci, weights))
    return rows


def average_row(model: str, rule: str, tasks: list[str], blocks: list[np.ndarray], reps: int, seed: int,
                ci: float, weights: list[np.ndarray] | None = None) -> dict:
    """Plain mean over the paper's nine tasks and any other declared task the run scored, with an interval
    from resampling all items jointly; NaN ("—" in the tables) with the missing tasks named when any of the
    nine has no score (a mean over fewer tasks is a different statistic, never shown as the Average)."""
    missing = [t for t in TASK_ORDER if t not in tasks]
    missing += [t for t, b in zip(tasks, blocks) if not np.isfinite(b).any()]
    if missing:
        return {"model": model, "rule": rule, "task": "Average", "source": "", "n_items": sum(len(b) for b in blocks),
                "not_answered": np.nan, "n_scored": int(sum(np.isfinite(b).sum() for b in blocks)),
                "parse_rate": np.nan, "judge_invalid": 0, "score": np.nan, "ci_low": np.nan, "ci_high": np.nan,
                "missing_tasks": ", ".join(t for t in task_order() if t in missing)}
    k = len(blocks)
    n = sum(len(b) for b in blocks)
    sums = np.zeros((n, 2 * k))
    i = 0
    for j, b in enumerate(blocks):
        ok = np.isfinite(b)
        w = np.ones_like(b) if weights is None else weights[j]
        sums[i:i + len(b), 2 * j] = np.where(ok, b * w, 0.0)
        sums[i:i + len(b), 2 * j + 1] = np.where(ok, w, 0.0)
        i += len(b)
    est = bootstrap_ci(sums, mean_over_groups(ratio, k, 2), reps, seed, ci)
    return {"model": model, "rule": rule, "task": "Average", "source": "", "n_items": n, "not_answered": np.nan,
            "n_scored": int(sum(np.isfinite(b).sum() for b in blocks)), "parse_rate": np.nan, "judge_invalid": 0,
            "score": 100 * est.value, "ci_low": 100 * est.ci_low, "ci_high": 100 * est.ci_high, "missing_tasks": ""}


def table3(long: pd.DataFrame) -> pd.DataFrame:
    """Wide Table 3: our models (official rule, then ours) and the paper's 25 rows below them; a declared
    task the paper does not print gets its column after the nine (empty in the paper's rows)."""
    columns = [*TASK_ORDER, *(t for t in task_order() if t not in TASK_ORDER and t in set(long["task"]))]
    ours = long.pivot_table(index=["model", "rule"], columns="task", values="score", sort=False)
    ours = ours.reindex(columns=[t for t in (*columns, "Average") if t in ours.columns]).reset_index()
    ours.insert(0, "row", "this run")
    ours = ours.merge(items_per_task(long), on=["model", "rule"], how="left")
    paper = paper_table("bizfin_table3").rename(columns={"group": "rule"})
    paper["rule"] = "paper (" + paper["rule"] + ")"
    paper.insert(0, "row", "paper Table 3")
    return pd.concat([ours, paper], ignore_index=True)[["row", "model", "rule", "N per task", *columns, "Average"]]


def items_per_task(long: pd.DataFrame) -> pd.DataFrame:
    """"N per task" of each (model, rule) row: the fewest-most items a task score rests on ("1" when
    every task has one item: a score of 0 or 100 that says little), so a reader sees it beside the scores."""
    t = long[long["task"] != "Average"]
    n = t.groupby(["model", "rule"], sort=False)["n_items"].agg(["min", "max"]).reset_index()
    n["N per task"] = [f"{int(lo)}" if lo == hi else f"{int(lo)}–{int(hi)}" for lo, hi in zip(n["min"], n["max"])]
    return n[["model", "rule", "N per task"]]


def source_caveats(report: dict, long: pd.DataFrame) -> str:
    """Where the items came from and the plumbing caveat: every BizFinBench table ends with it."""
    src = long[long["task"] != "Average"].drop_duplicates("task").set_index("task")["source"].to_dict()
    real = [t for t, s in src.items() if s == "benchmark"]
    sample = [t for t, s in src.items() if s == "format_sample"]
    parts = []
    if real:
        parts.append(f"Real benchmark items (a few per task: {', '.join(real)}): a plumbing result, not the paper's full run.")
    if sample:
        parts.append(f"Format samples written for this repository ({', '.join(sample)}): format sample / plumbing "
                     f"result, not the benchmark.")
    if report.get("plumbing_models") or report.get("judge_plumbing"):
        parts.append("Plumbing model(s)/judge: these numbers test the pipeline and are not research results.")
    return " ".join(parts)


def rules_caption(report: dict) -> str:
    """The rule revision and the judge rubric: every BizFinBench caption names both."""
    return (f"Official column: {report.get('official_rules')}. Judge rubric: {report.get('rubric_source', 'ours')}.")


def out_of_budget_note(report: dict) -> str:
    """Replies whose output budget ran out while the model was reasoning, per model."""
    cut = {m: n for m, n in (report.get("out_of_budget_reasoning") or {}).items() if n}
    return (" Replies that ran out of output budget while reasoning (empty or null content at the limit, or an "
            "unclosed <think>; not answered under ours, the text as returned under the official rule; raise the "
            "model's reasoning_tokens): " + ", ".join(f"{m} {n}" for m, n in cut.items()) + "." if cut else "")


def scoring_error_note(report: dict) -> str:
    """Replies whose scoring raised, per model: outside N under both rules, never a stopped stage."""
    bad = {m: n for m, n in (report.get("scoring_errors") or {}).items() if n}
    return (" Replies whose scoring raised (outside N, the error in bizfin_items): "
            + ", ".join(f"{m} {n}" for m, n in bad.items()) + "." if bad else "")


def missing_average_note(long: pd.DataFrame) -> str:
    """The Average is over the paper's nine tasks (and any other declared task scored): where tasks are
    missing it is "—" and they are named."""
    miss = long[(long["task"] == "Average") & long["missing_tasks"].astype(str).str.len().gt(0)]
    return "".join(f" Average of {r.model} ({r.rule}): — (no score for {r.missing_tasks})."
                   for r in miss.drop_duplicates(["model", "missing_tasks"]).itertuples())


def not_answered_note(long: pd.DataFrame) -> str:
    """Calls that ended in an error are outside N: the caption says how many."""
    na = long[(long["rule"] == "official") & (long["task"] != "Average")]["not_answered"].sum()
    return f" {int(na)} item(s) not answered (the call ended in an error): outside N, never scored 0." if na else ""


def table3_caption(report: dict, long: pd.DataFrame, items: pd.DataFrame | None = None) -> str:
    """Caption naming the rule revision, the judge and its rubric, the sources per task, the items not
    answered, official AEA values above 1, and the plumbing caveat."""
    return (f"BizFinBench Table 3: score (%) per task and plain-mean Average; judge-scored tasks "
            f"({', '.join(judge_task_names())}) "
            f"by the vanilla LLM-as-judge {report.get('judge')}. " + rules_caption(report)
            + not_answered_note(long) + missing_average_note(long) + out_of_budget_note(report)
            + scoring_error_note(report) + " "
            + source_caveats(report, long))


def load_tokenizer(spec, cache_root: Path):
    """The tokenizer of a registry model, from its GGUF file (converted once and cached as a
    Hugging Face tokenizer under `<cache_root>/tokenizers/<name>`), or from `hf_path` online."""
    from transformers import AutoTokenizer

    cached = Path(cache_root) / "tokenizers" / spec.name
    if (cached / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(cached)
    from finlib.llm.backends import backend_of

    path = backend_of(spec).gguf_path(spec, cache_root)  # the backend's own GGUF, else a packaged one
    if path is None and spec.hf_path:
        return AutoTokenizer.from_pretrained(spec.hf_path)
    if path is None:
        raise ValueError(f"bizfin.table6_model: model {spec.name!r} has no GGUF file or hf_path to take a tokenizer from")
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    tok.save_pretrained(cached)
    return tok


def token_lengths(items: dict[str, list[BizFinItem]], count_tokens) -> pd.DataFrame:
    """Table 6 for the items present: min / max / mean query tokens and count per task, the
    paper's values beside (none for a declared task the paper does not print). `count_tokens(list[str]) ->
    list[int]`."""
    paper = paper_table("bizfin_table6").set_index("dataset")
    absent = pd.Series({"min": np.nan, "max": np.nan, "avg": np.nan, "count": np.nan})
    rows = []
    for t in task_order():
        if t not in items or not items[t]:
            continue
        n = np.asarray(count_tokens([it.query_text() for it in items[t]]))
        p = paper.loc[TASKS[t].table6_name] if TASKS[t].paper else absent
        rows.append({"task": t, "source": items[t][0].source, "min": int(n.min()), "max": int(n.max()),
                     "avg": float(n.mean()), "count": len(n), "paper_min": _paper_int(p["min"]),
                     "paper_max": _paper_int(p["max"]), "paper_avg": float(p["avg"]), "paper_count": _paper_int(p["count"])})
    return pd.DataFrame(rows)


def _paper_int(value) -> int | None:
    """A Table 6 count as printed (None where the paper prints no row for the task)."""
    return None if pd.isna(value) else int(value)


def hf_counter(tokenizer):
    """count_tokens for a Hugging Face tokenizer: content tokens only (no special tokens)."""
    def count(texts: list[str]) -> list[int]:
        return [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    return count
