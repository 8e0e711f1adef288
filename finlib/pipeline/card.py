"""The herding card: does a model herd toward the analyst's rating, on the user's own reports?

`python -m finlib.pipeline.card --model NAME [--reports DIR] [--prices FILE --market FILE] [--yes]` (and
`make card`, and notebooks/herding_card.ipynb) runs stages 00-04 on a params file it writes to
`runs/<name>/card/<name>.yaml`, so every number comes from the project's own stages and statistics
(`finlib.finbias.scoring.metrics`, `finlib.core.stats`): herding with and without the rating (Eq. 1), toward
a fake rating, cluster-bootstrap intervals over firms, the exact McNemar tests between paired conditions.

Why stages and not a shortcut: the card must say the same as the full pipeline would on the same reports,
and the store makes a second card (or an interrupted one) cost only the calls not yet answered.
Without `--reports` the card runs on the embedded synthetic market and the embedded scoring model, offline.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from finlib.core.config import RunConfig, load_run, repo_root
from finlib.finbias.figures.stage import min_sector_n
from finlib.finbias.ownreports.collect import OwnReports, read_folder
from finlib.finbias.ownreports.meta import DEFAULT_NAME_PATTERN
from finlib.pipeline.card_render import CardData, write_card
from finlib.pipeline.card_stats import (
    CONDITIONS,
    answer_sample,
    card_tests,
    headline,
    paired_between_cards,
    planning_half_width,
    published_points,
    sector_lines,
)

DEFAULT_REPORTS = 200  # a folder of the user's own reports: ±6.9 % widest half-width on a share
# The embedded offline default (no folder: the synthetic reports; SmolLM2 scoring on the CPU) is sized so
# `make card` takes minutes per report, not hours, on a loaded 2-core machine: benchmarks/bench_card.py measures
# it (benchmarks/results/card.json), docs/herding-card.md gives the figures. 10 reports: ±31.0 % widest
# half-width, stated on the card.
EMBEDDED_REPORTS = 10
EMBEDDED_MODEL = "smollm2-135m"


def default_reports(reports: str | None) -> int:
    """How many reports a card samples when `--n` is not given: 200 from the user's folder, fewer on the
    embedded synthetic reports, whose offline run answers each request on the CPU (tens of seconds each on a
    loaded 2-core machine: benchmarks/results/card.json)."""
    return DEFAULT_REPORTS if reports else EMBEDDED_REPORTS


@dataclass
class CardRequest:
    """What the user asked for; written beside the card so a rerun (resume) asks for the same."""

    name: str
    model: str = EMBEDDED_MODEL
    reports: str | None = None
    sidecar: str | None = None
    name_pattern: str = DEFAULT_NAME_PATTERN
    text_column: str = "text"
    prices: str | None = None
    market: str | None = None
    n_reports: int | None = None  # None: default_reports(reports)
    budget_usd: float = 5.0
    base_url: str | None = None
    price_input_per_m: float | None = None
    price_output_per_m: float | None = None
    model_id: str | None = None
    api_key_env: str | None = None
    against: str | None = None

    def __post_init__(self) -> None:
        if self.n_reports is None:
            self.n_reports = default_reports(self.reports)
        if self.n_reports < 1:
            raise SystemExit(f"card: --n must be at least 1 report, got {self.n_reports}")


def card_dir(root: Path, name: str) -> Path:
    """runs/<name>/card: the card, its params, its inputs and the answers behind it."""
    return root / "runs" / name / "card"


def sample_reports(reports: pd.DataFrame, n: int, seed: int) -> tuple[pd.DataFrame, str]:
    """At most n reports spread across sector x year strata in proportion to their size (seeded).

    Returns the sample and the rule used, for the card. Strata get floor shares first, then the largest
    remainders one more each, so small sectors are not rounded away.
    """
    if len(reports) <= n:
        return reports.reset_index(drop=True), f"all {len(reports)} reports"
    year = pd.to_datetime(reports["date"]).dt.year.astype(str)
    strata = reports["sector"].fillna("unknown sector").astype(str) + " " + year
    sizes = strata.value_counts().sort_index()
    exact = sizes / sizes.sum() * n
    take = np.floor(exact).astype(int)
    extra = (exact - take).sort_values(ascending=False).index[: n - int(take.sum())]
    take[extra] += 1
    rng = np.random.default_rng(seed)
    picked = [reports.index[strata == s][rng.permutation(int(sizes[s]))[: int(k)]] for s, k in take.items() if k > 0]
    out = reports.loc[np.concatenate(picked)].sort_values("report_id").reset_index(drop=True)
    return out, f"{n} of {len(reports)} reports, proportional across {len(sizes)} sector x year strata (seeded)"


def _registry_with(req: CardRequest, cfg_registry: Path, out: Path) -> Path | None:
    """A copy of the model registry with the user's OpenAI-compatible endpoint as one more record.

    Its prices are the user's (`--price-input-per-m`, `--price-output-per-m`); without them the record
    holds 0 so the run can count tokens, and `endpoint_cost_unknown` makes the plan and the card say the
    cost is unknown rather than $0.
    """
    if not req.base_url:
        return None
    data = yaml.safe_load(cfg_registry.read_text(encoding="utf-8"))
    data["models"] = [m for m in data["models"] if m.get("name") != req.model]
    data["models"].append(
        {
            "name": req.model,
            "backend": "openai",
            "model_id": req.model_id or req.model,
            "base_url": req.base_url,
            "api_key_env": req.api_key_env,
            "supports_system": True,
            "context_length": 32768,
            "price_input_per_m": float(req.price_input_per_m or 0.0),
            "price_output_per_m": float(req.price_output_per_m or 0.0),
            "concurrency": 8,
        }
    )
    out.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return out


def card_params(req: CardRequest, reports_path: Path | None, registry: Path | None) -> dict:
    """The params the card runs under: params/default.yaml with the card's data, model and budget.

    Own reports without a prices file skip stage 00's price loading (`unpriced_data_stage`): nothing is
    fetched from the network and accuracy is left out.
    """
    embedded = req.model == EMBEDDED_MODEL
    data: dict = (
        {"synthetic": {"n_reports": req.n_reports}}
        if reports_path is None
        else {
            "source": "local",
            "reports": {
                "path": str(reports_path),
                "on_unknown_sector": "keep",
                "columns": {
                    "report_id": "report_id",
                    "ticker": "ticker",
                    "company": None,
                    "sector": "sector",
                    "date": "date",
                    "text": "text",
                },
            },
            "prices": {"path": req.prices, "market_path": req.market, "market_column": "market_close"},
        }
    )
    inference = {
        "models": [req.model],
        "budget_usd": float(req.budget_usd),
        "samples_per_item": 1,
        "extension_models": [req.model],
        "mode": "score" if embedded else "generate",
        "constrained_json": [],
    }
    if registry is not None:
        inference["registry"] = str(registry)
    return {
        "extends": str(repo_root() / "params" / "default.yaml"),
        "data": data,
        "inference": inference,
        "perturb": {"sweep_reports": 0},
    }


def own_reports(req: CardRequest, out: Path, seed: int) -> tuple[OwnReports, Path, str]:
    """The user's folder read, sampled and written as the reports file stage 00 loads."""
    got = read_folder(req.reports, req.sidecar, req.name_pattern, req.text_column)
    if got.reports.empty:
        raise SystemExit(f"{req.reports}: no usable report; reasons: {got.counts()}")
    sample, rule = sample_reports(got.reports, req.n_reports, seed)
    got.rules["sample"] = rule
    path = out / "inputs" / "reports.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    sample.assign(date=pd.to_datetime(sample["date"]).dt.strftime("%Y-%m-%d")).to_parquet(path, index=False)
    got.exclusions.to_csv(out / "excluded.csv", index=False)
    return got, path, rule


