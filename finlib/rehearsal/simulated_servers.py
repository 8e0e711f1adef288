"""Simulated OpenAI-compatible servers, one per registry model, for the offline rehearsal.

Why: the papers' full runs (19 Fin-Bias models x 4 conditions x 8,868 reports; BizFinBench's grid
and judges) cannot be executed offline, yet their failure modes only show at that size and against
servers that behave like the real ones. Each simulated server speaks HTTP exactly as vLLM and the
OpenAI API do (the same `/v1/chat/completions` JSON, `usage`, `finish_reason`, status codes, and
`GET /v1/models`), so the engine runs unchanged against it:

* its registry context window, with vLLM's 400 when prompt + max_tokens exceed it (the prompt is
  counted with the model's own simulated tokenizer: `chars_per_token`, not the client's estimate);
* its own latency (queueing behind `concurrency` slots, prefill + decode time, scaled by
  `time_scale`) and rate limits (requests and tokens per minute over a real-time window -> 429
  with Retry-After);
* `<think>...</think>` before the answer for thinking models, and occasional run-away replies cut
  at the token limit (finish_reason "length");
* planted answer propensities per model (`Profile`): how strongly it follows the rating a report's
  text shows (`follow`), how well it reads the fundamentals planted in the factual sentences
  (`skill`), how much the opinion sentences sway it (`sway`), its bullish tilt and its share of
  replies without the JSON answer. Which generated report a prompt is, which rating its text shows
  and whether its opinion sentences are still there come from the generator's own records
  (`finlib.finbias.data.synth_planted.PlantedIndex`), never from the project's rating extractor or
  sentence splitter, so a fake rating written wrongly is answered as what it shows. The rehearsal's
  truth (`synth_planted.expected_cells`) is the closed form of the same propensities.

BizFinBench items are recognised by their text (the benchmark files in `bizfin.data_dir` when
present, else the format samples) and answered right with the model's planted accuracy; judge and
refiner prompts are answered in their JSON / text formats. Everything is seeded: the same prompt
to the same model gets the same reply in every run.
"""
from __future__ import annotations

import asyncio
import collections
import hashlib
import json
import math
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from finlib.finbias.vocab import Rating
from finlib.rehearsal.stub_server import StubServer

_GROWTH = re.compile(r"Revenue (grew|declined) (\d+(?:\.\d+)?)% y/y")
_SURPRISE = re.compile(r"a difference of ([+-]\d+(?:\.\d+)?)%")
_MARGIN_BP = re.compile(r"Operating margin was [\d.]+% in Q\d, (up|down) approx\. (\d+) bp")


def _u(*parts: Any) -> float:
    """A uniform draw in [0, 1) from a hash of `parts` (same parts -> same draw, in any process)."""
    h = hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") / 2 ** 64


def _normal(*parts: Any) -> float:
    """A standard normal draw from a hash (Box-Muller over two hashed uniforms)."""
    u1, u2 = max(_u(*parts, "a"), 1e-12), _u(*parts, "b")
    return math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * u2)


@dataclass(frozen=True)
class Profile:
    """One simulated model: server behaviour and planted answer propensities."""

    name: str
    model_id: str
    context_length: int
    thinks: bool = False
    follow: float = 0.5           # P(answer = the rating the report states), when it states one
    skill: float = 1.0            # weight of the fundamentals read from the factual sentences
    sway: float = 0.5             # weight of the opinion sentences' tone, while they are in the report
    tilt: float = 0.6             # bullish tilt of the model's own view (in SDs)
    unparsed: float = 0.02        # share of replies that state no JSON answer
    runaway: float = 0.01         # share of replies that run on to the token limit
    chars_per_token: float = 4.0  # the simulated tokenizer
    concurrency: int = 64         # parallel slots (vLLM max_num_seqs)
    rpm: int = 0                  # server-side limits (0 = none): 429 with Retry-After beyond them
    tpm: int = 0
    latency_s: float = 0.3        # fixed part of one request
    prefill_tps: float = 20000.0  # prompt tokens per second
    decode_tps: float = 400.0     # output tokens per second
    bizfin_accuracy: float = 0.6  # P(a BizFinBench item is answered right)
    judge_noise: float = 8.0      # SD of a judge's score noise (0-100 scale)


