"""Table 8: base vs DPO-tuned model on the held-out test reports (`original` condition).

As the paper measures it, both models *generate* an answer to the evaluation prompt through stage
03's code (same request planning, prompt, truncation, sampling and store), read by the one parser
(`finlib.finbias.answers`): an unparseable answer counts as unparsed, never as a rating. Label scoring
(next-token probabilities after a pre-filled `{"answer": "`) is kept as an extra row, named so.
The tuned model is the base with the LoRA adapter attached UNMERGED by the local backend (its
float32 weights as trained: a merge into bfloat16 would round a small update away), and its answers
are keyed by the adapter's content hash. Scoring is stage 04's:
`score_frame` (parser, joins), `metrics_long` (accuracy and herding per sector, pooled and mean of
sectors, with cluster-bootstrap CIs over firms). The paired test is an exact McNemar on the same
reports (both answers parsed): is the tuned model correct (or herding) on different reports?
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from finlib.core import stats
from finlib.core.tables import paper_table
from finlib.finbias.prompts import FINBIAS_LABELS
from finlib.finbias.scoring.metrics import (
    ACCURACY,
    ACCURACY_PARSED,
    HERDING,
    HERDING_PARSED,
    METRIC_SPECS,
    metrics_long,
)
from finlib.finbias.vocab import POOLED, SECTOR_MEAN, SECTORS, Condition

# accuracy / herding: Eq. 1 over ALL N (unparsed = no match), the one definition of Tables 4-7;
# *_parsed: parsed answers only, a named extra column
TABLE8_METRICS = (ACCURACY, HERDING, ACCURACY_PARSED, HERDING_PARSED, "parse_rate", "prob_herding")
# prob_herding (label-scored models): mean probability on the analyst's rating. A few CPU steps rarely
# flip an argmax, so this is where a small tuned model's shift away from the analyst shows first.
DPO_SUFFIX = " + DPO"
OURS, PAPER = "ours", "Fin-Bias (published)"
GENERATED, LABEL_SCORING = "generated answers", "label scoring"
MEASURES = {"generate": GENERATED, "score": LABEL_SCORING}   # request mode -> Table 8 measure


WHOLE, IN_TIME, OUT_OF_TIME = "whole test split", "in time", "out of time"
TEST_PARTS = (WHOLE, IN_TIME, OUT_OF_TIME)
PAPER_PART = "(the paper's test split)"


def part_ids(split: pd.DataFrame) -> dict[str, set[str]]:
    """Report ids of the whole test split, its in-time part (test firms' reports before the cut-off:
    contemporaneous with training, where other firms' training labels of the same sectors and years
    are cross-sectional look-ahead) and its out-of-time part (on/after the cut-off: nothing of their
    period trained; test firms' and, when `dpo.seen_firm_test`, training firms' later reports)."""
    t = split[split["split"] == "test"]
    ids = set(t["report_id"].astype(str))
    oot = set(t.loc[t["out_of_time"].astype(bool), "report_id"].astype(str))
    return {WHOLE: ids, IN_TIME: ids - oot, OUT_OF_TIME: oot}


def test_items(conditions: pd.DataFrame, test_ids: set[str]) -> pd.DataFrame:
    """The `original` condition rows of the test reports that stage 02 produced (status ok)."""
    c = conditions[(conditions["condition"] == Condition.ORIGINAL.value) & (conditions["status"] == "ok")]
    return c[c["report_id"].isin(test_ids)].reset_index(drop=True)


def eval_report_ids(items: pd.DataFrame, n: int | None, out_of_time: set[str] = frozenset()) -> set[str]:
    """The test reports that also get generated answers: `n` of them (null: all), taken alternately
    from the out-of-time and the in-time part (by id within each), so both parts of Table 8 have
    generated answers even at a small `n`. Generation costs ~100x a label score on CPU, so the
    embedded run caps it (`dpo.eval_reports`)."""
    ids = sorted(items["report_id"].astype(str).unique())
    if n is None:
        return set(ids)
    late, early = [i for i in ids if i in out_of_time], [i for i in ids if i not in out_of_time]
    order = [x for pair in zip(late, early) for x in pair] + late[len(early):] + early[len(late):]
    return set(order[:n])


# `dpo.json_answer_prefix` (named option): the reply starts from the pre-filled `{"answer": "`, its first
# token is one of the three label stems (label scoring's tokens), and it stops at the closing brace
JSON_PREFIX = {"answer_prefix": '{"answer": "', "label_first": True, "stop": ["}"]}


def predict_test_items(cfg, spec, items: pd.DataFrame, store, name: str, gen_ids: set[str], adapter=None,
                       adapter_sha256: str | None = None, answer_prefix: dict | None = None) -> pd.DataFrame:
    """Stage 03's request planning, store and parser for one model on the test items: generated answers
    for `gen_ids`, label scores for every item (local models). `adapter` attaches a LoRA adapter (unmerged)
    and `adapter_sha256` keys its answers. `answer_prefix` (`JSON_PREFIX`, a named option): generation
    starts from the pre-filled `{"answer": "`, its first token a label stem, and stops at `}`; it is in the
    request's params, hence in
    its store key. Returns stage 03's prediction rows, model column = `name`."""
    from finlib.finbias.answers import condition_texts
    from finlib.finbias.dpo.train import chat_template_kwargs
    from finlib.finbias.inference.stage import _rows, inference_params, plan_requests, to_frame
    from finlib.finbias.prompts import build_messages
    from finlib.llm.backends import backend_of
    from finlib.llm.engine import engine_key, send_pending
    from finlib.llm.progress import Progress
    from finlib.llm.store import make_key

    if not backend_of(spec).trains:
        raise ValueError(f"dpo evaluation: model {spec.name!r} has backend {spec.backend!r}; the tuned model is "
                         "evaluated with the local backend (serve adapters with vLLM --enable-lora for API runs)")
    from finlib.llm.precision import resolve_dtype

    inf = inference_params(cfg)
    inf = {**inf, "dtype": resolve_dtype(inf["dtype"], inf["device"])[0], "constrained_json": []}  # as stage 03
    model = backend_of(spec).open_model(
        spec, cfg.path(inf["model_cache"]), dtype=inf["dtype"], batch_size=inf["batch_size"],
        score_batch_size=inf["score_batch_size"], max_batch_tokens=inf["max_batch_tokens"], seed=cfg.seed,
        threads=inf["threads"], device=inf["device"], adapter=adapter, labels=FINBIAS_LABELS,
        chat_template_kwargs=chat_template_kwargs(spec))
    overhead = model.n_tokens(model.prompt_text(build_messages("", spec.supports_system, inf["prompt_version"]),
                                                "score"))
    requests = plan_requests(items, spec, lambda row: (["generate"] if str(row["report_id"]) in gen_ids else [])
                             + ["score"], inf, model.n_tokens, overhead)
    if answer_prefix:
        requests = [dataclasses.replace(r, params={**r.params, **answer_prefix}) if r.mode == "generate" else r
                    for r in requests]
    template = chat_template_kwargs(spec)
    if template:  # the prompt is rendered with these switches (thinking off): named in every key
        requests = [dataclasses.replace(r, params={**r.params, "chat_template_kwargs": template}) for r in requests]
    if adapter_sha256 or answer_prefix or template:  # the tuned weights / the prefix named in the key
        engine = engine_key(spec, inf["dtype"], threads=inf["threads"],
                            **({"adapter_sha256": adapter_sha256} if adapter_sha256 else {}))
        requests = [dataclasses.replace(r, model=name, key=make_key(r.backend, spec.model_id, r.messages, r.params,
                                                                    inf["prompt_version"], r.mode, engine))
                    for r in requests]
    else:
        requests = [dataclasses.replace(r, model=name) for r in requests]
    unique = list({r.key: r for r in requests}.values())
    answered = store.answered([r.key for r in unique])
    pending = [r for r in unique if r.key not in answered]
    progress = Progress(len(pending), desc=f"{name} test items ({'/'.join(sorted({r.mode for r in pending}))})",
                        disable=not inf["progress"] or not pending)
    try:
        send_pending(spec, pending, store, local_model=model, progress=progress)
    finally:
        progress.close()
    return to_frame(_rows(requests, store.get([r.key for r in unique])), condition_texts(items))