def prepare(req: CardRequest, root: Path | None = None) -> tuple[RunConfig, dict]:
    """Write the card's params (and, with a folder, its reports file) and load them as a run."""
    root = root or repo_root()
    if bool(req.prices) != bool(req.market):
        raise SystemExit("card: accuracy needs both --prices (date,ticker,adj_close) and --market (date,market_close)")
    out = card_dir(root, req.name)
    out.mkdir(parents=True, exist_ok=True)
    notes: dict = {"request": asdict(req)}
    reports_path = None
    if req.reports:
        got, reports_path, rule = own_reports(req, out, seed=20261129)
        notes.update(
            counts=got.counts(), rules=got.rules, sample=rule, exclusions=got.exclusions.to_dict(orient="records")
        )
    else:
        notes.update(sample=f"{req.n_reports} embedded synthetic reports (seeded market)", counts={}, exclusions=[])
    registry = _registry_with(req, root / "params" / "models.yaml", out / "models.yaml")
    pfile = out / f"{req.name}.yaml"
    pfile.write_text(yaml.safe_dump(card_params(req, reports_path, registry), sort_keys=False), encoding="utf-8")
    (out / "request.json").write_text(json.dumps(asdict(req), indent=2), encoding="utf-8")
    return load_run(req.name, pfile, root=root), notes


