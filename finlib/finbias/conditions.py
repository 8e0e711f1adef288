"""The condition table: every way a report is shown to a model, declared once as a `ConditionRecord`.

A record holds what the rest of the code needs to know about one condition: its name (the
`condition` column of every artifact), the transform that writes its text from a report (stage 02),
its display label, its place in the tables and figures, its colour, marker and hatch, which rating
its herding score is measured against (Eq. 1: the analyst's or the one the text shows), and how many
variants a report gets (fake_rating: one or two). Stage 02, the plan, stage 04's tables and figures,
stage 06's figures, the herding card and the lm-eval aggregations read this table instead of
spelling condition names, so a condition is added by declaring one record (`declare_condition`).

The paper's four conditions (Fin-Bias Sections 3 and 5.1) are declared here; the rating sweep beyond
the paper (`finlib.finbias.vocab.SWEEP_CONDITIONS`) is written by its own step of stage 02.

The transforms import the perturbation modules when they run, not at import: the figures, the plan
and the harness read the table without loading the rating reader or the subjectivity filter.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from finlib.finbias.vocab import RATINGS, Condition, Rating

SKIP_EMPTY_NO_RATING = "report has no sentence besides the rating sentence"
SKIP_ALL_SUBJECTIVE = "every sentence after the rating sentence contains an MPQA strongsubj word"
FAKE_MODES = ("one", "both")
REFERENCES = ("analyst", "shown")


@dataclass(frozen=True)
class ReportContext:
    """One rated report as a transform sees it: the text, the rating it states and where, and the run's
    choices (seed, fake-rating mode, how ratings are read)."""

    report_id: str
    text: str  # the report as `original` shows it
    rating: Rating  # the analyst rating its statement states
    statement: Any  # finlib.finbias.perturb.statement.RatingStatement
    rest: str  # the report without its rating statement (the no_rating text)
    seed: int
    fake_mode: str  # perturb.fake_rating: "one" | "both"
    reading: Any  # finlib.finbias.perturb.statement.RatingReading


@dataclass(frozen=True)
class Variant:
    """One row a transform writes for a report: its text (None when skipped), the rating the text shows
    (None: none other than the analyst's), an item-id suffix (several variants of one report), the skip
    reason, and the kind of rewrite (counted in perturb_report.json; None: not a rewrite)."""

    text: str | None
    shown: Rating | None = None
    suffix: str = ""
    skip: str | None = None
    kind: str | None = None


ReportTransform = Callable[[ReportContext], list[Variant]]
# a streamed transform reads a chunk of reports at once (the tagger's stream): per report, its context
# (None when the report has no readable rating) and the reason its rows were skipped; it returns the
# variants of each report and is handed the stage's tools (`StreamTools`)
StreamTransform = Callable[[list[tuple[str, "ReportContext | None", "str | None"]], Any], list[list[Variant]]]


@dataclass(frozen=True)
class ConditionRecord:
    """One condition, declared once (module docstring)."""

    name: str  # the `condition` value in every artifact and table
    label: str  # how legends, the card and the by-condition table name it
    order: float  # place in the tables and figures (ascending)
    color: str
    marker: str
    hatch: str
    reference: Literal["analyst", "shown"]  # herding (Eq. 1) against the analyst's rating or the one shown
    transform: ReportTransform | StreamTransform
    streamed: bool = False  # True: `transform` is a StreamTransform, its rows follow the chunk's others
    variants: Callable[[str], int] = lambda fake_mode: 1  # rows per rated report, given perturb.fake_rating
    paper: bool = False  # one of the paper's four (the lm-eval aggregations and Tables 4-7 read them)
    card_label: str | None = None  # shown on the herding card under this label (None: not on the card)

    def __post_init__(self) -> None:
        if self.reference not in REFERENCES:
            raise ValueError(f"condition {self.name!r}: reference must be one of {REFERENCES}, got {self.reference!r}")
        if not self.name or not self.name.replace("_", "").isalnum() or self.name != self.name.lower():
            raise ValueError(
                f"condition name {self.name!r}: lowercase letters, digits and '_' only (an artifact value)"
            )


# ---- the paper's transforms -------------------------------------------------------------------


def original_text(ctx: ReportContext) -> list[Variant]:
    """The cleaned report, unchanged."""
    return [Variant(ctx.text)]


def without_rating(ctx: ReportContext) -> list[Variant]:
    """The report without its rating statement; skipped when nothing else is left."""
    return [Variant(ctx.rest, skip=None if ctx.rest.strip() else SKIP_EMPTY_NO_RATING)]


def fake_ratings_for(report_id: str, rating: Rating, seed: int, mode: str) -> list[Rating]:
    """The fake rating(s) for one report: a seeded draw of one of the two others, or both.

    The generator is seeded by (run seed, CRC32 of the report id), so a report's fake does
    not depend on which other reports are in the run or on their order. ``mode`` ("one" or
    "both", FAKE_MODES) is validated once, by ``perturb_params``.
    """
    others = [r for r in RATINGS if r is not Rating(rating)]
    if mode == "both":
        return others
    rng = np.random.default_rng([int(seed), zlib.crc32(str(report_id).encode("utf-8"))])
    return [others[int(rng.integers(len(others)))]]


def rewrite_report_rating(text: str, new: Rating, reading: Any = None) -> tuple[str, str]:
    """The report with its rating statement rewritten to state `new`, and the kind of rewrite: every byte
    outside the statement unchanged (`finlib.finbias.perturb.statement.rewrite_statement`). ``reading``:
    a `RatingReading` (None: the default one)."""
    from finlib.finbias.perturb.statement import DEFAULT_READING, find_rating_statement, rewrite_statement

    reading = DEFAULT_READING if reading is None else reading
    return rewrite_statement(text, find_rating_statement(text, reading), new, reading)


def with_fake_rating(ctx: ReportContext) -> list[Variant]:
    """The rating statement rewritten to state a fake rating (one, or both others: item suffix ":<fake>")."""
    out = []
    for fake in fake_ratings_for(ctx.report_id, ctx.rating, ctx.seed, ctx.fake_mode):
        faked, kind = rewrite_report_rating(ctx.text, fake, reading=ctx.reading)
        out.append(Variant(faked, fake, f":{fake.value}" if ctx.fake_mode == "both" else "", kind=kind))
    return out


def without_opinions(pending: list[tuple[str, ReportContext | None, str | None]], tools: Any) -> list[list[Variant]]:
    """The no_rating text minus every sentence with an MPQA strongsubj word, for a chunk of reports filtered
    in one stream (the tagger sees long batches); every report's removals, rated or not, go to the tally.
    ``tools``: `StreamTools` (the run's subjectivity filter and trigger tally)."""
    todo = [ctx.rest for _, ctx, _ in pending if ctx is not None and ctx.rest.strip()]
    results = iter(tools.filt.run(todo) if todo else [])
    out: list[list[Variant]] = []
    for rid, ctx, skipped in pending:
        res = next(results) if ctx is not None and ctx.rest.strip() else None
        reason = skipped
        variants: list[Variant] = []
        if ctx is not None:
            filtered = None if res is None else res[0]
            if not ctx.rest.strip() or filtered is None:
                variants = [Variant(None, skip=SKIP_EMPTY_NO_RATING)]
            else:
                variants = [Variant(filtered, skip=None if filtered.strip() else SKIP_ALL_SUBJECTIVE)]
            reason = variants[0].skip
        tools.tally.add(rid, None if res is None else res[1], reason)
        out.append(variants)
    return out


@dataclass
class StreamTools:
    """What a streamed transform is handed: the run's subjectivity filter and its trigger tally."""

    filt: Any  # finlib.finbias.perturb.subjectivity.SubjectivityFilter
    tally: Any  # finlib.finbias.perturb.subjectivity.TriggerTally


# ---- the table ---------------------------------------------------------------------------------
# conditions: navy, orange, sky blue, dark red -- apart by CIELAB Delta E >= 40 for normal vision and as
# protanopes, deuteranopes and tritanopes see them (Machado et al. 2009; tests/finbias/colour_vision.py);
# every condition also has its own marker and hatch, so no reading depends on telling two hues apart.
# Declaration order is the order of a report's rows in the conditions artifact; `order` places them in
# tables and figures (the paper's: original, no_rating, no_opinion, fake_rating).
PAPER_RECORDS: tuple[ConditionRecord, ...] = (
    ConditionRecord(
        Condition.ORIGINAL.value,
        "with rating",
        0,
        "#14325c",
        "o",
        "",
        "analyst",
        original_text,
        paper=True,
        card_label="with rating",
    ),
    ConditionRecord(
        Condition.NO_RATING.value,
        "without rating",
        1,
        "#e69f00",
        "s",
        "////",
        "analyst",
        without_rating,
        paper=True,
        card_label="without rating",
    ),
    ConditionRecord(
        Condition.FAKE_RATING.value,
        "fake rating shown",
        3,
        "#b2182b",
        "D",
        "xxxx",
        "shown",
        with_fake_rating,
        variants=lambda fake_mode: 2 if fake_mode == "both" else 1,
        paper=True,
        card_label="fake rating shown",
    ),
    ConditionRecord(
        Condition.NO_OPINION.value,
        "without opinions",
        2,
        "#56b4e9",
        "^",
        "....",
        "analyst",
        without_opinions,
        streamed=True,
        paper=True,
    ),
)

_TABLE: dict[str, ConditionRecord] = {r.name: r for r in PAPER_RECORDS}


def declared() -> tuple[ConditionRecord, ...]:
    """Every declared condition, in declaration order (the order of a report's rows in stage 02)."""
    return tuple(_TABLE.values())


def in_table_order(paper_only: bool = False) -> tuple[ConditionRecord, ...]:
    """The declared conditions in their place in the tables and figures (`order`, then declaration)."""
    recs = [r for r in _TABLE.values() if r.paper or not paper_only]
    return tuple(sorted(recs, key=lambda r: r.order))


def names(paper_only: bool = False) -> tuple[str, ...]:
    """The condition names in table and figure order."""
    return tuple(r.name for r in in_table_order(paper_only))


def record(name: str) -> ConditionRecord:
    """The record of a declared condition; an undeclared name is an error naming the declared ones."""
    try:
        return _TABLE[str(name)]
    except KeyError:
        raise KeyError(f"condition {name!r} is not declared; declared: {sorted(_TABLE)}") from None


def color(name: str) -> str:
    return record(name).color


def marker(name: str) -> str:
    return record(name).marker


def hatch(name: str) -> str:
    return record(name).hatch


def label(name: str) -> str:
    return record(name).label


def rows_per_report(name: str, fake_mode: str) -> int:
    """How many rows a rated report gets in condition `name` under `perturb.fake_rating` = `fake_mode`."""
    return int(record(name).variants(fake_mode))


def card_labels() -> dict[str, str]:
    """Condition -> label for the conditions the herding card shows, in declaration order."""
    return {r.name: r.card_label for r in _TABLE.values() if r.card_label is not None}


class CardLabels(Mapping[str, str]):
    """`card_labels` read at each access: the herding card shows what the table holds when it is drawn."""

    def __getitem__(self, name: str) -> str:
        return card_labels()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(card_labels())

    def __len__(self) -> int:
        return len(card_labels())


def declare_condition(rec: ConditionRecord) -> None:
    """Add a condition to the table; a name already declared is an error (a record is declared once)."""
    if rec.name in _TABLE:
        raise ValueError(f"condition {rec.name!r} is already declared")
    _TABLE[rec.name] = rec


def withdraw_condition(name: str) -> None:
    """Remove a declared condition that is not one of the paper's four."""
    if record(name).paper:
        raise ValueError(f"condition {name!r} is one of the paper's four and stays declared")
    del _TABLE[name]


@contextmanager
def condition_declared(rec: ConditionRecord) -> Iterator[ConditionRecord]:
    """`rec` declared for the duration of a block (a study's own condition, a test's toy condition)."""
    declare_condition(rec)
    try:
        yield rec
    finally:
        withdraw_condition(rec.name)


def reference_is_shown(name: str, sweep: Sequence[str] = ()) -> bool:
    """Whether herding in condition `name` is measured against the rating the text shows (fake rating, the
    sweep's names in `sweep`) rather than the analyst's."""
    return name in sweep or (name in _TABLE and _TABLE[name].reference == "shown")
