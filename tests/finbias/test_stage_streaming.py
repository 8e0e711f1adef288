"""Stage 03 at the paper's size keeps one model's rows in memory: conditions read a row group at
a time, messages built as the sender takes each call, each model's rows parsed and written as a
part, the parts joined into one predictions artifact equal to the whole-frame one."""
from __future__ import annotations

import collections.abc
import json

import pandas as pd
import pytest
import yaml

from finlib.core.artifacts import ArtifactTexts, artifact_path, write_frame
from finlib.finbias.inference import stage
from finlib.finbias.prompts import build_messages
from finlib.llm.store import Result


def conditions(n_reports: int = 5) -> pd.DataFrame:
    rows = []
    for i in range(n_reports):
        for cond in ("original", "no_rating"):
            rows.append({"item_id": f"R{i}:{cond}", "report_id": f"R{i}", "condition": cond,
                         "text": (f"We rate Firm {i} a Buy. " if cond == "original" else "")
                         + f"Revenue grew {i} percent — margins held.",
                         "analyst_rating": "bullish", "fake_rating": None, "reference_rating": "bullish",
                         "status": "ok", "skip_reason": None})
    rows[3].update(status="skipped", skip_reason="no rating sentence", text=None)
    return pd.DataFrame(rows)


def test_artifact_texts_reads_like_the_dict_of_texts_and_each_group_once_in_file_order(tmp_run):
    df = conditions()
    write_frame(tmp_run, "conditions", df, row_group_size=3)
    texts = ArtifactTexts(artifact_path(tmp_run, "conditions"))
    assert texts._file.num_row_groups == 4
    want = {k: t for k, t in zip(df["item_id"], df["text"]) if isinstance(t, str)}
    reads = []
    real = texts._file.read_row_group
    texts._file.read_row_group = lambda g, **kw: reads.append(g) or real(g, **kw)
    assert {k: texts[k] for k in df["item_id"] if k in want} == want
    assert reads == [0, 1, 2, 3]  # in file order: every group read once
    assert "R1:no_rating" not in texts and texts.get("R1:no_rating") is None  # a null text is absent
    assert len(texts) == len(df)
    frames = list(texts.frames(["item_id"]))
    assert [list(f.index) for f in frames] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert pd.concat(frames)["item_id"].tolist() == df["item_id"].tolist()


def test_blank_ok_text_is_named_by_row_when_read_by_groups(tmp_run):
    df = conditions()
    df.loc[7, "text"] = "  \n "
    write_frame(tmp_run, "conditions", df, row_group_size=3)
    with pytest.raises(ValueError, match=r"row 7 \(item_id 'R3:no_rating'\), field 'text'"):
        stage.open_conditions(tmp_run)


def two_models(tmp_run) -> None:
    records = [{"name": name, "backend": "openai", "model_id": f"{name}-id", "base_url": "https://x.invalid/v1",
                "api_key_env": "STREAM_KEY", "supports_system": system, "context_length": 8192,
                "price_input_per_m": 1.0, "price_output_per_m": 2.0, "sampling": {"temperature": 0.0, "top_p": 1.0}}
               for name, system in (("zeta", True), ("alpha", False))]
    (tmp_run.root / "params" / "models_stream.yaml").write_text(yaml.safe_dump({"models": records}))
    tmp_run.params["inference"].update(registry="params/models_stream.yaml", models=["zeta", "alpha"],
                                       max_new_tokens=16, budget_usd=1.0, progress=False)


def fake_sender(seen: list):
    """Answers each request as the sender takes it: "alpha" fails on report R2, the rest answer by report."""
    def send(spec, pending, store, **kw):
        assert not isinstance(pending, list)  # an iterator: nothing built before it is taken
        for req in pending:
            seen.append(req)
            rid = req.meta["report_id"]
            ok = not (spec.name == "alpha" and rid == "R2")
            rating = ["bullish", "neutral", "bearish"][int(rid[1:]) % 3]
            store.put_many([Result.for_request(
                req, status="ok" if ok else "error", error=None if ok else "HTTP 500",
                raw_text=json.dumps({"answer": rating, "reason": "r"}) if ok else None,
                input_tokens=100, output_tokens=10, truncated_output=False if ok else None)])
    return send


