"""The same stub replies through the project's runner and through the inspect task give equal
statistics (== on floats) and equal per-item answers, on a clean run and on one with injected
failures (500s that heal, calls that never succeed). Offline: the stub server is started here and
every reply carries its token usage (nothing asks the hub for a tokenizer).

The reference side is the project's own path: `finlib.llm.engine.chat` (the stages' sender and
response store) with the prompt of `build_messages`; the harness side is `inspect_ai.eval` on
`finbias_herding`, read back from the log file it wrote (its status, its samples' scores, its metrics).
Reports are hand-written analyst prose; replies are the forms models write (JSON, a fenced JSON, a
plain statement, a refusal), picked by a hash of the prompt so every path gets the same reply.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("inspect_ai", reason="the harness extra is not installed (pip install -e '.[harness]')")

from llm_helpers import api_record, write_registry

from finlib.finbias.prompts import PROMPT_VERSION, build_messages
from finlib.harness.finbias_rows import herding_statistics, item_answers, read_run, report_samples
from finlib.llm import openai_backend
from finlib.llm.engine import ChatItem, chat
from finlib.llm.store import ResponseStore
from finlib.rehearsal.stub_server import StubServer, ThreadedStub

pytestmark = pytest.mark.slow  # three passes over a live local server, with the retries' real waits

LM_EVAL_TASKS = Path(__file__).resolve().parents[2] / "finlib" / "harness" / "lm_eval_tasks"
REPLIES = (
    '{"answer": "bullish", "reason": "Revenue growth and margin expansion support upside."}',
    '```json\n{"answer": "Neutral", "reason": "Valuation already reflects the guidance."}\n```',
    "My rating: bearish. Leverage is rising while free cash flow turns negative.",
    "I am not able to give investment advice on this security.",
    '{"answer": "bearish", "reason": "Order intake fell for a third quarter."}',
)

FIRMS = (  # ticker, sector, analyst rating, return-based label, the report's body
    (
        "NVLT",
        "Technology",
        "bullish",
        "bullish",
        "Novalite's data-centre segment grew 41% year over year, and management raised full-year guidance.",
    ),
    (
        "HRTH",
        "Healthcare",
        "neutral",
        "bearish",
        "Hearthside's new clinic openings were offset by lower reimbursement rates; margins compressed 120 bps.",
    ),
    (
        "GRDN",
        "Utilities",
        "bearish",
        "neutral",
        "Gridline faces a rate case in Q3 and its capex plan strains the balance sheet.",
    ),
    (
        "PKFD",
        "Consumer Defensive",
        "bullish",
        "bearish",
        "Peakfood's pricing held despite volume declines; private-label competition is intensifying.",
    ),
    (
        "CSTL",
        "Energy",
        "neutral",
        "bullish",
        "Coastal Petroleum's Permian output rose 8% while lifting costs fell; the dividend is covered.",
    ),
    (
        "TRNS",
        "Industrials",
        "bearish",
        "bearish",
        "Transcore's backlog shrank for the third quarter in a row as freight demand weakened.",
    ),
)
RATING_WORD = {"bullish": "Buy", "neutral": "Hold", "bearish": "Sell"}
FAKE = {"bullish": "bearish", "neutral": "bullish", "bearish": "bullish"}


class VariedStub(StubServer):
    """The project's stub, answering each prompt with one of `REPLIES` chosen by its text's hash."""

    async def _answer(self, req: dict, text: str, fault: str | None) -> bytes:
        content = REPLIES[int(hashlib.sha256(text.encode()).hexdigest(), 16) % len(REPLIES)]
        n_in = max(1, len(text) // 4)
        usage = {"prompt_tokens": n_in, "completion_tokens": 12, "total_tokens": n_in + 12}
        self.answers[text] += 1
        return self._respond(
            200,
            {
                "id": f"chatcmpl-{self.n_requests}",
                "object": "chat.completion",
                "created": 0,
                "model": req.get("model", "stub"),
                "usage": usage,
                "choices": [
                    {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}
                ],
            },
        )


def write_run(folder: Path, faults: bool) -> Path:
    """A processed folder (reports, labels, conditions) of six reports in four conditions; with
    `faults`, two reports' texts carry the stub's directives: a 500 then an answer (within the record's two attempts), or always 502."""
    folder.mkdir(parents=True)
    reports, labels, conds = [], [], []
    for i, (ticker, sector, rating, label, body) in enumerate(FIRMS):
        rid = f"r{i}"
        reports.append({"report_id": rid, "ticker": ticker, "sector": sector, "analyst_rating": rating})
        labels.append({"report_id": rid, "label": label})
        opener = f"{ticker} Corp. is rated {RATING_WORD[rating]} by our analysts."
        fake = FAKE[rating]
        texts = {
            "original": f"{opener} {body}",
            "no_rating": body,
            "no_opinion": f"{body} Trading volume was in line with the sector average.",
            "fake_rating": f"{ticker} Corp. is rated {RATING_WORD[fake]} by our analysts. {body}",
        }
        if faults and i == 1:
            texts["original"] += " [[500x1]]"
        if faults and i == 2:
            texts["no_opinion"] += " [[502]]"
        for cond, text in texts.items():
            ref = {"original": rating, "fake_rating": fake}.get(cond, rating)
            conds.append(
                {
                    "item_id": f"{rid}:{cond}",
                    "report_id": rid,
                    "condition": cond,
                    "text": text,
                    "analyst_rating": rating,
                    "fake_rating": fake if cond == "fake_rating" else None,
                    "reference_rating": ref,
                    "status": "ok",
                    "skip_reason": None,
                }
            )
    pd.DataFrame(reports).to_parquet(folder / "reports.parquet")
    pd.DataFrame(labels).to_parquet(folder / "labels.parquet")
    pd.DataFrame(conds).to_parquet(folder / "conditions.parquet")
    return folder


def pipeline_replies(spec, samples: list[dict], store_path: Path) -> dict[str, dict]:
    """The project's runner path: the stages' sender and store, then its per-item records."""
    items = [
        ChatItem(it["item_id"], build_messages(it["text"], spec.supports_system, PROMPT_VERSION), PROMPT_VERSION)
        for s in samples
        for it in s["items"]
    ]
    rows = chat(spec, items, ResponseStore(store_path), max_new_tokens=spec.max_new_tokens, progress=False)
    return {
        r["id"]: {
            "status": r["status"],
            "raw_text": r["raw_text"],
            "error": r["error"],
            "truncated_output": r["truncated_output"],
        }
        for r in rows.to_dict(orient="records")
    }


def inspect_results(data_dir: Path, registry: Path, base_url: str, log_dir: Path) -> tuple[dict, dict, str]:
    """(per-item answers, metrics, status) of an inspect eval, read from the log file it wrote."""
    from inspect_ai import eval as inspect_eval
    from inspect_ai.log import list_eval_logs, read_eval_log
    from inspect_ai.model import get_model

    from finlib.harness.inspect_finbias import finbias_herding

    # max_retries=0: the SDK's own retries off (`-M max_retries=0`), so attempts are the record's, as the runner's
    model = get_model("openai-api/stub/stub-model", base_url=base_url, api_key="stub-key", max_retries=0)
    inspect_eval(
        finbias_herding(str(data_dir), "stub", str(registry), cache=False),
        model=model,
        log_dir=str(log_dir),
        display="none",
    )
    (info,) = list_eval_logs(str(log_dir))
    log = read_eval_log(info)
    answers: dict[str, str] = {}
    for s in log.samples:
        answers.update(next(iter(s.scores.values())).value)
    metrics = (
        {
            k.split("/", 1)[1] if k.startswith("finbias_statistics/") else k: m.value
            for k, m in log.results.scores[0].metrics.items()
        }
        if log.results
        else {}
    )
    return dict(sorted(answers.items())), metrics, log.status


def lm_eval_results(data_dir: Path, base_url: str) -> tuple[dict, dict]:
    """(per-item answers, statistics) of an lm-eval run of the include-path task `finbias_herding`
    (local-chat-completions, the authors' system prompt as the system message)."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    tasks = TaskManager(include_path=str(LM_EVAL_TASKS), metadata={"data_dir": str(data_dir)})
    res = lm_eval.simple_evaluate(
        model="local-chat-completions",
        model_args={
            "base_url": f"{base_url}/chat/completions",
            "model": "stub-model",
            "num_concurrent": 4,
            "max_retries": 2,
            "tokenizer_backend": None,
        },
        tasks=["finbias_herding"],
        task_manager=tasks,
        apply_chat_template=True,
        log_samples=True,
    )
    docs = res["samples"]["finbias_herding"]
    samples = list({d["doc"]["sample"]["report_id"]: d["doc"]["sample"] for d in docs}.values())
    replies = {
        d["doc"]["item_id"]: {"status": "ok", "raw_text": d["resps"][0][0], "error": None, "truncated_output": None}
        for d in docs
    }
    stats = {
        k.removesuffix(",none"): v
        for k, v in res["results"]["finbias_herding"].items()
        if k.endswith(",none") and "_stderr" not in k
    }
    return item_answers(samples, replies, "stub"), stats


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
