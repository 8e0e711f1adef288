"""A seeded synthetic market: fictional firms, prices, and analyst reports with a planted truth.

Why: the real Fin-Bias corpus (Hugging Face `Rain1998/Analyst-Report-Bias`) and its prices
cannot be fetched offline, yet every stage (labels, perturbations, inference, scoring)
needs realistic inputs. This module makes them, honestly labelled as synthetic:

* Firms: invented names and 4-letter tickers (checked against a blacklist of well-known
  real tickers), a sector drawn with the shares of Fin-Bias Table 2, a market beta in
  0.5-1.6 and an idiosyncratic volatility.
* A weekday calendar (params `start`..`end`), Student-t (fat-tailed) market and
  idiosyncratic returns.
* Per report a latent quality `q ~ N(0, 1)`. It plants a daily abnormal drift over the
  `drift_window` (60) trading days after day 0, sized so that corr(CAR_60, q) is about
  `target_corr` before overlapping windows of the same firm add noise, and it drives the
  numbers in the factual sentences (through a noisy signal).
* The analyst's latent view is `w_q * q + firm optimism + noise`; the rating cuts it at
  normal quantiles so ratings are about 72 % bullish / 25 % neutral / 3 % bearish. The
  opinion sentences (strongly subjective MPQA words) follow that biased view, not `q`.
* Text: the first sentence states the rating (mostly "Bullish/Neutral/Bearish" wording, a
  minority Buy/Hold/Sell broker vocabulary); factual sentences carry numbers and the
  abbreviations that trip sentence splitters (Inc., U.S., vs., approx., $1.2 bn, Q3, e.g.).

Everything is a pure function of (params, seed): the same seed writes byte-identical files.
"""
from __future__ import annotations

import functools
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import norm

from finlib.core.config import ConfigError
from finlib.core.params import SyntheticSection, raise_errors, schema_errors
from finlib.finbias.data import messy_corpus, provider_layouts
from finlib.finbias.data.synth_corpus import bullet_block, scale_first_sentence_planted, table_block
from finlib.finbias.vocab import SECTORS, Rating

# Opinion words, all `type=strongsubj` in the MPQA subjectivity lexicon
# (subjclueslen1-HLTEMNLP05.tff; checked in development and by tests/finbias/test_synth.py when
# ../shared/data is present). Hard-coded so generation never reads the licensed file.
POSITIVE_STRONGSUBJ: tuple[str, ...] = (
    "excellent", "outstanding", "superb", "impressive", "remarkable", "exceptional",
    "brilliant", "tremendous", "terrific", "stellar", "compelling", "admirable",
    "exemplary", "extraordinary", "spectacular", "phenomenal", "fantastic", "wonderful",
)
NEGATIVE_STRONGSUBJ: tuple[str, ...] = (
    "disappointing", "dismal", "terrible", "awful", "troubling", "worrisome", "alarming",
    "bleak", "disastrous", "horrible", "mediocre", "lackluster", "dreadful", "frustrating",
    "unacceptable", "grim", "gloomy", "abysmal",
)
STRONGSUBJ_WORDS: frozenset[str] = frozenset(POSITIVE_STRONGSUBJ + NEGATIVE_STRONGSUBJ)

# Well-known real tickers (S&P 500 four-letter symbols and other household names) that the
# ticker generator must never emit. Random 4-letter strings rarely collide; this makes sure.
REAL_TICKER_BLACKLIST: frozenset[str] = frozenset("""
AAPL ABBV ABNB ACGL ADBE ADSK AKAM ALGN ALLE AMAT AMCR AMGN AMTM AMZN ANET ANSS APTV AVGO AXON
BALL BIIB BKNG BLDR CARR CBOE CBRE CDNS CHRW CHTR CINF COST CPAY CPRT CRWD CSCO CSGP CTAS CTLT
CTRA CTSH CTVA DECK DELL DLTR DXCM EBAY ENPH EPAM EQIX ERIE EVRG EXPD EXPE FANG FAST FFIV FICO
FITB FOXA FSLR FTNT GDDY GEHC GILD GNRC GOOG GRMN HBAN HOLX HSIC HUBB IDXX INCY INTC INTU INVH
ISRG JBHT JKHY JNPR KEYS KLAC KVUE LDOS LRCX LULU MCHP MDLZ META MKTX MNST MPWR MRNA MSCI MSFT
MTCH NCLH NDAQ NDSN NFLX NTAP NTRS NVDA NWSA NXPI ODFL ORCL ORLY OTIS PANW PARA PAYC PAYX PCAR
PLTR PODD POOL PYPL QCOM QRVO REGN ROST RVTY SBAC SBUX SCHW SMCI SNPS SOLV SPGI STLD SWKS TECH
TMUS TRGP TRMB TROW TSCO TSLA TTWO UBER ULTA VICI VLTO VRSK VRSN VRTX VTRS WDAY WELL WYNN ZBRA
GOOGL BRKA BRKB NVDA BABA SHOP SNOW PINS SNAP LYFT ROKU ZOOM COIN HOOD RIVN LCID SOFI DOCU TEAM
SPOT SQSP CHWY ETSY PTON BYND PLUG NKLA GME AMC BBBY NIO XPEV TCEHY SONY TSMC ASML SHEL BHP
""".split())

