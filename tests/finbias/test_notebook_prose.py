"""The notebooks' reading notes describe the run they show, computed from its numbers."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from finlib.core.config import RunConfig
from finlib.finbias.inference import stage as inference
from finlib.finbias.scoring import stage as scoring


def test_probability_reading_follows_the_numbers():
    probs = pd.DataFrame({"model": ["a"] * 2 + ["b"] * 2, "condition": ["original", "no_rating"] * 2,
                          "argmax_bullish": [0.95, 0.93, 0.9, 0.4]})
    text = inference.probability_reading({"models": {"a": {"label_mass_mean": 0.04}}}, probs)
    line_a, line_b = text.splitlines()
    assert "barely moves" in line_a and "spread 2 points" in line_a and "4.0 %" in line_a
    assert "barely" not in line_b and "spread 50 points" in line_b


def test_generation_reading_counts_each_model():
    text = inference.generation_reading({"generate_parse_by_model": {"m": {"n": 8, "parsed": 6}}})
    assert "6 of 8" in text and "75 %" in text
    assert "No generated answers" in inference.generation_reading({})


def test_reading_note_names_every_scored_model(tmp_path: Path):
    cfg = RunConfig(name="r", params={"data": {"source": "synthetic"}}, root=tmp_path, params_file=tmp_path / "r.yaml")
    metrics = pd.DataFrame({"model": ["smollm2-135m [score]", "qwen2.5-coder-0.5b [generate]", "Analyst"]})
    res = SimpleNamespace(metrics=metrics, plumbing=("qwen2.5-coder-0.5b [generate]", "smollm2-135m [score]"))
    text = scoring.reading_note(cfg, res)
    assert "`qwen2.5-coder-0.5b [generate]` (plumbing model)" in text and "`smollm2-135m [score]` (plumbing" in text
    assert "synthetic" in text and "Analyst" not in text
    real = RunConfig(name="r", params={"data": {"source": "local"}}, root=tmp_path, params_file=tmp_path / "r.yaml")
    text = scoring.reading_note(real, SimpleNamespace(metrics=metrics, plumbing=()))
    assert "real reports" in text and "plumbing" not in text
