"""OpenAI-compatible chat-completions backend (OpenAI, Anthropic's compatibility endpoint, vLLM,
SGLang, llama.cpp server, Ollama...) through `openai.AsyncOpenAI`.

A fixed pool of `concurrency` workers pulls requests from one iterator (memory stays bounded:
no task per request), each call passes a request/token-per-minute limiter, failures on 429,
5xx, timeouts and connection errors are retried with exponential backoff and full jitter
(never sooner than the server's Retry-After), up to `max_attempts`; then the failure is
recorded as an error row with its reason. A single writer commits results to the store in
groups as they arrive (group commit in a thread, so the event loop keeps sending), and the
progress bar only counts committed results. If the store fails, the workers are cancelled and
the store's error is raised (nothing is sent that could not be stored). An answer cut at the
output-token limit (finish_reason "length") is stored with `truncated_output`. The SDK's own retries are off (max_retries=0) so
that every attempt is visible and counted here.
"""
from __future__ import annotations

import asyncio
import collections
import os
import random
import re
import socket
import threading
import time
from collections.abc import Iterable

from finlib.llm.context import CONTEXT_REFUSED, is_context_refusal, room_from_error
from finlib.llm.interrupt import STOP, Interrupted, ThreadsafeEvent, resume_hint
from finlib.llm.spec import ModelSpec
from finlib.llm.store import Request, ResponseStore, Result, run_owner

RETRY_STATUS = {408, 409, 429}
sleep = asyncio.sleep  # every wait of this module (rate limit, backoff); tests replace it with a simulated clock
_KEYLIKE = re.compile(r"\b(sk|key|api)[-_][A-Za-z0-9_\-*]{6,}", re.IGNORECASE)


class CircuitOpen(RuntimeError):
    """A model's endpoint failed in a way waiting cannot heal (wrong key, wrong URL or model, host not
    found, quota spent, server down, stalled or answering only errors): its remaining calls were not
    sent and are stored as not answered with the cause."""


clock = time.monotonic  # the breaker's clock; tests replace it with the simulated clock beside `sleep`
# Kinds that only count once their streak has lasted the grace period (a restarting server refuses for
# a moment, an overloaded one answers 5xx or 429 for a moment); while such a streak is past the
# threshold, one probe per `grace_s / PROBES_PER_GRACE` is sent and the other workers wait.
GRACE_KINDS = ("refused", "5xx", "429", "429ra")
PROBES_PER_GRACE = 4
MODEL_KINDS = ("model",)  # failures of one model on an endpoint (its name): the other models there go on
_WHAT = {"http": "rejected requests", "dns": "host name lookups that failed", "quota": "quota refusals (429)",
         "model": "rejections of the model name", "timeout": "timeouts", "5xx": "server errors (5xx)",
         "429": "rate limits without Retry-After (429)", "refused": "refused connections",
         "429ra": "rate limits with Retry-After (429) and no answer between"}