# Invented name parts: combined they give names like "Corvanta Systems"; no real company list is used.
_NAME_HEADS = ("Cor", "Vel", "Bran", "Quin", "Tal", "Mer", "Ost", "Pyr", "Zan", "Lum", "Dra", "Hel",
               "Kor", "Nev", "Sal", "Thal", "Vor", "Yel", "Bel", "Cand", "Fen", "Gar", "Iv", "Jor")
_NAME_MIDS = ("a", "e", "i", "o", "u", "ar", "en", "is", "or", "yl")
_NAME_TAILS = ("vanta", "mora", "trex", "dine", "quist", "ventis", "lith", "nova", "craft", "wyn",
               "bridge", "stone", "field", "gate", "mark", "point", "dale", "crest", "holm", "ridge")
_SECTOR_SUFFIX: dict[str, tuple[str, ...]] = {
    "Communication Services": ("Media", "Networks", "Telecom", "Interactive"),
    "Consumer Defensive": ("Foods", "Brands", "Household", "Provisions"),
    "Energy": ("Energy", "Petroleum", "Resources", "Midstream"),
    "Financial Services": ("Financial", "Bancorp", "Capital", "Insurance"),
    "Healthcare": ("Therapeutics", "Medical", "Biosciences", "Health"),
    "Industrials": ("Industries", "Aerospace", "Machinery", "Logistics"),
    "Real Estate": ("Realty", "Properties", "REIT", "Land"),
    "Technology": ("Systems", "Software", "Semiconductor", "Digital"),
    "Utilities": ("Power", "Utilities", "Electric", "Water"),
}
# Sector-specific product words for the factual sentences (none is MPQA strongsubj).
_SECTOR_PRODUCTS: dict[str, tuple[str, ...]] = {
    "Communication Services": ("wireless subscriptions", "advertising revenue", "streaming subscribers"),
    "Consumer Defensive": ("packaged foods", "household products", "beverage volumes"),
    "Energy": ("upstream production", "refining throughput", "pipeline volumes"),
    "Financial Services": ("net interest income", "fee income", "loan balances"),
    "Healthcare": ("prescription volumes", "device sales", "clinical revenue"),
    "Industrials": ("order intake", "aftermarket services", "freight volumes"),
    "Real Estate": ("same-store rents", "occupied square feet", "lease renewals"),
    "Technology": ("hosted software subscriptions", "chip shipments", "software licences"),
    "Utilities": ("regulated rate base", "retail electricity sales", "grid investment"),
}

# First-sentence rating words. "standard" = the paper's Bullish/Neutral/Bearish wording,
# "broker" = Buy/Hold/Sell-style vocabulary. Display casing of words in finlib.finbias.vocab.RATING_SYNONYMS
# (the single source of the mapping); tests/finbias/test_synth.py checks every word against it.
_RATING_WORDS: dict[str, dict[Rating, tuple[str, ...]]] = {
    "standard": {Rating.BULLISH: ("Bullish",), Rating.NEUTRAL: ("Neutral",), Rating.BEARISH: ("Bearish",)},
    "broker": {
        Rating.BULLISH: ("Buy", "Outperform", "Overweight", "Accumulate"),
        Rating.NEUTRAL: ("Hold", "Market Perform", "Equal-Weight"),
        Rating.BEARISH: ("Sell", "Underperform", "Underweight", "Reduce"),
    },
}
_FIRST_SENTENCE: dict[str, tuple[str, ...]] = {
    "standard": (
        "We maintain our {R} rating on {C} ({T}).",
        "Our investment rating on {C} ({T}) is {R}.",
        "We reiterate a {R} view on {C} ({T}) shares after the latest quarterly update.",
        "{C} ({T}) remains {R} in our coverage following the Q{Q} results.",
        "We are initiating coverage of {C} ({T}) with a {R} rating.",
        "Rating: {R} on {C} ({T}) with a 12-month horizon.",
        "Our stance on {C} ({T}) stays {R} for the coming twelve months.",
    ),
    "broker": (
        "We reiterate our {R} rating on {C} ({T}).",
        "We rate {C} ({T}) shares at {R}.",
        "{C} ({T}): we maintain {R} following the Q{Q} report.",
        "Our recommendation on {C} ({T}) is {R}.",
    ),
}


