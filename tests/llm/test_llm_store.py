"""Response store: content keys, resume, dedup, errors vs answers, durability across SIGKILL."""
from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from llm_helpers import STUB_SPEC, make_request

from finlib.llm.store import Request, ResponseStore, Result, make_key
from finlib.rehearsal.stub_server import ThreadedStub

ROOT = Path(__file__).resolve().parents[2]
MSGS = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
PARAMS = {"temperature": 1.0, "top_p": 1.0}


def ok(key: str, text: str = "answer") -> Result:
    return Result(key=key, model="m", backend="openai", mode="generate", status="ok", raw_text=text,
                  input_tokens=10, output_tokens=5, cost_usd=0.01)


def err(key: str, reason: str = "HTTP 500") -> Result:
    return Result(key=key, model="m", backend="openai", mode="generate", status="error", error=reason)


def test_key_depends_on_every_component_but_not_dict_order():
    base = make_key("openai", "m", MSGS, PARAMS, "v1", "generate")
    assert base == make_key("openai", "m", MSGS, {"top_p": 1.0, "temperature": 1.0}, "v1", "generate")
    variants = [
        make_key("local", "m", MSGS, PARAMS, "v1", "generate"),
        make_key("openai", "m2", MSGS, PARAMS, "v1", "generate"),
        make_key("openai", "m", [{"role": "user", "content": "s\n\nu"}], PARAMS, "v1", "generate"),
        make_key("openai", "m", MSGS, {**PARAMS, "temperature": 0.7}, "v1", "generate"),
        make_key("openai", "m", MSGS, {**PARAMS, "max_new_tokens": 8}, "v1", "generate"),
        make_key("openai", "m", MSGS, PARAMS, "v2", "generate"),
        make_key("openai", "m", MSGS, PARAMS, "v1", "score"),
    ]
    assert len({base, *variants}) == len(variants) + 1


def test_answers_resume_and_dedup(tmp_path):
    path = tmp_path / "r.sqlite"
    with ResponseStore(path) as s:
        s.put_many([ok("a"), ok("b")])
        s.put_many([ok("a", "again")])  # a second answer for the same key never replaces the first
    with ResponseStore(path) as s:  # reopened: what was committed is there
        assert s.answered(["a", "b", "c"]) == {"a", "b"}
        assert s.get(["a"])["a"]["raw_text"] == "answer"
        assert s.count() == 2


def test_errors_are_not_answers_and_are_replaced_by_a_later_answer(tmp_path):
    with ResponseStore(tmp_path / "r.sqlite") as s:
        s.put_many([err("k", "HTTP 500")])
        assert s.answered(["k"]) == set()          # retried on the next run
        assert s.get(["k"])["k"]["status"] == "error"
        s.put_many([err("k", "timeout")])
        row = s.get(["k"])["k"]
        assert row["error"] == "timeout" and row["n_failures"] == 2
        s.put_many([ok("k")])
        assert s.answered(["k"]) == {"k"}
        s.put_many([err("k", "late failure")])            # an answer is never overwritten by an error
        row = s.get(["k"])["k"]
        assert row["status"] == "ok" and row["raw_text"] == "answer" and row["error"] is None


def test_store_uses_wal_and_full_sync(tmp_path):
    with ResponseStore(tmp_path / "r.sqlite") as s:
        assert s.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert s.conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


CHILD = textwrap.dedent("""
    import asyncio, sys
    from finlib.llm.store import ResponseStore, Result
    store = ResponseStore(sys.argv[1])
    i = 0
    while True:  # commits one answer at a time until killed
        key = f"k{i:06d}"
        store.put_many([Result(key=key, model="m", backend="openai", mode="generate", status="ok", raw_text="x" * 500)])
        print(key, flush=True)
        i += 1
""")


def test_committed_answers_survive_sigkill(tmp_path):
    path = tmp_path / "r.sqlite"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    proc = subprocess.Popen([sys.executable, str(script), str(path)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    reported = [proc.stdout.readline().strip() for _ in range(200)]
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    with ResponseStore(path) as s:
        assert s.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert s.answered(reported) == set(reported)  # every key reported done is on disk
        assert s.count() >= len(reported)


CHILD_CLIENT = textwrap.dedent("""
    import asyncio, sys, dataclasses
    from finlib.llm.store import ResponseStore
    from finlib.llm.openai_backend import run_openai
    sys.path.insert(0, sys.argv[3]); sys.path.insert(0, str(__import__("pathlib").Path(sys.argv[3]).parent))
    from test_llm_store import plan, SPEC

    class Printer:
        def update(self, n, tokens, cost, errors=0):
            print(n, flush=True)

    spec = dataclasses.replace(SPEC, base_url=sys.argv[2])
    asyncio.run(run_openai(spec, plan(), ResponseStore(sys.argv[1]), progress=Printer()))
""")

SPEC = dataclasses.replace(STUB_SPEC, concurrency=4, max_attempts=3, timeout_s=10)


def plan(n: int = 60) -> list[Request]:
    return [make_request(f"report {i} [[sleepx1:0.05]]") for i in range(n)]


def test_crash_mid_run_loses_nothing_and_never_resends(tmp_path, monkeypatch):
    """A client killed mid-run: every committed answer is kept, and the rerun sends only the rest."""
    from finlib.llm.openai_backend import run_openai

    path = tmp_path / "r.sqlite"
    script = tmp_path / "child.py"
    script.write_text(CHILD_CLIENT)
    monkeypatch.setenv("STUB_TEST_KEY", "dummy")
    with ThreadedStub() as stub:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen([sys.executable, str(script), str(path), stub.base_url, str(Path(__file__).parent)],
                                stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env)
        committed = 0
        while committed < 12:
            line = proc.stdout.readline()
            assert line, "child exited before committing anything"
            committed += int(line)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        requests = plan()
        keys = [r.key for r in requests]
        with ResponseStore(path) as s:
            done = s.answered(keys)
            assert len(done) >= committed
            assert len(done) < len(keys), "the child finished before it was killed; slow the stub down"
            sent_before = dict(stub.stub.attempts)
            pending = [r for r in requests if r.key not in done]
            spec = dataclasses.replace(SPEC, base_url=stub.base_url)
            asyncio.run(run_openai(spec, pending, s))
            assert s.answered(keys) == set(keys)
        for r in requests:
            text = r.messages[-1]["content"]
            resent = stub.stub.attempts[text] - sent_before.get(text, 0)
            if r.key in done:
                assert resent == 0, f"{text!r} was answered before the crash but sent again"
            else:
                assert resent >= 1
