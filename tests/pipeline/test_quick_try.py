"""--models and --limit: a quick try in a run of its own, model lists cut, "first N" knobs capped."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from finlib.core.config import load_run
from finlib.core.errors import ConfigError
from finlib.pipeline import quick_try, runner


def params() -> dict:
    return {
        "inference": {"models": ["a", "b", "c"], "generator_reports": 5, "samples_reports": None},
        "dpo": {"models": ["b"], "eval_reports": 1, "max_train_pairs": 6},
        "bizfin": {"models": ["b", "c"], "real_items_per_task": None, "iterajudge": {"max_items_per_task": 3}},
        "perturb": {"sweep_reports": 5},
    }


def test_models_are_cut_in_every_list_a_list_without_them_is_kept_and_named():
    out, kept = quick_try.cut_models(params(), ["c", "b"])
    assert out["inference"]["models"] == ["b", "c"] and out["bizfin"]["models"] == ["b", "c"]
    assert out["dpo"]["models"] == ["b"] and kept == []
    out, kept = quick_try.cut_models(params(), ["a"])
    assert out["inference"]["models"] == ["a"] and out["dpo"]["models"] == ["b"]
    assert kept == ["dpo.models ['b']", "bizfin.models ['b', 'c']"]
    with pytest.raises(ConfigError, match="none of them is in the run's model lists"):
        quick_try.cut_models(params(), ["z"])


def test_limit_caps_counts_and_turns_all_into_n():
    out = quick_try.cap_counts(params(), 2)
    assert out["inference"]["generator_reports"] == 2 and out["inference"]["samples_reports"] == 2
    assert out["dpo"]["eval_reports"] == 1 and out["dpo"]["max_train_pairs"] == 2  # 1 stays 1
    assert out["bizfin"]["real_items_per_task"] == 2 and out["bizfin"]["iterajudge"]["max_items_per_task"] == 2
    assert out["perturb"]["sweep_reports"] == 2 and params()["perturb"]["sweep_reports"] == 5  # input untouched
    with pytest.raises(ConfigError, match="at least 1"):
        quick_try.cap_counts(params(), 0)


def test_the_runner_runs_a_quick_try_under_its_own_name_with_valid_params(repo: Path, monkeypatch, capsys):
    seen = {}
    monkeypatch.setattr(runner, "repo_root", lambda *a, **k: repo)
    monkeypatch.setattr(
        runner,
        "run_pipeline",
        lambda run, stages, start, params_file, report: seen.update(run=run, params=params_file) or {"stages": {}},
    )
    assert runner.main(["--run", "default", "--models", "qwen2.5-coder-0.5b", "--limit", "2"]) == 0
    out = capsys.readouterr().out
    assert seen["run"].startswith("default-try-") and "quick try -> run" in out and "dpo.models" in out
    cfg = load_run(seen["run"], seen["params"], root=repo)  # passes the params schema
    assert cfg["inference"]["models"] == ["qwen2.5-coder-0.5b"] and cfg["inference"]["generator_reports"] == 2
    assert cfg["dpo"]["models"] == ["smollm2-135m"]  # kept whole: named in the line above
    assert not (repo / "runs" / "default").exists()
    assert yaml.safe_load(Path(seen["params"]).read_text())["bizfin"]["real_items_per_task"] == 1


def test_a_model_not_in_the_run_fails_in_one_line(repo: Path, monkeypatch, capsys):
    monkeypatch.setattr(runner, "repo_root", lambda *a, **k: repo)
    assert runner.main(["--run", "default", "--models", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("[default] FAILED: ConfigError: --models nope: none of them") and "Traceback" not in err
