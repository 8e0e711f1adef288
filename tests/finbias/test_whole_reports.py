"""Every report goes in whole; the answer gets the room the context leaves; a report the client counts
as filling the context is still sent (the server decides), and a local model's is an empty answer
inside N with its reason (hand-computed token arithmetic: one token per word)."""
from __future__ import annotations

import pandas as pd
import pytest

from finlib.finbias.inference.stage import plan_requests
from finlib.llm.context import MIN_OUTPUT_TOKENS, SAFETY_TOKENS
from finlib.llm.spec import ModelSpec

SPEC = ModelSpec(name="llama8k", backend="openai", model_id="m", supports_system=True, context_length=8192,
                 price_input_per_m=0.0, price_output_per_m=0.0, sampling={"temperature": 1.0, "top_p": 1.0},
                 base_url="http://127.0.0.1:1/v1", api_key_env=None)
INF = {"max_input_tokens": None, "max_new_tokens": "registry", "dtype": "float32", "threads": None,
       "prompt_version": "finbias-authors-v1", "constrained_json": []}
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
    assert req.meta["context_refused"] is None


def test_a_short_report_keeps_the_full_output_cap():
    req = plan(300)
    assert req.params["max_new_tokens"] == 4096 == req.meta["output_room"]


def test_a_report_the_count_says_fills_the_context_is_still_sent_to_a_server():
    n = 8192 - OVERHEAD - SAFETY_TOKENS - MIN_OUTPUT_TOKENS + 1
    req = plan(n)
    # never held back on the client's count: asked with the full cap, the server's 400 states its own count
    assert req.meta["context_refused"] is None and req.params["max_new_tokens"] == 4096 and not req.truncated
    assert plan(n - 1).params["max_new_tokens"] == MIN_OUTPUT_TOKENS      # counted to fit: the room left


def test_a_local_models_prompt_that_fills_its_context_is_an_empty_answer_inside_n():
    import dataclasses

    from finlib.finbias.answers import parse_predictions
    from finlib.finbias.inference.stage import _rows
    from finlib.llm.context import CONTEXT_REFUSED

    local = dataclasses.replace(SPEC, backend="local")
    n = 8192 - OVERHEAD - SAFETY_TOKENS - MIN_OUTPUT_TOKENS + 1
    (req,) = plan_requests(rows(n), local, lambda r: ["generate"], INF, lambda t: len(t.split()), OVERHEAD)
    assert "does not fit the context window" in req.meta["context_refused"]
    (row,) = _rows([req], {})                       # nothing stored: the empty answer comes from the plan
    assert row["status"] == "ok" and row["raw_text"] == "" and row["error"].startswith(CONTEXT_REFUSED)
    parsed = parse_predictions(pd.DataFrame([row])).iloc[0]
    assert bool(parsed["answered"]) and not parsed["parsed"] and parsed["parse_note"] == "empty"


def test_a_numeric_input_cap_is_the_embedded_runs_named_cut():
    req = plan(1000, max_input_tokens=400)
    assert req.truncated and len(req.messages[-1]["content"].split()) <= 400 - OVERHEAD - 2
    assert req.messages[-1]["content"].startswith("We rate Acme a Buy.")


class WordTokenizer:
    """A stand-in for a model's own tokenizer: one token per word, a 7-token chat template."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(range(len(text.split())))

    def apply_chat_template(self, messages, add_generation_prompt: bool = True, tokenize: bool = True) -> list[int]:
        return list(range(7 + sum(len(m["content"].split()) for m in messages)))


def test_output_room_is_sized_with_the_models_own_tokenizer_when_on_disk(monkeypatch):
    from finlib.finbias.inference import stage as inference

    seen = []
    monkeypatch.setattr(inference, "hub_tokenizer", lambda model_id: seen.append(model_id) or WordTokenizer())
    n_tokens, overhead, how = inference.server_token_counter(SPEC, {**INF, "prompt_length_by": "model_tokenizer"})
    assert how == "model_tokenizer" and seen == ["m"]
    text = rows(5000)["text"].iloc[0]
    assert n_tokens(text) == 5000                     # words, not characters / 4 (~1,300 here)
    instructions = inference.build_messages("", True, INF["prompt_version"])
    assert overhead == 7 + sum(len(m["content"].split()) for m in instructions)


def test_the_estimate_is_a_named_fallback(monkeypatch):
    from finlib.finbias.inference import stage as inference

    monkeypatch.setattr(inference, "hub_tokenizer", lambda model_id: None)   # not on disk
    n_tokens, _, how = inference.server_token_counter(SPEC, {**INF, "prompt_length_by": "model_tokenizer"})
    assert how == "estimate (no tokenizer on disk)" and n_tokens("x" * 400) == 100
    monkeypatch.setattr(inference, "hub_tokenizer", lambda model_id: pytest.fail("the estimate loads no tokenizer"))
    _, _, how = inference.server_token_counter(SPEC, {**INF, "prompt_length_by": "estimate"})
    assert how == "estimate"


def test_a_tokenizer_that_is_not_cached_is_never_downloaded(monkeypatch, tmp_path):
    from finlib.finbias.inference import stage as inference

    calls = []

    class Auto:
        @staticmethod
        def from_pretrained(model_id, **kw):
            calls.append(kw)
            raise OSError("not in the cache")

    import transformers
    from huggingface_hub import constants

    monkeypatch.setattr(transformers, "AutoTokenizer", Auto)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    snapshot = tmp_path / "models--org--cached" / "snapshots" / "abc123"  # the cache's own layout
    snapshot.mkdir(parents=True)
    (snapshot / "tokenizer_config.json").write_text("{}")
    (tmp_path / "models--org--cached" / "refs").mkdir()
    (tmp_path / "models--org--cached" / "refs" / "main").write_text("abc123")
    inference.hub_tokenizer.cache_clear()
    assert inference.hub_tokenizer("org/not-cached") is None and calls == []          # nothing on disk: not asked
    assert inference.hub_tokenizer("org/cached") is None and calls == [{"local_files_only": True}]
    assert inference.hub_tokenizer("org/cached") is None and len(calls) == 1          # cached: asked once
    assert inference.hub_tokenizer("gpt-4.1") is None and len(calls) == 1            # no Hub id: not asked
    inference.hub_tokenizer.cache_clear()


def test_looking_for_a_tokenizer_that_is_not_on_disk_imports_no_transformers(tmp_path):
    """The check runs before transformers (and torch) would be imported: ~0.2 GB of memory."""
    import os
    import subprocess
    import sys

    code = ("import sys; from finlib.finbias.inference.stage import hub_tokenizer; "
            "assert hub_tokenizer('org/not-cached') is None; print('transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "HF_HUB_CACHE": str(tmp_path)})
    assert out.stdout.strip() == "False"


def test_stage_03_imports_no_sentence_splitter_until_a_report_is_cut():
    """Importing stage 03 loads no nltk (which loads scipy and scikit-learn, ~0.1 GB); the first sentence
    kept by a length cap then loads it and splits as ever."""
    import subprocess
    import sys

    code = ("import sys; import finlib.finbias.inference.stage; print(sorted({'nltk', 'scipy', 'sklearn'} & "
            "set(sys.modules))); from finlib.finbias.sentences import first_sentence_span; "
            "print(first_sentence_span('We rate Gamma Buy. Sales rose.'), 'nltk' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["[]", "(0, 18) True"]