class SynthConfigError(ConfigError):
    """The `data.synthetic` params section is invalid; the message names the key."""


class SynthParams(SyntheticSection):
    """Knobs of the generator: the params schema's `data.synthetic` model itself (keys, types, ranges and
    the rules between knobs declared once, in finlib.core.params), frozen; the default of every knob is
    the one params/default.yaml writes."""

    @classmethod
    def from_section(cls, section: Mapping[str, Any] | None) -> SynthParams:
        """The knobs of `section` over params/default.yaml's `data.synthetic` (a params file's section
        holds them all; library callers may pass a few), checked by the schema (types, ranges, the
        wordings and layouts of synth_corpus, the rules between knobs)."""
        section = {**default_knobs(), **(section or {})}
        raise_errors(schema_errors(section, SyntheticSection, ("data", "synthetic")), "data.synthetic", SynthConfigError)
        return cls.model_validate(section)


@functools.cache
def _default_knobs() -> tuple[tuple[str, Any], ...]:
    """Read once per process; a tuple, so the cache never hands out a dict a caller could change."""
    from finlib.core.config import load_params, repo_root

    return tuple(load_params(repo_root() / "params" / "default.yaml")["data"]["synthetic"].items())


def default_knobs() -> dict[str, Any]:
    """params/default.yaml's `data.synthetic`: the one place the generator's defaults are written."""
    return dict(_default_knobs())


@dataclass
class SyntheticMarket:
    """Generated tables. `truth` is for validation only: no stage may feed it to a model."""

    firms: pd.DataFrame     # ticker, company, sector, beta, idio_vol, optimism
    reports: pd.DataFrame   # report_id, ticker, company, sector, date, text, analyst_rating
    prices: pd.DataFrame    # date, ticker, adj_close (long, sorted by ticker, date)
    market: pd.DataFrame    # date, market_close
    truth: pd.DataFrame     # report_id, q, drift, beta, and the planted rating (PLANTED_COLUMNS)
    planted: pd.DataFrame = field(default_factory=pd.DataFrame)  # per report: what the rehearsal's simulated
    # models and its closed-form truth read (finlib.finbias.data.synth_planted.PLANTED_FIELDS); no stage reads it
    params: SynthParams = field(default_factory=lambda: SynthParams.from_section(None))


# ---------------------------------------------------------------- firms and calendar

def sector_shares() -> pd.Series:
    """Sector probabilities from the counts of Fin-Bias Table 2 (index = SECTORS order)."""
    from finlib.core.tables import paper_table

    t = paper_table("finbias_table2")
    t = t[t["sector"].isin(SECTORS)].set_index("sector")["num"].astype(float)
    return (t / t.sum()).reindex(list(SECTORS))


def trading_calendar(start: str, end: str) -> pd.DatetimeIndex:
    """Weekdays between start and end (no holidays: a synthetic exchange)."""
    return pd.bdate_range(start, end, name="date")


def _apportion(n: int, shares: np.ndarray, min_one: bool = True) -> np.ndarray:
    """Largest-remainder counts that sum to n (with `min_one`, every sector >= 1 when n >= len(shares))."""
    k = len(shares)
    base = np.ones(k, dtype=int) if (min_one and n >= k) else np.zeros(k, dtype=int)
    rest = n - base.sum()
    raw = shares * rest
    counts = base + np.floor(raw).astype(int)
    order = np.argsort(-(raw - np.floor(raw)), kind="stable")
    counts[order[: n - counts.sum()]] += 1
    return counts


def make_firms(n_firms: int, rng: np.random.Generator) -> pd.DataFrame:
    """Fictional firms with unique invented names and non-real 4-letter tickers."""
    shares = sector_shares().to_numpy()
    counts = _apportion(n_firms, shares)
    sectors = np.repeat(np.array(SECTORS, dtype=object), counts)
    sectors = sectors[rng.permutation(n_firms)]
    names: list[str] = []
    tickers: list[str] = []
    seen_names: set[str] = set()
    seen_tickers: set[str] = set(REAL_TICKER_BLACKLIST)
    letters = np.array(list("ABCDEFGHIJKLMNOPQRSTUVWXYZ"))
    for sector in sectors:
        while True:
            h, m, t, s = (rng.integers(len(x)) for x in (_NAME_HEADS, _NAME_MIDS, _NAME_TAILS, range(4)))
            stem = f"{_NAME_HEADS[h]}{_NAME_MIDS[m]}{_NAME_TAILS[t]}"
            name = f"{stem} {_SECTOR_SUFFIX[sector][s]}"
            if name not in seen_names:
                break
        seen_names.add(name)
        consonants = [c for c in stem.upper() if c not in "AEIOU"]
        ticker = "".join((consonants + list(stem.upper()))[:4])
        while ticker in seen_tickers:
            ticker = "".join(rng.choice(letters, 4))
        seen_tickers.add(ticker)
        names.append(name)
        tickers.append(ticker)
    return pd.DataFrame({
        "ticker": tickers,
        "company": names,
        "sector": sectors.astype(str),
        "beta": rng.uniform(0.5, 1.6, n_firms),
        "idio_vol": rng.uniform(0.012, 0.025, n_firms),
        "optimism": rng.normal(0.0, 1.0, n_firms),
        "price0": np.exp(rng.normal(math.log(50.0), 0.7, n_firms)),
    })


