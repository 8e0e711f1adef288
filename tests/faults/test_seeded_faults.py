"""The seeded-fault suite: every fault of `seeded.FAULTS` must make one of its named tests fail, and
all named tests must pass without any fault. The child runs are slow (one interpreter per fault); the
checks that the records still apply to the source are fast."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from seeded import FAULTS, ROOT, Fault, patched_source

RUNNER = Path(__file__).with_name("seeded.py")
PAPER_TABLES = {  # table -> words one of its records' `statistic` must use
    "Fin-Bias Table 2": ("Fin-Bias Table 2",),
    "Fin-Bias Table 3": ("Fin-Bias Table 3", "Fin-Bias labels (Table 3"),
    "Fin-Bias Table 4": ("Fin-Bias Tables 4-7",),
    "Fin-Bias Table 5": ("Fin-Bias Table 5", "Fin-Bias Tables 4-7"),
    "Fin-Bias Table 6": ("Fin-Bias Table 6", "Fin-Bias accuracy (Tables 6, 7)"),
    "Fin-Bias Table 7": ("Fin-Bias accuracy (Tables 6, 7)", "Fin-Bias Tables 4-7"),
    "Fin-Bias Table 8": ("Fin-Bias Table 8",),
    "BizFinBench Table 3": ("BizFinBench Table 3",),
    "BizFinBench Table 4": ("BizFinBench Table 4",),
    "BizFinBench Table 6": ("BizFinBench Table 6",),
}


def run_child(fault: str, node_ids: tuple[str, ...]) -> subprocess.CompletedProcess:
    """pytest on `node_ids` in a fresh interpreter with `fault` planted ("-" for none)."""
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [sys.executable, str(RUNNER), fault, "-q", "-x", "-p", "no:cacheprovider", "-o", "addopts=", *node_ids]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def test_every_record_applies_once_and_compiles():
    for fault in FAULTS:
        compile(patched_source(fault), fault.module, "exec")


def test_records_have_unique_names_and_name_their_catchers():
    names = [f.name for f in FAULTS]
    assert len(names) == len(set(names))
    for fault in FAULTS:
        assert fault.catchers and fault.statistic and fault.old != fault.new, fault.name
        for node in fault.catchers:
            assert (ROOT / node.split("::")[0]).is_file(), (fault.name, node)


def test_every_published_table_has_a_fault():
    """Fin-Bias Tables 2-8's statistics and BizFinBench Tables 3, 4 and 6 each have at least one record."""
    text = " | ".join(f.statistic for f in FAULTS)
    for table, words in PAPER_TABLES.items():
        assert any(w in text for w in words), table


def test_a_record_that_no_longer_applies_is_refused():
    stale = Fault("stale", "finlib.core.stats", "this text is not in the module", "x", "none", ("a",))
    with pytest.raises(ValueError, match="occurs 0 times"):
        patched_source(stale)


@pytest.mark.slow
def test_named_tests_pass_without_any_fault():
    nodes = tuple(sorted({n for f in FAULTS for n in f.catchers}))
    out = run_child("-", nodes)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
def test_seeded_fault_is_caught(fault: Fault):
    out = run_child(fault.name, fault.catchers)
    # 1: some test failed; anything else (2 interrupted, 4 usage, 5 nothing collected) is no catch
    assert out.returncode == 1, (
        f"{fault.name} ({fault.statistic}) was not caught by {fault.catchers}: "
        f"exit {out.returncode}\n{out.stdout[-3000:]}{out.stderr[-2000:]}"
    )