def condition_exclusions(conditions: pd.DataFrame, sources: dict[str, str]) -> pd.DataFrame:
    """Reports stage 02 could not put in one of the card's conditions, one row per report and condition.

    The folder reader keeps a report whose rating it can read; stage 02 may still skip or set aside one of
    its conditions (no rating statement it can rewrite, a failed check). Such a report leaves that condition's
    n, so the card names it with stage 02's reason. `sources` maps report_id to the file it came from.
    """
    bad = conditions[conditions["condition"].isin(list(CONDITIONS)) & (conditions["status"] != "ok")]
    rid = bad["report_id"].astype(str)
    return pd.DataFrame(
        {
            "source_file": rid.map(lambda r: sources.get(r, r)).to_numpy(),
            "reason": ("stage 02: " + bad["skip_reason"].fillna(bad["status"]).astype(str)).to_numpy(),
            "detail": ("left out of condition " + bad["condition"].astype(str) + " (report " + rid + ")").to_numpy(),
        },
        columns=["source_file", "reason", "detail"],
    )


def note_stage02_exclusions(cfg: RunConfig, notes: dict, out: Path) -> None:
    """Add stage 02's left-out conditions to the card's exclusions, counts and excluded.csv."""
    cond = pd.read_parquet(
        cfg.processed_dir / "conditions.parquet", columns=["report_id", "condition", "status", "skip_reason"]
    )
    inputs = out / "inputs" / "reports.parquet"
    sources: dict[str, str] = {}
    if inputs.is_file():
        src = pd.read_parquet(inputs, columns=["report_id", "source_file"])
        sources = dict(zip(src["report_id"].astype(str), src["source_file"].astype(str), strict=True))
    left = condition_exclusions(cond, sources)
    if left.empty:
        return
    notes["exclusions"] = list(notes.get("exclusions") or []) + left.to_dict(orient="records")
    counts = dict(notes.get("counts") or {})
    for reason, k in left["reason"].value_counts().items():
        counts[f"left out of a condition: {reason}"] = int(k)
    notes["counts"] = counts
    pd.DataFrame(notes["exclusions"], columns=list(left.columns)).to_csv(out / "excluded.csv", index=False)


def endpoint_cost_unknown(req: CardRequest) -> bool:
    """A custom endpoint without both prices: its calls are recorded at $0, which is not what they cost."""
    return bool(req.base_url) and (req.price_input_per_m is None or req.price_output_per_m is None)


