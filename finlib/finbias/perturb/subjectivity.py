"""The no_opinion condition's filter: drop every sentence with an MPQA strongsubj word (Fin-Bias 5.1).

Three matching policies (params `perturb.mpqa_pos`, rules in `finlib.finbias.perturb.lexicon`): `respect` (the
default) reads each word's part of speech off spaCy's tagger (`finlib.finbias.perturb.postag`, cached),
honours the lexicon's (word, POS) entries and matches a stemmed clue's inflections only;
`respect_porter` matches Porter-stem relatives instead; `ignore` is the
POS-blind matcher. Stage 02 writes the configured policy's text and, for comparison, every
policy's per-report counts and triggers, and the sentences and trigger words where they differ.

Only sentences whose outcome depends on a part of speech are tagged (`Lexicon.candidates`): a
sentence with no word the lexicon could match under any POS is kept, and one with a plain word
that has its own `anypos` strongsubj entry is removed whatever the tags. Its POS-dependent words
are still tagged (in windows, as for any other sentence), so that the triggers counted in a removed
sentence are every strongsubj occurrence in it under the policy, as if every word had been tagged.

Kept sentences keep their bytes; between two kept sentences goes the strongest whitespace gap
(most newlines) of the stretch removed between them, so paragraph breaks survive.
"""
from __future__ import annotations

import hashlib
import pickle
import re
import sqlite3
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from finlib.finbias.perturb.lexicon import POS_POLICIES, TOKEN, Lexicon
from finlib.finbias.perturb.postag import PosTagger, Tagged, compound_pos, mpqa_pos
from finlib.finbias.sentences import sentence_spans

_PART = re.compile(r"[A-Za-z]+")


@dataclass
class SubjectivityStats:
    """What the strongsubj filter removed from one text (words = alphabetic tokens, numbers excluded)."""

    n_sentences: int
    n_sentences_removed: int
    n_words: int
    n_words_removed: int
    triggers: Counter            # lowercase token -> occurrences (in removed sentences)
    trigger_entries: dict        # lowercase token -> the lexicon word it matched
    trigger_pos: Counter = field(default_factory=Counter)  # (lowercase token, MPQA POS) -> occurrences
    removed: dict = field(default_factory=dict)  # index of each removed sentence -> its trigger tokens (lowercase)


def _join_kept(text: str, spans: list[tuple[int, int]], keep: list[int]) -> str:
    """The kept sentences, byte for byte, each followed by the strongest whitespace gap
    (most newlines) among the gaps it had up to the next kept sentence, so paragraph breaks
    survive the removal of the sentence that preceded them. Nothing removed -> `text`."""
    if not keep:
        return ""
    out = [text[:spans[0][0]]] if keep[0] == 0 else []
    for j, i in enumerate(keep):
        out.append(text[spans[i][0]:spans[i][1]])
        if j + 1 < len(keep):
            gaps = [text[spans[k][1]:spans[k + 1][0]] for k in range(i, keep[j + 1])]
            out.append(max(gaps, key=lambda g: g.count("\n")))
        elif i == len(spans) - 1:
            out.append(text[spans[i][1]:])
    return "".join(out)


STEMS = {"respect": "inflection", "respect_porter": "porter"}  # POS-aware policies -> stem rule
KEEP, ALWAYS, TAG = 0, 1, 2   # what a sentence needs under the POS-aware policies


def sentence_need(text: str, start: int, end: int, lexicon: Lexicon) -> int:
    """KEEP (no word the lexicon could match under any POS), ALWAYS (a plain word with its own `anypos`
    strongsubj entry: removed whatever the tags) or TAG (the outcome depends on parts of speech)."""
    need = KEEP
    cand = lexicon.candidates
    for w in TOKEN.findall(text, start, end):
        c = cand(w)
        if c == "always":
            return ALWAYS
        if c == "pos":
            need = TAG
    return need


WINDOW_WORDS = 6   # context kept on each side of a candidate word; spaCy's small tagger sees 4 tokens each side
_WS_WORD = re.compile(r"\S+")


