"""Bad inputs that used to slip through: each is now refused with an error naming the file, or
handled and counted. One test per scenario of the fault-drill table in docs/reliability.md."""
from __future__ import annotations

import re

import pandas as pd
import pytest

from finlib.finbias.data.prices import load_prices
from finlib.finbias.data.stage import clean_reports
from finlib.finbias.perturb.lexicon import LexiconError, load_lexicon
from finlib.finbias.prompts import build_messages
from finlib.llm.openai_backend import redact

STRONG = "type=strongsubj len=1 word1=abuse pos1=verb stemmed1=y priorpolarity=negative\n"
WEAK = "type=weaksubj len=1 word1=concern pos1=verb stemmed1=y priorpolarity=negative\n"


@pytest.mark.parametrize("scenario, content", [
    ("empty lexicon", ""),
    ("lexicon without strongsubj entries", WEAK * 3),
])
def test_lexicon_without_strongsubj_entries_is_refused(scenario, content, tmp_path):
    """Drill: an empty lexicon, or one without strongsubj entries, is refused."""
    path = tmp_path / "lex.tff"
    path.write_text(content)
    n = content.count("\n")
    with pytest.raises(LexiconError, match=rf"lex\.tff: no strongsubj entries \({n} entries in all\)"):
        load_lexicon(path)
    path.write_text(content + STRONG)  # one strongsubj entry is enough: the condition removes something
    assert load_lexicon(path).strong_words == {"abuse"}


def test_lower_case_price_tickers_match_upper_case_reports(tmp_path):
    """Drill: price tickers are upper-cased before they are matched to the reports' tickers."""
    path = tmp_path / "prices.csv"
    path.write_text("date,ticker,adj_close\n2021-03-01,acme,10\n2021-03-02, Acme ,11\n2021-03-01,zzz,5\n")
    prices, notes = load_prices(path, tickers=["ACME"])  # report tickers are upper-cased by validate_reports
    assert prices["ticker"].tolist() == ["ACME", "ACME"] and prices["adj_close"].tolist() == [10.0, 11.0]
    assert notes["price_rows"] == 2


def test_control_characters_are_removed_and_counted_before_any_prompt():
    """Drill: NUL and other control characters in report text are removed in data prep and counted."""
    texts = ["We rate ACME a Buy.\x00 Revenue grew.", "Neutral on\x07 BETA.\x1b[0m", "Clean text.\nSecond line."]
    reports = pd.DataFrame({"report_id": ["a", "b", "c"], "text": texts})
    cleaned, counts = clean_reports(reports)
    assert counts.get("control") == 2  # reports changed by the rule, in data_report.json's `cleaning`
    assert cleaned["text"].tolist()[:2] == ["We rate ACME a Buy. Revenue grew.", "Neutral on BETA.[0m"]
    control = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
    for text in cleaned["text"]:
        assert not any(control.search(m["content"]) for m in build_messages(text))


KEY = "sk-proj-ABCDEFGHIJKLMNOPQRSTUV0123456789wxyz"


@pytest.mark.parametrize("scenario, echoed", [
    ("server echoes the whole key", KEY),
    ("server echoes the first 14 characters", KEY[:14] + "*" * 20),
    ("server echoes a middle run of 8 characters", "..." + KEY[10:18] + "..."),
    ("server echoes the last 8 characters", "****" + KEY[-8:]),
])
def test_any_substring_of_the_key_of_8_or_more_characters_is_redacted(scenario, echoed):
    """Drill: a server echoing any part of the key (>= 8 characters) in an error message."""
    out = redact(f"HTTP 401: Incorrect API key provided: {echoed}. See the docs.", KEY)
    assert "[redacted]" in out and out.startswith("HTTP 401: Incorrect API key provided: ")
    assert not any(KEY[i:i + 8] in out for i in range(len(KEY) - 7))


def test_short_runs_of_key_characters_are_ordinary_text():
    out = redact("HTTP 401 at 0123 for wxyz (model gpt)", KEY)
    assert out == "HTTP 401 at 0123 for wxyz (model gpt)"  # under 8 characters: indistinguishable from text


