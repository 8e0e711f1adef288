"""Wall time of a test tier as a contributor runs it (`make test`, or `make test-all` as CI does); writes
benchmarks/results/tests_<target>.json with pytest's own count of passed, failed and skipped tests.

    .venv/bin/python benchmarks/bench_tests.py [--target test|test-all]

The goal of the fast tier is 10 minutes on an idle 2-core machine; the file records the CPU flags and the
load average before and after, and `machine_before.idle` says whether the machine was idle.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import ROOT, machine, write_result

SUMMARY = re.compile(r"^=+ (?P<body>.*\b(?:passed|failed|error)\b.*) in [\d.]+s")


def pytest_counts(output: str) -> dict[str, int]:
    """{'passed': n, 'failed': n, 'skipped': n, ...} from pytest's closing line (the last one that matches)."""
    lines = [m.group("body") for ln in output.splitlines() if (m := SUMMARY.match(ln.strip()))]
    if not lines:
        return {}
    return {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", lines[-1])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="test", choices=("test", "test-all"), help="the make target to time")
    a = ap.parse_args()
    before = machine()
    t0 = time.time()
    proc = subprocess.run(["make", a.target], cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.time() - t0
    sys.stdout.write(proc.stdout[-2000:])
    counts = pytest_counts(proc.stdout)
    path = write_result(f"tests_{a.target}", {"target": f"make {a.target}", "exit_code": proc.returncode,
                                              "wall_seconds": round(wall, 1), "wall_minutes": round(wall / 60, 1),
                                              "pytest": counts}, before)
    print(f"make {a.target}: {wall / 60:.1f} min, exit {proc.returncode}, {counts}; machine idle: {before['idle']} "
          f"(load {before['load_average_1_5_15']}); {path.relative_to(ROOT)}")
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
