"""MPQA lexicon: the .tff parser (real file + hand-written quirks), matching policy, download."""
from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from finlib.finbias.perturb.lexicon import (
    Lexicon,
    LexiconError,
    LexiconUnavailable,
    download,
    load_lexicon,
    parse_tff,
)
from finlib.finbias.perturb.subjectivity import remove_subjective_sentences

MPQA_NAME = "subjclueslen1-HLTEMNLP05.tff"

# A hand-written lexicon with the upstream quirks: a stray token, unknown keys, stemmed1=1.
FIXTURE = """\
type=strongsubj len=1 word1=abuse pos1=verb stemmed1=y priorpolarity=negative
type=weaksubj len=1 word1=abuse pos1=noun stemmed1=n priorpolarity=negative
type=strongsubj len=1 word1=Terrific pos1=adj stemmed1=n priorpolarity=positive
type=strongsubj len=1 word1=pervasive pos1=adj stemmed1=n m priorpolarity=negative
type=weaksubj len=1 word1=strong pos1=adj stemmed1=n polarity=positive priorpolarity=positive
type=strongsubj len=1 word1=lugubrious pos1=adj stemmed1=1 priorpolarity=negative
type=strongsubj len=1 word1=anti- pos1=noun stemmed1=n priorpolarity=negative
type=strongsubj len=1 word1=cost-effective pos1=adj stemmed1=n priorpolarity=positive

type=strongsubj len=1 word1=worry pos1=anypos stemmed1=y priorpolarity=negative mpqapolarity=strongneg
"""


@pytest.fixture()
def lex() -> Lexicon:
    entries, report = parse_tff(FIXTURE.splitlines(), "fixture.tff")
    return Lexicon(entries, report, "fixture.tff")


def test_fixture_parse_and_quirks(lex: Lexicon) -> None:
    rep = lex.report
    assert rep.lines == 9 and len(lex.entries) == 9
    assert rep.tokens_without_equals == [(4, "m")]
    assert dict(rep.unknown_keys) == {"polarity": 1, "mpqapolarity": 1}
    assert rep.odd_stemmed == [(6, "1")]
    pervasive = next(e for e in lex.entries if e.word == "pervasive")
    assert (pervasive.type, pervasive.pos, pervasive.polarity, pervasive.line) == ("strongsubj", "adj", "negative", 4)
    assert lex.strong_words == {"abuse", "terrific", "pervasive", "lugubrious", "anti-", "cost-effective", "worry"}


@pytest.mark.parametrize("token,expected", [
    ("abuse", "abuse"), ("Abused", "abuse"), ("abusing", "abuse"), ("ABUSES", "abuse"),   # stemmed1=y
    ("terrific", "terrific"), ("TERRIFIC", "terrific"), ("terrifically", None),           # stemmed1=n
    ("lugubrious", "lugubrious"), ("lugubriously", None),                                 # stemmed1=1 -> n
    ("worries", "worry"), ("worried", "worry"),                                           # anypos, stemmed
    ("strong", None), ("strongly", None),                                                 # weaksubj only
    ("cost-effective", "cost-effective"), ("anti-dumping", "anti-"),                      # hyphen forms
    ("customer-abusing", "abuse"), ("Terrific's", "terrific"),                            # parts
    ("revenue", None), ("anti", None),
])
def test_matching_policy(lex: Lexicon, token: str, expected: str | None) -> None:
    assert lex.match(token) == expected


@pytest.mark.parametrize("bad,msg", [
    ("type=strongsubj len=1 pos1=adj stemmed1=n\n", "line 1: missing 'word1='"),
    ("type=weaksubj len=1 word1=ok pos1=adj\nlen=1 word1=x pos1=adj\n", "line 2: missing 'type='"),
    ("type=strongish len=1 word1=x pos1=adj\n", "line 1: type='strongish'"),
])
def test_malformed_lines_name_file_and_line(bad: str, msg: str) -> None:
    with pytest.raises(LexiconError, match="bad.tff, " + msg.replace("(", r"\(")):
        parse_tff(bad.splitlines(), "bad.tff")


def test_remove_subjective_sentences_hand_example(lex: Lexicon) -> None:
    text = ("Revenue rose 5% to $1.2 bn. in Q3. Investors worried about leverage. Margins were flat.\n\n"
            "The quarter was terrific. Capex fell.")
    out, stats = remove_subjective_sentences(text, lex, "ignore")
    assert out == "Revenue rose 5% to $1.2 bn. in Q3. Margins were flat.\n\nCapex fell."
    assert (stats.n_sentences, stats.n_sentences_removed) == (5, 2)
    # words = alphabetic tokens (numbers are not words): 6 + 4 + 3 + 4 + 2; removed 4 + 4
    assert stats.n_words == 19 and stats.n_words_removed == 8
    assert dict(stats.triggers) == {"worried": 1, "terrific": 1}
    assert stats.trigger_entries == {"worried": "worry", "terrific": "terrific"}


def test_nothing_subjective_is_identity(lex: Lexicon) -> None:
    text = "Revenue rose 5%. Margins were flat.  \n"
    out, stats = remove_subjective_sentences(text, lex, "ignore")
    assert out == text and stats.n_sentences_removed == 0


def test_load_missing_file_says_where_to_get_it(tmp_path: Path) -> None:
    with pytest.raises(LexiconUnavailable, match="(?s)not found at .*subjclueslen1-HLTEMNLP05.tff"):
        load_lexicon(tmp_path / MPQA_NAME)
    with pytest.raises(LexiconUnavailable, match="from https://example.org/mpqa.zip"):
        load_lexicon(tmp_path / MPQA_NAME, "https://example.org/mpqa.zip")


