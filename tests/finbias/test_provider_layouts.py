"""Provider front pages (finlib.finbias.data.provider_layouts) through stage 02's statement reader.

Oracles: what each layout planted (the statement's span, the bytes removal keeps, the rule a front-matter
reader names, the slots read on the providers' published scales by the layouts' own reader), and
statements written by hand for the reader itself -- never stage 02's reader."""

from __future__ import annotations

import pytest

from finlib.finbias.data import messy_corpus as mc
from finlib.finbias.data import provider_layouts as pl
from finlib.finbias.perturb.statement import find_rating_statement, remove_statement, rewrite_statement
from finlib.finbias.vocab import RATINGS, Rating
from finlib.rehearsal.statements import expected_removal, fake_problem


@pytest.fixture(scope="module")
def corpus():
    return mc.provider_reports()


def _record(p: pl.ProviderPlant) -> dict:
    return {
        "statement_start": p.start,
        "statement_end": p.end,
        "statement_pieces": list(p.pieces),
        "slot_kinds": list(p.kinds),
    }


def test_layouts_cover_the_providers_and_read_what_they_planted(corpus):
    assert len(pl.LAYOUTS) >= 25 and len({n for n, _, _ in pl.LAYOUTS}) == len(pl.LAYOUTS)
    names = " ".join(n for n, _, _ in pl.LAYOUTS)
    for provider in ("argus", "cfra", "morningstar", "zacks", "sellside"):
        assert provider in names
    kinds = {k for p in corpus["plant"] for k in p.kinds}
    assert kinds >= {"word", "cfra", "cfra_glyphs", "morningstar", "ms_glyphs", "valuation", "zacks", "verb", "prev"}
    assert set(corpus["rule"]) == {"first_sentence", "rating_field", "front_matter_sentence"}
    for text, p in zip(corpus["text"], corpus["plant"]):
        assert pl.read_statement(text[p.start : p.end], p.pieces, p.kinds) == (p.rating, "")
        assert text[p.keep_from :].startswith(text[p.keep_from :].lstrip()) and p.end <= p.keep_from


def test_the_slot_reader_by_hand():
    pieces, kinds = ("Zacks Rank: #", " (", ")"), ("zacks", "word")
    assert pl.read_statement("Zacks Rank: #4 (Sell)", pieces, kinds)[0] is Rating.BEARISH
    assert pl.read_statement("Zacks Rank: #3 (Sell)", pieces, kinds)[0] is None  # number and label disagree
    assert pl.read_statement("Zacks Rank #4 (Sell)", pieces, kinds)[0] is None  # a literal changed
    assert (
        pl.read_statement("STARS: \u2605\u2605\u2606\u2606\u2606", ("STARS: ", ""), ("cfra_glyphs",))[0]
        is Rating.BEARISH
    )
    move = ("We ", " Acme (ACME) to ", " from ", ".")
    assert (
        pl.read_statement("We downgrade Acme (ACME) to Hold from Buy.", move, ("verb", "word", "prev"))[0]
        is Rating.NEUTRAL
    )
    assert pl.read_statement("We upgrade Acme (ACME) to Hold from Buy.", move, ("verb", "word", "prev"))[0] is None
    assert pl.read_statement("We upgrade Acme (ACME) to Hold from Hold.", move, ("verb", "word", "prev"))[0] is None


def test_stage02_finds_removes_and_fakes_every_layout_and_rating(corpus):
    """Every layout x rating: the rule and rating found are the planted ones, removal leaves exactly the
    front matter and the body, each fake changes only the statement and reads back at the planted slots
    (or is refused, which stage 02 counts as set aside)."""
    bad, refused, fakes = [], 0, 0
    for rid, text, p in zip(corpus["report_id"], corpus["text"], corpus["plant"]):
        st = find_rating_statement(text)
        if (st.rule, st.rating) != (p.rule, p.rating):
            bad.append((rid, p.layout, "rule", st.rule, st.detail))
            continue
        if remove_statement(text, st) != expected_removal(text, p.start, p.keep_from):
            bad.append((rid, p.layout, "removal", remove_statement(text, st)[:80]))
        for new in RATINGS:
            if new is p.rating:
                continue
            try:
                fake, _ = rewrite_statement(text, st, new)
            except ValueError:
                refused += 1
                continue
            fakes += 1
            why = fake_problem(text, fake, _record(p), new)
            if why:
                bad.append((rid, p.layout, "fake", new.value, why))
    assert not bad, bad[:5]
    assert fakes >= 1.8 * len(corpus) and refused <= 0.1 * len(corpus)