def tag_windows(text: str, span: tuple[int, int], lexicon: Lexicon, margin: int = WINDOW_WORDS
                ) -> list[tuple[int, int]]:
    """The parts of a sentence the tagger needs: each whitespace word holding a POS-dependent candidate with
    `margin` words on each side, overlapping windows merged. en_core_web_sm's tag for a token depends on 4
    tokens on each side (tok2vec: window 1, depth 4), and every word is at least one token, so a candidate's tag
    in its window equals its tag in the whole sentence (tested against whole-sentence tagging)."""
    words = [(m.start(), m.end(), m.group(0)) for m in _WS_WORD.finditer(text, *span)]
    marks = [k for k, (_, _, w) in enumerate(words) if any(lexicon.candidates(t) == "pos" for t in TOKEN.findall(w))]
    out: list[tuple[int, int]] = []
    for k in marks:
        lo, hi = max(0, k - margin), min(len(words) - 1, k + margin)
        a, b = words[lo][0], words[hi][1]
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


Reading = tuple[list[tuple[int, int]], list[int], list[list[tuple[int, int]]] | None]


def read_sentences(text: str, lexicon: Lexicon, windows: bool, spans: list[tuple[int, int]] | None = None) -> Reading:
    """One text's sentence spans (``spans`` when already split), what each sentence needs (`sentence_need`)
    and, with ``windows``, the parts of each the tagger must see (`tag_windows`; none for a KEEP sentence):
    everything the filter reads of a text before tagging, in one job so that a worker process does all of it."""
    spans = sentence_spans(text) if spans is None else spans
    needs = [sentence_need(text, a, b, lexicon) for a, b in spans]
    parts = [tag_windows(text, s, lexicon) if n != KEEP else [] for s, n in zip(spans, needs)] if windows else None
    return spans, needs, parts


def _has_pos_candidate(text: str, start: int, end: int, lexicon: Lexicon) -> bool:
    return any(lexicon.candidates(w) == "pos" for w in TOKEN.findall(text, start, end))


def _always_hits(text: str, start: int, end: int, lexicon: Lexicon) -> Iterator[tuple[str, str, str]]:
    for w in TOKEN.findall(text, start, end):
        if lexicon.candidates(w) == "always":
            yield w, w.lower(), "anypos"


def tagged_hits(text: str, start: int, end: int, lexicon: Lexicon, tagged: Tagged, stems: str = "inflection"
                ) -> Iterator[tuple[str, str, str]]:
    """(token, lexicon word, POS) for every strongsubj token of text[start:end] under a POS-aware policy
    (``stems``: "inflection" for `respect`, "porter" for `respect_porter`). A plain word with its own
    `anypos` entry hits whatever its tag (POS "anypos"); words no POS could match are not looked up."""
    cand = lexicon.candidates
    for m in TOKEN.finditer(text, start, end):
        a, b = m.span()
        token = m.group(0)
        c = cand(token)
        if c == "always":
            yield token, token.lower(), "anypos"
            continue
        if c == "none":
            continue
        if len(token) == len(_PART.match(token).group(0)):  # a plain word: one tagger token
            pos = mpqa_pos(tagged.tag_at(a))
            hit = lexicon.match_tagged(token, pos, stems=stems)
        else:  # hyphen/apostrophe compound: the whole, then its parts with their own tags
            parts = [(p.group(0), tagged.tag_at(p.start())) for p in _PART.finditer(text, a, b)]
            pos = compound_pos([t for _, t in parts])
            hit = lexicon.match_tagged(token, pos, [(w, mpqa_pos(t)) for w, t in parts], stems=stems)
        if hit:
            yield token, hit, pos


def _blind_hits(text: str, start: int, end: int, lexicon: Lexicon) -> Iterator[tuple[str, str, str]]:
    lookup = lexicon.match
    for w in TOKEN.findall(text, start, end):
        if hit := lookup(w):
            yield w, hit, "any"


def sentence_hits(text: str, span: tuple[int, int], lexicon: Lexicon, policy: str, need: int,
                  tagged: Tagged | None) -> list[tuple[str, str, str]]:
    """The strongsubj hits of one sentence under `policy`, given its `need` (``sentence_need``) and, for a
    TAG sentence under a POS-aware policy, the text's tags."""
    a, b = span
    if policy == "ignore":
        return list(_blind_hits(text, a, b, lexicon))
    if need == KEEP:
        return []
    if tagged is None:
        if need == ALWAYS and not _has_pos_candidate(text, a, b, lexicon):
            return list(_always_hits(text, a, b, lexicon))
        raise ValueError(f"policy {policy!r} needs the tags of a sentence whose words depend on their part of speech")
    return list(tagged_hits(text, a, b, lexicon, tagged, STEMS[policy]))


