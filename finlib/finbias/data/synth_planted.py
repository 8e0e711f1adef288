"""What the synthetic generator planted in each report, read without the project's own text code.

Why: the rehearsal (`make rehearse`) must catch a wrong Fin-Bias table. A simulated model that finds
the shown rating with the project's rating extractor, or a truth recomputed from stage 02's columns,
agrees with every bug those parts have. So the generator records, per report, what it wrote
(`planted_record`: the first sentence and the span of its rating term, the body sentences in order,
the factual and the opinion sentences), and two readers use only that record:

* `PlantedIndex.read` (the simulated servers): which generated report a prompt is (its factual
  sentences, unique to the report, found in the text) and which rating its text shows: the
  analyst's when the text starts with the generated rating sentence, none when it starts with what
  followed it, else the rating term now standing where the generator put its own (between the same
  neighbouring words, named by the shared term table `finlib.finbias.vocab.rating_of`); whether its
  opinion sentences are still there. A fake written wrongly shows what it shows, not what stage
  02 meant to write.
* `expected_cells` (the rehearsal's truth): every Table 4-7 cell in closed form from the planted
  propensities: P(answer) = follow x [shown] + (1 - follow) x P(own view), the own view a normal
  draw around skill x signal + tilt + sway x tone (tone only while the opinion sentences are there)
  cut at +-`VIEW_CUT`; times P(a JSON answer) = 1 - unparsed, since an unparsed answer counts as no
  match inside N (the paper's Eq. 1). Its standard deviation is that of a sum of independent
  Bernoulli draws, sqrt(sum p(1-p)) / N, so a tolerance can be stated.
"""
from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pandas as pd
from scipy.stats import norm

from finlib.finbias.data import provider_layouts
from finlib.finbias.vocab import POOLED, RATINGS, Rating, rating_of

# Where the rating statement stands and what stage 02 must leave (`statement_fields`): the rule a front-matter
# reader names, the statement's span, the first byte removal keeps, the front matter before it and the
# separator after it (normalised), and for a provider layout the statement as literal pieces around its slots.
STATEMENT_FIELDS = ("rule", "statement_start", "statement_end", "keep_from", "front", "gap", "statement_pieces",
                    "slot_kinds")
KEY_CHARS = 64        # a sentence is found by its first KEY_CHARS characters (whitespace collapsed)
ANCHORS = 8           # factual sentences per report kept to recognise it
BODY_KEYS = 12        # body sentences (in order) kept to find where the first sentence ended
VIEW_CUT = 0.6        # own view: bearish below -VIEW_CUT, bullish above +VIEW_CUT
PLANTED_FIELDS = ("report_id", "sector", "analyst_rating", "signal", "tone", "first_sentence", "term_start",
                  "term_end", "after_key", "body_keys", "anchors", "opinion_keys", *STATEMENT_FIELDS)
_EDGE = re.compile(r"^[^\w]+|[^\w]+$")
_ARTICLE = re.compile(r"^(?:a|an|the)\s+", re.I)


def normalize(text: str) -> str:
    """NFKC, whitespace runs as one space: what stage 00's cleaning may change is made the same on both sides."""
    return " ".join(unicodedata.normalize("NFKC", text).split())


def sentence_key(sentence: str) -> str:
    return normalize(sentence)[:KEY_CHARS]


def term_span(sentence: str, term: str, previous: str | None) -> tuple[int, int]:
    """Where the current rating term stands in the rating sentence, as written: its whole-word occurrence
    that is not part of the previous term ("to Buy from Strong Buy"), the first such one."""
    spans = [m.span() for m in re.finditer(rf"(?<!\w){re.escape(term)}(?!\w)", sentence)]
    taken = [m.span() for m in re.finditer(re.escape(previous), sentence)] if previous and previous != term else []
    free = [s for s in spans if not any(a <= s[0] and s[1] <= b for a, b in taken if (a, b) != s)]
    if not (free or spans):
        raise ValueError(f"rating term {term!r} is not in its sentence {sentence!r}")
    return (free or spans)[0]