class Breaker:
    """Circuit breaker of one scope (an endpoint, or one model on it). It opens after `threshold`
    consecutive attempts that failed in one kind that cannot heal by waiting -- "http" (401/403:
    the key), "model" (404, or a 400 naming an unknown model), "dns" (host not found), "quota"
    (429 insufficient_quota), "timeout" (every attempt timing out) -- or, for the GRACE_KINDS
    ("refused", "5xx" from a gateway or a dead upstream, "429" without Retry-After, "429ra" with
    it), once the streak has also lasted `grace_s`. A rate limit that lets answers through ends
    its streak with each answer; one that answers nothing but 429 is a server that cannot serve
    this run: left alone it would retry every attempt of every call for hours. A Retry-After of up
    to `retry_after_max_s` is waited out: the streak then opens only once it has lasted `grace_s`
    beyond the longest such wait (a per-minute limit refuses every call until its window ends, then
    answers again). A longer one that would carry the streak past `grace_s` opens the breaker at
    once (no wait ends sooner than the server asked: a daily limit). Any other outcome (an answer,
    a reset) ends the streak: transient faults keep their backoff. threshold 0 = never opens.

    Shared by every run in the process (`breaker_for`): stages that send in small batches
    (judges, IteraJudge) see one streak, not a fresh one per batch. Thread-safe: batches may run
    on their own event loops; each loop waits on its own event, set when the breaker opens."""

    def __init__(self, threshold: int, grace_s: float, clock=None, retry_after_max_s: float = 0.0):
        self.threshold, self.grace_s = int(threshold), float(grace_s)
        self.retry_after_max_s = float(retry_after_max_s)
        self._clock = clock
        self.kind: str | None = None
        self.n, self.t0 = 0, 0.0
        self.asked_s = 0.0  # the longest Retry-After of the streak that is waited out
        self.cause: str | None = None
        self.next_probe = 0.0
        self._lock = threading.Lock()
        self._opened = ThreadsafeEvent()
        self._stalled = ThreadsafeEvent()  # set with a stall: the calls in flight are given up
        self.in_flight, self.heard_at = 0, time.monotonic()  # wall clock: a stall is real waiting

    def sending(self) -> None:
        """A call goes out: the silence of an idle endpoint is not a stall, so it starts counting now."""
        with self._lock:
            if self.in_flight == 0:
                self.heard_at = time.monotonic()
            self.in_flight += 1

    def sent(self, responded: bool) -> None:
        """A call came back (`responded`: the server sent a response, an answer or an HTTP error)."""
        with self._lock:
            self.in_flight -= 1
            if responded:
                self.heard_at = time.monotonic()

    def heard(self) -> None:
        """The server showed it is alive (it answered the stall probe)."""
        with self._lock:
            self.heard_at = time.monotonic()

    def silent_s(self) -> float:
        """Seconds with calls in flight and no response from the server (0 with none in flight)."""
        with self._lock:
            return time.monotonic() - self.heard_at if self.in_flight else 0.0

    def stall(self, cause: str) -> None:
        """Open for a stall: besides stopping new calls, the calls in flight are given up."""
        with self._lock:
            if self.cause is None:
                self.kind = "stall"
                self._open(cause)
        self._stalled.set()

    def stalled_event(self) -> asyncio.Event:
        return self._stalled.event()

    def now(self) -> float:
        return (self._clock or clock)()

    @property
    def is_open(self) -> bool:
        return self.cause is not None

    def event(self) -> asyncio.Event:
        """This event loop's "opened" event (set already when the breaker is open)."""
        return self._opened.event()

    def _open(self, cause: str) -> None:
        self.cause = cause
        self._opened.set()

    @property
    def suspect(self) -> bool:
        """A grace-kind streak past the threshold that has not yet lasted the grace period."""
        return self.cause is None and self.kind in GRACE_KINDS and 0 < self.threshold <= self.n

    def probe_wait(self) -> float:
        """Seconds this attempt must wait while the breaker is suspect (0: send now). One attempt
        per probe interval goes, so a gateway answering only 502 costs a few calls per grace
        period, not one per worker and backoff step."""
        with self._lock:
            if not self.suspect:
                return 0.0
            now = self.now()
            if now >= self.next_probe:
                self.next_probe = now + max(self.grace_s, 1e-3) / PROBES_PER_GRACE
                return 0.0
            return self.next_probe - now

    def until_probe(self) -> float:
        """Seconds until the next probe may go (0 when not suspect)."""
        with self._lock:
            return max(0.0, self.next_probe - self.now()) if self.suspect else 0.0

    def record(self, kind: str | None, reason: str = "", wait_s: float = 0.0) -> None:
        """Book one attempt's outcome (`kind` from `lasting_kind`, None for anything else); `wait_s`
        is the wait the server asked for before the next attempt (Retry-After), counted as part of
        the streak: the next attempt cannot come sooner."""
        with self._lock:
            if self.cause is not None or self.threshold <= 0:
                return
            if kind is None:
                self.kind, self.n, self.asked_s = None, 0, 0.0
                return
            if kind != self.kind:
                self.kind, self.n, self.t0, self.asked_s = kind, 0, self.now(), 0.0
            self.n += 1
            lasted = self.now() - self.t0
            if 0 < wait_s <= self.retry_after_max_s:  # waited out: the grace starts after it
                self.asked_s, wait_s = max(self.asked_s, wait_s), 0.0
            if self.n >= self.threshold and (kind not in GRACE_KINDS
                                             or lasted + wait_s >= self.grace_s + self.asked_s):
                what = _WHAT[kind] + (f" for {lasted:.0f} s" if kind in GRACE_KINDS else "")
                if kind in GRACE_KINDS and lasted < self.grace_s + self.asked_s:  # opened by the wait asked
                    what += f" (the server asks to wait {wait_s:g} s more)"
                self._open(f"{self.n} consecutive {what}; last: {reason}")


class Breakers:
    """The two breakers one model's calls go through: its endpoint's (base URL, key variable) --
    a wrong key, a host not found, a dead gateway or spent quota stop every model there -- and
    its own on that endpoint (a model name the server does not know stops only that model)."""

    def __init__(self, endpoint: Breaker, model: Breaker):
        self.endpoint, self.model = endpoint, model

    @property
    def cause(self) -> str | None:
        return self.endpoint.cause or self.model.cause

    @property
    def kind(self) -> str | None:
        """The kind of failure that opened the breaker (None while closed)."""
        return self.endpoint.kind if self.endpoint.cause else self.model.kind if self.model.cause else None

    def record(self, kind: str | None, reason: str = "", wait_s: float = 0.0) -> None:
        if kind in MODEL_KINDS:
            self.model.record(kind, reason)
            self.endpoint.record(None)  # the endpoint answered: its own streak ends
        else:
            self.endpoint.record(kind, reason, wait_s)
            if kind is None:
                self.model.record(None)

    def probe_wait(self) -> float:
        return max(self.endpoint.probe_wait(), self.model.probe_wait())

    def backoff(self, delay: float) -> float:
        """A retry's wait while a streak is suspect: no longer than until the next probe, so the
        probes keep their pace (one per interval) however long the workers' backoffs have grown,
        and the breaker opens soon after the grace period."""
        suspect = [b for b in (self.endpoint, self.model) if b.suspect]
        return min([delay, *(b.until_probe() for b in suspect)])

    def events(self) -> list[asyncio.Event]:
        return [self.endpoint.event(), self.model.event()]


_BREAKERS: dict[tuple, Breaker] = {}
_BREAKERS_LOCK = threading.Lock()


def breaker_for(spec: ModelSpec) -> Breakers:
    """The process's breakers of `spec`'s endpoint and of the model on it (made on first use with
    the record's `breaker_failures` / `breaker_grace_s`). An open breaker stays open for the
    process: rerun (a new process, or `reset_breakers()` in a kernel) once the cause is fixed."""
    scope = (spec.base_url or "", spec.api_key_env or "")
    with _BREAKERS_LOCK:
        args = (spec.breaker_failures, spec.breaker_grace_s)
        endpoint = _BREAKERS.setdefault(scope, Breaker(*args, retry_after_max_s=spec.retry_after_max_s))
        model = _BREAKERS.setdefault((*scope, spec.model_id), Breaker(*args, retry_after_max_s=spec.retry_after_max_s))
    return Breakers(endpoint, model)


def reset_breakers() -> None:
    """Forget every breaker of this process (a kernel whose key or server was fixed)."""
    with _BREAKERS_LOCK:
        _BREAKERS.clear()


