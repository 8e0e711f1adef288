"""The herding card: sampling, the stated interval width, published points, the paired second card, the
params it runs under and the files it writes (one-page PDF, the answers one click away, n on every point).
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pypdf
import pytest
from scipy.stats import binomtest

from finlib.core.config import load_run, repo_root
from finlib.finbias.scoring.metrics import metrics_long, paired_tests
from finlib.pipeline.card import CardRequest, card_params, sample_reports
from finlib.pipeline.card_render import CardData, write_card
from finlib.pipeline.card_stats import (
    answer_sample,
    card_tests,
    headline,
    paired_between_cards,
    planning_half_width,
    published_points,
    sector_lines,
)


def _reports(sizes: dict[tuple[str, int], int]) -> pd.DataFrame:
    rows = [
        {"report_id": f"{s[:3]}{y}-{i}", "sector": s, "date": f"{y}-06-01"}
        for (s, y), k in sizes.items()
        for i in range(k)
    ]
    return pd.DataFrame(rows)


def test_sample_is_proportional_across_sector_years_by_hand():
    reps = _reports({("Energy", 2020): 60, ("Technology", 2021): 30, ("Utilities", 2022): 10})
    got, rule = sample_reports(reps, 10, seed=1)
    assert got["sector"].value_counts().to_dict() == {"Energy": 6, "Technology": 3, "Utilities": 1}
    assert got["report_id"].is_unique and "3 sector x year strata" in rule
    again, _ = sample_reports(reps, 10, seed=1)
    assert again["report_id"].tolist() == got["report_id"].tolist()


def test_small_folder_is_used_whole():
    reps = _reports({("Energy", 2020): 4})
    got, rule = sample_reports(reps, 200, seed=0)
    assert len(got) == 4 and rule == "all 4 reports"


def test_planning_half_width_is_the_worst_case_binomial():
    assert planning_half_width(100) == pytest.approx(0.098)
    assert planning_half_width(200) == pytest.approx(1.96 * np.sqrt(0.25 / 200))


def test_published_points_are_the_printed_average_rows():
    path = repo_root() / "finlib" / "reference" / "paper_tables" / "finbias_table4_herding_with_without.csv"
    with path.open(encoding="utf-8") as fh:
        printed = {r["model"]: float(r["with_rating"]) for r in csv.DictReader(fh) if r["sector"] == "Average"}
    got = published_points().set_index("model")
    assert set(got.index) == set(printed)
    for model, value in printed.items():
        assert got.loc[model, "with_rating"] == pytest.approx(value / 100)
    assert (got["n"] == 8868).all() and got["source"].str.startswith("published").all()


def test_second_card_pairs_items_and_matches_an_exact_binomial():
    items = [f"r{i}-original" for i in range(4)]
    base = {"item_id": items, "condition": "original", "reference_rating": "bullish"}
    a = pd.DataFrame({**base, "answer": ["bullish", "bullish", "neutral", "bullish"]})
    b = pd.DataFrame({**base, "answer": ["bullish", "bearish", "neutral", None]})
    got = paired_between_cards(a, b).iloc[0]
    assert (got["n_pairs"], got["only_a"], got["only_b"]) == (4, 2, 0)
    assert (got["herding_a"], got["herding_b"]) == (0.75, 0.25)
    assert got["pvalue"] == pytest.approx(binomtest(2, 2, 0.5).pvalue)


def test_card_params_pass_the_schema(tmp_path):
    req = CardRequest(name="card-schema", reports="x", prices="p.csv", market="m.csv")
    params = card_params(req, tmp_path / "reports.parquet", None)
    pfile = tmp_path / "card-schema.yaml"
    import yaml

    pfile.write_text(yaml.safe_dump(params), encoding="utf-8")
    cfg = load_run("card-schema", pfile, make_dirs=False)
    assert cfg.params["data"]["source"] == "local" and cfg.params["inference"]["models"] == ["smollm2-135m"]
    assert cfg.params["data"]["reports"]["path"] == str(tmp_path / "reports.parquet")


def _scored_rows(n_firms: int = 12, per_firm: int = 3, seed: int = 0) -> pd.DataFrame:
    """Rows as stage 04 scores them: one model, three conditions, a planted herding rate per condition."""
    rng = np.random.default_rng(seed)
    planted = {"original": 0.9, "no_rating": 0.6, "fake_rating": 0.3}
    out = []
    for f in range(n_firms):
        for j in range(per_firm):
            rid = f"F{f}-{j}"
            for cond, p in planted.items():
                ref = "bearish" if cond == "fake_rating" else "bullish"
                hit = rng.random() < p
                out.append(
                    {
                        "model": "m",
                        "condition": cond,
                        "report_id": rid,
                        "item_id": f"{rid}-{cond}",
                        "ticker": f"F{f}",
                        "sector": "Energy" if f < 6 else "Technology",
                        "mode": "generate",
                        "answer": ref if hit else "neutral",
                        "parsed": True,
                        "reference_rating": ref,
                        "label": None,
                        "p_bullish": np.nan,
                        "p_neutral": np.nan,
                        "p_bearish": np.nan,
                    }
                )
    return pd.DataFrame(out)


def test_card_files_show_n_on_every_point_and_one_page_pdf(tmp_path):
    rows = _scored_rows()
    metrics = metrics_long(rows, reps=200, seed=0)
    tests = paired_tests(rows, reps=200, seed=0)
    head = headline(metrics, "m")
    herd = head[head["metric"] == "herding"].set_index("condition")["value"]
    for cond in ("original", "no_rating", "fake_rating"):  # Eq. 1 by hand: hits / all rows
        sub = rows[rows["condition"] == cond]
        assert herd[cond] == pytest.approx((sub["answer"] == sub["reference_rating"]).mean())
    cfg = load_run("default", make_dirs=False)
    req = CardRequest(name="t", model="m", n_reports=36)
    data = CardData(
        cfg,
        req,
        {"sample": "36 test reports"},
        head,
        sector_lines(metrics, "m", min_n=20),
        card_tests(tests, "m"),
        {"requests": len(rows)},
        answer_sample(rows, "m"),
        published_points(),
        rows,
        {},
    )
    index = write_card(data, tmp_path)
    page = index.read_text(encoding="utf-8")
    assert page.count("n=36") >= 3 and "n=8868" in page and "answers.html" in page
    assert f"n=36: ±{planning_half_width(36):.1%}" in page
    assert "Synthetic data" in page  # the default params file is the embedded synthetic run
    assert "Energy" not in _section(page, "Sectors") and "No sector reaches" in page  # 18 < 20 per sector
    assert len(pypdf.PdfReader(str(tmp_path / "card.pdf")).pages) == 1
    answers = (tmp_path / "answers.html").read_text(encoding="utf-8")
    assert answers.count("<tr>") == 1 + 3 * 20


def _section(page: str, title: str) -> str:
    m = re.search(rf"<h2>{title}.*?</h2>(.*?)(<h2>|$)", page, re.S)
    return m.group(1) if m else ""


def test_the_makefile_passes_the_card_variables():
    text = Path(repo_root() / "Makefile").read_text(encoding="utf-8")
    block = text[text.index("\ncard:") : text.index("\ncompare-tables:")]
    for flag in ("--model $(MODEL)", "--reports $(REPORTS)", "--prices $(PRICES)", "--yes"):
        assert flag in block


def test_own_folder_without_prices_reaches_stage_00_artifacts(tmp_path):
    """A folder of PDFs and HTML -> the card's params -> stage 00's reports with the ratings the reader found."""
    import shutil
    import sys

    sys.path.insert(0, str(repo_root() / "tests" / "finbias"))
    from own_report_pdfs import build_fpdf, build_scan

    from finlib.pipeline.card import prepare, unpriced_data_stage

    root = tmp_path / "repo"
    shutil.copytree(repo_root() / "params", root / "params")
    folder = tmp_path / "mine"
    folder.mkdir()
    build_fpdf(folder / "NWFT_2024-03-12.pdf", pages=2)
    build_scan(folder / "SCAN_2024-01-02.pdf")
    (folder / "RDGM_2023-06-05.html").write_text(
        "<p>Ridgeway Mills</p><p>We downgrade Ridgeway Mills to Sell on weaker pricing.</p>", encoding="utf-8"
    )
    cfg, notes = prepare(CardRequest(name="mine", reports=str(folder)), root=root)
    assert notes["counts"] == {"reports": 2, "excluded: no text layer": 1}
    assert [x["source_file"] for x in notes["exclusions"]] == ["SCAN_2024-01-02.pdf"]
    unpriced_data_stage(cfg)
    got = pd.read_parquet(cfg.processed_dir / "reports.parquet").set_index("report_id")
    assert got["analyst_rating"].to_dict() == {"NWFT_2024-03-12": "bullish", "RDGM_2023-06-05": "bearish"}
    assert got.loc["NWFT_2024-03-12", "text"].startswith("Northwind Freight (NWFT): we reiterate our Buy rating")
    assert pd.read_parquet(cfg.processed_dir / "prices.parquet").empty


def _card_root(tmp_path: Path, figures_min_sector_n: int | None = None) -> Path:
    """A throwaway repository root with the project's params (optionally a different sector threshold)."""
    import shutil

    import yaml

    root = tmp_path / "repo"
    shutil.copytree(repo_root() / "params", root / "params")
    if figures_min_sector_n is not None:
        path = root / "params" / "default.yaml"
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        data["figures"]["min_sector_n"] = figures_min_sector_n
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return root