def planted_record(text: str, planted, body: dict[str, list[str]]) -> dict:
    """The generator's record of one report for the rehearsal (`PLANTED_FIELDS` less the numbers
    `generate_market` adds: report_id, sector, signal, tone). `planted`: the report's
    `finlib.finbias.data.synth.PlantedRating`; `body`: its `pieces`, `factual` and `opinions` sentences."""
    first = normalize(planted.rating_sentence)  # a wrapped rating line is one line here, as the span is counted
    start, end = term_span(first, normalize(planted.rating_term), planted.previous_rating_term and
                           normalize(planted.previous_rating_term))
    return {"analyst_rating": planted.planted_rating, "first_sentence": first, "term_start": start, "term_end": end,
            "after_key": (sentence_key(text[len(planted.rating_sentence):])
                          if text.startswith(planted.rating_sentence) else ""),
            "body_keys": [sentence_key(s) for s in body["pieces"][:BODY_KEYS]],
            "anchors": [sentence_key(s) for s in body["factual"] if len(normalize(s)) >= KEY_CHARS][:ANCHORS],
            "opinion_keys": sorted({sentence_key(s) for s in body["opinions"]}),
            **statement_fields(text, planted, body.get("statement"))}


def statement_fields(text: str, planted, plant: provider_layouts.ProviderPlant | None) -> dict:
    """`STATEMENT_FIELDS` of one report, from what the generator wrote: a provider layout's own record, else
    the rating sentence opening the report (the authors' protocol: rule first_sentence), removal keeping
    everything after it and the whitespace that follows."""
    if plant is None:
        end = len(planted.rating_sentence)
        keep = end + len(text[end:]) - len(text[end:].lstrip())
        return {"rule": "first_sentence", "statement_start": 0, "statement_end": end, "keep_from": keep,
                "front": "", "gap": "", "statement_pieces": [], "slot_kinds": []}
    return {"rule": plant.rule, "statement_start": plant.start, "statement_end": plant.end, "keep_from": plant.keep_from,
            "front": normalize(text[: plant.start]), "gap": normalize(text[plant.end : plant.keep_from]),
            "statement_pieces": list(plant.pieces), "slot_kinds": list(plant.kinds)}


@dataclass(frozen=True)
class Reading:
    """What a simulated model takes from one prompt's report text."""

    report_id: str | None          # None: no generated report recognised
    shown: Rating | None           # the rating the text shows (None: none, or unreadable)
    kind: str                      # analyst | none | rewritten | unreadable | unknown
    opinions: bool                 # the report's opinion sentences are (mostly) still in the text


def _word(w: str) -> str:
    w = _EDGE.sub("", w).lower()
    return "a" if w == "an" else w


def _terms_in(words: list[str]) -> list[tuple[int, int, Rating]]:
    """Rating terms in a word list (longest first at each start; none inside a longer one)."""
    out: list[tuple[int, int, Rating]] = []
    i = 0
    while i < len(words):
        for n in (3, 2, 1):
            r = rating_of(" ".join(_EDGE.sub("", w) for w in words[i:i + n])) if i + n <= len(words) else None
            if r is not None:
                out.append((i, i + n, r))
                i += n
                break
        else:
            i += 1
    return out


def shown_in_head(first: str, span: tuple[int, int], head: str) -> Rating | None:
    """The rating a rewritten first sentence shows where the generator put its rating term: of the rating
    terms in `head`, the one between the same neighbouring words as the generated term ("to X from",
    "with a X rating"; articles a/an alike), nearest to the same place on a tie; None when no term
    stands between either neighbour."""
    a, b = first.split(" "), head.split(" ")
    ti = len(first[:span[0]].split(" ")) - 1
    tj = len(first[:span[1]].split(" "))
    before = _word(a[ti - 1]) if ti > 0 else None
    after = _word(a[tj]) if tj < len(a) else None
    best, best_key = None, (0, 0.0)
    for i, j, r in _terms_in(b):
        score = (before is not None and i > 0 and _word(b[i - 1]) == before) + \
                (after is not None and j < len(b) and _word(b[j]) == after) + \
                (after is None and j == len(b)) + (before is None and i == 0)
        key = (score, -abs(i / max(1, len(b)) - ti / max(1, len(a))))
        if score and key > best_key:
            best, best_key = r, key
    return best


