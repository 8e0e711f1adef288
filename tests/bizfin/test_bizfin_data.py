"""BizFinBench loaders: the published format, validation naming file/line/field, format samples,
the real files in ../shared (skipped with a reason when absent), counts vs Tables 2 and 6."""
from __future__ import annotations

import json
import math

import pytest

from finlib.bizfin import score_item, score_item_detail
from finlib.bizfin.data import (
    BizFinDataError,
    check_counts,
    load_format_samples,
    load_huggingface,
    load_local,
    read_jsonl,
)
from finlib.bizfin.iterajudge.judge import JudgeResult
from finlib.bizfin.tasks import JUDGE_TASKS, TASK_ORDER, TASKS, check_tasks, judge_rubric


def line(user="问题", gold="1", system=None, **extra) -> str:
    msgs = ([{"role": "system", "content": [{"text": system, "type": "text"}]}] if system is not None else [])
    msgs.append({"role": "user", "content": [{"text": user, "type": "text"}]})
    rec = {"messages": msgs, "choices": [{"index": 0, "message": {"role": "assistant",
                                                                   "content": [{"text": gold, "type": "text"}]}}]}
    rec.update(extra)
    return json.dumps(rec, ensure_ascii=False)


def test_registry_has_nine_tasks_in_table3_order():
    assert TASK_ORDER == ("AEA", "FNC", "FTR", "FTU", "FQA", "FDD", "ER", "SP", "FNER")
    assert JUDGE_TASKS == ("FTU", "FQA", "FDD")
    assert TASKS["FNER"].table6_name == "NER"
    with pytest.raises(ValueError, match="unknown task"):
        check_tasks(["FNC", "XYZ"])


def test_read_published_format(tmp_path):
    p = tmp_path / "Financial_Numerical_Computation.jsonl"
    p.write_text(line(gold=" 4.5 ", system="") + "\n\n" + line(user="第二题", gold="2") + "\n", encoding="utf-8")
    items = read_jsonl(p, "FNC")
    assert [i.line for i in items] == [1, 3] and items[0].gold == "4.5"
    assert items[0].chat_messages() == [{"role": "user", "content": "问题"}]      # empty system turn dropped


def test_system_turn_merged_for_models_without_system_role(tmp_path):
    p = tmp_path / "f.jsonl"
    p.write_text(line(system="你是分析师。", gold="1"), encoding="utf-8")
    it = read_jsonl(p, "FNC")[0]
    assert it.chat_messages(supports_system=False) == [{"role": "user", "content": "你是分析师。\n\n问题"}]
    assert it.chat_messages()[0] == {"role": "system", "content": "你是分析师。"}


@pytest.mark.parametrize("bad,field", [
    ("{not json", "<line>"),
    (json.dumps({"choices": []}), "messages"),
    (json.dumps({"messages": [{"role": "bot", "content": "x"}], "choices": [{"message": {"content": "1"}}]}),
     "messages[0].role"),
    (json.dumps({"messages": [{"role": "user", "content": [{"type": "image", "text": "x"}]}],
                 "choices": [{"message": {"content": "1"}}]}), "messages[0].content[0].type"),
    (json.dumps({"messages": [{"role": "user", "content": "q"}]}), "choices"),
    (line(gold=""), "choices[0].message.content"),
])
def test_validation_names_file_line_field(tmp_path, bad, field):
    p = tmp_path / "x.jsonl"
    p.write_text(line() + "\n" + bad + "\n", encoding="utf-8")
    with pytest.raises(BizFinDataError) as e:
        read_jsonl(p, "FNC")
    assert str(p) in str(e.value) and "line 2" in str(e.value) and f"'{field}'" in str(e.value)


