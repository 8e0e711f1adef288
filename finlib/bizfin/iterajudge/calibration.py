"""The judge-calibration study (BizFinBench Section 4.4, Table 4): how well do the vanilla
LLM-as-a-judge and IteraJudge rank answers the way a reference score does?

The paper correlates both judges with expert scores on FDD and FTU (Spearman, per judge model).
The expert scores are not public, so the study runs on a reference set constructed here
(`format_samples/calibration_<TASK>.jsonl`, built by `finlib.bizfin.iterajudge.reference_set`): 140 answers per
task to 20 fictional questions, each question with the same ladder of injected errors, and a
reference score assigned by rule from the counted errors (`RULES`: each task's IteraJudge record's
`weights`). Any other column of reference scores (real expert scores) plugs into the same functions.
These numbers measure how the run's judges rank answers of known quality; they are not the paper's
experiment.

Uncertainty: percentile bootstrap over questions (`resample_indices`: a drawn question brings all its
answers, which share that question's judge offsets; resampling answers one by one would treat them as
independent and give intervals that are too narrow); resamples in which
either side is constant have no rank correlation and are dropped and counted (`boot_used`). The
paper's claim is a difference (IteraJudge correlates better than the vanilla judge), so the
difference gets its own paired interval: both methods' correlations on the same resampled answers
(`paired_difference`). An interval with zero width, from under half the resamples, or on fewer than
`MIN_ITEMS` answers is flagged as degenerate: it looks precise and means nothing.
"""
from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import rankdata

from finlib.bizfin.data import file_lines
from finlib.bizfin.iterajudge.judge import JudgeInput, judge_batch, results_frame
from finlib.bizfin.iterajudge.records import calibration_tasks, rule_weights
from finlib.bizfin.iterajudge.rubrics import dimensions_for
from finlib.core.tables import paper_table
from finlib.llm.spec import ModelSpec

METHOD_LABELS = {"vanilla": "LLM as a judge", "iterajudge": "Ours"}
REFERENCE_LABEL = ("constructed reference set (rule-assigned scores; NOT the paper's expert scores)")
_FIELDS = {"id": str, "task": str, "question_id": str, "question": str, "answer": str, "errors": dict,
           "reference_score": (int, float)}


class CalibrationDataError(ValueError):
    """A reference-set line that does not follow the format; names the file, line and field."""


def rule_score(task: str, errors: dict[str, int]) -> int:
    """The reference score of an answer from its counted errors: 100 minus the points of every rubric
    dimension an error kind violates, each dimension's points lost once (the task's IteraJudge record's
    `weights`, `finlib.bizfin.iterajudge.records`), floored at 0."""
    weights = rule_weights(task)
    unknown = set(errors) - set(weights)
    if unknown:
        raise ValueError(f"{task}: unknown error kind(s) {sorted(unknown)}; known: {sorted(weights)}")
    return max(0, 100 - sum(weights[k] for k, n in errors.items() if int(n) > 0))


def _fail(path: Any, line: int, fld: str, msg: str) -> CalibrationDataError:
    return CalibrationDataError(f"{path}, line {line}, field '{fld}': {msg}")


