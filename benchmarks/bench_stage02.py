"""Benchmark: stage 02 at the paper's shape (8,868 reports of ~3,000 words, ~27M words), old policy vs new.

Corpus: synthetic reports of ~`--words` words from `finlib.finbias.data.synth` (the generator of
`benchmarks/bench_lexicon.py`), at fractions of the paper's 8,868 reports (`--scales`, e.g. 1/64 1/8).
Each step is timed on the same texts in one run, old and new side by side, and extrapolated to the
full corpus (x 1/scale: every step is linear in the number of reports):

- conditions: rating extraction, no_rating, the fake-rating rewrite (`report_conditions`), all reports;
- split: Punkt sentence spans (both policies);
- need: which sentences depend on a part of speech (`sentence_need`; new only);
- tag: old = spaCy's tagger over every sentence, one process (the earlier stage);
       new = only the sentences that need a POS, `--processes` worker processes;
- match: old = Porter-stem POS policy (`respect_porter`) on every sentence; new = the three policies the
  stage reports (`respect`, `respect_porter`, `ignore`);
- rerun: the new filter again over the same texts with the tag cache filled (a rerun from caches);
- lemmatizer: spaCy's tagger with vs without its lemmatizer on a sample of sentences, the cost of
  reading inflections off lemmas instead of the inflection rules (`finlib.finbias.perturb.lexicon.base_forms`).

Every scale's row goes to benchmarks/results/stage02.json under `scales.<scale>` (seconds per step, the
deterministic counts of sentences and characters through the tagger), with the machine's CPU flags and load.

    nice .venv/bin/python benchmarks/bench_stage02.py --scales 1/64 1/32 --processes 2
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_lexicon import synthetic_reports  # noqa: E402
from results import machine, write_result  # noqa: E402

from finlib.finbias.perturb.lexicon import TOKEN  # noqa: E402
from finlib.finbias.perturb.postag import EXCLUDE, PosTagger, installed_model  # noqa: E402
from finlib.finbias.perturb.stage import report_conditions, shipped_lexicon  # noqa: E402
from finlib.finbias.perturb.subjectivity import (  # noqa: E402
    ALWAYS,
    KEEP,
    TAG,
    SubjectivityFilter,
    _filter,
    sentence_need,
    tag_windows,
)
from finlib.finbias.sentences import sentence_spans  # noqa: E402

PAPER_REPORTS = 8868


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def bench_scale(scale: Fraction, words: int, processes: int, seed: int) -> dict:
    n = max(1, round(PAPER_REPORTS * scale))
    reports = list(synthetic_reports(n, words, seed))
    texts = [t for _, t in reports]
    n_words = sum(len(TOKEN.findall(t)) for t in texts)
    lex = shipped_lexicon()
    row: dict[str, float] = {"reports": n, "words": n_words}
    kinds: Counter = Counter()
    _, row["conditions"] = _timed(lambda: [report_conditions(r, t, 1, "one", kinds) for r, t in reports])
    spans, row["split"] = _timed(lambda: [sentence_spans(t) for t in texts])
    needs, row["need"] = _timed(lambda: [[sentence_need(t, a, b, lex) for a, b in sp] for t, sp in zip(texts, spans)])
    row["sentences"] = sum(map(len, spans))
    row["sentences_decided_by_tags"] = sum(n.count(TAG) for n in needs)
    row["sentences_removed_by_anypos_clue"] = sum(n.count(ALWAYS) for n in needs)
    # as SubjectivityFilter.prepare: every sentence with a POS-dependent word is tagged (in windows), the
    # ALWAYS ones for their triggers only
    per_sentence = [tag_windows(t, s, lex) for t, sp, nd in zip(texts, spans, needs) for s, k in zip(sp, nd)
                    if k != KEEP]
    row["sentences_tagged_new"] = sum(map(bool, per_sentence))
    row["chars_tagged_new"] = sum(b - a for ws in per_sentence for a, b in ws)
    row["chars_tagged_old"] = sum(b - a for sp in spans for a, b in sp)

    old_tagger = PosTagger(None, n_process=1)
    old_tags, row["tag_old"] = _timed(lambda: old_tagger.tag_many(list(zip(texts, spans))))
    every = [[TAG] * len(sp) for sp in spans]
    _, row["match_old"] = _timed(lambda: [_filter(t, lex, "respect_porter", sp, nd, tg)
                                          for t, sp, nd, tg in zip(texts, spans, every, old_tags)])
    with tempfile.TemporaryDirectory() as cache:
        new = SubjectivityFilter(lex, "respect", PosTagger(cache, n_process=processes))
        prepared, t_prep = _timed(lambda: new.prepare(texts))
        row["tag_new"] = new.tagger.seconds
        _, row["match_new"] = _timed(lambda: [[_filter(t, lex, p, sp, nd, tg) for p in new.policies]
                                              for t, sp, nd, tg in zip(texts, *prepared)])
        new.tagger.close()
        again = SubjectivityFilter(lex, "respect", PosTagger(cache, n_process=processes))
        _, row["rerun_filter"] = _timed(lambda: again.run(texts))
        again.tagger.close()
    row["fake_kinds"] = dict(kinds)
    # the lemmatizer's extra cost, on the first 400 sentences that need a POS
    import spacy

    sample = [t[a:b] for t, sp, nd in zip(texts, spans, needs) for (a, b), k in zip(sp, nd) if k == TAG][:400]
    name = installed_model()[0]
    tag_only = spacy.load(name, exclude=list(EXCLUDE))
    with_lemma = spacy.load(name, exclude=[e for e in EXCLUDE if e != "lemmatizer"])
    for nlp in (tag_only, with_lemma):  # warm-up: the first pipe call pays one-off costs
        list(nlp.pipe(sample[:20]))
    row["lemma_sample_tag_only"] = row["lemma_sample_with_lemmatizer"] = 0.0
    for _ in range(2):  # alternated, summed: a load spike hits both sides
        row["lemma_sample_tag_only"] += _timed(lambda: list(tag_only.pipe(sample, batch_size=256)))[1]
        row["lemma_sample_with_lemmatizer"] += _timed(lambda: list(with_lemma.pipe(sample, batch_size=256)))[1]
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scales", nargs="+", default=["1/256"])  # `make bench`: minutes; 1/8 takes hours for the old policy
    ap.add_argument("--words", type=int, default=3000)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    before = machine()
    rows = {}
    for s in args.scales:
        scale = Fraction(s)
        r = bench_scale(scale, args.words, args.processes, args.seed)
        rows[str(scale)] = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()}
        k = 1 / float(scale)
        old = r["split"] + r["tag_old"] + r["match_old"]
        new = r["split"] + r["need"] + r["tag_new"] + r["match_new"]
        print(f"\n== scale {s}: {r['reports']} reports, {r['words']:,} words, {r['sentences']:,} sentences; "
              f"new policy tags {r['sentences_tagged_new']:,} ({100 * r['sentences_tagged_new'] / r['sentences']:.1f} %)")
        print(f"{'step':<34}{'old s':>9}{'new s':>9}{'old, full':>12}{'new, full':>12}")
        for name, o, nw in (("conditions (extract + fake)", r["conditions"], r["conditions"]),
                            ("sentence split", r["split"], r["split"]), ("POS need", 0.0, r["need"]),
                            ("tagging", r["tag_old"], r["tag_new"]), ("matching", r["match_old"], r["match_new"]),
                            ("MPQA filter total", old, new), ("rerun from the tag cache", old, r["rerun_filter"])):
            print(f"{name:<34}{o:>9.1f}{nw:>9.1f}{o * k / 60:>10.1f} m{nw * k / 60:>10.1f} m")
        print(f"characters through the tagger: old {r['chars_tagged_old']:,}, new {r['chars_tagged_new']:,}")
        print(f"ratio old/new (filter): {old / new:.1f}x; lemmatizer on {400} sentences: "
              f"{r['lemma_sample_with_lemmatizer']:.2f} s vs tagger only {r['lemma_sample_tag_only']:.2f} s "
              f"({r['lemma_sample_with_lemmatizer'] / r['lemma_sample_tag_only']:.2f}x); fake rewrites {r['fake_kinds']}")
    print("written:", write_result("stage02", {"words": args.words, "processes": args.processes, "seed": args.seed,
                                               "scales": rows}, before))
    return 0


if __name__ == "__main__":
    sys.exit(main())
