"""The lm-eval task files are the records' copy: one per rule-scored record, each exactly what the
generator writes, none without a record."""

from __future__ import annotations

import dataclasses

import yaml

from finlib.bizfin.tasks import TASKS
from finlib.harness import lm_eval_yaml as gen


class _FunctionTag(yaml.SafeLoader):
    """Reads lm-eval's `!function utils.x` tag as the plain string `utils.x`."""


_FunctionTag.add_constructor("!function", lambda loader, node: f"!function {loader.construct_scalar(node)}")


def test_every_rule_scored_record_has_its_file_as_the_generator_writes_it():
    assert gen.differences() == []
    shipped = sorted(p.name for p in gen.FOLDER.glob("bizfinbench_*.yaml"))
    assert shipped == sorted(f"bizfinbench_{a.lower()}.yaml" for a, t in TASKS.items() if t.kind == "accuracy")


def test_a_generated_file_names_its_task_dataset_and_both_rules():
    doc = yaml.load(gen.task_yaml(TASKS["FNC"]), Loader=_FunctionTag)
    assert doc["task"] == "bizfinbench_fnc" and doc["custom_dataset"] == "!function utils.bizfin_fnc_dataset"
    assert [m["metric"] for m in doc["metric_list"]] == ["official", "tolerant"]
    assert doc["generation_kwargs"]["max_gen_toks"] == 1024 and doc["generation_kwargs"]["do_sample"] is False


def test_a_missing_an_edited_and_an_undeclared_file_are_each_named(tmp_path):
    gen.write(tmp_path)
    (tmp_path / "bizfinbench_fnc.yaml").unlink()
    (tmp_path / "bizfinbench_sp.yaml").write_text(gen.task_yaml(TASKS["SP"]).replace("1024", "512"), encoding="utf-8")
    (tmp_path / "bizfinbench_old.yaml").write_text("task: bizfinbench_old\n", encoding="utf-8")
    problems = gen.differences(tmp_path)
    assert len(problems) == 3
    assert "bizfinbench_fnc.yaml: missing" in problems[0] and "bizfinbench_sp.yaml: differs" in problems[1]
    assert "bizfinbench_old.yaml: no task record declares it" in problems[2]
    gen.write(tmp_path)
    assert gen.differences(tmp_path) == [] and not (tmp_path / "bizfinbench_old.yaml").exists()


def test_a_record_without_its_file_fails_the_check(tmp_path):
    gen.write(tmp_path)
    extra = dataclasses.replace(TASKS["FNC"], abbrev="FNC2")
    problems = gen.differences(tmp_path, [*TASKS.values(), extra])
    assert problems == [f"{tmp_path / 'bizfinbench_fnc2.yaml'}: missing"]
    assert "bizfinbench_fdd.yaml" not in gen.task_files()  # judge-scored: no lm-eval task
