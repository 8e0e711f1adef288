"""Do the harness extras (inspect-ai, lm-eval) slow `make reproduce`? Each import below runs in a fresh
interpreter, five times (median): the runner `make reproduce` starts (`finlib.pipeline.runner`), the
harness modules, and the two harnesses themselves. Also recorded: which harness modules the runner's
import loads (none expected: the harness is imported only by the harnesses' own entry points), and
how long reading the `finlib.artifacts` entry points takes, which the runner does and which grows
with the number of installed distributions the extras add. The figures go to
benchmarks/results/harness_imports.json (benchmarks/results.py) and to the terminal.

    .venv/bin/python benchmarks/bench_harness_imports.py
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import ROOT, machine, write_result

REPS = 5
IMPORTS = {  # key -> what is imported: make reproduce's runner, the harness statistics (no harness import),
    # the inspect tasks' entry point, inspect_ai alone, lm_eval with its task manager
    "runner": "import finlib.pipeline.runner",
    "harness_statistics": "import finlib.harness.finbias_rows, finlib.harness.bizfin_rows",
    "inspect_tasks": "import finlib.harness.inspect_tasks",
    "inspect_ai": "import inspect_ai",
    "lm_eval": "import lm_eval, lm_eval.tasks",
}
PROBE = """
import json, sys, time
t0 = time.perf_counter()
exec({stmt!r})
dt = time.perf_counter() - t0
loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('inspect_ai', 'lm_eval') or m.startswith('finlib.harness'))
print(json.dumps({{"seconds": dt, "harness_modules": len(loaded), "examples": loaded[:5]}}))
"""
ENTRY_POINTS = """
import json, time
from importlib.metadata import distributions, entry_points
t0 = time.perf_counter()
eps = entry_points(group="finlib.artifacts")
dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "distributions": len(list(distributions())), "entry_points": len(eps)}))
"""


def probe(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    before = machine()
    rows = {}
    for name, stmt in IMPORTS.items():
        runs = [probe(PROBE.format(stmt=stmt)) for _ in range(REPS)]
        rows[name] = {
            "median_s": round(statistics.median(r["seconds"] for r in runs), 3),
            "harness_modules_loaded": runs[0]["harness_modules"],
            "examples": runs[0]["examples"],
        }
        print(
            f"{name}: {rows[name]['median_s']:.3f} s (median of {REPS}); harness modules loaded: "
            f"{rows[name]['harness_modules_loaded']}"
        )
    eps = [probe(ENTRY_POINTS) for _ in range(REPS)]
    rows["entry_points"] = {
        "median_s": round(statistics.median(r["seconds"] for r in eps), 4),
        "distributions_installed": eps[0]["distributions"],
    }
    print(
        f"entry points read: {rows['entry_points']['median_s']:.4f} s over "
        f"{eps[0]['distributions']} installed distributions"
    )
    path = write_result("harness_imports", {"reps": REPS, "imports": rows}, before)
    print(f"written: {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