def _t_shocks(rng: np.random.Generator, shape: tuple[int, ...], df: float) -> np.ndarray:
    """Student-t draws scaled to unit variance (fat tails, comparable volatility)."""
    return rng.standard_t(df, size=shape) / math.sqrt(df / (df - 2.0))


# ---------------------------------------------------------------- reports (numbers)

def draw_reports(p: SynthParams, firms: pd.DataFrame, cal: pd.DatetimeIndex,
                 rng: np.random.Generator) -> pd.DataFrame:
    """Report skeletons: firm, day index, q, drift, analyst view and rating (no text yet)."""
    n = p.n_reports
    first = max(int(cal.searchsorted(pd.Timestamp(p.first_report))), p.pre_days)
    last = len(cal) - 1 - p.post_days
    if last < first:
        raise SynthConfigError(
            f"data.synthetic: calendar {p.start}..{p.end} ({len(cal)} trading days) leaves no room for "
            f"{p.pre_days} days before and {p.post_days} after a report starting {p.first_report}")
    # Stratified: report sectors match Table 2's shares as closely as n allows, in random order.
    counts = _apportion(n, sector_shares().to_numpy(), min_one=False)
    sector_idx = rng.permutation(np.repeat(np.arange(len(SECTORS)), counts))
    firm_idx = np.empty(n, dtype=int)
    firm_sector = firms["sector"].to_numpy()
    for k, sector in enumerate(SECTORS):
        members = np.flatnonzero(firm_sector == sector)
        sel = sector_idx == k
        if not sel.any():
            continue
        if len(members) == 0:  # tiny runs: a sector without firms borrows any firm
            members = np.arange(len(firms))
        firm_idx[sel] = members[rng.integers(len(members), size=int(sel.sum()))]
    day = rng.integers(first, last + 1, size=n)
    q = rng.normal(size=n)
    idio = firms["idio_vol"].to_numpy()[firm_idx]
    # corr(W*d + sum eps, q) = rho with d = k*q, Var(sum eps) = W*sigma^2  =>  k = sigma*rho/sqrt(W(1-rho^2))
    w, rho = p.drift_window, p.target_corr
    drift = q * idio * rho / math.sqrt(w * (1.0 - rho ** 2))
    noise_sd = math.sqrt(1.0 - p.analyst_q_weight ** 2 - p.optimism_sd ** 2)
    view = (p.analyst_q_weight * q + p.optimism_sd * firms["optimism"].to_numpy()[firm_idx]
            + noise_sd * rng.normal(size=n))  # ~ N(0, 1) marginally
    lo, hi = norm.ppf(p.bearish_share), norm.ppf(1.0 - p.bullish_share)
    rating = np.where(view < lo, Rating.BEARISH.value, np.where(view > hi, Rating.BULLISH.value,
                                                                  Rating.NEUTRAL.value))
    order = np.lexsort((firm_idx, day))  # chronological report ids
    return pd.DataFrame({
        "report_id": [f"SYN{i:05d}" for i in range(n)],
        "firm": firm_idx[order],
        "day": day[order],
        "q": q[order],
        "drift": drift[order],
        "view": view[order],
        "signal": (q + 0.6 * rng.normal(size=n))[order],  # what the factual sentences reveal
        "rating": rating[order],
        "n_words": rng.integers(p.words_min, p.words_max + 1, size=n)[order],
        "text_seed": rng.integers(0, 2 ** 63 - 1, size=n, dtype=np.int64)[order],
    })


