"""BizFinBench task files written wrong, handled as stage 00 handles Fin-Bias reports: a repeated
line is asked once and counted, control characters never reach a prompt (removed and counted), and
a task file named in another case or saved as `.json` is found -- or refused naming the candidates
-- instead of the run falling back to the format samples."""
from __future__ import annotations

import json

import pytest
from test_bizfin_data import line

from finlib.bizfin.data import BizFinDataError, check_counts, load_local, read_jsonl
from finlib.bizfin.tasks import task_info

STEM = task_info("FNC").file_stem  # Financial_Numerical_Computation


def test_a_repeated_item_line_is_asked_once_and_counted(tmp_path):
    """Drill: a BizFinBench task file repeats an item line."""
    path = tmp_path / f"{STEM}.jsonl"
    path.write_text("\n".join([line("一加一", "2"), line("二加二", "4"), line("一加一", "2")]) + "\n",
                    encoding="utf-8")
    items = read_jsonl(path, "FNC")
    assert [i.line for i in items] == [1, 2] and items.duplicates == [(3, 1)]
    counts = check_counts({"FNC": items}).iloc[0]
    assert counts["items"] == 2 and counts["duplicate_lines_excluded"] == 1


def test_control_characters_never_reach_a_bizfinbench_prompt(tmp_path):
    """Drill: NUL and other control characters in a BizFinBench item are removed and counted."""
    path = tmp_path / f"{STEM}.jsonl"
    path.write_text("\n".join([line("一加\u0000一\u0007", "2"), line("二加二\n换行", "4")]) + "\n", encoding="utf-8")
    items = read_jsonl(path, "FNC")
    prompts = json.dumps([m for i in items for m in i.chat_messages()], ensure_ascii=False)
    assert "\\u0000" not in prompts and "\\u0007" not in prompts and "\u0000" not in prompts
    assert items[0].question.endswith("一加一") and "二加二\n换行" in items[1].question  # newlines kept
    assert items.control_cleaned == 1 and check_counts({"FNC": items}).iloc[0]["control_characters_removed"] == 1


@pytest.mark.parametrize("name", [f"{STEM.lower()}.jsonl", f"{STEM}.json", f"{STEM.upper()}.JSON"])
def test_a_task_file_in_another_case_or_saved_as_json_is_found(name, tmp_path):
    """Drill: a task file named in lower case or saved as .json is found."""
    body = [line("一加一", "2"), line("二加二", "4")]
    text = "[" + ",".join(body) + "]" if name.lower().endswith(".json") else "\n".join(body)
    (tmp_path / name).write_text(text, encoding="utf-8")
    items = load_local(tmp_path, ["FNC"])
    assert [i.gold for i in items["FNC"]] == ["2", "4"] and items["FNC"][0].source == "benchmark"


def test_two_files_that_could_be_one_task_are_refused_naming_both(tmp_path):
    for name in (f"{STEM.lower()}.jsonl", f"{STEM}.json"):
        (tmp_path / name).write_text(line("一加一", "2") + "\n", encoding="utf-8")
    with pytest.raises(BizFinDataError, match=rf"2 files could be the {STEM} task file .*keep one"):
        load_local(tmp_path, ["FNC"])