def _gathered_page(tmp_path: Path, threshold: int, req: CardRequest | None = None) -> tuple[str, dict]:
    """Stage 04's metrics of the planted rows through `gather` and `write_card`, under a params threshold."""
    from types import SimpleNamespace

    import yaml

    from finlib.pipeline.card import gather

    root = _card_root(tmp_path / str(threshold), threshold)
    pfile = root / "params" / "card-t.yaml"
    pfile.write_text(yaml.safe_dump({"extends": str(root / "params" / "default.yaml")}), encoding="utf-8")
    cfg = load_run("card-t", pfile, root=root)
    rows = _scored_rows()
    rows.assign(input_tokens=100, output_tokens=5, cost_usd=0.0).to_parquet(cfg.processed_dir / "predictions.parquet")
    scored = SimpleNamespace(
        metrics=metrics_long(rows, reps=50, seed=0), tests=paired_tests(rows, reps=50, seed=0), rows=rows
    )
    req = req or CardRequest(name="t", model="m", n_reports=36)
    data = gather(cfg, req, {"sample": "36 test reports"}, scored, {})
    page = write_card(data, tmp_path / f"card{threshold}").read_text(encoding="utf-8")
    return page, data.usage


def test_card_sector_threshold_is_the_figures_knob(tmp_path):
    """18 reports per sector: drawn under figures.min_sector_n = 18, left out under 19; the card states it."""
    drawn, _ = _gathered_page(tmp_path, 18)
    assert "Energy" in _section(drawn, "Sectors") and "figures.min_sector_n = 18" in drawn
    hidden, _ = _gathered_page(tmp_path, 19)
    assert "Energy" not in _section(hidden, "Sectors") and "figures.min_sector_n = 19" in hidden


