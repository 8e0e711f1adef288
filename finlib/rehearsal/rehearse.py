"""`make rehearse`: both papers' full runs, offline, against simulated servers -- then checked.

Why: the runs this repository exists for (Fin-Bias: 8,868 reports x 19 models x 4 conditions;
BizFinBench: the 24-model grid and Table 4's judges) cannot be executed without GPUs, keys and the
hub, yet their failure modes (one URL for every open model, reports cut for the 8k-context models,
answers that stop at the token limit, rate limits) only show at that shape. The rehearsal:

1. starts one simulated OpenAI-compatible server per model the params name
   (finlib.rehearsal.simulated_servers), each on its own port with the model's registry context window,
   latency, rate limits and planted answer propensities;
2. points every model at its server the way a user points it at vLLM: the environment variables
   FINLIB_BASE_URL__<NAME> (finlib.llm.registry.apply_endpoints), read by every stage;
3. runs the stages through the runner (finlib.pipeline.runner: the same code path as a real run,
   preflight included), then the HTTP report and `make plan` for the same params;
4. checks the result (`rehearsal_checks`): every table of both papers has every row filled, every
   figure exists, no report was cut or left unsent, every prompt was recognised as a generated
   report, stage 02 found every report's rating statement by the rule its layout calls for, removed it
   leaving every other byte and wrote fakes that read back as the new rating at the planted slots
   (finlib.rehearsal.statements; provider front pages from finlib.finbias.data.provider_layouts among them),
   stage 01's label of every report equals the planted label truth (the `labels:` rule run
   on the generator's own prices over the days after the day it dated the report and planted its
   drift, finlib.finbias.data.synth_planted.planted_labels: shares no code with stage 01), and every
   cell of Fin-Bias Tables 4-7 (each model, sector, Average and condition, the Analyst rows too) lies
   within its tolerance of the planted truth (`table_cells`): the closed form the generator's records,
   the planted labels and the planted propensities give, Eq. 1 over every answered item, read from
   the written tables -- not from stage 04's metrics; and every printed pooled interval, McNemar
   count, p-value, Holm p-value and marker, and every pooled Stuart-Maxwell statistic, df, p-value and
   Holm p-value, agrees with its recomputation from the servers' replies (finlib.rehearsal.intervals:
   firm-clustered closed-form widths, scipy's binomial test, Stuart-Maxwell written out with scipy's
   chi-square, statsmodels' Holm).

The outcome goes to runs/<run>/rehearsal.{json,md}; the exit code is non-zero when a check fails.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from finlib.bizfin.tasks import task_order
from finlib.core.config import RunConfig, load_run, repo_root
from finlib.core.memory import peak_rss_mb
from finlib.finbias.vocab import POOLED, SECTORS

# Fin-Bias Tables 2-7 and BizFinBench Tables 3, 4, 6: (our table file, the published table it mirrors)
FINBIAS_TABLES = (("table4_herding_with_without", "finbias_table4"), ("table5_herding_fake", "finbias_table5"),
                  ("table6_accuracy_with_without", "finbias_table6"), ("table7_accuracy_no_opinion", "finbias_table7"))
CORPUS_TABLES = ("table2_sectors", "table3_analyst_ratings", "table3_return_ratings")


def rehearsal_params(cfg: RunConfig) -> dict[str, Any]:
    """The `rehearsal:` section, checked by the params schema (`finlib.core.params.RehearsalSection`:
    every key present, each profile override a declared field of a simulated model's profile)."""
    return cfg.section("rehearsal")


def served_model_names(cfg: RunConfig) -> list[str]:
    """Every API-served registry model the params name (stage 03, BizFinBench answerers, judges, refiner)."""
    from finlib.llm.backends import backend_of
    from finlib.llm.registry import load_registry
    from finlib.pipeline.plan import model_names

    registry = load_registry(cfg.path(cfg.params["inference"]["registry"]))
    names = model_names({k: cfg.params.get(k) for k in ("inference", "bizfin")}) & set(registry)
    return sorted(n for n in names if backend_of(registry[n]).http_endpoint)


def profiles_for(cfg: RunConfig, names: list[str]):
    """The simulated profile of each model: registry context window and thinking, planted propensities."""
    from finlib.llm.registry import load_registry
    from finlib.rehearsal.simulated_servers import default_profile

    rp = rehearsal_params(cfg)
    registry = load_registry(cfg.path(cfg.params["inference"]["registry"]))
    unknown = sorted(set(rp["profiles"]) - set(names))
    if unknown:
        raise ValueError(f"{cfg.params_file}: rehearsal.profiles names models no stage uses: {unknown}")
    return {n: default_profile(n, registry[n].model_id, registry[n].context_length, registry[n].thinks,
                               seed=int(rp["profile_seed"]), **(rp["profiles"].get(n) or {})) for n in names}


class ServerPool:
    """The simulated servers on an event loop in a daemon thread (`with ServerPool(...) as pool:`)."""

    def __init__(self, profiles: dict, bizfin_items: dict | None, time_scale: float, planted=None):
        self.profiles, self.items, self.time_scale, self.planted = profiles, bizfin_items, time_scale, planted
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.servers: dict = {}

    def __enter__(self) -> ServerPool:
        from finlib.rehearsal.simulated_servers import start_servers

        self.thread.start()
        fut = asyncio.run_coroutine_threadsafe(
            start_servers(self.profiles.values(), self.items, self.time_scale, self.planted), self.loop)
        self.servers = fut.result(60)
        return self

    def urls(self) -> dict[str, str]:
        return {n: f"http://127.0.0.1:{s.port}/v1" for n, s in self.servers.items()}

    def books(self) -> dict[str, dict]:
        return {n: dict(vars(s.books)) for n, s in self.servers.items()}

    def __exit__(self, *exc) -> None:
        async def stop_all():
            for s in self.servers.values():
                await s.stop()
        asyncio.run_coroutine_threadsafe(stop_all(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def planted_index(planted: pd.DataFrame | None):
    """The servers' reader of the generator's records (None: no synthetic corpus to recognise)."""
    from finlib.finbias.data.synth_planted import PlantedIndex

    return None if planted is None else PlantedIndex(planted)


def endpoint_environment(urls: dict[str, str]) -> dict[str, str]:
    """The environment that points every model at its server (keyless, like a vLLM server)."""
    from finlib.llm.registry import endpoint_env_name

    env = {}
    for name, url in urls.items():
        env[endpoint_env_name(name, "base_url")] = url
        env[endpoint_env_name(name, "api_key_env")] = "null"
    return env


def bizfin_items_index(cfg: RunConfig) -> dict:
    """Every BizFinBench item stage 07 may ask (published files when present, else the format samples)."""
    from finlib.bizfin.benchmark.stage import bizfin_params, load_items
    from finlib.rehearsal.simulated_servers import bizfin_index

    p = bizfin_params(cfg)
    loaded, _ = load_items(cfg, p)
    return bizfin_index(loaded)


# ---------------------------------------------------------------- checks

# The tables the planted truth is compared with: (written table, conditions in the cell's "a/b" order,
# the statistic, with an Analyst row). Stated here, not read from finlib.finbias.scoring.paper_layout: a table
# filled with another statistic or condition must show up as a wrong cell.
PLANTED_TABLES = (("table4_herding_with_without", ("original", "no_rating"), "herding", False),
                  ("table5_herding_fake", ("fake_rating",), "herding", False),
                  ("table6_accuracy_with_without", ("original", "no_rating"), "accuracy", True),
                  ("table7_accuracy_no_opinion", ("no_opinion",), "accuracy", True))
_MARKER = re.compile(r"\*+$")


def _synthetic_files(cfg: RunConfig) -> dict[str, Path]:
    """The generator's files of the synthetic corpus (written with it by stage 00's cache, made here
    first when the rehearsal starts from nothing)."""
    from finlib.finbias.data.stage import data_params
    from finlib.finbias.data.synth_cache import cached_market

    return cached_market(data_params(cfg)["synthetic"], cfg.seed, cfg.raw_dir / "synthetic" / cfg.name)


def planted_records(cfg: RunConfig) -> pd.DataFrame | None:
    """The generator's records of the synthetic corpus; None for a real corpus."""
    return pd.read_parquet(_synthetic_files(cfg)["planted"]) if cfg.is_synthetic else None


def planted_label_truth(cfg: RunConfig) -> pd.DataFrame:
    """Every generated report's return-based label computed from the generator's own files and the
    `labels:` rule (`finlib.finbias.data.synth_planted.planted_labels`), never from stage 01; with
    `drift_car`, the window x daily drift the generator planted, so the run shows how much of the
    label the planted drift carries."""
    from finlib.finbias.data.synth_planted import planted_labels

    files = _synthetic_files(cfg)
    lp = cfg.section("labels")
    reports, prices, market, truth = (pd.read_parquet(files[k]) for k in ("reports", "prices", "market", "truth"))
    out = planted_labels(reports, prices, market, int(lp["window"]), tuple(lp["quantiles"]), str(lp["method"]),
                         int(lp["mackinlay"]["estimation_window"]), int(lp["mackinlay"]["gap"]))
    out["drift_car"] = out["report_id"].map(truth.set_index("report_id")["drift"]) * int(lp["window"])
    return out


CAR_TOLERANCE = 1e-9  # two least-squares solutions of the same window agree to ~1e-14


def label_differences(truth: pd.DataFrame, ours: pd.DataFrame) -> tuple[dict[str, Any], list[str]]:
    """Stage 01's labels and CARs (`ours`: report_id, label, car) against the planted label truth, report
    by report (joined on report_id): a report labelled differently or not at all, or whose CAR is off by
    more than `CAR_TOLERANCE`, is a problem. Returns the summary the outcome keeps and the problems."""
    both = truth.merge(ours[["report_id", "label", "car"]], on="report_id", how="left",
                       suffixes=("_planted", "_ours"))
    differ = both[both["label_planted"].astype(str) != both["label_ours"].astype(str)]
    car_gap = (both["car_ours"] - both["car_planted"]).abs()
    car_off = both[~(car_gap <= CAR_TOLERANCE)]
    summary = {"reports": int(len(both)), "differ": int(len(differ)), "car_off": int(len(car_off)),
               "car_max_gap": float(car_gap.max()) if len(both) else None,
               "corr_car_planted_drift": (round(float(np.corrcoef(both["car_planted"], both["drift_car"])[0, 1]), 4)
                                          if "drift_car" in both and len(both) > 2 else None)}
    problems = []
    if len(differ):
        shown = ", ".join(f"{r.report_id} ours {r.label_ours} planted {r.label_planted}"
                          for r in differ.head(5).itertuples())
        problems.append(f"{len(differ)} of {len(both)} stage 01 labels differ from the planted label truth: {shown}")
    if len(car_off):
        shown = ", ".join(f"{r.report_id} ours {r.car_ours:.6g} planted {r.car_planted:.6g}"
                          for r in car_off.head(5).itertuples())
        problems.append(f"{len(car_off)} of {len(both)} stage 01 CARs differ from the planted truth by more than "
                        f"{CAR_TOLERANCE:g}: {shown}")
    return summary, problems


def label_problems(cfg: RunConfig, truth: pd.DataFrame, out: dict[str, Any]) -> list[str]:
    """`label_differences` for the run's labels artifact. Fills `out["labels"]`."""
    from finlib.core.artifacts import read_frame

    out["labels"], problems = label_differences(truth, read_frame(cfg, "labels", ["report_id", "label", "car"]))
    return problems


def propensities(profiles: dict) -> dict[str, dict[str, float]]:
    """The planted numbers of each simulated model the closed form needs."""
    return {n: {k: float(getattr(p, k)) for k in ("follow", "skill", "tilt", "sway", "unparsed")}
            for n, p in profiles.items()}


def planted_truth(cfg: RunConfig, profiles: dict, planted: pd.DataFrame,
                  labels: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every Table 4-7 cell's planted value and SD, over the items stage 03 answered (their report set,
    the fake rating stage 02 says it wrote, the prompts a server refused for their length: empty answers
    inside N); labels from the generator's files (`planted_label_truth`), sector and ratings from the
    generator's records."""
    from finlib.core.artifacts import read_frame
    from finlib.finbias.data.synth_planted import analyst_cells, expected_cells
    from finlib.llm.context import CONTEXT_REFUSED

    pred = read_frame(cfg, "predictions", ["item_id", "report_id", "condition", "model", "answered", "error"])
    cond = read_frame(cfg, "conditions", ["item_id", "fake_rating"])
    pred["refused"] = pred["error"].astype("string").str.startswith(CONTEXT_REFUSED).fillna(False).astype(bool)
    cases = pred[pred["answered"].astype(bool)].merge(cond, on="item_id", how="left")
    labels = (planted_label_truth(cfg) if labels is None else labels).set_index("report_id")["label"]
    return pd.concat([expected_cells(planted, cases, labels, propensities(profiles), SECTORS),
                      analyst_cells(planted, labels, SECTORS)], ignore_index=True)


def table_cells(path: Path, conditions: tuple[str, ...], metric: str) -> pd.DataFrame:
    """Our cells of a written Table 4-7 in long form: model, condition, metric, sector, value (a fraction;
    NaN for '–' or 'skipped'), digits as printed, and N per condition (pooled)."""
    t = read_table_csv(path)
    t = t[t["Source"].astype(str).str.startswith("ours")]
    out = []
    for rec in t.to_dict("records"):
        model = "Analyst" if str(rec["Source"]).endswith("(analyst baseline)") else str(rec["Registry name"])
        conds = ("original",) if model == "Analyst" else conditions
        ns = str(rec.get("N", "")).split("/")
        for col in (*SECTORS, "Average"):
            parts = _MARKER.sub("", str(rec[col]).strip()).split("/")
            for i, c in enumerate(conds):
                raw = parts[i].strip() if i < len(parts) else ""
                try:
                    value = float(raw) / 100
                except ValueError:
                    value = np.nan
                digits = len(raw.split(".")[1]) if "." in raw else 0
                n = int(ns[i]) if col == "Average" and i < len(ns) and ns[i].strip().isdigit() else None
                out.append({"model": model, "condition": c, "metric": metric,
                            "sector": POOLED if col == "Average" else col, "value": value, "digits": digits,
                            "table_n": n, "table": path.stem})
    return pd.DataFrame(out)


def cell_check(truth: pd.DataFrame, ours: pd.DataFrame, alpha: float) -> pd.DataFrame:
    """Each of our cells against the planted truth: |ours - planted| <= z SD + 0.5/N + half the printed
    unit, z Bonferroni-corrected over the cells compared (family-wise false alarm `alpha`); a pooled
    cell's N must be the answered items; a missing cell fails."""
    from scipy.stats import norm

    df = ours.merge(truth, on=["model", "condition", "metric", "sector"], how="left")
    z = float(norm.isf(alpha / (2 * max(1, len(df)))))
    df["tolerance"] = z * df["sd"] + 0.5 / df["n"].clip(lower=1) + 0.5 * 10.0 ** (-df["digits"]) / 100
    df["z"] = (df["value"] - df["expected"]) / df["sd"].where(df["sd"] > 0)
    n_ok = df["table_n"].isna() | (df["table_n"] == df["n"])
    df["ok"] = ((df["value"] - df["expected"]).abs() <= df["tolerance"]) & n_ok
    df.loc[df["n"].fillna(0) == 0, "ok"] = df["value"].isna()  # no planted item: the cell must be empty
    return df


def cells_recovery(cfg: RunConfig, profiles: dict, planted: pd.DataFrame, alpha: float,
                   labels: pd.DataFrame | None = None) -> pd.DataFrame:
    """The rehearsal's cell check: every cell of our Tables 4-7 against the planted truth (`cell_check`)."""
    truth = planted_truth(cfg, profiles, planted, labels)
    ours = pd.concat([table_cells(cfg.tables_dir / f"{name}.csv", conds, metric)
                      for name, conds, metric, _ in PLANTED_TABLES], ignore_index=True)
    return cell_check(truth, ours, alpha)


def cell_problems(cells: pd.DataFrame, limit: int = 12) -> list[str]:
    """One line per failed cell (the first `limit`, then a count)."""
    bad = cells[~cells["ok"]]
    lines = [f"{r.table} {r.model}/{r.condition} {r.sector}: ours {100 * r.value:.2f} (N {r.table_n}), planted "
             f"{100 * r.expected:.2f} ± {100 * r.tolerance:.2f} (N {r.n})" for r in bad.head(limit).itertuples()]
    if len(bad) > limit:
        lines.append(f"... and {len(bad) - limit} more cells")
    return [f"{len(bad)} of {len(cells)} table cells outside their planted tolerance: " + "; ".join(lines)] if len(bad) else []


def read_table_csv(path: Path) -> pd.DataFrame:
    """A written table (finlib.core.tables.write_table): caption lines start with '#', then the CSV."""
    lines = path.read_text(encoding="utf-8").splitlines()
    skip = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))
    return pd.read_csv(path, skiprows=skip)


def table_rows(path: Path, expected: list[str]) -> dict[str, Any]:
    """Which expected rows (the `Model` column, else the first) our rows of a written table lack, and
    how many of their result cells (sectors, averages, scores) are empty ('–' or blank)."""
    if not path.is_file():
        return {"table": path.name, "exists": False, "missing_rows": expected, "empty_cells": None}
    t = read_table_csv(path)
    origin = next((c for c in t.columns if c.lower() in ("source", "row")), None)
    if origin is not None and t[origin].astype(str).isin(["ours", "this run"]).any():
        t = t[t[origin].astype(str).isin(["ours", "this run"])]  # our rows, not the published ones beside them
    key = next((c for c in t.columns if c.lower() in ("model", "methods")), t.columns[0])
    have = {str(v).strip().lower() for v in t[key]}
    missing = [r for r in expected if str(r).strip().lower() not in have]
    tasks = {*task_order(), "avg"}  # every declared task's column, and the Average
    cells = [c for c in t.columns if c in SECTORS or c in tasks or c.startswith("Average")
             or c.lower() in ("score", "accuracy")]
    body = t[cells].astype(str).apply(lambda s: s.str.strip())
    empty = int((body.isin(["", "nan", "–", "-"]) | body.apply(lambda s: s.str.contains("–/|/–", regex=True))).sum().sum())
    return {"table": path.name, "exists": True, "rows": int(len(t)), "missing_rows": missing, "empty_cells": empty}


def interval_and_test_problems(cfg: RunConfig, planted: pd.DataFrame, labels: pd.DataFrame,
                               out: dict[str, Any]) -> list[str]:
    """The printed pooled intervals, McNemar counts, p-values, Holm p-values and markers of Tables 4-7 and
    the paired-test table (McNemar and Stuart-Maxwell rows) against their recomputation from the servers' replies
    (finlib.rehearsal.intervals). Fills `out["intervals"]`."""
    from finlib.core.artifacts import read_frame
    from finlib.rehearsal import intervals as iv

    sc = cfg.section("scoring")
    level, reps = float(sc["ci"]), int(sc["bootstrap_reps"])
    pred = read_frame(cfg, "predictions", ["item_id", "report_id", "condition", "model", "answered", "raw_text"])
    fake = read_frame(cfg, "conditions", ["item_id", "fake_rating"]).set_index("item_id")["fake_rating"]
    reports = pd.read_parquet(_synthetic_files(cfg)["reports"], columns=["report_id", "ticker"])
    items = iv.scored_items(pred, fake, planted.set_index("report_id")["analyst_rating"],
                            labels.set_index("report_id")["label"], reports.set_index("report_id")["ticker"])
    recomputed = iv.mcnemar_recomputed(items)
    tests = read_table_csv(cfg.tables_dir / "table_paired_tests.csv")
    printed, markers = iv.printed_cells({t: read_table_csv(cfg.tables_dir / f"{t}.csv") for t in iv.MARKED_TABLES})
    widths = iv.interval_widths(printed, iv.cell_errors(items), tests, recomputed, level)
    summary, problems = iv.interval_problems(widths, level, reps)
    shifts = iv.stuart_maxwell_recomputed(items)
    out["intervals"] = {**summary, "mcnemar": recomputed.round(6).replace({np.nan: None}).to_dict(orient="records"),
                        "stuart_maxwell": shifts.round(6).replace({np.nan: None}).to_dict(orient="records"),
                        "widths": widths.round(5).to_dict(orient="records")}
    return (problems + iv.paired_test_problems(tests, recomputed) + iv.marker_problems(markers, recomputed)
            + iv.stuart_maxwell_problems(tests, shifts))


def finbias_cell_problems(cfg: RunConfig, profiles: dict, planted: pd.DataFrame, alpha: float,
                          out: dict[str, Any], books: dict[str, dict] | None = None) -> list[str]:
    """The Fin-Bias part of the check (`make rehearse` and the fault tests run this): every Table 4-7 cell
    against the planted truth, stage 01's labels against the planted labels, intervals, McNemar tests and
    markers against their recomputation, and every prompt recognised as a generated report. Fills `out["cells"]` and `out["labels"]`."""
    labels = planted_label_truth(cfg)
    cells = cells_recovery(cfg, profiles, planted, alpha, labels)
    out["cells"] = cells.round(5).replace({np.nan: None}).to_dict(orient="records")
    out["cells_ok_share"] = float(cells["ok"].mean())
    problems = label_problems(cfg, labels, out) + cell_problems(cells)
    problems += interval_and_test_problems(cfg, planted, labels, out)
    readings: dict[str, int] = {}
    for b in (books or {}).values():
        for k, v in (b.get("readings") or {}).items():
            readings[k] = readings.get(k, 0) + v
    out["readings"] = readings
    if readings.get("unknown"):
        problems.append(f"{readings['unknown']} Fin-Bias prompts matched no generated report")
    return problems


def statement_problems(cfg: RunConfig, planted: pd.DataFrame, out: dict[str, Any]) -> list[str]:
    """Stage 02 on every generated report against its planted statement (finlib.rehearsal.statements: the
    rule, removal byte for byte, fakes read back at the planted slots). Fills `out["statements"]`."""
    from finlib.core.artifacts import read_frame
    from finlib.rehearsal.statements import statement_check

    texts = pd.read_parquet(_synthetic_files(cfg)["reports"], columns=["report_id", "text"])
    result = statement_check(planted, texts.set_index("report_id")["text"], read_frame(cfg, "rating_statements"),
                             read_frame(cfg, "conditions"))
    out["statements"] = result["counts"]
    return result["problems"]


def rehearsal_checks(cfg: RunConfig, profiles: dict, planted: pd.DataFrame | None = None,
                     books: dict[str, dict] | None = None) -> dict[str, Any]:
    """Every check of a finished rehearsal (see the module docstring); `ok` is their conjunction."""
    from finlib.core.artifacts import read_frame, read_json
    from finlib.llm.registry import load_registry

    rp = rehearsal_params(cfg)
    registry = load_registry(cfg.path(cfg.params["inference"]["registry"]))
    stages = set(rp["stages"] or [])
    out: dict[str, Any] = {"tables": [], "problems": []}
    paper_rows = [registry[m].paper_name for m in cfg.params["inference"]["models"]]
    tables = cfg.tables_dir
    if "04" in stages or not stages:
        for ours, _ in FINBIAS_TABLES:
            out["tables"].append(table_rows(tables / f"{ours}.csv", paper_rows))
    if "01" in stages or not stages:
        for ours in CORPUS_TABLES:
            out["tables"].append(table_rows(tables / f"{ours}.csv", []))
    if "07" in stages or not stages:
        out["tables"].append(table_rows(tables / "bizfin_table3.csv", list(cfg.params["bizfin"]["models"])))
        out["tables"].append(table_rows(tables / "bizfin_table6.csv", []))
    if "08" in stages or not stages:
        judges = cfg.params["bizfin"]["iterajudge"]["judges"]
        out["tables"].append(table_rows(tables / "bizfin_table4_judge.csv", [
            f"{kind} ({j})" for j in judges for kind in ("LLM as a judge", "Ours")]))
    for t in out["tables"]:
        if not t["exists"] or t["missing_rows"] or t["empty_cells"]:
            out["problems"].append(f"table {t['table']}: exists={t['exists']}, missing rows {t['missing_rows'][:5]}, "
                                   f"empty cells {t['empty_cells']}")
    if "03" in stages or not stages:
        pred = read_frame(cfg, "predictions", ["truncated", "answered"])  # not the replies: 674k at full size
        inf_report = read_json(cfg, "inference_report")
        cut = int(pred["truncated"].sum())
        not_sent = {m: r.get("not_sent_context", 0) for m, r in inf_report["models"].items()}
        out["inputs"] = {"reports_cut": cut, "not_sent_context": not_sent,
                         "context_refused": {m: r.get("context_refused", 0) for m, r in inf_report["models"].items()},
                         "output_room_below_cap": {m: r.get("output_room_below_cap") for m, r in
                                                   inf_report["models"].items()},
                         "answers": int(pred["answered"].sum()), "rows": int(len(pred)),
                         "truncated_outputs": int(inf_report.get("truncated_outputs", 0))}
        if cut or any(not_sent.values()):
            out["problems"].append(f"reports cut: {cut}; reports not sent for their length: {not_sent}")
    if ("02" in stages or not stages) and planted is not None:
        out["problems"] += statement_problems(cfg, planted, out)
    if ("04" in stages or not stages) and planted is not None:
        out["problems"] += finbias_cell_problems(cfg, profiles, planted, float(rp["cell_alpha"]), out, books)
    figs = sorted(p.name for p in cfg.figures_dir.glob("*.png"))
    out["figures"] = figs
    report = cfg.run_dir / "report" / "index.html"
    out["report"] = report.is_file()
    if not report.is_file():
        out["problems"].append("HTML report missing")
    out["plan"] = (cfg.run_dir / "plan.md").is_file()
    out["ok"] = not out["problems"]
    return out


def write_outcome(cfg: RunConfig, outcome: dict) -> Path:
    """runs/<run>/rehearsal.json and a short Markdown summary next to it."""
    cfg.run_dir.mkdir(parents=True, exist_ok=True)
    (cfg.run_dir / "rehearsal.json").write_text(json.dumps(outcome, indent=2, default=str))
    lines = [f"# Rehearsal `{cfg.name}`: {'all checks passed' if outcome['checks']['ok'] else 'FAILED'}", "",
             f"Wall time {outcome['wall_s']:.0f} s; stages {outcome['stage_seconds']}.",
             f"Peak resident memory of each stage's kernel (MB): {outcome['stage_peak_rss_mb']}; "
             f"of the process holding the servers: {outcome['peak_rss_mb']} MB.", ""]
    lines += [f"- {p}" for p in outcome["checks"]["problems"]]
    lab, iv = outcome["checks"].get("labels"), outcome["checks"].get("intervals")
    if lab:
        lines += ["", f"Labels: {lab['differ']} of {lab['reports']} stage 01 labels and {lab['car_off']} CARs differ "
                  f"from the planted label truth (largest CAR gap {lab['car_max_gap']}; corr(CAR, planted drift) "
                  f"{lab['corr_car_planted_drift']})."]
    st = outcome["checks"].get("statements")
    if st:
        lines += ["", "Stage 02 against the planted rating statements (reports, rule, removals and fakes checked): "
                  + ", ".join(f"{k} {v}" for k, v in sorted(st.items())) + "."]
    if iv:
        lines += ["", f"Intervals: median printed width / firm-clustered closed form {iv['median_width_ratio']:.3f} over "
                  f"{iv['intervals']} intervals (allowed log gap {iv['log_tolerance']:.3f}); "
                  f"{len(iv['mcnemar'])} pooled McNemar and {len(iv.get('stuart_maxwell', []))} Stuart-Maxwell "
                  "tests recomputed."]
    cells = pd.DataFrame(outcome["checks"].get("cells", []))
    if len(cells):
        pooled = cells[cells["sector"] == POOLED]
        lines += ["", f"Planted vs our pooled cells of Tables 4-7 ({int(cells['ok'].sum())} of {len(cells)} cells, "
                  "sectors included, within tolerance; every cell in rehearsal.json):", "",
                  pooled[["table", "model", "condition", "value", "expected", "tolerance", "n", "ok"]]
                  .to_markdown(index=False)]
    md = cfg.run_dir / "rehearsal.md"
    md.write_text("\n".join(lines) + "\n")
    return md


def rehearse(run: str, params: str | None = None) -> dict:
    """Start the servers, run the stages, the report and the plan, check; returns the outcome."""
    from finlib.pipeline import runner
    from finlib.pipeline.plan import write_plan

    os.chdir(repo_root())
    cfg = load_run(run, params)
    rp = rehearsal_params(cfg)
    names = served_model_names(cfg)
    profiles = profiles_for(cfg, names)
    t0 = time.perf_counter()
    planted = planted_records(cfg)
    with ServerPool(profiles, bizfin_items_index(cfg), float(rp["time_scale"]), planted_index(planted)) as pool:
        os.environ.update(endpoint_environment(pool.urls()))  # the notebooks' kernels inherit it
        manifest = runner.run_pipeline(run, rp["stages"], None, params, report=True)
        write_plan(load_run(run, params))
        books = pool.books()
    outcome = {"run": run, "wall_s": time.perf_counter() - t0, "servers": books,
               "stage_seconds": {k: round(v["seconds"]) for k, v in sorted(manifest.get("stages", {}).items())},
               "stage_peak_rss_mb": {k: v.get("peak_rss_mb") for k, v in sorted(manifest.get("stages", {}).items())},
               "profiles": {n: vars(p) for n, p in profiles.items()}}
    outcome["checks"] = rehearsal_checks(cfg, profiles, planted, books)
    outcome["peak_rss_mb"] = peak_rss_mb()  # this process: the servers, the runner and the checks
    write_outcome(cfg, outcome)
    return outcome


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", default=os.environ.get("RUN", "rehearsal"))
    ap.add_argument("--params", default=None)
    args = ap.parse_args(argv)
    outcome = rehearse(args.run, args.params)
    checks = outcome["checks"]
    print(f"[{args.run}] rehearsal {'passed' if checks['ok'] else 'FAILED'} in {outcome['wall_s']:.0f} s "
          f"(stages {outcome['stage_seconds']}); details: runs/{args.run}/rehearsal.md")
    for p in checks["problems"]:
        print(f"  - {p}", file=sys.stderr)
    return 0 if checks["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
