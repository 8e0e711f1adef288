"""BizFinBench tasks are one declared record each, and the task vocabulary is closed at params load.

A toy task is declared below in this one file (its record and a JSONL fixture written beside the test)
and run end to end on the smoke params: stage 07 -> Table 3 -> figure -> HTML report; the same record gets
its lm-eval task file, its rows in the plan, its column in the rehearsal's table check and its simulated
replies. A toy IteraJudge record gets its reference set and its Table 4 column."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest
from llm_helpers import api_record, write_registry

from finlib.bizfin import scorers
from finlib.bizfin.data import load_format_samples
from finlib.bizfin.official import PublishedScriptError
from finlib.bizfin.tasks import TASK_ORDER, TASKS, TaskRecord, check_record
from finlib.core.config import ConfigError, load_run

ROOT = Path(__file__).resolve().parents[2]


def _repo(tmp_path: Path, params: str) -> Path:
    """A repository root holding the project's params and one more file, `params/run.yaml`."""
    root = tmp_path / "repo"
    (root / "notebooks").mkdir(parents=True)
    shutil.copytree(ROOT / "params", root / "params")
    (root / "pyproject.toml").write_text("[project]\nname='mini'\n")
    (root / "params" / "run.yaml").write_text(params, encoding="utf-8")
    return root


def test_an_unknown_task_name_fails_at_params_load_naming_the_key_and_the_known_names(tmp_path):
    root = _repo(tmp_path, "extends: smoke.yaml\nbizfin:\n  tasks: [FNC, XYZ]\n")
    with pytest.raises(ConfigError) as err:
        load_run("run", root=root, make_dirs=False)
    msg = str(err.value)
    assert "run.yaml" in msg and "bizfin.tasks: unknown name(s) ['XYZ']" in msg
    assert "known: AEA, FNC, FTR, FTU, FQA, FDD, ER, SP, FNER" in msg


def test_a_task_listed_twice_and_a_rule_task_given_to_iterajudge_fail_at_params_load(tmp_path):
    root = _repo(tmp_path, "extends: smoke.yaml\nbizfin:\n  tasks: [FNC, FNC]\n  iterajudge:\n    tasks: [FNC]\n")
    with pytest.raises(ConfigError) as err:
        load_run("run", root=root, make_dirs=False)
    msg = str(err.value)
    assert "bizfin.tasks: listed more than once: ['FNC']" in msg
    assert "bizfin.iterajudge.tasks: unknown name(s) ['FNC']; known: FTU, FQA, FDD" in msg


def test_the_project_params_files_hold_only_known_task_names():
    for name in ("default", "smoke", "paper", "bizfinbench"):
        cfg = load_run(name, make_dirs=False)
        assert cfg["bizfin"]["tasks"], name


# ---- a toy task, declared here and nowhere else: its items (published JSONL format) and its record

TOY_ITEMS = "\n".join(
    json.dumps(
        {
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": f"第{i}条：市场趋势？只输出JSON，键为answer。"}]}
            ],
            "choices": [{"message": {"content": [{"type": "text", "text": gold}]}}],
        },
        ensure_ascii=False,
    )
    for i, gold in enumerate(("bullish", "Bullish", "bearish"), 1)
)


def toy_official(gold: str, reply: str) -> float | None:
    """The toy's published rule: the reply is one JSON object whose `answer` equals the gold exactly."""
    try:
        found = json.loads(reply)
    except json.JSONDecodeError:
        return 0.0
    return 1.0 if isinstance(found, dict) and found.get("answer") == gold else 0.0


def toy_tolerant(gold: str, reply: str, question: str) -> tuple[float, bool, str | None, str]:
    """The toy's tolerant reading: the same field, compared without case."""
    found, value = scorers.answer_field(reply)
    ok = found and str(value).strip().lower() == gold.strip().lower()
    return float(ok), found, None if value is None else str(value), "" if found else "no answer field"


def toy_record(samples: Path) -> TaskRecord:
    return TaskRecord(
        abbrev="TOY",
        name="Toy Trend Call",
        file_stem="Toy_Trend_Call",
        kind="accuracy",
        dimensions=("Trend judgment",),
        table6_name=None,
        scorer=scorers.rule_pair(toy_official, toy_tolerant),
        official_rule=toy_official,
        samples=samples,
    )


def char_count(texts: list[str]) -> list[int]:
    """Table 6's token counter here: characters (no tokenizer download)."""
    return [len(t) for t in texts]


