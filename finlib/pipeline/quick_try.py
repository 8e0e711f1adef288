"""`--limit N` and `--models a,b` on the runner: a quick try of a run, as lm-eval and inspect users expect.

A quick try never writes into the run it is derived from: its params (the run's, with the model lists cut
to the named models and every "first N reports / items" knob capped at N) go to their own run,
`<run>-try-<hash>`, whose params file `runs/<run>-try-<hash>/params.yaml` holds them whole, so its manifest
says exactly how its numbers were made. The corpus itself is not cut (per-year labels and per-sector tables
need every year and sector); the knobs below are the ones whose size sets the number of model calls.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import yaml

from finlib.core.errors import ConfigError

# (section, key) lists of model names a quick try cuts to --models (a list left empty is an error)
MODEL_LISTS = (("inference", "models"), ("dpo", "models"), ("bizfin", "models"))
# (dotted path) counts of "the first N reports / items" a quick try caps at --limit (null = all: becomes N)
LIMIT_KNOBS = (
    "inference.generator_reports",
    "inference.samples_reports",
    "perturb.sweep_reports",
    "dpo.eval_reports",
    "dpo.max_train_pairs",
    "bizfin.real_items_per_task",
    "bizfin.sample_items_per_task",
    "bizfin.iterajudge.max_items_per_task",
)


def _get(params: dict, dotted: str) -> tuple[dict | None, str]:
    *parents, key = dotted.split(".")
    node = params
    for p in parents:
        node = node.get(p) if isinstance(node, dict) else None
    return (node if isinstance(node, dict) and key in node else None), key


def cut_models(params: dict, models: list[str]) -> tuple[dict, list[str]]:
    """Every model list cut to `models` (in the list's order), and the lists that hold none of them: those
    are kept whole (their stage needs a model) and named; none of `models` in any list is an error."""
    out = copy.deepcopy(params)
    kept_whole, used = [], False
    for section, key in MODEL_LISTS:
        have = (out.get(section) or {}).get(key)
        if isinstance(have, list):
            kept = [m for m in have if m in models]
            if kept:
                out[section][key], used = kept, True
            else:
                kept_whole.append(f"{section}.{key} {have}")
    if not used:
        raise ConfigError(
            f"--models {','.join(models)}: none of them is in the run's model lists ({'; '.join(kept_whole)})"
        )
    return out, kept_whole


def cap_counts(params: dict, limit: int) -> dict:
    """Every knob of LIMIT_KNOBS present capped at `limit` (null, meaning all, becomes `limit`)."""
    if limit < 1:
        raise ConfigError(f"--limit {limit}: give a count of at least 1")
    out = copy.deepcopy(params)
    for dotted in LIMIT_KNOBS:
        node, key = _get(out, dotted)
        if node is not None:
            value = node[key]
            node[key] = limit if value is None or (isinstance(value, int) and value > limit) else value
    return out


def try_params(params: dict, models: list[str] | None, limit: int | None) -> tuple[dict, list[str]]:
    """The quick try's params, and the model lists kept whole (none of `models` in them)."""
    out, kept_whole = cut_models(params, models) if models else (copy.deepcopy(params), [])
    return (cap_counts(out, limit) if limit else out), kept_whole


def write_try(
    root: Path, run: str, params: dict, models: list[str] | None, limit: int | None
) -> tuple[str, Path, list[str]]:
    """(run name, params file, model lists kept whole) of the quick try: `<run>-try-<hash of its params>`,
    its params written whole."""
    derived, kept_whole = try_params(params, models, limit)
    text = json.dumps(derived, sort_keys=True, default=str)
    name = f"{run}-try-{hashlib.sha256(text.encode()).hexdigest()[:8]}"
    path = root / "runs" / name / "params.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "# quick try of run '" + run + f"' (--models {','.join(models or []) or 'all'}, --limit "
        f"{limit or 'none'})\n" + yaml.safe_dump(json.loads(text), sort_keys=False),
        encoding="utf-8",
    )
    return name, path, kept_whole