def simulate_prices(p: SynthParams, firms: pd.DataFrame, skel: pd.DataFrame, cal: pd.DatetimeIndex,
                    rng: np.random.Generator) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Market and firm closes: r_i = beta_i r_m + eps_i + planted drift on days +1..+W."""
    n_days, n_firms = len(cal), len(firms)
    r_m = p.market_drift + p.market_vol * _t_shocks(rng, (n_days,), 4.0)
    eps = firms["idio_vol"].to_numpy()[None, :] * _t_shocks(rng, (n_days, n_firms), 5.0)
    rows = (skel["day"].to_numpy()[:, None] + np.arange(1, p.drift_window + 1)[None, :]).ravel()
    cols = np.repeat(skel["firm"].to_numpy(), p.drift_window)
    np.add.at(eps, (rows, cols), np.repeat(skel["drift"].to_numpy(), p.drift_window))
    r = np.clip(firms["beta"].to_numpy()[None, :] * r_m[:, None] + eps, -0.5, None)
    r[0] = 0.0
    r_m = np.clip(r_m, -0.5, None)
    r_m[0] = 0.0
    closes = firms["price0"].to_numpy()[None, :] * np.cumprod(1.0 + r, axis=0)
    market = pd.DataFrame({"date": cal.values.astype("datetime64[ns]"),
                           "market_close": 3000.0 * np.cumprod(1.0 + r_m)})
    order = np.argsort(firms["ticker"].to_numpy(), kind="stable")
    prices = pd.DataFrame({
        "date": np.tile(cal.values.astype("datetime64[ns]"), n_firms),
        "ticker": np.repeat(firms["ticker"].to_numpy()[order], n_days),
        "adj_close": closes[:, order].T.ravel(),
    })
    prices["ticker"] = prices["ticker"].astype(str)
    return prices, market


# ---------------------------------------------------------------- reports (text)

class _Draw:
    """A tiny per-report random source (stdlib Random: fast per call, stable across versions)."""

    def __init__(self, seed: int) -> None:
        self._r = random.Random(int(seed))

    def u(self) -> float:
        return self._r.random()

    def pick(self, seq):
        return seq[int(self._r.random() * len(seq))]

    def normal(self, mu: float = 0.0, sd: float = 1.0) -> float:
        return self._r.gauss(mu, sd)


def _money(x: float) -> str:
    """$1.2 bn / $640 mn, the way reports write amounts."""
    return f"${x:.1f} bn" if x >= 1 else f"${x * 1000:.0f} mn"


def _up_down(x: float, up: str = "rose", down: str = "declined") -> str:
    return up if x >= 0 else down


def factual_sentence(kind: int, s: float, ctx: dict, d: _Draw) -> str:
    """One factual sentence; its numbers move with the noisy quality signal `s`.

    No word here is MPQA strongsubj (checked by tests): these sentences must survive the
    opinion filter of stage 02 and carry the information about `q`.
    """
    C, T, yr, qn = ctx["company"], ctx["ticker"], ctx["year"], 1 + int(d.u() * 4)
    prod = d.pick(ctx["products"])
    if kind == 0:
        g = 4.0 + 6.0 * s + d.normal(0, 2)
        return (f"Revenue {_up_down(g, 'grew', 'declined')} {abs(g):.1f}% y/y to {_money(ctx['rev'] * (1 + g / 100))} "
                f"in Q{qn}, vs. the average analyst estimate of {_money(ctx['rev'] * (1.02 + 0.01 * d.normal()))}.")
    if kind == 1:
        m = ctx["margin"] + 2.0 * s + d.normal(0, 1)
        bp = int(abs(120 * s + d.normal(0, 40)))
        return (f"Operating margin was {m:.1f}% in Q{qn}, {_up_down(s, 'up', 'down')} approx. {bp} bp vs. "
                f"the prior-year quarter.")
    if kind == 2:
        eps = max(0.05, ctx["eps"] * (1 + 0.05 * d.normal()))
        surprise = 3.0 * s + d.normal(0, 1.5)
        return (f"Diluted EPS of ${eps * (1 + surprise / 100):.2f} compared with the average analyst estimate of ${eps:.2f}, "
                f"a difference of {surprise:+.1f}%.")
    if kind == 3:
        g = 3.0 + 4.0 * s + d.normal(0, 1.5)
        lo = ctx["rev"] * 4 * (1 + g / 100)
        return (f"Management guided FY{yr + 1} revenue to {_money(lo)}-{lo * 1.04:.1f} bn, equal to "
                f"growth of approx. {g:.1f}% at the midpoint.")
    if kind == 4:
        lev = max(0.1, 2.2 - 0.5 * s + d.normal(0, 0.4))
        return (f"Net debt stood at {_money(ctx['rev'] * lev * 0.8)} at quarter end, or {lev:.1f}x trailing "
                f"EBITDA, vs. {lev + d.normal(0, 0.3):.1f}x a year earlier.")
    if kind == 5:
        pe = max(4.0, 17.0 + 2.0 * d.normal())
        return (f"The shares trade at {pe:.1f}x forward earnings vs. a peer median of "
                f"{pe * (1 - 0.05 * s + 0.05 * d.normal()):.1f}x.")
    if kind == 6:
        share = 40 + int(30 * d.u())
        g = 2.0 + 5.0 * s + d.normal(0, 2)
        return (f"U.S. sales accounted for approx. {share}% of the total, and international sales "
                f"{_up_down(g, 'increased', 'decreased')} {abs(g):.1f}% in the quarter.")
    if kind == 7:
        fcf = ctx["rev"] * (0.08 + 0.03 * s + 0.01 * d.normal())
        return (f"{C} Inc. generated free cash flow of {_money(abs(fcf) * 3)} in the first nine months of "
                f"{yr}, e.g. after capital expenditure of {_money(ctx['rev'] * 0.12)}.")
    if kind == 8:
        g = 3.0 + 5.0 * s + d.normal(0, 2)
        return (f"In Q{qn}, {prod} {_up_down(g, 'increased', 'decreased')} {abs(g):.1f}% y/y, "
                f"while pricing {_up_down(g + d.normal(0, 2), 'added', 'subtracted')} approx. "
                f"{abs(d.normal(1.5, 1)):.1f} points.")
    if kind == 9:
        bb = abs(ctx["rev"] * 0.05 * (1 + s + d.normal(0, 0.5)))
        return (f"The board authorised a share repurchase of {_money(bb)} and kept the quarterly dividend at "
                f"${ctx['eps'] * 0.3:.2f} per share.")
    if kind == 10:
        h = int(ctx["headcount"] * (1 + 0.02 * s))
        return (f"{T} ended Q{qn} with approx. {h:,} employees, vs. {ctx['headcount']:,} at the end of "
                f"FY{yr - 1}.")
    if kind == 11:
        cons = ctx["eps"] * 4
        rev_pct = 2.0 * s + d.normal(0, 1)
        return (f"Over the past 90 days, the average analyst FY{yr + 1} EPS estimate moved "
                f"{_up_down(rev_pct, 'up', 'down')} {abs(rev_pct):.1f}% to ${cons * (1 + rev_pct / 100):.2f}.")
    if kind == 12:
        bl = ctx["rev"] * (1.5 + 0.3 * s + 0.1 * d.normal())
        return f"Backlog reached {_money(bl)} at the end of Q{qn}, equal to approx. {bl / ctx['rev']:.1f} quarters of revenue."
    gm = ctx["margin"] + 18 + 2.5 * s + d.normal(0, 1)
    return (f"Gross margin came in at {gm:.1f}% vs. {gm - 1.5 * s + d.normal(0, 0.5):.1f}% in the same quarter "
            f"of {yr - 1}.")


N_FACTUAL_KINDS = 14


def opinion_sentence(positive: bool, d: _Draw, ctx: dict) -> str:
    """One opinion sentence built around a strongly subjective word; tone = analyst's view."""
    w = d.pick(POSITIVE_STRONGSUBJ if positive else NEGATIVE_STRONGSUBJ)
    C = ctx["company"]
    templates = (
        "In our view, the execution of the management team has been {w}.",
        "We regard the latest quarter at {C} as {w}.",
        "The outlook for {C} looks {w} to us.",
        "We find the capital allocation record {w} relative to the sector.",
        "Investor sentiment toward the stock strikes us as {w} at this point.",
        "We consider the product pipeline {w} for the next two years.",
        "Frankly, the momentum in the core business is {w}.",
    )
    return d.pick(templates).format(w=w, C=C)


