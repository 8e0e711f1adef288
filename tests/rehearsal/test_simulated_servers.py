"""The simulated servers speak vLLM's HTTP; the client fits whole prompts into each context window.

Oracles: hand-written vLLM error messages, hand-computed context arithmetic, and the planted
propensities read back over many prompts.
"""
from __future__ import annotations

import asyncio
import json
import threading
import urllib.request

import numpy as np
import pytest
from llm_helpers import make_request

from finlib.finbias.prompts import build_messages
from finlib.finbias.vocab import RATINGS
from finlib.llm.context import MIN_OUTPUT_TOKENS, fits, output_room, room_from_error
from finlib.llm.openai_backend import run_openai
from finlib.llm.registry import RegistryError, apply_endpoints, endpoint_env_name, load_registry
from finlib.llm.store import ResponseStore
from finlib.rehearsal.simulated_servers import Profile, SimulatedServer, finbias_reply, fundamentals
from finlib.rehearsal.stub_server import stub_spec

REPORT = ("We upgrade Corvanta Systems (CRVS) to Outperform from Sector Perform.\n\n"
          "Revenue grew 16.0% y/y to $1.2 bn in Q3, vs. the average analyst estimate of $1.1 bn. "
          "Diluted EPS of $1.30 compared with the average analyst estimate of $1.20, a difference of +6.0%.")


class Running:
    """One SimulatedServer on its own loop in a thread."""

    def __init__(self, profile: Profile):
        self.server = SimulatedServer(profile)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(10)
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}/v1"

    def __exit__(self, *exc):
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def test_room_is_what_the_context_leaves_and_never_below_the_minimum():
    assert output_room(8192, 5000, 4096) == 8192 - 5000 - 8          # the context binds, not the cap
    assert output_room(131072, 5000, 4096) == 4096                   # the cap binds
    assert fits(8192, 8192 - 8 - MIN_OUTPUT_TOKENS, 4096)
    assert not fits(8192, 8192 - 8 - MIN_OUTPUT_TOKENS + 1, 4096)
    # a run that asks for fewer tokens than MIN_OUTPUT_TOKENS fits whenever its whole cap fits
    assert fits(8192, 1000, 4) and fits(8192, 8192 - 8 - 4, 4) and not fits(8192, 8192 - 8 - 3, 4)


def test_room_from_vllm_context_errors_old_and_new_wording():
    new = ("'max_tokens' or 'max_completion_tokens' is too large: 4096. This model's maximum context length is "
           "8192 tokens and your request has 5000 input tokens (4096 > 8192 - 5000).")
    old = ("This model's maximum context length is 8192 tokens. However, you requested 9000 tokens (4904 in the "
           "messages, 4096 in the completion). Please reduce the length of the messages or completion.")
    assert room_from_error(new) == 8192 - 5000 - 1
    assert room_from_error(old) == 8192 - 4904 - 1
    assert room_from_error("HTTP 400: invalid temperature") is None
    assert room_from_error(new.replace("5000 input", "8190 input")) is None  # no room left: not retried


def test_server_lists_its_model_and_answers_400_then_the_client_uses_the_stated_room(tmp_path):
    prof = Profile(name="m", model_id="org/m-8k", context_length=2048, chars_per_token=2.0, runaway=0.0,
                   unparsed=0.0)
    with Running(prof) as r:
        listed = json.loads(urllib.request.urlopen(r.url + "/models", timeout=5).read())
        assert [m["id"] for m in listed["data"]] == ["org/m-8k"]
        spec = stub_spec(r.url, name="m", model_id="org/m-8k", context_length=2048, max_attempts=3, timeout_s=5.0,
                         api_key_env=None)
        text = "x" * 2000  # the server counts 1,000+ tokens; the client asks for 1,500 output tokens
        req = make_request(text, spec, {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 1500})
        with ResponseStore(tmp_path / "s.sqlite") as store:
            asyncio.run(run_openai(spec, [req], store, backoff_base_s=0.01, backoff_cap_s=0.02, seed=0))
            got = store.get([req.key])[req.key]
        assert r.server.books.context_400 == 1
        assert got["status"] == "ok" and got["input_tokens"] + got["output_tokens"] <= 2048


def test_wrong_model_name_is_a_404_like_vllm():
    prof = Profile(name="m", model_id="org/served", context_length=4096)
    with Running(prof) as r:
        body = json.dumps({"model": "org/other", "messages": [{"role": "user", "content": "hi"}]}).encode()
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(urllib.request.Request(r.url + "/chat/completions", data=body,
                                                          headers={"Content-Type": "application/json"}), timeout=5)
        assert exc.value.code == 404


