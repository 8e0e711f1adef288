"""JSON reports name files relative to the repository: no machine's absolute path in an artifact."""

from __future__ import annotations

import json
from pathlib import Path

from finlib.core.artifacts import write_json
from finlib.core.config import RunConfig


def test_reports_name_repository_files_relative(tmp_path: Path):
    cfg = RunConfig(name="r", params={}, root=tmp_path, params_file=tmp_path / "r.yaml")
    cfg.processed_dir.mkdir(parents=True)
    lexicon = tmp_path / "data" / "external" / "mpqa" / "subjclues.tff"
    path = write_json(
        cfg,
        "perturb_report",
        {"lexicon": {"source": str(lexicon)}, "note": f"read {lexicon} ok", "outside": "/elsewhere/file.csv"},
    )
    text = path.read_text(encoding="utf-8")
    assert str(tmp_path) not in text
    doc = json.loads(text)
    assert doc["lexicon"]["source"] == "data/external/mpqa/subjclues.tff"
    assert doc["note"] == "read data/external/mpqa/subjclues.tff ok" and doc["outside"] == "/elsewhere/file.csv"