def _endpoint_plan(tmp_path: Path, **prices) -> tuple[list[str], float | None]:
    from finlib.pipeline.card import plan_lines, prepare

    req = CardRequest(name="ep", model="my-llm", base_url="http://127.0.0.1:9/v1", n_reports=20, **prices)
    cfg, _ = prepare(req, root=_card_root(tmp_path))
    return plan_lines(cfg, req)


def test_unpriced_endpoint_plan_says_cost_unknown_and_asks(tmp_path):
    from finlib.pipeline.card import must_ask

    lines, dollars = _endpoint_plan(tmp_path)
    assert dollars is None and must_ask(dollars)
    assert "Cost: unknown" in lines[-1] and "cannot be checked" in lines[-1]
    _, page_usage = _gathered_page(tmp_path, 18, CardRequest(name="t", model="m", base_url="http://127.0.0.1:9/v1"))
    assert str(page_usage["cost_usd"]).startswith("unknown")


def test_priced_endpoint_plan_costs_its_tokens(tmp_path):
    """The cap in dollars is the planned tokens at the given prices (checked from the plan's own token columns)."""
    from finlib.pipeline.card import must_ask, prepare
    from finlib.pipeline.plan import build_plan

    lines, dollars = _endpoint_plan(tmp_path, price_input_per_m=2.0, price_output_per_m=8.0)
    cfg, _ = prepare(
        CardRequest(name="ep", model="my-llm", base_url="http://127.0.0.1:9/v1", n_reports=20), root=tmp_path / "repo"
    )
    plan = build_plan(cfg)
    by_hand = (plan["input_tokens"].sum() * 2.0 + plan["output_tokens_cap"].sum() * 8.0) / 1e6
    assert dollars == pytest.approx(by_hand) and dollars > 0 and must_ask(dollars)
    assert "Budget cap: $5.00" in lines[-1]
    assert not must_ask(0.0)


