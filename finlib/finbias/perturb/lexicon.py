"""The MPQA Subjectivity Lexicon (Wilson, Wiebe & Hoffmann 2005): parsing, matching, download.

Fin-Bias Section 5.1 removes every sentence containing a word the lexicon marks `strongsubj`.
The upstream file ships with the package, unmodified (`finlib/finbias/resources/mpqa/`, GNU GPL,
authors and source in its NOTE.md), so every clone runs the `no_opinion` condition offline; its
MD5 (`MPQA_MD5`, params `perturb.lexicon_md5`) is checked at load, and `make data`
(`python -m finlib.finbias.perturb.lexicon --download`) fetches it again when the copy fails the check.

File format (`.tff`): one clue per line, space-separated `key=value` tokens, e.g.
`type=strongsubj len=1 word1=abuse pos1=verb stemmed1=y priorpolarity=negative`.
The upstream file has quirks the parser tolerates and counts (never silently): a stray token
without '=' ('m' on both 'pervasive' lines), unknown keys (`polarity=`, `mpqapolarity=`) and a
`stemmed1=1` ('lugubrious'). Missing `type` or `word1`, or an unknown `type`, is an error
naming the file and line.

Matching policies (params `perturb.mpqa_pos`), both case-insensitive, on word tokens
`[A-Za-z]+` joined by hyphens/apostrophes; an entry ending in '-' ('anti-') is a prefix of
hyphenated tokens ("anti-dumping"):

- `respect` (default; `Lexicon.match_tagged`): the lexicon's own rules (its README). A clue is a
  (word, POS) pair: a token matches an entry only when the token's POS (spaCy tag mapped by
  `finlib.finbias.perturb.postag.mpqa_pos`; the modal MD is not a verb) is the entry's or the entry is `anypos`.
  Exact entries take precedence: when the word has its own entry for that POS (or `anypos`),
  that entry decides ("assessment"/noun is weaksubj, so "assess"/verb never makes it
  strongsubj; "concern"/verb is weaksubj, "concern"/noun strongsubj). Otherwise a `stemmed1=y`
  entry matches the *inflections* of its word within its POS, as the README defines a stemmed
  clue ("abuse"/verb matches "abuses", "abused", "abusing" as verbs, not "abuses" as a noun):
  plural -s/-es/-ies for nouns, -s/-ed/-ing for verbs (final e dropped, consonant doubled,
  y -> ied), -er/-est for adjectives and adverbs (`base_forms`). A derivation never matches:
  "evidence" is not "evidently", "preferred" (adjective) is not "preferable", "quits" is not
  "quite". A word's entry under *another* POS does not block that ("worried" used as a verb
  matches "worry"/verb although "worried"/adj exists).
- `respect_porter` (the earlier default, kept by name for comparison): as `respect`, but a
  `stemmed1=y` entry matches every word with the same Porter stem within its POS, derivations
  included ("final" -> "finally", "questions" -> "questionable"). A hyphenated compound is looked up whole first (POS: its
  last part's, a participle read as adjective: "best-known"); when it has its own entry that
  decides, otherwise each part is looked up with its own tag, then the prefixes.
- `ignore` (`Lexicon.match`; the matcher before POS tags, kept for comparison): part of speech
  is ignored, any strongsubj entry's word matches exactly, and a `stemmed1=y` strongsubj entry's
  Porter stem matches every word with that stem, even one with its own weaksubj entry
  ("assessment" -> "assess"); a token matches when the whole token or any hyphen/apostrophe part
  matches ("cost-effective", "company's" -> "company"), or starts with a prefix entry.

`stemmed1=n` (and the odd `stemmed1=1`) entries match the exact word only, in both policies.
"""
from __future__ import annotations

import argparse
import io
import re
import sys
import urllib.request
import zipfile
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from nltk.stem import PorterStemmer

POS_POLICIES: tuple[str, ...] = ("respect", "respect_porter", "ignore")
MPQA_FILE = "subjclueslen1-HLTEMNLP05.tff"
MPQA_MD5 = "e6c79ab16e8a8e70b3a2a6dccbc4ef24"   # the upstream file, 8,222 lines
SHIPPED_LEXICON = Path(__file__).parents[1] / "resources" / "mpqa" / MPQA_FILE
SHIPPED_SOURCE = f"finlib/finbias/resources/mpqa/{MPQA_FILE}"   # how reports name the shipped copy
ANYPOS = "anypos"
STRONG = "strongsubj"
KNOWN_KEYS = frozenset({"type", "len", "word1", "pos1", "stemmed1", "priorpolarity"})
TYPES = frozenset({"strongsubj", "weaksubj"})
TOKEN = re.compile(r"[A-Za-z]+(?:[-'\u2019][A-Za-z]+)*")
_PARTS = re.compile(r"[-'\u2019]")
WORD_COUNT_CHUNK = 2000   # texts per vectorised pass (~40 MB of report text)


