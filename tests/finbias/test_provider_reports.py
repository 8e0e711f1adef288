"""Report front pages as research providers print them (hand-written corpus, tests/finbias/provider_corpus.py):
every check is a property over all rating statements x layouts (slots) x ratings. Extraction, exact split,
removal leaving exactly the body, the fake read back, and a word diff that lets only rating words, provider
points and the move verb change. Truth comes from the fixture text (slots and [[ ]] markers), not the code."""

from __future__ import annotations

import difflib
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from provider_corpus import Report, layouts, render, sentences, takes

from finlib.finbias.perturb.statement import (
    AUTHORS_READING,
    UNREAD,
    find_rating_statement,
    remove_statement,
    rewrite_statement,
)
from finlib.finbias.vocab import RATINGS, Rating

SENTENCES = sentences()
LAYOUTS = layouts()
RATED = [s for s in SENTENCES if s.rating != "none"]
CONTROLS = [s for s in SENTENCES if s.rating == "none"]
SLOT_LAYOUTS = [lay for lay in LAYOUTS if lay.rating == "slot"]
FIXED = [lay for lay in LAYOUTS if lay.rating != "slot"]
CASES = [(lay, s) for lay in SLOT_LAYOUTS for s in RATED if takes(lay, s)]


def test_corpus_size_and_spread():
    """The brief's floor: >= 150 first sentences, >= 25 layouts, every provider, negative controls."""
    assert len(RATED) >= 150 and len(LAYOUTS) >= 25 and len(CONTROLS) >= 10
    assert {s.provider for s in RATED} >= {"argus", "cfra", "morningstar", "zacks", "sellside"}
    assert {r.value for r in RATINGS} <= {s.rating for s in RATED}
    assert len(CASES) > 2500


def _report(layout, sentence=None) -> Report:
    return render(layout, None if sentence is None else sentence.text)


def _check_found(rep: Report, want: str, rule: str) -> list[str]:
    """What is wrong with the statement found in `rep` (empty: right rating, span, rule and removal)."""
    got = find_rating_statement(rep.text)
    errors = []
    if got.rating is None or got.rating.value != want:
        return [f"{rep.layout}: read {got.rating} ({got.detail}) for {want}: {rep.text[:90]!r}"]
    if (got.start, got.end) != (rep.start, rep.end):
        errors.append(f"{rep.layout}: statement {rep.text[got.start : got.end]!r} != {rep.text[rep.start : rep.end]!r}")
    allowed = {"front_matter_sentence", "rating_field"} if rule == "front_matter_sentence" else {rule}
    if got.rule not in allowed:
        errors.append(f"{rep.layout}: rule {got.rule} not in {allowed}")
    elif remove_statement(rep.text, got) != rep.removed:
        errors.append(f"{rep.layout}: removal {remove_statement(rep.text, got)[:80]!r} != {rep.removed[:80]!r}")
    return errors


def test_every_statement_in_every_layout_is_found_split_and_removed_exactly():
    errors = [e for lay, s in CASES for e in _check_found(_report(lay, s), s.rating, lay.rule)]
    assert not errors, f"{len(errors)} of {len(CASES)}: {errors[:5]}"


@pytest.mark.parametrize("layout", FIXED, ids=lambda lay: lay.name)
def test_provider_boxes_and_fields(layout):
    rep = _report(layout)
    if layout.rating == "none":
        got = find_rating_statement(rep.text)
        assert got.rating is None and got.rule == UNREAD and got.detail
    else:
        assert _check_found(rep, layout.rating, layout.rule) == []


@pytest.mark.parametrize("sentence", CONTROLS, ids=lambda s: s.text[:40])
def test_negative_controls_state_no_rating_in_any_layout(sentence):
    for lay in SLOT_LAYOUTS:
        rep = render(lay, sentence.text)
        got = find_rating_statement(rep.text)
        assert got.rating is None, (lay.name, rep.text[got.start : got.end])


def test_unknown_scale_and_not_rated_are_unread_with_the_field_named():
    by = {lay.name: lay for lay in LAYOUTS}
    for name in ("unknown_scale_field", "not_rated_field"):
        got = find_rating_statement(_report(by[name]).text)
        assert got.rule == UNREAD and "Rating:" in got.detail and "no known rating scale" in got.detail


def test_authors_protocol_reads_the_first_sentence_only():
    plain = next(lay for lay in LAYOUTS if lay.name == "plain_first")
    after_title = next(lay for lay in LAYOUTS if lay.name == "caps_company_date")
    s = RATED[0]
    assert find_rating_statement(_report(plain, s).text, AUTHORS_READING).rule == "first_sentence"
    got = find_rating_statement(_report(after_title, s).text, AUTHORS_READING)
    assert got.rating is None and "first sentence" in got.detail


