"""Every stage keeps the one contract (`finlib.core.stage`), its notebook calls it, and the runner's
stage table (`finlib.pipeline.stages`) is what the preflight reads.

The notebook check reads the notebook JSON (what papermill executes), not the stage module, so a
notebook that still calls an old entry name or another stage's module fails here.
"""
from __future__ import annotations

import json
import re
import types
from pathlib import Path

import pytest

from finlib.core.params import TOP_LEVEL
from finlib.core.stage import contract_problems
from finlib.pipeline import plan
from finlib.pipeline.stages import STAGE_MODULES, stage_module, stage_section

ROOT = Path(__file__).resolve().parents[2]
STAGES = sorted(STAGE_MODULES)


def notebook_code(stage: str) -> str:
    """The code cells of notebook NN_*.ipynb, joined (the one notebook of stage NN)."""
    paths = sorted((ROOT / "notebooks").glob(f"{stage}_*.ipynb"))
    assert len(paths) == 1, f"stage {stage}: expected one notebook {stage}_*.ipynb, found {[p.name for p in paths]}"
    cells = json.loads(paths[0].read_text(encoding="utf-8"))["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


def stage_alias(code: str, module: str) -> str | None:
    """The name the notebook binds `module` to (`from pkg import stage [as x]` or `import pkg.stage as x`)."""
    package, _, leaf = module.rpartition(".")
    found = re.search(rf"^from {re.escape(package)} import {leaf}(?: as (\w+))?\s*$", code, re.M)
    if found:
        return found.group(1) or leaf
    found = re.search(rf"^import {re.escape(module)} as (\w+)\s*$", code, re.M)
    return found.group(1) if found else None


def calls_contract(code: str, module: str) -> list[str]:
    """What is missing for the notebook to call `module`'s `run(` and `summary(` (empty: both called)."""
    alias = stage_alias(code, module)
    if alias is None:
        return [f"no import of {module}"]
    return [f"no call {alias}.{name}(" for name in ("run", "summary") if f"{alias}.{name}(" not in code]


@pytest.mark.parametrize("stage", STAGES)
def test_stage_module_keeps_the_contract(stage: str):
    assert contract_problems(stage_module(stage)) == []


@pytest.mark.parametrize("stage", STAGES)
def test_stage_section_is_a_params_section(stage: str):
    section = stage_module(stage).SECTION
    assert section is None or section in TOP_LEVEL, f"stage {stage}: SECTION {section!r} not in {sorted(TOP_LEVEL)}"
    assert stage_section(stage) == section   # the table's source reading agrees with the imported module


@pytest.mark.parametrize("stage", STAGES)
def test_notebook_calls_its_stage_run_and_summary(stage: str):
    assert calls_contract(notebook_code(stage), STAGE_MODULES[stage]) == []


def test_every_numbered_notebook_is_in_the_stage_table():
    ids = {p.name[:2] for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")}
    assert ids == set(STAGE_MODULES)


# ---- the checks catch what they look for (seeded faults) ----------------------------------

def _module(**names) -> types.ModuleType:
    mod = types.ModuleType("finlib.seeded.stage")
    mod.__dict__.update({"NOTEBOOK_API": (), "TABLES": (), "REPORT_KEYS": ()} | names)
    return mod


def _run(cfg, models=None):
    return None


def _summary(cfg, result):
    return ""


def test_contract_check_accepts_a_good_module():
    assert contract_problems(_module(SECTION="scoring", run=_run, summary=_summary)) == []


def test_contract_check_reports_a_missing_summary():
    problems = contract_problems(_module(SECTION="scoring", run=_run))
    assert problems and "no `summary`" in problems[0]


@pytest.mark.parametrize("extra", ["positional", "keyword_only"])
def test_contract_check_reports_run_with_an_extra_required_parameter(extra: str):
    def run_positional(cfg, models):
        return None

    def run_keyword_only(cfg, *, models):
        return None

    fn = run_positional if extra == "positional" else run_keyword_only
    problems = contract_problems(_module(SECTION="scoring", run=fn, summary=_summary))
    assert len(problems) == 1 and "run takes ['cfg', 'models']" in problems[0]


def test_contract_check_reports_a_section_that_is_not_a_name():
    assert contract_problems(_module(SECTION=["scoring"], run=_run, summary=_summary))


def test_notebook_check_reports_an_old_entry_name_and_another_module():
    module = "finlib.finbias.scoring.stage"
    good = "from finlib.finbias.scoring import stage\nres = stage.run(cfg)\nstage.summary(cfg, res)"
    assert calls_contract(good, module) == []
    old = ("import finlib.finbias.scoring.stage as scoring\nres = scoring.score_run(cfg)\n"
           "scoring.caveat_banner(cfg, res)")
    assert calls_contract(old, module) == ["no call scoring.run(", "no call scoring.summary("]
    other = "from finlib.finbias.labels import stage\nres = stage.run(cfg)\nstage.summary(cfg, res)"
    assert calls_contract(other, module) == [f"no import of {module}"]


def test_preflight_reads_the_stage_table(monkeypatch):
    """The preflight's sections come from each stage's SECTION: a stage's entry changed in the table
    changes what a partial run checks."""
    assert plan.stage_sections(["02", "03"]) == {"perturb", "inference"}
    assert plan.stage_sections(None) >= {"data", "perturb", "inference", "dpo", "bizfin"}
    monkeypatch.setattr("finlib.pipeline.stages.stage_section", lambda s: {"04": "bizfin"}.get(s))
    assert plan.stage_sections(["04", "09"]) == {"bizfin"}


def test_stage_section_reads_the_source_without_importing(monkeypatch):
    """The runner's startup must not pay for importing every stage: `stage_section` reads SECTION
    from the source, and imports only when the value is not a literal."""
    import finlib.pipeline.stages as stages_table

    monkeypatch.setattr(stages_table, "stage_module", lambda s: pytest.fail(f"stage {s} imported"))
    assert [stages_table.stage_section(s) for s in STAGES] == [stage_module(s).SECTION for s in STAGES]