def word_counts(texts: Iterable[str]) -> np.ndarray:
    """`len(TOKEN.findall(t))` of each text, counted over bytes with numpy instead of building every
    token (stage 02's summary counts ~27M words at the paper's size; `findall` took ~30 s of a rerun).

    Why equal: TOKEN's matches are the maximal runs of ASCII letters, except that a hyphen or
    apostrophe (' or \u2019) with a letter on both sides joins two runs into one word. So the count is
    the number of letter runs minus the number of such joiners. UTF-8 encodes every non-ASCII
    character as bytes >= 0x80, which are neither letters nor joiners (\u2019 is mapped to ' first)."""
    texts = list(texts)
    out = np.zeros(len(texts), dtype=np.int64)
    for lo in range(0, len(texts), WORD_COUNT_CHUNK):
        encoded = [t.replace("\u2019", "'").encode("utf-8") for t in texts[lo:lo + WORD_COUNT_CHUNK]]
        # every text ends with a separator that is no letter: no run crosses it, and no text is empty
        b = np.frombuffer(b"\n".join(encoded) + b"\n", dtype=np.uint8)
        letter = ((b | 0x20) - ord("a")) < 26           # A-Z, a-z (uint8 arithmetic wraps the rest above 26)
        run_start = letter.copy()
        run_start[1:] &= ~letter[:-1]
        join = np.zeros_like(letter)
        join[1:-1] = ((b[1:-1] == ord("-")) | (b[1:-1] == ord("'"))) & letter[:-2] & letter[2:]
        starts = np.cumsum([0] + [len(e) + 1 for e in encoded[:-1]])   # each text's first byte
        delta = run_start.view(np.int8) - join.view(np.int8)
        out[lo:lo + len(encoded)] = np.add.reduceat(delta, starts, dtype=np.int64)
    return out
DOWNLOAD_TIMEOUT_S = 10


class LexiconError(ValueError):
    """A malformed lexicon file: the message names the file and the line."""


class LexiconUnavailable(FileNotFoundError):
    """The lexicon is not on disk; the message says where to get it."""


@dataclass(frozen=True)
class LexEntry:
    """One clue line of the .tff file."""

    word: str          # lowercase word1
    type: str          # strongsubj | weaksubj
    pos: str           # pos1 (anypos, adj, noun, verb, adverb)
    stemmed: bool      # stemmed1 == "y"
    polarity: str      # priorpolarity
    line: int          # 1-based line number in the file


@dataclass
class ParseReport:
    """What the parser tolerated, so the stage can say it (nothing silently ignored)."""

    lines: int = 0
    tokens_without_equals: list[tuple[int, str]] = field(default_factory=list)
    unknown_keys: Counter = field(default_factory=Counter)
    odd_stemmed: list[tuple[int, str]] = field(default_factory=list)
    latin1_lines: list[tuple[int, str]] = field(default_factory=list)  # not UTF-8: decoded as Latin-1


def parse_tff(lines: Iterable[str], source: str = "<lexicon>") -> tuple[list[LexEntry], ParseReport]:
    """Parse .tff lines into entries, tolerating the upstream quirks (see module docstring)."""
    entries: list[LexEntry] = []
    report = ParseReport()
    for no, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            continue
        report.lines += 1
        fields: dict[str, str] = {}
        for tok in line.split():
            if "=" not in tok:
                report.tokens_without_equals.append((no, tok))
                continue
            key, value = tok.split("=", 1)
            if key not in KNOWN_KEYS:
                report.unknown_keys[key] += 1
            fields[key] = value
        for key in ("type", "word1"):
            if not fields.get(key):
                raise LexiconError(f"{source}, line {no}: missing '{key}=' in {line!r}")
        if fields["type"] not in TYPES:
            raise LexiconError(f"{source}, line {no}: type={fields['type']!r} is not one of {sorted(TYPES)}")
        stemmed = fields.get("stemmed1", "n")
        if stemmed not in ("y", "n"):
            report.odd_stemmed.append((no, stemmed))  # read as 'n': the narrower, exact-word match
        entries.append(LexEntry(word=fields["word1"].lower(), type=fields["type"], pos=fields.get("pos1", "anypos"),
                                stemmed=stemmed == "y", polarity=fields.get("priorpolarity", ""), line=no))
    return entries, report