def default_profile(name: str, model_id: str, context_length: int, thinks: bool, seed: int = 0,
                    **overrides: Any) -> Profile:
    """A model's planted propensities, spread by a hash of its name so rows differ (overrides win)."""
    u = lambda k: _u(seed, name, k)  # noqa: E731
    base = dict(follow=round(0.15 + 0.7 * u("follow"), 3), skill=round(0.3 + 1.5 * u("skill"), 3),
                tilt=round(0.2 + 0.8 * u("tilt"), 3), sway=round(0.2 + 0.8 * u("sway"), 3), unparsed=round(0.05 * u("unparsed"), 3),
                runaway=round(0.03 * u("runaway"), 3), chars_per_token=round(3.4 + 1.0 * u("cpt"), 2),
                bizfin_accuracy=round(0.3 + 0.6 * u("bizfin"), 3), judge_noise=round(4 + 8 * u("judge"), 2))
    base.update(overrides)
    return Profile(name=name, model_id=model_id, context_length=context_length, thinks=thinks, **base)


# ---------------------------------------------------------------- what a prompt says

def report_of(messages: list[dict]) -> str | None:
    """The report text of a Fin-Bias prompt (any named prompt version, with or without a system
    turn), or None when the messages are not a Fin-Bias prompt."""
    from finlib.finbias.prompts import FINBIAS_PROMPTS

    systems = {p.system: p.joiner for p in FINBIAS_PROMPTS.values()}
    first = messages[0].get("content", "") if messages else ""
    if len(messages) >= 2 and messages[0].get("role") == "system" and first in systems:
        return str(messages[-1].get("content", ""))
    for system, joiner in systems.items():
        if isinstance(first, str) and first.startswith(system + joiner):
            return first[len(system) + len(joiner):]
    return None


def fundamentals(text: str) -> float:
    """The quality signal a careful reader takes from the factual sentences (0 when none)."""
    zs = [((1 if d == "grew" else -1) * float(x) - 4.0) / 6.0 for d, x in _GROWTH.findall(text)]
    zs += [float(x) / 3.0 for x in _SURPRISE.findall(text)]
    zs += [(1 if d == "up" else -1) * float(x) / 120.0 for d, x in _MARGIN_BP.findall(text)]
    return sum(zs) / len(zs) if zs else 0.0


def own_view(p: Profile, report_id: str, signal: float, tone: float, opinions: bool) -> Rating:
    """The model's own rating of a generated report: skill x the planted signal of its factual sentences +
    tilt + sway x the tone of its opinion sentences while they are in the text, + a normal draw seeded by
    (model, report, opinions shown), cut at +-VIEW_CUT (finlib.finbias.data.synth_planted states its closed form)."""
    from finlib.finbias.data.synth_planted import VIEW_CUT

    v = p.skill * signal + p.tilt + (p.sway * tone if opinions else 0.0) + _normal(p.name, "view", report_id, opinions)
    return Rating.BEARISH if v < -VIEW_CUT else Rating.BULLISH if v > VIEW_CUT else Rating.NEUTRAL


def pick_answer(p: Profile, text: str, key: str, planted=None) -> tuple[Rating, str]:
    """(answer, reading kind) for one Fin-Bias prompt: with probability `follow` the rating the text shows
    (as the generator's records read it: `PlantedIndex.read`, never the project's extractor), else the
    model's own view. A text no generated report matches gets a view from its numbers alone."""
    reading = planted.read(text) if planted is not None else None
    if reading is None or reading.report_id is None:
        v = p.skill * fundamentals(text) + p.tilt + _normal(p.name, "view", hashlib.blake2b(text.encode()).hexdigest())
        return (Rating.BEARISH if v < -0.6 else Rating.BULLISH if v > 0.6 else Rating.NEUTRAL), "unknown"
    if reading.shown is not None and _u(p.name, "follow", key) < p.follow:
        return reading.shown, reading.kind
    row = planted.rows[reading.report_id]
    return own_view(p, reading.report_id, float(row["signal"]), float(row["tone"]), reading.opinions), reading.kind


# ---------------------------------------------------------------- replies

def _filler(n_tokens: int, seed: str) -> str:
    words = ("revenue", "margin", "guidance", "valuation", "cash", "flow", "estimate", "growth", "risk",
             "quarter", "the", "and", "of", "shares", "demand", "costs", "outlook", "balance", "sheet")
    k = int(_u(seed, "w") * len(words))
    return " ".join(words[(k + 7 * i) % len(words)] for i in range(max(1, n_tokens)))


