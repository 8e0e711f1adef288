"""Inputs written wrong stop with an error naming the file, the key or the row, before anything is
paid for or written: an empty model list for a stage the run selects, `extends:` naming a folder,
a Parquet file cut short, dates written as epoch numbers, a synthetic calendar that runs backwards,
and a server that refuses connections (one cause named, not the key)."""

from __future__ import annotations

import copy
import dataclasses
import shutil
import socket
from pathlib import Path

import pandas as pd
import pytest

from finlib.core.artifacts import UnreadableArtifactError, artifact_path, read_frame, write_frame
from finlib.core.config import ConfigError, load_params, load_run
from finlib.core.params import empty_model_lists, validate_params
from finlib.finbias.data.validation import DataValidationError, parse_dates, read_table

ROOT = Path(__file__).resolve().parents[2]


def _repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "notebooks").mkdir(parents=True)
    shutil.copytree(ROOT / "params", root / "params")
    (root / "pyproject.toml").write_text("[project]\nname='mini'\n")
    return root


def test_an_empty_bizfin_model_list_stops_a_run_of_stage_07_before_any_stage(tmp_path, monkeypatch):
    """Drill: `bizfin.models: []` in a run that includes stage 07.

    The runner stops before any stage with the file and the key; a run that leaves stage 07 out
    (a rehearsal of stages 00-04) may keep the list empty."""
    from finlib.pipeline.runner import run_pipeline

    root = _repo(tmp_path)
    (root / "notebooks" / "07_bizfinbench.ipynb").write_text("{}")  # never opened: the check comes first
    (root / "params" / "nomodels.yaml").write_text("extends: smoke.yaml\nbizfin:\n  models: []\n")
    monkeypatch.chdir(root)
    with pytest.raises(ConfigError, match=r"nomodels\.yaml: invalid params:\n  - bizfin\.models: empty, and stage 07"):
        run_pipeline("nomodels", stages=["07"])
    assert not (root / "runs" / "nomodels" / "manifest.json").exists()
    params = load_params(root / "params" / "nomodels.yaml")
    assert empty_model_lists(params, ["00", "01", "02", "03", "04"]) == []


def test_stage_07_run_from_a_notebook_refuses_an_empty_model_list_before_writing(tmp_run):
    """Stage 07 started directly (a notebook in JupyterLab, no runner) refuses `bizfin.models: []` before
    it asks or writes anything."""
    from finlib.bizfin.benchmark.stage import run

    tmp_run.params["bizfin"]["models"] = []
    with pytest.raises(ConfigError, match=r"bizfin\.models: empty, and stage 07"):
        run(tmp_run)
    assert list(tmp_run.processed_dir.glob("bizfin*")) == []


def test_extends_naming_a_folder_says_it_is_a_folder(tmp_path):
    """Drill: `extends:` naming a folder instead of a params file."""
    root = _repo(tmp_path)
    (root / "params" / "base").mkdir()
    (root / "params" / "child.yaml").write_text("extends: base\nseed: 3\n")
    with pytest.raises(ConfigError, match=r"child\.yaml: extends: 'base' is a directory .*not a params file"):
        load_run("child", root=root)


def test_a_parquet_artifact_cut_short_names_the_file_and_the_stage(tmp_run):
    """Drill: a run artifact (Parquet) cut short, as a full disk or an interrupted copy leaves it.

    The error names the file and the stage (and command) that writes it again, not pyarrow's
    bare ArrowInvalid."""
    path = write_frame(tmp_run, "reports", pd.DataFrame({"report_id": [f"r{i}" for i in range(500)]}))
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(UnreadableArtifactError) as err:
        read_frame(tmp_run, "reports")
    assert str(artifact_path(tmp_run, "reports")) in str(err.value)
    assert "is not a readable Parquet file" in str(err.value) and "run stage 00 again" in str(err.value)


def test_an_input_parquet_file_cut_short_names_the_file(tmp_path):
    """Drill: a prices or reports file in Parquet cut short (an interrupted download)."""
    path = tmp_path / "prices.parquet"
    pd.DataFrame({"date": ["2021-01-04"] * 300, "ticker": ["AAPL"] * 300, "adj_close": [1.0] * 300}).to_parquet(path)
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(DataValidationError, match=rf"^{path}: not a readable Parquet file .*copy it again"):
        read_table(path)


@pytest.mark.parametrize(
    "values, listed",
    [
        ([1609459200, 1609545600], "row 1 (1609459200); row 2 (1609545600)"),  # JSON / Parquet integers
        (["2021-01-04", "1609718400"], "row 2 ('1609718400')"),  # a CSV cell of epoch seconds
        (["18631"], "row 1 ('18631')"),  # epoch days
    ],
)
def test_dates_written_as_epoch_numbers_are_named_as_numbers(values, listed):
    """Drill: report or price dates written as epoch numbers (seconds, days) instead of dates.

    The error names the rows and says they are numbers, not dates (pandas would read them as
    nanoseconds after 1970, and stage 00 would blame the price coverage)."""
    with pytest.raises(DataValidationError) as err:
        parse_dates(pd.Series(values), "reports.csv", "date")
    assert "reports.csv: a number, not a date, in column 'date' at " + listed in str(err.value)
    assert "YYYY-MM-DD" in str(err.value)


def test_compact_dates_are_still_dates():
    """20210104 (YYYYMMDD, as many vendors write it) is a date, not an epoch number."""
    assert parse_dates(pd.Series(["20210104"]), "prices.csv", "date").iloc[0] == pd.Timestamp("2021-01-04")


def test_a_synthetic_calendar_ending_before_it_starts_fails_at_load(repo_root):
    """Drill: `data.synthetic.end` before `data.synthetic.start` (a calendar with no trading day)."""
    params = copy.deepcopy(load_params(repo_root / "params" / "default.yaml"))
    params["data"]["synthetic"].update(start="2024-12-31", end="2019-01-01")
    with pytest.raises(ConfigError, match=r"data\.synthetic\.end \(2019-01-01\) must be after data\.synthetic\.start \(2024-12-31\)"):
        validate_params(params, "x.yaml")


def test_refused_connections_name_one_cause_the_server(tmp_path, monkeypatch, simulated_clock):
    """Drill: nothing listens at the record's base_url (connection refused past the grace period).

    The stop names the refused connections and what to fix (start the server or fix base_url), and
    not the API key, which a refused connection says nothing about."""
    import asyncio

    from llm_helpers import STUB_SPEC, make_request

    from finlib.llm.openai_backend import CircuitOpen, run_openai
    from finlib.llm.store import ResponseStore

    monkeypatch.setenv("STUB_TEST_KEY", "k")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    spec = dataclasses.replace(
        STUB_SPEC, base_url=f"http://127.0.0.1:{port}/v1", concurrency=2, breaker_failures=2, breaker_grace_s=0
    )
    with ResponseStore(tmp_path / "r.sqlite") as store:
        with pytest.raises(CircuitOpen) as err:
            asyncio.run(run_openai(spec, [make_request(f"q{i}", spec) for i in range(6)], store, seed=0))
    message = str(err.value)
    assert "consecutive refused connections" in message
    assert f"nothing accepts connections at http://127.0.0.1:{port}/v1: start the server, or fix base_url" in message
    assert "key" not in message.lower()