def read_reference_set(path: str | Path, text: str | None = None) -> pd.DataFrame:
    """Read and validate a calibration JSONL file (one answer per line). A rule-scored set must
    carry scores that agree with `rule_score`: a hand-edited score is an error, not a silent
    change of the reference."""
    text = Path(path).read_text(encoding="utf-8") if text is None else text
    rows = []
    for n, raw in enumerate(file_lines(text), 1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise _fail(path, n, "<line>", f"not JSON ({exc.msg})") from None
        for fld, kind in _FIELDS.items():
            if fld not in rec:
                raise _fail(path, n, fld, "missing")
            if isinstance(rec[fld], bool) or not isinstance(rec[fld], kind):
                raise _fail(path, n, fld, f"wrong type {type(rec[fld]).__name__}")
        if rec["task"] not in calibration_tasks():
            raise _fail(path, n, "task", f"{rec['task']!r} has no scoring rule (known: {sorted(calibration_tasks())})")
        try:
            expected = rule_score(rec["task"], rec["errors"])
        except (ValueError, TypeError) as exc:
            raise _fail(path, n, "errors", str(exc)) from None
        if rec["reference_score"] != expected:
            raise _fail(path, n, "reference_score", f"{rec['reference_score']} but the rule gives {expected}")
        rows.append({k: rec[k] for k in _FIELDS} | {"line": n})
    df = pd.DataFrame(rows)
    if df.empty:
        raise CalibrationDataError(f"{path}: no answers")
    dup = df["id"][df["id"].duplicated()].tolist()
    if dup:
        raise CalibrationDataError(f"{path}: duplicate id(s) {dup}")
    return df


def spread(df: pd.DataFrame, answers: int) -> pd.DataFrame:
    """`answers` answers per question spread evenly over its quality ladder (best, worst and
    between), so a smaller run still spans the whole reference scale."""
    keep = []
    for _, g in df.groupby("question_id", sort=False):
        g = g.sort_values(["reference_score", "id"], ascending=[False, True])
        idx = sorted(set(np.linspace(0, len(g) - 1, min(int(answers), len(g))).round().astype(int)))
        keep.append(g.iloc[idx])
    return pd.concat(keep).sort_index()


def load_reference_sets(tasks: list[str], questions: int | None = None, answers: int | None = None) -> pd.DataFrame:
    """The shipped reference sets of `tasks`; `questions` keeps the first N questions per task
    (each with its whole quality ladder, so every kept question still spans the scale) and
    `answers` thins each ladder evenly (`spread`); None keeps all."""
    frames = []
    for task in tasks:
        ref = resources.files("finlib") / "bizfin" / "format_samples" / f"calibration_{task}.jsonl"
        df = read_reference_set(f"finlib/bizfin/format_samples/calibration_{task}.jsonl",
                                ref.read_text(encoding="utf-8"))
        if questions is not None:
            keep = list(dict.fromkeys(df["question_id"]))[:int(questions)]
            df = df[df["question_id"].isin(keep)]
        if answers is not None:
            df = spread(df, answers)
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


def ordered_dimensions(task: str, order: str = "published") -> tuple[str, ...]:
    """The task's rubric dimensions in the order IteraJudge applies them: `published` (the authors'
    revision order) or `reversed` (to measure the order's effect)."""
    return dimensions_for(task, order)


def reference_inputs(ref: pd.DataFrame, order: str = "published") -> list[JudgeInput]:
    """Judge inputs of a reference set (no reference answer: the judge sees only q, y and E)."""
    return [JudgeInput(r.id, r.task, r.question, r.answer, ordered_dimensions(r.task, order))
            for r in ref.itertuples()]


def judge_reference_set(ref: pd.DataFrame, judges: list[ModelSpec], store, *, refiner: ModelSpec | None = None,
                        dimension_order: str = "published", **judge_kw) -> pd.DataFrame:
    """Both methods x every judge on the reference set: one row per (answer, judge, method) with
    the judge's score, status and the reference score."""
    inputs = reference_inputs(ref, dimension_order)
    frames = []
    for spec in judges:
        for method in METHOD_LABELS:
            res = judge_batch(spec, store, inputs, method=method, refiner_spec=refiner, **judge_kw)
            frames.append(results_frame(inputs, res, method, spec.name))
    out = pd.concat(frames, ignore_index=True)
    return out.merge(ref[["id", "question_id", "reference_score"]], on="id", how="left", validate="many_to_one")


def spearman_matrix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman's rho for each row pair of x and y (shape (B, n)): Pearson on average ranks (ties
    share their mean rank, as scipy does). NaN where a row is constant."""
    rx = rankdata(np.atleast_2d(x), axis=1)
    ry = rankdata(np.atleast_2d(y), axis=1)
    rx = rx - rx.mean(axis=1, keepdims=True)
    ry = ry - ry.mean(axis=1, keepdims=True)
    den = np.sqrt((rx ** 2).sum(axis=1) * (ry ** 2).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = (rx * ry).sum(axis=1) / den
    return np.where(den > 0, rho, np.nan)



def expanded_alpha(ci: float, units: int | None) -> float:
    """The tail share of the percentile interval: (1 - ci) / 2, expanded for a small number of resampled
    units (Hesterberg's expanded percentile interval: z = sqrt(n / (n - 1)) * t_{n-1}, tail = Phi(-z)). The
    plain percentile interval is too narrow with few units (about 20 questions here): it ignores the
    n / (n - 1) variance deflation of the bootstrap and the t tails."""
    from scipy.stats import norm, t

    alpha = (1 - ci) / 2
    if units is None or units < 3:
        return alpha
    return float(norm.cdf(-np.sqrt(units / (units - 1)) * t.ppf(1 - alpha, units - 1)))


def _percentile_interval(out: dict, boot: np.ndarray, ci: float, units: int | None = None) -> None:
    """Percentile interval of the finite resamples into `out` (`boot_used` counts them: a resample whose
    ranks are all tied has no Spearman correlation and is left out, never read as 0); expanded for a small
    number of resampled `units` (`expanded_alpha`)."""
    boot = boot[np.isfinite(boot)]
    out["boot_used"] = int(boot.size)
    if boot.size:
        alpha = expanded_alpha(ci, units)
        out["ci_low"], out["ci_high"] = (float(v) for v in np.quantile(boot, [alpha, 1 - alpha]))


def resample_indices(n: int, reps: int, seed: int, groups=None) -> list[np.ndarray]:
    """Bootstrap index sets: answers drawn with replacement, or — with `groups` (each answer's question)
    — whole questions drawn with replacement, every answer of a drawn question kept. The question is the
    unit the reference set samples: answers to one question share its judge offsets, so resampling them
    one by one treats correlated answers as independent and makes the interval too narrow."""
    rng = np.random.default_rng(seed)
    if groups is None:
        return list(rng.integers(0, n, size=(int(reps), n)))
    codes, labels = pd.factorize(pd.Series(list(groups)))
    members = [np.flatnonzero(codes == g) for g in range(len(labels))]
    draws = rng.integers(0, len(members), size=(int(reps), len(members)))
    return [np.concatenate([members[g] for g in row]) for row in draws]


def _units(groups) -> int | None:
    """Questions resampled (None when answers are: the plain percentile interval)."""
    return None if groups is None else int(pd.Series(list(groups)).nunique())


def _boot(stat, idx: list[np.ndarray]) -> np.ndarray:
    """`stat(index_matrix)` over the resamples, vectorised where they have one length."""
    if idx and all(len(i) == len(idx[0]) for i in idx):
        return stat(np.stack(idx))
    return np.concatenate([stat(i[None, :]) for i in idx]) if idx else np.array([])


def spearman_ci(x, y, reps: int = 1000, ci: float = 0.95, seed: int = 0, groups=None) -> dict[str, float]:
    """Spearman's rho with a percentile bootstrap CI over answers, or over questions when `groups` gives
    each answer's question; NaN when n < 3 or a side is constant."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n = len(x)
    out = {"n": n, "spearman": np.nan, "ci_low": np.nan, "ci_high": np.nan, "boot_used": 0}
    if n < 3:
        return out
    out["spearman"] = float(spearman_matrix(x, y)[0])
    if reps > 0 and np.isfinite(out["spearman"]):
        idx = resample_indices(n, reps, seed, groups)
        _percentile_interval(out, _boot(lambda i: spearman_matrix(x[i], y[i]), idx), ci, _units(groups))
    return out


MIN_ITEMS = 10            # fewer answers than this: any interval is flagged
MIN_USABLE_SHARE = 0.5    # fewer usable resamples than this share of the requested ones: flagged


def degenerate(n: int, boot_used: int, reps: int, ci_low: float, ci_high: float) -> str:
    """Why an interval should not be read ('' when it can): too few answers, too few usable
    resamples, or zero width (every resample gave the same value)."""
    why = []
    if n < MIN_ITEMS:
        why.append(f"only {n} answers")
    if reps > 0 and boot_used < MIN_USABLE_SHARE * reps:
        why.append(f"only {boot_used}/{reps} resamples usable")
    if np.isfinite(ci_low) and np.isfinite(ci_high) and ci_high - ci_low == 0:
        why.append("zero-width interval")
    if not (np.isfinite(ci_low) and np.isfinite(ci_high)):
        why.append("no interval")
    return "degenerate: " + ", ".join(why) if why else ""


def correlation_table(scores: pd.DataFrame, reps: int = 1000, ci: float = 0.95, seed: int = 0,
                      reference_column: str = "reference_score") -> pd.DataFrame:
    """Per (judge, method, task): Spearman of the judge's scores with the reference column on the
    answers the judge scored; invalid and unanswered verdicts are counted, never scored."""
    rows = []
    for (judge, method, task), g in scores.groupby(["judge", "method", "task"], sort=False):
        ok = g[g["status"] == "ok"]
        stats = spearman_ci(ok["score"], ok[reference_column], reps, ci, seed,
                            groups=ok["question_id"] if "question_id" in ok else None)
        rows.append({"judge": judge, "method": method, "task": task, "n_items": len(g),
                     "n_invalid": int((g["status"] == "invalid").sum()),
                     "n_not_answered": int((g["status"] == "not_answered").sum()), **stats, "reps": int(reps),
                     "warning": degenerate(stats["n"], stats["boot_used"], reps, stats["ci_low"], stats["ci_high"])})
    return pd.DataFrame(rows)


def paired_difference(ref: np.ndarray, vanilla: np.ndarray, itera: np.ndarray, reps: int = 1000,
                      ci: float = 0.95, seed: int = 0, groups=None) -> dict[str, float]:
    """rho(IteraJudge, ref) - rho(vanilla, ref) on the answers both scored, with a percentile
    bootstrap CI that resamples once for both methods (the pairing that a difference of two separate
    intervals ignores): whole questions when `groups` gives each answer's question, else answers.
    Resamples where either correlation is undefined are dropped."""
    ref, vanilla, itera = (np.asarray(a, dtype=float) for a in (ref, vanilla, itera))
    n = len(ref)
    out = {"n": n, "difference": np.nan, "ci_low": np.nan, "ci_high": np.nan, "boot_used": 0}
    if n < 3:
        return out
    out["difference"] = float(spearman_matrix(itera, ref)[0] - spearman_matrix(vanilla, ref)[0])
    if reps > 0 and np.isfinite(out["difference"]):
        idx = resample_indices(n, reps, seed, groups)
        _percentile_interval(out, _boot(lambda i: spearman_matrix(itera[i], ref[i])
                                        - spearman_matrix(vanilla[i], ref[i]), idx), ci, _units(groups))
    return out


def difference_table(scores: pd.DataFrame, reps: int = 1000, ci: float = 0.95, seed: int = 0,
                     reference_column: str = "reference_score",
                     mixed_rubrics: dict[str, str] | None = None) -> pd.DataFrame:
    """Per (judge, task): the paired IteraJudge - vanilla difference on the answers both methods
    scored (an answer one method could not score is left out of both, and counted). A task whose two
    methods were given different rubrics (`mixed_rubrics`: task -> why) gets no paired value: the
    difference would compare rubrics, not methods."""
    rows = []
    for (judge, task), g in scores.groupby(["judge", "task"], sort=False):
        if task in (mixed_rubrics or {}):
            rows.append({"judge": judge, "task": task, "n_answers": int(g["id"].nunique()), "n_both_scored": 0,
                         "n": 0, "difference": np.nan, "ci_low": np.nan, "ci_high": np.nan, "boot_used": 0,
                         "reps": int(reps), "warning": f"not compared: {mixed_rubrics[task]}"})
            continue
        wide = g.pivot_table(index="id", columns="method", values="score", aggfunc="first")
        status = g.pivot_table(index="id", columns="method", values="status", aggfunc="first")
        both = [i for i in wide.index if all(status.get(m, pd.Series(dtype=object)).get(i) == "ok"
                                              for m in METHOD_LABELS)]
        refs = g.drop_duplicates("id").set_index("id")[reference_column]
        questions = (g.drop_duplicates("id").set_index("id")["question_id"].loc[both]
                     if "question_id" in g and both else None)
        stats = paired_difference(refs.loc[both].to_numpy(), wide.loc[both, "vanilla"].to_numpy() if both else [],
                                  wide.loc[both, "iterajudge"].to_numpy() if both else [], reps, ci, seed,
                                  groups=questions)
        rows.append({"judge": judge, "task": task, "n_answers": int(refs.size), "n_both_scored": len(both),
                     **stats, "reps": int(reps),
                     "warning": degenerate(stats["n"], stats["boot_used"], reps, stats["ci_low"], stats["ci_high"])})
    return pd.DataFrame(rows)


def _cell(r: Any, value: str = "spearman") -> str:
    v = getattr(r, value)
    if not np.isfinite(v):
        return f"n/a (n={r.n})"
    ci = "" if not np.isfinite(r.ci_low) else f" [{r.ci_low:.2f}, {r.ci_high:.2f}]"
    warn = f" ⚠ {r.warning}" if getattr(r, "warning", "") else ""
    sign = "+" if value == "difference" and v > 0 else ""
    used = f", {r.boot_used}/{r.reps} resamples" if hasattr(r, "boot_used") and hasattr(r, "reps") else ""
    return f"{sign}{v:.4f}{ci} (n={r.n}{used}){warn}"


def table4(corr: pd.DataFrame, paper: pd.DataFrame | None = None, diff: pd.DataFrame | None = None) -> pd.DataFrame:
    """Table 4's layout: rows "LLM as a judge (<judge>)" / "Ours (<judge>)" per judge and the paired
    difference "Ours - LLM as a judge", columns the tasks with a reference set (FDD, FTU); this run's rows (value [CI] (n, usable
    resamples), a warning when degenerate) first, then the paper's printed rows."""
    paper = paper_table("bizfin_table4") if paper is None else paper
    columns = calibration_tasks()
    ours = []
    for judge in dict.fromkeys(corr["judge"]):
        for method, label in METHOD_LABELS.items():
            row = {"source": "this run", "Methods": f"{label} ({judge})"}
            for task in columns:
                hit = corr[(corr["judge"] == judge) & (corr["method"] == method) & (corr["task"] == task)]
                row[task] = _cell(next(hit.itertuples())) if len(hit) else "not run"
            ours.append(row)
        if diff is not None:
            row = {"source": "this run", "Methods": f"Ours - LLM as a judge ({judge}), paired"}
            for task in columns:
                hit = diff[(diff["judge"] == judge) & (diff["task"] == task)]
                row[task] = _cell(next(hit.itertuples()), "difference") if len(hit) else "not run"
            ours.append(row)
    printed = []
    for (method, judge), g in paper.groupby(["method", "judge"], sort=False):
        row = {"source": "paper (expert scores)", "Methods": f"{method} ({judge})"}
        row.update({t: f"{g.loc[g['task'] == t, 'spearman'].iloc[0]:.4f}" for t in columns if t in set(g['task'])})
        printed.append(row)
    return pd.DataFrame(ours + printed, columns=["source", "Methods", *columns])


def __getattr__(name: str) -> Any:
    """`RULES`: task -> error kind -> rubric points, read from the IteraJudge records at each access."""
    if name == "RULES":
        return {t: rule_weights(t) for t in calibration_tasks()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["rule_score", "read_reference_set", "load_reference_sets", "ordered_dimensions",
           "reference_inputs", "judge_reference_set", "spearman_matrix", "spearman_ci", "correlation_table",
           "paired_difference", "difference_table", "degenerate", "table4", "REFERENCE_LABEL", "CalibrationDataError"]
