"""Static rules for the stage notebooks: story in the notebook, logic in finlib.

Executing them is nbval's job (`make test`); these checks keep them honest without running.
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
HOME_MODULES = {
    "00": "finlib.finbias.data", "01": "finlib.finbias.labels", "02": "finlib.finbias.perturb",
    "03": "finlib.llm", "04": "finlib.finbias.scoring", "05": "finlib.finbias.dpo", "06": "finlib.finbias.figures",
    "07": "finlib.bizfin", "08": "finlib.bizfin",
}


def test_the_five_fin_bias_stages_exist():
    assert [p.name[:2] for p in NOTEBOOKS][:5] == ["00", "01", "02", "03", "04"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_follows_the_conventions(path: Path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert nb.cells[0].cell_type == "markdown", "a notebook opens with markdown that explains the stage"
    params = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1, "exactly one cell tagged `parameters`"
    assert re.search(r'^run_name = "smoke"', params[0].source, re.M)
    assert re.search(r"^params_file = None", params[0].source, re.M)
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"
    for cell in code:
        assert not re.search(r"^\s*(def|class|lambda)\b", cell.source, re.M), \
            f"logic belongs in finlib, not in a notebook cell:\n{cell.source[:200]}"
        assert not cell.get("outputs"), "notebooks are committed without outputs"
        assert not re.search(r"sk-[A-Za-z0-9]{10,}|api_key\s*=", cell.source), "no keys in notebooks"
    source = "\n".join(c.source for c in code)
    home = HOME_MODULES.get(path.name[:2])
    if home:
        assert home in source, f"{path.name} should call its home module {home}"
    assert "load_run(run_name, params_file)" in source
