"""Stage 02: the four report conditions of Fin-Bias (Sections 3 and 5.1, Appendix A.3).

- original:    the cleaned report.
- no_rating:   the rating statement removed (the first sentence, where the authors' analysts state the
               rating; or where the front matter states it: `finlib.finbias.perturb.statement`); every
               other byte unchanged.
- fake_rating: the rating word(s) of the rating statement swapped for a different rating of the
               same vocabulary family (Buy -> Sell, Outperform -> Underperform, Bullish ->
               Bearish), articles fixed ("a Buy" -> "an Underperform"), the rest byte-for-byte.
- no_opinion:  the no_rating text minus every sentence that contains an MPQA strongsubj word
               (`finlib.finbias.perturb.subjectivity`; the lexicon's POS honoured by default, `perturb.mpqa_pos`).

Each condition is a record of the condition table (`finlib.finbias.conditions`: its transform, its place,
its herding reference); the stage writes every declared record's rows, a declared study condition too.

Rating extraction and the fake-rating rewrite live in `finlib.finbias.perturb.ratings` (stage 00 and the
rating sweep use them too); callers import them from there.

Reports set aside
-----------------
One report never stops the stage. A report whose fake rating cannot be written, or whose conditions fail a
validation check (`validate_conditions`, run by the stage on every report), is *set aside*: every row of it
becomes skipped with the reason ("set aside: <check>"), it is listed in the `perturb_set_aside` artifact
(report_id, step, reason) and counted in perturb_report.json -> `set_aside`. The stage fails only when the
set-aside share of the reports passes `perturb.max_set_aside_share` (default 1 %): then something is wrong
with the instruments, not with one report (the artifacts are written first, so the list can be read).

Reports without a readable rating
---------------------------------
They are counted (perturb_report.json -> `rating_statements`, each with its reason in the
`rating_statements` artifact) and get a *skipped* row for every condition with the reason, including
original: herding is measured against the analyst rating, and keeping them out of all conditions keeps
every comparison on the same set of reports. The stage stops when their share passes
`perturb.max_unread_rating_share` (`check_unread_gate`).
"""
from __future__ import annotations

import html
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from finlib.core.artifacts import TEXT_ROW_GROUP, read_frame, require_columns, write_frame, write_json
from finlib.core.config import RunConfig
from finlib.core.tables import synthetic_title
from finlib.finbias import conditions as condition_table
from finlib.finbias.conditions import (
    ReportContext,
    StreamTools,
    Variant,
    reference_is_shown,
)
from finlib.finbias.perturb import subjectivity
from finlib.finbias.perturb.lexicon import (
    MPQA_MD5,
    POS_POLICIES,
    SHIPPED_LEXICON,
    SHIPPED_SOURCE,
    Lexicon,
    LexiconUnavailable,
    load_lexicon,
    missing_message,
    word_counts,
)
from finlib.finbias.perturb.postag import PosTagger
from finlib.finbias.perturb.provider_scales import provider_scales
from finlib.finbias.perturb.ratings import (
    REWRITE_KINDS,
    find_rating_mentions,
)
from finlib.finbias.perturb.statement import (
    DEFAULT_READING,
    RULES,
    UNREAD,
    RatingReading,
    RatingStatement,
    find_rating_statement,
    remembered_statements,
    remove_statement,
    rewrite_statement,
)
from finlib.finbias.perturb.subjectivity import SubjectivityFilter
from finlib.finbias.sentences import (
    first_sentence_span,
    iter_sentence_spans,
    join_lines,
    sentence_spans,
    split_sentences,
)
from finlib.finbias.vocab import (
    SWEEP_CONDITIONS,
    Condition,
    Rating,
)

SWEEP_VALUES = tuple(c.value for c in SWEEP_CONDITIONS.values())


def remove_rating_sentence(text: str) -> str:
    """The report without its first sentence: the text from the second sentence on, unchanged.

    The whitespace between the first and second sentence goes with the first sentence.
    """
    spans = list(islice(iter_sentence_spans(text), 2))
    if not spans:
        raise ValueError("empty report: there is no first sentence to remove")
    return text[spans[1][0]:] if len(spans) > 1 else ""


# ---- the stage: conditions artifact -----------------------------------------------------------

CONDITION_COLUMNS = ("item_id", "report_id", "condition", "text", "analyst_rating", "fake_rating",
                     "reference_rating", "status", "skip_reason")
SKIP_NO_RATING = ("first sentence states no analyst rating: report left out of every condition, "
                  "so that all conditions compare the same reports")
SET_ASIDE = "set aside: "   # + the reason: a report whose conditions could not be written or failed a check
SET_ASIDE_COLUMNS = ("report_id", "step", "reason")
DEFAULT_MAX_SET_ASIDE_SHARE = 0.01
SECTION = "perturb"
# what notebook 02 calls besides `run` and `summary`
NOTEBOOK_API = ("example_note", "example_page", "failures_not_set_aside")
# the tables of `result.tables` notebook 02 shows by name
TABLES = ("conditions_summary", "fake_examples", "lexicon_removed", "mpqa_policy_differences", "set_aside",
          "triggers", "triggers_pos_blind", "validation_checks")
REPORT_KEYS = ("fake_rating_rewrites_by_kind",)  # the keys of `result.report` notebook 02 reads
TAG_CHUNK = 256  # reports per tagging stream (spaCy batches sentences across the reports of a chunk)


def _row(report_id: str, condition: Condition | str, text: str | None, analyst: Rating | None,
         fake: Rating | None = None, skip: str | None = None, item_suffix: str = "") -> dict:
    # the record says whether herding reads the rating shown (fake_rating, the sweep: the `fake` argument)
    name = str(condition)
    shown = reference_is_shown(name, SWEEP_VALUES)
    reference = fake if shown else analyst
    return {
        "item_id": f"{report_id}:{name}{item_suffix}", "report_id": report_id,
        "condition": name, "text": None if skip else text,
        "analyst_rating": None if analyst is None else analyst.value,
        "fake_rating": None if fake is None else fake.value,
        "reference_rating": None if reference is None else reference.value,
        "status": "skipped" if skip else "ok", "skip_reason": skip,
    }