def test_a_toy_task_declared_in_one_record_runs_through_stage_07_table_3_the_figure_and_the_report(
    tmp_path, monkeypatch
):
    """The stub answers every item {"answer": "bullish"}: the toy's three golds (bullish, Bullish, bearish)
    score 1/3 under its exact rule and 2/3 under its case-blind reading, in Table 3's TOY column."""
    from finlib.bizfin.benchmark import stage
    from finlib.bizfin.benchmark.figures import FIGURE_NAME
    from finlib.pipeline.report import build_report
    from finlib.rehearsal.stub_server import ThreadedStub

    samples = tmp_path / "toy.jsonl"
    samples.write_text(TOY_ITEMS + "\n", encoding="utf-8")
    monkeypatch.setitem(TASKS, "TOY", check_record(toy_record(samples)))
    with ThreadedStub() as stub:
        root = _repo(tmp_path, "")
        registry = write_registry(
            root, api_record("stub", stub.base_url, None, price_input_per_m=0.0, price_output_per_m=0.0)
        )
        (root / "params" / "run.yaml").write_text(
            "extends: smoke.yaml\n"
            f"inference:\n  registry: {registry}\n  progress: false\n"
            "bizfin:\n  tasks: [FNC, TOY]\n  models: [stub]\n  judge: stub\n  table6_model: stub\n"
            "  source: format_sample\n  sample_items_per_task: null\n",
            encoding="utf-8",
        )
        cfg = load_run("run", root=root)
        run = stage.run(cfg, count_tokens=char_count, tokenizer_name="characters")
    toy = run.items[run.items["task"] == "TOY"]
    assert len(toy) == 3 and (toy["source"] == "format_sample").all() and (toy["status"] == "ok").all()
    assert list(toy["official"]) == [1.0, 0.0, 0.0] and list(toy["ours"]) == [1.0, 1.0, 0.0]
    t3 = run.tables["table3"]
    assert list(t3.columns)[-2:] == ["TOY", "Average"]
    mine = t3[t3["row"] == "this run"].set_index("rule")
    assert mine.at["official", "TOY"] == pytest.approx(100 / 3) and mine.at["ours", "TOY"] == pytest.approx(200 / 3)
    assert t3.loc[t3["row"] == "paper Table 3", "TOY"].isna().all()  # the paper prints no such column
    t6 = run.tables["table6"].set_index("task")
    assert t6.at["TOY", "count"] == 3 and pd.isna(t6.at["TOY", "paper_count"])
    assert "TOY" in (cfg.tables_dir / "bizfin_table3.csv").read_text(encoding="utf-8")
    figure = next(cfg.figures_dir.glob(f"{FIGURE_NAME}.*"))
    assert figure.stat().st_size > 0
    index = build_report(cfg).read_text(encoding="utf-8")
    assert "TOY" in index and FIGURE_NAME in index


@pytest.mark.parametrize("task", [t for t in TASK_ORDER if TASKS[t].kind == "accuracy"])
def test_each_record_scorers_official_column_is_its_published_rule(task):
    """The differential test holds `official_rule` to the authors' script; the stage's official column comes
    from `scorer`: on every format sample and replies of every shape (right, wrong, adversarial) the two agree,
    NaN exactly where the rule gives no score or raises."""
    from official_replies import answer_replies, fner_replies, shaped

    rec = TASKS[task]
    for item in load_format_samples([task])[task]:
        if task == "FNER":
            replies = [r for _, r in fner_replies(item.gold, False)]
        elif task in ("FNC", "FTR"):
            replies = [r for _, r in answer_replies(item.gold, False)]
        else:
            replies = [r for _, r in shaped({"result": [item.gold], "涨跌情况": item.gold}, "result", item.gold, False)]
        for reply in [*replies, "", "不知道", '{"answer": "bullish"}']:
            try:
                want = rec.official_rule(item.gold, reply)
            except PublishedScriptError:
                want = None
            got = rec.scorer(item.gold, reply, item.question).official
            assert (math.isnan(got) and want is None) or got == want, (task, item.line, reply[:60], got, want)


# ---- the toy task through the places that list tasks: lm-eval files, the plan, the rehearsal


def toy_reply(gold: str, right: bool) -> str:
    """The toy's answer format, as its record declares it for the simulated models."""
    return json.dumps({"answer": gold if right else "sideways"})


def _toy(tmp_path: Path, monkeypatch) -> TaskRecord:
    samples = tmp_path / "toy.jsonl"
    samples.write_text(TOY_ITEMS + "\n", encoding="utf-8")
    record = check_record(dataclasses.replace(toy_record(samples), reply=toy_reply))
    monkeypatch.setitem(TASKS, "TOY", record)
    return record


def test_the_toy_record_gets_its_lm_eval_file_and_the_check_names_it_until_written(tmp_path, monkeypatch):
    from finlib.harness import lm_eval_yaml as gen

    _toy(tmp_path, monkeypatch)
    folder = tmp_path / "lm_eval_tasks"
    folder.mkdir()
    for p in gen.FOLDER.glob("bizfinbench_*.yaml"):
        shutil.copy(p, folder / p.name)
    assert gen.differences(folder) == [f"{folder / 'bizfinbench_toy.yaml'}: missing"]
    gen.write(folder)
    assert gen.differences(folder) == []
    text = (folder / "bizfinbench_toy.yaml").read_text(encoding="utf-8")
    assert "task: bizfinbench_toy\n" in text and "custom_dataset: !function utils.bizfin_toy_dataset\n" in text


