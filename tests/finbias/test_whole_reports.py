"""Every report goes in whole; the answer gets the room the context leaves; a report that alone fills
the context is not sent, with its reason (hand-computed token arithmetic: one token per word)."""
from __future__ import annotations

import pandas as pd

from finlib.finbias.inference import plan_requests
from finlib.llm.context import MIN_OUTPUT_TOKENS, SAFETY_TOKENS
from finlib.llm.registry import ModelSpec

SPEC = ModelSpec(name="llama8k", backend="openai", model_id="m", supports_system=True, context_length=8192,
                 price_input_per_m=0.0, price_output_per_m=0.0, sampling={"temperature": 1.0, "top_p": 1.0},
                 base_url="http://127.0.0.1:1/v1", api_key_env=None)
INF = {"max_input_tokens": None, "max_new_tokens": "registry", "dtype": "float32",
       "prompt_version": "finbias-authors-v1"}
OVERHEAD = 10


def rows(n_words: int) -> pd.DataFrame:
    text = "We rate Acme a Buy. " + " ".join(["sales"] * (n_words - 5))
    return pd.DataFrame([{"item_id": "R0:original", "report_id": "R0", "condition": "original", "text": text}])


def plan(n_words: int, **inf):
    (req,) = plan_requests(rows(n_words), SPEC, lambda r: ["generate"], {**INF, **inf},
                           lambda t: len(t.split()), OVERHEAD)
    return req


def test_a_long_report_is_sent_whole_and_the_answer_gets_the_rest_of_the_context():
    req = plan(5000)  # 5,000 report tokens: the old budget (8192 - 4096) would have cut ~900 of them
    assert len(req.messages[-1]["content"].split()) == 5000 and not req.truncated
    room = 8192 - (OVERHEAD + 5000) - SAFETY_TOKENS
    assert req.params["max_new_tokens"] == room == req.meta["output_room"]
    assert req.meta["not_sent"] is None


def test_a_short_report_keeps_the_full_output_cap():
    req = plan(300)
    assert req.params["max_new_tokens"] == 4096 == req.meta["output_room"]


def test_a_report_that_alone_fills_the_context_is_not_sent_and_says_why():
    n = 8192 - OVERHEAD - SAFETY_TOKENS - MIN_OUTPUT_TOKENS + 1
    req = plan(n)
    assert "does not fit the context window" in req.meta["not_sent"] and not req.truncated
    assert plan(n - 1).meta["not_sent"] is None


def test_a_numeric_input_cap_is_the_embedded_runs_named_cut():
    req = plan(1000, max_input_tokens=400)
    assert req.truncated and len(req.messages[-1]["content"].split()) <= 400 - OVERHEAD - 2
    assert req.messages[-1]["content"].startswith("We rate Acme a Buy.")