def reading_from_params(params: dict) -> RatingReading:
    """How the run reads ratings: `perturb.rating_front_matter_units` and `perturb.provider_scales`."""
    return RatingReading(int(params["rating_front_matter_units"]), provider_scales(params["provider_scales"]))


def report_conditions(report_id: str, text: str, seed: int, mode: str, kinds: Counter | None = None,
                      reading: RatingReading = DEFAULT_READING, statements: list[dict] | None = None
                      ) -> tuple[list[dict], ReportContext | None]:
    """The rows of one report in every declared condition written report by report
    (`finlib.finbias.conditions`: ok or skipped with a reason), and the report's context for the streamed
    ones (None: no readable rating, every condition skipped here). ``kinds`` counts the rewrites by kind
    (`finlib.finbias.perturb.ratings.REWRITE_KINDS`); the rating statement (`finlib.finbias.perturb.statement`:
    where, by which rule) is appended to ``statements``."""
    st = find_rating_statement(text, reading)
    if statements is not None:
        statements.append(statement_record(report_id, st))
    rating = st.rating
    if rating is None:
        return skipped_rows(report_id, None, SKIP_NO_RATING), None
    ctx = ReportContext(report_id, text, rating, st, remove_statement(text, st), seed, mode, reading)
    rows = []
    for rec in condition_table.declared():
        if not rec.streamed:
            rows += variant_rows(ctx, rec.name, rec.transform(ctx), kinds)
    return rows, ctx


def skipped_rows(report_id: str, rating: Rating | None, reason: str) -> list[dict]:
    """One skipped row per declared condition (a report without a readable rating, or set aside)."""
    return [_row(report_id, rec.name, None, rating, skip=reason) for rec in condition_table.declared()]


def variant_rows(ctx: ReportContext, name: str, variants: list[Variant], kinds: Counter | None) -> list[dict]:
    """The rows of a transform's variants of one report; each rewrite's kind is counted in ``kinds``."""
    rows = []
    for v in variants:
        if v.kind is not None and kinds is not None:
            kinds[v.kind] += 1
        rows.append(_row(ctx.report_id, name, v.text, ctx.rating, v.shown, skip=v.skip, item_suffix=v.suffix))
    return rows


STATEMENT_COLUMNS = ("report_id", "rule", "unit", "rating", "start", "end", "detail")


def statement_record(report_id: str, st: RatingStatement) -> dict:
    """One row of the rating_statements table: where the report states its rating, and by which rule."""
    return {"report_id": report_id, "rule": st.rule, "unit": st.unit,
            "rating": None if st.rating is None else st.rating.value, "start": st.start, "end": st.end,
            "detail": st.detail}


def sweep_rows(report_id: str, text: str, rating: Rating, reading: RatingReading = DEFAULT_READING) -> list[dict]:
    """The rating sweep of one report (finlib.finbias.beyond.rating_sweep): the report shown with each of
    the three ratings, rewritten like fake_rating (the analyst's own phrasing: `replace_rating` =
    `finlib.finbias.conditions.rewrite_report_rating`, so a sweep row equals its fake_rating twin);
    the sweep of the analyst's own rating is the original text. `fake_rating` holds the shown rating."""
    st = find_rating_statement(text, reading)
    return [_row(report_id, cond, text if shown is rating else rewrite_statement(text, st, shown, reading)[0],
                 rating, shown) for shown, cond in SWEEP_CONDITIONS.items()]


def sweep_report_ids(reports: pd.DataFrame, n: int | None, reading: RatingReading = DEFAULT_READING) -> set[str]:
    """The reports that get the sweep: the first `n` report ids (sorted) whose first sentence states
    a rating (None = all, 0 = none: the paper's run), independent of the order of the corpus."""
    if n == 0:
        return set()
    rated = sorted(str(r) for r, t in zip(reports["report_id"], reports["text"])
                   if isinstance(t, str) and find_rating_statement(t, reading).rating is not None)
    return set(rated if n is None else rated[:n])


@dataclass
class PerturbResult:
    """Everything stage 02 produces, in memory, before it is written."""

    conditions: pd.DataFrame
    lexicon_stats: pd.DataFrame    # one row per report and policy (column `policy`)
    triggers: pd.DataFrame         # one row per trigger word, both policies' counts side by side
    report: dict
    subjectivity: SubjectivityFilter | None = None
    checks: pd.DataFrame | None = None     # validate_conditions' table, with n_set_aside per check
    set_aside: pd.DataFrame | None = None  # SET_ASIDE_COLUMNS: the reports set aside and why
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)  # what notebook 02 shows (`run`)
    figures: dict[str, Any] = field(default_factory=dict)         # drawn figures (None: not drawn)
    example: Path | None = None    # figures/<run>/example_conditions.html (`run`; None: no report to show)
    statements: pd.DataFrame | None = None  # STATEMENT_COLUMNS: each report's rating statement and its rule

    @property
    def lexicon(self) -> Lexicon | None:
        return None if self.subjectivity is None else self.subjectivity.lexicon