class Lexicon:
    """strongsubj matcher over the parsed entries (policy in the module docstring).

    Lookups are memoised per distinct lowercase token: reports reuse a small vocabulary, so the
    Porter stemmer runs once per word type, not once per occurrence.
    """

    def __init__(self, entries: list[LexEntry], report: ParseReport | None = None, source: str = "") -> None:
        self.entries = entries
        self.report = report or ParseReport()
        self.source = source
        self._stemmer = PorterStemmer()
        strong = [e for e in entries if e.type == "strongsubj"]
        self.prefixes = tuple(sorted({e.word for e in strong if e.word.endswith("-")}))
        self.exact: dict[str, str] = {e.word: e.word for e in strong if not e.word.endswith("-")}
        self.stems: dict[str, str] = {}
        for e in strong:
            if e.stemmed:
                self.stems.setdefault(self._stemmer.stem(e.word), e.word)
        self._memo: dict[str, str | None] = {}
        # POS-aware lookups (policy `respect`): every entry by word, stemmed ones by stem
        self.by_word: dict[str, list[LexEntry]] = {}
        self.by_stem: dict[str, list[LexEntry]] = {}
        for e in entries:
            if not e.word.endswith("-"):
                self.by_word.setdefault(e.word, []).append(e)
                if e.stemmed:
                    self.by_stem.setdefault(self._stemmer.stem(e.word), []).append(e)
        self.prefix_entries = tuple(e for e in strong if e.word.endswith("-"))
        self._pos_memo: dict[tuple[str, str, str], str | None] = {}
        self._cand_memo: dict[str, str] = {}
        self._strong_stemmed = frozenset(e.word for e in strong if e.stemmed)

    @property
    def strong_words(self) -> frozenset[str]:
        return frozenset(e.word for e in self.entries if e.type == "strongsubj")

    def _match_word(self, word: str) -> str | None:
        hit = self.exact.get(word)
        if hit is None and self.stems:
            hit = self.stems.get(self._stemmer.stem(word))
        return hit

    def match(self, token: str) -> str | None:
        """The strongsubj lexicon word that `token` matches, or None."""
        low = token.lower()
        try:
            return self._memo[low]
        except KeyError:
            pass
        hit = self._match_word(low)
        if hit is None and ("-" in low or "'" in low or "\u2019" in low):
            for part in _PARTS.split(low):
                if part and (hit := self._match_word(part)):
                    break
            if hit is None:
                hit = next((p for p in self.prefixes if low.startswith(p)), None)
        self._memo[low] = hit
        return hit

    def own_entries(self, word: str, pos: str) -> list[LexEntry]:
        """The entries of `word` itself that apply to `pos` (its own POS or anypos)."""
        return [e for e in self.by_word.get(word, ()) if e.pos in (ANYPOS, pos)]

    def match_word_pos(self, word: str, pos: str, stems: str = "inflection") -> str | None:
        """Policies `respect` (``stems="inflection"``) and `respect_porter` (``stems="porter"``) for one
        lowercase word with its MPQA POS: the strongsubj entry word, or None."""
        key = (word, pos, stems)
        try:
            return self._pos_memo[key]
        except KeyError:
            pass
        own = self.own_entries(word, pos)
        if own:  # exact entries decide; no stem is tried
            hit = word if any(e.type == STRONG for e in own) else None
        elif stems == "porter":
            stemmed = self.by_stem.get(self._stemmer.stem(word), ()) if self.by_stem else ()
            hit = next((e.word for e in stemmed if e.type == STRONG and e.pos in (ANYPOS, pos)), None)
        else:
            hit = next((base for base in base_forms(word, pos)
                        if any(e.type == STRONG and e.stemmed for e in self.own_entries(base, pos))), None)
        self._pos_memo[key] = hit
        return hit

    def candidates(self, token: str) -> str:
        """What a token can do under the POS-aware policies, whatever its tag: "none" (matches under no
        POS: the sentence needs no tagger for it), "always" (a plain word with its own `anypos`
        strongsubj entry: removed under every POS) or "pos" (depends on the tag). Memoised per word."""
        low = token.lower()
        try:
            return self._cand_memo[low]
        except KeyError:
            pass
        words = [low] + [p for p in _PARTS.split(low) if p] if _PARTS.search(low) else [low]
        if not _PARTS.search(low) and any(e.type == STRONG and e.pos == ANYPOS for e in self.by_word.get(low, ())):
            out = "always"
        elif any(w in self.exact for w in words) or any(self._stemmer.stem(w) in self.stems for w in words) \
                or any(b in self._strong_stemmed for w in words for pos in _INFLECTING for b in base_forms(w, pos)) \
                or any(low.startswith(e.word) for e in self.prefix_entries):
            out = "pos"   # only a strongsubj entry (itself, an inflection's base, a Porter stem, a prefix) can hit
        else:
            out = "none"
        self._cand_memo[low] = out
        return out

    def match_tagged(self, token: str, pos: str, parts: list[tuple[str, str]] | None = None,
                     stems: str = "inflection") -> str | None:
        """Policy `respect` (or `respect_porter`, ``stems="porter"``) for one token: `pos` its MPQA POS;
        for a hyphen/apostrophe compound, `parts` are its (part, POS) pairs (``finlib.finbias.perturb.subjectivity``
        reads them off the tagger)."""
        low = token.lower()
        if not parts or len(parts) < 2:
            return self.match_word_pos(low, pos, stems)
        if self.own_entries(low, pos):
            return self.match_word_pos(low, pos, stems)
        for part, part_pos in parts:
            if part and (hit := self.match_word_pos(part.lower(), part_pos, stems)):
                return hit
        return next((e.word for e in self.prefix_entries if low.startswith(e.word) and e.pos in (ANYPOS, pos)),
                    None)