@pytest.mark.slow
def test_stage_streams_messages_and_joins_per_model_parts(tmp_run, monkeypatch):
    two_models(tmp_run)
    monkeypatch.setenv("STREAM_KEY", "dummy")
    df = conditions()
    write_frame(tmp_run, "conditions", df, row_group_size=3)
    seen: list = []
    monkeypatch.setattr(stage, "send_pending", fake_sender(seen))
    monkeypatch.setattr(stage, "check_error_share", lambda *a: None)  # one failed report of five is the point
    report = stage.run(tmp_run).report

    text_of = dict(zip(df["item_id"], df["text"]))
    assert len(seen) == 2 * 9  # both models, every ok row once
    for req in seen:  # each call carries its report's messages, built from the row's own text
        assert req.messages == build_messages(text_of[req.meta["item_id"]], req.model == "zeta",
                                              "finbias-authors-v1")

    pred = pd.read_parquet(artifact_path(tmp_run, "predictions"))
    assert list(pred.columns) == stage.PREDICTION_COLUMNS
    assert pred[["model", "mode", "item_id"]].equals(
        pred[["model", "mode", "item_id"]].sort_values(["model", "mode", "item_id"]).reset_index(drop=True))
    assert pred.groupby("model").size().to_dict() == {"alpha": 10, "zeta": 10}  # 9 ok + the skipped row each
    assert str(pred["truncated_output"].dtype) == "boolean" and str(pred["output_room"].dtype) == "Int64"
    zeta, alpha = pred[pred["model"] == "zeta"], pred[pred["model"] == "alpha"]
    assert zeta["error"].isna().sum() == 9 and (zeta["status"] == "skipped").sum() == 1
    assert alpha.loc[alpha["report_id"] == "R2", "error"].tolist() == ["HTTP 500", "HTTP 500"]
    got = pred[pred["status"] == "ok"]
    assert (got["answer"] == [["bullish", "neutral", "bearish"][int(r[1:]) % 3] for r in got["report_id"]]).all()
    assert report["answer_status"] == {"answered": 16, "not_answered": 2, "skipped": 2, "answered_unparsed": 0,
                                       "answered_truncated": 0, "answered_truncated_read": 0}
    assert report["peak_rss_mb"] >= report["peak_rss_mb_sending"] > 0
    assert not (tmp_run.processed_dir / ".predictions-parts").exists()

    # the same rows as one frame of every model's rows, the way the stage wrote them before parts
    whole = stage.to_frame([r for r in map(dict, pred[stage.CALL_COLUMNS].to_dict("records"))], text_of)
    pd.testing.assert_frame_equal(pred.astype(object).where(pred.notna(), None),
                                  whole.astype(object).where(whole.notna(), None))

    slim = stage.read_predictions(tmp_run, text=False)
    assert "raw_text" not in slim.columns and len(slim) == len(pred)
    preview = stage.generated_rows(tmp_run, per_model=2)
    assert preview.groupby("model").size().to_dict() == {"alpha": 2, "zeta": 2}
    assert preview["raw_text"].notna().all()

    seen.clear()  # a rerun sends only what is not answered, and builds messages for those alone
    stage.run(tmp_run)
    assert sorted(r.meta["item_id"] for r in seen) == ["R2:no_rating", "R2:original"]


def test_plan_without_messages_keys_as_the_plan_with_them():
    spec = stage.ModelSpec(name="m", backend="openai", model_id="m", supports_system=False, context_length=8192,
                           price_input_per_m=0.0, price_output_per_m=0.0, sampling={"temperature": 0.0})
    inf = {"max_input_tokens": None, "max_new_tokens": 16, "dtype": "auto", "prompt_version": "finbias-authors-v1",
           "constrained_json": []}
    ok = conditions().query("status == 'ok'")
    full = stage.plan_requests(ok, spec, lambda r: ["generate"], inf, len, 10)
    slim = stage.plan_requests(ok, spec, lambda r: ["generate"], inf, len, 10, keep_messages=False)
    assert [r.key for r in slim] == [r.key for r in full] and all(r.messages is None for r in slim)
    texts = dict(zip(ok["item_id"], ok["text"]))
    built = stage.with_messages(slim, texts, spec, inf, len, 10)
    assert isinstance(built, collections.abc.Iterator)
    assert list(built) == full