def remove_subjective_sentences(text: str, lexicon: Lexicon, policy: str = "respect", tagger: PosTagger | None = None,
                                ) -> tuple[str, SubjectivityStats]:
    """`text` minus every sentence containing an MPQA strongsubj word under `policy` (default: the
    pipeline's, `respect`; the POS-aware policies tag with ``tagger``, an uncached spaCy tagger when None).
    Never falls back to another policy: a POS-aware policy without spaCy raises `TaggerUnavailable`."""
    if policy not in POS_POLICIES:
        raise ValueError(f"policy must be one of {POS_POLICIES}, got {policy!r}")
    filt = SubjectivityFilter(lexicon, policy, (tagger or PosTagger()) if policy != "ignore" else None)
    return filt.filter_one(text)


def remove_with_tags(text: str, lexicon: Lexicon, tagged: Tagged, policy: str = "respect",
                     spans: Sequence[tuple[int, int]] | None = None) -> tuple[str, SubjectivityStats]:
    """`text` minus its strongsubj sentences under a POS-aware `policy`, with tags made elsewhere
    (``tagged`` must cover every sentence whose words depend on their part of speech)."""
    spans = list(sentence_spans(text) if spans is None else spans)
    return _filter(text, lexicon, policy, spans, [sentence_need(text, a, b, lexicon) for a, b in spans], tagged)


def _filter(text: str, lexicon: Lexicon, policy: str, spans: Sequence[tuple[int, int]], needs: Sequence[int],
            tagged: Tagged | None) -> tuple[str, SubjectivityStats]:
    """`text` minus the sentences with a strongsubj hit under `policy` (see ``sentence_hits``)."""
    keep: list[int] = []
    removed: dict[int, tuple[str, ...]] = {}
    triggers: Counter = Counter()
    trigger_pos: Counter = Counter()
    entries: dict[str, str] = {}
    n_words = n_removed_words = 0
    for i, (a, b) in enumerate(spans):
        words = len(TOKEN.findall(text, a, b))
        n_words += words
        hits = sentence_hits(text, (a, b), lexicon, policy, needs[i], tagged)
        if hits:
            n_removed_words += words
            removed[i] = tuple(w.lower() for w, _, _ in hits)
            for w, h, pos in hits:
                low = w.lower()
                triggers[low] += 1
                trigger_pos[(low, pos)] += 1
                entries[low] = h
        else:
            keep.append(i)
    stats = SubjectivityStats(len(spans), len(spans) - len(keep), n_words, n_removed_words, triggers, entries,
                              trigger_pos, removed)
    return _join_kept(text, spans, keep), stats