class PlantedIndex:
    """Prompt text -> `Reading`, from the generator's `planted` records only."""

    def __init__(self, planted: pd.DataFrame):
        missing = [c for c in PLANTED_FIELDS if c not in planted.columns]
        if missing:
            raise ValueError(f"planted records lack columns {missing}")
        lists = ("body_keys", "anchors", "opinion_keys", "statement_pieces", "slot_kinds")  # parquet gives arrays back: plain lists here
        self.rows = {str(r["report_id"]): {**r, **{k: list(r[k]) for k in lists}} for r in planted.to_dict("records")}
        owners: dict[str, set[str]] = {}
        for rid, r in self.rows.items():
            for key in r["anchors"]:
                owners.setdefault(key, set()).add(rid)
        self.anchors = {k: next(iter(v)) for k, v in owners.items() if len(v) == 1}  # unique to one report
        self._cache: dict[int, Reading] = {}

    def report_of(self, text: str, votes: int = 3) -> str | None:
        """The generated report most of the first `votes` factual sentences found in `text` belong to
        (a sentence another report also wrote, beyond the few kept per report, is outvoted)."""
        pos, hits = 0, []
        while pos < len(text) and len(hits) < votes:
            rid = self.anchors.get(text[pos:pos + KEY_CHARS])
            if rid is not None:
                hits.append(rid)
            nxt = text.find(" ", pos)
            if nxt < 0:
                break
            pos = nxt + 1
        return max(hits, key=hits.count) if hits else None

    def read(self, text: str) -> Reading:
        """Which report, which rating shown, opinions present (cached per text)."""
        h = hash(text)
        hit = self._cache.get(h)
        if hit is None:
            hit = self._read(normalize(text))
            if len(self._cache) > 200_000:
                self._cache.clear()
            self._cache[h] = hit
        return hit

    def _read(self, t: str) -> Reading:
        rid = self.report_of(t)
        if rid is None:
            return Reading(None, None, "unknown", False)
        r = self.rows[rid]
        found = [k for k in r["opinion_keys"] if k in t]
        opinions = bool(r["opinion_keys"]) and 2 * len(found) >= len(r["opinion_keys"])
        first = normalize(r["first_sentence"])
        after = t.find(r["after_key"], 0, len(first) + 400) if r["after_key"] else -1
        starts = [p for p in (t.find(k) for k in r["body_keys"]) if p >= 0]
        head = t[:after].strip() if after >= 0 else t[:min(starts)].strip() if starts else t
        analyst = Rating(r["analyst_rating"])
        if head == first:
            return Reading(rid, analyst, "analyst", opinions)
        if not head:
            return Reading(rid, None, "none", opinions)
        if len(r["slot_kinds"]):  # a provider layout: the statement read at its planted slots
            return Reading(rid, *_provider_shown(r, head), opinions)
        shown = shown_in_head(first, (int(r["term_start"]), int(r["term_end"])), head)
        if shown is None and not _terms_in(head.split(" ")):  # what precedes the body names no rating at all
            return Reading(rid, None, "none", opinions)
        return Reading(rid, shown, "rewritten" if shown is not None else "unreadable", opinions)


def _provider_shown(r: dict, head: str) -> tuple[Rating | None, str]:
    """What a provider layout's head shows once its front matter and separator are set apart: the rating its
    planted slots read (`provider_layouts.read_statement`), none when no rating word is left."""
    rest = head[len(r["front"]) :].strip() if head.startswith(r["front"]) else head
    if r["gap"] and rest.endswith(r["gap"]):
        rest = rest[: -len(r["gap"])].strip()
    shown, _ = provider_layouts.read_statement(rest, [normalize(p) for p in r["statement_pieces"]], r["slot_kinds"])
    if shown is None and not _terms_in(head.split(" ")):
        return None, "none"
    return shown, "rewritten" if shown is not None else "unreadable"


# ---------------------------------------------------------------- the closed-form truth

def own_view_probs(skill: float, tilt: float, sway: float, signal: np.ndarray, tone: np.ndarray,
                   opinions: bool) -> np.ndarray:
    """P(own view = bearish, neutral, bullish) per report (columns in `RATINGS` order)."""
    m = skill * np.asarray(signal, float) + tilt + (sway * np.asarray(tone, float) if opinions else 0.0)
    bear, bull = norm.cdf(-VIEW_CUT - m), norm.cdf(m - VIEW_CUT)
    cols = {Rating.BEARISH: bear, Rating.NEUTRAL: 1.0 - bear - bull, Rating.BULLISH: bull}
    return np.column_stack([cols[r] for r in RATINGS])