def finbias_reply(p: Profile, text: str, key: str, planted=None) -> tuple[str, int, str]:
    """(reply text, output tokens it would take, reading kind) for one Fin-Bias prompt; every draw is
    seeded by (model, prompt key), so each answer is an independent draw."""
    label, kind = pick_answer(p, text, key, planted)
    n_reason = 60 + int(120 * _u(p.name, "len", key))
    reason = "The report's figures on " + _filler(n_reason, key)
    if _u(p.name, "unparsed", key) < p.unparsed:
        body = f"I would rather not give a single rating here. {reason}"
    else:
        body = json.dumps({"answer": label.value, "reason": reason})
    if p.thinks:
        body = f"<think>\nLet me weigh the report. {_filler(150 + int(300 * _u(p.name, 'think', key)), key)}\n</think>\n" + body
    n_out = max(1, len(body) // 4)
    if _u(p.name, "runaway", key) < p.runaway:  # a reply that never stops: cut at the limit
        n_out = 10 ** 9
    return body, n_out, kind


def bizfin_reply(p: Profile, task: str, gold: str, key: str) -> str:
    """A BizFinBench answer in the task's format (its record's `reply`): right with probability `bizfin_accuracy`."""
    from finlib.bizfin.tasks import task_info

    return task_info(task).reply(gold, _u(p.name, "bizfin", key) < p.bizfin_accuracy)


def judge_reply(p: Profile, prompt: str, key: str) -> str:
    """A judge's JSON score: higher for answers marked complete, plus the judge's own noise."""
    m = re.search(r"(\d+)到(\d+)之间的整数分数", prompt)
    lo, hi = (int(m.group(1)), int(m.group(2))) if m else (0, 100)
    answer = prompt.split("【回答】", 1)[-1].split("【待评回答】", 1)[-1][:400]
    base = 0.8 if "完整准确" in answer else 0.35
    score = base * (hi - lo) + lo + p.judge_noise / 100 * (hi - lo) * _normal(p.name, "judge", key)
    score = int(round(min(hi, max(lo, score))))
    return json.dumps({"score": score, "reason": "按评估维度逐项核对"}, ensure_ascii=False)


def refine_reply(prompt: str) -> str:
    """The refiner returns the answer it was shown (already fine in the dimension asked)."""
    return prompt.split("【回答】\n", 1)[-1].split("\n\n【评估维度】", 1)[0]


# ---------------------------------------------------------------- the server

@dataclass
class Books:
    """What one simulated server did: the counts a client's store must add up to."""

    requests: int = 0
    answers: int = 0
    context_400: int = 0
    rate_429: int = 0
    truncated: int = 0
    kinds: dict = field(default_factory=dict)
    readings: dict = field(default_factory=dict)  # Fin-Bias prompts by what the generator's records read in them


class SimulatedServer(StubServer):
    """One model's OpenAI-compatible server (HTTP handling inherited from the stub)."""

    def __init__(self, profile: Profile, bizfin_items: dict[str, tuple[str, str]] | None = None,
                 time_scale: float = 1.0, clock=time.monotonic, planted=None):
        super().__init__()
        self.profile = profile
        self.planted = planted  # finlib.finbias.data.synth_planted.PlantedIndex of the generated corpus
        self.items = bizfin_items or {}
        self.time_scale = time_scale
        self.books = Books()
        self.slots = asyncio.Semaphore(profile.concurrency) if profile.concurrency else None
        self._clock = clock
        self._window: collections.deque = collections.deque()  # (time, tokens) of the last minute's requests
        self._window_tokens = 0                                 # their token sum

    def n_tokens(self, text: str) -> int:
        """The simulated tokenizer: characters / chars_per_token, rounded up."""
        return math.ceil(len(text) / self.profile.chars_per_token)

    def _rate_limited(self, tokens: int) -> float | None:
        """Seconds to wait when this request would exceed rpm / tpm over the last minute."""
        p = self.profile
        if not p.rpm and not p.tpm:  # no limits: nothing to book
            return None
        now = self._clock()
        while self._window and now - self._window[0][0] >= 60.0:  # expire from the left: O(1) per request
            self._window_tokens -= self._window.popleft()[1]
        if (p.rpm and len(self._window) >= p.rpm) or (p.tpm and self._window_tokens + tokens > p.tpm):
            return max(0.05, 60.0 - (now - self._window[0][0])) if self._window else 1.0
        self._window.append((now, tokens))
        self._window_tokens += tokens
        return None

    def _error(self, status: int, message: str, kind: str, extra: dict | None = None) -> bytes:
        return self._respond(status, {"object": "error", "message": message, "type": kind, "param": None,
                                      "code": status}, extra)

    def reply(self, messages: list[dict], key: str) -> tuple[str, int, str]:
        """(text, output tokens, kind) for a request's messages."""
        last = str(messages[-1].get("content", "")) if messages else ""
        report = report_of(messages)
        if report is not None:
            text, n_out, reading = finbias_reply(self.profile, report, key, self.planted)
            self.books.readings[reading] = self.books.readings.get(reading, 0) + 1
            return text, n_out, "finbias"
        if "你是一名严谨的金融内容修订者" in last:
            out = refine_reply(last)
            return out, max(1, len(out) // 2), "refine"
        if "【评估维度】" in last:
            out = judge_reply(self.profile, last, key)
            return out, max(1, len(out) // 2), "judge"
        item = self.items.get(hashlib.sha256(last.encode()).hexdigest())
        if item is not None:
            out = bizfin_reply(self.profile, item[0], item[1], key)
            return out, max(1, len(out) // 2), "bizfin"
        return json.dumps({"answer": "neutral", "reason": "unrecognised prompt"}), 12, "other"

    async def handle_request(self, method: str, path: str, headers: dict, body: bytes) -> tuple[bytes | None, bool]:
        p = self.profile
        self.books.requests += 1
        if method == "GET" and path.rstrip("/").endswith("/models"):
            return self._respond(200, {"object": "list", "data": [
                {"id": p.model_id, "object": "model", "owned_by": "simulated", "max_model_len": p.context_length}]}), False
        if method == "GET" and path.rstrip("/").endswith("/stats"):
            return self._respond(200, vars(self.books)), False
        if method != "POST" or not path.endswith("/chat/completions"):
            return self._error(404, f"no route {method} {path}", "NotFoundError"), False
        req = json.loads(body or b"{}")
        if req.get("model") != p.model_id:
            return self._error(404, f"The model `{req.get('model')}` does not exist.", "NotFoundError"), False
        messages = req.get("messages") or []
        prompt_tokens = sum(self.n_tokens(str(m.get("content", ""))) + 4 for m in messages) + 2
        max_tokens = req.get("max_completion_tokens") or req.get("max_tokens") or (p.context_length - prompt_tokens)
        if prompt_tokens + max_tokens > p.context_length:
            self.books.context_400 += 1
            return self._error(400, f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This "
                                    f"model's maximum context length is {p.context_length} tokens and your request "
                                    f"has {prompt_tokens} input tokens ({max_tokens} > {p.context_length} - "
                                    f"{prompt_tokens}).", "BadRequestError"), False
        wait = self._rate_limited(prompt_tokens + max_tokens)
        if wait is not None:
            self.books.rate_429 += 1
            return self._error(429, "Rate limit reached for requests", "RateLimitError",
                               {"Retry-After": f"{wait:.2f}"}), False  # the window is in real seconds
        key = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()
        text, n_out, kind = self.reply(messages, key)
        finish = "stop"
        if n_out > max_tokens:
            finish, n_out = "length", max_tokens
            text = (text * (1 + 4 * max_tokens // max(1, len(text))))[: 4 * max_tokens]
            self.books.truncated += 1
        delay = (p.latency_s + prompt_tokens / p.prefill_tps + n_out / p.decode_tps) * self.time_scale
        if self.slots is not None:
            async with self.slots:
                await asyncio.sleep(delay)
        else:
            await asyncio.sleep(delay)
        self.books.answers += 1
        self.books.kinds[kind] = self.books.kinds.get(kind, 0) + 1
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n_out, "total_tokens": prompt_tokens + n_out}
        body_out = {"id": f"chatcmpl-{key[:24]}", "object": "chat.completion", "created": int(time.time()),
                    "model": p.model_id, "usage": usage,
                    "choices": [{"index": 0, "finish_reason": finish, "logprobs": None,
                                 "message": {"role": "assistant", "content": text}}]}
        return self._respond(200, body_out), False


def bizfin_index(items: dict[str, list]) -> dict[str, tuple[str, str]]:
    """sha256(last user turn as sent) -> (task, gold), for both system-role variants of each item."""
    out = {}
    for task, its in items.items():
        for it in its:
            for sys in (True, False):
                msgs = it.chat_messages(sys)
                out[hashlib.sha256(str(msgs[-1]["content"]).encode()).hexdigest()] = (task, it.gold)
    return out


async def start_servers(profiles: Iterable[Profile], bizfin_items: dict[str, tuple[str, str]] | None = None,
                        time_scale: float = 1.0, planted=None) -> dict[str, SimulatedServer]:
    """Start one server per profile on a free 127.0.0.1 port; name -> running server."""
    out = {}
    for p in profiles:
        s = SimulatedServer(p, bizfin_items, time_scale, planted=planted)
        await s.start(0)
        out[p.name] = s
    return out