def test_unreadable_gold_is_a_load_error(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text(line(gold="not a list"), encoding="utf-8")
    with pytest.raises(BizFinDataError, match="ER gold answer unreadable"):
        read_jsonl(p, "ER")
    p.write_text(line(gold="1,a"), encoding="utf-8")
    with pytest.raises(BizFinDataError, match="line 1"):
        read_jsonl(p, "AEA")


def test_judge_tasks_allow_empty_gold(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text(line(gold=""), encoding="utf-8")
    assert read_jsonl(p, "FQA")[0].gold == ""


def test_format_samples_cover_all_tasks_and_are_labelled():
    samples = load_format_samples(list(TASK_ORDER))
    assert set(samples) == set(TASK_ORDER)
    for items in samples.values():
        assert len(items) >= 2 and all(i.source == "format_sample" for i in items)
    counts = check_counts(samples)
    assert not counts["matches_paper"].any()


def test_format_samples_gold_answers_score_one():
    """Each accuracy sample's own gold, written as a model answer, is scored 1 by both rules."""
    samples = load_format_samples(list(TASK_ORDER))
    for t in ("FNC", "FTR"):
        for it in samples[t]:
            s = score_item_detail(t, it, json.dumps({"cot": "x", "answer": it.gold}, ensure_ascii=False))
            assert s.official == 1.0 and s.ours == 1.0, (t, it.id)
    aea = samples["AEA"][0]
    ids = [int(x) for x in aea.gold.split(",")]
    assert score_item("AEA", aea, json.dumps({"相关新闻序号": ids}, ensure_ascii=False)) == 1.0


def test_score_item_with_scripted_judge():
    it = load_format_samples(["FQA"])["FQA"][0]
    seen = []

    def judge(inp):
        seen.append(inp)
        return JudgeResult(inp.id, 80.0, "ok", '{"score": 80}', "")

    assert score_item("FQA", it, "<think>hmm</think>市净率是股价除以每股净资产。", judge=judge) == pytest.approx(0.8)
    assert seen[0].answer == "市净率是股价除以每股净资产。" and seen[0].dimensions == judge_rubric("FQA").names()
    assert seen[0].reference is None          # FQA has no gold text

    def invalid(inp):
        return JudgeResult(inp.id, None, "invalid", "I like it", "no JSON score")

    d = score_item_detail("FQA", it, "答案", judge=invalid)
    assert math.isnan(d.official) and not d.parsed and "invalid" in d.note       # never 0
    with pytest.raises(ValueError, match="judge"):
        score_item("FQA", it, "答案")


def test_huggingface_offline_message(monkeypatch):
    import huggingface_hub

    def offline(*a, **k):
        raise OSError("network unreachable")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    with pytest.raises(RuntimeError, match="bizfin.source: local"):
        load_huggingface(["FNC"])


@pytest.mark.shared_data
def test_real_files_load_and_match_paper_counts(shared_data):
    folder = shared_data / "bizfinbench"
    if not folder.is_dir():
        pytest.skip(f"{folder} not present")
    items = load_local(folder, list(TASK_ORDER))
    assert set(items) == {"FNC", "FTR", "FQA", "FDD", "FNER"}
    counts = check_counts(items).set_index("task")
    assert counts["matches_paper"].all()
    # the published FNER file repeats one line: asked and scored once, the copy counted (433 lines = Table 6)
    assert counts.loc["FNER", "items"] == 432 and counts.loc["FNER", "duplicate_lines_excluded"] == 1
    assert counts.loc["FNER", "table2"] == 435


@pytest.mark.shared_data
def test_real_gold_answers_score_one(shared_data):
    """Oracle: every real FNC/FTR gold, given back as the JSON answer, scores 1 under our rule; the
    official FTR rule cannot read the golds it flags as unscorable."""
    from finlib.bizfin.tasks import official_unscorable

    folder = shared_data / "bizfinbench"
    if not folder.is_dir():
        pytest.skip(f"{folder} not present")
    items = load_local(folder, ["FNC", "FTR"])
    for t, its in items.items():
        for it in its:
            s = score_item_detail(t, it, json.dumps({"cot": "x", "answer": it.gold}, ensure_ascii=False))
            assert s.ours == 1.0, (t, it.line)
            assert s.official == (0.0 if official_unscorable(t, it.gold) else 1.0), (t, it.line)


@pytest.mark.shared_data
def test_published_records_pass_straight_into_score_item(shared_data):
    """The dict read from a benchmark JSONL line is accepted as the item: its gold given back as a
    multi-line-cot answer scores like the loaded item (both rules)."""
    folder = shared_data / "bizfinbench"
    if not folder.is_dir():
        pytest.skip(f"{folder} not present")
    path = folder / "Financial_Numerical_Computation.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()[:20]
    loaded = read_jsonl(path, "FNC")[:20]
    for raw, it in zip(lines, loaded):
        rec = json.loads(raw)
        answer = '{"cot": "第一步\n第二步", "answer": "' + it.gold + '"}'
        assert score_item("FNC", rec, answer) == score_item("FNC", it, answer) == 1.0
        assert score_item_detail("FNC", rec, answer).ours == 1.0


def test_score_item_accepts_a_record_dict_and_refuses_other_types():
    rec = json.loads(line(gold="4.5"))
    assert score_item("FNC", rec, '{"cot": "1.2 + 3.3\n= 4.5", "answer": 4.5}') == 1.0
    with pytest.raises(BizFinDataError, match="choices"):
        score_item("FNC", {"messages": rec["messages"]}, '{"answer": 4.5}')
    with pytest.raises(TypeError, match="published record"):
        score_item("FNC", "not a record", '{"answer": 4.5}')


def test_failed_call_is_not_answered_not_wrong():
    rec = json.loads(line(gold="4.5"))
    s = score_item_detail("FNC", rec, None)
    assert math.isnan(s.official) and math.isnan(s.ours) and not s.parsed and "not answered" in s.note


def test_file_that_is_not_utf8_names_file_and_line(tmp_path):
    p = tmp_path / "Financial_Numerical_Computation.jsonl"
    p.write_bytes((line(gold="1") + "\n" + line(user="问题二", gold="2")).encode("utf-8") + b"\n"
                  + line(user="第三题", gold="3").encode("gbk"))
    with pytest.raises(BizFinDataError, match=rf"{p.name}, line 3: not UTF-8"):
        read_jsonl(p, "FNC")


@pytest.mark.parametrize("body", ["", "\n\n  \n"])
def test_empty_task_file_is_a_clear_error(tmp_path, body):
    folder = tmp_path / "bizfin"
    folder.mkdir()
    p = folder / "Financial_Numerical_Computation.jsonl"
    p.write_text(body, encoding="utf-8")
    with pytest.raises(BizFinDataError, match=rf"{p.name}: no items"):
        load_local(folder, ["FNC"])