# ---- fakes ---------------------------------------------------------------------------------------

# Words a fake may change (written here from the providers' scales, not imported from the code under test):
# rating words, provider points, and the verbs and articles that must agree with them.
_RATING_WORDS = set(
    "buy hold sell strong outperform underperform perform market sector peer in line in-line overweight "
    "underweight equal weight equal-weight neutral bullish bearish positive negative accumulate add reduce "
    "undervalued overvalued fairly valued star stars market-perform".split()
)
_VERBS = set(
    "upgrade upgrades upgraded upgrading downgrade downgrades downgraded downgrading raise raises raised raising "
    "lower lowers lowered lowering lift lifts lifted lifting cut cuts cutting trim trims trimmed trimming boost "
    "boosts boosted boosting".split()
)
_POINT = re.compile(r"^[(#]*[1-5]?(?:-stars?|-star)?[)]?$|^[\u2605\u2606]+$|^(?:one|two|three|four|five)(?:-star)?$")


def _word(w: str) -> str:
    return w.strip(".,;:()!?\"'\u2026").lower()


def _allowed(w: str) -> bool:
    core = _word(w)
    parts = re.split(r"[-\u2010\u2011\s/]", core)
    return bool(
        core in _RATING_WORDS
        or core in _VERBS
        or core in ("a", "an")
        or _POINT.match(core)
        or all(p in _RATING_WORDS or _POINT.match(p) or p == "" for p in parts)
        or re.fullmatch(r"#?[1-5][-\u2010\u2011]?(strong|buy|hold|sell|stars?)?", core)
    )


def _masked(text: str) -> list[str]:
    """The words of `text` with every run of words a fake may change (rating words, points, move verbs,
    articles, and "to"/"from" between them in a transition) as one placeholder."""
    out: list[str] = []
    for w in text.split():
        if _allowed(w) or (_word(w) in ("to", "from") and out and out[-1] == "<R>"):
            if not out or out[-1] != "<R>":
                out.append("<R>")
        else:
            out.append(w.rstrip(".,;:!?\u2026") if _allowed(w.rstrip(".,;:!?\u2026")) else w)
    return out


def _changed_words_are_allowed(before: str, after: str) -> list[str]:
    """Words outside the rating that differ: the masked texts must be equal word for word."""
    a, b = _masked(before), _masked(after)
    if a == b:
        return []
    ops = difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes()
    return [w for op, i1, i2, j1, j2 in ops if op != "equal" for w in a[i1:i2] + b[j1:j2]]


_RANKS = {
    **{w: 2 for w in ("buy", "outperform", "overweight", "strong buy", "accumulate", "add")},
    **{
        w: 1
        for w in (
            "hold",
            "neutral",
            "equal-weight",
            "equal weight",
            "market perform",
            "sector perform",
            "peer perform",
            "in line",
            "in-line",
            "perform",
            "market-perform",
        )
    },
    **{w: 0 for w in ("sell", "underperform", "underweight", "strong sell", "reduce", "sector underperform")},
}
_MOVE = re.compile(
    r"\b(upgrad|downgrad|rais|lower|lift|cut|trim)\w*\b.*?\bto\s+([A-Za-z -]+?)\s+from\s+([A-Za-z -]+?)\b"
    r"(?=[.,;:(]|\s+(?:on|as|after|and|with|given|ahead)\b|$)",
    re.IGNORECASE | re.DOTALL,
)


def _verb_agrees(fake: str) -> bool:
    """In "<verb> ... to X from Y", the verb's direction is the move's (bullish > neutral > bearish)."""
    m = _MOVE.search(fake)
    if not m:
        return True
    x, y = (" ".join(g.lower().replace("\u2011", "-").split()) for g in (m.group(2), m.group(3)))
    if x not in _RANKS or y not in _RANKS or _RANKS[x] == _RANKS[y]:
        return True
    up = m.group(1).lower() in ("upgrad", "rais", "lift")
    return up == (_RANKS[x] > _RANKS[y])


def _check_fake(rep: Report, new: Rating) -> list[str]:
    got = find_rating_statement(rep.text)
    if got.rating is None or got.rating is new:
        return []
    try:
        fake, _ = rewrite_statement(rep.text, got, new)
    except ValueError:  # set aside and counted by stage 02, never written badly
        return []
    errors = []
    back = find_rating_statement(fake)
    if back.rating is not new:
        errors.append(f"read back {back.rating} for {new}: {fake[got.start : got.start + 120]!r}")
    tail = len(rep.text) - got.end
    if fake[: got.start] != rep.text[: got.start] or fake[len(fake) - tail :] != rep.text[got.end :]:
        errors.append(f"body changed: {fake[:120]!r}")
    stmt, fstmt = rep.text[got.start : got.end], fake[got.start : len(fake) - tail]
    bad = _changed_words_are_allowed(stmt, fstmt)
    if bad:
        errors.append(f"words changed outside the rating: {bad}: {stmt!r} -> {fstmt!r}")
    if not _verb_agrees(fstmt):
        errors.append(f"move verb disagrees: {fstmt!r}")
    return errors