def plan_lines(cfg: RunConfig, req: CardRequest) -> tuple[list[str], float | None]:
    """The spend before any call: requests, tokens, dollars at registry prices, hours at the concurrency.

    Dollars are None when the endpoint's prices are unknown: the caller then asks (a $0 plan would not).
    """
    from finlib.pipeline.plan import build_plan, plan_markdown

    plan = build_plan(cfg)
    dollars: float | None = float(plan["billed_usd_cap"].sum()) if len(plan) else 0.0  # GPU-hours are not billed
    cap = float(cfg.params["inference"]["budget_usd"])
    budget = f"Budget cap: ${cap:.2f} (the run stops before spending more)."
    if dollars is not None and dollars > cap:
        budget += (
            f" The plan's cap (${dollars:.2f}) is over it: the card stops partway; rerun with a larger "
            "--budget-usd to finish (answers already stored are not paid again)."
        )
    if endpoint_cost_unknown(req):
        dollars = None
        budget = (
            f"Cost: unknown. The endpoint {req.base_url} was given no prices (--price-input-per-m, "
            f"--price-output-per-m), so the dollar columns above read $0 and the budget cap (${cap:.2f}) "
            "cannot be checked: every call is counted at $0."
        )
    n = reports_in_play(cfg, req.n_reports)
    lines = [
        f"Card `{cfg.name}`: {n} reports; widest 95 % half-width on a share "
        f"±{planning_half_width(n):.1%} before clustering by firm.",
        plan_markdown(cfg, plan),
        budget,
    ]
    return lines, dollars


def reports_in_play(cfg: RunConfig, requested: int) -> int:
    """The reports the paid stage will send: those stage 02 kept in the original condition (a folder may
    hold fewer than asked for, and reports without a readable rating leave); `requested` before stage 02."""
    path = cfg.processed_dir / "conditions.parquet"
    if not path.is_file():
        return requested
    cond = pd.read_parquet(path, columns=["report_id", "condition", "status"])
    return int(cond.loc[(cond["condition"] == "original") & (cond["status"] == "ok"), "report_id"].nunique())


def must_ask(dollars: float | None) -> bool:
    """Ask before the paid stage when the plan costs money or its cost is unknown (None)."""
    return dollars is None or dollars > 0


def plan_hours(cfg: RunConfig) -> float:
    """Wall hours the planner expects for the paid stage (announced before it starts)."""
    from finlib.pipeline.plan import build_plan

    plan = build_plan(cfg)
    return float(plan["wall_hours"].sum()) if len(plan) else 0.0


def run_stages(
    cfg: RunConfig, stages: list[str], seconds: dict[str, float], expect_s: dict[str, float] | None = None,
    progress=print,
) -> dict:
    """Stages in process, each timed into `seconds`. Before a stage the plan has an estimate for (the paid
    stage 03), a line with that estimate; stage 03 then draws its own bar with its ETA. After each stage a
    line with its time and the card's so far. No "time left" is derived from the plan once its stage ended:
    the plan's estimate minus the time spent would claim minutes for the seconds of scoring that remain."""
    from finlib.pipeline.stages import stage_module

    results: dict = {}
    for stage in stages:
        if expect_s and stage in expect_s:
            progress(f"card {cfg.name}: stage {stage} starts; the plan expects about {expect_s[stage] / 60:.1f} min "
                     "(its bar shows the ETA)")
        start = time.perf_counter()
        if stage == "00" and not cfg.is_synthetic and not cfg.params["data"]["prices"].get("path"):
            unpriced_data_stage(cfg)
        else:
            results[stage] = stage_module(stage).run(cfg)
        seconds[stage] = round(time.perf_counter() - start, 1)
        done = sum(seconds.values())
        progress(f"card {cfg.name}: stage {stage} done in {seconds[stage]:.0f} s ({done:.0f} s so far)")
    return results