def test_follow_strength_is_the_share_of_answers_that_copy_the_shown_rating():
    """Oracle: the closed form of the planted propensities (synth_planted.answer_probs) over a generated corpus."""
    from finlib.finbias.data.synth import generate_market
    from finlib.finbias.data.synth_planted import PlantedIndex, answer_probs

    m = generate_market({"n_reports": 40, "n_firms": 6, "words_min": 120, "words_max": 160}, 3)
    index = PlantedIndex(m.planted)
    p = Profile(name="f", model_id="f", context_length=8192, follow=0.7, skill=1.0, tilt=0.0, sway=0.5, unparsed=0.0)
    prop = {k: getattr(p, k) for k in ("follow", "skill", "tilt", "sway", "unparsed")}
    expected = answer_probs(prop, m.planted, m.planted["analyst_rating"], True)
    shown = m.planted["analyst_rating"].map({r.value: i for i, r in enumerate(RATINGS)}).to_numpy()
    draws = 40
    hits = [sum(json.loads(finbias_reply(p, text, f"{rid}-{k}", index)[0])["answer"] == rating
                for k in range(draws)) for text, rid, rating in zip(m.reports["text"], m.reports["report_id"],
                                                                    m.reports["analyst_rating"])]
    planted = expected[np.arange(len(shown)), shown]
    assert abs(sum(hits) / (draws * len(hits)) - planted.mean()) < 0.03  # SD of the share is below 0.008
    assert planted.min() >= 0.7
    no_rating = [finbias_reply(p, t.split("\n\n", 1)[1], "k", index)[2] for t in m.reports["text"]]
    assert set(no_rating) == {"none"}


def test_fundamentals_read_the_planted_numbers():
    up = "Revenue grew 16.0% y/y to $1 bn in Q1, vs. x. a difference of +6.0%."
    down = "Revenue declined 8.0% y/y to $1 bn in Q1, vs. x. a difference of -6.0%."
    assert fundamentals(up) == pytest.approx(((16 - 4) / 6 + 2) / 2)
    assert fundamentals(down) == pytest.approx(((-8 - 4) / 6 - 2) / 2)
    assert fundamentals("no numbers here") == 0.0


def test_thinking_models_think_and_runaways_stop_at_the_limit():
    p = Profile(name="t", model_id="t", context_length=32768, thinks=True, runaway=1.0, unparsed=0.0)
    text, n_out, _ = finbias_reply(p, REPORT, "k")
    assert text.startswith("<think>") and "</think>" in text and n_out > 10 ** 6
    msgs = build_messages(REPORT, True)
    srv = SimulatedServer(p)
    req = {"model": "t", "messages": msgs, "max_tokens": 64}
    resp, _ = asyncio.run(srv.handle_request("POST", "/v1/chat/completions", {}, json.dumps(req).encode()))
    body = json.loads(resp.split(b"\r\n\r\n", 1)[1])
    assert body["choices"][0]["finish_reason"] == "length" and body["usage"]["completion_tokens"] == 64


def test_endpoints_from_params_and_environment_environment_wins(tmp_path):
    reg = load_registry("params/models.yaml")
    env = {endpoint_env_name("gemma-7b-it"): "http://10.1.2.3:8003/v1"}
    out = apply_endpoints(reg, {"gemma-7b-it": {"base_url": "http://h:1/v1", "rpm": 7},
                                "qwen3-8b": {"base_url": "http://h:2/v1"}}, env)
    assert out["gemma-7b-it"].base_url == "http://10.1.2.3:8003/v1" and out["gemma-7b-it"].rpm == 7
    assert out["qwen3-8b"].base_url == "http://h:2/v1" and out["qwen2-7b-it"].base_url == reg["qwen2-7b-it"].base_url
    assert endpoint_env_name("llama-3.1-8b-it", "api_key_env") == "FINLIB_API_KEY_ENV__LLAMA_3_1_8B_IT"
    with pytest.raises(RegistryError, match="unknown model"):
        apply_endpoints(reg, {"no-such-model": {"base_url": "http://h/v1"}}, {})
    with pytest.raises(RegistryError, match="base_url"):
        apply_endpoints(reg, {"gemma-7b-it": {"base_url": "localhost:8000"}}, {})
    with pytest.raises(RegistryError, match="only openai"):
        apply_endpoints(reg, {"smollm2-135m": {"base_url": "http://h/v1"}}, {})


