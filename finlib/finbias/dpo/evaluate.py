"""Table 8: base vs DPO-tuned model on the held-out test reports (`original` condition).

Both models answer through stage 03's code (same request planning, prompt, truncation, label
scoring and store); the tuned model is the base with the LoRA adapter merged by the local
backend, and its answers are keyed by the adapter's content hash. Scoring is stage 04's:
`score_frame` (parser, joins), `metrics_long` (accuracy and herding per sector, pooled and mean of
sectors, with cluster-bootstrap CIs over firms). The paired test is an exact McNemar on the same
reports (both answers parsed): is the tuned model correct (or herding) on different reports?
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from finlib.core import stats
from finlib.core.vocab import POOLED, SECTOR_MEAN, SECTORS, Condition
from finlib.core.tables import paper_table

TABLE8_METRICS = ("accuracy", "herding", "accuracy_all", "herding_all", "parse_rate", "prob_herding")
# prob_herding (label-scored models): mean probability on the analyst's rating. A few CPU steps rarely
# flip an argmax, so this is where a small tuned model's shift away from the analyst shows first.
DPO_SUFFIX = " + DPO"
OURS, PAPER = "ours", "Fin-Bias (published)"


def test_items(conditions: pd.DataFrame, test_ids: set[str]) -> pd.DataFrame:
    """The `original` condition rows of the test reports that stage 02 produced (status ok)."""
    c = conditions[(conditions["condition"] == Condition.ORIGINAL.value) & (conditions["status"] == "ok")]
    return c[c["report_id"].isin(test_ids)].reset_index(drop=True)


def score_test_items(cfg, spec, items: pd.DataFrame, store, name: str, adapter=None,
                     adapter_sha256: str | None = None) -> pd.DataFrame:
    """Label-score (local models) the items with stage 03's planning and store; `adapter` merges
    a LoRA adapter first and `adapter_sha256` keys its answers. Returns predictions rows (stage 03's
    columns, parsed), model column = `name`."""
    from finlib.llm.engine import engine_key, send_pending
    from finlib.llm.local_backend import LocalModel
    from finlib.llm.prompts import build_messages
    from finlib.finbias.inference import _rows, inference_params, plan_requests, to_frame
    from finlib.llm.store import make_key
    from finlib.llm.answers import condition_texts

    if spec.backend != "local":
        raise ValueError(f"dpo evaluation: model {spec.name!r} has backend {spec.backend!r}; the tuned model is "
                         "evaluated with the local backend (serve adapters with vLLM --enable-lora for API runs)")
    from finlib.llm.precision import resolve_dtype

    inf = inference_params(cfg)
    inf = {**inf, "dtype": resolve_dtype(inf["dtype"], inf["device"])[0]}  # as stage 03 keys it (auto: measured)
    model = LocalModel(spec, cfg.path(inf["model_cache"]), dtype=inf["dtype"], batch_size=inf["batch_size"],
                       score_batch_size=inf["score_batch_size"], max_batch_tokens=inf["max_batch_tokens"],
                       seed=cfg.seed, threads=inf["threads"], device=inf["device"], adapter=adapter)
    overhead = model.n_tokens(model.prompt_text(build_messages("", spec.supports_system, inf["prompt_version"]),
                                                "score"))
    requests = plan_requests(items, spec, lambda row: ["score"], inf, model.n_tokens, overhead)
    if adapter_sha256:  # same request, the tuned weights named in the key
        engine = engine_key(spec, inf["dtype"], adapter_sha256=adapter_sha256)
        requests = [dataclasses.replace(r, model=name, key=make_key(r.backend, spec.model_id, r.messages, r.params,
                                                                    inf["prompt_version"], r.mode, engine))
                    for r in requests]
    else:
        requests = [dataclasses.replace(r, model=name) for r in requests]
    unique = list({r.key: r for r in requests}.values())
    answered = store.answered([r.key for r in unique])
    send_pending(spec, [r for r in unique if r.key not in answered], store, local_model=model)
    return to_frame(_rows(requests, store.get([r.key for r in unique])), condition_texts(items))


def evaluate(pred: pd.DataFrame, conditions: pd.DataFrame, labels: pd.DataFrame, reports: pd.DataFrame,
             reps: int, seed: int, ci: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(scored rows, metrics long) for base and tuned predictions, with stage 04's code."""
    from finlib.finbias.scoring import METRIC_SPECS, metrics_long, score_frame

    scored = score_frame(pred, conditions, labels, reports)
    specs = [s for s in METRIC_SPECS if s.name in TABLE8_METRICS]
    return scored.rows, metrics_long(scored.rows, reps, seed, ci, specs=specs)


