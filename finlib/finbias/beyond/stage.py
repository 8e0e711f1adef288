"""Stage 09 (notebook 09_beyond_the_paper): sampling noise and the rating sweep, from stage 03's draws.

Reads `draws.parquet` (stage 03: k draws per report x condition, and the sweep conditions), the
conditions, labels and reports, and the predictions (the run's N per model x condition). Writes
the tables `beyond_noise_estimates`, `beyond_paper_vs_noise`, `beyond_draws_needed`,
`beyond_response_matrix`, `beyond_sweep_lift`, `beyond_sweep_lift_sector`, `beyond_fully_herded`,
their frames, `beyond_report.json` and the figures (`finlib.finbias.figures.beyond`). In the
paper's run (k = 1, no sweep) every table is empty and the report says why. The stage contract
(`finlib.core.stage`): `SECTION` (None: its knobs are stage 03's `inference.samples_per_item` and
stage 02's `perturb.sweep_reports`; it reads `scoring`'s bootstrap settings), `run(cfg)`, `summary(cfg, result)`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from finlib.core.artifacts import read_frame, write_frame, write_json
from finlib.core.config import RunConfig
from finlib.core.tables import write_table
from finlib.finbias.beyond import rating_sweep, sampling_noise
from finlib.finbias.figures import beyond as figures_beyond
from finlib.finbias.inference.draws import DRAW_LABELS

SECTION = None
NOTEBOOK_API = ()  # what notebook 09 calls besides `run` and `summary`
TABLES = ()  # the tables of `result.tables` notebook 09 shows by name
REPORT_KEYS = ()  # the keys of `result.report` notebook 09 reads
HALF_WIDTHS_PP = (1.0, 2.0, 5.0)  # target +- interval half widths (points) of the draws-needed table
PLUMBING_NOTE = ("The embedded default's label scorer (SmolLM2-135M) barely reads the report: its numbers test "
                 "the pipeline, they are not research results.")


@dataclass
class BeyondResult:
    """Everything stage 09 produced, for notebook 09."""

    estimates: pd.DataFrame
    compare: pd.DataFrame
    needed: pd.DataFrame
    matrix: pd.DataFrame
    lift: pd.DataFrame
    lift_sector: pd.DataFrame
    herded: pd.DataFrame
    report: dict = field(default_factory=dict)
    figures: list = field(default_factory=list)

    @property
    def tables(self) -> dict[str, pd.DataFrame]:
        """Every table of the stage by its name (as written under tables/)."""
        return {"beyond_noise_estimates": self.estimates, "beyond_paper_vs_noise": self.compare,
                "beyond_draws_needed": self.needed, "beyond_response_matrix": self.matrix,
                "beyond_sweep_lift": self.lift, "beyond_sweep_lift_sector": self.lift_sector,
                "beyond_fully_herded": self.herded}


def analyse(draws: pd.DataFrame, conditions: pd.DataFrame, labels: pd.DataFrame, reports: pd.DataFrame,
            predictions: pd.DataFrame, reps: int, seed: int, ci: float, corpus_n: int) -> BeyondResult:
    """Pure core (no disk): both analyses from the artifacts' frames."""
    joined = sampling_noise.join_draws(draws, conditions, labels, reports)
    pairs = draws[["model", "mode"]].drop_duplicates()
    run_n = sampling_noise.run_sizes(predictions.merge(pairs, on=["model", "mode"]))
    k_max = int(draws["sample"].max()) + 1 if len(draws) else 0
    multi = joined[joined.groupby(["model", "item_id"])["sample"].transform("size") > 1] if k_max > 1 else joined.iloc[:0]
    estimates = sampling_noise.noise_estimates(multi, run_n, reps, seed, ci)
    compare = sampling_noise.paper_vs_noise(multi, run_n, reps, seed, ci)
    needed = (sampling_noise.draws_needed_table(estimates, HALF_WIDTHS_PP, corpus_n, ci) if len(estimates)
              else pd.DataFrame())
    sweep = rating_sweep.sweep_draws(joined)
    has_sweep = (sweep["shown"] != rating_sweep.SHOWN_ORDER[0]).any() if len(sweep) else False
    empty = pd.DataFrame()
    matrix = rating_sweep.response_matrix(sweep) if has_sweep else empty
    lift = rating_sweep.lift_table(sweep, reps, seed, ci) if has_sweep else empty
    lift_sector = rating_sweep.lift_table(sweep, reps, seed, ci, by_sector=True) if has_sweep else empty
    herded = rating_sweep.herded_table(sweep) if has_sweep else empty
    report = {"draws": int(len(draws)), "answered_draws": int(len(joined)),
              "not_answered_draws": int((~draws["answered"].astype(bool)).sum()) if len(draws) else 0,
              "unparsed_answered_draws": int(joined["answer"].isna().sum()),
              "samples_per_item": k_max, "models": sorted(draws["model"].unique()) if len(draws) else [],
              "label_distribution_draws": int((draws["draw"] == DRAW_LABELS).sum()) if len(draws) else 0,
              "sweep_reports": int(sweep.loc[sweep["shown"] != rating_sweep.SHOWN_ORDER[0], "report_id"].nunique())
              if has_sweep else 0,
              "bootstrap": {"reps": reps, "ci": ci, "seed": seed, "levels": "reports, then draws within a report"},
              "skipped": [] if k_max > 1 and has_sweep else
              [why for why, off in (("sampling noise: fewer than 2 draws per item (inference.samples_per_item = 1)",
                                     k_max <= 1),
                                    ("rating sweep: no sweep draws (perturb.sweep_reports = 0 or no extension model)",
                                     not has_sweep)) if off]}
    return BeyondResult(estimates, compare, needed, matrix, lift, lift_sector, herded, report)