def unpriced_data_stage(cfg: RunConfig) -> None:
    """Stage 00 for own reports without prices: its loading, checks, cleaning and rating extraction, then
    empty price and market artifacts. Stage 00 itself stops when no report is priced (a label-less run is
    a waste there); the card's herding needs no labels, and its accuracy is left out and said so.
    """
    from finlib.core.artifacts import write_frame, write_json
    from finlib.finbias.data.stage import (
        check_text_after_cleaning,
        clean_reports,
        data_params,
        extract_ratings,
        load_reports_file,
    )

    d = data_params(cfg)
    rp = d["reports"]
    reports, notes = load_reports_file(cfg.path(rp["path"]), rp["columns"], rp["on_unknown_sector"])
    reports, cleaning = clean_reports(reports, d["text_cleaning"])
    check_text_after_cleaning(reports)
    reports["analyst_rating"] = extract_ratings(reports["text"]).astype(object)
    write_frame(cfg, "reports", reports[["report_id", "ticker", "company", "sector", "date", "text", "analyst_rating"]])
    write_frame(cfg, "prices", pd.DataFrame({"date": pd.to_datetime([]), "ticker": [], "adj_close": []}))
    write_frame(cfg, "market", pd.DataFrame({"date": pd.to_datetime([]), "market_close": []}))
    write_json(
        cfg,
        "data_report",
        {
            "source": "local",
            "n_reports": int(len(reports)),
            "cleaning": cleaning,
            "prices": "none given: no labels, accuracy not computed",
            "notes": {k: str(v) for k, v in notes.items()},
        },
    )


def _no_labels(cfg: RunConfig) -> None:
    """Without prices there are no return-based labels: an empty labels artifact, so accuracy is left out."""
    from finlib.core.artifacts import write_frame

    reports = pd.read_parquet(cfg.processed_dir / "reports.parquet", columns=["report_id"])
    write_frame(cfg, "labels", reports.assign(label=pd.Series([None] * len(reports), dtype=object)))


def _usage(cfg: RunConfig, model: str) -> dict:
    pred = pd.read_parquet(cfg.processed_dir / "predictions.parquet")
    p = pred[pred["model"] == model]
    num = {
        c: float(pd.to_numeric(p[c], errors="coerce").fillna(0).sum())
        for c in ("input_tokens", "output_tokens", "cost_usd")
        if c in p
    }
    return {"requests": int(len(p)), **num}


def gather(cfg: RunConfig, req: CardRequest, notes: dict, scored, seconds: dict) -> CardData:
    """The card's numbers from stage 04's result (metrics, tests, rows) and stage 03's predictions."""
    m = req.model
    usage = _usage(cfg, m)
    if endpoint_cost_unknown(req):  # counted at $0 because no price was given, not because it was free
        usage["cost_usd"] = "unknown (no --price-input-per-m / --price-output-per-m for the endpoint)"
    data = CardData(
        cfg,
        req,
        notes,
        headline(scored.metrics, m),
        sector_lines(scored.metrics, m, min_sector_n(cfg)),
        card_tests(scored.tests, m),
        usage,
        answer_sample(scored.rows, m),
        published_points(),
        scored.rows[scored.rows["model"] == m],
        seconds,
    )
    other = card_dir(cfg.root, req.against) / "rows.parquet" if req.against else None
    if other is not None:
        if not other.exists():
            raise SystemExit(f"{other}: no card named {req.against!r} to set beside this one (make it first)")
        data.against = paired_between_cards(data.rows, pd.read_parquet(other))
    return data