# The stub's five replies (finlib.harness.stub_run.REPLIES) read by hand: the rating each states, None for the
# refusal. Written here, not taken from the project's parser, so the accuracy below is computed independently.
HAND_READ = {
    '{"answer": "bullish", "reason": "Revenue growth and margin expansion support upside."}': "bullish",
    '```json\n{"answer": "Neutral", "reason": "Valuation already reflects the guidance."}\n```': "neutral",
    "My rating: bearish. Leverage is rising while free cash flow turns negative.": "bearish",
    "I am not able to give investment advice on this security.": None,
    '{"answer": "bearish", "reason": "Order intake fell for a third quarter."}': "bearish",
}


def _priced_folder(folder: Path, seed: int = 7) -> tuple[Path, Path, Path]:
    """Own reports (one CSV) with a long prices file and a market file: geometric random walks, each firm's
    return = market + noise, plus a planted drift over the 60 days after each report (up for Buy, down for Sell)."""
    rng = np.random.default_rng(seed)
    days = pd.bdate_range("2021-01-04", "2024-06-28")
    market = 0.0003 + 0.011 * rng.standard_normal(len(days))
    tickers = [f"TK{i}" for i in range(8)]
    words = {"bullish": "Buy", "neutral": "Hold", "bearish": "Sell"}
    reports, drift = [], {t: np.zeros(len(days)) for t in tickers}
    for i in range(32):
        t, rating = tickers[i % 8], ("bullish", "neutral", "bearish")[i % 3]
        day = int(rng.integers(300, len(days) - 120))
        drift[t][day + 1 : day + 61] += {"bullish": 0.004, "neutral": 0.0, "bearish": -0.004}[rating]
        reports.append(
            {
                "report_id": f"R{i:02d}",
                "ticker": t,
                "date": days[day].strftime("%Y-%m-%d"),
                "sector": "Energy" if i % 2 else "Technology",
                "text": f"We rate {t} Holdings a {words[rating]}. Orders in quarter {i % 4 + 1} "
                f"moved {'up' if i % 2 else 'down'} {i + 3}% and margins were {'wider' if i % 3 else 'flat'}.",
            }
        )
    folder.mkdir(parents=True)
    pd.DataFrame(reports).to_csv(folder / "reports.csv", index=False)
    prices = [
        pd.DataFrame(
            {
                "date": days,
                "ticker": t,
                "adj_close": 50 * np.exp(np.cumsum(market + drift[t] + 0.015 * rng.standard_normal(len(days)))),
            }
        )
        for t in tickers
    ]
    pfile, mfile = folder.parent / "prices.csv", folder.parent / "market.csv"
    pd.concat(prices).assign(date=lambda d: d["date"].dt.strftime("%Y-%m-%d")).to_csv(pfile, index=False)
    pd.DataFrame({"date": days.strftime("%Y-%m-%d"), "market_close": 3000 * np.exp(np.cumsum(market))}).to_csv(
        mfile, index=False
    )
    return folder, pfile, mfile


