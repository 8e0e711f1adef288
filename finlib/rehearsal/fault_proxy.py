"""A fault-injecting HTTP proxy in front of a real OpenAI-compatible server (llama.cpp, vLLM).

The stub server (`finlib.rehearsal.stub_server`) tests the client against invented answers; this proxy
puts the same seeded faults (`FaultPlan`: stalls, resets, 429/5xx, truncated or invalid bodies,
missing fields, empty choices) between the client and a real model, and keeps the same books
(requests and attempts per prompt, answers delivered, usage as reported by the upstream server).
An upstream that is down (killed, restarting) answers 502 here, which the client retries.
`upstream` can be changed while running (a restarted server on a new port). Loopback only.
"""
from __future__ import annotations

import httpx  # at import time: a lazy import from the proxy's thread races the client's own

from finlib.rehearsal.stub_server import FaultPlan, StubServer, ThreadedStub


class FaultProxy(StubServer):
    """StubServer whose answers come from `upstream` (an OpenAI base URL ending in /v1)."""

    def __init__(self, upstream: str, faults: FaultPlan | None = None, timeout_s: float = 600.0):
        super().__init__(None, faults)
        self.upstream = upstream.rstrip("/")
        self.timeout_s = timeout_s
        self.upstream_errors = 0
        self._http = None

    async def _answer(self, req: dict, text: str, fault: str | None) -> bytes:
        if fault in ("missing", "empty"):  # malformed bodies are made here, without asking upstream
            return await super()._answer(req, text, fault)
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=self.timeout_s)
        try:
            resp = await self._http.post(f"{self.upstream}/chat/completions", json=req)
        except httpx.HTTPError as exc:
            self.upstream_errors += 1
            return self._respond(502, {"error": {"message": f"upstream unavailable: {type(exc).__name__}"}})
        try:
            body = resp.json()
        except ValueError:
            body = None
        if resp.status_code == 200 and isinstance(body, dict) and body.get("choices"):
            self.answers[text] += 1
            usage = body.get("usage") or {}
            for k in self.usage:
                self.usage[k] += int(usage.get(k) or 0)
        return self._respond(resp.status_code, resp.content if body is None else body)

    async def stop(self) -> None:
        if self._http is not None:
            await self._http.aclose()
        await super().stop()


class ThreadedProxy(ThreadedStub):
    """The proxy on its own event loop in a daemon thread: `with ThreadedProxy(url, plan) as p:`."""

    def __init__(self, upstream: str, faults: FaultPlan | None = None, timeout_s: float = 600.0):
        super().__init__()
        self.stub = FaultProxy(upstream, faults, timeout_s)


__all__ = ["FaultProxy", "ThreadedProxy", "FaultPlan"]