def build_conditions(reports: pd.DataFrame, seed: int, mode: str = "one", lexicon: Lexicon | None = None,
                     source: str = "reports.parquet", policy: str = "respect",
                     tagger: PosTagger | None = None, chunk: int = TAG_CHUNK,
                     sweep_ids: set[str] | None = None, join: bool = False, validate: bool = True,
                     reading: RatingReading = DEFAULT_READING) -> PerturbResult:
    """The conditions artifact for a reports frame (columns report_id, text[, analyst_rating]).

    ``lexicon``: None = the MPQA copy shipped with the package (`shipped_lexicon`); no_opinion is always built.

    When the frame carries stage 00's `analyst_rating`, it must equal what the extractor reads
    now (same function): a difference means stale artifacts, and is an error naming the report.
    ``policy``: MPQA POS policy (`respect` tags with ``tagger``, an uncached one when None);
    reports are filtered in chunks of ``chunk`` so the tagger sees long streams.
    ``sweep_ids``: reports that also get the rating sweep rows (``sweep_report_ids``; none by default).
    ``join``: params `perturb.join_lines`: single line breaks joined into spaces in every condition (a named
    normalisation; off by default, the report keeps its line structure as the authors send it).
    ``validate``: run `validate_conditions` on every report and set aside the ones that fail (module
    docstring, "Reports set aside"); the checks table is ``PerturbResult.checks``.
    ``reading``: where and on which scales the rating statement is read (`reading_from_params`).
    """
    require_columns(reports, ("report_id", "text"), source)
    if policy not in POS_POLICIES:
        raise ValueError(f"perturb.mpqa_pos must be one of {POS_POLICIES}, got {policy!r}")
    lexicon = lexicon if lexicon is not None else shipped_lexicon()
    filt = SubjectivityFilter(lexicon, policy, (tagger or PosTagger()) if policy != "ignore" else None,
                              processes=getattr(tagger, "n_process", 1))
    tally = subjectivity.TriggerTally(filt.policies)
    kinds: Counter = Counter()
    rows: list[dict] = []
    aside: list[dict] = []
    statements: list[dict] = []
    recs = list(reports.itertuples(index=False))
    for start in range(0, len(recs), chunk):
        pending = []
        for i, rec in enumerate(recs[start:start + chunk], start=start):
            r_rows, item = report_rows(i, rec, source, seed, mode, kinds, aside, sweep_ids or set(), join,
                                       reading, statements)
            rows.extend(r_rows)
            pending.append(item)
        rows.extend(streamed_rows(pending, StreamTools(filt, tally), kinds))
    conditions = pd.DataFrame(rows, columns=list(CONDITION_COLUMNS)).astype("str")  # None stays missing
    checks = None
    if validate:
        failures, checks = _validation(conditions, filt, reading)
        conditions = set_aside_reports(conditions, failures, aside)
        checks["n_set_aside"] = checks["n_failed"]  # every report that failed a check is set aside
    set_aside = pd.DataFrame(aside, columns=list(SET_ASIDE_COLUMNS))
    report = conditions_report(conditions, reports, lexicon, mode, set_aside, kinds, join)
    table = pd.DataFrame(statements, columns=list(STATEMENT_COLUMNS))
    report["rating_statements"] = statements_summary(table, reading)
    report["mpqa"] = tally.summary(policy, filt.tagger)
    report["mpqa"]["sentences"] = filt.summary()
    return PerturbResult(conditions, tally.stats_frame(), tally.triggers_frame(lexicon), report, filt, checks,
                         set_aside, statements=table)


def statements_summary(table: pd.DataFrame, reading: RatingReading) -> dict:
    """The `rating_statements` block of perturb_report.json: reports per rule (first_sentence = the authors'
    protocol), the unread share and five unread examples with the reason."""
    n = len(table)
    unread = table[table["rule"] == UNREAD]
    return {"front_matter_units": reading.front_matter_units,
            "by_rule": {r: int((table["rule"] == r).sum()) for r in (*RULES, UNREAD)},
            "n_unread": int(len(unread)), "unread_share": float(len(unread) / n) if n else 0.0,
            "unread_examples": [f"{r.report_id}: {r.detail}" for r in unread.head(5).itertuples()]}


def report_rows(i: int, rec, source: str, seed: int, mode: str, kinds: Counter, aside: list[dict],
                sweep_ids: set[str], join: bool, reading: RatingReading = DEFAULT_READING,
                statements: list[dict] | None = None) -> tuple[list[dict], tuple]:
    """One report's rows in every condition written report by report (and the sweep), and what the
    streamed conditions need: (report_id, context or None, skip reason of a report without one). A report
    whose conditions cannot be written is set aside (appended to ``aside``): one report never stops the
    corpus. A stage-00 `analyst_rating` that differs from what the extractor reads now is an error
    (stale artifacts), naming the row and report."""
    rid, text = str(rec.report_id), rec.text
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{source}: row {i} (report_id {rid!r}), field 'text': empty or missing")
    text = join_lines(text) if join else text
    try:
        r_rows, ctx = report_conditions(rid, text, seed, mode, kinds, reading, statements)
        sweep = sweep_rows(rid, text, ctx.rating, reading) if ctx is not None and rid in sweep_ids else []
    except ValueError as exc:  # set aside with the reason
        reason = f"conditions could not be written: {exc}"
        aside.append({"report_id": rid, "step": "writing conditions", "reason": reason})
        r_rows = skipped_rows(rid, find_rating_statement(text, reading).rating, SET_ASIDE + reason)
        sweep, ctx = [], None
    if hasattr(rec, "analyst_rating"):
        given = rec.analyst_rating if isinstance(rec.analyst_rating, str) else None
        if given != r_rows[0]["analyst_rating"]:
            raise ValueError(f"{source}: row {i} (report_id {rid!r}), field 'analyst_rating': stage 00 "
                             f"says {given!r} but the rating statement reads "
                             f"{r_rows[0]['analyst_rating']!r}; rerun stage 00")
    return r_rows + sweep, (rid, ctx, r_rows[-1]["skip_reason"] if ctx is None else None)


def streamed_rows(pending: list[tuple], tools: StreamTools, kinds: Counter | None = None) -> list[dict]:
    """The rows of the streamed conditions (`ConditionRecord.streamed`: no_opinion) for a chunk of reports
    (``report_rows``' second values), each condition's transform reading the whole chunk at once."""
    rows: list[dict] = []
    for rec in condition_table.declared():
        if rec.streamed:
            for (_, ctx, _), variants in zip(pending, rec.transform(pending, tools)):
                if ctx is not None:
                    rows += variant_rows(ctx, rec.name, variants, kinds)
    return rows