class SubjectivityFilter:
    """The lexicon, the policy and (for the POS-aware policies) the cached tagger, applied to batches of texts."""

    def __init__(self, lexicon: Lexicon, policy: str = "respect", tagger: PosTagger | None = None,
                 compare: bool = True, processes: int = 1) -> None:
        if policy not in POS_POLICIES:
            raise ValueError(f"perturb.mpqa_pos must be one of {POS_POLICIES}, got {policy!r}")
        if policy != "ignore" and tagger is None:
            raise ValueError(f"policy {policy!r} needs a PosTagger")
        self.lexicon, self.policy, self.tagger = lexicon, policy, tagger
        self.policies = policies_reported(policy) if compare else (policy,)
        self.sentences = self.sentences_tagged = self.sentences_always = self.results_from_cache = 0
        self.sentences_decided_by_tags = 0
        self.windows_tagged = 0
        self._spans: dict[str, list[tuple[int, int]]] = {}   # text -> sentence spans, kept for the validation
        self.processes = int(processes)   # Punkt on this many cores for batches of >= PARALLEL_MIN_TEXTS texts
        self._pool = None
        cache_dir = None if tagger is None or tagger.cache_path is None else tagger.cache_path.parent
        self.results = ResultCache(cache_dir, self._fingerprint()) if cache_dir is not None else None

    def _read(self, texts: Sequence[str]) -> list[Reading]:
        """`read_sentences` of each text: texts not yet split are read whole, on `processes` cores for a long
        batch (Punkt is pure Python); the spans of the others come from memory."""
        windows = self.tagger is not None
        todo = [t for t in dict.fromkeys(texts) if t not in self._spans]
        fresh: dict[str, Reading] = {}
        if self.processes > 1 and len(todo) >= PARALLEL_MIN_TEXTS:
            self._start_pool()
            fresh = dict(zip(todo, self._pool.map(_read_job, todo, chunksize=8)))
        read = [fresh[t] if t in fresh else read_sentences(t, self.lexicon, windows, self._spans.get(t)) for t in texts]
        self._spans.update((t, r[0]) for t, r in zip(texts, read))
        return read

    def _split(self, texts: Sequence[str]) -> list[list[tuple[int, int]]]:
        """Sentence spans of each text (from memory when already read)."""
        todo = [t for t in texts if t not in self._spans]
        if todo:
            self._read(todo)
        return [self._spans[t] for t in texts]

    def _start_pool(self) -> None:
        """Worker processes forked with this filter's lexicon and policies (read by `_match_job`)."""
        global _WORKER
        if self._pool is None:
            import multiprocessing as mp
            from concurrent.futures import ProcessPoolExecutor

            _WORKER = (self.lexicon, self.policies, self.tagger is not None)
            self._pool = ProcessPoolExecutor(self.processes, mp_context=mp.get_context("fork"))

    def close(self) -> None:
        """Stop the worker processes of the sentence split (if any were started)."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def _fingerprint(self) -> str:
        """What a cached result depends on besides the text: code version, lexicon entries, policies, tagger."""
        h = hashlib.sha256(f"{RESULT_VERSION}|{self.policies}|{getattr(self.tagger, 'id', '')}".encode())
        for e in self.lexicon.entries:
            h.update(f"{e.word} {e.type} {e.pos} {e.stemmed}\n".encode())
        return h.hexdigest()

    def prepare(self, texts: Sequence[str]) -> tuple[list[list[tuple[int, int]]], list[list[int]], list[Tagged | None]]:
        """Sentence spans of each text, what each sentence needs, and the tags of every sentence with a
        POS-dependent word (one tagger stream for all texts; None where nothing needs tags)."""
        read = self._read(texts)
        spans = [r[0] for r in read]
        needs = [r[1] for r in read]
        self.sentences += sum(map(len, needs))
        self.sentences_always += sum(n.count(ALWAYS) for n in needs)
        tags: list[Tagged | None] = [None] * len(texts)
        if self.tagger is not None:
            # ALWAYS sentences too: their removal needs no tags, their POS-dependent triggers do
            windows = [r[2] for r in read]
            todo = [(k, [w for ws in per for w in ws]) for k, per in enumerate(windows)]
            todo = [(k, sub) for k, sub in todo if sub]
            self.sentences_decided_by_tags += sum(n.count(TAG) for n in needs)
            self.sentences_tagged += sum(bool(ws) for per in windows for ws in per)
            self.windows_tagged += sum(len(sub) for _, sub in todo)
            if todo:
                for (k, _), tg in zip(todo, self.tagger.tag_many([(texts[k], sub) for k, sub in todo])):
                    tags[k] = tg
        return spans, needs, tags

    def run(self, texts: Sequence[str]) -> list[tuple[str, list[SubjectivityStats]]]:
        """Per text: (filtered text under the configured policy, stats of each policy in ``self.policies``).
        With a tag cache, whole results are cached too (keyed by text, lexicon, policies, tagger): a rerun
        over unchanged texts neither splits, tags nor matches again."""
        cached = self.results.get(texts) if self.results is not None else {}
        self.results_from_cache += len(cached)
        todo = [t for t in dict.fromkeys(texts) if t not in cached]
        fresh: dict[str, tuple[list[tuple[int, int]], list[SubjectivityStats]]] = {}
        if todo:
            jobs = list(zip(todo, *self.prepare(todo)))
            if self._pool is not None and len(jobs) >= PARALLEL_MIN_TEXTS:   # matching on every core too
                matched = self._pool.map(_match_job, jobs, chunksize=4)
            else:
                matched = (_match_local(self.lexicon, self.policies, job) for job in jobs)
            for (text, sp, _, _), stats in zip(jobs, matched):
                fresh[text] = (sp, stats)
            if self.results is not None:
                self.results.put(fresh)
        out = []
        for text in texts:
            spans, stats = fresh[text] if text in fresh else cached[text]
            self._spans[text] = spans
            keep = [i for i in range(len(spans)) if i not in stats[0].removed]
            out.append((_join_kept(text, spans, keep), stats))
        return out

    def filter_one(self, text: str) -> tuple[str, SubjectivityStats]:
        spans, needs, tags = self.prepare([text])
        return _filter(text, self.lexicon, self.policy, spans[0], needs[0], tags[0])

    def sentences_of(self, text: str) -> list[str]:
        """The sentences of `text` as this filter split it (from memory when it filtered the text)."""
        return [text[a:b] for a, b in self._split([text])[0]]

    def clean_sentences(self, text: str) -> list[str]:
        """The sentences of `text` with no strongsubj word under this policy (validation of no_opinion;
        the tags come from the cache the stage filled)."""
        spans, needs, tags = self.prepare([text])
        return [text[a:b] for (a, b), n in zip(spans[0], needs[0])
                if not sentence_hits(text, (a, b), self.lexicon, self.policy, n, tags[0])]

    def clean_sentences_many(self, texts: Sequence[str]) -> list[list[str]]:
        """`clean_sentences` of each text, on `processes` forked workers for a long batch."""
        if self.processes <= 1 or len(texts) < PARALLEL_MIN_TEXTS:
            return [self.clean_sentences(t) for t in texts]
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        global _VALIDATING
        _VALIDATING = self
        try:
            with ProcessPoolExecutor(self.processes, mp_context=mp.get_context("fork"),
                                     initializer=_own_connections) as pool:
                return list(pool.map(_clean_job, texts, chunksize=16))
        finally:
            _VALIDATING = None

    def summary(self) -> dict:
        """How many sentences the tags decided, how many an `anypos` clue removed whatever the tags, how many
        had no candidate word, and how many were tagged at all (the tags decide a sentence's removal or
        resolve the POS-dependent triggers of one an `anypos` clue removes)."""
        return {"texts_from_result_cache": self.results_from_cache,
                "sentences": self.sentences, "sentences_tagged": self.sentences_tagged,
                "windows_tagged": self.windows_tagged,
                "sentences_decided_by_tags": self.sentences_decided_by_tags,
                "sentences_removed_by_anypos_clue": self.sentences_always,
                "sentences_without_candidate_untagged":
                    self.sentences - self.sentences_decided_by_tags - self.sentences_always}


_WORKER: tuple | None = None   # (lexicon, policies, windows?) of the filter whose pool forked this process


def _read_job(text: str) -> Reading:
    """`read_sentences` in a worker process (the lexicon inherited by fork)."""
    lexicon, _, windows = _WORKER
    return read_sentences(text, lexicon, windows)


def _match_local(lexicon: Lexicon, policies: Sequence[str], job: tuple) -> list[SubjectivityStats]:
    text, spans, needs, tagged = job
    return [_filter(text, lexicon, p, spans, needs, tagged)[1] for p in policies]


_VALIDATING = None  # the filter whose `clean_sentences_many` forked this process


def _own_connections() -> None:
    """A forked worker opens its own cache connections: SQLite connections must not cross a fork
    (the parent's stay referenced, unused, so the child never closes them)."""
    tagger = _VALIDATING.tagger
    if tagger is not None and tagger._db is not None:
        tagger._forked_db, tagger._db = tagger._db, None


def _clean_job(text: str) -> list[str]:
    return _VALIDATING.clean_sentences(text)


def _match_job(job: tuple) -> list[SubjectivityStats]:
    """One text's stats under every policy, in a worker process (lexicon and policies inherited by fork)."""
    lexicon, policies, _ = _WORKER
    return _match_local(lexicon, policies, job)


RESULT_VERSION = "mpqa-filter-5"  # bump when the matching or splitting rules change: cached results are then misses
PARALLEL_MIN_TEXTS = 32    # fewer texts in a batch: split in this process (worker start-up would dominate)


class ResultCache:
    """Filter results (sentence spans and each policy's stats) in SQLite beside the tag cache, keyed by
    SHA-256 of (filter fingerprint, text)."""

    def __init__(self, cache_dir: Path, fingerprint: str) -> None:
        self.path = Path(cache_dir) / "mpqa-results.sqlite"
        self.fingerprint = fingerprint
        self._db: sqlite3.Connection | None = None

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=60)
            self._db.execute("CREATE TABLE IF NOT EXISTS results (key TEXT PRIMARY KEY, blob BLOB NOT NULL)")
            self._db.execute("CREATE TABLE IF NOT EXISTS checked (key TEXT PRIMARY KEY)")  # passed re-matches
        return self._db

    def _key(self, text: str) -> str:
        return hashlib.sha256(self.fingerprint.encode() + b"\0" + text.encode("utf-8")).hexdigest()

    def get(self, texts: Sequence[str]) -> dict[str, tuple]:
        keys = {self._key(t): t for t in texts}
        found: dict[str, tuple] = {}
        ks = list(keys)
        for i in range(0, len(ks), 500):
            chunk = ks[i:i + 500]
            rows = self._conn().execute(f"SELECT key, blob FROM results WHERE key IN ({','.join('?' * len(chunk))})",
                                        chunk).fetchall()
            found.update({keys[k]: pickle.loads(zlib.decompress(b)) for k, b in rows})  # noqa: S301 - our own cache
        return found

    def put(self, results: dict[str, tuple]) -> None:
        db = self._conn()
        db.executemany("INSERT OR REPLACE INTO results VALUES (?, ?)",
                       [(self._key(t), zlib.compress(pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL)))
                        for t, v in results.items()])
        db.commit()

    def check_key(self, text: str, kept: Sequence[str]) -> str:
        """The key of one passed no_opinion check: the text, the sentences kept from it, this filter."""
        return self._key("\x1e".join([text, *kept]))

    def checked(self, keys: Sequence[str]) -> set[str]:
        """The keys among `keys` whose strongsubj re-match passed before, with this same filter."""
        db = self._conn()
        found: set[str] = set()
        for i in range(0, len(keys), 500):
            chunk = list(keys[i:i + 500])
            found.update(k for (k,) in db.execute(
                f"SELECT key FROM checked WHERE key IN ({','.join('?' * len(chunk))})", chunk))
        return found

    def mark_checked(self, keys: Iterable[str]) -> None:
        db = self._conn()
        db.executemany("INSERT OR IGNORE INTO checked VALUES (?)", [(k,) for k in keys])
        db.commit()