def evaluate(pred: pd.DataFrame, conditions: pd.DataFrame, labels: pd.DataFrame, reports: pd.DataFrame,
             reps: int, seed: int, ci: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(scored rows, metrics long) for base and tuned predictions, with stage 04's code."""
    from finlib.finbias.scoring.stage import score_frame

    scored = score_frame(pred, conditions, labels, reports)
    specs = [s for s in METRIC_SPECS if s.name in TABLE8_METRICS]
    return scored.rows, metrics_long(scored.rows, reps, seed, ci, specs=specs)


PAIRED_COLUMNS = ("outcome", "sector", "model", "baseline", "n_pairs", "rate_dpo", "rate_base", "only_dpo",
                  "only_base", "diff", "diff_ci_low", "diff_ci_high", "pvalue", "marker")


def paired_base_vs_dpo(rows: pd.DataFrame, base: str, tuned: str, reps: int, seed: int,
                       ci: float) -> pd.DataFrame:
    """Exact McNemar, tuned vs base on the same reports, for correctness and herding as Eq. 1 counts
    them (every answered report; an unparsed answer is no match), pooled and per sector, with the
    paired difference and its cluster-bootstrap CI."""
    a = rows[rows["model"] == tuned]
    b = rows[rows["model"] == base][["item_id", "answer", "parsed"]]
    pr = a.merge(b, on="item_id", how="inner", suffixes=("", "_base"), validate="one_to_one")
    records = []
    for outcome, target in (("accuracy", "label"), ("herding", "reference_rating")):
        d0 = pr[pr[target].notna()]
        for sector in (POOLED, *SECTORS):
            d = d0 if sector == POOLED else d0[d0["sector"] == sector]
            xa = (d["answer"].notna() & (d["answer"] == d[target])).to_numpy(bool)
            xb = (d["answer_base"].notna() & (d["answer_base"] == d[target])).to_numpy(bool)
            r = stats.mcnemar_exact(xa, xb)
            diff = stats.Estimate(np.nan, np.nan, np.nan, 0)
            if len(d) and reps > 0:
                _, sums = stats.cluster_sums(d["ticker"], np.c_[xa.astype(float) - xb, np.ones(len(d))])
                diff = stats.bootstrap_ci(sums, stats.ratio, reps, seed, ci)
            records.append({"outcome": outcome, "sector": sector, "model": tuned, "baseline": base,
                            "n_pairs": r.n_pairs, "rate_dpo": float(xa.mean()) if len(d) else np.nan,
                            "rate_base": float(xb.mean()) if len(d) else np.nan, "only_dpo": r.only_a,
                            "only_base": r.only_b, "diff": diff.value, "diff_ci_low": diff.ci_low,
                            "diff_ci_high": diff.ci_high, "pvalue": r.pvalue if len(d) else np.nan,
                            "marker": stats.significance_marker(r.pvalue) if len(d) else ""})
    return pd.DataFrame.from_records(records, columns=list(PAIRED_COLUMNS))


DERIVED = " (derived)"
PAPER_DERIVED = "derived from Fin-Bias Tables 6 and 8"
POOLED_INTERVAL = "Average (pooled) CI"
TABLE8_COLUMNS_EXTRA = (POOLED_INTERVAL, "Average (printed)", "N", "parse rate %", "accuracy parsed-only % (pooled)", "N parsed",
                        "herding % (pooled)", "McNemar p (pooled)")


def _paper_rows() -> list[dict]:
    """Table 8's published rows (after DPO), each model's Table 6 accuracy with the rating (its
    base in the same original condition), both printed; and their difference, derived here."""
    t8 = paper_table("finbias_table8")
    t6 = paper_table("finbias_table6")
    rows = []
    for model, g in t8.groupby("model", sort=False):
        dpo = g.set_index("sector")["accuracy"]
        base = t6[t6["model"] == model].set_index("sector")["with_rating"]
        for variant, vals, source in (("base (Table 6, with rating)", base, PAPER), ("DPO (Table 8)", dpo, PAPER),
                                      ("delta DPO - base" + DERIVED, dpo - base.reindex(dpo.index), PAPER_DERIVED)):
            rows.append({"model": model, "variant": variant, "source": source, "test part": PAPER_PART,
                         **{s: vals.get(s, np.nan) for s in SECTORS}, "Average (printed)": vals.get("Average")})
    return rows


def _pooled(g: pd.DataFrame, metric: str, column: str = "value") -> float:
    v = g[(g["metric"] == metric) & (g["sector"] == POOLED)]
    return float(v[column].iloc[0]) if len(v) else np.nan


def _model_row(m: pd.DataFrame, model: str, cols: list[str]) -> dict:
    """One model's Table 8 cells: Eq. 1 accuracy per sector (%), N (all answered), parse rate, and
    the named extras (parsed-only accuracy with its N, herding by Eq. 1), pooled."""
    g = m[m["model"] == model]
    acc = g[g["metric"] == ACCURACY].set_index("sector")["value"].reindex(cols) * 100
    n = _pooled(g, ACCURACY, "n")
    n_parsed = _pooled(g, ACCURACY_PARSED, "n")
    low, high = _pooled(g, ACCURACY, "ci_low") * 100, _pooled(g, ACCURACY, "ci_high") * 100
    interval = f"[{low:.1f}, {high:.1f}]" if np.isfinite(low) and np.isfinite(high) else "[–, –]"
    return {**acc.to_dict(), POOLED_INTERVAL: interval, "N": n, "parse rate %": _pooled(g, ACCURACY, "parse_rate") * 100,
            "accuracy parsed-only % (pooled)": _pooled(g, ACCURACY_PARSED) * 100, "N parsed": n_parsed,
            "herding % (pooled)": _pooled(g, HERDING) * 100}


def table8(metrics: pd.DataFrame, tests: pd.DataFrame, models: list[str]) -> pd.DataFrame:
    """Table 8 in the paper's layout: models x sectors + averages (accuracy by Eq. 1 over all N, %).
    For every trained model, per measure (generated answers, the paper's; then label scoring, named
    so) and per test part (whole test split, in time, out of time; each with its N): base, DPO and
    their difference (derived, with the pooled McNemar p); then the paper's rows (its DPO accuracy,
    the same model's Table 6 accuracy with the rating, and their difference, derived).
    `metrics` / `tests` carry `measure` and `test_part` columns."""
    m = metrics[(metrics["condition"] == Condition.ORIGINAL.value)]
    cols = [*SECTORS, POOLED, SECTOR_MEAN]
    ours = []
    for base in models:
        tuned = base + DPO_SUFFIX
        for measure in (GENERATED, LABEL_SCORING):
            tag = "" if measure == GENERATED else f" ({LABEL_SCORING})"
            for part in TEST_PARTS:
                a = m[(m["measure"] == measure) & (m["test_part"] == part)]
                if a[a["model"] == base].empty:
                    continue
                t = tests[(tests["measure"] == measure) & (tests["test_part"] == part) & (tests["model"] == tuned)
                          & (tests["outcome"] == "accuracy") & (tests["sector"] == POOLED)] if len(tests) else tests
                p = float(t["pvalue"].iloc[0]) if len(t) else np.nan
                vb, vt = _model_row(a, base, cols), _model_row(a, tuned, cols)
                common = {"measure": measure, "test part": part, "source": OURS}
                delta = {c: vt[c] - vb[c] for c in [*cols, "accuracy parsed-only % (pooled)", "herding % (pooled)"]}
                ours += [{"model": base, "variant": "base" + tag, **common, **vb},
                         {"model": tuned, "variant": "DPO" + tag, **common, **vt},
                         {"model": tuned, "variant": "delta DPO - base" + tag + DERIVED, **common, **delta,
                          "McNemar p (pooled)": p}]
    paper = [{**r, "measure": GENERATED} for r in _paper_rows()]
    out = pd.DataFrame(ours + paper)
    for c in TABLE8_COLUMNS_EXTRA:
        if c not in out:
            out[c] = np.nan
    for c in ("N", "N parsed"):
        out[c] = pd.to_numeric(out[c]).round().astype("Int64")
    return out[["model", "variant", "measure", "test part", "source", *cols, *TABLE8_COLUMNS_EXTRA]]