PAIRED_COLUMNS = ("outcome", "sector", "model", "baseline", "n_pairs", "rate_dpo", "rate_base", "only_dpo",
                  "only_base", "diff", "diff_ci_low", "diff_ci_high", "pvalue", "marker")


def paired_base_vs_dpo(rows: pd.DataFrame, base: str, tuned: str, reps: int, seed: int,
                       ci: float) -> pd.DataFrame:
    """Exact McNemar, tuned vs base on the same reports (both parsed), for correctness and
    herding, pooled and per sector, with the paired difference and its cluster-bootstrap CI."""
    a = rows[rows["model"] == tuned]
    b = rows[rows["model"] == base][["item_id", "answer", "parsed"]]
    pr = a.merge(b, on="item_id", how="inner", suffixes=("", "_base"), validate="one_to_one")
    pr = pr[pr["parsed"] & pr["parsed_base"]]
    records = []
    for outcome, target in (("accuracy", "label"), ("herding", "reference_rating")):
        d0 = pr[pr[target].notna()]
        for sector in (POOLED, *SECTORS):
            d = d0 if sector == POOLED else d0[d0["sector"] == sector]
            xa = (d["answer"] == d[target]).to_numpy(bool)
            xb = (d["answer_base"] == d[target]).to_numpy(bool)
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


def _paper_rows() -> list[dict]:
    """Table 8's published rows (after DPO), each model's Table 6 accuracy with the rating (its
    base in the same original condition) and the difference, all in %."""
    t8 = paper_table("finbias_table8")
    t6 = paper_table("finbias_table6")
    rows = []
    for model, g in t8.groupby("model", sort=False):
        dpo = g.set_index("sector")["accuracy"]
        base = t6[t6["model"] == model].set_index("sector")["with_rating"]
        for variant, vals in (("base (Table 6, with rating)", base), ("DPO (Table 8)", dpo),
                              ("delta DPO - base", dpo - base.reindex(dpo.index))):
            rows.append({"model": model, "variant": variant, "source": PAPER,
                         **{s: vals.get(s, np.nan) for s in SECTORS}, "Average (printed)": vals.get("Average")})
    return rows


def table8(metrics: pd.DataFrame, tests: pd.DataFrame, base: str, tuned: str) -> pd.DataFrame:
    """Table 8 in the paper's layout: models x sectors + averages (accuracy, %), our base, our DPO
    model and the delta (with McNemar p), then the paper's rows (base from Table 6, DPO, delta)."""
    acc = metrics[(metrics["metric"] == "accuracy") & (metrics["condition"] == Condition.ORIGINAL.value)]
    cols = [*SECTORS, POOLED, SECTOR_MEAN]
    vals = {m: acc[acc["model"] == m].set_index("sector")["value"].reindex(cols) * 100 for m in (base, tuned)}
    n = {m: acc[(acc["model"] == m) & (acc["sector"] == POOLED)]["n"].sum() for m in (base, tuned)}
    pooled = tests[(tests["outcome"] == "accuracy") & (tests["sector"] == POOLED)] if len(tests) else tests
    p = float(pooled["pvalue"].iloc[0]) if len(pooled) else np.nan
    ours = [{"model": base, "variant": "base", "source": OURS, **vals[base].to_dict(), "N": int(n[base])},
            {"model": tuned, "variant": "DPO", "source": OURS, **vals[tuned].to_dict(), "N": int(n[tuned])},
            {"model": tuned, "variant": "delta DPO - base", "source": OURS,
             **(vals[tuned] - vals[base]).to_dict(), "McNemar p (pooled)": p}]
    out = pd.DataFrame(ours + _paper_rows())
    out["N"] = out["N"].astype("Int64")
    return out[["model", "variant", "source", *cols, "Average (printed)", "N", "McNemar p (pooled)"]]
