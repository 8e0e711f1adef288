"""Prompt construction, truncation (first sentence kept) and answer parsing."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from finlib.llm.prompts import PROMPT_VERSION, SYSTEM_PROMPT, build_messages, first_sentence_end, truncate_text


def n_words(text: str) -> int:
    return len(text.split())


def test_messages_with_system_role():
    msgs = build_messages("Report body.", supports_system=True)
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert msgs[0]["content"] == SYSTEM_PROMPT
    assert msgs[1]["content"] == "Report body."


def test_messages_without_system_role_prepend_to_user():
    msgs = build_messages("Report body.", supports_system=False)
    assert [m["role"] for m in msgs] == ["user"]
    assert msgs[0]["content"].startswith(SYSTEM_PROMPT)
    assert msgs[0]["content"].endswith("Report body.")


def test_prompt_asks_for_the_papers_json_fields():
    for word in ("investor", "analy", "bullish", "neutral", "bearish", '"answer"', '"reason"', "JSON"):
        assert word in SYSTEM_PROMPT
    assert PROMPT_VERSION


def test_truncation_keeps_first_sentence_and_fits():
    first = "We rate Acme Corp. a Buy with a target of $50."
    text = first + " " + " ".join(f"word{i}." for i in range(200))
    out, truncated = truncate_text(text, 50, n_words)
    assert truncated
    assert out.startswith("We rate Acme Corp")
    assert n_words(out) <= 50
    # the largest prefix that fits: one more word would not
    assert n_words(text[: len(out)]) == n_words(out) and n_words(out) == 50


def test_short_text_untouched():
    assert truncate_text("One. Two.", 10, n_words) == ("One. Two.", False)


def test_abbreviation_does_not_end_the_first_sentence():
    text = "We rate Acme Corp. a Buy with a target of $50. " + " ".join(["filler."] * 50)
    out, truncated = truncate_text(text, 5, n_words)
    assert truncated and out == "We rate Acme Corp. a Buy with a target of $50."


def test_first_sentence_never_cut_even_over_budget():
    first = "This opening sentence carries the analyst rating of Bullish and is long."
    out, truncated = truncate_text(first + " More text here.", 3, n_words)
    assert truncated and out == first


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet="abcdefghij", min_size=1, max_size=8), min_size=2, max_size=60),
       st.integers(min_value=1, max_value=40))
def test_truncation_property(words, budget):
    text = "First " + words[0] + ". " + " ".join(words[1:])
    out, truncated = truncate_text(text, budget, n_words)
    assert text.startswith(out)
    assert out.startswith(text[: first_sentence_end(text)].rstrip())
    assert truncated == (out != text)
    if n_words(text) <= budget:
        assert not truncated
    if truncated and n_words(out) > budget:  # only when the first sentence alone is over budget
        assert out == text[: first_sentence_end(text)].rstrip()