def run(cfg: RunConfig) -> BeyondResult:
    """Stage 09: read the artifacts, analyse, write tables, frames, report and figures."""
    from finlib.finbias.scoring.stage import scoring_params

    sc = scoring_params(cfg)
    ci = float(sc["ci"])
    res = analyse(read_frame(cfg, "draws"), read_frame(cfg, "conditions"), read_frame(cfg, "labels"),
                  read_frame(cfg, "reports"), read_frame(cfg, "predictions"), int(sc["bootstrap_reps"]), cfg.seed,
                  ci, int(cfg.section("plan")["corpus_reports"]))  # the real corpus size the plan prices
    captions = table_captions(ci)
    for name, frame in res.tables.items():
        write_frame(cfg, name, frame)
        write_table(cfg, name, frame, f"{captions[name]}. {PLUMBING_NOTE if cfg.is_synthetic else ''}".strip(),
                    float_format="{:.4g}")
    res.figures = figures_beyond.draw_figures(cfg, res.matrix, res.lift, res.compare, ci)
    write_json(cfg, "beyond_report", res.report)
    return res


def table_captions(ci: float) -> dict[str, str]:
    """Each table's caption, its interval level from `scoring.ci`."""
    return {
        "beyond_noise_estimates": "Sampling noise per model x condition x outcome: the k-draw estimate (mean over "
                                  f"reports of the report shares) with its {ci:.0%} two-level bootstrap interval, "
                                  "within- and between-report variance components, ICC, and the +- points a "
                                  "single-draw study of the run's N moves by from re-sampling alone",
        "beyond_paper_vs_noise": "Paper difference vs sampling noise (Tables 4-6): single-draw gap, k-draw gap with "
                                 "interval, the single-draw noise band on the reports the gap was measured on "
                                 "(noise_pm_pp; at the run's N: noise_pm_run_pp), paired tests on report-level shares "
                                 "(points)",
        "beyond_draws_needed": "Draws per report needed for a +-1/2/5-point interval, at this run's reports and at the "
                               "corpus size (inf: more reports needed, not more draws)",
        "beyond_response_matrix": "Rating sweep: herding response matrix (rating shown x answer), counts of answered "
                                  "draws and row shares",
        "beyond_sweep_lift": f"Rating sweep: herding lift over no_rating per shown rating ({ci:.0%} two-level "
                             "bootstrap interval, paired t and Wilcoxon tests on report-level shares)",
        "beyond_sweep_lift_sector": "Rating sweep: herding lift per shown rating and sector",
        "beyond_fully_herded": "Rating sweep: share of reports whose answer follows the shown rating in 3 (fully "
                               "herded), 2, 1 or 0 of the three sweeps",
    }


def summary(cfg: RunConfig, result: BeyondResult) -> str:
    """Markdown above the tables: the draws this run has, which analysis did not run and why, and the
    plumbing and synthetic-data caveats."""
    r = result.report
    lines = [f"**Draws:** {r['draws']} ({r['answered_draws']} answered, {r['not_answered_draws']} not answered, "
             f"{r['unparsed_answered_draws']} answered but unparsed); draws per item: {r['samples_per_item']}; "
             f"rating-sweep reports: {r['sweep_reports']}."]
    lines += [f"**Not run:** {why}." for why in r["skipped"]]
    if cfg.is_synthetic:
        lines.append(f"> ⚠️ **{PLUMBING_NOTE}** Synthetic data: these numbers exercise the pipeline.")
    return "\n\n".join(lines)
