"""A model backend is one declared record: a toy backend declared here, and nowhere else, runs
through stage 03, stage 04's tables, stage 06's figures and the HTML report.

The echo backend answers every call with one fixed rating, so what the tables print follows
in closed form from what was planted: accuracy is the share of reports whose return label is
that rating, herding the share whose reference rating is it, and the parse rate is 1.
"""

from __future__ import annotations

import json

import matplotlib
import numpy as np
import pandas as pd
import pytest
import yaml

matplotlib.use("Agg")

from finlib.core.artifacts import read_frame, write_frame
from finlib.core.tables import read_table_csv
from finlib.finbias.figures import stage as figures
from finlib.finbias.inference import stage as inference
from finlib.finbias.scoring import stage as scoring
from finlib.finbias.vocab import POOLED, SECTORS
from finlib.llm import backends
from finlib.llm.store import Result
from finlib.pipeline import report

ECHO_RATING = "bearish"
MODEL = "echo-model"
RATINGS = ("bullish", "neutral", "bearish")


def send_echo(spec, pending, store, opts) -> None:
    """Every request gets the same reply, written as a model writes it (prose around the JSON)."""
    reply = f'Having read the report, my view:\n{{"answer": "{ECHO_RATING}", "reason": "margins fall"}}'
    store.put_many(
        [
            Result.for_request(
                r, status="ok", raw_text=reply, input_tokens=40, output_tokens=12, truncated_output=False
            )
            for r in pending
        ]
    )


ECHO = backends.BackendRecord(
    name="echo", sender=send_echo, engine_fields=lambda spec, *a: None, checker=lambda rec: None, via="echo (test)"
)


@pytest.fixture()
def echo_backend():
    backends.register_backend(ECHO)
    yield ECHO
    backends.BACKENDS.pop(ECHO.name)


def planted(n_reports: int = 24, seed: int = 11) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Stage 00-02's artifacts by hand: reports (ratings, sectors, firms), return labels, and the
    four conditions of each report, the texts written as an analyst writes them."""
    rng = np.random.default_rng(seed)
    ids = [f"R{i:02d}" for i in range(n_reports)]
    rating = rng.choice(RATINGS, n_reports)
    reports = pd.DataFrame(
        {
            "report_id": ids,
            "ticker": [f"T{i % 8}" for i in range(n_reports)],
            "company": [f"Firm {i % 8}" for i in range(n_reports)],
            "sector": [SECTORS[i % 3] for i in range(n_reports)],
            "analyst_rating": rating,
        }
    )
    labels = pd.DataFrame(
        {"report_id": ids, "label": rng.choice(RATINGS, n_reports), "car": 0.0, "excluded_reason": None}
    )
    word = {"bullish": "Buy", "neutral": "Hold", "bearish": "Sell"}
    rows = []
    for rid, a in zip(ids, rating):
        fake = [x for x in RATINGS if x != a][int(rid[1:]) % 2]
        body = f"Revenue at {rid} rose 4% year on year, while gross margin narrowed by 60 bp on freight costs."
        for cond, text, ref in (
            ("original", f"We rate the shares {word[a]}. {body}", a),
            ("no_rating", body, a),
            ("fake_rating", f"We rate the shares {word[fake]}. {body}", fake),
            ("no_opinion", f"Revenue at {rid} rose 4% year on year.", a),
        ):
            rows.append(
                {
                    "item_id": f"{rid}:{cond}",
                    "report_id": rid,
                    "condition": cond,
                    "text": text,
                    "analyst_rating": a,
                    "fake_rating": fake if cond == "fake_rating" else None,
                    "reference_rating": ref,
                    "status": "ok",
                    "skip_reason": None,
                }
            )
    return reports, labels, pd.DataFrame(rows)


def echo_run(cfg) -> None:
    """The run's registry holds one record of the echo backend; stage 03 asks for it alone."""
    record = {
        "name": MODEL,
        "backend": ECHO.name,
        "model_id": "echo-1",
        "supports_system": True,
        "context_length": 8192,
        "price_input_per_m": 0.0,
        "price_output_per_m": 0.0,
        "sampling": {"temperature": 0.0, "top_p": 1.0},
    }
    (cfg.root / "params" / "models_echo.yaml").write_text(yaml.safe_dump({"models": [record]}))
    cfg.params["inference"].update(
        registry="params/models_echo.yaml",
        models=[MODEL],
        constrained_json=[],
        prompt_length_by="estimate",
        progress=False,
    )
    cfg.params["scoring"]["bootstrap_reps"] = 20


