"""The rehearsal's table check catches a wrong table: faults seeded one at a time.

The check is `finlib.rehearsal.rehearse.finbias_cell_problems`, the code `make rehearse` runs after the
stages; here stages 00-04 run in this process (so a monkeypatch reaches them) on a corpus smaller than
params/rehearsal_small.yaml's (the same generator and servers, short reports, three models, whose
planted following and unparsed shares are large enough for each fault to move the pooled cells by
many SDs). Oracles: the closed form of the planted propensities and the planted labels
(finlib.finbias.data.synth_planted), and intervals and McNemar tests recomputed from the servers' replies
(finlib.rehearsal.intervals), never stage 04's own numbers.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
MODELS = ["claude-4-sonnet", "llama-3.1-8b-it", "qwen2.5-7b-it"]
PARAMS = f"""extends: rehearsal_small.yaml
data:
  synthetic: {{n_reports: 150, n_firms: 10, words_min: 250, words_max: 350}}
inference:
  models: {MODELS}
  store: data/interim/faults-responses.sqlite
scoring:
  bootstrap_reps: 400
bizfin:
  models: []
rehearsal:
  stages: ["00", "01", "02", "03", "04"]
  profiles:
    claude-4-sonnet: {{follow: 0.85, unparsed: 0.35, runaway: 0.0, tilt: 0.0}}
    llama-3.1-8b-it: {{follow: 0.6, unparsed: 0.3, runaway: 0.0, tilt: 0.0}}
    qwen2.5-7b-it: {{follow: 0.35, unparsed: 0.25, runaway: 0.0, tilt: 0.0}}
"""


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A throwaway repository root with the params, the corpus, labels and conditions (stages 00-02), the
    planted records and the simulated servers, started once for every fault."""
    from finlib.core.config import load_run
    from finlib.finbias.data import stage as data
    from finlib.finbias.labels import stage as labels
    from finlib.finbias.perturb import stage as perturb
    from finlib.rehearsal.rehearse import ServerPool, planted_index, planted_records, profiles_for, served_model_names

    root = tmp_path_factory.mktemp("rehearsal-faults")
    shutil.copytree(ROOT / "params", root / "params")
    (root / "pyproject.toml").write_text("[project]\nname='tmp'\n")
    (root / "params" / "faults.yaml").write_text(PARAMS)
    cfg = load_run("faults", root=root)
    data.run(cfg)
    labels.run(cfg)
    perturb.run(cfg)
    planted = planted_records(cfg)
    profiles = profiles_for(cfg, served_model_names(cfg))
    with ServerPool(profiles, None, 0.0, planted_index(planted)) as pool:
        yield cfg, profiles, planted, pool


def rehearse_tables(world, monkeypatch) -> list[str]:
    """Stages 03-04 from an empty response store, then the rehearsal's own Fin-Bias check: its problems."""
    from finlib.finbias.inference import stage as inference
    from finlib.finbias.scoring import stage as scoring
    from finlib.rehearsal.rehearse import endpoint_environment, finbias_cell_problems, rehearsal_params

    cfg, profiles, planted, pool = world
    store = cfg.path(cfg.params["inference"]["store"])
    for path in (store, store.with_name(store.name + "-wal"), store.with_name(store.name + "-shm")):
        path.unlink(missing_ok=True)
    for k, v in endpoint_environment(pool.urls()).items():
        monkeypatch.setenv(k, v)
    inference.run(cfg)
    scoring.run(cfg)
    out: dict = {}
    return finbias_cell_problems(cfg, profiles, planted, float(rehearsal_params(cfg)["cell_alpha"]), out,
                                 pool.books())


def test_a_correct_run_passes(world, monkeypatch):
    assert rehearse_tables(world, monkeypatch) == []