def conditions_report(conditions: pd.DataFrame, reports: pd.DataFrame, lexicon: Lexicon, mode: str,
                      set_aside: pd.DataFrame, kinds: Counter, join: bool) -> dict:
    """perturb_report.json but its `mpqa` block: counts, set-aside reports, sentence-rule effect, rewrites."""
    report = stage_report(conditions, lexicon, mode, len(reports))
    report["set_aside"] = set_aside_summary(set_aside, len(reports))
    report["first_sentences_differing_from_punkt"] = first_sentences_differing_from_punkt(
        [t for t in reports["text"] if isinstance(t, str)])
    report["join_lines"] = bool(join)
    report["fake_rating_rewrites_by_kind"] = {k: int(kinds[k]) for k in REWRITE_KINDS}
    return report


def set_aside_reports(conditions: pd.DataFrame, failures: dict[str, list[str]], aside: list[dict]) -> pd.DataFrame:
    """Every row of a report that failed a validation check becomes skipped with the check as its reason;
    each such report is appended to ``aside`` once (its first failed check names it)."""
    reason: dict[str, str] = {}
    for check, rids in failures.items():
        for rid in rids:
            reason.setdefault(rid, check)
    if not reason:
        return conditions
    out = conditions.copy()
    hit = out["report_id"].isin(list(reason))
    out.loc[hit, "skip_reason"] = SET_ASIDE + out.loc[hit, "report_id"].map(reason)
    out.loc[hit, "status"] = "skipped"
    out.loc[hit, "text"] = None
    aside.extend({"report_id": rid, "step": "validation", "reason": r} for rid, r in reason.items())
    return out


def set_aside_summary(aside: pd.DataFrame, n_reports: int) -> dict:
    """The `set_aside` block of perturb_report.json: how many reports, their share, and the count per reason."""
    return {"n_reports": int(len(aside)), "share": float(len(aside) / n_reports) if n_reports else 0.0,
            "by_step_and_reason": {f"{s} | {r}": int(n) for (s, r), n in
                                   aside.groupby(["step", "reason"]).size().items()} if len(aside) else {}}


def set_aside_table(result: PerturbResult) -> pd.DataFrame:
    """The reports set aside by the stage, one row each, with the step and reason (what notebook 02 shows)."""
    return result.set_aside if result.set_aside is not None else pd.DataFrame(columns=list(SET_ASIDE_COLUMNS))


class SetAsideGateError(RuntimeError):
    """More reports were set aside than `perturb.max_set_aside_share` allows."""


def check_set_aside_gate(report: dict, max_share: float, where: str = "stage 02") -> None:
    """Fail when the set-aside share passes the gate: many failing reports mean a broken instrument."""
    block = report["set_aside"]
    if block["share"] > max_share:
        reasons = "; ".join(f"{k}: {n}" for k, n in list(block["by_step_and_reason"].items())[:5])
        raise SetAsideGateError(f"{where}: {block['n_reports']} reports set aside ({block['share']:.2%}), more than "
                                f"perturb.max_set_aside_share = {max_share:.2%}; reasons: {reasons}. The list is "
                                "in the perturb_set_aside artifact")


class UnreadRatingGateError(SetAsideGateError):
    """More reports have no readable rating than `perturb.max_unread_rating_share` allows."""


def check_unread_gate(report: dict, max_share: float, where: str = "stage 02") -> None:
    """Fail when the share of reports without a readable rating passes `perturb.max_unread_rating_share`:
    a corpus whose reports open with a layout the reader does not know would otherwise lose most of its
    reports while the stage reports success. The message gives the share and five examples with the rule
    that failed."""
    block = report["rating_statements"]
    if block["unread_share"] > max_share:
        examples = "; ".join(block["unread_examples"][:5])
        raise UnreadRatingGateError(
            f"{where}: {block['n_unread']} reports have no readable rating ({block['unread_share']:.2%}), more than "
            f"perturb.max_unread_rating_share = {max_share:.2%}. Examples: {examples}. Every report's rule is in "
            "the rating_statements artifact; perturb.rating_front_matter_units and perturb.provider_scales say "
            "where and on which scales the rating is read")


def rating_rule_table(result: PerturbResult) -> pd.DataFrame:
    """Reports per rule that found the rating statement (first_sentence = the authors' protocol; unread =
    no readable rating), what notebook 02 shows beside the conditions."""
    by = result.report.get("rating_statements", {}).get("by_rule", {})
    return pd.DataFrame({"rule": list(by), "n_reports": list(by.values())})


def first_sentences_differing_from_punkt(texts: list[str]) -> int:
    """How many reports' first sentence under the line-structure rule differs from Punkt's within blank-line
    paragraphs alone (finlib.finbias.sentences): how much the structural boundaries change on this corpus."""
    return sum(first_sentence_span(t) != first_sentence_span(t, structure=False) for t in texts)


def stage_report(conditions: pd.DataFrame, lexicon: Lexicon | None, mode: str, n_reports: int) -> dict:
    """Counts and exclusions by reason, for perturb_report.json."""
    orig = conditions[conditions["condition"] == Condition.ORIGINAL.value]
    skipped = conditions[conditions["status"] == "skipped"]
    out = {
        "n_reports": int(n_reports),
        "n_reports_without_rating": int((orig["skip_reason"] == SKIP_NO_RATING).sum()),
        "fake_rating_mode": mode,
        "n_rows": int(len(conditions)),
        "n_ok_by_condition": {k: int(v) for k, v in
                              conditions[conditions["status"] == "ok"].groupby("condition").size().items()},
        "skipped_by_condition_and_reason": {f"{c} | {r}": int(n) for (c, r), n in
                                            skipped.groupby(["condition", "skip_reason"]).size().items()},
        "lexicon": None if lexicon is None else {
            "source": lexicon.source, "entries": len(lexicon.entries),
            "strongsubj_entries": sum(e.type == "strongsubj" for e in lexicon.entries),
            "strongsubj_words": len(lexicon.strong_words),
            "tolerated_tokens_without_equals": [f"line {n}: {t!r}" for n, t in lexicon.report.tokens_without_equals],
            "tolerated_unknown_keys": dict(lexicon.report.unknown_keys),
            "odd_stemmed_values_read_as_n": [f"line {n}: {v!r}" for n, v in lexicon.report.odd_stemmed],
            "lines_not_utf8_decoded_as_latin1": [f"line {n}: {v!r}" for n, v in lexicon.report.latin1_lines],
        },
    }
    return out


