"""An exploration run starts from its parent's artifacts for every stage whose inputs are unchanged.

An exploration (`<run>-lab-<hash>`, opened by a notebook whose params differ from the run's manifest)
that began empty would fail at its first cell on a missing upstream artifact. The parent's manifest
records, per stage, the params section it reads (`section`) and the files it wrote (`artifacts`). Every
stage before the first one whose section changed -- in stage order, a stage reading what an earlier one
wrote -- has its files linked (or copied, across file systems) into the exploration's folders, and the
exploration's manifest says which, from where. A change outside every stage's section (`seed`, a key no
stage section names) reuses nothing: any stage may read it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from finlib.core.config import changed_keys


def first_changed_stage(parent: dict[str, Any], params: dict) -> str | None:
    """The first recorded stage (in id order) whose section changed, "" when a change is outside every
    stage's section (nothing reusable), None when no recorded stage changed."""
    stages = parent.get("stages") or {}
    sections = {k.split(".", 1)[0] for k in changed_keys(parent.get("params") or {}, params)}
    known = {e.get("section") for e in stages.values()}
    if sections - known:
        return ""
    hit = [s for s, e in sorted(stages.items()) if e.get("section") in sections]
    return hit[0] if hit else None


def _target(path: str, parent: str, run: str) -> str | None:
    """The exploration's path for one of the parent's artifacts (its run folder name swapped), or None
    when the path is not under one of the parent's run folders."""
    parts = Path(path).parts
    for i, part in enumerate(parts):
        if part == parent and i > 0 and parts[i - 1] in ("processed", "figures"):
            return str(Path(*parts[:i], run, *parts[i + 1 :]))
    return None


def _link_or_copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.exists():
        return
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def reuse_parent(root: Path, parent_name: str, parent: dict[str, Any], run: str, params: dict) -> dict[str, Any]:
    """Link the parent's artifacts of every stage before the first changed one into `run`; returns the
    manifest record {"from": parent, "stages": {stage: files}, "rerun_from": stage or None}."""
    first = first_changed_stage(parent, params)
    stages = parent.get("stages") or {}
    reused: dict[str, int] = {}
    if first != "":
        for stage, entry in sorted(stages.items()):
            if (first is not None and stage >= first) or entry.get("status") != "ok":
                break
            files = 0
            for rel in entry.get("artifacts") or {}:
                target = _target(rel, parent_name, run)
                if target is not None and (root / rel).is_file():
                    _link_or_copy(root / rel, root / target)
                    files += 1
            reused[stage] = files
    return {"from": parent_name, "stages": reused, "rerun_from": first or None}


def reused_entries(parent_name: str, parent: dict[str, Any], run: str, reused: dict[str, int]) -> dict[str, dict]:
    """The run's manifest entries of the stages it took from its parent: the parent's entry with the
    artifact paths swapped to the run's folders, `reused_from` naming the parent and no time of its own."""
    out = {}
    for stage in reused:
        entry = dict((parent.get("stages") or {}).get(stage) or {})
        arts = {(_target(rel, parent_name, run) or rel): h for rel, h in (entry.get("artifacts") or {}).items()}
        out[stage] = {**entry, "artifacts": arts, "reused_from": parent_name, "parent_seconds": entry.get("seconds"),
                      "seconds": 0.0}
    return out
