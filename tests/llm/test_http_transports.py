"""Every HTTP transport (the raw aiohttp client, the default here; the OpenAI SDK over aiohttp; the SDK
over httpx) must name a failure the same way: the error text a row keeps and the circuit breaker's
kind depend on it. The SDK's aiohttp transport reports every connection error as a connect timeout;
these cases keep a refused connection, a reset and a real timeout apart whatever the transport."""
from __future__ import annotations

import asyncio
import dataclasses
import random
import socket

import pytest
from llm_helpers import STUB_SPEC
from llm_helpers import make_request as req

from finlib.llm.openai_backend import HTTP_TRANSPORTS, RateLimiter, call_with_retries, lasting_kind, make_client
from finlib.rehearsal.stub_server import FaultPlan, ThreadedStub


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _one_call(spec, transport: str, text: str):
    """One attempt through the transport: the stored reason and the breaker's kind of the raised error."""
    client = make_client(spec, transport)
    raised: list[Exception] = []
    original = client.post

    async def post(*args, **kwargs):
        try:
            return await original(*args, **kwargs)
        except Exception as exc:
            raised.append(exc)
            raise

    client.post = post
    try:
        res = await call_with_retries(client, spec, req(text, spec), RateLimiter(), rng=random.Random(0))
    finally:
        await client.close()
    return res, (lasting_kind(raised[-1]) if raised else None)


@pytest.mark.parametrize("transport", HTTP_TRANSPORTS)
@pytest.mark.parametrize("fault, reason, kind", [
    ("reset", "connection error", None),
    ("timeout", "timeout", "timeout"),
])
def test_a_fault_is_named_alike_by_both_transports(transport, fault, reason, kind, monkeypatch):
    monkeypatch.setenv("STUB_TEST_KEY", "k")
    plan = FaultPlan(rate=1.0, weights={fault: 1.0}, hang_s=2.0)
    with ThreadedStub(faults=plan) as stub:
        spec = dataclasses.replace(STUB_SPEC, base_url=stub.base_url, max_attempts=1, timeout_s=0.5)
        res, got_kind = asyncio.run(_one_call(spec, transport, f"{fault} through {transport}"))
    assert res.status == "error" and res.error.startswith(reason), res.error
    assert got_kind == kind


@pytest.mark.parametrize("transport", HTTP_TRANSPORTS)
def test_a_refused_connection_is_named_alike_by_both_transports(transport, monkeypatch):
    monkeypatch.setenv("STUB_TEST_KEY", "k")
    spec = dataclasses.replace(STUB_SPEC, base_url=f"http://127.0.0.1:{_dead_port()}/v1", max_attempts=1)
    res, kind = asyncio.run(_one_call(spec, transport, "nobody listens"))
    assert res.status == "error" and res.error.startswith("connection error") and "refused" in res.error, res.error
    assert kind == "refused"


@pytest.mark.parametrize("transport", HTTP_TRANSPORTS)
def test_an_answer_reads_alike_through_both_transports(transport, monkeypatch):
    monkeypatch.setenv("STUB_TEST_KEY", "k")
    with ThreadedStub() as stub:
        spec = dataclasses.replace(STUB_SPEC, base_url=stub.base_url, max_attempts=1)
        res, kind = asyncio.run(_one_call(spec, transport, "a plain question"))
    assert res.status == "ok" and res.raw_text and res.input_tokens > 0 and kind is None


def test_an_unknown_transport_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown HTTP transport 'curl'"):
        make_client(STUB_SPEC, "curl")


@pytest.mark.parametrize("environ, expected", [
    ({}, "raw"),
    ({"HTTPS_PROXY": "http://proxy.example:3128"}, "httpx"),
    ({"http_proxy": "http://proxy.example:3128"}, "httpx"),
    ({"ALL_PROXY": ""}, "raw"),
])
def test_a_proxy_in_the_environment_selects_httpx(environ, expected):
    """The aiohttp connection pools made here ignore proxy variables; behind a proxy the client uses httpx, which reads them."""
    from finlib.llm.openai_backend import default_transport

    assert default_transport(environ) == expected
