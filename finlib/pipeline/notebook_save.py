"""What JupyterLab saves of a tracked notebook: its code and prose, never its outputs.

Lab autosaves every couple of minutes; without this, working in Lab writes outputs, execution counts and
widget state into `notebooks/*.ipynb`, and `git status` is dirty afterwards even where the
nbstripout filter is not set up. `make lab` sets `strip_outputs` as the server's pre-save hook
(`FileContentsManager.pre_save_hook`), for the notebooks under `notebooks/` only; an executed run's
notebooks (`runs/<run>/notebooks/`) and a user's own notebooks elsewhere keep theirs. The outputs stay
on screen while the notebook is open; the executed copies of a run keep them on disk.
"""

from __future__ import annotations

from typing import Any

TRACKED_FOLDER = "notebooks/"
VOLATILE_METADATA = ("widgets", "execution")


def strip_cells(nb: dict[str, Any]) -> dict[str, Any]:
    """Outputs, execution counts and per-run metadata removed from every code cell (ids and sources kept)."""
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        for key in VOLATILE_METADATA:
            (cell.get("metadata") or {}).pop(key, None)
    for key in VOLATILE_METADATA:
        (nb.get("metadata") or {}).pop(key, None)
    return nb


def strip_outputs(model: dict[str, Any], path: str, contents_manager: Any = None, **_: Any) -> None:
    """jupyter_server pre-save hook: strip a tracked notebook's model in place before it is written."""
    if model.get("type") != "notebook" or not isinstance(model.get("content"), dict):
        return
    if path.lstrip("/").startswith(TRACKED_FOLDER):
        strip_cells(model["content"])