def first_sentence(rating: Rating, d: _Draw, ctx: dict, standard_share: float) -> str:
    """The rating sentence: the only place the analyst's rating is stated explicitly."""
    return first_sentence_planted(rating, d, ctx, standard_share)[0]


def first_sentence_planted(rating: Rating, d: _Draw, ctx: dict, standard_share: float) -> tuple[str, str]:
    """`first_sentence` and the rating word it wrote (the generator's record, see `PlantedRating`)."""
    style = "standard" if d.u() < standard_share else "broker"
    word = d.pick(_RATING_WORDS[style][rating])
    sentence = d.pick(_FIRST_SENTENCE[style]).format(R=word, C=ctx["company"], T=ctx["ticker"], Q=1 + int(d.u() * 4))
    return sentence, word


@dataclass(frozen=True)
class PlantedRating:
    """What the generator wrote for one report's analyst rating, recorded as it wrote it.

    Why: a check of the pipeline (the rehearsal's simulated servers, stage 02's tests) must know the
    rating a report states without reading it back with the project's own extractor, which it checks.
    Stored per report in the `truth` table (columns `PLANTED_COLUMNS`):

    - ``planted_rating``: the analyst rating the report was written with (bullish / neutral / bearish);
    - ``rating_sentence``: the exact text holding it, a prefix of the report (one line, or two when the
      generator wraps it after a comma) - the first sentence under the structural sentence rule;
    - ``rating_term``: the current-rating term as written in that text ("BUY", "Market Perform");
    - ``previous_rating_term``: an upgrade's or downgrade's previous term as written, else None;
    - ``report_layout``: `prose`, `structured`, `messy:<skeleton>` (finlib.finbias.data.messy_corpus) or
      `provider:<layout>` (finlib.finbias.data.provider_layouts: then ``rating_sentence`` is the front matter up
      to the statement and its separator, and the body record's `statement` holds the statement's record).
    """

    planted_rating: str
    rating_sentence: str
    rating_term: str
    previous_rating_term: str | None
    report_layout: str


