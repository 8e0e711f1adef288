"""OpenAI Batch API (half price, 24 h window) feeding the same response store.

write -> submit -> poll -> collect. Each line's `custom_id` is the store key, so collected
answers land exactly where the synchronous backend would have put them, and a rerun skips
them. Submitted batch ids are recorded in a small ledger (`<workdir>/<model>.batches.json`)
*before* polling, so a crash between submit and collect resumes by collecting the batch
already paid for instead of submitting the same calls again.
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from finlib.core.artifacts import write_jsonl
from finlib.llm.openai_backend import Budget, BudgetExceeded, redact, request_kwargs, result_from_completion
from finlib.llm.spec import ModelSpec
from finlib.llm.store import Request, ResponseStore, Result

ENDPOINT = "/v1/chat/completions"
MAX_REQUESTS_PER_BATCH = 50_000  # OpenAI's per-batch limit
BATCH_DISCOUNT = 0.5
TERMINAL = {"completed", "failed", "expired", "cancelled"}


def batch_lines(spec: ModelSpec, requests: Iterable[Request]) -> list[dict]:
    """One Batch API line per request: custom_id = store key, body = the exact chat request."""
    return [{"custom_id": r.key, "method": "POST", "url": ENDPOINT, "body": request_kwargs(spec, r)}
            for r in requests]


def write_batch_files(spec: ModelSpec, requests: list[Request], folder: Path,
                      max_requests: int = MAX_REQUESTS_PER_BATCH) -> list[Path]:
    """The JSONL input files (split at the per-batch request limit), written atomically."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(0, len(requests), max_requests):
        path = folder / f"{spec.name}.part{i // max_requests:04d}.jsonl"
        paths.append(write_jsonl(path, batch_lines(spec, requests[i:i + max_requests])))
    return paths


def submit(client, path: Path, metadata: dict | None = None) -> str:
    """Upload one JSONL file and create its batch; returns the batch id."""
    with open(path, "rb") as fh:
        uploaded = client.files.create(file=fh, purpose="batch")
    batch = client.batches.create(input_file_id=uploaded.id, endpoint=ENDPOINT, completion_window="24h",
                                  metadata=metadata or {})
    return batch.id


def poll(client, batch_id: str, interval_s: float = 60.0, timeout_s: float | None = None,
         sleep: Callable[[float], None] = time.sleep):
    """Wait until the batch reaches a terminal status (completed/failed/expired/cancelled)."""
    t0 = time.monotonic()
    while True:
        batch = client.batches.retrieve(batch_id)
        if batch.status in TERMINAL:
            return batch
        if timeout_s is not None and time.monotonic() - t0 > timeout_s:
            raise TimeoutError(f"batch {batch_id} still '{batch.status}' after {timeout_s} s; rerun to keep polling")
        sleep(interval_s)


def _file_lines(client, file_id: str | None) -> list[dict]:
    if not file_id:
        return []
    text = client.files.content(file_id).text
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def parse_line(line: dict, spec: ModelSpec, by_key: dict[str, Request], secret: str | None) -> Result | None:
    """A Result for one output/error line (None when its key is not one of ours)."""
    req = by_key.get(line.get("custom_id"))
    if req is None:
        return None
    response = line.get("response") or {}
    body = response.get("body") or {}
    if response.get("status_code") == 200 and body.get("choices"):
        return result_from_completion(req, spec, body, BATCH_DISCOUNT)
    error = line.get("error") or body.get("error") or {}
    reason = f"batch: HTTP {response.get('status_code')}: {error.get('message', error) if isinstance(error, dict) else error}"
    return Result.for_request(req, status="error", error=redact(reason, secret)[:1000])


def collect(client, batch, spec: ModelSpec, by_key: dict[str, Request], store: ResponseStore,
            secret: str | None = None) -> dict:
    """Store every answer and error line of a finished batch (one transaction)."""
    results = [r for line in _file_lines(client, batch.output_file_id) + _file_lines(client, batch.error_file_id)
               if (r := parse_line(line, spec, by_key, secret)) is not None]
    store.put_many(results)
    return {"ok": sum(r.status == "ok" for r in results), "error": sum(r.status == "error" for r in results),
            "cost_usd": sum(r.cost_usd for r in results), "status": batch.status}


def _ledger(workdir: Path, spec: ModelSpec) -> Path:
    return workdir / f"{spec.name}.batches.json"


def _save_ledger(path: Path, entries: list[dict]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(entries, indent=1))
    os.replace(tmp, path)


def run_batch(spec: ModelSpec, requests: list[Request], store: ResponseStore, workdir: Path, client=None,
              interval_s: float = 60.0, timeout_s: float | None = None, sleep=time.sleep,
              budget: Budget | None = None, progress=None) -> dict:
    """Collect batches already submitted, submit what is still unanswered, poll, collect.

    With a `budget`, the worst case of what would be submitted (estimated input + max output
    tokens at the batch price) must fit before anything is submitted.
    """
    from openai import OpenAI

    secret = spec.api_key()
    client = client or OpenAI(api_key=secret, base_url=spec.base_url, max_retries=5, timeout=spec.timeout_s)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    by_key = {r.key: r for r in requests}
    ledger_path = _ledger(workdir, spec)
    ledger = json.loads(ledger_path.read_text()) if ledger_path.is_file() else []
    counts = {"submitted": 0, "ok": 0, "error": 0, "cost_usd": 0.0}
    in_flight = {k for e in ledger if not e.get("collected") for k in e["keys"]}
    answered = store.answered(list(by_key))  # once: one indexed lookup per key, not per key pair
    pending = [r for r in requests if r.key not in answered and r.key not in in_flight]
    reserved = sum(spec.cost(r.input_tokens_est, int(r.params.get("max_new_tokens", 0)), BATCH_DISCOUNT)
                   for r in pending)
    if budget is not None and not budget.reserve(reserved):
        raise BudgetExceeded(
            f"model '{spec.name}': a batch of {len(pending)} calls could cost up to ${reserved:.2f}, over "
            f"inference.budget_usd={budget.limit:.2f} (spent {budget.spent:.4f} this run). Nothing was submitted.")
    for path in write_batch_files(spec, pending, workdir / "input") if pending else []:
        keys = [json.loads(line)["custom_id"] for line in path.read_text().splitlines()]
        batch_id = submit(client, path, {"model": spec.name})
        ledger.append({"batch_id": batch_id, "keys": keys, "collected": False})
        _save_ledger(ledger_path, ledger)  # recorded before waiting: a crash never resubmits it
        counts["submitted"] += len(keys)
    for entry in ledger:
        if entry.get("collected"):
            continue
        batch = poll(client, entry["batch_id"], interval_s, timeout_s, sleep)
        got = collect(client, batch, spec, by_key, store, secret)
        if progress is not None:
            progress.update(got["ok"] + got["error"], 0, got["cost_usd"], got["error"])
        counts["ok"] += got["ok"]
        counts["error"] += got["error"]
        counts["cost_usd"] += got["cost_usd"]
        entry["collected"] = True
        entry["status"] = got["status"]
        _save_ledger(ledger_path, ledger)
    if budget is not None:
        budget.settle(reserved, counts["cost_usd"])
    return counts
