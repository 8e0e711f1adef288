"""The lm-eval task files of BizFinBench's rule-scored families, written from the task records
(`finlib.bizfin.tasks`): lm-eval reads one YAML per task from its include folder, and these files are that
folder's copy of the records, never edited by hand.

`python -m finlib.harness.lm_eval_yaml` rewrites `finlib/harness/lm_eval_tasks/bizfinbench_<family>.yaml`
(and removes a `bizfinbench_*.yaml` no record declares); `--check` only compares and exits 1 naming each
file that is missing, stale or undeclared (a test runs the same comparison).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path

from finlib.bizfin.tasks import TASKS, TaskRecord

FOLDER = Path(__file__).resolve().parent / "lm_eval_tasks"
PREFIX = "bizfinbench_"

TEMPLATE = """\
# BizFinBench {abbrev} (rule-scored): the authors' rule and the tolerant one (--metadata '{{"bizfin_dir": ...}}'; default the format samples)
task: bizfinbench_{lower}
custom_dataset: !function utils.bizfin_{lower}_dataset
test_split: test
output_type: generate_until
description: system
doc_to_text: user
doc_to_target: user
generation_kwargs:  # BizFinBench Section 4.2: greedy, 1,024 output tokens
  until: []
  do_sample: false
  temperature: 0.0
  max_gen_toks: 1024
process_results: !function utils.bizfin_result
metric_list:
  - metric: official
    aggregation: !function utils.bizfin_official
    higher_is_better: true
  - metric: tolerant
    aggregation: !function utils.bizfin_tolerant
    higher_is_better: true
metadata:
  version: 1.0
"""


def file_name(record: TaskRecord) -> str:
    """The task's file in the include folder (lm-eval's task name with `.yaml`)."""
    return f"{PREFIX}{record.abbrev.lower()}.yaml"


def task_yaml(record: TaskRecord) -> str:
    """One rule-scored family's lm-eval task: its dataset function (`utils.bizfin_<family>_dataset`,
    made from the same records) and the two rules as metrics."""
    if record.kind != "accuracy":
        raise ValueError(f"task {record.abbrev}: judge-scored; the lm-eval tasks cover the rule-scored families")
    return TEMPLATE.format(abbrev=record.abbrev, lower=record.abbrev.lower())


def task_files(records: Iterable[TaskRecord] | None = None) -> dict[str, str]:
    """File name -> text of every rule-scored record's task (default: every declared task)."""
    chosen = TASKS.values() if records is None else records
    return {file_name(r): task_yaml(r) for r in chosen if r.kind == "accuracy"}


def differences(folder: Path = FOLDER, records: Iterable[TaskRecord] | None = None) -> list[str]:
    """One line per file of `folder` that is missing, differs from what the records write, or that no
    record declares."""
    want = task_files(records)
    out = [f"{folder / n}: missing" for n in want if not (folder / n).is_file()]
    out += [f"{folder / n}: differs from its record (rewrite with python -m finlib.harness.lm_eval_yaml)"
            for n, text in want.items() if (folder / n).is_file() and (folder / n).read_text(encoding="utf-8") != text]
    out += [f"{p}: no task record declares it" for p in sorted(folder.glob(f"{PREFIX}*.yaml")) if p.name not in want]
    return out


def write(folder: Path = FOLDER, records: Iterable[TaskRecord] | None = None) -> list[Path]:
    """Write every rule-scored record's file into `folder` and remove the undeclared ones; the written paths."""
    want = task_files(records)
    for p in folder.glob(f"{PREFIX}*.yaml"):
        if p.name not in want:
            p.unlink()
    for name, text in want.items():
        (folder / name).write_text(text, encoding="utf-8")
    return [folder / n for n in want]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare only; exit 1 naming each stale file")
    args = ap.parse_args(argv)
    if args.check:
        problems = differences()
        print("\n".join(problems) or f"{FOLDER}: every lm-eval task file matches its record")
        return 1 if problems else 0
    for path in write():
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
