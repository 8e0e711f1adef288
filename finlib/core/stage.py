"""The one shape of a stage: what the runner, the notebooks and the tests may rely on.

Every stage module (`finlib/<paper>/<stage>/stage.py`) exposes exactly three names:

- `SECTION`: the params section it reads (`cfg.section(SECTION)`), or None for a stage with no knobs
  of its own; the preflight and the model-name checks read it instead of a list of their own;
- `run(cfg) -> result`: reads the previous stages' artifacts from disk, writes its own artifacts,
  tables (with captions built from params) and figures, and returns them; the result has `tables`
  (name -> DataFrame, what the notebook shows) and `report` (the JSON-able summary it wrote);
- `summary(cfg, result) -> str`: Markdown for the notebook's first output cell: caveats (synthetic
  data, not-answered calls, set-aside items) and the headline counts, from the result alone.

Notebooks call these names and display what `run` returned; nothing in a notebook computes or writes.
"""
from __future__ import annotations

import inspect
from types import ModuleType

CONTRACT = ("SECTION", "run", "summary")


def contract_problems(module: ModuleType) -> list[str]:
    """Why a module is not a stage (empty when it is): a missing name, or `run`/`summary` with
    another signature. Used by the runner's stage table and by the contract test."""
    problems = [f"{module.__name__}: no `{name}`" for name in CONTRACT if not hasattr(module, name)]
    section = getattr(module, "SECTION", None)
    if hasattr(module, "SECTION") and section is not None and not isinstance(section, str):
        problems.append(f"{module.__name__}.SECTION must be a params section name or None, not {section!r}")
    for name, params in (("run", ["cfg"]), ("summary", ["cfg", "result"])):
        fn = getattr(module, name, None)
        if fn is None:
            continue
        required = [p.name for p in inspect.signature(fn).parameters.values()
                    if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if required != params:
            problems.append(f"{module.__name__}.{name} takes {required} without defaults; the contract is {params}")
    return problems