def test_artifact_texts_subset_reads_each_group_once_in_file_order_whatever_the_ids_order(tmp_run):
    df = conditions()
    write_frame(tmp_run, "conditions", df, row_group_size=3)
    texts = ArtifactTexts(artifact_path(tmp_run, "conditions"))
    reads = []
    real = texts._file.read_row_group
    texts._file.read_row_group = lambda g, **kw: reads.append(g) or real(g, **kw)
    wanted = ["R4:no_rating", "R0:original", "R1:no_rating", "R2:original", "R0:no_rating", "nowhere"]
    got = texts.subset(wanted)
    text_of = {k: t for k, t in zip(df["item_id"], df["text"]) if isinstance(t, str)}
    assert got == {k: text_of[k] for k in wanted if k in text_of}  # the null text and the unknown id absent
    assert "R1:no_rating" not in got and reads == [0, 1, 3]  # groups 0, 1 and 3, once each, in file order


@pytest.mark.slow
def test_rows_read_back_in_chunks_write_the_artifact_and_report_of_one_pass(tmp_run, monkeypatch):
    """A model's rows are read back, parsed and written `ROWS_PER_CHUNK` at a time: any chunk size,
    down to one row, gives the predictions, draws and report that reading every row at once gives."""
    two_models(tmp_run)
    monkeypatch.setenv("STREAM_KEY", "dummy")
    write_frame(tmp_run, "conditions", conditions(7), row_group_size=4)
    monkeypatch.setattr(stage, "send_pending", fake_sender([]))
    monkeypatch.setattr(stage, "check_error_share", lambda *a: None)
    runs = {}
    for size in (10_000, 3, 1):
        monkeypatch.setattr(stage, "ROWS_PER_CHUNK", size)
        report = stage.run(tmp_run).report
        for m in report["models"].values():  # the first run sends, the others read the store
            for k in ("wall_s", "cached", "sent"):
                m.pop(k)
        for k in ("wall_s", "peak_rss_mb", "peak_rss_mb_sending", "budget_spent_this_run_usd"):
            report.pop(k)
        runs[size] = (pd.read_parquet(artifact_path(tmp_run, "predictions")),
                      pd.read_parquet(artifact_path(tmp_run, "draws")), report)
    whole, *chunked = runs.values()
    assert len(whole[0]) == 2 * 14 and whole[0]["raw_text"].notna().sum() == 2 * 13 - 2
    for pred, draws, report in chunked:
        pd.testing.assert_frame_equal(pred, whole[0])
        pd.testing.assert_frame_equal(draws, whole[1])
        assert report == whole[2]


@pytest.mark.slow
def test_the_summary_frame_gives_the_report_and_tables_of_the_plain_columns(tmp_run, monkeypatch):
    """The report and notebook 03's tables read predictions' text columns as sorted categoricals:
    the same counts, groups and order as the plain text columns (errors, skipped rows and an
    all-null column included)."""
    two_models(tmp_run)
    monkeypatch.setenv("STREAM_KEY", "dummy")
    write_frame(tmp_run, "conditions", conditions(6), row_group_size=4)
    monkeypatch.setattr(stage, "send_pending", fake_sender([]))
    monkeypatch.setattr(stage, "check_error_share", lambda *a: None)
    stage.run(tmp_run)
    plain = pd.read_parquet(artifact_path(tmp_run, "predictions"), columns=stage.SUMMARY_COLUMNS)
    summary = stage.read_summary_frame(tmp_run)
    assert isinstance(summary["model"].dtype, pd.CategoricalDtype) and list(summary["model"].cat.categories) == [
        "alpha", "zeta"]
    assert (plain["status"] == "error").sum() == 2 and (plain["status"] == "skipped").sum() == 2
    assert stage.summarise(summary, {}) == stage.summarise(plain, {})
    for table in (stage.status_summary, stage.probability_summary):
        pd.testing.assert_frame_equal(table(summary).astype(object), table(plain).astype(object))
    plain["error"] = None  # an all-null text column is read as it is
    write_frame(tmp_run, "predictions", plain)
    assert stage.summarise(stage.read_summary_frame(tmp_run), {}) == stage.summarise(plain, {})


def test_starts_with_reads_a_categorical_as_its_text():
    values = ["context refused: 9000 > 8192", None, "HTTP 500", "context refused: x", "", None]
    col = pd.Series(values, dtype="string")
    want = [isinstance(v, str) and v.startswith("context refused") for v in values]
    assert stage.starts_with(col, "context refused").tolist() == want
    assert stage.starts_with(col.astype("category"), "context refused").tolist() == want
    assert stage.starts_with(pd.Series([None, None], dtype="category"), "x").tolist() == [False, False]
    assert stage.starts_with(pd.Series(values, dtype=object), "HTTP").tolist() == [False, False, True, False, False, False]
