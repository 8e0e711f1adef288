"""The same stub replies through the project's runner and through the inspect task give equal
statistics (== on floats) and equal per-item answers, on a clean run and on one with injected
failures (500s that heal, calls that never succeed). Offline: the stub server is started here and
every reply carries its token usage (nothing asks the hub for a tokenizer).

The reference side is the project's own path: `finlib.llm.engine.chat` (the stages' sender and
response store) with the prompt of `build_messages`; the harness side is `inspect_ai.eval` on
`finbias_herding`, read back from the log file it wrote (its status, its samples' scores, its metrics).
and `lm_eval.simple_evaluate` on the include-path task, read from its logged samples. Reports are
hand-written analyst prose and replies the forms models write (`finlib.harness.stub_run`: the same
paths `python -m finlib.harness.stub_run` runs for the docs' table).
"""

from __future__ import annotations

import json
import math

import pytest

pytest.importorskip("inspect_ai", reason="the harness extra is not installed (pip install -e '.[harness]')")

from llm_helpers import api_record, write_registry

from finlib.harness.finbias_rows import herding_statistics, item_answers, read_run, report_samples
from finlib.harness.stub_run import (
    VariedStub,
    inspect_results,
    lm_eval_results,
    pipeline_replies,
    summary_table,
    write_run,
)
from finlib.llm import openai_backend
from finlib.rehearsal.stub_server import ThreadedStub

pytestmark = pytest.mark.slow  # three passes over a live local server, with the retries' real waits


@pytest.mark.parametrize("faults", [False, True], ids=["clean", "failures"])
def test_pipeline_and_inspect_agree(tmp_path, monkeypatch, faults):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("INSPECT_CACHE_DIR", str(tmp_path / "inspect-cache"))
    monkeypatch.setenv("STUB_TEST_KEY", "stub-key")
    data_dir = write_run(tmp_path / "processed", faults)
    samples = report_samples(*read_run(data_dir))
    results = {}
    for path in ("pipeline", "inspect", "lm-eval"):
        with ThreadedStub() as server:
            server.stub.__class__ = VariedStub
            record = api_record(
                "stub", server.base_url, "STUB_TEST_KEY", concurrency=4, max_attempts=2, timeout_s=5, max_new_tokens=64
            )
            (tmp_path / "params").mkdir(exist_ok=True)
            registry = tmp_path / write_registry(tmp_path, record)
            if path == "pipeline":
                from finlib.harness.inspect_common import registry_record

                monkeypatch.setattr(openai_backend, "sleep", _no_wait)
                openai_backend.reset_breakers()
                replies = pipeline_replies(registry_record("stub", registry), samples, tmp_path / "store.sqlite")
                results[path] = (
                    item_answers(samples, replies, "stub"),
                    herding_statistics(samples, replies, "stub"),
                    "success",
                )
            elif path == "lm-eval" and faults:  # lm-eval re-raises a call that never succeeds: the run stops
                with pytest.raises(Exception, match="502"):
                    lm_eval_results(data_dir, server.base_url)
            elif path == "lm-eval":
                results[path] = lm_eval_results(data_dir, server.base_url)
            else:
                results[path] = inspect_results(data_dir, registry, server.base_url, tmp_path / "logs")
    (pa, pstats, _), (ia, istats, status) = results["pipeline"], results["inspect"]
    assert status == "success"  # inspect exits 0 whatever the log says: its status is read here
    assert ia == pa
    assert istats == pstats
    if not faults:
        la, lstats = results["lm-eval"]
        assert la == pa
        assert lstats == {k: pstats[k] for k in lstats}
        assert len(lstats) == 14
    assert {"herding_with_vs_without/pvalue", "answer_shift_fake_vs_original/statistic"} <= set(istats)
    # the numbers are the planted ones: every item read, the never-answering call outside N
    assert len(pa) == 24
    assert pstats["not_answered"] == (1.0 if faults else 0.0)
    assert (pa["r2:no_opinion"] == "not_answered") is faults
    assert pa["r1:original"] != "not_answered"  # the 500 healed on the second attempt on both paths
    assert pstats["scored_rows"] + pstats["not_answered"] == 24
    assert all(not isinstance(v, float) or not math.isnan(v) for v in istats.values())
    assert pstats["herding/original"] == _expected_herding(samples, pa, "original")
    runs = {p: {"statistics": r[1]} for p, r in results.items()}
    assert summary_table(runs)["equal"].all()


def _expected_herding(samples: list[dict], answers: dict[str, str], condition: str) -> float:
    """Eq. 1 by hand from the per-item answers: hits over the answered items (unparsed = no match)."""
    hits = n = 0
    for s in samples:
        for it in s["items"]:
            a = answers[it["item_id"]]
            if it["condition"] == condition and a != "not_answered":
                n += 1
                hits += a == it["reference_rating"]
    return hits / n


async def _no_wait(seconds: float) -> None:
    """The runner's backoff without its wall-clock wait (the retries themselves still happen)."""
    import asyncio

    await asyncio.sleep(0)


def test_statistics_tolerate_partial_input():
    """inspect computes metrics on an unfinished eval: no replies, or one report's, must still give numbers."""
    sample = {
        "report_id": "r0",
        "ticker": "NVLT",
        "sector": "Technology",
        "analyst_rating": "bullish",
        "label": "bullish",
        "items": [
            {
                "item_id": "r0:original",
                "condition": "original",
                "text": "x",
                "analyst_rating": "bullish",
                "fake_rating": None,
                "reference_rating": "bullish",
                "status": "ok",
                "skip_reason": None,
            }
        ],
    }
    assert herding_statistics([sample], {}, "m") == {
        "scored_rows": 0.0,
        "not_answered": 1.0,
        "unparsed": 0.0,
        "skipped": 0.0,
    }
    stats = herding_statistics(
        [sample],
        {
            "r0:original": {
                "status": "ok",
                "raw_text": json.dumps({"answer": "bullish", "reason": "growth"}),
                "error": None,
                "truncated_output": False,
            }
        },
        "m",
    )
    assert stats["herding/original"] == 1.0 and stats["herding_n/original"] == 1.0


def test_inspect_rerun_is_answered_from_its_cache(tmp_path, monkeypatch):
    """The task passes a cache policy to its calls: a second eval of the same reports sends nothing."""
    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import get_model

    from finlib.harness.inspect_finbias import finbias_herding

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("INSPECT_CACHE_DIR", str(tmp_path / "inspect-cache"))
    data_dir = write_run(tmp_path / "processed", False)
    (tmp_path / "params").mkdir()
    with ThreadedStub() as server:
        server.stub.__class__ = VariedStub
        record = api_record("stub", server.base_url, "STUB_TEST_KEY", concurrency=4, max_attempts=2, timeout_s=5)
        registry = tmp_path / write_registry(tmp_path, record)
        model = get_model("openai-api/stub/stub-model", base_url=server.base_url, api_key="k", max_retries=0)
        logs = []
        for i in range(2):
            (log,) = inspect_eval(
                finbias_herding(str(data_dir), "stub", str(registry)),
                model=model,
                log_dir=str(tmp_path / f"logs{i}"),
                display="none",
            )
            logs.append((log.status, server.stub.stats()["answers"]))
    assert logs == [("success", 24), ("success", 24)]