_INFLECTING = ("noun", "verb", "adj")
_VOWEL = frozenset("aeiou")


def base_forms(word: str, pos: str) -> tuple[str, ...]:
    """The words `word` can be an inflection of in part of speech `pos` (regular English inflection),
    most likely first, `word` itself excluded: nouns -s/-es/-ies, verbs -s/-es/-ies/-ed/-ied/-ing
    (final e restored, doubled consonant undone), adjectives and adverbs -er/-est/-ier/-iest.
    A derivation ("-ly", "-able", "-ness") is never undone: a stemmed MPQA clue matches the
    inflected variants of its word (the lexicon's README), not every word sharing a stem."""
    out: list[str] = []

    def strip(suffix: str, *, y: bool = False, e: bool = False, double: bool = False) -> None:
        if not word.endswith(suffix) or len(word) - len(suffix) < 2:
            return
        stem = word[:-len(suffix)]
        if y:
            out.append(stem + "y")
            return
        out.append(stem)
        if e:
            out.append(stem + "e")
        if double and len(stem) > 2 and stem[-1] == stem[-2] and stem[-1] not in _VOWEL:
            out.append(stem[:-1])

    if pos in ("noun", "verb", "anypos"):
        strip("ies", y=True)
        if word.endswith(("ses", "xes", "zes", "ches", "shes", "oes")):
            strip("es")
        if not word.endswith(("ss", "us", "is")):
            strip("s")
    if pos in ("verb", "anypos"):
        strip("ied", y=True)
        strip("ed", e=True, double=True)
        strip("ing", e=True, double=True)
    if pos in ("adj", "adverb", "anypos"):
        strip("iest", y=True)
        strip("ier", y=True)
        strip("est", e=True, double=True)
        strip("er", e=True, double=True)
    seen: dict[str, None] = {}
    for b in out:
        if b != word:
            seen.setdefault(b, None)
    return tuple(seen)


def file_md5(path: str | Path) -> str:
    import hashlib

    return hashlib.md5(Path(path).read_bytes()).hexdigest()  # noqa: S324 - an integrity check, not security