@pytest.mark.slow
def test_card_accuracy_with_prices_end_to_end(tmp_path, monkeypatch):
    """Own reports + prices + market -> stages 00-04 against a stub endpoint -> the card's accuracy cell equals
    the share of original-condition answers (read by hand) equal to the return-based label stage 01 wrote."""
    from finlib.harness.stub_run import VariedStub
    from finlib.pipeline.card import build_card
    from finlib.rehearsal.stub_server import ThreadedStub

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("CARD_STUB_KEY", "stub-key")
    folder, pfile, mfile = _priced_folder(tmp_path / "mine")
    stub = ThreadedStub()
    stub.stub = VariedStub()
    root = _card_root(tmp_path)
    req = CardRequest(
        name="priced",
        model="stub-llm",
        reports=str(folder),
        prices=str(pfile),
        market=str(mfile),
        base_url="",
        api_key_env="CARD_STUB_KEY",
        price_input_per_m=1.0,
        price_output_per_m=2.0,
    )
    with stub:
        req.base_url = stub.base_url
        index = build_card(req, confirm=None, root=root)
    card = json.loads((index.parent / "card.json").read_text(encoding="utf-8"))
    cell = next(h for h in card["headline"] if h["metric"] == "accuracy" and h["condition"] == "original")
    processed = load_run("priced", index.parent / "priced.yaml", root=root, make_dirs=False).processed_dir
    labels = pd.read_parquet(processed / "labels.parquet").set_index("report_id")["label"]
    assert labels.notna().sum() >= 20 and set(labels.dropna()) == {"bullish", "neutral", "bearish"}
    pred = pd.read_parquet(processed / "predictions.parquet")
    orig = pred[pred["condition"] == "original"]
    assert len(orig) == 32 and orig["raw_text"].isin(list(HAND_READ)).all()
    said = orig["raw_text"].map(HAND_READ)
    truth = orig["report_id"].map(labels)
    scored = truth.notna()
    assert int(cell["n"]) == int(scored.sum())
    assert cell["value"] == pytest.approx(float((said[scored] == truth[scored]).mean()))
    assert "accuracy" in index.read_text(encoding="utf-8")
    # the plan counts the folder's 32 reports, not the 200 a card asks for by default
    assert (index.parent / "plan.md").read_text(encoding="utf-8").startswith("Card `priced`: 32 reports;")


def test_unpriced_endpoint_card_asks_and_spends_nothing_when_declined(tmp_path, monkeypatch):
    """The card's own flow: the free stages, then the question (cost unknown), a no, and no call sent."""
    from finlib.pipeline.card import build_card

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder, _, _ = _priced_folder(tmp_path / "mine")
    asked: list = []

    def decline(lines: list[str], dollars: float | None) -> bool:
        asked.append((lines[-1], dollars))
        return False

    req = CardRequest(name="ep", model="my-llm", reports=str(folder), base_url="http://127.0.0.1:9/v1")
    with pytest.raises(SystemExit, match="not confirmed; nothing spent"):
        build_card(req, confirm=decline, root=_card_root(tmp_path))
    assert len(asked) == 1 and asked[0][1] is None and "Cost: unknown" in asked[0][0]
    processed = tmp_path / "repo" / "data" / "processed" / "ep"
    assert (processed / "conditions.parquet").exists() and not (processed / "predictions.parquet").exists()


def test_plan_over_the_budget_says_the_card_stops_partway(tmp_path):
    """$1,000 per million input tokens: 20 reports' plan costs more than a $0.50 budget, and the plan says so."""
    lines, dollars = _endpoint_plan(tmp_path, price_input_per_m=1000.0, price_output_per_m=0.0, budget_usd=0.5)
    assert dollars > 0.5 and "Budget cap: $0.50" in lines[-1]
    assert f"plan's cap (${dollars:.2f}) is over it" in lines[-1] and "--budget-usd" in lines[-1]
    under, cheap = _endpoint_plan(tmp_path / "b", price_input_per_m=0.01, price_output_per_m=0.0, budget_usd=0.5)
    assert cheap < 0.5 and "over it" not in under[-1]