def test_each_open_model_has_its_own_port_and_a_vllm_command_without_generation_config():
    from urllib.parse import urlparse

    from finlib.llm.registry import vllm_command

    reg = load_registry("params/models.yaml")
    local = [s for s in reg.values() if s.backend == "openai" and "localhost" in (s.base_url or "")]
    ports = [urlparse(s.base_url).port for s in local]
    assert len(local) >= 15 and len(set(ports)) == len(ports)  # one server per model
    cmd = vllm_command(reg["gemma-2-9b-it"])
    assert cmd.startswith("vllm serve google/gemma-2-9b-it ") and "--generation-config vllm" in cmd
    assert f"--port {urlparse(reg['gemma-2-9b-it'].base_url).port}" in cmd and "--max-model-len 8192" in cmd
    with pytest.raises(RegistryError):
        vllm_command(reg["smollm2-135m"])


def test_vllm_commands_serve_each_open_model_in_the_authors_precision():
    """run_vllm.py: dtype="half" unless "gemma-2" is in the model name, then "bfloat16" (read from the
    authors' rule applied to the model ids, not from our records); the documented table is the
    command `vllm_command` prints for every Fin-Bias open model."""
    from pathlib import Path

    from finlib.llm.registry import vllm_command

    reg = load_registry("params/models.yaml")
    open_models = [s for s in reg.values() if s.backend == "openai" and s.paper_name and "localhost" in s.base_url
                   and 8001 <= int(s.base_url.split(":")[2].split("/")[0]) <= 8015]
    assert len(open_models) == 15
    doc = Path("docs/real-runs.md").read_text()
    for spec in open_models:
        want = "bfloat16" if "gemma-2" in spec.model_id else "half"
        assert f" --dtype {want} " in vllm_command(spec), spec.name
        assert f"`{vllm_command(spec)}`" in doc, spec.name
    no_dtype = [s for s in reg.values() if s.backend == "openai" and s.dtype is None and "localhost" in s.base_url]
    assert all("--dtype" not in vllm_command(s) for s in no_dtype)


def test_a_dtype_on_a_record_not_served_by_vllm_is_an_error(tmp_path):
    import yaml

    rec = {"name": "m", "backend": "local", "model_id": "x/y", "hf_path": "x/y", "supports_system": True,
           "context_length": 8, "price_input_per_m": 0, "price_output_per_m": 0,
           "sampling": {"temperature": 1.0, "top_p": 1.0}, "dtype": "half"}
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump({"models": [rec]}))
    with pytest.raises(RegistryError, match="dtype"):
        load_registry(path)
    rec.update(backend="openai", base_url="http://h/v1", api_key_env=None, dtype="fp8-ish")
    path.write_text(yaml.safe_dump({"models": [rec]}))
    with pytest.raises(RegistryError, match="dtype"):
        load_registry(path)


def test_rate_limit_answers_429_with_retry_after_beyond_rpm():
    clock = {"t": 0.0}
    srv = SimulatedServer(Profile(name="r", model_id="r", context_length=4096, rpm=2, unparsed=0.0, runaway=0.0),
                          clock=lambda: clock["t"])
    body = json.dumps({"model": "r", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}).encode()
    status = []
    for t in (0.0, 1.0, 2.0, 61.5):
        clock["t"] = t
        resp, _ = asyncio.run(srv.handle_request("POST", "/v1/chat/completions", {}, body))
        status.append(int(resp.split(b" ", 2)[1]))
        if status[-1] == 429:
            assert b"Retry-After: 58.00" in resp  # the first request leaves the window at t = 60
    assert status == [200, 200, 429, 200] and srv.books.rate_429 == 1


def test_token_limit_counts_the_last_minute_only():
    """tpm: a request is refused while the last minute's tokens plus its own exceed the limit, and
    admitted again once the earlier requests have left the window."""
    clock = {"t": 0.0}
    srv = SimulatedServer(Profile(name="r", model_id="r", context_length=4096, tpm=25, unparsed=0.0, runaway=0.0),
                          clock=lambda: clock["t"])
    got = []
    for t, tokens in ((0.0, 10), (10.0, 10), (20.0, 10), (59.9, 5), (60.5, 10), (70.5, 10)):
        clock["t"] = t
        got.append(srv._rate_limited(tokens) is None)
    # 10+10 admitted; +10 = 30 > 25 refused; +5 = 25 admitted; at 60.5 the first has left: 15+10 = 25
    # admitted; at 70.5 the second has left: 5+10+10 = 25 admitted
    assert got == [True, True, False, True, True, True]
    assert srv._window_tokens == 25 and len(srv._window) == 3