def answer_probs(prop: Mapping[str, float], planted: pd.DataFrame, shown: pd.Series, opinions: bool) -> np.ndarray:
    """P(scored answer = each rating) per report: follow the shown rating or give the own view, times
    P(the reply states a JSON answer) (rows of `planted`, `shown` aligned to them)."""
    has_opinions = planted["opinion_keys"].map(len).to_numpy() > 0  # a report without any reads the same in both
    tone = np.where(has_opinions, planted["tone"].to_numpy(float), 0.0)
    own = own_view_probs(prop["skill"], prop["tilt"], prop["sway"], planted["signal"], tone, opinions)
    idx = shown.map({r.value: i for i, r in enumerate(RATINGS)}).to_numpy()
    follow = np.zeros_like(own)
    has = ~pd.isna(idx)
    follow[np.flatnonzero(has), idx[has].astype(int)] = 1.0
    f = np.where(has, prop["follow"], 0.0)[:, None]
    return (1.0 - prop["unparsed"]) * (f * follow + (1.0 - f) * own)


# condition -> (the rating the text must show, the opinion sentences kept, the herding reference)
PLANTED_CONDITIONS: dict[str, tuple[str, bool, str]] = {
    "original": ("analyst_rating", True, "analyst_rating"),
    "no_rating": ("", True, "analyst_rating"),
    "fake_rating": ("fake_rating", True, "fake_rating"),
    "no_opinion": ("", False, "analyst_rating"),
}


def _pick(p: np.ndarray, target: pd.Series) -> np.ndarray:
    """p[i, rating of target i] (nan where target is missing)."""
    idx = target.map({r.value: i for i, r in enumerate(RATINGS)}).to_numpy()
    out = np.full(len(p), np.nan)
    ok = ~pd.isna(idx)
    out[ok] = p[np.flatnonzero(ok), idx[ok].astype(int)]
    return out


def _summaries(rows: pd.DataFrame, value: np.ndarray, sectors: Iterable[str]) -> list[dict]:
    """Mean and SD of the rate per sector and pooled, over rows where `value` is defined."""
    ok = ~np.isnan(value)
    v, sec = value[ok], rows["sector"].to_numpy()[ok]
    out = []
    for s in (*sectors, POOLED):
        x = v if s == POOLED else v[sec == s]
        n = len(x)
        out.append({"sector": s, "n": n, "expected": float(x.mean()) if n else np.nan,
                    "sd": float(np.sqrt((x * (1 - x)).sum()) / n) if n else np.nan})
    return out


def expected_cells(planted: pd.DataFrame, cases: pd.DataFrame, labels: pd.Series,
                   propensities: Mapping[str, Mapping[str, float]], sectors: Iterable[str]) -> pd.DataFrame:
    """Planted herding and accuracy (Eq. 1: every answered item in N) per model x condition x sector.

    `cases`: one row per (model, condition, report_id) answered, with `fake_rating` for the fake
    condition (the rating stage 02 says it wrote) and optionally `refused` (no reply); `labels`: report_id -> return-based label (stage
    01's). Analyst rating, sector, signal and tone come from the generator's own records."""
    base = planted.set_index("report_id")
    sectors = tuple(sectors)
    out = []
    for (model, cond), g in cases.groupby(["model", "condition"], sort=True):
        if cond not in PLANTED_CONDITIONS:
            continue
        shown_col, opinions, ref_col = PLANTED_CONDITIONS[cond]
        rows = base.loc[g["report_id"]].reset_index()
        if "fake_rating" in g:
            rows["fake_rating"] = g["fake_rating"].to_numpy()
        shown = rows[shown_col] if shown_col else pd.Series([None] * len(rows))
        p = answer_probs(propensities[model], rows, shown, opinions)
        if "refused" in g:  # a prompt the server refused for its length: an empty answer, inside N
            p = p * ~g["refused"].to_numpy(bool)[:, None]
        for metric, target in (("herding", rows[ref_col]), ("accuracy", rows["report_id"].map(labels))):
            for s in _summaries(rows, _pick(p, target), sectors):
                out.append({"model": model, "condition": cond, "metric": metric, **s})
    return pd.DataFrame(out)


def analyst_cells(planted: pd.DataFrame, labels: pd.Series, sectors: Iterable[str]) -> pd.DataFrame:
    """The Analyst rows of Tables 6-7: the share of labelled reports whose planted rating is the label
    (deterministic: SD 0)."""
    lab = planted["report_id"].map(labels)
    hit = np.where(lab.isna(), np.nan, (lab == planted["analyst_rating"]).astype(float))
    return pd.DataFrame([{"model": "Analyst", "condition": "original", "metric": "accuracy", **s}
                         for s in _summaries(planted, hit, tuple(sectors))])