def test_fakes_in_every_layout_read_back_and_touch_only_the_rating():
    errors, written = [], 0
    for lay, s in CASES:
        rep = _report(lay, s)
        for new in RATINGS:
            errors += _check_fake(rep, new)
            written += new.value != s.rating
    assert not errors, f"{len(errors)} of {written}: {errors[:5]}"


@pytest.mark.parametrize("layout", [lay for lay in FIXED if lay.rating != "none"], ids=lambda lay: lay.name)
def test_fakes_of_provider_boxes(layout):
    rep = _report(layout)
    got = find_rating_statement(rep.text)
    for new in RATINGS:
        if new is not got.rating:
            assert _check_fake(rep, new) == []
            assert rewrite_statement(rep.text, got, new)[0] != rep.text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(CASES), st.sampled_from(RATINGS))
def test_fake_property_over_statements_layouts_and_ratings(case, new):
    layout, sentence = case
    assert _check_fake(_report(layout, sentence), new) == []


@pytest.mark.parametrize(
    ("sentence", "new", "want"),
    [
        ("Apple Inc. (AAPL) currently carries a Zacks Rank #2 (Buy).", Rating.BEARISH, "Zacks Rank #4 (Sell)"),
        (
            "Arista Networks (ANET) currently sports a Zacks Rank #1 (Strong Buy).",
            Rating.BEARISH,
            "Zacks Rank #5 (Strong Sell)",
        ),
        ("We keep our 4-STARS (Buy) opinion on shares of Visa (V).", Rating.NEUTRAL, "3-STARS (Hold)"),
        (
            "We are lowering our rating on Americas Gold and Silver Corporation of Nevada Holdings Ltd. (USAS) to SELL "
            "from HOLD.",
            Rating.BULLISH,
            "We are raising our rating on Americas",
        ),
        (
            "We upgrade Target (TGT) to Buy from Hold on positive traffic trends.",
            Rating.BEARISH,
            "We downgrade Target (TGT) to Sell from Hold on positive traffic trends.",
        ),
        (
            "We upgrade Adobe (ADBE) to Outperform; we see a multi-year upgrade cycle in Creative Cloud.",
            Rating.BEARISH,
            "a multi-year upgrade cycle",
        ),
        (
            "We reiterate our Buy rating on Apple (AAPL), unchanged since our upgrade in March.",
            Rating.BEARISH,
            "since our upgrade in March",
        ),
        (
            "We upgrade Ross Stores (ROST) to Buy from Hold, as management continues to hold inventories lean.",
            Rating.BEARISH,
            "We downgrade Ross Stores (ROST) to Sell from Hold, as management continues to hold",
        ),
        ("We think shares of narrow-moat Hershey are fairly valued.", Rating.BULLISH, "are undervalued"),
        ("Shares of no-moat Carvana trade in 1-star territory.", Rating.BULLISH, "5-star territory"),
    ],
)
def test_named_rewrites(sentence, new, want):
    """Hand-computed fakes of the statements a person reads without effort."""
    got = find_rating_statement(sentence)
    assert got.rule == "first_sentence"
    assert want in rewrite_statement(sentence, got, new)[0]


def test_fields_keep_number_and_label_together():
    text = "Zacks Equity Research\nWalgreens Boots Alliance (WBA)\nZacks Rank: #5-Strong Sell\n\nBody text here."
    got = find_rating_statement(text)
    assert got.rule == "rating_field" and got.rating is Rating.BEARISH
    assert "Zacks Rank: #1-Strong Buy\n" in rewrite_statement(text, got, Rating.BULLISH)[0]
    assert "Zacks Rank: #3-Hold\n" in rewrite_statement(text, got, Rating.NEUTRAL)[0]
    stars = "Stock Report\nRecommendation: \u2605\u2605\u2605\u2605\u2606 BUY\n\nBody text here."
    got = find_rating_statement(stars)
    assert rewrite_statement(stars, got, Rating.BEARISH)[0].split("\n")[1] == (
        "Recommendation: \u2605\u2605\u2606\u2606\u2606 SELL"
    )


def test_incoherent_provider_statement_is_unread():
    """Zacks #3 is Hold: "#3 (Buy)" states two ratings, read as none rather than guessed."""
    got = find_rating_statement("Acme (ACME) currently carries a Zacks Rank #3 (Buy).\n\nBody.")
    assert got.rating is None and got.rule == UNREAD and "disagree" in got.detail