# ---- stage 02's counts for both policies: lexicon_stats, triggers, report, figure --------------

def policies_reported(policy: str) -> tuple[str, ...]:
    """The configured policy first, then the others (a POS-aware run reports all three: `ignore` costs
    no tagging, and the tags of `respect` serve `respect_porter`; an `ignore` run reports only itself)."""
    return (policy,) if policy == "ignore" else (policy, *(p for p in POS_POLICIES if p != policy))


def _stats_row(report_id: str, policy: str, stats: SubjectivityStats | None, reason: str | None) -> dict:
    if stats is None:
        return {"report_id": report_id, "policy": policy, "n_sentences": pd.NA, "n_sentences_removed": pd.NA,
                "n_words": pd.NA, "n_words_removed": pd.NA, "share_words_removed": np.nan,
                "n_trigger_tokens": pd.NA, "top_triggers": None, "status": "skipped", "skip_reason": reason}
    top = ";".join(w for w, _ in stats.triggers.most_common(5))
    return {"report_id": report_id, "policy": policy, "n_sentences": stats.n_sentences,
            "n_sentences_removed": stats.n_sentences_removed, "n_words": stats.n_words,
            "n_words_removed": stats.n_words_removed,
            "share_words_removed": stats.n_words_removed / stats.n_words if stats.n_words else np.nan,
            "n_trigger_tokens": sum(stats.triggers.values()), "top_triggers": top or None,
            "status": "ok", "skip_reason": None}


