"""Stage 02 finds each report's rating statement once (`remembered_statements`): inside the block a text's
statement comes from memory, equal to the one found afresh; another reading or the block's end finds it again."""
from __future__ import annotations

from finlib.finbias.perturb import statement
from finlib.finbias.perturb.statement import (
    AUTHORS_READING,
    DEFAULT_READING,
    find_rating_statement,
    remembered_statements,
)

TEXTS = ["We rate Gamma Corp. (GMA) Buy with a $40 target. Revenue rose 4%.",
         "Important disclosures appear at the end.\n\nRating: Sell\nTarget: $12\n\nMargins fell.",
         "Gamma reported its third quarter. We rate it Hold."]


def _count_finds(monkeypatch) -> list[str]:
    calls: list[str] = []
    real = statement._find_rating_statement
    monkeypatch.setattr(statement, "_find_rating_statement", lambda t, r: calls.append(t) or real(t, r))
    return calls


def test_inside_the_block_each_text_is_read_once_with_the_same_statement(monkeypatch):
    fresh = [find_rating_statement(t) for t in TEXTS]
    calls = _count_finds(monkeypatch)
    with remembered_statements(DEFAULT_READING):
        first = [find_rating_statement(t) for t in TEXTS]
        again = [find_rating_statement("".join(list(t))) for t in TEXTS]  # equal text, another object
    assert first == again == fresh
    assert len(calls) == len(TEXTS)


def test_another_reading_and_the_blocks_end_find_the_statement_again(monkeypatch):
    calls = _count_finds(monkeypatch)
    with remembered_statements(DEFAULT_READING):
        find_rating_statement(TEXTS[1])
        authors = find_rating_statement(TEXTS[1], AUTHORS_READING)  # the authors' protocol: first sentence only
        assert find_rating_statement(TEXTS[1]) == find_rating_statement(TEXTS[1], DEFAULT_READING)
    assert authors.rating is None and find_rating_statement(TEXTS[1]).rating is not None
    assert len(calls) == 3  # default once, authors' once, and once more after the block
