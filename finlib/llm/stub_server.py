"""A zero-latency OpenAI-compatible chat-completions stub on 127.0.0.1 (stdlib asyncio only).

Used by the tests (retries, rate limits, secrets) and by benchmarks/bench_client.py. It binds
only to 127.0.0.1, keeps HTTP/1.1 connections alive, and can stop itself after `max_seconds`.
Failures are scripted per prompt by directives in the last message's text, counted per distinct
text, so "fail twice, then answer" is deterministic whatever the concurrency:
  [[429xN:S]]   answer 429 with Retry-After S seconds to the first N attempts
  [[500xN]]     answer 500 to the first N attempts
  [[sleepxN:S]] sleep S seconds before answering the first N attempts (client timeouts)
  [[400]]       always 400 (a non-retryable error)
  [[length]]    answer with finish_reason "length" (output cut at the token limit)
Requests are logged in memory (time, text, attempt); the Authorization header is only checked
(`require_key`), never stored or echoed.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import re
import threading
import time
from collections import Counter

_DIRECTIVE = re.compile(r"\[\[(429|500|sleep|400|length)(?:x(\d+))?(?::([\d.]+))?\]\]")
ANSWER = '{"answer": "bullish", "reason": "stub"}'


class StubServer:
    """State and request handling of the stub; `serve()` runs it on an event loop."""

    def __init__(self, require_key: str | None = None):
        self.require_key = require_key
        self.attempts: Counter = Counter()
        self.log: list[tuple[float, str, int]] = []
        self.n_requests = 0
        self.server: asyncio.base_events.Server | None = None
        self.port = 0
        self.connections: set[asyncio.StreamWriter] = set()
        self.tasks: set[asyncio.Task] = set()

    def _respond(self, status: int, body: dict, extra: dict | None = None) -> bytes:
        payload = json.dumps(body).encode()
        reason = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 429: "Too Many Requests",
                  500: "Internal Server Error"}.get(status, "Error")
        head = [f"HTTP/1.1 {status} {reason}", "Content-Type: application/json",
                f"Content-Length: {len(payload)}", "Connection: keep-alive"]
        head += [f"{k}: {v}" for k, v in (extra or {}).items()]
        return ("\r\n".join(head) + "\r\n\r\n").encode() + payload

    async def handle_request(self, method: str, path: str, headers: dict, body: bytes) -> bytes:
        self.n_requests += 1
        if self.require_key is not None and headers.get("authorization") != f"Bearer {self.require_key}":
            return self._respond(401, {"error": {"message": "invalid api key", "type": "auth"}})
        if method != "POST" or not path.endswith("/chat/completions"):
            return self._respond(404, {"error": {"message": f"no route {method} {path}"}})
        req = json.loads(body or b"{}")
        text = str(req.get("messages", [{}])[-1].get("content", ""))
        self.attempts[text] += 1
        attempt = self.attempts[text]
        self.log.append((time.monotonic(), text[:80], attempt))
        for kind, n, arg in _DIRECTIVE.findall(text):
            n = int(n or 1)
            if kind == "400":
                return self._respond(400, {"error": {"message": "bad request (scripted)"}})
            if attempt <= n and kind == "429":
                return self._respond(429, {"error": {"message": "rate limited (scripted)"}},
                                     {"Retry-After": arg or "1"})
            if attempt <= n and kind == "500":
                return self._respond(500, {"error": {"message": "server error (scripted)"}})
            if attempt <= n and kind == "sleep":
                await asyncio.sleep(float(arg or 1))
        n_in = max(1, len(text) // 4)
        return self._respond(200, {
            "id": f"chatcmpl-{self.n_requests}", "object": "chat.completion", "created": 0,
            "model": req.get("model", "stub"),
            "choices": [{"index": 0, "finish_reason": "length" if "[[length]]" in text else "stop",
                         "message": {"role": "assistant", "content": ANSWER}}],
            "usage": {"prompt_tokens": n_in, "completion_tokens": 12, "total_tokens": n_in + 12}})

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections.add(writer)
        self.tasks.add(asyncio.current_task())
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                body = await reader.readexactly(int(headers.get("content-length", 0)))
                writer.write(await self.handle_request(method, path, headers, body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ValueError, asyncio.CancelledError):
            pass
        finally:
            self.tasks.discard(asyncio.current_task())
            self.connections.discard(writer)
            writer.close()

    async def stop(self) -> None:
        """Close the listening socket and every kept-alive connection."""
        self.server.close()
        for w in list(self.connections):
            w.close()
        tasks = list(self.tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def start(self, port: int = 0) -> int:
        self.server = await asyncio.start_server(self._client, "127.0.0.1", port, backlog=1024)
        self.port = self.server.sockets[0].getsockname()[1]
        return self.port


class ThreadedStub:
    """The stub on its own event loop in a daemon thread (for tests): `with ThreadedStub() as s:`."""

    def __init__(self, require_key: str | None = None):
        self.stub = StubServer(require_key)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.stub.port}/v1"

    def __enter__(self) -> "ThreadedStub":
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.stub.start(), self.loop).result(10)
        return self

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self.stub.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def stub_spec(base_url: str = "http://127.0.0.1:1/v1", **fields):
    """The registry record of a free model served by this stub (tests, benchmarks); `fields`
    override any ModelSpec field (concurrency, attempts, timeout, prices, key variable)."""
    from finlib.llm.registry import ModelSpec

    return ModelSpec(**{"name": "stub", "backend": "openai", "model_id": "stub-model", "supports_system": True,
                        "context_length": 8192, "price_input_per_m": 0.0, "price_output_per_m": 0.0,
                        "sampling": {"temperature": 1.0, "top_p": 1.0}, "base_url": base_url,
                        "api_key_env": "STUB_TEST_KEY", **fields})


async def _main(port: int, max_seconds: float) -> None:
    stub = StubServer()
    actual = await stub.start(port)
    print(actual, flush=True)  # the parent reads the port from the first line
    await asyncio.sleep(max_seconds)  # stops itself: a forgotten benchmark server never lingers


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--max-seconds", type=float, default=600.0)
    args = ap.parse_args()
    asyncio.run(_main(args.port, args.max_seconds))