def pooled(metrics: pd.DataFrame, metric: str, condition: str) -> float:
    row = metrics[
        (metrics["model"] == MODEL)
        & (metrics["metric"] == metric)
        & (metrics["sector"] == POOLED)
        & (metrics["condition"] == condition)
    ]
    assert len(row) == 1, f"{metric}/{condition}: {len(row)} rows"
    return float(row["value"].iloc[0])


@pytest.mark.slow
def test_a_backend_declared_in_one_record_runs_to_the_report(tmp_run, echo_backend):
    reports, labels, conditions = planted()
    for name, df in (("reports", reports), ("labels", labels), ("conditions", conditions)):
        write_frame(tmp_run, name, df)
    echo_run(tmp_run)

    inf = inference.run(tmp_run)  # stage 03
    block = inf.report["models"][MODEL]
    assert block["backend"] == "echo" and block["via"] == "echo (test)" and block["primary_mode"] == "generate"
    assert block["sent"] == len(conditions)
    pred = read_frame(tmp_run, "predictions")
    assert (pred["answer"] == ECHO_RATING).all() and pred["parsed"].all()

    res = scoring.run(tmp_run)  # stage 04: Tables 4-7
    m = res.metrics
    by_report = labels.set_index("report_id")["label"]
    assert pooled(m, "accuracy", "original") == pytest.approx(float((by_report == ECHO_RATING).mean()))
    refs = conditions[conditions["condition"] == "fake_rating"]["reference_rating"]
    assert pooled(m, "herding", "fake_rating") == pytest.approx(float((refs == ECHO_RATING).mean()))
    for table in ("table4_herding_with_without", "table6_accuracy_with_without"):
        printed = read_table_csv(tmp_run.tables_dir / f"{table}.csv")
        assert printed.astype(str).apply(lambda c: c.str.contains(MODEL, regex=False)).any().any(), table

    drawn = figures.run(tmp_run)  # stage 06
    assert {"fig_herding_with_without", "fig_accuracy_vs_analyst"} <= set(drawn.report["drawn"])

    index = report.build_report(tmp_run)  # the HTML report
    page = index.read_text(encoding="utf-8")
    assert MODEL in page
    broken = [link for link in report.local_links(index) if not (index.parent / link).exists()]
    assert broken == ["manifest.json"]  # the runner writes the manifest; this test calls the stages itself
    assert "figures/fig_herding_with_without.png" in report.local_links(index)
    stage03 = json.loads((tmp_run.processed_dir / "inference_report.json").read_text())
    assert stage03["models"][MODEL]["via"] == "echo (test)"


def test_an_undeclared_backend_is_refused_by_the_registry(tmp_run):
    echo_run(tmp_run)  # the record names "echo", which no record declares in this test
    from finlib.llm.registry import RegistryError, load_registry

    with pytest.raises(RegistryError, match=r"models\[0\] 'echo-model', field 'backend': must be one of"):
        load_registry(tmp_run.path("params/models_echo.yaml"))


def test_a_second_record_of_one_name_is_refused():
    with pytest.raises(ValueError, match="backend 'openai' is already declared"):
        backends.register_backend(
            backends.BackendRecord(
                name="openai", sender=send_echo, engine_fields=lambda *a: None, checker=lambda rec: None, via="x"
            )
        )