class TriggerTally:
    """Per-report rows and corpus trigger counts for each reported policy, accumulated report by report."""

    def __init__(self, policies: Sequence[str]) -> None:
        self.policies = tuple(policies)
        self.rows: list[dict] = []
        self.occurrences = {p: Counter() for p in self.policies}
        self.in_reports = {p: Counter() for p in self.policies}
        self.entries = {p: {} for p in self.policies}
        self.pos = Counter()  # (token, POS) under the first (configured) policy
        # configured policy vs each other: sentences removed by only one of the two, and their triggers
        self.only = {q: {"first": 0, "other": 0, "first_triggers": Counter(), "other_triggers": Counter()}
                     for q in self.policies[1:]}

    def add(self, report_id: str, stats: Sequence[SubjectivityStats | None] | None, reason: str | None) -> None:
        """``stats``: one per policy in order (None: the report was not filtered, for ``reason``)."""
        stats = list(stats or []) + [None] * (len(self.policies) - len(stats or []))
        for p, st in zip(self.policies, stats):
            self.rows.append(_stats_row(report_id, p, st, reason))
            if st is not None:
                self.occurrences[p].update(st.triggers)
                self.in_reports[p].update(st.triggers.keys())
                self.entries[p].update(st.trigger_entries)
                if p == self.policies[0]:
                    self.pos.update(st.trigger_pos)
        first = stats[0]
        for q, st in zip(self.policies[1:], stats[1:]):
            if first is None or st is None:
                continue
            d = self.only[q]
            for mine, theirs, key in ((first.removed, st.removed, "first"), (st.removed, first.removed, "other")):
                for i in mine.keys() - theirs.keys():
                    d[key] += 1
                    d[f"{key}_triggers"].update(set(mine[i]))

    def stats_frame(self) -> pd.DataFrame:
        df = pd.DataFrame(self.rows, columns=list(_stats_row("", "", None, None)))
        df[["top_triggers", "skip_reason"]] = df[["top_triggers", "skip_reason"]].astype("str")
        for col in ("n_sentences", "n_sentences_removed", "n_words", "n_words_removed", "n_trigger_tokens"):
            df[col] = df[col].astype("Int64")
        df["share_words_removed"] = df["share_words_removed"].astype("float64")
        return df

    def triggers_frame(self, lexicon: Lexicon | None) -> pd.DataFrame:
        """One row per trigger word: the lexicon word it matched, its prior polarity, and per policy
        occurrences and reports (+ the POS it was removed as, for `respect`); sorted by the
        configured policy's occurrences, then the others'."""
        polarity = {} if lexicon is None else {e.word: e.polarity for e in lexicon.entries if e.type == "strongsubj"}
        words = set().union(*(set(c) for c in self.occurrences.values()))
        first = self.policies[0]
        rows = []
        for w in words:
            entry = next((self.entries[p][w] for p in self.policies if w in self.entries[p]), "")
            row = {"trigger": w, "lexicon_word": entry, "prior_polarity": polarity.get(entry, "")}
            for p in self.policies:
                row[f"occurrences_{p}"] = self.occurrences[p][w]
                row[f"reports_{p}"] = self.in_reports[p][w]
            if first != "ignore":
                tags = Counter({pos: n for (tok, pos), n in self.pos.items() if tok == w})
                row["pos_respect"] = ", ".join(f"{pos} {n}" for pos, n in tags.most_common())
            rows.append(row)
        cols = ["trigger", "lexicon_word", "prior_polarity"] + [f"{k}_{p}" for p in self.policies
                                                                 for k in ("occurrences", "reports")]
        cols += ["pos_respect"] if first == "respect" else []
        out = pd.DataFrame(rows, columns=cols)
        keys = [f"occurrences_{p}" for p in self.policies] + ["trigger"]
        return out.sort_values(keys, ascending=[False] * len(self.policies) + [True], ignore_index=True)

    def summary(self, policy: str, tagger: PosTagger | None) -> dict:
        """The stage report's MPQA part: policy, per-policy totals, and what the tagger did."""
        df = self.stats_frame()
        per = {}
        for p in self.policies:
            ok = df[(df["policy"] == p) & (df["status"] == "ok")]
            words = int(ok["n_words"].sum())
            per[p] = {"reports_filtered": int(len(ok)), "sentences": int(ok["n_sentences"].sum()),
                      "sentences_removed": int(ok["n_sentences_removed"].sum()),
                      "mean_sentences_removed_per_report": float(ok["n_sentences_removed"].mean()) if len(ok) else None,
                      "share_words_removed": int(ok["n_words_removed"].sum()) / words if words else None,
                      "top_triggers": [w for w, _ in self.occurrences[p].most_common(10)]}
        tag = None if tagger is None else {
            "tagger": tagger.id, "texts_from_cache": tagger.hits, "texts_tagged": tagger.misses,
            "tokens_tagged": tagger.words_tagged, "seconds_tagging": round(tagger.seconds, 2)}
        first = self.policies[0]
        diff = {f"{first} vs {q}": {
            f"sentences_removed_only_by_{first}": d["first"], f"sentences_removed_only_by_{q}": d["other"],
            f"top_triggers_only_{first}": [w for w, _ in d["first_triggers"].most_common(15)],
            f"top_triggers_only_{q}": [w for w, _ in d["other_triggers"].most_common(15)]}
            for q, d in self.only.items()}
        return {"mpqa_pos": policy, "policies_reported": list(self.policies), "per_policy": per,
                "policy_differences": diff, "tagging": tag}


