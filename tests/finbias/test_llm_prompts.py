"""Prompt construction, truncation (first sentence kept) and answer parsing."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from finlib.finbias.prompts import (
    FINBIAS_PROMPTS,
    PROMPT_VERSION,
    SYSTEM_PROMPT,
    build_messages,
    finbias_prompt,
    first_sentence_end,
    truncate_text,
)

# A literal copy of the authors' system text (github.com/Xiaoyu1216/Fin-Bias, run_api.py and
# run_vllm.py, prepare_cot_inv_input): five lines joined with "\n". Kept as one literal here so that
# any change to the prompt module's copy fails this test.
AUTHORS_TEXT = ("You are an investor. Analyze the firm analyst report logically.\n"
                "Then provide your own investment rating.\n"
                "Format as a JSON object with the following fields:\n"
                "answer: The precise answer to the question. Only one of {bullish, neutral, bearish}.\n"
                "reason: One or more paragraphs indicating why you provide the answer.")


def n_words(text: str) -> int:
    return len(text.split())


def test_default_prompt_is_the_authors_verbatim():
    assert PROMPT_VERSION == "finbias-authors-v1"
    assert SYSTEM_PROMPT == AUTHORS_TEXT
    assert len(SYSTEM_PROMPT.split("\n")) == 5


def test_messages_with_system_role():
    msgs = build_messages("Report body.", supports_system=True)
    assert msgs == [{"role": "system", "content": AUTHORS_TEXT}, {"role": "user", "content": "Report body."}]


def test_messages_without_system_role_follow_the_authors_rule():
    # run_vllm.py: [{"role": "user", "content": system_input + "\n" + user_input}]
    msgs = build_messages("Report body.", supports_system=False)
    assert msgs == [{"role": "user", "content": AUTHORS_TEXT + "\n" + "Report body."}]


def test_reconstructed_prompt_stays_a_named_alternative():
    old = finbias_prompt("finbias-cot-v1")
    assert old.system != AUTHORS_TEXT
    msgs = build_messages("R.", supports_system=False, version="finbias-cot-v1")
    assert msgs[0]["content"] == old.system + "\n\n" + "R."  # its own (earlier) rule, keys unchanged
    for word in ("investor", "bullish", "neutral", "bearish", '"answer"', '"reason"', "JSON"):
        assert word in old.system
    assert set(FINBIAS_PROMPTS) == {"finbias-authors-v1", "finbias-cot-v1"}


def test_unknown_prompt_version_is_an_error():
    with pytest.raises(ValueError, match="finbias-authors-v1"):
        build_messages("x", version="finbias-v9")


def test_chat_template_gets_a_generation_prompt():
    """Our choice (README): like a chat server, the rendered prompt ends with the assistant header
    (the authors' vLLM script rendered it without one)."""
    from finlib.finbias.prompts import FINBIAS_LABELS
    from finlib.llm.local_backend import LocalModel

    class Tok:
        def apply_chat_template(self, messages, add_generation_prompt=False, tokenize=True):
            assert tokenize is False
            body = "".join(f"<{m['role']}>{m['content']}" for m in messages)
            return body + ("<assistant>" if add_generation_prompt else "")

    class Fake:
        tok = Tok()
        template_kwargs: dict = {}
        labels = FINBIAS_LABELS

    text = LocalModel.prompt_text(Fake(), build_messages("R."), "generate")
    assert text.endswith("<assistant>")
    assert LocalModel.prompt_text(Fake(), build_messages("R."), "score").endswith('<assistant>{"answer": "')


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
