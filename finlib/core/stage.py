"""The one shape of a stage: what the runner, the notebooks and the tests may rely on.

Every stage module (`finlib/<paper>/<stage>/stage.py`) exposes these names:

- `SECTION`: the params section it reads (`cfg.section(SECTION)`), or None for a stage with no knobs
  of its own; the preflight and the model-name checks read it instead of a list of their own;
- `run(cfg) -> result`: reads the previous stages' artifacts from disk, writes its own artifacts,
  tables (with captions built from params) and figures, and returns them; the result has `tables`
  (name -> DataFrame, what the notebook shows) and `report` (the JSON-able summary it wrote);
- `summary(cfg, result) -> str`: Markdown for the notebook's first output cell: caveats (synthetic
  data, not-answered calls, set-aside items) and the headline counts, from the result alone;
- `NOTEBOOK_API`: the names of the module's other functions its notebook calls (views and notes built
  from the result), each a function of the module; a notebook calls nothing else of the stage;
- `TABLES`: the names of the tables in `result.tables` the notebook shows, so a notebook reads a table
  by a name the stage declares;
- `REPORT_KEYS`: the keys of `result.report` the notebook reads, likewise declared.

Notebooks call these names and display what `run` returned (its typed fields and the declared tables);
nothing in a notebook computes or writes.
"""
from __future__ import annotations

import inspect
from types import ModuleType

CONTRACT = ("SECTION", "run", "summary", "NOTEBOOK_API", "TABLES", "REPORT_KEYS")


def contract_problems(module: ModuleType) -> list[str]:
    """Why a module is not a stage (empty when it is): a missing name, or `run`/`summary` with
    another signature. Used by the runner's stage table and by the contract test."""
    problems = [f"{module.__name__}: no `{name}`" for name in CONTRACT if not hasattr(module, name)]
    section = getattr(module, "SECTION", None)
    if hasattr(module, "SECTION") and section is not None and not isinstance(section, str):
        problems.append(f"{module.__name__}.SECTION must be a params section name or None, not {section!r}")
    problems += _declared_problems(module)
    for name, params in (("run", ["cfg"]), ("summary", ["cfg", "result"])):
        fn = getattr(module, name, None)
        if fn is None:
            continue
        required = [p.name for p in inspect.signature(fn).parameters.values()
                    if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if required != params:
            problems.append(f"{module.__name__}.{name} takes {required} without defaults; the contract is {params}")
    return problems


def _declared_problems(module: ModuleType) -> list[str]:
    """Why `NOTEBOOK_API`, `TABLES` or `REPORT_KEYS` is not a tuple of names (empty when each is), and any name of
    `NOTEBOOK_API` that is not a function of the module."""
    problems = []
    for name in ("NOTEBOOK_API", "TABLES", "REPORT_KEYS"):
        value = getattr(module, name, ())
        if not isinstance(value, tuple) or not all(isinstance(v, str) for v in value):
            problems.append(f"{module.__name__}.{name} must be a tuple of names, not {value!r}")
    api = getattr(module, "NOTEBOOK_API", ())
    for name in api if isinstance(api, tuple) else ():
        if not callable(getattr(module, str(name), None)):
            problems.append(f"{module.__name__}.NOTEBOOK_API names {name!r}, which is not a function of the module")
    return problems
