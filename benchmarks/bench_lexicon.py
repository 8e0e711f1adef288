"""Benchmark: the MPQA strongsubj sentence filter vs a naive baseline, same texts, same run.

Workload (Fin-Bias scale): 8,868 synthetic reports of ~3,000 words from `finlib.synth`,
generated one at a time (a generator: at no point are all texts, or texts x copies, held in
memory; peak RSS is printed).

- fast: `finlib.perturb.remove_subjective_sentences` -- Punkt sentence spans, one regex pass
  per sentence, and the lexicon's per-word memo (each distinct word is stemmed once).
- naive: the same sentence splitter, then per sentence a fresh tokenisation and, for every
  token, a Porter stem and a linear scan over the strongsubj entries of the lexicon list.

Both produce the filtered text and the removal counts; they are asserted identical on every
report the baseline runs. The baseline is too slow for the full corpus (~1 s per report), so it
runs on a seeded random subset (`--baseline-n`), and the fast path is timed on the same subset
(the ratio) and on the whole corpus (the throughput); the output says so.

    .venv/bin/python benchmarks/bench_lexicon.py [--reports 8868] [--words 3000] [--baseline-n 12]
"""
from __future__ import annotations

import argparse
import hashlib
import random
import resource
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nltk.stem import PorterStemmer  # noqa: E402

from finlib.lexicon import TOKEN, Lexicon, load_lexicon  # noqa: E402
from finlib.perturb import remove_subjective_sentences  # noqa: E402
from finlib.sentences import sentence_spans  # noqa: E402

LEXICON_CANDIDATES = (
    ROOT / "data" / "external" / "mpqa" / "subjclueslen1-HLTEMNLP05.tff",
    ROOT / ".." / "shared" / "data" / "mpqa" / "subjclueslen1-HLTEMNLP05.tff",
)


def synthetic_reports(n: int, words: int, seed: int) -> Iterator[tuple[str, str]]:
    """(report_id, text) of n synthetic reports of ~`words` words, generated lazily."""
    import numpy as np

    from finlib import synth

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
    """Per-sentence tokenisation and a linear scan of the strongsubj entry list per token."""

    def __init__(self, lexicon: Lexicon) -> None:
        self.stemmer = PorterStemmer()
        # the list as parsed: (word, Porter stem or None for stemmed1=n)
        self.entries = [(e.word, self.stemmer.stem(e.word) if e.stemmed else None)
                        for e in lexicon.entries if e.type == "strongsubj"]

    def _word_matches(self, word: str) -> bool:
        stem = self.stemmer.stem(word)
        for entry, entry_stem in self.entries:
            if not entry.endswith("-") and (entry == word or (entry_stem is not None and entry_stem == stem)):
                return True
        return False

    def _token_matches(self, token: str) -> bool:
        low = token.lower()
        if self._word_matches(low):
            return True
        if any(c in low for c in "-'\u2019"):
            parts = low.replace("'", "-").replace("\u2019", "-").split("-")
            if any(p and self._word_matches(p) for p in parts):
                return True
            return any(entry.endswith("-") and low.startswith(entry) for entry, _ in self.entries)
        return False

    def __call__(self, text: str) -> tuple[str, int, int, Counter]:
        spans = sentence_spans(text)
        kept_idx, removed_words, triggers = [], 0, Counter()
        n_words = 0
        for i, (a, b) in enumerate(spans):
            tokens = TOKEN.findall(text[a:b])
            n_words += len(tokens)
            hits = [t.lower() for t in tokens if self._token_matches(t)]
            if hits:
                removed_words += len(tokens)
                triggers.update(hits)
            else:
                kept_idx.append(i)
        # same reassembly rule as the fast path (kept sentences + strongest gap)
        from finlib.perturb import _join_kept

        return _join_kept(text, spans, kept_idx), n_words, removed_words, triggers


def fast(text: str, lexicon: Lexicon) -> tuple[str, int, int, Counter]:
    out, st = remove_subjective_sentences(text, lexicon)
    return out, st.n_words, st.n_words_removed, st.triggers


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reports", type=int, default=8868)
    ap.add_argument("--words", type=int, default=3000)
    ap.add_argument("--baseline-n", type=int, default=12, help="reports the naive baseline runs on")
    ap.add_argument("--seed", type=int, default=20261129)
    args = ap.parse_args(argv)

    path = next((p for p in LEXICON_CANDIDATES if p.is_file()), None)
    if path is None:
        print("bench_lexicon: MPQA lexicon not found (run `make data`); skipping", file=sys.stderr)
        return 0
    lexicon = load_lexicon(path)
    naive = NaiveFilter(lexicon)
    subset = set(random.Random(args.seed).sample(range(args.reports), min(args.baseline_n, args.reports)))

    t_fast = t_fast_sub = t_naive = 0.0
    bytes_all = bytes_sub = 0
    digest = hashlib.sha256()
    mismatches = 0
    for i, (rid, text) in enumerate(synthetic_reports(args.reports, args.words, args.seed)):
        size = len(text.encode("utf-8"))
        t0 = time.perf_counter()
        result = fast(text, lexicon)
        dt = time.perf_counter() - t0
        t_fast += dt
        bytes_all += size
        digest.update(result[0].encode("utf-8"))
        if i in subset:
            # the fast path again on this text with a cold memo, so the subset ratio does not
            # credit it with words stemmed earlier in the corpus
            cold = load_lexicon(path)
            t0 = time.perf_counter()
            result_cold = fast(text, cold)
            t_fast_sub += time.perf_counter() - t0
            t0 = time.perf_counter()
            expected = naive(text)
            t_naive += time.perf_counter() - t0
            bytes_sub += size
            if result_cold != expected or result != expected:
                mismatches += 1
                print(f"MISMATCH on {rid}", file=sys.stderr)
        if (i + 1) % 1000 == 0:
            print(f"  {i + 1} reports, fast {bytes_all / t_fast / 1e6:.2f} MB/s", flush=True)

    mb = 1e6
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"corpus: {args.reports} synthetic reports, ~{args.words} words, {bytes_all / mb:.1f} MB; "
          f"lexicon {path.name} ({len(lexicon.strong_words)} strongsubj words)")
    print(f"fast, whole corpus:          {t_fast:8.1f} s  {bytes_all / t_fast / mb:8.3f} MB/s")
    print(f"baseline subset:             {len(subset)} random reports ({bytes_sub / mb:.2f} MB) -- the naive "
          "baseline is too slow for the whole corpus")
    print(f"fast, subset (cold memo):    {t_fast_sub:8.2f} s  {bytes_sub / t_fast_sub / mb:8.3f} MB/s")
    print(f"naive, subset:               {t_naive:8.2f} s  {bytes_sub / t_naive / mb:8.3f} MB/s")
    print(f"ratio (naive / fast, same texts, cold memo): {t_naive / t_fast_sub:.1f}x   "
          f"(whole-corpus fast throughput vs naive: {(bytes_all / t_fast) / (bytes_sub / t_naive):.1f}x)")
    print(f"outputs identical on the subset: {mismatches == 0}; sha256 of all filtered texts "
          f"{digest.hexdigest()[:16]}; peak RSS {peak_mb:.0f} MB")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
