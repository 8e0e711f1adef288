"""A dummy key goes to the server and nowhere else: not the store, the artifacts, the logs."""
from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from llm_helpers import api_record, debug_log, write_registry

from finlib.core.artifacts import write_frame
from finlib.finbias.inference.stage import read_predictions
from finlib.finbias.inference.stage import run as run_inference
from finlib.rehearsal.stub_server import ThreadedStub

KEY = "sk-dummy-SECRET-7f3a9c1e5b"


def conditions() -> pd.DataFrame:
    rows = []
    for i in range(3):
        for cond in ("original", "no_rating"):
            rows.append({"item_id": f"R{i}:{cond}", "report_id": f"R{i}", "condition": cond,
                         "text": (f"We rate Firm {i} a Buy. " if cond == "original" else "") + f"Revenue grew {i} percent.", "analyst_rating": "bullish",
                         "fake_rating": None, "reference_rating": "bullish", "status": "ok", "skip_reason": None})
    rows.append({**rows[0], "item_id": "R0:fake_rating", "condition": "fake_rating", "text": None,
                 "status": "skipped", "skip_reason": "no rating sentence"})
    return pd.DataFrame(rows)


def every_file(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


def test_key_reaches_the_server_only(tmp_run, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("STUB_SECRET_KEY", KEY)
    log_file = tmp_path / "debug.log"
    with debug_log(log_file), ThreadedStub(require_key=KEY) as stub:  # openai / httpx debug logs included
        registry = write_registry(tmp_run.root, api_record("stub-api", stub.base_url, "STUB_SECRET_KEY",
                                                           concurrency=4))
        tmp_run.params["inference"].update(registry=registry, models=["stub-api"], budget_usd=1.0, progress=True)
        write_frame(tmp_run, "conditions", conditions())
        report = run_inference(tmp_run).report
        pred = read_predictions(tmp_run)
        assert stub.stub.n_requests == 6  # the key was accepted: the stub answers 401 otherwise
    assert (pred.loc[pred["status"] == "ok", "raw_text"].str.contains('"answer"')).all()
    assert (pred["status"] == "ok").sum() == 6 and (pred["status"] == "skipped").sum() == 1
    assert report["cost_usd_total"] > 0
    out = capsys.readouterr()
    files = every_file(tmp_run.root) + [log_file]
    assert any(p.suffix == ".sqlite" for p in files) and any(p.name == "predictions.parquet" for p in files)
    assert log_file.stat().st_size > 0  # the debug log really captured something
    for p in files:
        assert KEY.encode() not in p.read_bytes(), f"API key leaked into {p}"
    assert KEY not in out.out and KEY not in out.err


@pytest.mark.slow
def test_key_stays_out_of_the_executed_notebook_and_manifest(tmp_path, repo_root, monkeypatch, capfd):
    """Notebook 03 run by the pipeline runner (papermill) against the stub with a dummy key:
    the key must not reach the executed notebook, the manifest, the store, artifacts or logs."""
    from finlib.core.config import load_run
    from finlib.pipeline.runner import run_pipeline

    root = tmp_path / "repo"
    (root / "notebooks").mkdir(parents=True)
    shutil.copytree(repo_root / "params", root / "params")
    shutil.copy(repo_root / "notebooks" / "03_inference.ipynb", root / "notebooks")
    (root / "pyproject.toml").write_text("[project]\nname='mini'\n")
    monkeypatch.chdir(root)
    monkeypatch.setenv("STUB_SECRET_KEY", KEY)
    monkeypatch.setenv("JUPYTER_PREFER_ENV_PATH", "1")  # restored after the test (the runner sets it)
    log_file = tmp_path / "debug.log"
    with debug_log(log_file), ThreadedStub(require_key=KEY) as stub:  # papermill / nbclient / httpx logs too
        registry = write_registry(root, api_record("stub-api", stub.base_url, "STUB_SECRET_KEY", concurrency=4))
        smoke = yaml.safe_load((root / "params" / "smoke.yaml").read_text())
        smoke.setdefault("inference", {}).update(registry=registry, models=["stub-api"], extension_models=[], budget_usd=1.0,
                                                 progress=True)
        (root / "params" / "smoke.yaml").write_text(yaml.safe_dump(smoke))
        write_frame(load_run("smoke", root=root), "conditions", conditions())
        manifest = run_pipeline("smoke", stages=["03"])
        assert stub.stub.n_requests == 6  # the kernel sent with the key (the stub answers 401 otherwise)
    assert manifest["stages"]["03"]["status"] == "ok"
    executed = root / "runs" / "smoke" / "notebooks" / "03_inference.ipynb"
    assert "stub-api" in executed.read_text()  # the executed notebook really shows the stub's rows
    out = capfd.readouterr()
    files = every_file(root) + [log_file]
    assert {"manifest.json", "predictions.parquet", "inference_report.json"} <= {p.name for p in files}
    assert any(p.suffix == ".sqlite" for p in files)
    for p in files:
        assert KEY.encode() not in p.read_bytes(), f"API key leaked into {p}"
    assert KEY not in out.out and KEY not in out.err