def policy_differences(report: dict) -> pd.DataFrame:
    """The stage report's `mpqa.policy_differences` as a table: per pair of policies, the sentences only one
    of them removes and the trigger words behind them."""
    rows = []
    for pair, d in (report.get("mpqa", {}).get("policy_differences") or {}).items():
        first, other = pair.split(" vs ")
        rows.append({"policies": pair, "removed only by the run's policy": d[f"sentences_removed_only_by_{first}"],
                     "removed only by the other": d[f"sentences_removed_only_by_{other}"],
                     "triggers only under the run's policy": ", ".join(d[f"top_triggers_only_{first}"]),
                     "triggers only under the other": ", ".join(d[f"top_triggers_only_{other}"])})
    return pd.DataFrame(rows)


def top_triggers(triggers: pd.DataFrame, policy: str, n: int) -> pd.DataFrame:
    """The `n` most frequent triggers under `policy` (rows with zero occurrences left out)."""
    col = f"occurrences_{policy}"
    if col not in triggers.columns:
        return triggers.head(0)
    top = triggers[triggers[col] > 0].sort_values([col, "trigger"], ascending=[False, True])
    return top.head(int(n)).reset_index(drop=True)


def removal_summary(lexicon_stats: pd.DataFrame) -> pd.DataFrame:
    """Per policy, the distribution over reports of the sentences and words the filter removed."""
    cols = ["n_sentences", "n_sentences_removed", "n_words", "n_words_removed", "share_words_removed"]
    ok = lexicon_stats[lexicon_stats["status"] == "ok"]
    if ok.empty:
        return pd.DataFrame({"policy": [None], "statistic": ["reports"], **{c: [0.0] for c in cols}})
    parts = []
    for policy, g in ok.groupby("policy", sort=False):
        desc = g[cols].astype(float).describe(percentiles=[0.5]).loc[["count", "mean", "min", "50%", "max"]]
        desc = desc.rename(index={"50%": "median", "count": "reports"}).reset_index(names="statistic")
        parts.append(desc.assign(policy=policy)[["policy", "statistic", *cols]])
    return pd.concat(parts, ignore_index=True)