@pytest.mark.parametrize("scenario, override, expect", [
    ("bootstrap_reps -1", "scoring: {bootstrap_reps: -1}", r"scoring\.bootstrap_reps: .*greater than or equal to 0"),
    ("min_event_obs -3", "labels: {min_event_obs: -3}", r"labels\.min_event_obs: .*greater than or equal to 1"),
    ("max_error_share 1.5", "inference: {max_error_share: 1.5}", r"inference\.max_error_share: .*less than or equal"),
    ("unknown model name", "inference: {models: [gpt-5.1-typo]}", r"inference\.models: unknown model name "
                                                                   r"'gpt-5\.1-typo'"),
    ("misspelled nested inference key", "inference: {max_eror_share: 0.5}", r"unknown key 'inference\.max_eror_share'"),
])
def test_bad_params_fail_at_load_time_before_any_stage(scenario, override, expect, tmp_path, repo_root):
    """Drill: bad params values, model names and nested keys fail when the run is loaded (before stage 00)."""
    from finlib.core.config import ConfigError, load_run

    root = tmp_path / "repo"
    (root / "params").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname='t'\n")
    for name in ("default.yaml", "models.yaml"):
        (root / "params" / name).write_text((repo_root / "params" / name).read_text())
    (root / "params" / "bad.yaml").write_text(f"extends: default.yaml\n{override}\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml \(merged over default\.yaml\): invalid params:\n  - " + expect):
        load_run("bad", root=root)


@pytest.mark.parametrize("key, override, expect", [
    ("bizfin.models", "bizfin: {models: [qwen2.5-coder-0.5c]}", r"bizfin\.models: unknown model name 'qwen2\.5-coder-0\.5c'"),
    ("bizfin.judge", "bizfin: {judge: gpt-4o-typo}", r"bizfin\.judge: unknown model name 'gpt-4o-typo'"),
    ("bizfin.iterajudge.judges", "bizfin: {iterajudge: {judges: [gpt-4o, deepseek-v9]}}",
     r"bizfin\.iterajudge\.judges: unknown model name 'deepseek-v9'"),
    ("dpo.models", "dpo: {models: [smollm2-135n]}", r"dpo\.models: unknown model name 'smollm2-135n'"),
    ("dpo.teacher", "dpo: {teacher: gpt-4.1-typo}", r"dpo\.teacher: unknown model name 'gpt-4\.1-typo'"),
    ("figures.case_model", "figures: {case_model: smollm2-135n}", r"figures\.case_model: unknown model name 'smollm2-135n'"),
])
def test_a_typo_in_any_model_key_stops_the_run_before_stage_00(key, override, expect, tmp_path, repo_root,
                                                                monkeypatch):
    """Drill: a model or judge name missing from the registry in any section (judges, teachers, BizFinBench) stops the run before stage 00.

    The load checks every key that names models, not only those of the first stage to run."""
    import papermill

    from finlib.core.config import ConfigError
    from finlib.pipeline.runner import run_pipeline

    root = tmp_path / "repo"
    (root / "notebooks").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname='t'\n")
    for name in ("default.yaml", "models.yaml"):
        (root / "params" / name).parent.mkdir(exist_ok=True)
        (root / "params" / name).write_text((repo_root / "params" / name).read_text())
    (root / "params" / "bad.yaml").write_text(f"extends: default.yaml\n{override}\n")
    for stage in ("00_data", "03_inference", "05_dpo", "06_figures", "07_bizfin", "08_iterajudge"):
        (root / "notebooks" / f"{stage}.ipynb").write_text("{}")
    ran: list[str] = []
    monkeypatch.setattr(papermill, "execute_notebook", lambda nb, *a, **k: ran.append(nb))
    monkeypatch.chdir(root)
    with pytest.raises(ConfigError, match=r"bad\.yaml \(merged over default\.yaml\): invalid params:\n  - " + expect):
        run_pipeline("bad", params_file=str(root / "params" / "bad.yaml"))
    assert ran == []  # no stage started, no call paid


def test_the_preflight_names_a_model_missing_from_the_registry(tmp_run):
    """A params dict changed after loading (a notebook, the plan command) is checked again by the
    preflight: a judge or teacher the registry does not hold is a problem line, not a later crash."""
    from finlib.pipeline.plan import preflight

    tmp_run.params["bizfin"]["judge"] = "gpt-4o-typo"
    tmp_run.params["dpo"]["teacher"] = "gpt-4.1-typo"
    problems = preflight(tmp_run, can_reach=lambda host, port: True, list_models=lambda url: None)
    named = [p for p in problems if "not a record of the model registry" in p]
    assert any("bizfin.judge" in p and "gpt-4o-typo" in p for p in named), problems
    assert any("dpo.teacher" in p and "gpt-4.1-typo" in p for p in named), problems
