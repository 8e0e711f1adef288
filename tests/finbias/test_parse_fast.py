"""The parser's shortcuts for large runs read exactly what the full parser reads.

`normalised_context` must equal `_normalise` character for character (the echo check compares
substrings), and `parse_predictions` (items read one after another, repeated short replies read
once) must give every row the answer and note that `parse_rating_detail` gives it on its own.
"""
from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from finlib.finbias import answers
from finlib.finbias.answers import normalised_context, parse_predictions, parse_rating_detail, read_cut_reply

TEXTS = [
    "", " ", "\n\t", "*", "**Buy**", "  leading and trailing  ", "a\u00a0b\u2003c\x0bd\x1ce",
    "\u201cquoted\u201d and \u2018single\u2019", "### Heading\n\n__Bold__ `code`", "İstanbul ÉTÉ ß",
    "tabs\tand\nnew\r\nlines", "#_*`", " *x* ", "word*", "\u2028line\u2029para",
]


@pytest.mark.parametrize("text", TEXTS)
def test_normalised_context_equals_normalise(text):
    assert normalised_context(text) == answers._normalise(text)


def test_normalised_context_equals_normalise_on_random_text():
    rng = random.Random(7)
    alphabet = "aZ *_`#\u2019\u2018\u201c\u201d \t\n\u00a0\u2003\x0b.İ"
    for _ in range(2000):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        assert normalised_context(s) == answers._normalise(s), repr(s)


ECHO = "ACME maintained at Bullish with a revised target price of 40"
REPLIES = [
    '{"answer": "bullish", "reason": "growth"}', '{"answer": "Bullish"}', '{"answer": "Bullish"}',
    '```json\n{"answer": "bearish"}\n```', "<think>maybe bullish</think>{\"answer\": \"neutral\"}",
    "<think>still thinking", "Answer: **Neutral**", "I would rate this a Buy.", "Bearish", "bullish or neutral",
    "The market was bearish last year.", ECHO, ECHO, '{"answer": "bull', '{"reason": "The outlook',
    '{"answer": "neutral to bullish"}', "", None, "My rating: not bullish", "Final answer - Sell",
]


def _fixture(seed: int) -> tuple[pd.DataFrame, dict[str, str]]:
    """Replies spread over items in shuffled order; item i0's report contains ECHO, i1's does not."""
    rng = np.random.default_rng(seed)
    contexts = {f"i{k}": (f"Report {k}. {ECHO}. Margins held." if k % 2 == 0 else f"Report {k}. Margins fell.")
                for k in range(6)}
    rows = []
    for m in range(3):
        for j, text in enumerate(REPLIES):
            rows.append({"item_id": f"i{int(rng.integers(6))}", "model": f"m{m}", "mode": "generate",
                         "raw_text": text, "status": "ok", "truncated_output": bool(j == 13 and m == 2),
                         "p_bullish": np.nan, "p_neutral": np.nan, "p_bearish": np.nan})
    rows.append({**rows[0], "status": "error", "raw_text": None})
    for item in ("i0", "i1"):  # the same reply, copied from i0's report, original in i1's
        rows.append({**rows[0], "item_id": item, "raw_text": ECHO})
    df = pd.DataFrame(rows).sample(frac=1.0, random_state=seed).reset_index(drop=True)
    return df, contexts


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_parse_predictions_matches_the_full_parser_row_by_row(seed):
    df, contexts = _fixture(seed)
    out = parse_predictions(df, contexts)
    for i, row in df.iterrows():
        if row["status"] != "ok":
            assert out.loc[i, "parse_note"] == "not_answered"
            continue
        if row["truncated_output"]:
            r, note = read_cut_reply(row["raw_text"], contexts.get(row["item_id"]))
            assert out.loc[i, "parse_note"] == note and note in ("truncated", "truncated_read")
            assert out.loc[i, "answer"] == (None if r is None else r.value)
            continue
        r, note = parse_rating_detail(row["raw_text"], contexts.get(row["item_id"]))
        assert out.loc[i, "parse_note"] == note, (row["raw_text"], row["item_id"])
        assert out.loc[i, "answer"] == (None if r is None else r.value)
    # the same reply reads differently by item: a context-dependent reading is never shared
    notes = out[out["raw_text"] == ECHO].groupby("item_id")["parse_note"].agg(set)
    assert notes["i0"] == {"echo_of_input"} and "echo_of_input" not in notes["i1"]


def test_condition_texts_reads_like_the_dict_of_string_texts():
    cond = pd.DataFrame({"item_id": ["a", "b", "c", "a", "d"], "text": ["x", None, "z", "w", np.nan]})
    oracle = {k: v for k, v in zip(cond["item_id"], cond["text"]) if isinstance(v, str)}
    texts = answers.condition_texts(cond)
    assert dict(texts) == oracle == {"a": "w", "c": "z"}
    assert texts.get("b") is None and texts.get("missing") is None and len(texts) == 2
    assert answers.condition_texts(cond.drop(columns="text")) == {}


def _chunked(values: list) -> pd.arrays.ArrowExtensionArray:
    """An Arrow string column in several chunks (stage 03's parts joined), one of them empty."""
    import pyarrow as pa

    cut = [0, 3, 3, len(values) // 2, len(values)]
    parts = [pa.array(values[a:b], type=pa.large_string()) for a, b in zip(cut, cut[1:])]
    return pd.arrays.ArrowExtensionArray(pa.chunked_array(parts, type=pa.large_string()))


@pytest.mark.parametrize("storage", ["object", "str", "string[pyarrow]", "chunked arrow"])
def test_parse_predictions_reads_every_reply_column_storage_alike(storage):
    """Replies stored as objects, as pandas' default strings, as Arrow strings or as an Arrow column of
    several chunks read as the same Python values (a missing reply as no reply), row by row."""
    df, contexts = _fixture(3)
    texts = [t if isinstance(t, str) else None for t in df["raw_text"]]
    column = (_chunked(texts) if storage == "chunked arrow"
              else pd.array(texts, dtype=object if storage == "object" else storage))
    typed = df.assign(raw_text=pd.Series(column, index=df.index))
    assert [t if isinstance(t, str) else None for t in typed["raw_text"]] == texts
    out = parse_predictions(typed, contexts)
    for i, text in enumerate(texts):
        if df.loc[i, "status"] != "ok":
            assert out.loc[i, "parse_note"] == "not_answered"
            continue
        reader = read_cut_reply if df.loc[i, "truncated_output"] else parse_rating_detail
        r, note = reader(text, contexts.get(df.loc[i, "item_id"]))
        assert (out.loc[i, "answer"], out.loc[i, "parse_note"]) == (None if r is None else r.value, note), text