def test_download_offline_says_where_to_get_it(tmp_path: Path) -> None:
    with pytest.raises(LexiconUnavailable, match="(?s)could not download.*subjclueslen1-HLTEMNLP05.tff"):
        download("http://127.0.0.1:9/subjectivity_clues_hltemnlp05.zip", tmp_path / MPQA_NAME, timeout=2)
    assert not (tmp_path / MPQA_NAME).exists()


def test_non_utf8_lines_are_decoded_as_latin1_and_counted(tmp_path: Path) -> None:
    path = tmp_path / MPQA_NAME
    path.write_bytes(b"type=strongsubj len=1 word1=superb pos1=adj stemmed1=n priorpolarity=positive\n"
                     b"type=strongsubj len=1 word1=caf\xe9 pos1=noun stemmed1=n priorpolarity=neutral\n")
    lex = load_lexicon(path)
    assert lex.report.latin1_lines == [(2, "type=strongsubj len=1 word1=caf\u00e9 pos1=noun stemmed1=n "
                                           "priorpolarity=neutral")]
    assert lex.match("Caf\u00e9") == "caf\u00e9" and lex.match("superb") == "superb"
    clean = tmp_path / "clean.tff"
    clean.write_bytes(b"type=strongsubj len=1 word1=superb pos1=adj stemmed1=n priorpolarity=positive\n")
    assert load_lexicon(clean).report.latin1_lines == []


def test_download_extracts_the_tff_from_the_zip(tmp_path: Path) -> None:
    archive = tmp_path / "clues.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr(f"subjectivity_clues_hltemnlp05/{MPQA_NAME}", FIXTURE)
        zf.writestr("subjectivity_clues_hltemnlp05/subjclueslen1-HLTEMNLP05.README", "readme")
    target = tmp_path / "external" / "mpqa" / MPQA_NAME
    assert download(archive.as_uri(), target) == target
    assert load_lexicon(target).match("abusing") == "abuse"


# ---- the real upstream file, shipped with the package ---------------------------------------

def test_real_mpqa_file() -> None:
    from finlib.finbias.perturb.lexicon import MPQA_MD5, SHIPPED_LEXICON, file_md5

    assert file_md5(SHIPPED_LEXICON) == MPQA_MD5 == "e6c79ab16e8a8e70b3a2a6dccbc4ef24"
    lex = load_lexicon(SHIPPED_LEXICON, md5=MPQA_MD5)
    types = [e.type for e in lex.entries]
    assert lex.report.lines == 8222 and len(lex.entries) == 8222
    assert types.count("strongsubj") == 5569 and types.count("weaksubj") == 2653
    assert len(lex.strong_words) == 4747
    assert [t for _, t in lex.report.tokens_without_equals] == ["m", "m"]
    assert set(lex.report.unknown_keys) == {"polarity", "mpqapolarity"}
    assert [v for _, v in lex.report.odd_stemmed] == ["1"]
    # spot checks against lines read by eye in the file
    assert lex.match("abhorrently") == "abhorrently"   # strongsubj anypos stemmed1=n
    assert lex.match("abases") == "abase"              # strongsubj verb stemmed1=y
    assert lex.match("abandoned") is None              # weaksubj only


def test_a_corrupted_lexicon_copy_is_refused_naming_the_file(tmp_path: Path) -> None:
    from finlib.finbias.perturb.lexicon import MPQA_MD5, SHIPPED_LEXICON

    bad = tmp_path / MPQA_NAME
    bad.write_bytes(SHIPPED_LEXICON.read_bytes().replace(b"word1=abuse ", b"word1=abuze ", 1))
    with pytest.raises(LexiconError, match=rf"(?s){MPQA_NAME}: MD5 [0-9a-f]{{32}} differs from the expected {MPQA_MD5}"):
        load_lexicon(bad, md5=MPQA_MD5)
    assert any(e.word == "abuze" for e in load_lexicon(bad).entries)  # without an expected hash it loads


def test_the_shipped_copy_carries_its_note() -> None:
    from finlib.finbias.perturb.lexicon import SHIPPED_LEXICON

    note = (SHIPPED_LEXICON.parent / "NOTE.md").read_text(encoding="utf-8")
    for must in ("Theresa Wilson", "Janyce Wiebe", "Paul Hoffmann", "HLT/EMNLP 2005", "GNU General Public License",
                 "mpqa.cs.pitt.edu"):
        assert must in note
    assert len(SHIPPED_LEXICON.read_bytes().splitlines()) == 8222


@settings(max_examples=400, deadline=None)
@given(st.lists(st.text(alphabet="aZq -'\u2019é ñ\n7.ß", max_size=40), max_size=12))
def test_word_counts_equal_the_token_regex(texts) -> None:
    from finlib.finbias.perturb.lexicon import TOKEN, word_counts

    assert word_counts(texts).tolist() == [len(TOKEN.findall(t)) for t in texts]


def test_word_counts_across_chunks(monkeypatch) -> None:
    from finlib.finbias.perturb import lexicon

    texts = ["co-op it’s", "", "a--b", "x"] * 5
    monkeypatch.setattr(lexicon, "WORD_COUNT_CHUNK", 3)
    assert lexicon.word_counts(texts).tolist() == [2, 0, 2, 1] * 5