def test_a_95_percent_interval_computed_at_90_percent_fails(world, monkeypatch):
    from finlib.finbias.scoring import metrics

    bootstrap = metrics.bootstrap
    monkeypatch.setattr(metrics, "bootstrap", lambda sums, statistic, reps, seed, ci: bootstrap(
        sums, statistic, reps, seed, 0.90))
    problems = rehearse_tables(world, monkeypatch)
    assert any("intervals are" in p for p in problems), problems


def test_a_bootstrap_over_reports_instead_of_firms_fails(world, monkeypatch):
    from finlib.finbias.scoring import stage as scoring

    score_all = scoring.score_all

    def per_report(predictions, conditions, labels, reports, *args, **kwargs):
        return score_all(predictions, conditions, labels, reports.assign(ticker=reports["report_id"]), *args, **kwargs)

    monkeypatch.setattr(scoring, "score_all", per_report)
    problems = rehearse_tables(world, monkeypatch)
    assert any("intervals are" in p for p in problems), problems


def test_holm_dropped_fails(world, monkeypatch):
    from finlib.core import stats

    monkeypatch.setattr(stats, "holm", lambda p: np.asarray(p, dtype=float))
    problems = rehearse_tables(world, monkeypatch)
    assert any("McNemar tests differ" in p and "p_holm" in p for p in problems), problems


def test_mcnemar_counting_every_pair_fails(world, monkeypatch):
    from finlib.core import stats

    exact = stats.mcnemar_exact
    monkeypatch.setattr(stats, "mcnemar_exact", lambda a, b: exact(np.asarray(a, bool), ~np.asarray(a, bool)))
    problems = rehearse_tables(world, monkeypatch)
    assert any("McNemar tests differ" in p for p in problems), problems


def test_a_simulator_that_ignores_the_shown_rating_fails(world, monkeypatch):
    from finlib.finbias.data.synth_planted import PlantedIndex, Reading

    read = PlantedIndex.read
    monkeypatch.setattr(PlantedIndex, "read", lambda self, text: Reading(
        **{**vars(read(self, text)), "shown": None}))
    problems = rehearse_tables(world, monkeypatch)
    assert problems and ("/original" in problems[0] or "/fake_rating" in problems[0])


def test_the_fake_condition_scored_against_the_analyst_rating_fails(world, monkeypatch):
    from finlib.finbias.scoring import stage as scoring

    score_all = scoring.score_all

    def against_analyst(predictions, conditions, *args, **kwargs):
        conditions = conditions.copy()
        fake = conditions["condition"] == "fake_rating"
        conditions.loc[fake, "reference_rating"] = conditions.loc[fake, "analyst_rating"]
        return score_all(predictions, conditions, *args, **kwargs)

    monkeypatch.setattr(scoring, "score_all", against_analyst)
    problems = rehearse_tables(world, monkeypatch)
    assert problems and "table5_herding_fake" in problems[0]


def test_unparsed_answers_left_out_of_n_fail(world, monkeypatch):
    from finlib.finbias.scoring import stage as scoring

    parse = scoring.parse_predictions
    monkeypatch.setattr(scoring, "parse_predictions", lambda *a, **k: (lambda d: d[d["parsed"].astype(bool)])(
        parse(*a, **k)))
    problems = rehearse_tables(world, monkeypatch)
    assert problems and "table4_herding_with_without" in problems[0]


def test_labels_joined_to_the_wrong_report_fail(world):
    from finlib.core.artifacts import read_frame, write_frame
    from finlib.rehearsal.rehearse import label_problems, planted_label_truth

    cfg = world[0]
    labels = read_frame(cfg, "labels")
    out: dict = {}
    assert label_problems(cfg, planted_label_truth(cfg), out) == [] and out["labels"]["differ"] == 0
    try:
        write_frame(cfg, "labels", labels.assign(report_id=np.roll(labels["report_id"].to_numpy(), 1)))
        problems = label_problems(cfg, planted_label_truth(cfg), out)
    finally:
        write_frame(cfg, "labels", labels)
    assert problems and out["labels"]["differ"] > 0 and out["labels"]["car_off"] == len(labels)