def test_embedded_default_is_smaller_than_a_folders_and_states_its_width(tmp_path):
    """No folder: the embedded size (its synthetic corpus and the plan's stated width); a folder: 200."""
    from finlib.pipeline.card import DEFAULT_REPORTS, EMBEDDED_REPORTS, main, plan_lines, prepare

    assert DEFAULT_REPORTS == 200 and EMBEDDED_REPORTS < DEFAULT_REPORTS
    assert CardRequest(name="x", reports="folder").n_reports == 200
    req = CardRequest(name="emb")
    assert req.n_reports == EMBEDDED_REPORTS
    cfg, notes = prepare(req, root=_card_root(tmp_path))
    assert cfg.params["data"]["synthetic"]["n_reports"] == EMBEDDED_REPORTS
    lines, dollars = plan_lines(cfg, req)
    half = 1.96 * np.sqrt(0.25 / EMBEDDED_REPORTS)
    assert lines[0].startswith(f"Card `emb`: {EMBEDDED_REPORTS} reports;") and f"±{half:.1%}" in lines[0]
    assert dollars == 0.0
    with pytest.raises(SystemExit, match="at least 1 report"):
        main(["--n", "0"])


def test_reports_stage_02_left_out_of_a_condition_are_named(tmp_path):
    """A hand-built conditions table: one report skipped in no_rating, one set aside everywhere, a skipped
    no_opinion row (not on the card); each card condition a report left is one named row, with its file."""
    from types import SimpleNamespace

    from finlib.pipeline.card import condition_exclusions, note_stage02_exclusions

    rows = [
        ("A", "original", "ok", None),
        ("A", "no_rating", "skipped", "no rating statement to remove"),
        ("A", "fake_rating", "ok", None),
        ("A", "no_opinion", "skipped", "no opinion sentence"),
        ("B", "original", "skipped", "set aside: fake_rewrite_check"),
        ("B", "no_rating", "skipped", "set aside: fake_rewrite_check"),
        ("B", "fake_rating", "skipped", "set aside: fake_rewrite_check"),
        ("C", "original", "ok", None),
    ]
    cond = pd.DataFrame(rows, columns=["report_id", "condition", "status", "skip_reason"])
    got = condition_exclusions(cond, {"A": "a.pdf"})
    assert got["source_file"].tolist() == ["a.pdf", "B", "B", "B"]
    assert got["reason"].tolist() == [
        "stage 02: no rating statement to remove",
        *["stage 02: set aside: fake_rewrite_check"] * 3,
    ]
    assert got["detail"].iloc[0] == "left out of condition no_rating (report A)"
    processed, out = tmp_path / "processed", tmp_path / "card"
    processed.mkdir()
    (out / "inputs").mkdir(parents=True)
    cond.to_parquet(processed / "conditions.parquet")
    pd.DataFrame({"report_id": ["A", "B", "C"], "source_file": ["a.pdf", "b.html", "c.txt"]}).to_parquet(
        out / "inputs" / "reports.parquet"
    )
    notes = {
        "counts": {"reports": 3},
        "exclusions": [{"source_file": "scan.pdf", "reason": "no text layer", "detail": ""}],
    }
    note_stage02_exclusions(SimpleNamespace(processed_dir=processed), notes, out)
    assert notes["counts"] == {
        "reports": 3,
        "left out of a condition: stage 02: set aside: fake_rewrite_check": 3,
        "left out of a condition: stage 02: no rating statement to remove": 1,
    }
    written = pd.read_csv(out / "excluded.csv")
    assert written["source_file"].tolist() == ["scan.pdf", "a.pdf", "b.html", "b.html", "b.html"]