def perturb_params(cfg: RunConfig) -> dict:
    """The `perturb:` section, checked by the params schema (`finlib.core.params.PerturbSection`: every
    key present, unknown keys refused -- `fake_ratings:` would otherwise mean `one` --, the fake-rating
    mode and the MPQA POS policy among `finlib.finbias.conditions.FAKE_MODES` and POS_POLICIES, a test keeps those equal)."""
    return cfg.section("perturb")


def shipped_lexicon() -> Lexicon:
    """The MPQA lexicon shipped with the package, hash-checked (loaded once per process)."""
    return _shipped()


@lru_cache(maxsize=1)
def _shipped() -> Lexicon:
    return load_lexicon(SHIPPED_LEXICON, md5=MPQA_MD5)


def lexicon_file(cfg: RunConfig, params: dict) -> Path:
    """`perturb.lexicon_path` under the run's root; null = the copy shipped with the package."""
    return SHIPPED_LEXICON if params.get("lexicon_path") is None else cfg.path(params["lexicon_path"])


def resolve_lexicon(cfg: RunConfig, params: dict) -> Lexicon:
    """The lexicon at `perturb.lexicon_path` (the shipped copy by default), its MD5 checked against
    `perturb.lexicon_md5`. Missing or corrupted is an error naming the file (no run skips no_opinion).
    ``params``: ``perturb_params(cfg)``.
    """
    path = lexicon_file(cfg, params)
    if not path.is_file():
        raise LexiconUnavailable(missing_message(path, params.get("lexicon_url")))
    lexicon = load_lexicon(path, params.get("lexicon_url"), params.get("lexicon_md5"))
    lexicon.source = str(params["lexicon_path"] or SHIPPED_SOURCE)  # no machine paths in reports
    return lexicon


def perturb_run(cfg: RunConfig, params: dict) -> PerturbResult:
    """Build the conditions of stage 00's reports with the run's lexicon, tagger and options
    (the tagger and the filter's caches are closed however it ends)."""
    lexicon = resolve_lexicon(cfg, params)
    reports = read_frame(cfg, "reports")
    tagger = None
    if params["mpqa_pos"] != "ignore":
        tagger = PosTagger(cfg.path(params["tag_cache"]), params["tagger_model"], int(params["tagger_processes"]))
    result = None
    try:
        reading = reading_from_params(params)
        result = build_conditions(reports, cfg.seed, params["fake_rating"], lexicon,
                                  source=str(cfg.processed_dir / "reports.parquet"), policy=params["mpqa_pos"],
                                  tagger=tagger,
                                  sweep_ids=sweep_report_ids(reports, params["sweep_reports"], reading),
                                  join=bool(params["join_lines"]), reading=reading)
    finally:
        if tagger is not None:
            tagger.close()
        if result is not None and result.subjectivity is not None:
            result.subjectivity.close()
    return result


def write_artifacts(cfg: RunConfig, params: dict, result: PerturbResult) -> None:
    """conditions, lexicon_stats, perturb_set_aside and perturb_report.json; then the set-aside gate
    (after writing, so the list of reports set aside can be read when it stops the stage)."""
    write_frame(cfg, "conditions", result.conditions, row_group_size=TEXT_ROW_GROUP)
    write_frame(cfg, "lexicon_stats", result.lexicon_stats)
    write_frame(cfg, "perturb_set_aside", set_aside_table(result))
    if result.statements is not None:
        write_frame(cfg, "rating_statements", result.statements)
    max_share = params.get("max_set_aside_share")
    result.report["set_aside"]["max_share"] = DEFAULT_MAX_SET_ASIDE_SHARE if max_share is None else float(max_share)
    result.report["rating_statements"]["max_unread_share"] = float(params["max_unread_rating_share"])
    write_json(cfg, "perturb_report", result.report)
    check_unread_gate(result.report, result.report["rating_statements"]["max_unread_share"])
    check_set_aside_gate(result.report, result.report["set_aside"]["max_share"])


def write_tables(cfg: RunConfig, params: dict, result: PerturbResult) -> dict[str, pd.DataFrame]:
    """Stage 02's tables, written with captions naming the run's MPQA policy; plus what notebook 02
    shows beside them (validation checks, reports set aside, fake-rating examples), not written."""
    from finlib.core.tables import write_table

    policy, top = params["mpqa_pos"], params["top_triggers"]
    specs = [
        ("conditions_summary", conditions_summary(result.conditions),
         "Stage 02 conditions: items ok / skipped and mean length (words = alphabetic tokens)"),
        ("lexicon_removed", subjectivity.removal_summary(result.lexicon_stats),
         "Sentences and words removed per report by the MPQA strongsubj filter, per POS policy (perturb.mpqa_pos)"),
        ("triggers", subjectivity.top_triggers(result.triggers, policy, top),
         f"Most frequent MPQA strongsubj triggers in the removed sentences (mpqa_pos: {policy}); "
         "the other policy's counts beside"),
        ("triggers_pos_blind", subjectivity.top_triggers(result.triggers, "ignore", top),
         "Most frequent triggers under the POS-blind matcher (mpqa_pos: ignore); the POS-aware counts beside"),
        ("mpqa_policy_differences", subjectivity.policy_differences(result.report),
         "Sentences removed by only one MPQA matching policy, and their trigger words"),
    ]
    tables = {}
    for name, table, text in specs:
        write_table(cfg, name, table, text)
        tables[name] = table
    return {**tables, "validation_checks": result.checks, "set_aside": set_aside_table(result),
            "fake_examples": fake_examples(result.conditions, n=3, reading=reading_from_params(params)),
            "rating_statements": rating_rule_table(result)}