def test_the_checks_catch_a_reader_of_the_first_unit_only(corpus):
    """Seeded fault: the statement looked for in the first sentence unit alone (the authors' protocol on
    a provider page): the planted rules catch it on every page whose rating is not in its first sentence."""
    from finlib.finbias.perturb.statement import AUTHORS_READING

    missed = [
        p.layout
        for text, p in zip(corpus["text"], corpus["plant"])
        if find_rating_statement(text, AUTHORS_READING).rule != p.rule
    ]
    assert len(missed) == sum(p.rule != "first_sentence" for p in corpus["plant"])


def test_the_checks_catch_a_removal_that_takes_the_next_line(corpus):
    """Seeded fault: the stage's removal, then the line after the statement dropped too (a header block's
    next field, the body's first line)."""
    caught = 0
    for text, p in zip(corpus["text"], corpus["plant"]):
        st = find_rating_statement(text)
        out = remove_statement(text, st)
        cut = len(text[: st.start]) if text[: st.start].strip() else 0
        wrong = out[:cut] + out[cut:].split("\n", 1)[-1]
        caught += wrong != expected_removal(text, p.start, p.keep_from)
    assert caught == len(corpus)


def test_the_checks_catch_a_fake_that_keeps_the_number_or_flips_the_verb(corpus):
    """Seeded faults: a fake of a numbered box that rewrites the label but keeps the number ("Zacks Rank #2
    (Sell)"), and a move whose verb points the wrong way ("upgrade ... to Sell from Buy"), read back wrong
    at the planted slots, while the stage's own fakes of the same reports read right."""
    boxes = moves = 0
    for text, p in zip(corpus["text"], corpus["plant"]):
        st = find_rating_statement(text)
        new = Rating.BEARISH if p.rating is not Rating.BEARISH else Rating.BULLISH
        fake, _ = rewrite_statement(text, st, new)
        assert fake_problem(text, fake, _record(p), new) is None
        stmt = text[p.start : p.end]
        if {"zacks", "cfra"} & set(p.kinds) and "word" in p.kinds:
            slots = pl.statement_pattern(p.pieces).fullmatch(stmt)
            label = slots.group(p.kinds.index("word") + 1)
            half = (
                text[: p.start]
                + stmt.replace(f"({label})", "(Sell)" if new is Rating.BEARISH else "(Buy)")
                + text[p.end :]
            )
            assert fake_problem(text, half, _record(p), new) is not None, half[: p.end + 5]
            boxes += 1
        if "verb" in p.kinds:
            tail = len(text) - p.end
            rewritten = fake[p.start : len(fake) - tail]
            flipped = rewritten.replace("upgrade", "DOWN").replace("downgrade", "upgrade").replace("DOWN", "downgrade")
            assert fake_problem(text, fake[: p.start] + flipped + text[p.end :], _record(p), new) is not None
            moves += 1
    assert boxes >= 12 and moves >= 20


def test_a_field_value_is_a_rating_slot_but_a_verb_in_prose_is_not():
    """Hand-written: "Rating: REDUCE" in a header block is a bearish rating field; "We reduce our estimates"
    names no rating, so a page whose only candidate is that sentence is unread."""
    field = "ACME CORP (ACME)\n12 March 2024\n\nRating: REDUCE\nPrice target: $41\n\nSales fell 3%."
    st = find_rating_statement(field)
    assert (st.rule, st.rating, field[st.start : st.end]) == ("rating_field", Rating.BEARISH, "Rating: REDUCE")
    assert remove_statement(field, st) == "ACME CORP (ACME)\n12 March 2024\n\nPrice target: $41\n\nSales fell 3%."
    prose = "ACME CORP (ACME)\n12 March 2024\n\nWe reduce our estimates after a weak quarter.\n\nSales fell 3%."
    assert find_rating_statement(prose).rating is None
