"""The raw aiohttp client against the SDK's own client: the same replies and the same faults must leave
the same rows in the store and raise exceptions the engine reads alike (class, message, body, status,
Retry-After). The SDK is the reference: each case runs through both and compares."""
from __future__ import annotations

import asyncio
import dataclasses
import tempfile
from pathlib import Path

import pytest
from llm_helpers import STUB_SPEC
from llm_helpers import make_request as req

from finlib.llm.openai_backend import classify, lasting_kind, make_client, retry_after_s, run_openai
from finlib.llm.raw_client import RawChatClient
from finlib.llm.store import ResponseStore
from finlib.rehearsal.stub_server import FAULT_KINDS, FaultPlan, ThreadedStub

REFERENCE = "aiohttp"  # the SDK's AsyncOpenAI over its aiohttp transport
COMPARED = ("status", "raw_text", "input_tokens", "output_tokens", "cost_usd", "truncated", "error", "attempts",
            "truncated_output", "reasoning_tokens")


def _stored(transport: str, texts: list[str], plan: FaultPlan) -> dict[str, dict]:
    """Every text through stage 03's engine on `transport` against a fresh seeded faulty stub: the store's rows."""
    with ThreadedStub(faults=plan) as stub, tempfile.TemporaryDirectory() as tmp:
        spec = dataclasses.replace(STUB_SPEC, base_url=stub.base_url, max_attempts=3, timeout_s=0.5, concurrency=4)
        requests = [req(t, spec) for t in texts]
        with ResponseStore(Path(tmp) / "s.sqlite") as store:
            client = make_client(spec, transport)
            try:
                asyncio.run(run_openai(spec, requests, store, client=client, backoff_base_s=0.001,
                                       backoff_cap_s=0.002, seed=0))
            finally:
                asyncio.run(client.close())
            rows = store.get([r.key for r in requests])
    return {k: {f: v.get(f) for f in COMPARED} for k, v in rows.items()}


def test_seeded_faults_leave_the_same_rows_through_both_clients(monkeypatch):
    monkeypatch.setenv("STUB_TEST_KEY", "k")
    kinds = [k for k in FAULT_KINDS if k not in ("slow",)]
    plan = FaultPlan(rate=0.5, seed=7, weights={k: 1.0 for k in kinds}, retry_after_s=0.01, hang_s=1.0)
    texts = [f"question {i}" for i in range(60)] + ["[[length]] cut", "[[400]] refused", "[[nomodel]] who",
                                                     "[[context]] too long", "[[quota]] spent"]
    raw, sdk = _stored("raw", texts, plan), _stored(REFERENCE, texts, plan)
    assert raw.keys() == sdk.keys() and len(raw) == len(texts)
    differ = {k: (raw[k], sdk[k]) for k in raw if raw[k] != sdk[k]}
    assert not differ, differ
    statuses = {r["status"] for r in raw.values()}
    assert statuses == {"ok", "error"}  # the plan produced both: the comparison covered failures


async def _raised(client, text: str, spec) -> Exception | dict:
    try:
        return await client.post("/chat/completions", body={"model": spec.model_id,
                                                             "messages": [{"role": "user", "content": text}]},
                                 cast_to=dict)
    except Exception as exc:  # noqa: BLE001 -- the exception is what is compared
        return exc
    finally:
        await client.close()


@pytest.mark.parametrize("text", ["[[429x1:3]] later", "[[400]] no", "[[403]] no", "[[404]] no", "[[502]] gone",
                                  "[[quota]] spent", "[[ratelimit]] slow down", "[[nomodel]] who", "[[context]] long"])
def test_a_status_error_is_the_sdks_own(text, monkeypatch):
    monkeypatch.setenv("STUB_TEST_KEY", "k")
    got = {}
    for transport in ("raw", REFERENCE):
        with ThreadedStub() as stub:
            spec = dataclasses.replace(STUB_SPEC, base_url=stub.base_url)
            got[transport] = asyncio.run(_raised(make_client(spec, transport), text, spec))
    raw, sdk = got["raw"], got[REFERENCE]
    assert isinstance(sdk, Exception) and type(raw) is type(sdk)
    assert (raw.status_code, raw.message, raw.body) == (sdk.status_code, sdk.message, sdk.body)
    assert retry_after_s(raw) == retry_after_s(sdk) and lasting_kind(raw) == lasting_kind(sdk)
    assert classify(raw) == classify(sdk)


def test_the_environment_sets_base_url_and_organisation_as_the_sdk_reads_them():
    env = {"OPENAI_BASE_URL": "http://proxy.internal/v1/", "OPENAI_ORG_ID": "org-1", "OPENAI_PROJECT_ID": "p-2"}
    client = RawChatClient("sk-x", None, 5.0, environ=env)
    assert client.base_url == "http://proxy.internal/v1"
    assert client.headers["OpenAI-Organization"] == "org-1" and client.headers["OpenAI-Project"] == "p-2"
    assert RawChatClient("sk-x", "http://h/v1", 5.0, environ=env).base_url == "http://h/v1"
    assert RawChatClient("sk-x", None, 5.0, environ={}).base_url == "https://api.openai.com/v1"


def test_a_non_json_reply_is_text_as_the_sdk_returns_it(monkeypatch):
    """A 200 whose content type is not JSON comes back as its text (the engine calls it malformed)."""
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Html(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            body = b"<html>proxy error</html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Html)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("STUB_TEST_KEY", "k")
    try:
        spec = dataclasses.replace(STUB_SPEC, base_url=f"http://127.0.0.1:{server.server_address[1]}/v1")
        got = {t: asyncio.run(_raised(make_client(spec, t), "hi", spec)) for t in ("raw", REFERENCE)}
    finally:
        server.shutdown()
    assert got["raw"] == got[REFERENCE] == "<html>proxy error</html>"


def test_a_call_through_the_raw_client_imports_no_sdk():
    """The hot path touches no SDK object: a clean interpreter answering one call has not imported openai."""
    import subprocess
    import sys

    code = (
        "import asyncio, dataclasses, os, sys\n"
        "os.environ['STUB_TEST_KEY'] = 'k'\n"
        "from finlib.rehearsal.stub_server import ThreadedStub, stub_spec\n"
        "from finlib.llm.raw_client import RawChatClient\n"
        "with ThreadedStub() as stub:\n"
        "    c = RawChatClient('k', stub.base_url, 5.0)\n"
        "    async def go():\n"
        "        try:\n"
        "            return await c.post('/chat/completions', body={'model': 'm', 'messages': "
        "[{'role': 'user', 'content': 'hi'}]})\n"
        "        finally:\n"
        "            await c.close()\n"
        "    body = asyncio.run(go())\n"
        "print(bool(body['choices']), 'openai' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.split() == ["True", "False"], out.stdout + out.stderr

