"""A fake rating changes only the rating: every scale term x first-sentence templates x each other rating.

The templates are written here, as brokers write first lines, independently of the generator's and the messy
corpus's templates; they carry secondary direction words that are not the rating move ("lower margins",
"cost cuts", "raise our target", "cut our estimates", "up from", "down from"). Each template marks the slots a
fake may change: {R} the current rating, {P} the previous rating, {V} the verb of the rating move, {A} the
article before {R}. The fake must match the template outside those slots byte for byte, read back as the
fake rating, and stay coherent (the previous rating differs from the new one; the move verb points the way
the rating moves). Direction words and ranks are typed here, not imported from the writer.
"""
from __future__ import annotations

import re

import pytest

from finlib.finbias.perturb import ratings
from finlib.finbias.perturb.ratings import extract_analyst_rating, rewrite_rating
from finlib.finbias.vocab import RATING_SCALES, RATINGS, Rating, is_cjk, rating_of

RANK = {Rating.BEARISH: 0, Rating.NEUTRAL: 1, Rating.BULLISH: 2}
UP = {"upgrade", "upgraded", "upgrading", "upgrades", "raise", "raised", "raising", "raises", "lift", "lifted",
      "lifting", "boost", "boosted", "boosting"}
DOWN = {"downgrade", "downgraded", "downgrading", "downgrades", "lower", "lowered", "lowering", "lowers", "cut",
        "cutting", "trim", "trimmed", "trimming"}

# (template, verb written in {V} or None, direction of the original move: "up", "down" or None)
TEMPLATES: tuple[tuple[str, str | None, str | None], ...] = (
    ("We {V} Acme to {R} from {P} on lower margins and cost cuts.", "downgrade", "down"),
    ("We {V} Acme Corp. (ACME) to {R} from {P} and raise our target to $60.", "upgrade", "up"),
    ("Acme (ACME): {V} to {R} from {P}; we cut our estimates", "Lowering", "down"),
    ("We rate Acme Corp. (ACME) {R} with a $50 target.", None, None),
    ("We rate Acme {R} with a $50 target, up from $45.", None, None),
    ("Our {R} rating on Acme is unchanged despite cost cuts; we cut our estimates.", None, None),
    ("Acme is {V} from {P} to {R} after margins rose, up from a low base.", "upgraded", "up"),
    ("We initiate coverage of Acme Inc. with {A} {R} rating; EPS is down from last year.", None, None),
    ("Rating: {R}; target price lowered to $42, down from $48", None, None),
    ("{V} Acme to {R} from {P}: we raise our target to $60 and cut our estimates", "Upgrading", "up"),
    ("We reiterate {A} {R} rating on Acme, and lower our target to $45 on cost cuts.", None, None),
    ("Acme (ACME) {V} to {R} from {P}; margins down from 14% to 12%", "cut", "down"),
    ("We keep Acme at {R} even as we lower our estimates and raise our target to $60.", None, None),
    ("WE {V} ACME TO {R} FROM {P} ON LOWER MARGINS AND COST CUTS", "DOWNGRADE", "down"),
    ("We {V} Acme to {R} on cost cuts, with margins up from 10% to 12%.", "upgrade", "up"),
)


def display(term: str) -> str:
    return "-".join(" ".join(w[:1].upper() + w[1:] for w in part.split(" ")) for part in term.split("-"))


def cases():
    """(template, verb, direction, current term, previous term or None, analyst rating) for every English
    scale term; the previous term is a same-scale term the original move comes from (none: combo skipped)."""
    out = []
    for scale in RATING_SCALES:
        terms = {Rating.BULLISH: scale.bullish, Rating.NEUTRAL: scale.neutral, Rating.BEARISH: scale.bearish}
        for rating, words in terms.items():
            for word in words:
                if is_cjk(word):
                    continue
                for t, (template, verb, direction) in enumerate(TEMPLATES):
                    prev = None
                    if "{P}" in template:
                        pool = [w for r, ws in terms.items() for w in ws
                                if (RANK[r] < RANK[rating] if direction == "up" else RANK[r] > RANK[rating])]
                        if not pool:
                            continue
                        prev = pool[t % len(pool)]
                    elif direction == "up" and rating is Rating.BEARISH:
                        continue
                    out.append((template, verb, direction, word, prev, rating))
    return out