def removal_figure(cfg, lexicon_stats: pd.DataFrame):
    """Histogram of the share of words removed per report, one series per policy, saved as PNG + PDF
    under figures/<run>/; returns the figure for inline display."""
    import matplotlib.pyplot as plt

    from finlib.core.tables import figure_width, skip_figure
    from finlib.finbias.figures.base import (
        ALTERNATIVE_GREYS,
        figure_style,
        finish,
        legend_outside,
        wrap_lines,
    )

    ok = lexicon_stats[lexicon_stats["status"] == "ok"]
    if not len(ok):
        skip_figure(cfg, "fig_strongsubj_removed", "no report filtered (no no_opinion text built)")
        return None
    with figure_style():
        fig, ax = plt.subplots(figsize=(figure_width(cfg), 3.0))
        for (policy, g), color in zip(ok.groupby("policy", sort=False), ALTERNATIVE_GREYS):
            ax.hist(g["share_words_removed"].astype(float) * 100, bins=20, alpha=0.6, color=color,
                    label=f"mpqa_pos: {policy}")
        legend_outside(ax, ncol=2)
        ax.set_xlabel(wrap_lines("words removed by the strongsubj filter (% of no_rating text)", 0.8 * figure_width(cfg)))
        ax.set_ylabel("reports")
        fig.tight_layout()
    finish(cfg, fig, "fig_strongsubj_removed",
           "Share of words the MPQA strong-subjective filter removes per report (no_opinion vs no_rating "
           "text), one series per part-of-speech policy (stage 02).")
    return fig