_UNKNOWN_MODEL = re.compile(r"model_not_found|\b(unknown|invalid|no such|unsupported) model|model\b.{0,80}\b("
                            r"does not exist|do not exist|not found|not exist|is unknown|not supported|unknown)",
                            re.IGNORECASE | re.DOTALL)


def _error_text(exc: Exception) -> str:
    """An SDK status error's message and body (code, type), for reading what kind of refusal it is."""
    body = getattr(exc, "body", None)
    return f"{getattr(exc, 'message', '')} {body if body is not None else ''}"


def lasting_kind(exc: Exception) -> str | None:
    """The breaker's kind of a failure that waiting may not heal, or None (transient or unknown)."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        status, text = exc.status_code, _error_text(exc)
        if status in (401, 403):
            return "http"
        if status == 404 or (status == 400 and _UNKNOWN_MODEL.search(text)):
            return "model"
        if status == 429:
            if "insufficient_quota" in text or re.search(r"\bquota\b|billing", text, re.IGNORECASE):
                return "quota"
            return "429ra" if retry_after_s(exc) is not None else "429"
        return "5xx" if status >= 500 else None
    if any(isinstance(c, socket.gaierror) for c in _causes(exc)):
        return "dns"
    if refused(exc):
        return "refused"
    if isinstance(exc, openai.APITimeoutError) and dropped_connection(exc) is None:
        return "timeout"
    return None


def _causes(exc: BaseException) -> list[BaseException]:
    """The exception and its causes (SDK -> httpx -> transport -> OSError), outermost first."""
    chain, cur = [], exc
    while cur is not None and len(chain) < 12:
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    return chain


def refused(exc: BaseException) -> bool:
    """Whether a connection was refused somewhere down the exception's causes. Read from the
    causes, not the SDK class: the aiohttp transport reports a refused connection as a connect
    *timeout*, yet no wait heals a server that is not there."""
    return any(isinstance(c, ConnectionRefusedError) for c in _causes(exc))


def dropped_connection(exc: BaseException) -> BaseException | None:
    """The transport error under an SDK timeout that is not one (a reset, a server that closed the
    connection): the aiohttp transport maps every connection error to a timeout, and a streak of
    resets must neither read as "timeout" in the error nor open the breaker as timeouts do."""
    import aiohttp

    return next((c for c in _causes(exc) if isinstance(c, (aiohttp.ClientConnectionError, ConnectionError))
                 and not isinstance(c, TimeoutError)), None)


async def sleep_unless_open(delay: float, breaker: Breakers | None) -> None:
    """A wait that ends early when the breaker opens or the user interrupts (no worker idles through
    a 60 s backoff of a model that is already stopped)."""
    events = [STOP.event(), *(breaker.events() if breaker is not None else [])]
    waits = [asyncio.ensure_future(sleep(delay)), *(asyncio.ensure_future(ev.wait()) for ev in events)]
    await asyncio.wait(set(waits), return_when=asyncio.FIRST_COMPLETED)
    for t in waits:
        t.cancel()
    await asyncio.gather(*waits, return_exceptions=True)


async def admit(breaker: Breakers | None, before_wait=None) -> None:
    """Wait while the breaker is suspect and another probe went out within the probe interval
    (`before_wait(seconds)` first: e.g. extend the claim's lease over the wait)."""
    while breaker is not None and breaker.cause is None and not STOP.is_set() and (wait := breaker.probe_wait()) > 0:
        if before_wait is not None:
            await before_wait(wait)
        await sleep_unless_open(wait, breaker)


STOP_GRACE_S = 5.0  # after Ctrl-C, how long a call in flight may still be answered (and stored)


class Abandoned(Exception):
    """A call in flight given up: its endpoint stalled, or the user interrupted and it was not
    answered within STOP_GRACE_S (a stalled server would otherwise hold the exit for timeout_s)."""


async def _give_up_signal(breaker: Breakers | None) -> str:
    """Ends (with the reason) when a call in flight must be given up."""
    waits = {asyncio.ensure_future(STOP.event().wait()): "stop"}
    if breaker is not None:
        waits[asyncio.ensure_future(breaker.endpoint.stalled_event().wait())] = "stall"
    try:
        done, _ = await asyncio.wait(set(waits), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in waits:
            t.cancel()
    if any(waits[t] == "stall" for t in done):
        return f"given up in flight: {breaker.cause}"
    await asyncio.sleep(STOP_GRACE_S)  # wall clock, as the server's answer would be
    return f"interrupted: not answered within {STOP_GRACE_S:g} s of the signal"


async def post_unless_stopped(client, kwargs: dict, breaker: Breakers | None):
    """The chat-completions POST, booked on the endpoint's stall watch (`Breaker.sending`), given
    up (`Abandoned`) when the endpoint stalls or an interrupt's grace runs out. The POST runs in the
    caller's task (no extra task, no extra loop turn before it is sent); a watcher cancels it."""
    import openai

    task = asyncio.current_task()
    state = {"posting": True, "given_up": False}

    def cancel_post(watcher: asyncio.Future) -> None:
        if state["posting"] and not watcher.cancelled():
            state["given_up"] = True
            task.cancel()

    endpoint = breaker.endpoint if breaker is not None else None
    if endpoint is not None:
        endpoint.sending()
    responded = False
    give_up = asyncio.ensure_future(_give_up_signal(breaker))
    give_up.add_done_callback(cancel_post)
    try:
        body = await client.post("/chat/completions", body=kwargs, cast_to=dict)
        state["posting"], responded = False, True
        return body
    except openai.APIStatusError:
        state["posting"], responded = False, True
        raise
    except asyncio.CancelledError:
        state["posting"] = False
        if not state["given_up"]:
            raise
        task.uncancel()
        raise Abandoned(give_up.result()) from None
    finally:
        state["posting"] = False
        give_up.cancel()
        if endpoint is not None:
            endpoint.sent(responded)


STALL_PROBE_S = 10.0  # how long the stall probe (GET /models) may take to get any response


async def server_responds(client) -> bool:
    """Whether the server sends any response (even an error) to GET /models within STALL_PROBE_S: a
    server busy with long generations does; one that accepts connections and never answers does not."""
    import openai

    try:
        await asyncio.wait_for(client.get("/models", cast_to=dict, options={"timeout": STALL_PROBE_S}),
                               STALL_PROBE_S + 1.0)
    except openai.APIStatusError:
        return True
    except Exception:  # noqa: BLE001 -- a timeout, a reset, a client without .get: no response
        return False
    return True


async def watch_for_stall(spec: ModelSpec, breaker: Breakers, client) -> None:
    """Stop the model when its endpoint stalls: calls in flight, no response to any for `stall_s`
    (wall clock, whatever `timeout_s` is) and none to the probe either. Runs beside the workers."""
    endpoint = breaker.endpoint
    while spec.stall_s > 0 and endpoint.cause is None:
        await asyncio.sleep(min(1.0, spec.stall_s / 4))
        silent = endpoint.silent_s()
        if silent < spec.stall_s:
            continue
        if await server_responds(client):
            endpoint.heard()  # alive and busy (long generations): not a stall
            continue
        endpoint.stall(f"no response for {silent:.0f} s to any of {endpoint.in_flight} call(s) in flight and none "
                       f"to GET /models within {STALL_PROBE_S:g} s (stall_s {spec.stall_s:g}): the server accepts "
                       "connections and does not answer")


class BudgetExceeded(RuntimeError):
    """Sending the next call could exceed `inference.budget_usd`; nothing over it was sent."""


class Budget:
    """Spend cap for one run: each call reserves its worst case (estimated input + max output
    tokens) before it is sent and settles to its real cost after. Free calls always pass.
    `store_check` is what the response store's claim checks (`ResponseStore.claim`): everything
    stored since this budget began plus every live reservation, whichever process made them --
    so two runs sharing a store share the cap."""

    def __init__(self, limit_usd: float):
        self.limit, self.spent, self.reserved, self.refused = float(limit_usd), 0.0, 0.0, 0
        self.since = time.time()

    @property
    def store_check(self) -> tuple[float, float] | None:
        return None if self.limit == float("inf") else (self.limit, self.since)

    def reserve(self, amount: float) -> bool:
        if amount > 0 and self.spent + self.reserved + amount > self.limit:
            self.refused += 1
            return False
        self.reserved += amount
        return True

    def settle(self, reserved: float, actual: float) -> None:
        self.reserved -= reserved
        self.spent += actual


class RateLimiter:
    """Token buckets for requests and tokens per minute (0 = unlimited), refilled continuously,
    with one second's worth of burst so a pool cannot fire a whole minute's quota at once."""

    def __init__(self, rpm: int = 0, tpm: int = 0, clock=time.monotonic):
        self.rpm, self.tpm, self.clock = rpm, tpm, clock
        self.req_cap = max(1.0, rpm / 60.0)
        self.tok_cap = max(1.0, tpm / 60.0)
        self.req, self.tok = self.req_cap, self.tok_cap
        self.last = clock()
        self.lock = asyncio.Lock()

    def _refill(self) -> None:
        now = self.clock()
        dt, self.last = now - self.last, now
        if self.rpm:
            self.req = min(self.req_cap, self.req + dt * self.rpm / 60.0)
        if self.tpm:
            self.tok = min(self.tok_cap, self.tok + dt * self.tpm / 60.0)

    async def acquire(self, tokens: int = 0) -> None:
        if not self.rpm and not self.tpm:
            return
        tokens = min(float(tokens), self.tok_cap)  # a call larger than one second's quota waits for a full bucket
        async with self.lock:
            while True:
                self._refill()
                need_r = 1.0 - self.req if self.rpm else 0.0
                need_t = tokens - self.tok if self.tpm else 0.0
                if need_r <= 1e-9 and need_t <= 1e-9:  # a shortfall below clock resolution is rounding
                    if self.rpm:
                        self.req -= 1.0
                    if self.tpm:
                        self.tok -= tokens
                    return
                wait = max(need_r * 60.0 / self.rpm if self.rpm else 0.0, need_t * 60.0 / self.tpm if self.tpm else 0.0)
                await sleep(wait)


REDACT_MIN_CHARS = 8  # any run of this many characters of the key is removed (servers echo prefixes/suffixes)


def redact(text: str, secret: str | None) -> str:
    """Error text without the key: every run of text that is a substring of the key of at least
    REDACT_MIN_CHARS characters (servers echo "sk-abc…xyz1234" parts of bad keys in 401
    messages), then anything key-shaped."""
    n = REDACT_MIN_CHARS
    if secret and secret != "EMPTY" and len(text) >= n:
        grams = {secret[i:i + n] for i in range(len(secret) - n + 1)}
        hit = bytearray(len(text))  # 1 = inside a key substring of >= n characters
        for i in range(len(text) - n + 1):
            if text[i:i + n] in grams:
                hit[i:i + n] = b"\x01" * n
        if any(hit):
            out, i = [], 0
            while i < len(text):
                j = i
                while j < len(text) and hit[j] == hit[i]:
                    j += 1
                out.append("[redacted]" if hit[i] else text[i:j])
                i = j
            text = "".join(out)
    return _KEYLIKE.sub("[redacted]", text)


def retry_after_s(exc: Exception) -> float | None:
    """Seconds from a Retry-After / retry-after-ms header, if the error carries one."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return float(ms) / 1000.0
        except ValueError:
            pass
    value = headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None  # HTTP-date form: fall back to backoff


def backoff_s(attempt: int, base: float, cap: float, retry_after: float | None, rng: random.Random) -> float:
    """Full-jitter exponential backoff, never shorter than the server's Retry-After."""
    delay = rng.uniform(0, min(cap, base * 2 ** (attempt - 1)))
    return max(delay, retry_after or 0.0)


def request_kwargs(spec: ModelSpec, req: Request) -> dict:
    """The chat.completions.create arguments: the request's messages and its exact parameters."""
    kwargs = {"model": spec.model_id, "messages": req.messages}
    if spec.sends_sampling:  # o-series models refuse any temperature/top_p but the default: none is sent
        kwargs.update({k: req.params[k] for k in ("temperature", "top_p") if k in req.params})
    if "seed" in req.params:
        kwargs["seed"] = req.params["seed"]
    if "max_new_tokens" in req.params:
        kwargs[spec.max_tokens_param] = req.params["max_new_tokens"]
    if "response_format" in req.params:  # constrained JSON (stage 03 allows it for llamacpp records only)
        kwargs["response_format"] = req.params["response_format"]
    return kwargs


def result_from_completion(req: Request, spec: ModelSpec, body: dict, discount: float = 1.0,
                           **fields) -> Result:
    """An ok Result from a chat-completion body: the live SDK response (`resp.model_dump()`) and a
    Batch API output line's `response.body` have the same shape, so both paths read it here.
    `discount` prices the call (0.5 for the Batch API); `fields` adds latency, attempts..."""
    usage = body.get("usage") or {}
    n_in, n_out = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    choice = (body.get("choices") or [{}])[0]
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens")
    # null content cut at the limit: the budget ran out while reasoning, stored as the empty answer it is
    content = (choice.get("message") or {}).get("content")
    return Result.for_request(req, status="ok", raw_text="" if content is None else content,
                              input_tokens=n_in, output_tokens=n_out, cost_usd=spec.cost(n_in, n_out, discount),
                              truncated_output=choice.get("finish_reason") == "length",
                              reasoning_tokens=None if reasoning is None else int(reasoning), **fields)


def context_refused(req: Request, reason: str, latency_s: float = 0.0, attempts: int = 1) -> Result:
    """The answer to a prompt the server refused for its context length: an empty reply (status ok,
    inside N, unparsed "empty"), as the authors' offline vLLM returned for such a prompt; `error`
    keeps the reason so stage 03 counts these apart from the model's own empty replies."""
    return Result.for_request(req, status="ok", raw_text="", truncated_output=False, latency_s=latency_s,
                              attempts=attempts, error=f"{CONTEXT_REFUSED}: {reason}"[:1000])


class MalformedResponse(Exception):
    """A 200 whose body is not a chat completion (no choices, no message): a server or proxy fault,
    retried like a 5xx and recorded as an error -- never stored as an (empty) answer."""


def malformed_reason(body: dict) -> str | None:
    """Why a completion body carries no answer, or None when it does (content "" is an answer)."""
    choices = body.get("choices")
    if not choices:
        return "no choices"
    message = choices[0].get("message")
    if not isinstance(message, dict):
        return "choice without message content"
    if message.get("content") is None and choices[0].get("finish_reason") != "length":
        return "choice without message content"   # null content at the limit: out of budget while reasoning
    return None


def classify(exc: Exception) -> tuple[bool, str]:
    """(retryable, reason) for an exception raised by the SDK."""
    import json

    import openai

    if isinstance(exc, MalformedResponse):
        return True, f"malformed response: {exc}"
    if isinstance(exc, json.JSONDecodeError):  # a 200 whose body is not JSON (proxy error page, cut stream)
        return True, f"malformed response: body is not JSON ({exc.msg})"
    if isinstance(exc, openai.APIConnectionError) and refused(exc):
        return True, f"connection error: connection refused ({exc})"
    if isinstance(exc, openai.APITimeoutError):
        dropped = dropped_connection(exc)
        return True, "timeout" if dropped is None else f"connection error: {type(dropped).__name__}: {dropped}"
    if isinstance(exc, openai.APIConnectionError):
        return True, f"connection error: {exc}"
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        return status in RETRY_STATUS or status >= 500, f"HTTP {status}: {exc.message}"
    return False, f"{type(exc).__name__}: {exc}"


async def call_with_retries(client, spec: ModelSpec, req: Request, limiter: RateLimiter, *,
                            backoff_base_s: float = 1.0, backoff_cap_s: float = 60.0,
                            rng: random.Random | None = None, secret: str | None = None,
                            breaker: Breakers | None = None, before_attempt=None, before_wait=None) -> Result:
    """One request to completion: an ok Result, or an error Result after a terminal failure (or
    after the model's circuit breaker opened: no further attempt). `before_attempt(req)` runs
    before each attempt and `before_wait(req, seconds)` before each wait (backoff, Retry-After, a
    breaker's probe interval): the claim's lease must outlive the wait, or another process on the
    store takes the key and pays for it too."""
    async def waiting(seconds: float) -> None:
        if before_wait is not None:
            await before_wait(req, seconds)

    rng = rng or random.Random()
    kwargs = request_kwargs(spec, req)
    est_tokens = req.input_tokens_est + int(req.params.get("max_new_tokens", 0))
    t_start = time.perf_counter()
    reason = "not attempted"
    for attempt in range(1, spec.max_attempts + 1):
        await admit(breaker, waiting)
        if STOP.is_set():  # interrupted: no new attempt (the caller does not store this result)
            attempt, reason = attempt - 1, "interrupted"
            break
        if breaker is not None and breaker.cause:
            attempt -= 1
            if attempt == 0:  # stopped before its first attempt: not sent, as the calls never taken
                return Result.for_request(req, status="error", attempts=0,
                                          error=not_sent_reason(spec, breaker.cause)[:1000])
            break
        await limiter.acquire(est_tokens)
        if before_attempt is not None:  # e.g. renew this key's claim in the store: it is still being asked
            await before_attempt(req)
        try:
            # The JSON as sent and received: the SDK's request transform and response models were
            # about a third of the client's CPU per call at 674k calls; errors raise the same classes.
            body = await post_unless_stopped(client, kwargs, breaker)
            if not isinstance(body, dict):
                raise MalformedResponse(f"response body is not a JSON object: {str(body)[:80]!r}")
            if (why := malformed_reason(body)) is not None:
                raise MalformedResponse(why)
        except Exception as exc:  # noqa: BLE001 -- classified below; unknown errors are terminal
            retryable, reason = classify(exc)
            room = room_from_error(reason) if reason.startswith("HTTP 400") else None
            if room is not None and room < kwargs.get(spec.max_tokens_param, room + 1):
                kwargs[spec.max_tokens_param] = room  # the server counted more prompt tokens: its room, once
                continue
            if is_context_refusal(reason):  # the prompt alone fills the context: an empty answer, inside N
                if breaker is not None:
                    breaker.record(None)  # the server answered: not a failing server
                return context_refused(req, redact(reason, secret), time.perf_counter() - t_start, attempt)
            asked_s = retry_after_s(exc) or 0.0
            if breaker is not None and not isinstance(exc, Abandoned):
                kind = lasting_kind(exc)
                breaker.record(kind, redact(reason, secret)[:200], asked_s if kind == "429ra" else 0.0)
            if not retryable or attempt == spec.max_attempts or (breaker is not None and breaker.cause) \
                    or STOP.is_set():
                break
            delay = backoff_s(attempt, backoff_base_s, backoff_cap_s, asked_s, rng)
            if breaker is not None:
                delay = max(breaker.backoff(delay), asked_s)  # probes keep their pace, never before Retry-After
            await waiting(delay)
            await sleep_unless_open(delay, breaker)
            if breaker is not None and breaker.cause:
                break
            continue
        if breaker is not None:
            breaker.record(None)
        return result_from_completion(req, spec, body, latency_s=time.perf_counter() - t_start,
                                      attempts=attempt)
    return Result.for_request(req, status="error", latency_s=time.perf_counter() - t_start, attempts=attempt,
                              error=redact(f"{reason} (after {attempt} attempt(s))", secret)[:1000])


def not_sent_reason(spec: ModelSpec, cause: str) -> str:
    """The stored error of a call an open breaker kept from being sent (a rerun sends it)."""
    return f"not sent: model '{spec.name}' stopped by its circuit breaker ({cause})"


def what_to_fix(spec: ModelSpec, kind: str | None) -> str:
    """The one cause an open breaker's kind points at (a refused connection says nothing about the key)."""
    url = spec.base_url or "the registry's base_url"
    advice = {
        "http": f"check the key in {spec.api_key_env or 'the registry'}: the server refused it or it has no access",
        "dns": f"check the host name in base_url {url}: it does not resolve",
        "quota": f"the account's quota is spent: add credit, or set another key in {spec.api_key_env}",
        "model": f"check model_id {spec.model_id!r} in the registry: the server at {url} does not know it",
        "refused": f"nothing accepts connections at {url}: start the server, or fix base_url",
        "timeout": f"the server at {url} does not answer within timeout_s ({spec.timeout_s:g} s): check it",
        "stall": f"the server at {url} accepts connections and answers nothing: restart it",
        "5xx": f"the server at {url} answers only server errors: check its logs or the provider's status",
        "429": f"the server at {url} answers only rate limits: lower rpm or concurrency in the registry record",
        "429ra": f"the server at {url} answers only rate limits: lower rpm or concurrency in the registry record",
    }
    return advice.get(kind or "", f"check the key in {spec.api_key_env or 'the registry'}, base_url {url}, the server")


def circuit_open(spec: ModelSpec, cause: str, store: ResponseStore, unsent: list[Request],
                 state: dict, kind: str | None = None) -> CircuitOpen:
    """Store the calls the open breaker kept from being sent as not answered (status error, 0
    attempts, the cause as their error: a rerun sends them again) and say so in one line."""
    why = not_sent_reason(spec, cause)
    store.put_many([Result.for_request(r, status="error", attempts=0, error=why[:1000]) for r in unsent])
    state["not_sent"] = len(unsent)
    return CircuitOpen(
        f"model '{spec.name}' stopped: {cause}. {len(unsent)} call(s) not sent and {state['error']} failed "
        f"are stored as not answered ({state['ok']} answered). Waiting cannot fix this ({what_to_fix(spec, kind)}); "
        "then rerun: stored answers are not sent again.")


LEASE_MARGIN_S = 10.0  # a claim's lease: one request timeout plus this (renewed before every attempt and
                       # extended over every wait: backoff, Retry-After, a breaker's probe interval)
CLAIM_POLL_S = 0.5     # how often a key another process is asking is looked at again


HTTP_TRANSPORTS = ("raw", "aiohttp", "httpx")
PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY")


def default_transport(environ=None) -> str:
    """"httpx" when the environment names a proxy (the aiohttp connection pools made here do not read proxy
    variables; the SDK's httpx transport does), else "raw"."""
    env = os.environ if environ is None else environ
    return "httpx" if any(env.get(v) or env.get(v.lower()) for v in PROXY_VARIABLES) else "raw"


def make_client(spec: ModelSpec, transport: str | None = None):
    """The chat-completions client for a record: key from its env var (MissingKeyError names the variable).

    "raw" (the default, `default_transport`): `finlib.llm.raw_client.RawChatClient`, the JSON posted over
    aiohttp with no SDK object on the way, raising the SDK's own exceptions; the SDK's request and response
    machinery was most of the client's CPU per answer (benchmarks/bench_client.py compares the three).
    "aiohttp": `AsyncOpenAI` over the SDK's aiohttp transport. "httpx": `AsyncOpenAI` as the SDK ships it
    (its httpx pool polls every pooled connection to place each request; it reads proxy variables)."""
    transport = transport or default_transport()
    if transport not in HTTP_TRANSPORTS:
        raise ValueError(f"unknown HTTP transport {transport!r}; known: {HTTP_TRANSPORTS}")
    if transport == "raw":
        from finlib.llm.raw_client import RawChatClient

        return RawChatClient(spec.api_key(), spec.base_url, spec.timeout_s)
    from openai import AsyncOpenAI, DefaultAioHttpClient

    http_client = DefaultAioHttpClient(timeout=spec.timeout_s) if transport == "aiohttp" else None
    return AsyncOpenAI(api_key=spec.api_key(), base_url=spec.base_url, max_retries=0, timeout=spec.timeout_s,
                       http_client=http_client)


async def run_openai(spec: ModelSpec, requests: Iterable[Request], store: ResponseStore, *, budget: Budget | None = None,
                     progress=None, client=None, backoff_base_s: float = 1.0, backoff_cap_s: float = 60.0,
                     commit_max: int = 256, seed: int | None = None) -> dict:
    """Send every request, streaming results into the store; returns counts.

    Raises BudgetExceeded after the in-flight calls are stored when the next call could pass
    the budget. Requests already answered should be filtered out by the caller (the stage does).
    Each call is claimed in the store before it is sent (`ResponseStore.claim`): a key another
    process is asking waits until the inputs are done and is then taken from the store once
    answered (or sent, if that process failed or died), so a request is paid once whatever the
    number of processes sharing the store; the budget counts their spending too. The run's claims
    are dropped when it ends, however it ends (`ResponseStore.release_owner`).
    """
    run = _CallRun(spec, requests, store, budget=budget, progress=progress, client=client,
                   backoff=(backoff_base_s, backoff_cap_s), commit_max=commit_max, seed=seed)
    await run.drive()
    run.raise_if_stopped()
    return run.state


class _CallRun:
    """One run of calls to one model: what its `concurrency` workers and its one writer share
    (the input iterator, the counts, the claims held, the breaker, the budget), kept on one object
    so that each step of a worker is a small method of its own."""

    def __init__(self, spec: ModelSpec, requests: Iterable[Request], store: ResponseStore, *,
                 budget: Budget | None, progress, client, backoff: tuple[float, float], commit_max: int,
                 seed: int | None):
        self.spec, self.store, self.progress, self.commit_max = spec, store, progress, commit_max
        self.secret = spec.api_key()  # first: a missing key is an error before any client is made
        self.own_client = client is None
        self.client = client or make_client(spec)
        self.limiter = RateLimiter(spec.rpm, spec.tpm)
        self.rng = random.Random(seed)
        self.backoff = backoff
        self.budget = budget or Budget(float("inf"))
        self.results: asyncio.Queue = asyncio.Queue(maxsize=4 * spec.concurrency)
        self.it = iter(requests)
        self.state = {"stopped": False, "sent": 0, "ok": 0, "error": 0}
        self.state.update(answered_elsewhere=0, waited=0, after_stop=0, answered_after_stop=0)
        self.breaker = breaker_for(spec)
        self.unsent: list[Request] = []  # taken from the input after the breaker opened
        self.waiting: collections.deque = collections.deque()  # keys another process is asking
        self.held: dict[str, float] = {}  # keys claimed here -> when the lease was last set (monotonic)
        self.lease_s = spec.timeout_s + LEASE_MARGIN_S
        self.owner = run_owner()

    async def renew(self, req: Request) -> None:
        """Before an attempt: the key is still being asked (renewed at most once a second)."""
        if time.monotonic() - self.held.get(req.key, 0.0) > 1.0:
            self.held[req.key] = time.monotonic()
            await asyncio.to_thread(self.store.renew, req.key, self.owner, self.lease_s)

    async def hold(self, req: Request, wait_s: float) -> None:
        """Before a wait: the lease covers the wait, then one attempt."""
        self.held[req.key] = time.monotonic()
        await asyncio.to_thread(self.store.renew, req.key, self.owner, self.lease_s + wait_s)

    def _next(self) -> tuple[Request | None, bool]:
        """The next request and whether it is a polled one (another process was asking it): the
        input first, then the keys set aside to wait for; None when both are done."""
        req = next(self.it, None)
        if req is not None:
            return req, False
        if not self.waiting:
            return None, False
        return self.waiting.popleft(), True

    def _may_take(self, req: Request) -> bool:
        """False once the breaker opened (the request is kept as not sent), the budget stopped the
        run or the user interrupted it: take nothing more."""
        if self.breaker.cause:
            self.unsent.append(req)
            return False
        return not (self.state["stopped"] or STOP.is_set())

    async def _claim(self, req: Request, polled: bool) -> tuple[str, float]:
        """Reserve the call's worst-case cost and claim its key: ("send", reserved), ("next", 0)
        when it is answered elsewhere or another process is asking it (then waited for), or
        ("stop", 0) when the budget, counted with what other processes spent or hold, is reached."""
        reserve = self.spec.cost(req.input_tokens_est, int(req.params.get("max_new_tokens", 0)))
        if not self.budget.reserve(reserve):
            self.state["stopped"] = True
            return "stop", 0.0
        got = await asyncio.to_thread(self.store.claim, req.key, self.owner, self.lease_s, reserve,
                                      self.budget.store_check)
        if got == "mine":
            return "send", reserve
        self.budget.settle(reserve, 0.0)
        if got == "over_budget":
            self.budget.refused += 1
            self.state["stopped"] = True
            return "stop", 0.0
        if got == "answered":  # another process stored it meanwhile: read from the store
            self.state["answered_elsewhere"] += 1
            return "next", 0.0
        self.state["waited"] += not polled
        self.waiting.append(req)
        if polled:
            await asyncio.sleep(CLAIM_POLL_S)  # real time: the other process's lease is wall-clock
        return "next", 0.0

    async def _send(self, req: Request, reserve: float) -> bool:
        """Ask a claimed request to completion and queue its result for the writer; False when the
        worker must stop (interrupted without an answer, or the breaker opened before it was sent)."""
        self.held[req.key] = time.monotonic()
        self.state["sent"] += 1
        base_s, cap_s = self.backoff
        res = await call_with_retries(self.client, self.spec, req, self.limiter, backoff_base_s=base_s,
                                      backoff_cap_s=cap_s, rng=self.rng, secret=self.secret, breaker=self.breaker,
                                      before_attempt=self.renew, before_wait=self.hold)
        self.budget.settle(reserve, res.cost_usd)
        if STOP.is_set():  # in flight at the interrupt: an answer is stored, anything else sent on resume
            self.state["after_stop"] += 1
            self.state["answered_after_stop"] += res.status == "ok"
            if res.status != "ok":
                self.state["sent"] -= res.attempts == 0
                return False
        if res.attempts == 0 and self.breaker.cause:  # the breaker opened while it waited: never sent
            self.state["sent"] -= 1
            self.unsent.append(req)
            return False
        await self.results.put(res)
        return True

    async def worker(self) -> None:
        """Take, claim and send requests one at a time until the input is done or the run stops."""
        while True:
            req, polled = self._next()
            if req is None or not self._may_take(req):
                return
            step, reserve = await self._claim(req, polled)
            if step == "stop" or (step == "send" and not await self._send(req, reserve)):
                return

    async def writer(self) -> None:
        """Commit results in groups of up to `commit_max` as they arrive, until the end marker (None)."""
        done = False
        while not done:
            batch = [await self.results.get()]
            while len(batch) < self.commit_max and not self.results.empty():
                batch.append(self.results.get_nowait())
            if batch[-1] is None:
                batch.pop()
                done = True
            if batch:
                await self._commit(batch)

    async def _commit(self, batch: list[Result]) -> None:
        """Store a group, then release its claims (answer first: never a moment where neither the
        answer nor the claim is visible), then count it: the progress bar counts only what is durable."""
        await asyncio.to_thread(self.store.put_many, batch)
        await asyncio.to_thread(self.store.release, [r.key for r in batch], self.owner)
        for r in batch:
            self.held.pop(r.key, None)
        n_err = sum(r.status == "error" for r in batch)
        self.state["ok"] += len(batch) - n_err
        self.state["error"] += n_err
        if self.progress is not None:
            self.progress.update(len(batch), sum(r.input_tokens + r.output_tokens for r in batch),
                                 sum(r.cost_usd for r in batch), n_err)

    async def drive(self) -> None:
        """Run the workers and the writer; raise the store's error first if the writer died (the
        workers would otherwise wait forever on the full queue), else a worker's own error."""
        writer_task = asyncio.create_task(self.writer())
        pool = asyncio.ensure_future(asyncio.gather(*(self.worker() for _ in range(self.spec.concurrency))))
        watch = asyncio.ensure_future(watch_for_stall(self.spec, self.breaker, self.client))
        try:
            await asyncio.wait({writer_task, pool}, return_when=asyncio.FIRST_COMPLETED)
            if writer_task.done():  # before the pool: the store failed
                pool.cancel()
                await asyncio.gather(pool, return_exceptions=True)
                writer_task.result()
            await pool  # a worker's own error, raised after the finally stored what was answered
        finally:
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)
            await self._finish(writer_task)

    async def _finish(self, writer_task: asyncio.Task) -> None:
        """Store what was answered, close the client made here and drop every claim of this run
        (stopped early by a store failure, the budget, the breaker or an interrupt, or a claim taken
        while its worker was cancelled): other processes need not wait out the lease."""
        try:
            if not writer_task.done():  # end-of-input marker; never wait on a full queue a dead writer left
                marker = asyncio.ensure_future(self.results.put(None))
                await asyncio.wait({marker, writer_task}, return_when=asyncio.FIRST_COMPLETED)
                marker.cancel()
                await writer_task
            if self.own_client:
                await self.client.close()
        finally:
            self.store.release_owner(self.owner)

    def raise_if_stopped(self) -> None:
        """The run ended early: say why (interrupt, open breaker, budget) and how a rerun resumes."""
        spec, state = self.spec, self.state
        if STOP.is_set():
            raise Interrupted(f"model '{spec.name}': " + resume_hint(state["after_stop"], state["answered_after_stop"]))
        if self.breaker.cause:
            raise circuit_open(spec, self.breaker.cause, self.store, self.unsent + list(self.waiting) + list(self.it),
                               state, self.breaker.kind)
        if state["stopped"]:
            raise BudgetExceeded(
                f"model '{spec.name}': stopped before exceeding inference.budget_usd={self.budget.limit:.2f} "
                f"(spent {self.budget.spent:.4f} this run; {state['ok']} answers stored). Raise the budget and "
                "rerun: stored answers are not sent again.")
