"""OpenAI Batch API flow against an in-memory fake client (no network)."""
from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest
from llm_helpers import STUB_SPEC, make_request

from finlib.llm.batch_api import BATCH_DISCOUNT, run_batch, write_batch_files
from finlib.llm.store import ResponseStore

SPEC = dataclasses.replace(STUB_SPEC, name="gpt-test", model_id="gpt-test", price_input_per_m=2.0,
                           price_output_per_m=8.0, base_url="https://api.example.invalid/v1",
                           api_key_env="BATCH_TEST_KEY", max_tokens_param="max_completion_tokens")


class FakeClient:
    """files.create / files.content / batches.create / batches.retrieve, answering every line
    except those whose text contains FAIL (an error line), after two polls."""

    def __init__(self):
        self.files_store: dict[str, str] = {}
        self.batches_store: dict[str, dict] = {}
        self.polls = 0
        self.files = SimpleNamespace(create=self._file_create, content=self._file_content)
        self.batches = SimpleNamespace(create=self._batch_create, retrieve=self._batch_retrieve)

    def _file_create(self, file, purpose):
        assert purpose == "batch"
        fid = f"file-{len(self.files_store)}"
        self.files_store[fid] = file.read().decode()
        return SimpleNamespace(id=fid)

    def _file_content(self, fid):
        return SimpleNamespace(text=self.files_store[fid])

    def _batch_create(self, input_file_id, endpoint, completion_window, metadata):
        assert endpoint == "/v1/chat/completions" and completion_window == "24h"
        bid = f"batch-{len(self.batches_store)}"
        out, err = [], []
        for line in self.files_store[input_file_id].splitlines():
            req = json.loads(line)
            assert req["body"]["max_completion_tokens"] == 16 and req["body"]["temperature"] == 1.0
            if "FAIL" in req["body"]["messages"][-1]["content"]:
                err.append({"custom_id": req["custom_id"], "response": {"status_code": 400, "body": {
                    "error": {"message": "bad"}}}})
            else:
                out.append({"custom_id": req["custom_id"], "response": {"status_code": 200, "body": {
                    "choices": [{"message": {"content": '{"answer": "neutral", "reason": "b"}'}}],
                    "usage": {"prompt_tokens": 1000, "completion_tokens": 100}}}})
        self.files_store[f"out-{bid}"] = "\n".join(json.dumps(x) for x in out)
        self.files_store[f"err-{bid}"] = "\n".join(json.dumps(x) for x in err)
        self.batches_store[bid] = {"status": "validating"}
        return SimpleNamespace(id=bid)

    def _batch_retrieve(self, bid):
        self.polls += 1
        status = "completed" if self.polls > 2 else "in_progress"
        return SimpleNamespace(id=bid, status=status, output_file_id=f"out-{bid}", error_file_id=f"err-{bid}")


def reqs(texts):
    return [make_request(t, SPEC) for t in texts]


def test_jsonl_lines_carry_store_keys(tmp_path):
    requests = reqs(["a", "b", "c"])
    paths = write_batch_files(SPEC, requests, tmp_path, max_requests=2)
    lines = [json.loads(line) for p in paths for line in p.read_text().splitlines()]
    assert len(paths) == 2 and [line["custom_id"] for line in lines] == [r.key for r in requests]
    assert all(line["url"] == "/v1/chat/completions" and line["method"] == "POST" for line in lines)


def test_submit_poll_collect_into_store_and_never_resubmit(tmp_path, monkeypatch):
    monkeypatch.setenv("BATCH_TEST_KEY", "dummy")
    client = FakeClient()
    requests = reqs(["r1", "r2", "r3 FAIL"])
    with ResponseStore(tmp_path / "r.sqlite") as store:
        counts = run_batch(SPEC, requests, store, tmp_path / "work", client=client, interval_s=0, sleep=lambda s: None)
        assert counts == {"submitted": 3, "ok": 2, "error": 1,
                          "cost_usd": pytest.approx(2 * BATCH_DISCOUNT * (1000 * 2.0 + 100 * 8.0) / 1e6)}
        assert store.answered([r.key for r in requests]) == {requests[0].key, requests[1].key}
        row = store.get([requests[0].key])[requests[0].key]
        assert row["cost_usd"] == pytest.approx(BATCH_DISCOUNT * (1000 * 2.0 + 100 * 8.0) / 1e6)
        assert "HTTP 400" in store.get([requests[2].key])[requests[2].key]["error"]
        # rerun: answered keys are skipped, the failed one is retried in a new batch
        n_batches = len(client.batches_store)
        counts = run_batch(SPEC, requests, store, tmp_path / "work", client=client, interval_s=0, sleep=lambda s: None)
        assert counts["submitted"] == 1 and len(client.batches_store) == n_batches + 1


def test_crash_after_submit_collects_instead_of_resubmitting(tmp_path, monkeypatch):
    monkeypatch.setenv("BATCH_TEST_KEY", "dummy")
    client = FakeClient()
    requests = reqs(["x1", "x2"])

    def crash(_):
        raise KeyboardInterrupt  # the process dies while polling

    with ResponseStore(tmp_path / "r.sqlite") as store:
        with pytest.raises(KeyboardInterrupt):
            run_batch(SPEC, requests, store, tmp_path / "work", client=client, interval_s=0, sleep=crash)
        assert len(client.batches_store) == 1 and store.count() == 0
        counts = run_batch(SPEC, requests, store, tmp_path / "work", client=client, interval_s=0, sleep=lambda s: None)
        assert {k: counts[k] for k in ("submitted", "ok", "error")} == {"submitted": 0, "ok": 2, "error": 0}
        assert len(client.batches_store) == 1  # collected the paid batch, nothing resubmitted


def test_answered_is_looked_up_once_per_run(tmp_path, monkeypatch):
    """The store is asked once for all keys, not once per request (quadratic on a 670k-call grid)."""
    monkeypatch.setenv("BATCH_TEST_KEY", "dummy")
    requests = reqs([f"q{i}" for i in range(50)])
    with ResponseStore(tmp_path / "r.sqlite") as store:
        calls = []
        original = store.answered
        monkeypatch.setattr(store, "answered", lambda keys: calls.append(len(keys)) or original(keys))
        run_batch(SPEC, requests, store, tmp_path / "work", client=FakeClient(), interval_s=0, sleep=lambda s: None)
    assert calls == [50]


def test_length_finish_is_recorded_as_truncated_output(tmp_path, monkeypatch):
    from finlib.llm.batch_api import parse_line

    (r,) = reqs(["x"])
    line = {"custom_id": r.key, "response": {"status_code": 200, "body": {
        "choices": [{"message": {"content": '{"answer": "bul'}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 16}}}}
    assert parse_line(line, SPEC, {r.key: r}, None).truncated_output is True
    line["response"]["body"]["choices"][0]["finish_reason"] = "stop"
    assert parse_line(line, SPEC, {r.key: r}, None).truncated_output is False