PLANTED_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(PlantedRating))


_HEADINGS = ("Recent results.", "Outlook and guidance.", "Balance sheet and capital returns.",
             "Valuation.", "Operations.", "Estimates.")


def render_report(row: Any, firm: Any, date: pd.Timestamp, p: SynthParams) -> str:
    """Full report text of about `row.n_words` words, paragraphs separated by blank lines."""
    return render_report_planted(row, firm, date, p)[0]


def render_report_planted(row: Any, firm: Any, date: pd.Timestamp, p: SynthParams
                          ) -> tuple[str, PlantedRating, dict[str, list[str]]]:
    """`render_report`, the generator's record of the rating it planted (`PlantedRating`) and of its body:
    `pieces` (headings and sentences after the rating sentence, in order), `factual` and `opinions`
    (what the rehearsal's simulated models read, finlib.finbias.data.synth_planted)."""
    d = _Draw(row.text_seed)
    ctx = {
        "company": firm.company, "ticker": firm.ticker, "year": date.year,
        "products": _SECTOR_PRODUCTS[firm.sector],
        "rev": 0.4 + (sum(map(ord, firm.ticker)) % 40) / 10.0,  # quarterly revenue, $ bn (firm constant)
        "margin": 12.0 + (ord(firm.ticker[0]) % 9), "eps": 0.6 + (ord(firm.ticker[1]) % 13) / 5.0,
        "headcount": 2000 + 750 * (ord(firm.ticker[2]) % 23),
    }
    # Tone follows the analyst's view relative to the middle of the neutral band, so a
    # Bullish analyst writes mostly glowing sentences whatever q is (the optimism bias).
    mid = 0.5 * (norm.ppf(p.bearish_share) + norm.ppf(1.0 - p.bullish_share))
    p_pos = 1.0 / (1.0 + math.exp(-2.5 * (row.view - mid)))
    if p.rating_wording == "scales":
        first, term, previous = scale_first_sentence_planted(Rating(row.rating), d, ctx)
    else:
        (first, term), previous = first_sentence_planted(Rating(row.rating), d, ctx, p.standard_wording_share), None
    sentences = [first]
    factual: list[str] = []   # the factual sentences (numbers: nearly unique to the report)
    opinions: list[str] = []
    blocks: dict[int, str] = {}  # paragraph index -> a list or table printed after it (structured layout)
    words = len(sentences[0].split())
    paragraphs: list[list[str]] = [sentences]
    para: list[str] = []
    kinds = list(range(N_FACTUAL_KINDS))
    k = 0
    while words < row.n_words:
        if k % N_FACTUAL_KINDS == 0:  # a fresh shuffle of the factual topics per pass
            kinds.sort(key=lambda _: d.u())
        if d.u() < p.opinion_share:
            s = opinion_sentence(d.u() < p_pos, d, ctx)
            opinions.append(s)
        else:
            s = factual_sentence(kinds[k % N_FACTUAL_KINDS], row.signal, ctx, d)
            factual.append(s)
            k += 1
        para.append(s)
        words += len(s.split())
        if len(para) >= 4 + int(d.u() * 3):
            paragraphs.append(para)
            para = []
            if p.layout == "structured" and d.u() < p.block_share:
                block = (table_block(row.signal, ctx, d) if d.u() < 0.5 else bullet_block(
                    [factual_sentence(int(d.u() * N_FACTUAL_KINDS), row.signal, ctx, d) for _ in range(3 + int(d.u() * 3))], d))
                blocks[len(paragraphs) - 1] = block
                words += len(block.split())
    if para:
        paragraphs.append(para)
    out = [" ".join(paragraphs[0])]
    pieces: list[str] = []  # what follows the rating sentence, in order: headings and sentences
    for i, para in enumerate(paragraphs[1:]):
        out.append(f"{_HEADINGS[i % len(_HEADINGS)]} " + " ".join(para) if i < len(_HEADINGS) else " ".join(para))
        pieces += ([_HEADINGS[i % len(_HEADINGS)]] if i < len(_HEADINGS) else []) + para
        if i + 1 in blocks:
            out.append(blocks[i + 1])
    body = {"pieces": pieces, "factual": factual, "opinions": opinions}
    if p.messy_share > 0 and d.u() < p.messy_share:  # drawn last: the other reports' text does not change
        text, planted, extra = messy_report(Rating(row.rating), [s for para in paragraphs[1:] for s in para], ctx, d)
        return text, planted, {**body, "pieces": [s for para in paragraphs[1:] for s in para], **extra}
    return "\n\n".join(out), PlantedRating(str(Rating(row.rating).value), first, term, previous, p.layout), body


