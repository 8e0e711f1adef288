"""A zero-latency OpenAI-compatible chat-completions stub on 127.0.0.1 (stdlib asyncio only).

Used by the tests (retries, rate limits, secrets) and by benchmarks/bench_client.py. It binds
only to 127.0.0.1, keeps HTTP/1.1 connections alive, and can stop itself after `max_seconds`.
Failures are scripted per prompt by directives in the last message's text, counted per distinct
text, so "fail twice, then answer" is deterministic whatever the concurrency:
  [[429xN:S]]   answer 429 with Retry-After S seconds to the first N attempts
  [[500xN]]     answer 500 to the first N attempts
  [[sleepxN:S]] sleep S seconds before answering the first N attempts (client timeouts)
  [[400]]       always 400 (a non-retryable error); [[403]], [[404]] likewise (no access, no such model)
  [[length]]    answer with finish_reason "length" (output cut at the token limit)
  [[context]]   always vLLM's context-length 400 for a prompt longer than the context (no room left)
  [[502]]       always 502 (a gateway whose upstream is gone)
  [[quota]]     always 429 insufficient_quota, no Retry-After (the account's quota is spent)
  [[ratelimit]] always 429 without Retry-After
  [[nomodel]]   always 400 "The model ... does not exist" (a model name the server does not know)
Seeded random faults (`FaultPlan`: a rate and weights over FAULT_KINDS) hit any prompt; whether
attempt k of a text fails, and how, is a hash of (seed, text, k): reproducible whatever the
concurrency or the order of arrival, so a test can say exactly what the server did.
Requests are logged in memory (time, text, attempt); the Authorization header is only checked
(`require_key`), never stored or echoed. The server keeps its own books (`stats()`, also served
as `GET /stats` for a stub in another process): requests, attempts per text, answers delivered,
faults by kind, and the usage it reported in delivered answers -- the counts a client's store
must add up to.
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

_DIRECTIVE = re.compile(r"\[\[(429|500|502|sleep|400|403|404|length|context|quota|ratelimit|nomodel)"
                        r"(?:x(\d+))?(?::([\d.]+))?\]\]")
CONTEXT_400 = ("This model's maximum context length is 8192 tokens and your request has 9000 input tokens "
               "(4096 > 8192 - 9000). None")
ANSWER = '{"answer": "bullish", "reason": "stub"}'

# Seeded fault kinds (what a flaky provider or proxy really does):
#   429       rate limited, with Retry-After          500 / 503  server errors
#   reset     connection closed without a response     timeout    no response until the client gives up
#   slow      answers correctly after `slow_s`         truncated  200 whose body is cut mid-JSON (connection closed)
#   invalid   200 whose body is not JSON               missing    200 without `message`/`usage` in the choice
#   empty     200 with an empty `choices` list
FAULT_KINDS = ("429", "500", "503", "reset", "timeout", "slow", "truncated", "invalid", "missing", "empty")


@dataclass(frozen=True)
class FaultPlan:
    """Seeded fault injection: each attempt fails with probability `rate`, the kind drawn by `weights`."""

    rate: float = 0.0
    seed: int = 0
    weights: dict = field(default_factory=lambda: {k: 1.0 for k in FAULT_KINDS})
    retry_after_s: float = 1.0
    slow_s: float = 0.05
    hang_s: float = 30.0  # "timeout": held this long (or until the client hangs up), then closed unanswered

    def draw(self, text: str, attempt: int) -> str | None:
        """The fault of attempt `attempt` of `text` (None: a normal answer)."""
        if self.rate <= 0:
            return None
        h = hashlib.sha256(f"{self.seed}|{attempt}|{text}".encode()).digest()
        u = int.from_bytes(h[:8], "big") / 2 ** 64
        if u >= self.rate:
            return None
        kinds = [k for k in FAULT_KINDS if self.weights.get(k, 0) > 0]
        total = sum(self.weights[k] for k in kinds)
        v = int.from_bytes(h[8:16], "big") / 2 ** 64 * total
        for k in kinds:
            v -= self.weights[k]
            if v < 0:
                return k
        return kinds[-1]


class StubServer:
    """State and request handling of the stub; `serve()` runs it on an event loop."""

    def __init__(self, require_key: str | None = None, faults: FaultPlan | None = None):
        self.require_key = require_key
        self.faults = faults or FaultPlan()
        self.faults_sent: Counter = Counter()
        self.answers: Counter = Counter()  # text -> answers delivered (status 200 with a message)
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0}  # as reported in delivered answers
        self.attempts: Counter = Counter()
        self.log: list[tuple[float, str, int]] = []
        self.n_requests = 0
        self.server: asyncio.base_events.Server | None = None
        self.port = 0
        self.connections: set[asyncio.StreamWriter] = set()
        self.tasks: set[asyncio.Task] = set()

    def _respond(self, status: int, body: dict | bytes, extra: dict | None = None) -> bytes:
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        reason = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 429: "Too Many Requests", 502: "Bad Gateway",
                  500: "Internal Server Error", 503: "Service Unavailable"}.get(status, "Error")
        head = [f"HTTP/1.1 {status} {reason}", "Content-Type: application/json",
                f"Content-Length: {len(payload)}", "Connection: keep-alive"]
        head += [f"{k}: {v}" for k, v in (extra or {}).items()]
        return ("\r\n".join(head) + "\r\n\r\n").encode() + payload

    def stats(self) -> dict:
        """The server's own books (what a client's store must add up to)."""
        return {"n_requests": self.n_requests, "texts": len(self.attempts), "attempts": sum(self.attempts.values()),
                "answers": sum(self.answers.values()), "answered_texts": len(self.answers),
                "faults": dict(self.faults_sent), "usage": dict(self.usage)}

    async def _answer(self, req: dict, text: str, fault: str | None) -> bytes:
        n_in = max(1, len(text) // 4)
        usage = {"prompt_tokens": n_in, "completion_tokens": 12, "total_tokens": n_in + 12}
        choice = {"index": 0, "finish_reason": "length" if "[[length]]" in text else "stop",
                  "message": {"role": "assistant", "content": ANSWER}}
        body = {"id": f"chatcmpl-{self.n_requests}", "object": "chat.completion", "created": 0,
                "model": req.get("model", "stub"), "choices": [choice], "usage": usage}
        if fault == "missing":
            del choice["message"], body["usage"]
        elif fault == "empty":
            body["choices"] = []
        else:  # a real answer: booked (the truncated/invalid faults never reach here)
            self.answers[text] += 1
            for k in self.usage:
                self.usage[k] += usage[k]
        return self._respond(200, body)

    async def handle_request(self, method: str, path: str, headers: dict, body: bytes) -> tuple[bytes | None, bool]:
        """(response bytes or None for no response, whether to close the connection after it)."""
        self.n_requests += 1
        if method == "GET" and path.rstrip("/").endswith("/stats"):
            return self._respond(200, self.stats()), False
        if self.require_key is not None and headers.get("authorization") != f"Bearer {self.require_key}":
            return self._respond(401, {"error": {"message": "invalid api key", "type": "auth"}}), False
        if method != "POST" or not path.endswith("/chat/completions"):
            return self._respond(404, {"error": {"message": f"no route {method} {path}"}}), False
        req = json.loads(body or b"{}")
        text = str(req.get("messages", [{}])[-1].get("content", ""))
        self.attempts[text] += 1
        attempt = self.attempts[text]
        self.log.append((time.monotonic(), text[:80], attempt))
        for kind, n, arg in _DIRECTIVE.findall(text):
            n = int(n or 1)
            if kind == "context":
                return self._respond(400, {"error": {"message": CONTEXT_400, "type": "BadRequestError"}}), False
            if kind in ("400", "403", "404", "502"):
                return self._respond(int(kind), {"error": {"message": f"HTTP {kind} (scripted)"}}), False
            if kind == "quota":
                return self._respond(429, {"error": {"message": "You exceeded your current quota (scripted)",
                                                     "type": "insufficient_quota", "code": "insufficient_quota"}}), False
            if kind == "ratelimit":
                return self._respond(429, {"error": {"message": "rate limited (scripted)"}}), False
            if kind == "nomodel":
                return self._respond(400, {"error": {"message": f"The model `{req.get('model')}` does not exist "
                                                                "(scripted)", "code": "model_not_found"}}), False
            if attempt <= n and kind == "429":
                return self._respond(429, {"error": {"message": "rate limited (scripted)"}},
                                     {"Retry-After": arg or "1"}), False
            if attempt <= n and kind == "500":
                return self._respond(500, {"error": {"message": "server error (scripted)"}}), False
            if attempt <= n and kind == "sleep":
                await asyncio.sleep(float(arg or 1))
        fault = self.faults.draw(text, attempt)
        if fault is not None:
            self.faults_sent[fault] += 1
        if fault == "429":
            return self._respond(429, {"error": {"message": "rate limited (injected)"}},
                                 {"Retry-After": f"{self.faults.retry_after_s:g}"}), False
        if fault in ("500", "503"):
            return self._respond(int(fault), {"error": {"message": f"server error {fault} (injected)"}}), False
        if fault == "reset":
            return None, True
        if fault == "timeout":
            await asyncio.sleep(self.faults.hang_s)
            return None, True
        if fault == "slow":
            await asyncio.sleep(self.faults.slow_s)
        if fault == "truncated":
            full = self._respond(200, {"id": "x", "choices": [{"message": {"content": ANSWER}}]})
            return full[: len(full) - 25], True
        if fault == "invalid":
            return self._respond(200, b"<html>502 Bad Gateway</html>"), False
        return await self._answer(req, text, fault), False

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
                payload, close = await self.handle_request(method, path, headers, body)
                if payload is not None:
                    writer.write(payload)
                    await writer.drain()
                if close:
                    if payload is None:
                        writer.transport.abort()  # a reset, not a polite close
                    break
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

    def __init__(self, require_key: str | None = None, faults: FaultPlan | None = None,
                 server: StubServer | None = None):
        self.stub = server if server is not None else StubServer(require_key, faults)  # e.g. a SimulatedServer
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.stub.port}/v1"

    def __enter__(self) -> ThreadedStub:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.stub.start(), self.loop).result(10)
        return self

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self.stub.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


class StalledServer:
    """A server that accepts connections and reads what is sent, and never answers (a hung server,
    or a proxy whose upstream hangs): the stall drills' endpoint. It counts the POSTs and GETs whose
    request line arrived (`posts`, `gets`), with the time of each POST."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.posts: list[float] = []
        self.gets = 0
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self._lock:
                self._conns.append(conn)
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        buffered = b""
        while True:
            try:
                data = conn.recv(65536)
            except OSError:
                return
            if not data:
                return
            buffered += data
            while (line_end := buffered.find(b"\r\n")) >= 0 and buffered[:5] in (b"POST ", b"GET /"):
                with self._lock:
                    if buffered.startswith(b"POST "):
                        self.posts.append(time.monotonic())
                    else:
                        self.gets += 1
                buffered = buffered[line_end + 2:]
            if len(buffered) > 1 << 20 or (buffered and buffered[:5] not in (b"POST ", b"GET /")):
                buffered = b""  # headers and bodies of requests already counted

    def __enter__(self) -> StalledServer:
        return self

    def __exit__(self, *exc) -> None:
        self._closed = True
        self.sock.close()
        with self._lock:
            for conn in self._conns:
                conn.close()