def run(cfg: RunConfig) -> PerturbResult:
    """Stage 02: read reports.parquet; write conditions / lexicon_stats / perturb_set_aside /
    perturb_report, the tables, the strongsubj-removal figure and the four-condition example."""
    import matplotlib.pyplot as plt

    params = perturb_params(cfg)
    reading = reading_from_params(params)
    with remembered_statements(reading):
        result = perturb_run(cfg, params)
        write_artifacts(cfg, params, result)
        result.tables = write_tables(cfg, params, result)
        fig = subjectivity.removal_figure(cfg, result.lexicon_stats)
        if fig is not None:
            plt.close(fig)  # drawn once, shown where the notebook tells the story
        result.figures = {"fig_strongsubj_removed": fig}
        if (result.conditions["status"] == "ok").any():  # else no report to show: `example_note` says so
            result.example = save_example(cfg, result.conditions, params["example_report"], reading)
    if result.checks is not None:
        raise_on_failures(result.checks)
    return result


def summary(cfg: RunConfig, result: PerturbResult) -> str:
    """Notebook 02's first output: the synthetic-data caveat and the headline counts (reports, without
    a rating, set aside, ok rows per condition)."""
    from finlib.core.tables import SYNTHETIC_CAVEAT

    rep = result.report
    ok = ", ".join(f"{c} {n}" for c, n in rep["n_ok_by_condition"].items())
    lines = [f"**{SYNTHETIC_CAVEAT}**"] if cfg.is_synthetic else []
    rules = ", ".join(f"{k} {v}" for k, v in rep.get("rating_statements", {}).get("by_rule", {}).items())
    lines.append(f"**{rep['n_reports']} reports**: {rep['n_reports_without_rating']} without a readable rating "
                 f"(left out of every condition; rating found by rule: {rules}), {rep['set_aside']['n_reports']} set aside "
                 f"({rep['set_aside']['share']:.2%}; gate {rep['set_aside']['max_share']:.2%}). Ok rows: {ok}. "
                 f"Fake ratings: `{rep['fake_rating_mode']}`; MPQA policy `{rep['mpqa']['mpqa_pos']}`.")
    return "\n\n".join(lines)


def failures_not_set_aside(result: PerturbResult) -> int:
    """Validation failures on reports the stage did not set aside: 0 unless a check is broken."""
    checks = result.checks
    return 0 if checks is None else int((checks["n_failed"] - checks["n_set_aside"]).sum())


# ---- validation, tables and the side-by-side example (notebook 02) ---------------------------

VALIDATION_CHECKS = ("no_rating = original minus first sentence", "fake differs from original",
                     "fake: only the first sentence differs", "fake rating != analyst rating",
                     "extractor reads the fake rating back", "no_opinion: sentences of no_rating only",
                     "no_opinion: no strongsubj word left", "sweep: extractor reads the shown rating back")


def validate_conditions(conditions: pd.DataFrame, subjectivity: SubjectivityFilter | None = None,
                        reading: RatingReading = DEFAULT_READING) -> pd.DataFrame:
    """The validation table (one row per check, `_validation`); see `_validation` for the checks."""
    return _validation(conditions, subjectivity, reading)[1]


def _validation(conditions: pd.DataFrame, subjectivity: SubjectivityFilter | None = None,
                reading: RatingReading = DEFAULT_READING) -> tuple[dict[str, list[str]], pd.DataFrame]:
    """Check the Appendix A.3 invariants on every ok report; one row per check with failures. "First
    sentence" in a check's name is the rating statement (`finlib.finbias.perturb.statement`; the first
    sentence under the authors' protocol).

    - no_rating is the original without its rating statement, every other byte unchanged;
    - fake_rating differs from the original, only inside the rating statement, names a rating other
      than the analyst's, and the extractor reads the fake rating back;
    - no_opinion keeps only sentences of no_rating, none with a strongsubj word under the run's
      policy (with a lexicon: ``subjectivity`` is ``PerturbResult.subjectivity``; tags from its cache).
      With a result cache, a text that passed this re-match with the same filter is not matched
      again (`n_passed_in_an_earlier_run`): most of a rerun's time was this check.
    """
    ok = conditions[conditions["status"] == "ok"]
    failures: dict[str, list[str]] = {k: [] for k in VALIDATION_CHECKS}
    checked: Counter = Counter()
    # plain records per report and condition: pandas groupbys per report were most of a rerun's time
    by_report: dict[str, dict[str, list]] = {}
    for rec in ok[["report_id", "condition", "text", "fake_rating", "analyst_rating"]].itertuples(index=False):
        by_report.setdefault(rec.report_id, {}).setdefault(rec.condition, []).append(rec)
    to_rematch: list[tuple[str, str, list[str]]] = []  # (report, no_rating text, kept sentences)
    for rid, by in by_report.items():
        if Condition.ORIGINAL.value not in by:
            continue
        orig = by[Condition.ORIGINAL.value][0].text
        _check_first_sentence(rid, by, orig, find_rating_statement(orig, reading), failures, checked, reading)
        if Condition.NO_OPINION.value in by and Condition.NO_RATING.value in by:
            rest = by[Condition.NO_RATING.value][0].text
            pool = subjectivity.sentences_of(rest) if subjectivity is not None else split_sentences(rest)
            checked["no_opinion: sentences of no_rating only"] += 1
            kept = joined_subsequence(by[Condition.NO_OPINION.value][0].text, pool)
            if kept is None:
                failures["no_opinion: sentences of no_rating only"].append(rid)
                kept = split_sentences(by[Condition.NO_OPINION.value][0].text)  # for the next check
            if subjectivity is not None:
                to_rematch.append((rid, rest, kept))
    earlier = _rematch_strongsubj(to_rematch, subjectivity, failures, checked) if to_rematch else Counter()
    return failures, pd.DataFrame([{"check": k, "n_checked": checked[k], "n_passed_in_an_earlier_run": earlier[k],
                                    "n_failed": len(v), "first_failures": ", ".join(v[:5])}
                                   for k, v in failures.items()])


