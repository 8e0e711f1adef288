"""A dummy key goes to the server and nowhere else: not the store, the artifacts, the logs."""
from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd
import yaml

from finlib.artifacts import write_frame
from finlib.llm.stage import run_stage
from finlib.llm.stub_server import ThreadedStub

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
    handler = logging.FileHandler(log_file)
    root_logger = logging.getLogger()
    old_level = root_logger.level
    root_logger.addHandler(handler)
    root_logger.setLevel(logging.DEBUG)  # openai / httpx debug logs included
    try:
        with ThreadedStub(require_key=KEY) as stub:
            registry = {"models": [{
                "name": "stub-api", "backend": "openai", "model_id": "stub-model", "base_url": stub.base_url,
                "api_key_env": "STUB_SECRET_KEY", "supports_system": True, "context_length": 8192,
                "price_input_per_m": 1.0, "price_output_per_m": 2.0,
                "sampling": {"temperature": 1.0, "top_p": 1.0}, "concurrency": 4}]}
            (tmp_run.root / "params" / "models_stub.yaml").write_text(yaml.safe_dump(registry))
            tmp_run.params["inference"].update(registry="params/models_stub.yaml", models=["stub-api"],
                                               budget_usd=1.0, progress=True)
            write_frame(tmp_run, "conditions", conditions())
            pred, report = run_stage(tmp_run)
            assert stub.stub.n_requests == 6  # the key was accepted: the stub answers 401 otherwise
    finally:
        root_logger.removeHandler(handler)
        root_logger.setLevel(old_level)
        handler.close()
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
