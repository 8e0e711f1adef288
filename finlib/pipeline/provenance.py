"""A run's published numbers change only through a run whose manifest says how they were made.

The runner records the params of the whole run in `runs/<run>/manifest.json`. A call that reruns some
stages with params that differ from those (another params file of the same stem, an edited file) would
leave the stages it does not rerun -- the later stages fed by it, and earlier stages whose section
changed -- holding tables made from the recorded params while the manifest states the new ones.
`check_rerun` refuses such a call before anything runs, naming the changed keys, the stages that would
go stale, and the two ways on: rerun those stages too, or write to an exploration run.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from finlib.core.config import changed_keys, describe_changes
from finlib.core.errors import ConfigError


class StaleStagesError(ConfigError):
    """A partial rerun with changed params would leave stages made from other params under one manifest."""


def recorded_stages(manifest: dict[str, Any]) -> list[str]:
    """Stages whose outputs the run holds (finished, or stopped partway: their files are on disk)."""
    return sorted(s for s, e in (manifest.get("stages") or {}).items() if e.get("status") in ("ok", "failed"))


def stale_stages(
    manifest: dict[str, Any], selected: Iterable[str], changed: dict[str, Any], section_of: dict[str, str | None]
) -> list[str]:
    """Recorded stages this call does not rerun yet would no longer match the manifest: every one after
    the first rerun stage (it reads what the rerun rewrites), and any earlier one whose section changed."""
    selected = sorted(selected)
    if not changed or not selected:
        return []
    sections = {k.split(".", 1)[0] for k in changed}
    return [
        s for s in recorded_stages(manifest) if s not in selected and (s > selected[0] or section_of.get(s) in sections)
    ]


def check_rerun(
    run: str, manifest: dict[str, Any], params: dict, selected: Iterable[str], section_of: dict[str, str | None]
) -> dict[str, tuple[Any, Any]]:
    """The changed keys (empty for a first run or unchanged params); refuses a call that would make the
    manifest state params some recorded stage's outputs were not made with."""
    if not manifest.get("params"):
        return {}
    changed = changed_keys(manifest["params"], params)
    stale = stale_stages(manifest, selected, changed, section_of)
    if stale:
        first = sorted(selected)[0]
        raise StaleStagesError(
            f"[{run}] refusing: params differ from runs/{run}/manifest.json ({describe_changes(changed)}) and "
            f"stage(s) {', '.join(stale)} made from the recorded params would not be rerun. Rerun them too "
            f"(`make reproduce RUN={run}` or --from {first}), or write to an exploration run: give the params "
            f"file another name (RUN=params/{run}-explore.yaml) so runs/{run}/ stays as published"
        )
    return changed
