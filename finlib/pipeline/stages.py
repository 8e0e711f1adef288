"""Which module is each numbered stage: the one table the runner, the preflight and `make plan` read.

The notebook `notebooks/NN_<name>.ipynb` of stage NN calls the same module's `run` and `summary`
(`finlib.core.stage` states the contract; a test checks every module here keeps it).
The runner executes the notebooks and never imports a stage module itself: importing all ten costs
seconds (nltk, scipy, the model libraries), so `stage_section` reads `SECTION` from the module's source.
"""
from __future__ import annotations

import ast
import importlib
from pathlib import Path
from types import ModuleType

STAGE_MODULES: dict[str, str] = {
    "00": "finlib.finbias.data.stage",
    "01": "finlib.finbias.labels.stage",
    "02": "finlib.finbias.perturb.stage",
    "03": "finlib.finbias.inference.stage",
    "04": "finlib.finbias.scoring.stage",
    "05": "finlib.finbias.dpo.stage",
    "06": "finlib.finbias.figures.stage",
    "07": "finlib.bizfin.benchmark.stage",
    "08": "finlib.bizfin.iterajudge.stage",
    "09": "finlib.finbias.beyond.stage",
}

# What a notebook may import from finlib besides its stage module (`from <paper>.<stage> import stage`):
# opening a run, the one figure style's display and data-source line, the report's column order, the card.
NOTEBOOK_HELPERS: tuple[str, ...] = (
    "finlib.core.lab.open_run",
    "finlib.finbias.figures.base.show_figure",
    "finlib.finbias.figures.base.data_source",
    "finlib.pipeline.report.key_columns_first",
    "finlib.pipeline.card.CardRequest",
    "finlib.pipeline.card.ask_before_spending",
    "finlib.pipeline.card.build_card",
)


def stage_id(stage: str) -> str:
    """The table's key for `stage` ("3" -> "03"); an id not in the table is an error naming the known ones."""
    key = str(stage).zfill(2)
    if key not in STAGE_MODULES:
        raise KeyError(f"unknown stage {stage!r}; stages: {sorted(STAGE_MODULES)}")
    return key


def stage_module(stage: str) -> ModuleType:
    """The module of stage `stage` ("03" or "3")."""
    return importlib.import_module(STAGE_MODULES[stage_id(stage)])


def module_file(stage: str) -> Path:
    """The source file of stage `stage`'s module, found without importing it."""
    return Path(__file__).resolve().parents[2].joinpath(*STAGE_MODULES[stage_id(stage)].split(".")).with_suffix(".py")


def stage_section(stage: str) -> str | None:
    """The params section stage `stage` reads (None: none of its own), from the module-level
    `SECTION = "..."` in its source (no import); a module that computes it is imported instead."""
    tree = ast.parse(module_file(stage).read_text(encoding="utf-8"))
    for node in tree.body:
        targets = (node.targets if isinstance(node, ast.Assign) else
                   [node.target] if isinstance(node, ast.AnnAssign) else [])
        if any(isinstance(t, ast.Name) and t.id == "SECTION" for t in targets):
            if isinstance(node.value, ast.Constant) and (node.value.value is None or isinstance(node.value.value, str)):
                return node.value.value
            break
    return stage_module(stage).SECTION