def render(template: str, verb: str | None, word: str, prev: str | None) -> str:
    upper = template.isupper() or template.replace("{V}", "").replace("{R}", "").replace("{P}", "").isupper()
    r, p = display(word), None if prev is None else display(prev)
    if upper:
        r, p = r.upper(), None if p is None else p.upper()
    article = "an" if r[:1].lower() in "aeiou" else "a"
    return template.format(V=verb, R=r, P=p, A=article)


def slot_pattern(template: str) -> re.Pattern[str]:
    parts = re.split(r"(\{[VRPA]\})", template)
    return re.compile("".join(f"(?P<{p[1]}>.+?)" if re.fullmatch(r"\{[VRPA]\}", p) else re.escape(p)
                              for p in parts) + r"\Z")


def violations(case, new: Rating) -> list[str]:
    template, verb, direction, word, prev, analyst = case
    original = render(template, verb, word, prev)
    try:
        fake, _ = rewrite_rating(original, new)
    except ValueError as exc:
        return [f"not rewritten: {exc}"]
    m = slot_pattern(template).match(fake)
    if m is None:
        return [f"words outside the rating, the move verb or the article changed: {original!r} -> {fake!r}"]
    bad = []
    g = m.groupdict()
    if rating_of(g["R"]) is not new:
        bad.append(f"rating slot {g['R']!r} is not {new.value}")
    read = extract_analyst_rating(fake)
    if read is not new:
        bad.append(f"extractor reads {read} from {fake!r}")
    if "A" in g and g["A"].lower() != ("an" if g["R"][:1].lower() in "aeiou" else "a"):
        bad.append(f"article {g['A']!r} before {g['R']!r}")
    shown_prev = rating_of(g["P"]) if "P" in g else None
    if "P" in g and (shown_prev is None or shown_prev is new):
        bad.append(f"previous rating {g['P']!r} with new {new.value}: {fake!r}")
    if "V" in g:
        v = g["V"].lower()
        if v not in UP | DOWN:
            bad.append(f"move verb {g['V']!r} is not a direction verb")
        elif shown_prev is not None and ((v in UP) != (RANK[new] > RANK[shown_prev])):
            bad.append(f"verb {g['V']!r} for a move {shown_prev.value} -> {new.value}: {fake!r}")
        elif shown_prev is None and ((v in UP and new is Rating.BEARISH) or (v in DOWN and new is Rating.BULLISH)):
            bad.append(f"verb {g['V']!r} for a move to {new.value}: {fake!r}")
    return [f"{original!r} -> {new.value}: {b}" for b in bad]


CASES = cases()


def test_the_grid_is_the_promised_size():
    english_terms = {w for s in RATING_SCALES for w in (*s.bullish, *s.neutral, *s.bearish) if not is_cjk(w)}
    assert len(TEMPLATES) >= 12
    assert {c[3] for c in CASES} == english_terms
    originals = [render(c[0], c[1], c[3], c[4]) for c in CASES]
    joined = " ".join(originals).lower()
    for secondary in ("lower margins", "cost cuts", "raise our target", "cut our estimates", "up from", "down from"):
        assert secondary in joined
    # every original states its planted rating (else the rewrite is not exercised)
    assert all(extract_analyst_rating(o) is c[5] for o, c in zip(originals, CASES))


def test_a_fake_changes_only_the_rating():
    bad = [v for case in CASES for new in RATINGS if new is not case[5] for v in violations(case, new)]
    assert not bad, f"{len(bad)} violations, e.g. {bad[:5]}"


def test_the_property_catches_a_writer_that_flips_every_direction_word(monkeypatch):
    """Seeded fault: every direction verb in the sentence treated as the move (the earlier writer)."""
    monkeypatch.setattr(ratings, "rating_move_verbs", lambda sentence, mentions: [
        v for v in ratings._VERB_RE.finditer(sentence)
        if not any(m.start < v.end() and v.start() < m.end for m in mentions)])
    bad = [v for case in CASES for new in RATINGS if new is not case[5] for v in violations(case, new)]
    assert any("changed" in b for b in bad)


@pytest.mark.parametrize("sentence,new,expected", [
    ("We downgrade Acme to Neutral from Bullish on lower margins and cost cuts.", Rating.BULLISH,
     "We upgrade Acme to Bullish from Neutral on lower margins and cost cuts."),
    ("We rate Acme Corp. (ACME) Accumulate with a $50 target.", Rating.BEARISH,
     "We rate Acme Corp. (ACME) Reduce with a $50 target."),
])
def test_examples(sentence, new, expected):
    assert rewrite_rating(sentence, new)[0] == expected
    assert extract_analyst_rating(expected) is new
