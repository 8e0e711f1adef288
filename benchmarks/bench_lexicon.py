"""Benchmark: the MPQA strongsubj sentence filter vs a naive baseline, same texts, same run, tagging in both.

Workload: synthetic reports of ~3,000 words from `finlib.finbias.data.synth` (Fin-Bias scale is 8,868 of them,
~27M words), generated one at a time (at no point are all texts held in memory; peak RSS is
printed). Default policy `respect` (the stage's default: spaCy POS tags, `finlib.finbias.perturb.postag`).

- fast: `finlib.finbias.perturb.subjectivity.SubjectivityFilter` -- Punkt sentence spans; spaCy's tagger only
  (parser/NER/lemmatizer excluded), sentences of a chunk of reports streamed through one
  `nlp.pipe`; one regex pass per sentence and the lexicon's per-(word, POS) memo. No tag cache here
  (a cached rerun costs only the matching: that is the "matching" line).
- naive: the same sentence splitter, then per sentence a full `nlp(sentence)` call (the default
  pipeline: parser, NER, lemmatizer included -- what a first attempt writes), and for every token a
  Porter stem and a linear scan over the lexicon list applying the same (word, POS) rules.

Both produce the filtered text and the removal counts; they are asserted identical on every report
the baseline runs (a seeded random subset, `--baseline-n`: the baseline is slow). The fast path is
timed on the whole workload (words/s, share of time in the tagger, the hour-scale extrapolation to the
real corpus) and on the same subset (the ratio). `--policy ignore` benchmarks the POS-blind matcher
(no tagger in either path). The figures go to benchmarks/results/lexicon_<policy>.json
(benchmarks/results.py) as well as to the terminal.

    .venv/bin/python benchmarks/bench_lexicon.py [--reports 200] [--words 3000] [--baseline-n 8] [--policy respect]
"""
from __future__ import annotations

import argparse
import hashlib
import random
import re
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import ROOT, machine, write_result

sys.path.insert(0, str(ROOT))

from nltk.stem import PorterStemmer

from finlib.core.memory import peak_rss_mb
from finlib.finbias.perturb.lexicon import TOKEN, Lexicon, load_lexicon
from finlib.finbias.perturb.postag import PosTagger, compound_pos, mpqa_pos
from finlib.finbias.perturb.subjectivity import SubjectivityFilter, _join_kept
from finlib.finbias.sentences import sentence_spans

LEXICON_CANDIDATES = (
    ROOT / "data" / "external" / "mpqa" / "subjclueslen1-HLTEMNLP05.tff",
    ROOT / ".." / "shared" / "data" / "mpqa" / "subjclueslen1-HLTEMNLP05.tff",
)