# ---------------------------------------------------------------- the planted label truth

def _returns(closes: np.ndarray) -> np.ndarray:
    """Simple returns of a close series (first day NaN)."""
    out = np.full(len(closes), np.nan)
    out[1:] = closes[1:] / closes[:-1] - 1.0
    return out


def _ols(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(alpha, beta) of y on x by least squares (numpy's solver, not the labels' prefix sums)."""
    design = np.column_stack([np.ones(len(x)), x])
    (alpha, beta), *_ = np.linalg.lstsq(design, y, rcond=None)
    return float(alpha), float(beta)


def planted_car(firm_r: np.ndarray, market_r: np.ndarray, day: int, window: int, method: str,
                estimation: int, gap: int) -> float:
    """One report's CAR over days +1..+window after the generator's day `day` (its calendar row), every
    return of the windows required (the generator writes every price): the paper's estimator fits
    alpha and beta on the event window itself (CAR = window x alpha); MacKinlay's on days
    -(gap+estimation)..-(gap+1), then sums R - alpha - beta R_m over the event window."""
    ev = slice(day + 1, day + window + 1)
    if method == "paper":
        alpha, _ = _ols(market_r[ev], firm_r[ev])
        return window * alpha
    est = slice(day - gap - estimation, day - gap)
    alpha, beta = _ols(market_r[est], firm_r[est])
    return float(np.sum(firm_r[ev] - alpha - beta * market_r[ev]))


def year_buckets(car: pd.Series, years: pd.Series, report_ids: pd.Series, quantiles: tuple[float, float]) -> pd.Series:
    """Bottom / middle / top of each report year's CARs (ties ordered by report id): the first
    ceil(q_lo n - 1/2) bearish, the last ceil((1 - q_hi) n - 1/2) bullish -- halves go to the middle,
    in exact arithmetic (the quantiles as their decimal fractions)."""
    lo, hi = (Fraction(str(q)) for q in quantiles)  # exact: 0.3 x 55 is a half, rounded down
    out = pd.Series(Rating.NEUTRAL.value, index=car.index, dtype=object)
    frame = pd.DataFrame({"car": car, "year": years, "rid": report_ids})
    for _, g in frame.groupby("year"):
        order = g.sort_values(["car", "rid"], kind="mergesort").index
        n = len(order)
        k_bear, k_bull = (math.ceil(share * n - Fraction(1, 2)) for share in (lo, 1 - hi))
        out[order[:k_bear]] = Rating.BEARISH.value
        out[order[n - k_bull:] if k_bull else order[:0]] = Rating.BULLISH.value
    return out


def planted_labels(reports: pd.DataFrame, prices: pd.DataFrame, market: pd.DataFrame, window: int,
                   quantiles: tuple[float, float], method: str = "paper", estimation: int = 250,
                   gap: int = 30) -> pd.DataFrame:
    """The return-based label of every generated report, from the generator's own files: the report's
    calendar row (the generator dates each report on a trading day and plants its drift over the
    days after it), that firm's and the market's closes, `planted_car`, and `year_buckets` per report
    year. Shares no code with stage 01, so a wrong window edge, pooled years or a label joined to the
    wrong report there disagree with this. Columns: report_id, car, label."""
    dates = pd.DatetimeIndex(pd.to_datetime(market["date"])).normalize()
    market_r = _returns(market["market_close"].to_numpy(float))
    wide = prices.assign(date=pd.to_datetime(prices["date"]).dt.normalize()).pivot(
        index="date", columns="ticker", values="adj_close").reindex(dates)
    rows = []
    for rec in reports.itertuples(index=False):
        day = int(dates.get_loc(pd.Timestamp(rec.date).normalize()))
        firm_r = _returns(wide[rec.ticker].to_numpy(float))
        rows.append({"report_id": str(rec.report_id), "year": pd.Timestamp(rec.date).year,
                     "car": planted_car(firm_r, market_r, day, window, method, estimation, gap)})
    out = pd.DataFrame(rows)
    out["label"] = year_buckets(out["car"], out["year"], out["report_id"], quantiles)
    return out.drop(columns="year")