def _check_first_sentence(rid: str, by: dict[str, list], orig: str, st: RatingStatement,
                          failures: dict[str, list[str]], checked: Counter, reading: RatingReading) -> None:
    """The checks of one report's no_rating, fake_rating and sweep rows against its original: only the
    rating statement `st` differs, and the extractor reads back the rating each row shows."""
    head, tail = orig[:st.start], orig[st.end:]

    def outside_unchanged(text: str) -> bool:
        return text.startswith(head) and text.endswith(tail) and len(text) >= len(head) + len(tail)

    if Condition.NO_RATING.value in by:
        checked["no_rating = original minus first sentence"] += 1
        if st.rating is None or by[Condition.NO_RATING.value][0].text != remove_statement(orig, st):
            failures["no_rating = original minus first sentence"].append(rid)
    for rec in by.get(Condition.FAKE_RATING.value, []):
        fake = rec.text
        for k in ("fake differs from original", "fake: only the first sentence differs",
                  "fake rating != analyst rating", "extractor reads the fake rating back"):
            checked[k] += 1
        if fake == orig:
            failures["fake differs from original"].append(rid)
        if not outside_unchanged(fake):
            failures["fake: only the first sentence differs"].append(rid)
        if rec.fake_rating == rec.analyst_rating:
            failures["fake rating != analyst rating"].append(rid)
        read = find_rating_statement(fake, reading).rating
        if read is None or read.value != rec.fake_rating:
            failures["extractor reads the fake rating back"].append(rid)
    for cond in SWEEP_CONDITIONS.values():  # the rating sweep: the shown rating is read back
        for rec in by.get(cond.value, []):
            checked["sweep: extractor reads the shown rating back"] += 1
            read = find_rating_statement(rec.text, reading).rating
            if read is None or read.value != rec.fake_rating or not outside_unchanged(rec.text):
                failures["sweep: extractor reads the shown rating back"].append(rid)


def _rematch_strongsubj(to_rematch: list[tuple[str, str, list[str]]], subjectivity: SubjectivityFilter,
                        failures: dict[str, list[str]], checked: Counter) -> Counter:
    """The strongsubj re-match of every kept no_opinion text, on the filter's cores (the costliest check).
    A text whose re-match passed with this same filter (lexicon, policies, tagger, code version: the
    result cache's fingerprint) is not matched again on a rerun; returns those counts per check."""
    cache = subjectivity.results
    keys = [None if cache is None else cache.check_key(rest, kept) for _, rest, kept in to_rematch]
    passed_before = set() if cache is None else cache.checked(keys)
    now = [(k, job) for k, job in zip(keys, to_rematch) if k is None or k not in passed_before]
    cleans = subjectivity.clean_sentences_many([rest for _, (_, rest, _) in now])
    passed = []
    for (key, (rid, _, kept)), clean in zip(now, cleans):
        if set(kept) <= set(clean):
            passed.append(key)
        else:
            failures["no_opinion: no strongsubj word left"].append(rid)
    checked["no_opinion: no strongsubj word left"] += len(to_rematch)
    if cache is not None:
        cache.mark_checked(passed)
    return Counter({"no_opinion: no strongsubj word left": len(to_rematch) - len(now)})


def joined_subsequence(text: str, pool: list[str]) -> list[str] | None:
    """The sentences of `pool` that `text` is made of, when `text` is an ordered subsequence of them
    joined by whitespace only (how no_opinion is built from no_rating), else None. Read by matching
    the pool's sentences in order rather than by splitting `text` again: a second sentence split of
    every kept text was most of the validation's time at the paper's size, and this check is stricter
    (nothing but whitespace may sit between the kept sentences)."""
    kept, pos, n = [], 0, len(text)
    while pos < n and text[pos].isspace():
        pos += 1
    for sentence in pool:
        if pos == n:
            break
        end = pos + len(sentence)
        if sentence and text.startswith(sentence, pos) and (end == n or text[end].isspace()):
            kept.append(sentence)
            pos = end
            while pos < n and text[pos].isspace():
                pos += 1
    return kept if pos == n else None


def raise_on_failures(checks: pd.DataFrame) -> None:
    """Stop when a validation check failed on a report that was not set aside (the table says which
    reports); failures the stage set aside are counted by `check_set_aside_gate` instead."""
    aside = checks["n_set_aside"] if "n_set_aside" in checks else 0
    bad = checks[checks["n_failed"] - aside > 0]
    if len(bad):
        lines = "; ".join(f"{r.check}: {r.n_failed} (e.g. {r.first_failures})" for r in bad.itertuples())
        raise AssertionError(f"stage 02 validation failed: {lines}")


def conditions_summary(conditions: pd.DataFrame) -> pd.DataFrame:
    """Per condition: items ok / skipped, mean words and characters of the ok texts."""
    rows = []
    declared = [rec.name for rec in condition_table.declared()]
    for cond in (*declared, *SWEEP_VALUES):
        g = conditions[conditions["condition"] == cond]
        if cond not in declared and g.empty:  # the sweep is listed only when the run has it
            continue
        ok = g[g["status"] == "ok"]
        words = word_counts(ok["text"])  # len(lexicon.TOKEN.findall(text)) per text, without building the tokens
        reasons = g.loc[g["status"] == "skipped", "skip_reason"].value_counts()
        rows.append({"condition": cond, "items_ok": len(ok), "items_skipped": int(len(g) - len(ok)),
                     "mean_words": float(words.mean()) if len(ok) else np.nan,
                     "mean_chars": float(ok["text"].str.len().mean()) if len(ok) else np.nan,
                     "skip_reasons": "; ".join(f"{r} ({n})" for r, n in reasons.items()) or ""})
    return pd.DataFrame(rows)


