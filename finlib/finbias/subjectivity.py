"""The no_opinion condition's filter: drop every sentence with an MPQA strongsubj word (Fin-Bias 5.1).

Two matching policies (params `perturb.mpqa_pos`, rules in `finlib.finbias.lexicon`): `respect` (the
default) reads each word's part of speech off spaCy's tagger (`finlib.finbias.postag`, cached) and
honours the lexicon's (word, POS) entries; `ignore` is the POS-blind matcher. Stage 02 writes
the configured policy's text and, for comparison, both policies' per-report counts and
triggers (the POS-blind one costs no tagging).

Kept sentences keep their bytes; between two kept sentences goes the strongest whitespace gap
(most newlines) of the stretch removed between them, so paragraph breaks survive.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np
import pandas as pd

from finlib.finbias.lexicon import POS_POLICIES, TOKEN, Lexicon
from finlib.finbias.postag import PosTagger, Tagged, compound_pos, mpqa_pos
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


def tagged_hits(text: str, start: int, end: int, lexicon: Lexicon, tagged: Tagged
                ) -> Iterator[tuple[str, str, str]]:
    """(token, lexicon word, POS) for every strongsubj token of text[start:end] under policy `respect`."""
    for m in TOKEN.finditer(text, start, end):
        a, b = m.span()
        token = m.group(0)
        if len(token) == len(_PART.match(token).group(0)):  # a plain word: one tagger token
            pos = mpqa_pos(tagged.tag_at(a))
            hit = lexicon.match_tagged(token, pos)
        else:  # hyphen/apostrophe compound: the whole, then its parts with their own tags
            parts = [(p.group(0), tagged.tag_at(p.start())) for p in _PART.finditer(text, a, b)]
            pos = compound_pos([t for _, t in parts])
            hit = lexicon.match_tagged(token, pos, [(w, mpqa_pos(t)) for w, t in parts])
        if hit:
            yield token, hit, pos


def _blind_hits(text: str, start: int, end: int, lexicon: Lexicon) -> Iterator[tuple[str, str, str]]:
    lookup = lexicon.match
    for w in TOKEN.findall(text, start, end):
        if hit := lookup(w):
            yield w, hit, "any"


def remove_subjective_sentences(text: str, lexicon: Lexicon, tagged: Tagged | None = None,
                                spans: Sequence[tuple[int, int]] | None = None) -> tuple[str, SubjectivityStats]:
    """`text` minus every sentence containing an MPQA strongsubj word.

    ``tagged`` (the text's tags at ``spans``): policy `respect`; None: policy `ignore` (POS-blind).
    ``spans``: the sentence spans (computed when omitted; pass the ones the tags were made on).
    """
    spans = list(sentence_spans(text) if spans is None else spans)
    keep: list[int] = []
    triggers: Counter = Counter()
    trigger_pos: Counter = Counter()
    entries: dict[str, str] = {}
    n_words = n_removed_words = 0
    for i, (a, b) in enumerate(spans):
        words = len(TOKEN.findall(text, a, b))
        n_words += words
        hits = list(_blind_hits(text, a, b, lexicon) if tagged is None else tagged_hits(text, a, b, lexicon, tagged))
        if hits:
            n_removed_words += words
            for w, h, pos in hits:
                low = w.lower()
                triggers[low] += 1
                trigger_pos[(low, pos)] += 1
                entries[low] = h
        else:
            keep.append(i)
    stats = SubjectivityStats(len(spans), len(spans) - len(keep), n_words, n_removed_words, triggers, entries,
                              trigger_pos)
    return _join_kept(text, spans, keep), stats


class SubjectivityFilter:
    """The lexicon, the policy and (for `respect`) the cached tagger, applied to batches of texts."""

    def __init__(self, lexicon: Lexicon, policy: str = "respect", tagger: PosTagger | None = None) -> None:
        if policy not in POS_POLICIES:
            raise ValueError(f"perturb.mpqa_pos must be one of {POS_POLICIES}, got {policy!r}")
        if policy == "respect" and tagger is None:
            raise ValueError("policy 'respect' needs a PosTagger")
        self.lexicon, self.policy, self.tagger = lexicon, policy, tagger

    def tags(self, texts: Sequence[str]) -> tuple[list[list[tuple[int, int]]], list[Tagged | None]]:
        """Sentence spans of each text, and their tags (None under `ignore`)."""
        spans = [sentence_spans(t) for t in texts]
        if self.policy == "ignore":
            return spans, [None] * len(texts)
        return spans, self.tagger.tag_many(list(zip(texts, spans)))

    def run(self, texts: Sequence[str]) -> list[tuple[str, SubjectivityStats, SubjectivityStats | None]]:
        """Per text: (filtered text, stats of this policy, stats of `ignore` when this policy is `respect`)."""
        spans, tags = self.tags(texts)
        out = []
        for text, sp, tg in zip(texts, spans, tags):
            filtered, stats = remove_subjective_sentences(text, self.lexicon, tg, sp)
            blind = None if tg is None else remove_subjective_sentences(text, self.lexicon, None, sp)[1]
            out.append((filtered, stats, blind))
        return out

    def clean_sentences(self, text: str) -> list[str]:
        """The sentences of `text` with no strongsubj word under this policy (validation of no_opinion;
        the tags come from the cache the stage filled)."""
        spans, tags = self.tags([text])
        tagged = tags[0]

        def hits(a: int, b: int) -> Iterator[tuple[str, str, str]]:
            return _blind_hits(text, a, b, self.lexicon) if tagged is None else tagged_hits(
                text, a, b, self.lexicon, tagged)

        return [text[a:b] for a, b in spans[0] if next(hits(a, b), None) is None]


# ---- stage 02's counts for both policies: lexicon_stats, triggers, report, figure --------------

def policies_reported(policy: str) -> tuple[str, ...]:
    """The configured policy first; `respect` runs also report `ignore` (free: no tagging)."""
    return (policy, "ignore") if policy == "respect" else (policy,)


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
            if first == "respect":
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
        return {"mpqa_pos": policy, "policies_reported": list(self.policies), "per_policy": per, "tagging": tag}


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

    from finlib.core.tables import save_figure, synthetic_title

    ok = lexicon_stats[lexicon_stats["status"] == "ok"]
    fig, ax = plt.subplots(figsize=(5, 3.2))
    if len(ok):
        for policy, g in ok.groupby("policy", sort=False):
            ax.hist(g["share_words_removed"].astype(float) * 100, bins=20, alpha=0.6, label=f"mpqa_pos: {policy}")
        ax.legend(frameon=False, fontsize=8)
    else:
        ax.text(0.5, 0.5, "no_opinion skipped (no lexicon)", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("words removed by the strongsubj filter (% of no_rating text)")
    ax.set_ylabel("reports")
    ax.set_title(synthetic_title(cfg, "MPQA strongsubj filter, per report"), fontsize=10)
    fig.tight_layout()
    save_figure(cfg, fig, "fig_strongsubj_removed")
    return fig