def build_card(
    req: CardRequest, confirm: Callable[[list[str], float], bool] | None = None, root: Path | None = None
) -> Path:
    """Prepare, run the free stages, plan, confirm, run the rest, write the card; returns index.html."""
    cfg, notes = prepare(req, root)
    labelled = cfg.is_synthetic or bool(req.prices and req.market)
    seconds: dict[str, float] = {}
    run_stages(cfg, ["00", "01", "02"] if labelled else ["00", "02"], seconds)
    out = card_dir(cfg.root, req.name)
    note_stage02_exclusions(cfg, notes, out)
    lines, dollars = plan_lines(cfg, req)
    (out / "plan.md").write_text("\n\n".join(lines) + "\n", encoding="utf-8")
    if confirm is not None and must_ask(dollars) and not confirm(lines, dollars):
        raise SystemExit(f"card {req.name}: not confirmed; nothing spent (the plan is in {out / 'plan.md'})")
    print("\n".join(lines))
    run_stages(cfg, ["03"], seconds, expect_s={"03": 3600 * plan_hours(cfg)})
    if not labelled:
        _no_labels(cfg)
    scored = run_stages(cfg, ["04"], seconds)["04"]
    data = gather(cfg, req, notes, scored, seconds)
    data.rows.to_parquet(out / "rows.parquet", index=False)
    return write_card(data, out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="The herding card: one model, your reports, the paper's models.")
    ap.add_argument("--model", default=EMBEDDED_MODEL, help="a registry name, or a name with --base-url")
    ap.add_argument("--name", default=None, help="run name (default: card-<model>)")
    ap.add_argument("--reports", default=None, help="folder of PDF/HTML/TXT/MD/CSV/Parquet/JSONL reports")
    ap.add_argument("--sidecar", default=None, help="CSV file,ticker,date[,sector] per report file")
    ap.add_argument("--name-pattern", default=DEFAULT_NAME_PATTERN, help="regex with groups ticker and date")
    ap.add_argument("--text-column", default="text")
    ap.add_argument("--prices", default=None, help="long date,ticker,adj_close file (accuracy needs it)")
    ap.add_argument("--market", default=None, help="date,<market_column> file of the market index")
    ap.add_argument(
        "--n",
        type=int,
        default=None,
        help=f"reports on the card (sampled; default {DEFAULT_REPORTS} from --reports, {EMBEDDED_REPORTS} embedded)",
    )
    ap.add_argument("--budget-usd", type=float, default=5.0, help="the run stops before spending more")
    ap.add_argument("--base-url", default=None, help="an OpenAI-compatible endpoint for --model")
    ap.add_argument("--price-input-per-m", type=float, default=None, help="--base-url's $ per million input tokens")
    ap.add_argument("--price-output-per-m", type=float, default=None, help="--base-url's $ per million output tokens")
    ap.add_argument("--model-id", default=None, help="the model id the endpoint serves (default: --model)")
    ap.add_argument("--api-key-env", default=None, help="the environment variable holding the endpoint's key")
    ap.add_argument("--against", default=None, help="a second card's name: both side by side, paired")
    ap.add_argument("--yes", action="store_true", help="spend without asking")
    a = ap.parse_args(argv)
    req = CardRequest(
        name=a.name or f"card-{a.model}",
        model=a.model,
        reports=a.reports,
        sidecar=a.sidecar,
        name_pattern=a.name_pattern,
        text_column=a.text_column,
        prices=a.prices,
        market=a.market,
        n_reports=a.n,
        budget_usd=a.budget_usd,
        base_url=a.base_url,
        price_input_per_m=a.price_input_per_m,
        price_output_per_m=a.price_output_per_m,
        model_id=a.model_id,
        api_key_env=a.api_key_env,
        against=a.against,
    )
    path = build_card(req, confirm=None if a.yes else ask_before_spending)
    print(f"card: {path}")
    return 0


def ask_before_spending(lines: list[str], dollars: float | None) -> bool:
    """Print the plan and ask; outside a terminal (a pipe, CI) the answer is no and --yes is named."""
    print("\n".join(lines))
    if not sys.stdin.isatty():
        print("not a terminal: rerun with --yes (make card YES=1) to spend", file=sys.stderr)
        return False
    spend = "at an unknown cost (no prices given)" if dollars is None else f"up to ${dollars:.2f}"
    return input(f"Spend {spend}? [y/N] ").strip().lower() in ("y", "yes")


if __name__ == "__main__":
    sys.exit(main())