def synthetic_reports(n: int, words: int, seed: int) -> Iterator[tuple[str, str]]:
    """(report_id, text) of n synthetic reports of ~`words` words, generated lazily."""
    import numpy as np

    from finlib.finbias.data import synth

    p = synth.SynthParams.from_section({"n_reports": n, "n_firms": max(40, n // 20),
                                        "words_min": int(words * 0.95), "words_max": int(words * 1.05)})
    root = np.random.SeedSequence(seed)
    s_firms, s_reports = (np.random.default_rng(s) for s in root.spawn(2))
    cal = synth.trading_calendar(p.start, p.end)
    firms = synth.make_firms(p.n_firms, s_firms)
    skel = synth.draw_reports(p, firms, cal, s_reports)
    for row in skel.itertuples(index=False):
        firm = firms.iloc[int(row.firm)]
        yield row.report_id, synth.render_report(row, firm, cal[int(row.day)], p)


# ---- the naive baseline ---------------------------------------------------------------------

class NaiveFilter:
    """Per-sentence `nlp(sentence)` (full pipeline) and a linear scan of the lexicon list per token."""

    def __init__(self, lexicon: Lexicon, policy: str, model: str | None) -> None:
        self.stemmer = PorterStemmer()
        self.policy = policy
        # the list as parsed: (word, type, pos, stemmed, Porter stem)
        self.entries = [(e.word, e.type, e.pos, e.stemmed, self.stemmer.stem(e.word)) for e in lexicon.entries]
        self.nlp = None
        if policy == "respect":
            import spacy

            self.nlp = spacy.load(model or PosTagger().model)  # every component: the naive choice

    def _applies(self, pos: str, entry_pos: str) -> bool:
        return self.policy == "ignore" or entry_pos in ("anypos", pos)

    def _word(self, word: str, pos: str) -> bool:
        stem = self.stemmer.stem(word)
        if self.policy == "respect":
            own = [e for e in self.entries if e[0] == word and self._applies(pos, e[2])]
            if own:
                return any(e[1] == "strongsubj" for e in own)
        for w, typ, epos, stemmed, estem in self.entries:
            if typ == "strongsubj" and not w.endswith("-") and self._applies(pos, epos) and (
                    w == word or (stemmed and estem == stem)):
                return True
        return False

    def _token(self, token: str, pos: str, parts: list[tuple[str, str]]) -> bool:
        low = token.lower()
        if len(parts) < 2 or (self.policy == "respect" and any(
                e[0] == low and self._applies(pos, e[2]) for e in self.entries)):
            return self._word(low, pos)
        if self.policy == "ignore" and self._word(low, pos):
            return True
        if any(p and self._word(p.lower(), ppos) for p, ppos in parts):
            return True
        return any(t == "strongsubj" and w.endswith("-") and low.startswith(w) and self._applies(pos, epos)
                   for w, t, epos, _, _ in self.entries)

    def _tags(self, sentence: str) -> dict[int, str]:
        """Offset of each character -> fine tag of the spaCy token covering it."""
        if self.nlp is None:
            return {}
        return {i: t.tag_ for t in self.nlp(sentence) for i in range(t.idx, t.idx + len(t.text))}

    def __call__(self, text: str) -> tuple[str, int, int, Counter]:
        spans = sentence_spans(text)
        kept_idx, removed_words, triggers, n_words = [], 0, Counter(), 0
        for i, (a, b) in enumerate(spans):
            sentence = text[a:b]
            tags = self._tags(sentence)
            words = list(TOKEN.finditer(sentence))
            n_words += len(words)
            hits = []
            for m in words:
                parts = [(p.group(0), tags.get(m.start() + p.start(), "")) for p in re.finditer(r"[A-Za-z]+", m.group(0))]
                pos = mpqa_pos(parts[0][1]) if len(parts) == 1 else compound_pos([t for _, t in parts])
                if self._token(m.group(0), pos, [(w, mpqa_pos(t)) for w, t in parts]):
                    hits.append(m.group(0).lower())
            if hits:
                removed_words += len(words)
                triggers.update(hits)
            else:
                kept_idx.append(i)
        return _join_kept(text, spans, kept_idx), n_words, removed_words, triggers


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reports", type=int, default=200)
    ap.add_argument("--words", type=int, default=3000)
    ap.add_argument("--baseline-n", type=int, default=8, help="reports the naive baseline runs on")
    ap.add_argument("--policy", choices=("respect", "ignore"), default="respect")
    ap.add_argument("--chunk", type=int, default=64, help="reports per tagging stream (fast path)")
    ap.add_argument("--seed", type=int, default=20261129)
    return ap.parse_args(argv)


@dataclass
class Tally:
    """The timed whole-workload run (fast path, chunked) and, on a random subset, the same texts one
    at a time through the fast path and the naive baseline (outputs compared)."""

    fast: SubjectivityFilter
    naive: NaiveFilter
    tagger: PosTagger | None
    subset: set[int]
    t_fast: float = 0.0
    t_fast_sub: float = 0.0
    t_naive: float = 0.0
    words_all: int = 0
    words_sub: int = 0
    tag_s: float = 0.0  # seconds inside spaCy during the timed whole-workload runs
    mismatches: int = 0
    digest: Any = field(default_factory=hashlib.sha256)

    def flush(self, chunk: list[tuple[int, str, str]]) -> None:
        before = 0.0 if self.tagger is None else self.tagger.seconds
        t0 = time.perf_counter()
        results = self.fast.run([t for _, _, t in chunk])
        self.t_fast += time.perf_counter() - t0
        self.tag_s += 0.0 if self.tagger is None else self.tagger.seconds - before
        for (i, rid, text), (out, (st, *_)) in zip(chunk, results):
            self.words_all += st.n_words
            self.digest.update(out.encode("utf-8"))
            if i in self.subset:
                self.compare_alone(rid, text, out, st.n_words)
        chunk.clear()

    def compare_alone(self, rid: str, text: str, out: str, n_words: int) -> None:
        """The same text alone (no batching credit) through both paths: timed, and the outputs compared."""
        t0 = time.perf_counter()
        (alone, (st1, *_)), = self.fast.run([text])
        self.t_fast_sub += time.perf_counter() - t0
        t0 = time.perf_counter()
        expected = self.naive(text)
        self.t_naive += time.perf_counter() - t0
        self.words_sub += n_words
        if (alone, st1.n_words, st1.n_words_removed, st1.triggers) != expected or alone != out:
            self.mismatches += 1
            print(f"MISMATCH on {rid}", file=sys.stderr)


def print_results(args: argparse.Namespace, tally: Tally, path: Path, load_s: float, before_machine: dict) -> None:
    tg, k = tally.tagger, tally
    peak_mb = peak_rss_mb()
    print(f"workload: {args.reports} synthetic reports, ~{args.words} words, {k.words_all:,} words; policy "
          f"{args.policy}; lexicon {path.name}" + (f"; tagger {tg.id} (loaded in {load_s:.1f} s)" if tg else ""))
    print(f"fast, whole workload:        {k.t_fast:8.1f} s  {k.words_all / k.t_fast:10,.0f} words/s"
          + (f"  (tagging {k.tag_s:.1f} s = {100 * k.tag_s / k.t_fast:.0f} % of the time; matching alone "
             f"{k.words_all / max(k.t_fast - k.tag_s, 1e-9):,.0f} words/s)" if tg else ""))
    if tg:
        print(f"  extrapolated to the real corpus (27M words): {27e6 / (k.words_all / k.t_fast) / 3600:.1f} h once, "
              f"then from the tag cache")
    print(f"baseline subset:             {len(k.subset)} random reports ({k.words_sub:,} words)")
    print(f"fast, subset (one at a time):{k.t_fast_sub:8.2f} s  {k.words_sub / k.t_fast_sub:10,.0f} words/s")
    print(f"naive, subset:               {k.t_naive:8.2f} s  {k.words_sub / k.t_naive:10,.0f} words/s")
    print(f"ratio (naive / fast, same texts): {k.t_naive / k.t_fast_sub:.1f}x   "
          f"(whole-workload fast throughput vs naive: {(k.words_all / k.t_fast) / (k.words_sub / k.t_naive):.1f}x)")
    print(f"outputs identical on the subset: {k.mismatches == 0}; sha256 of all filtered texts "
          f"{k.digest.hexdigest()[:16]}; peak RSS {peak_mb:.0f} MB")
    print("written:", write_result(f"lexicon_{args.policy}", {
        "reports": args.reports, "words": k.words_all, "policy": args.policy, "baseline_reports": len(k.subset),
        "baseline_words": k.words_sub, "fast_seconds": round(k.t_fast, 2), "tagging_seconds": round(k.tag_s, 2),
        "fast_words_per_s": round(k.words_all / k.t_fast), "naive_words_per_s": round(k.words_sub / k.t_naive, 1),
        "ratio_same_texts": round(k.t_naive / k.t_fast_sub, 1), "peak_rss_mb": round(peak_mb),
        "outputs_identical": k.mismatches == 0}, before_machine))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    path = next((p for p in LEXICON_CANDIDATES if p.is_file()), None)
    if path is None:
        print("bench_lexicon: MPQA lexicon not found (run `make data`); skipping", file=sys.stderr)
        return 0
    lexicon = load_lexicon(path)
    tagger = PosTagger() if args.policy == "respect" else None
    load_s = 0.0
    if tagger is not None:
        t0 = time.perf_counter()
        tagger._pipeline()  # load once, outside the timed loop (printed)
        load_s = time.perf_counter() - t0
    # the naive baseline applies Porter stems: compared with the Porter-stem policy (`respect_porter`)
    fast = SubjectivityFilter(lexicon, "respect_porter" if args.policy == "respect" else args.policy, tagger,
                              compare=False)
    subset = set(random.Random(args.seed).sample(range(args.reports), min(args.baseline_n, args.reports)))
    tally = Tally(fast, NaiveFilter(lexicon, args.policy, None), tagger, subset)
    before_machine = machine()
    chunk: list[tuple[int, str, str]] = []
    for i, (rid, text) in enumerate(synthetic_reports(args.reports, args.words, args.seed)):
        chunk.append((i, rid, text))
        if len(chunk) == args.chunk:
            tally.flush(chunk)
            print(f"  {i + 1} reports, fast {tally.words_all / tally.t_fast:,.0f} words/s", flush=True)
    if chunk:
        tally.flush(chunk)
    print_results(args, tally, path, load_s, before_machine)
    return 1 if tally.mismatches else 0

if __name__ == "__main__":
    sys.exit(main())
