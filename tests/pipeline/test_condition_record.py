"""A condition is one record: a toy condition declared in this file alone reaches every place a condition goes.

The toy ("first half only": the first half of the words of the no_rating text) is declared with
`condition_declared` and the smoke run goes through stage 00 -> 01 -> 02 -> 03 (a stub sender answering
from a checksum of the item id, so the truth is known) -> 04 -> 06 -> the report. Nothing else in the
repository names it: the plan counts it, stage 02 writes it, stage 03 sends it, stage 04 scores it and
places its column where its record says, stage 06 draws it, the report prints it. After the block the
table holds the paper's four again.
"""

from __future__ import annotations

import json
import zlib

import pandas as pd
import pytest
import yaml

from finlib.core.artifacts import read_frame, read_json
from finlib.core.tables import read_table_csv
from finlib.finbias import conditions as condition_table
from finlib.finbias.conditions import ConditionRecord, ReportContext, Variant, condition_declared
from finlib.finbias.vocab import CONDITIONS, Condition
from finlib.llm.store import Result

TOY = "first_half"
# Fin-Bias Tables 4-7 and Figures: original, no_rating, no_opinion, then fake_rating
CONDITION_ORDER_OF_TABLES = (Condition.ORIGINAL, Condition.NO_RATING, Condition.NO_OPINION, Condition.FAKE_RATING)
RATING_WORDS = ("bullish", "neutral", "bearish")