def stub_spec(base_url: str = "http://127.0.0.1:1/v1", **fields):
    """The registry record of a free model served by this stub (tests, benchmarks); `fields`
    override any ModelSpec field (concurrency, attempts, timeout, prices, key variable)."""
    from finlib.llm.spec import ModelSpec

    return ModelSpec(**{"name": "stub", "backend": "openai", "model_id": "stub-model", "supports_system": True,
                        "context_length": 8192, "price_input_per_m": 0.0, "price_output_per_m": 0.0,
                        "sampling": {"temperature": 1.0, "top_p": 1.0}, "base_url": base_url,
                        "api_key_env": "STUB_TEST_KEY", **fields})


async def _main(port: int, max_seconds: float, faults: FaultPlan) -> None:
    stub = StubServer(faults=faults)
    actual = await stub.start(port)
    print(actual, flush=True)  # the parent reads the port from the first line
    await asyncio.sleep(max_seconds)  # stops itself: a forgotten benchmark server never lingers


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--max-seconds", type=float, default=600.0)
    ap.add_argument("--fault-rate", type=float, default=0.0, help="share of attempts that get a seeded fault")
    ap.add_argument("--fault-seed", type=int, default=0)
    ap.add_argument("--fault-kinds", default=",".join(FAULT_KINDS), help=f"comma list from {FAULT_KINDS}")
    args = ap.parse_args()
    plan = FaultPlan(rate=args.fault_rate, seed=args.fault_seed,
                     weights={k: 1.0 for k in args.fault_kinds.split(",") if k})
    asyncio.run(_main(args.port, args.max_seconds, plan))