def fake_examples(conditions: pd.DataFrame, n: int = 3, reading: RatingReading = DEFAULT_READING) -> pd.DataFrame:
    """`n` fake-rating rewrites side by side (first sentence before / after, the kind of rewrite),
    transitions first and one per kind where the run has them: what notebook 02 shows."""
    ok = conditions[(conditions["status"] == "ok")]
    orig = dict(zip(ok.loc[ok["condition"] == Condition.ORIGINAL.value, "report_id"],
                    ok.loc[ok["condition"] == Condition.ORIGINAL.value, "text"]))
    rows = []
    for rec in ok[ok["condition"] == Condition.FAKE_RATING.value].itertuples():
        text = orig[rec.report_id]
        st = find_rating_statement(text, reading)
        faked, kind = rewrite_statement(text, st, Rating(rec.fake_rating), reading)
        sentence = faked[st.start:len(faked) - (len(text) - st.end)]
        rows.append({"report_id": rec.report_id, "analyst_rating": rec.analyst_rating, "fake_rating": rec.fake_rating,
                     "kind": kind, "original_first_sentence": text[st.start:st.end], "fake_first_sentence": sentence})
    df = pd.DataFrame(rows, columns=["report_id", "analyst_rating", "fake_rating", "kind", "original_first_sentence",
                                     "fake_first_sentence"])
    if df.empty:
        return df
    order = {k: i for i, k in enumerate(reversed(REWRITE_KINDS))}   # transitions with changes first
    df = df.assign(_o=df["kind"].map(order)).sort_values(["_o", "report_id"], kind="stable")
    firsts = df.drop_duplicates("kind")
    return pd.concat([firsts, df.drop(firsts.index)]).head(n).drop(columns="_o").reset_index(drop=True)


def _mark(text: str, spans: list[tuple[int, int, str]]) -> str:
    """HTML-escape `text`, wrapping each (start, end, tag) span in <tag>."""
    out, pos = [], 0
    for a, b, tag in sorted(spans):
        out += [html.escape(text[pos:a]), f"<{tag}>", html.escape(text[a:b]), f"</{tag}>"]
        pos = b
    out.append(html.escape(text[pos:]))
    return "".join(out).replace("\n", "<br>")


def example_html(conditions: pd.DataFrame, report_id: str, caption: str = "",
                 reading: RatingReading = DEFAULT_READING) -> str:
    """One report in all four conditions side by side, changed parts marked (paper Figs. 2-5).

    original: the rating words highlighted; no_rating: the removed first sentence struck
    through; fake_rating: the replaced words marked; no_opinion: the removed subjective
    sentences struck through.
    """
    g = conditions[(conditions["report_id"] == report_id) & (conditions["status"] == "ok")]
    text = {c: t for c, t in zip(g["condition"], g["text"])}
    orig = text[Condition.ORIGINAL.value]
    st = find_rating_statement(orig, reading)
    first = (st.start, st.end)
    rating_marks = [(first[0] + m.start, first[0] + m.end, "mark")
                    for m in find_rating_mentions(orig[first[0]:first[1]], reading.scales) if m.role == "current"]
    cols = [("Original (Fig. 2)", _mark(orig, rating_marks))]
    if Condition.NO_RATING.value in text:
        cols.append(("Rating sentence removed (Fig. 3)", _mark(orig, [(first[0], first[1], "del")])))
    if Condition.FAKE_RATING.value in text:
        fake = text[Condition.FAKE_RATING.value]
        f_st = find_rating_statement(fake, reading)
        marks = [(f_st.start + m.start, f_st.start + m.end, "ins")
                 for m in find_rating_mentions(fake[f_st.start:f_st.end], reading.scales) if m.role == "current"]
        cols.append((f"Fake rating: {g.loc[g['condition'] == 'fake_rating', 'fake_rating'].iloc[0]} (Fig. 4)",
                     _mark(fake, marks)))
    if Condition.NO_OPINION.value in text and Condition.NO_RATING.value in text:
        rest = text[Condition.NO_RATING.value]
        kept = set(split_sentences(text[Condition.NO_OPINION.value]))
        gone = [(a, b, "del") for a, b in sentence_spans(rest) if rest[a:b] not in kept]
        cols.append(("Subjective sentences removed (Fig. 5)", _mark(rest, gone)))
    head = "".join(f"<th>{html.escape(t)}</th>" for t, _ in cols)
    body = "".join(f"<td>{c}</td>" for _, c in cols)
    style = ("table{border-collapse:collapse;font:12px sans-serif}td{vertical-align:top;width:25%;"
             "border:1px solid #ccc;padding:6px}del{color:#b00;background:#fee}ins{background:#cfc;"
             "text-decoration:none;font-weight:bold}mark{background:#ff8;font-weight:bold}")
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return (f"<!doctype html><meta charset='utf-8'><style>{style}</style>"
            f"<table>{cap}<tr>{head}</tr><tr>{body}</tr></table>")


def save_example(cfg: RunConfig, conditions: pd.DataFrame, report_id: str | None = None,
                 reading: RatingReading = DEFAULT_READING) -> Path:
    """Write the side-by-side example for one report to figures/<run>/example_conditions.html.

    Default report: the first one (sorted id) with all four conditions ok.
    """
    ok = conditions[conditions["status"] == "ok"]
    if report_id is None:
        full = ok.groupby("report_id")["condition"].nunique()
        candidates = sorted(full[full == full.max()].index) if len(full) else []
        if not candidates:
            raise ValueError("no report has an ok original condition to show")
        report_id = candidates[0]
    caption = synthetic_title(cfg, f"Report {report_id} in each condition")
    path = cfg.figures_dir / "example_conditions.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(example_html(conditions, report_id, caption, reading), encoding="utf-8")
    return path


def example_note(cfg: RunConfig, path: Path | None) -> str:
    """Notebook 02's line under the example: where it was saved, and "(synthetic data)" when it is."""
    if path is None:
        return "No report has an ok condition in this run: there is no example to show."
    return synthetic_title(cfg, f"Saved to `{Path(path).relative_to(cfg.root)}`") + "."


def example_page(result: PerturbResult) -> str:
    """The saved four-condition example as HTML for the notebook ("" when the run has none)."""
    return "" if result.example is None else result.example.read_text(encoding="utf-8")
