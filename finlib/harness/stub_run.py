"""One stub run through the three paths, side by side: the project's runner, the inspect task and
the lm-eval task, on six hand-written analyst reports in four conditions, answered by the project's
stub server (`finlib.rehearsal.stub_server`) with the forms models write (JSON, a fenced JSON, a
plain statement, a refusal), picked by a hash of the prompt so every path gets the same reply.

`python -m finlib.harness.stub_run [--out runs/harness-stub] [--faults]` writes `summary.json` and
`summary.md` (the statistics of each path and whether they are equal), the inspect log (open it with
`inspect view --log-dir <out>/inspect-logs`) and lm-eval's samples. Offline: every stub reply carries
its token usage and nothing asks the hub for a tokenizer. `--faults`: one report's original gets a
500 that heals on the second attempt, another's no-opinion item a 502 on every attempt (lm-eval then
stops the run: it re-raises a call that never succeeds). The equality test
(`tests/harness/test_harness_equality.py`) runs the same paths and checks them with ==.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import shutil
from pathlib import Path

import pandas as pd
import yaml

from finlib.finbias.prompts import PROMPT_VERSION, build_messages
from finlib.harness.finbias_rows import herding_statistics, item_answers, read_run, report_samples
from finlib.harness.inspect_common import registry_record
from finlib.llm import openai_backend
from finlib.llm.engine import ChatItem, chat
from finlib.llm.store import ResponseStore
from finlib.rehearsal.stub_server import StubServer, ThreadedStub

STUB_KEY_ENV = "STUB_TEST_KEY"


LM_EVAL_TASKS = Path(__file__).resolve().parent / "lm_eval_tasks"
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
    folder.mkdir(parents=True, exist_ok=True)
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


def stub_registry(folder: Path, base_url: str) -> Path:
    """A registry file with the stub's record: two attempts, four calls at once, 64 output tokens."""
    record = {
        "name": "stub",
        "backend": "openai",
        "model_id": "stub-model",
        "base_url": base_url,
        "api_key_env": STUB_KEY_ENV,
        "supports_system": True,
        "context_length": 8192,
        "price_input_per_m": 0.0,
        "price_output_per_m": 0.0,
        "sampling": {"temperature": 1.0, "top_p": 1.0},
        "concurrency": 4,
        "max_attempts": 2,
        "timeout_s": 5,
        "max_new_tokens": 64,
    }
    path = folder / "models_stub.yaml"
    path.write_text(yaml.safe_dump({"models": [record]}), encoding="utf-8")
    return path


async def _no_wait(seconds: float) -> None:
    """The runner's backoff without its wall-clock wait (the retries themselves still happen)."""
    await asyncio.sleep(0)


def run_paths(out: Path, faults: bool) -> dict[str, dict]:
    """Each path's per-item answers and statistics (or the error that stopped it), a fresh stub each."""
    os.environ.setdefault(STUB_KEY_ENV, "stub-key")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("INSPECT_CACHE_DIR", str(out / "inspect-cache"))
    for old in ("inspect-logs", "inspect-cache", "processed"):  # a rerun starts afresh (one log per run)
        shutil.rmtree(out / old, ignore_errors=True)
    (out / "store.sqlite").unlink(missing_ok=True)
    data_dir = write_run(out / "processed", faults)
    samples = report_samples(*read_run(data_dir))
    results: dict[str, dict] = {}
    for path in ("runner", "inspect", "lm-eval"):
        with ThreadedStub() as server:
            server.stub.__class__ = VariedStub
            registry = stub_registry(out, server.base_url)
            try:
                if path == "runner":
                    openai_backend.sleep, saved = _no_wait, openai_backend.sleep
                    openai_backend.reset_breakers()
                    try:
                        replies = pipeline_replies(registry_record("stub", registry), samples, out / "store.sqlite")
                    finally:
                        openai_backend.sleep = saved
                    answers, stats, status = (
                        item_answers(samples, replies, "stub"),
                        herding_statistics(samples, replies, "stub"),
                        "success",
                    )
                elif path == "inspect":
                    answers, stats, status = inspect_results(data_dir, registry, server.base_url, out / "inspect-logs")
                else:
                    answers, stats = lm_eval_results(data_dir, server.base_url)
                    status = "success"
                results[path] = {"status": status, "answers": answers, "statistics": stats}
            except Exception as exc:  # noqa: BLE001 -- a path that stops is a result of the run, reported with its cause
                results[path] = {
                    "status": f"stopped: {type(exc).__name__}: {str(exc)[:200]}",
                    "answers": {},
                    "statistics": {},
                }
    return results


def summary_table(results: dict[str, dict]) -> pd.DataFrame:
    """Statistic x path (empty where a path does not report it), with whether every path that
    reports it gives the same number (==)."""
    names = sorted(set().union(*(r["statistics"] for r in results.values())))
    table = pd.DataFrame(
        {p: [r["statistics"].get(n) for n in names] for p, r in results.items()}, index=names, dtype=object
    )
    table["equal"] = [len({v for v in table.loc[n] if v is not None}) == 1 for n in names]
    return table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("runs/harness-stub"))
    ap.add_argument("--faults", action="store_true", help="a 500 that heals and a call that never succeeds")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    results = run_paths(args.out, args.faults)
    table = summary_table(results)
    same_answers = len({json.dumps(r["answers"], sort_keys=True) for r in results.values() if r["answers"]}) == 1
    (args.out / "summary.json").write_text(json.dumps(results, indent=1, sort_keys=True), encoding="utf-8")
    lines = [
        f"# One stub run through three paths ({'with' if args.faults else 'without'} injected failures)",
        "",
        *(f"- {p}: {r['status']}, {len(r['answers'])} items" for p, r in results.items()),
        f"- per-item answers equal across the paths that finished: {same_answers}",
        "",
        table.fillna("").to_markdown(),
        "",
    ]
    (args.out / "summary.md").write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))
    return 0 if same_answers and bool(table["equal"].all()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
