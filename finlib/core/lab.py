"""Which run a notebook opens, and why an exploration never overwrites a run.

A notebook's parameters cell leaves `run_name` and `params_file` at None; its first code cell calls
`open_run(run_name, params_file)`. Papermill (`make reproduce`, `make stage`) injects both, so an
executed notebook is pinned to its run. In JupyterLab nothing is injected and `open_run` picks:

1. `run_name` when given (a name, or a params path such as `params/mine.yaml`);
2. the environment variable `FINLIB_RUN` (the notebook test tier sets `smoke`);
3. the run whose manifest the runner wrote last (`runs/<run>/manifest.json`; notebook explorations
   and test runs write none the runner wrote, so they are never picked by themselves);
4. `default`.

A run's numbers belong to the parameters its manifest records. When the parameters a notebook
loads differ from them (another `params_file`, or an edited params file not yet rerun), the
notebook writes to a new run `<run>-lab-<hash>` -- hash of the parameters -- and records the
parameters it used in that run's manifest, so the original run's files are never touched.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from finlib.core.config import PINNED_ENV, RunConfig, load_run, repo_root, split_run_arg

RUN_ENV = "FINLIB_RUN"
FALLBACK_RUN = "default"
LAB_MARK = "-lab-"
NOTEBOOK_ORIGIN = "notebook"


def params_digest(params: dict) -> str:
    """Short hash of resolved parameters (JSON with sorted keys: the form the manifest stores)."""
    text = json.dumps(params, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]


def _manifest(root: Path, run: str) -> dict[str, Any] | None:
    path = root / "runs" / run / "manifest.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def runner_runs(root: Path) -> list[str]:
    """Runs made by the runner (`make reproduce`/`make stage`), most recently updated first.
    Explorations (`-lab-`, origin notebook) are left out: Lab opens what you made, not what you tried."""
    found = []
    for path in (root / "runs").glob("*/manifest.json"):
        run = path.parent.name
        data = _manifest(root, run) or {}
        if LAB_MARK in run or data.get("origin") == NOTEBOOK_ORIGIN or not data.get("stages"):
            continue
        found.append((path.stat().st_mtime, run))
    return [run for _, run in sorted(found, reverse=True)]


def resolve_run(run_name: str | None, root: Path) -> tuple[str, str]:
    """(run, why): the run a notebook opens and the rule that chose it (printed in the notebook)."""
    if run_name:
        return run_name, "given in the parameters cell"
    if os.environ.get(RUN_ENV):
        return os.environ[RUN_ENV], f"environment variable {RUN_ENV}"
    made = runner_runs(root)
    if made:
        return made[0], "the most recent run on disk (runs/*/manifest.json)"
    return FALLBACK_RUN, "no run on disk yet: the default run"


def resolve_params_path(params_file: str | Path | None, root: Path, cwd: Path | None = None) -> Path | None:
    """A params path from the repository root, or from the working folder (`../params/x.yaml` typed
    in a notebook under notebooks/); the error names both places it looked."""
    if not params_file:
        return None
    p = Path(params_file)
    if p.is_absolute():
        return p
    candidates = [root / p, (cwd or Path.cwd()) / p]
    for c in candidates:
        if c.is_file():
            return c.resolve()
    from finlib.core.errors import ConfigError

    raise ConfigError(f"params file {params_file} not found (looked in {candidates[0]} and {candidates[1]})")


def _same_params(manifest: dict[str, Any] | None, params: dict) -> bool:
    return manifest is not None and json.loads(json.dumps(manifest.get("params"), sort_keys=True, default=str)) \
        == json.loads(json.dumps(params, sort_keys=True, default=str))


def _relative(path: Path, root: Path) -> str:
    path = Path(path).resolve()
    return str(path.relative_to(root.resolve())) if path.is_relative_to(root.resolve()) else str(path)


def _record_exploration(cfg: RunConfig, derived_from: str, parent: dict[str, Any] | None = None) -> None:
    """Write the exploration's manifest (exactly the parameters used) unless it already has one, after
    linking the parent's artifacts of every stage whose inputs are unchanged (`finlib.core.reuse`)."""
    from finlib.core.artifacts import write_manifest
    from finlib.core.reuse import reuse_parent

    if _manifest(cfg.root, cfg.name) is not None:
        return
    reused = reuse_parent(cfg.root, derived_from, parent, cfg.name, cfg.params) if parent else None
    write_manifest(cfg, {
        "run": cfg.name, "origin": NOTEBOOK_ORIGIN, "derived_from": derived_from, "reused": reused,
        "params_file": _relative(cfg.params_file, cfg.root), "params": cfg.params,
        "updated": datetime.now(UTC).isoformat(timespec="seconds"),
    })


def pinned_config(cfg: RunConfig, manifest: dict[str, Any]) -> RunConfig:
    """The run with the parameters its manifest recorded when the runner started it (checked again
    against the schema), its folders made."""
    from finlib.core.params import validate_params

    params = validate_params(manifest["params"], cfg.params_file)
    pinned = RunConfig(name=cfg.name, params=params, root=cfg.root, params_file=cfg.params_file)
    for d in (pinned.processed_dir, pinned.tables_dir, pinned.run_dir):
        d.mkdir(parents=True, exist_ok=True)
    return pinned


def open_run(run_name: str | None = None, params_file: str | Path | None = None,
             root: Path | None = None, quiet: bool = False) -> RunConfig:
    """The run a notebook works on (see the module docstring), printed with where its params came
    from. Parameters that differ from the run's manifest go to `<run>-lab-<hash>` instead."""
    root = root or repo_root()
    if run_name:
        run_name, from_path = split_run_arg(run_name)
        params_file = params_file or from_path
    run, why = resolve_run(run_name, root)
    pfile = resolve_params_path(params_file, root)
    cfg = load_run(run, pfile, root=root, make_dirs=False)
    manifest = _manifest(root, run)
    source = _relative(cfg.params_file, root)
    if manifest is not None and os.environ.get(PINNED_ENV) == run and not _same_params(manifest, cfg.params):
        cfg = pinned_config(cfg, manifest)  # the runner's stages: the params the run started with
        why = (f"{why}; {source} changed since run '{run}' started: using the params its manifest recorded "
               "at the start, so every stage of one run reads the same parameters")
    elif manifest is not None and not _same_params(manifest, cfg.params):
        lab = f"{run}{LAB_MARK}{params_digest(cfg.params)}"
        note = (f"params ({source}) differ from those run '{run}' was made with "
                f"({manifest.get('params_file')}): writing to run '{lab}' so '{run}' stays as it is")
        cfg = load_run(lab, cfg.params_file, root=root)
        _record_exploration(cfg, run, manifest)
        why = f"{why}; {note}"
    else:
        cfg = load_run(run, cfg.params_file, root=root)
    cfg = dataclasses.replace(cfg, opened_params=copy.deepcopy(cfg.params))  # cell edits of cfg refuse to write
    if not quiet:
        print(f"run '{cfg.name}' ({why}); params from {source}; outputs in runs/{cfg.name}/, "
              f"data/processed/{cfg.name}/, figures/{cfg.name}/")
    return cfg