def load_lexicon(path: str | Path, url: str | None = None, md5: str | None = None) -> Lexicon:
    """Read a .tff file into a Lexicon: UTF-8, line by line; a line that is not UTF-8 is decoded as
    Latin-1 and recorded (line number, text) in `report.latin1_lines`, which stage 02 reports.

    ``url``: where to get the file (params `perturb.lexicon_url`), named in the error when it is missing.
    ``md5``: the file's expected MD5 (params `perturb.lexicon_md5`; `MPQA_MD5` for the shipped copy); a
    different hash is a corrupted or edited copy, refused with the file named.
    """
    path = Path(path)
    if not path.is_file():
        raise LexiconUnavailable(missing_message(path, url))
    if md5 is not None and (found := file_md5(path)) != md5:
        raise LexiconError(f"{path}: MD5 {found} differs from the expected {md5} (a corrupted or edited copy of "
                           f"the MPQA lexicon); restore it (`git checkout` of the shipped file, or `make data`)")
    lines, latin1 = decode_lines(path.read_bytes())
    entries, report = parse_tff(lines, source=str(path))
    report.latin1_lines = latin1
    check_has_strong(entries, str(path))
    return Lexicon(entries, report, source=str(path))


def check_has_strong(entries: list[LexEntry], source: str) -> None:
    """An empty lexicon, or one without strongsubj entries, removes nothing: `no_opinion` would
    silently equal `no_rating`. Refused, naming the file and what it holds."""
    n_strong = sum(e.type == STRONG for e in entries)
    if not n_strong:
        raise LexiconError(f"{source}: no strongsubj entries ({len(entries)} entries in all); the no_opinion "
                           "condition needs them (use the MPQA subjectivity lexicon, subjclueslen1-HLTEMNLP05.tff)")


def decode_lines(raw: bytes) -> tuple[list[str], list[tuple[int, str]]]:
    """Lines of `raw` as text, and the (1-based line number, text) of those decoded as Latin-1."""
    lines: list[str] = []
    latin1: list[tuple[int, str]] = []
    for no, line in enumerate(raw.splitlines(), start=1):
        try:
            lines.append(line.decode("utf-8"))
        except UnicodeDecodeError:
            lines.append(line.decode("latin-1"))
            latin1.append((no, lines[-1].strip()))
    return lines, latin1


def missing_message(path: Path, url: str | None = None) -> str:
    """Where the lexicon was expected and where to get it (the caller passes params `perturb.lexicon_url`)."""
    url = url or "the MPQA Subjectivity Lexicon page (mpqa.cs.pitt.edu)"
    return (f"MPQA subjectivity lexicon not found at {path}. Get subjclueslen1-HLTEMNLP05.tff from {url} "
            f"(GPL; run `make data` or `python -m finlib.finbias.perturb.lexicon --download` when online) and put it there.")


def download(url: str, target: Path, timeout: float = DOWNLOAD_TIMEOUT_S) -> Path:
    """Fetch the MPQA zip and extract its .tff (and README) next to `target`; quick failure offline.
    A target that is already the upstream file (`MPQA_MD5`) is kept; any other copy is replaced."""
    if target.is_file() and file_md5(target) == MPQA_MD5:
        return target
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 -- fixed https URL from params
            payload = resp.read()
    except Exception as exc:
        raise LexiconUnavailable(f"could not download {url} ({type(exc).__name__}: {exc}). "
                                 + missing_message(target, url)) from exc
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(io.BytesIO(payload)) as zf:
        members = [m for m in zf.namelist() if m.endswith((".tff", ".README")) or m.endswith("README")]
        tff = [m for m in members if m.endswith(target.name)]
        if not tff:
            raise LexiconUnavailable(f"{url} has no {target.name} (members: {zf.namelist()[:10]})")
        for m in members:
            (target.parent / Path(m).name).write_bytes(zf.read(m))
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="MPQA subjectivity lexicon: download / check.")
    parser.add_argument("--download", action="store_true", help="download into perturb.lexicon_path")
    parser.add_argument("--run", default="default", help="params/<run>.yaml for the path and URL")
    args = parser.parse_args(argv)
    from finlib.core.config import load_run

    cfg = load_run(args.run)
    params = cfg["perturb"]
    target = SHIPPED_LEXICON if params.get("lexicon_path") is None else cfg.path(params["lexicon_path"])
    try:
        if args.download:
            download(params["lexicon_url"], target)
        lex = load_lexicon(target, params["lexicon_url"], params.get("lexicon_md5"))
    except (LexiconUnavailable, LexiconError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    n_strong = sum(e.type == "strongsubj" for e in lex.entries)
    print(f"{target}: {len(lex.entries)} entries, {n_strong} strongsubj ({len(lex.strong_words)} words)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
