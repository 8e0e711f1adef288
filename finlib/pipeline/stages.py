"""Which module is each numbered stage: the one table the runner, the preflight and `make plan` read.

The notebook `notebooks/NN_<name>.ipynb` of stage NN calls the same module's `run` and `summary`
(`finlib.core.stage` states the contract; a test checks every module here keeps it).
"""
from __future__ import annotations

import importlib
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


def stage_module(stage: str) -> ModuleType:
    """The module of stage `stage` ("03" or "3")."""
    key = stage.zfill(2)
    if key not in STAGE_MODULES:
        raise KeyError(f"unknown stage {stage!r}; stages: {sorted(STAGE_MODULES)}")
    return importlib.import_module(STAGE_MODULES[key])


def stage_section(stage: str) -> str | None:
    """The params section stage `stage` reads (None: none of its own)."""
    return stage_module(stage).SECTION