def first_half(ctx: ReportContext) -> list[Variant]:
    """The toy transform: the first half of the no_rating text's words (none left: skipped)."""
    words = ctx.rest.split()
    kept = " ".join(words[: len(words) // 2])
    return [Variant(kept, skip=None if kept else "no words in the first half")]


TOY_RECORD = ConditionRecord(TOY, "first half only", 1.5, "#7b3294", "v", "\\\\\\\\", "analyst", first_half)


def planted_answer(model: str, item_id: str) -> str | None:
    """What the stub model answers for an item: a rating, or None (a reply with no rating in it)."""
    return (*RATING_WORDS, None)[zlib.crc32(f"{model}|{item_id}".encode()) % 4]


def stub_sender(seen: list):
    def send(spec, pending, store, **kw):
        for req in pending:
            seen.append(req)
            ans = planted_answer(spec.name, req.meta["item_id"])
            raw = json.dumps({"answer": ans, "reason": "r"}) if ans else "I cannot tell from this text."
            store.put_many(
                [
                    Result.for_request(
                        req,
                        status="ok",
                        error=None,
                        raw_text=raw,
                        input_tokens=100,
                        output_tokens=10,
                        truncated_output=False,
                    )
                ]
            )

    return send


def stub_models(cfg, monkeypatch) -> None:
    records = [
        {
            "name": name,
            "backend": "openai",
            "model_id": f"{name}-id",
            "base_url": "https://x.invalid/v1",
            "api_key_env": "TOY_KEY",
            "supports_system": True,
            "context_length": 8192,
            "price_input_per_m": 1.0,
            "price_output_per_m": 2.0,
            "sampling": {"temperature": 0.0, "top_p": 1.0},
        }
        for name in ("alpha", "zeta")
    ]
    (cfg.root / "params" / "models_toy.yaml").write_text(yaml.safe_dump({"models": records}))
    cfg.params["inference"].update(
        registry="params/models_toy.yaml", models=["alpha", "zeta"], max_new_tokens=16, budget_usd=1.0, progress=False
    )
    monkeypatch.setenv("TOY_KEY", "dummy")


@pytest.mark.slow
def test_a_toy_condition_declared_in_one_record_runs_through_every_stage(tmp_run, monkeypatch):
    from finlib.finbias.data import stage as data
    from finlib.finbias.figures import stage as figures
    from finlib.finbias.inference import stage as inference
    from finlib.finbias.labels import stage as labels
    from finlib.finbias.perturb import stage as perturb
    from finlib.finbias.scoring import stage as scoring
    from finlib.pipeline import plan, report

    cfg = tmp_run
    cfg.params["perturb"]["mpqa_pos"] = "ignore"  # no tagger: the toy does not need the POS policy
    stub_models(cfg, monkeypatch)
    seen: list = []
    monkeypatch.setattr(inference, "send_pending", stub_sender(seen))
    with condition_declared(TOY_RECORD):
        data.run(cfg)
        labels.run(cfg)
        perturb.run(cfg)
        inference.run(cfg)
        res = scoring.run(cfg)
        drawn = figures.run(cfg)
        page = report.build_report(cfg).read_text(encoding="utf-8")
        _, counts, _ = plan.condition_texts(cfg, 2, cfg.seed)
    assert condition_table.names() == ("original", "no_rating", "no_opinion", "fake_rating")

    # stage 02: one toy row per rated report, the first half of its no_rating words, herding on the analyst
    cond = read_frame(cfg, "conditions")
    ok = cond[cond["status"] == "ok"]
    rated = set(ok.loc[ok["condition"] == "original", "report_id"])
    toy = cond[cond["condition"] == TOY].set_index("report_id")
    no_rating = ok[ok["condition"] == "no_rating"].set_index("report_id")
    assert rated and set(toy.index) == set(cond["report_id"])  # every report has its row, ok or skipped
    for rid in rated & set(no_rating.index):
        words = no_rating.loc[rid, "text"].split()
        assert toy.loc[rid, "text"].split() == words[: len(words) // 2]
        assert toy.loc[rid, "item_id"] == f"{rid}:{TOY}"
        assert toy.loc[rid, "reference_rating"] == toy.loc[rid, "analyst_rating"]
    toy_ok = toy[toy["status"] == "ok"]
    assert read_json(cfg, "perturb_report")["n_ok_by_condition"][TOY] == len(toy_ok) == counts[TOY]

    # stage 03: each toy item sent once per model, with its own text in the prompt
    sent = [r for r in seen if r.meta["condition"] == TOY]
    assert len(sent) == 2 * len(toy_ok)
    assert all(toy_ok.loc[r.meta["report_id"], "text"] in r.messages[-1]["content"] for r in sent)

    # stage 04: pooled herding of the toy = planted answers equal to the analyst rating, over all answered
    tab = read_table_csv(cfg.tables_dir / "table_conditions.csv")
    assert list(tab.columns) == [
        "Model",
        "Metric",
        "with rating",
        "without rating",
        "first half only",
        "without opinions",
        "fake rating shown",
    ]
    for model in ("alpha", "zeta"):
        hits = [planted_answer(model, f"{rid}:{TOY}") == r.analyst_rating for rid, r in toy_ok.iterrows()]
        want = f"{100 * sum(hits) / len(hits):.1f} (N={len(hits)})"
        cell = tab.loc[(tab["Model"] == model) & (tab["Metric"] == "herding"), "first half only"]
        assert cell.tolist() == [want]
    herding_fig = res.figures["fig_herding_accuracy"]
    assert [t.get_text() for t in herding_fig.axes[0].get_xticklabels()] == [
        "original",
        "no_rating",
        TOY,
        "no_opinion",
        "fake_rating",
    ]

    # stage 06: drawn with the toy's colour and in its place; the report prints its column
    acc = drawn.figures["fig_accuracy_vs_analyst"]
    bars = {c.get_label(): c for c in acc.axes[0].containers}
    assert bars[TOY].patches[0].get_facecolor()[:3] == pytest.approx(
        tuple(int("7b3294"[i : i + 2], 16) / 255 for i in (0, 2, 4))
    )
    caption = (cfg.figures_dir / "fig_accuracy_vs_analyst.caption.txt").read_text(encoding="utf-8")
    assert "(original/no_rating/first_half/no_opinion/fake_rating)" in caption
    heat = drawn.figures["fig_herding_heatmap"]
    assert [ax.get_title() for ax in heat.axes if ax.get_title()] == [
        "original",
        "no_rating",
        TOY,
        "no_opinion",
        "fake_rating",
    ]
    assert "first half only" in page and "table_conditions" in page


def test_a_condition_is_declared_once_and_the_paper_s_four_stay():
    with condition_declared(TOY_RECORD):
        assert condition_table.names() == ("original", "no_rating", TOY, "no_opinion", "fake_rating")
        assert condition_table.names(paper_only=True) == ("original", "no_rating", "no_opinion", "fake_rating")
        with pytest.raises(ValueError, match="already declared"):
            condition_table.declare_condition(TOY_RECORD)
    with pytest.raises(KeyError, match="not declared"):
        condition_table.record(TOY)
    with pytest.raises(ValueError, match="paper's four"):
        condition_table.withdraw_condition("no_opinion")
    with pytest.raises(ValueError, match="reference must be one of"):
        ConditionRecord("x", "x", 9, "#000000", "o", "", "label", first_half)


def test_the_paper_s_records_say_what_the_paper_s_tables_read():
    """Herding reference (Eq. 1), variants per report and card labels of the paper's four, as Fin-Bias
    Sections 3 and 5.1 define them: only the fake rating is measured against the rating shown, and only it
    has two variants when both other ratings are shown."""
    refs = {r.name: r.reference for r in condition_table.declared()}
    assert refs == {"original": "analyst", "no_rating": "analyst", "fake_rating": "shown", "no_opinion": "analyst"}
    assert {n: condition_table.rows_per_report(n, "both") for n in refs} == {
        "original": 1,
        "no_rating": 1,
        "fake_rating": 2,
        "no_opinion": 1,
    }
    assert condition_table.rows_per_report("fake_rating", "one") == 1
    assert dict(condition_table.CardLabels()) == {
        "original": "with rating",
        "no_rating": "without rating",
        "fake_rating": "fake rating shown",
    }
    assert condition_table.names(paper_only=True) == tuple(c.value for c in CONDITION_ORDER_OF_TABLES)
    assert {r.name for r in condition_table.declared()} == {c.value for c in CONDITIONS}  # the closed vocabulary
    frame = pd.DataFrame({"name": list(refs)})
    assert frame["name"].map(condition_table.color).nunique() == 4