@pytest.mark.slow
def test_budget_cap_stops_the_card_and_a_rerun_pays_only_the_rest(tmp_path, monkeypatch):
    """A priced stub endpoint: a $1 budget stops stage 03 after some answers; the rerun with a larger budget
    sends only the requests not yet answered (the stub counts them), and a third run sends none."""
    from finlib.harness.stub_run import VariedStub
    from finlib.llm.openai_backend import BudgetExceeded
    from finlib.pipeline.card import build_card
    from finlib.rehearsal.stub_server import ThreadedStub

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("CARD_STUB_KEY", "stub-key")
    folder, _, _ = _priced_folder(tmp_path / "mine")
    root = _card_root(tmp_path)
    stub = ThreadedStub()
    stub.stub = VariedStub()
    with stub:
        req = CardRequest(
            name="cap",
            model="stub-llm",
            reports=str(folder),
            base_url=stub.base_url,
            api_key_env="CARD_STUB_KEY",
            price_input_per_m=1000.0,
            price_output_per_m=0.0,
            budget_usd=1.0,
        )
        with pytest.raises(BudgetExceeded, match="stopped before exceeding inference.budget_usd=1.00"):
            build_card(req, confirm=None, root=root)
        first = stub.stub.n_requests
        assert not (root / "runs" / "cap" / "card" / "index.html").exists()
        req.budget_usd = 1000.0
        build_card(req, confirm=None, root=root)
        second = stub.stub.n_requests - first
        build_card(req, confirm=None, root=root)
        third = stub.stub.n_requests - first - second
    processed = load_run("cap", root / "runs" / "cap" / "card" / "cap.yaml", root=root, make_dirs=False).processed_dir
    pred = pd.read_parquet(processed / "predictions.parquet")
    unique_prompts = len(stub.stub.answers)
    assert 0 < first < unique_prompts and first + second == unique_prompts and third == 0
    assert set(stub.stub.answers.values()) == {1}  # no prompt was paid twice
    assert pred["status"].eq("ok").all() and len(pred) == 128


def test_second_card_is_read_from_its_run_and_drawn_beside(tmp_path):
    """`--against other`: gather reads runs/other/card/rows.parquet and the card draws both, paired per
    condition on the 36 shared items; the herding of each side is Eq. 1 counted here by hand."""
    other_rows = _scored_rows(seed=1)
    other = tmp_path / "18" / "repo" / "runs" / "other" / "card"
    other.mkdir(parents=True)
    other_rows.to_parquet(other / "rows.parquet", index=False)
    page, _ = _gathered_page(tmp_path, 18, CardRequest(name="t", model="m", n_reports=36, against="other"))
    beside = _section(page, "Beside card other")
    assert beside and "fake_rating" in beside
    mine = _scored_rows()
    for cond in ("original", "no_rating", "fake_rating"):
        a, b = mine[mine["condition"] == cond], other_rows[other_rows["condition"] == cond]
        assert len(a) == len(b) == 36
        ha, hb = (a["answer"] == a["reference_rating"]).mean(), (b["answer"] == b["reference_rating"]).mean()
        assert f"<tr><td>{cond}</td><td>36</td><td>{ha:.3f}</td><td>{hb:.3f}</td>" in beside
    with pytest.raises(SystemExit, match="no card named 'absent'"):
        _gathered_page(tmp_path / "x", 18, CardRequest(name="t", model="m", n_reports=36, against="absent"))


def test_progress_announces_the_plans_estimate_and_claims_no_time_left_after_it(monkeypatch):
    """The plan's estimate is said before the paid stage; once it ended, no line subtracts time spent from
    it (that claimed minutes left for the seconds of scoring that remain)."""
    import types

    from finlib.pipeline import card as card_mod
    from finlib.pipeline import stages as stages_mod

    ran: list[str] = []
    monkeypatch.setattr(stages_mod, "stage_module",
                        lambda s: types.SimpleNamespace(run=lambda cfg: ran.append(s) or {"stage": s}))
    cfg = types.SimpleNamespace(name="c", is_synthetic=True)
    lines: list[str] = []
    seconds: dict[str, float] = {"00": 2.0}
    out = card_mod.run_stages(cfg, ["03", "04"], seconds, expect_s={"03": 600.0}, progress=lines.append)
    assert ran == ["03", "04"] and out["04"] == {"stage": "04"}
    assert lines[0] == "card c: stage 03 starts; the plan expects about 10.0 min (its bar shows the ETA)"
    assert [ln.split(" done")[0] for ln in lines[1:]] == ["card c: stage 03", "card c: stage 04"]
    assert not any("left" in ln for ln in lines)
    assert set(seconds) == {"00", "03", "04"}
