"""A real server end to end (`make test-integration`; skipped in `make test`): the embedded
Qwen2.5-Coder-0.5B behind llama.cpp's OpenAI-compatible server, with the fault proxy in front
(`finlib.rehearsal.fault_proxy`) keeping the books.

- the server is SIGKILLed mid-run and restarted (on a new port): the run resumes without losing
  or re-sending answered calls;
- a stalling path (timeouts) and malformed bodies (truncated, not JSON, missing fields, empty
  choices) are retried, and every answer the client stored is one the server delivered.
Needs the `embedded` extra (xllamacpp + the GGUF chunk packages); ~1-3 min on 2 cores."""
from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from finlib.llm.engine import ChatItem, chat
from finlib.llm.store import ResponseStore
from finlib.rehearsal.fault_proxy import ThreadedProxy
from finlib.rehearsal.stub_server import FaultPlan

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    os.environ.get("FINLIB_INTEGRATION") != "1",
    reason="real llama.cpp server tests: run `make test-integration` (FINLIB_INTEGRATION=1)")]
MODEL = "qwen2.5-coder-0.5b"


@pytest.fixture(scope="module")
def model_spec(repo_root: Path):
    pytest.importorskip("xllamacpp", reason="needs the embedded extra: pip install -e '.[embedded]'")
    from finlib.llm.registry import load_registry

    return load_registry(repo_root / "params" / "models.yaml")[MODEL]


def _server(spec, repo_root: Path, log_dir: Path):
    from finlib.llm.llamacpp import ServerConfig, gguf_path, serve

    cfg = ServerConfig(model=gguf_path(spec, repo_root / "data" / "interim" / "models"), n_parallel=2, threads=2,
                       ctx_per_slot=1024, alias=spec.name)
    return serve(cfg, log_dir)


def _server_pid(base_url: str) -> int:
    """The pid of the llama.cpp server this test started on that port (from /proc)."""
    port = base_url.rsplit(":", 1)[1].split("/")[0]
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"finlib.llm.llamacpp" in cmd and port.encode() in cmd:
                return int(d.name)
    raise RuntimeError(f"no llama.cpp server process on port {port}")


def _items(n: int, tag: str) -> list[ChatItem]:
    return [ChatItem(f"{tag}{i}", [{"role": "user", "content": f"Reply with one word, bullish or bearish ({tag} {i})."}],
                     "reliability-v1") for i in range(n)]


def _client_spec(spec, base_url: str, **fields):
    from finlib.llm.llamacpp import served_spec

    return dataclasses.replace(served_spec(spec, base_url), concurrency=2, **fields)


def test_server_killed_mid_run_then_restarted(model_spec, repo_root, tmp_path):
    items = _items(8, "kill")
    with _server(model_spec, repo_root, tmp_path) as url, ThreadedProxy(url) as proxy, \
            ResponseStore(tmp_path / "r.sqlite") as store:
        spec = _client_spec(model_spec, proxy.base_url, max_attempts=3, timeout_s=120.0)
        killed = {}

        def killer() -> None:
            while sum(proxy.stub.answers.values()) < 2:
                time.sleep(0.05)
            killed["pid"] = _server_pid(url)
            os.kill(killed["pid"], signal.SIGKILL)

        t = threading.Thread(target=killer, daemon=True)
        t.start()
        first = chat(spec, items, store, max_new_tokens=4, progress=False).set_index("id")
        t.join(5)
        assert killed, "the server was never killed"
        ok1 = first[first["status"] == "ok"]
        assert 2 <= len(ok1) < len(items)
        assert first.loc[first["status"] == "error", "error"].str.contains("HTTP 502|connection").all()
        attempts1 = dict(proxy.stub.attempts)
        with _server(model_spec, repo_root, tmp_path) as url2:
            proxy.stub.upstream = url2.rstrip("/")
            second = chat(spec, items, store, max_new_tokens=4, progress=False).set_index("id")
        assert (second["status"] == "ok").all()
        assert second.loc[ok1.index, "cached"].all()  # answered calls were not sent again
        assert (second.loc[ok1.index, "raw_text"] == ok1["raw_text"]).all()
        resent = {t for t, n in proxy.stub.attempts.items() if n > attempts1.get(t, 0)}
        assert len(resent) == len(items) - len(ok1)
        assert sum(proxy.stub.answers.values()) == len(items)  # each answer delivered once, none lost


# The client timeout must stay far above a real answer's latency (a 4-token answer took > 20 s on
# the loaded 2-core machine): an answer the server delivers after the client gave up would be
# booked by the proxy but never stored, and the books would no longer tie out.
@pytest.mark.parametrize("kinds, timeout_s, n", [
    (["timeout"], 60.0, 4),
    (["truncated", "invalid", "missing", "empty"], 120.0, 6),
], ids=["stall", "malformed"])
def test_stalls_and_malformed_bodies_are_retried_and_accounted(model_spec, repo_root, tmp_path, kinds, timeout_s, n):
    plan = FaultPlan(rate=0.4, seed=15, weights={k: 1.0 for k in kinds}, hang_s=3 * timeout_s)
    items = _items(n, kinds[0])
    with _server(model_spec, repo_root, tmp_path) as url, ThreadedProxy(url, plan) as proxy, \
            ResponseStore(tmp_path / "r.sqlite") as store:
        spec = _client_spec(model_spec, proxy.base_url, max_attempts=4, timeout_s=timeout_s)
        out = chat(spec, items, store, max_new_tokens=4, progress=False)
        books = proxy.stub.stats()
    assert sum(books["faults"].values()) > 0 and set(books["faults"]) <= set(kinds)
    ok = out[out["status"] == "ok"]
    # every request answered or failed with its reason; every stored answer is one the server delivered
    assert out["status"].isin(["ok", "error"]).all()
    assert len(ok) == books["answers"]
    assert int(ok["input_tokens"].sum()) == books["usage"]["prompt_tokens"]
    assert int(ok["output_tokens"].sum()) == books["usage"]["completion_tokens"]
    errs = out.loc[out["status"] == "error", "error"]
    assert errs.str.contains("timeout|malformed|connection").all()
    for n in proxy.stub.attempts.values():  # retried only until answered
        assert n <= 4