def messy_report(rating: Rating, body: list[str], ctx: dict, d: _Draw) -> tuple[str, PlantedRating, dict]:
    """The report's body sentences laid out as broker text (finlib.finbias.data.messy_corpus): half under a
    broker rating sentence by a skeleton, half as a research provider's front page
    (finlib.finbias.data.provider_layouts); the record of what was planted, and the provider layout's
    statement record (`statement`, None for a skeleton)."""
    pick = lambda n: int(d.u() * n)  # noqa: E731 - an index below n from the report's own draws
    if pick(2) == 0:
        text, plant = provider_layouts.provider_report(rating, body, pick, ctx["company"], ctx["ticker"])
        planted = PlantedRating(rating.value, text[: plant.keep_from], plant.term, plant.previous, plant.layout)
        return text, planted, {"statement": plant}
    fs = messy_corpus.draw_first_sentence(rating, pick, ctx["company"], ctx["ticker"])
    skeleton = messy_corpus.SKELETONS[pick(len(messy_corpus.SKELETONS))]
    text, line = messy_corpus.lay_out(skeleton, fs.text, body, pick=pick)
    return text, PlantedRating(rating.value, line, fs.term, fs.previous, f"messy:{skeleton.name}"), {}


# ---------------------------------------------------------------- entry points

def generate_market(cfg_section: Mapping[str, Any] | None, seed: int) -> SyntheticMarket:
    """Generate the whole synthetic market for params `data.synthetic` and a seed."""
    p = SynthParams.from_section(cfg_section)
    root = np.random.SeedSequence(int(seed))
    s_firms, s_reports, s_prices = (np.random.default_rng(s) for s in root.spawn(3))
    cal = trading_calendar(p.start, p.end)
    firms = make_firms(p.n_firms, s_firms)
    skel = draw_reports(p, firms, cal, s_reports)
    prices, market = simulate_prices(p, firms, skel, cal, s_prices)
    dates = cal[skel["day"].to_numpy()]
    firm_rows = firms.iloc[skel["firm"].to_numpy()].reset_index(drop=True)
    rendered = [render_report_planted(row, firm, date, p)
                for row, firm, date in zip(skel.itertuples(index=False), firm_rows.itertuples(index=False), dates)]
    texts = [text for text, _, _ in rendered]
    reports = pd.DataFrame({
        "report_id": skel["report_id"].astype(str),
        "ticker": firm_rows["ticker"].astype(str),
        "company": firm_rows["company"].astype(str),
        "sector": firm_rows["sector"].astype(str),
        "date": pd.DatetimeIndex(dates).astype("datetime64[ns]"),
        "text": texts,
        "analyst_rating": skel["rating"].astype(str),
    })
    truth = pd.DataFrame({
        "report_id": reports["report_id"], "q": skel["q"].to_numpy(), "drift": skel["drift"].to_numpy(),
        "beta": firm_rows["beta"].to_numpy(),
        **{c: [getattr(planted, c) for _, planted, _ in rendered] for c in PLANTED_COLUMNS},
    })
    from finlib.finbias.data.synth_planted import planted_record

    mid = 0.5 * (norm.ppf(p.bearish_share) + norm.ppf(1.0 - p.bullish_share))
    planted = pd.DataFrame([planted_record(text, rec, body) for text, rec, body in rendered]).assign(
        report_id=reports["report_id"], sector=reports["sector"], signal=skel["signal"].to_numpy(),
        tone=skel["view"].to_numpy() - mid)
    return SyntheticMarket(firms=firms.drop(columns=["price0"]), reports=reports, prices=prices,
                           market=market, truth=truth, planted=planted, params=p)


RAW_FILES = ("firms", "reports", "prices", "market", "truth", "planted")


def write_market(market: SyntheticMarket, out_dir: Path) -> dict[str, Path]:
    """Write the market as parquet files under `out_dir` (e.g. data/raw/synthetic/<run>/).

    Plain pyarrow writes without timestamps, so the same seed gives byte-identical files.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name in RAW_FILES:
        df: pd.DataFrame = getattr(market, name)
        path = out_dir / f"{name}.parquet"
        df.to_parquet(path, index=False)
        paths[name] = path
    return paths