def test_the_plan_sizes_the_toy_from_its_format_samples(tmp_path, monkeypatch):
    from finlib.bizfin.benchmark.plan import items_per_task, task_sizes

    _toy(tmp_path, monkeypatch)
    # three items; each question "第N条：市场趋势？只输出JSON，键为answer。" is 26 characters (counted by hand)
    sizes = task_sizes(["FNC", "TOY"])
    assert sizes.at["TOY", "numbers"] == 3 and sizes.at["TOY", "avg_len"] == pytest.approx(26.0)
    assert items_per_task({"tasks": ["FNC", "TOY"], "real_items_per_task": 2}) == {"FNC": 2, "TOY": 2}
    assert items_per_task({"tasks": ["TOY"], "real_items_per_task": None}) == {"TOY": 3}


def test_the_rehearsal_reads_the_toy_column_and_answers_in_its_format(tmp_path, monkeypatch):
    from finlib.rehearsal.rehearse import table_rows
    from finlib.rehearsal.simulated_servers import Profile, bizfin_reply

    table = tmp_path / "t3.csv"
    table.write_text("Model,FNC,TOY\nm,50.0,–\n", encoding="utf-8")
    assert table_rows(table, ["m"])["empty_cells"] == 0  # undeclared: not a task column
    record = _toy(tmp_path, monkeypatch)
    assert table_rows(table, ["m"])["empty_cells"] == 1
    right, wrong = (Profile("p", "p", 4096, bizfin_accuracy=a) for a in (1.0, 0.0))
    assert bizfin_reply(right, "TOY", "bearish", "k") == '{"answer": "bearish"}'
    assert record.official_rule("bearish", bizfin_reply(right, "TOY", "bearish", "k")) == 1.0
    assert record.official_rule("bearish", bizfin_reply(wrong, "TOY", "bearish", "k")) == 0.0


# ---- a toy IteraJudge record: its reference set, scored by its weights, and its Table 4 column


def test_a_toy_iterajudge_record_builds_its_reference_set_and_gets_a_table_4_column(monkeypatch):
    from finlib.bizfin.iterajudge import calibration, reference_set
    from finlib.bizfin.iterajudge.records import ITERAJUDGE, IteraJudgeRecord, calibration_tasks

    def toy_cases(n: int):
        return [(f"问题{q}", lambda e, q=q: f"回答{q}" + "错" * sum(e.values())) for q in range(1, n + 1)]

    toy = IteraJudgeRecord("TJ", weights=(("wrong", 70),), ladder=({}, {"wrong": 1}), cases=toy_cases)
    monkeypatch.setitem(ITERAJUDGE, "TJ", toy)
    assert calibration_tasks() == ("FDD", "FTU", "TJ")
    rows = reference_set.build("TJ")
    assert len(rows) == 2 * reference_set.QUESTIONS_PER_TASK
    assert [(r["id"], r["answer"], r["reference_score"]) for r in rows[:2]] == [
        ("TJ-q1-a1", "回答1", 100), ("TJ-q1-a2", "回答1错", 30)]
    corr = pd.DataFrame([{"judge": "j", "method": m, "task": t, "spearman": 0.5, "ci_low": 0.1, "ci_high": 0.9,
                          "n": 40} for m in ("vanilla", "iterajudge") for t in ("FDD", "TJ")])
    t4 = calibration.table4(corr)
    assert list(t4.columns) == ["source", "Methods", "FDD", "FTU", "TJ"]
    mine = t4[t4["source"] == "this run"]
    assert list(mine["TJ"]) == ["0.5000 [0.10, 0.90] (n=40)"] * 2 and list(mine["FTU"]) == ["not run"] * 2
    assert t4.loc[t4["source"] != "this run", "TJ"].isna().all()  # the paper prints no such column
    with pytest.raises(KeyError, match="no reference set for task 'FQA'"):
        reference_set.build("FQA")


def test_an_unknown_task_fails_at_params_load_when_only_the_orchestration_layer_is_imported(tmp_path):
    """The vocabulary is registered by finlib.bizfin on import; a process that imports the runner's package and
    core's loader, and nothing of the papers by hand, still refuses the name."""
    import subprocess
    import sys

    root = _repo(tmp_path, "extends: smoke.yaml\nbizfin:\n  tasks: [FNC, XYZ]\n")
    code = ("import finlib.pipeline\nfrom finlib.core.config import ConfigError, load_run\n"
            f"try:\n    load_run('run', root=__import__('pathlib').Path({str(root)!r}), make_dirs=False)\n"
            "except ConfigError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert "bizfin.tasks: unknown name(s) ['XYZ']" in out
