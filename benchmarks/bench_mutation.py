"""Mutation testing of the statistics and label modules: mutmut plants every small change it knows
(an operator, a constant, a comparison, a dropped argument) in finlib/core/stats.py,
finlib/finbias/scoring/metrics.py and finlib/finbias/labels/*, runs the tests that cover the changed
function, and counts the mutants no test kills. Writes benchmarks/results/mutation.json: kill rate,
every survivor, and which survivors benchmarks/mutation_equivalents.yaml names as equivalent (a change
that cannot alter any result, with the reason).

mutmut works on a copy: this script copies the tracked files it needs into a temporary folder, adds a
[tool.mutmut] table to the copy's pyproject.toml, and runs `mutmut run` there; the checkout is never
modified. Every mutant runs pytest again, so the run takes CPU time proportional to the mutants:
`--scope stats` (one file) is the small run, `--scope all` the whole pass.

    .venv/bin/python benchmarks/bench_mutation.py --scope stats --max-children 1
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import ROOT, machine, write_result

TRUTHS = "tests/faults/test_fidelity_truths.py"
SCOPES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # scope: (files mutated, tests that cover them)
    "stats": (("finlib/core/stats.py",), ("tests/core/test_stats.py", TRUTHS)),
    "metrics": (
        ("finlib/finbias/scoring/metrics.py",),
        ("tests/finbias/test_scoring.py", "tests/finbias/test_metrics_slicing.py", TRUTHS),
    ),
    "labels": (
        ("finlib/finbias/labels/market_model.py", "finlib/finbias/labels/stage.py"),
        ("tests/finbias/test_labels.py", TRUTHS),
    ),
}
SCOPES["all"] = (
    tuple(f for k in ("stats", "metrics", "labels") for f in SCOPES[k][0]),
    tuple(dict.fromkeys(t for k in ("stats", "metrics", "labels") for t in SCOPES[k][1])),
)
EQUIVALENTS = ROOT / "benchmarks" / "mutation_equivalents.yaml"
COPIED = ("finlib", "tests", "params", "data", "pyproject.toml")
STATUS_LINE = re.compile(r"^\s*(\S+): (\S[^\n]*)$")


def copy_tracked(dest: Path) -> None:
    """The tracked (and untracked, not ignored) files under COPIED, as in the checkout."""
    out = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", *COPIED], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    for rel in filter(None, out):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def mutmut_table(files: tuple[str, ...], tests: tuple[str, ...]) -> str:
    """[tool.mutmut] for the copy: mutate `files`, select `tests`, leave the slow tier out."""

    def arr(xs) -> str:
        return "[" + ", ".join(json.dumps(x) for x in xs) + "]"

    return (
        "\n[tool.mutmut]\n"
        'source_paths = ["finlib"]\n'
        f"only_mutate = {arr(files)}\n"
        f"also_copy = {arr(['tests', 'params', 'data'])}\n"
        f"pytest_add_cli_args_test_selection = {arr(tests)}\n"
        f"pytest_add_cli_args = {arr(['-p', 'no:cacheprovider', '-m', 'not slow', '-q'])}\n"
    )


def read_equivalents() -> dict[str, str]:
    """Survivor name -> why no test can kill it (the mutant computes the same results)."""
    if not EQUIVALENTS.is_file():
        return {}
    data = yaml.safe_load(EQUIVALENTS.read_text(encoding="utf-8")) or {}
    bad = [k for k, v in data.items() if not isinstance(v, str) or not v.strip()]
    if bad:
        raise ValueError(f"{EQUIVALENTS.name}: mutant {bad[0]!r} has no reason")
    return data


def statuses(work: Path) -> dict[str, str]:
    """mutmut's verdict per mutant (`mutmut results --all true`)."""
    out = subprocess.run(
        [sys.executable, "-m", "mutmut", "results", "--all", "true"],
        cwd=work,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {m.group(1): m.group(2).strip() for m in map(STATUS_LINE.match, out.splitlines()) if m}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scope", choices=sorted(SCOPES), default="stats")
    ap.add_argument("--max-children", type=int, default=1, help="parallel mutants (the machine is shared)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary copy (to `mutmut show` a mutant)")
    args = ap.parse_args()
    files, tests = SCOPES[args.scope]
    before = machine()
    work = Path(tempfile.mkdtemp(prefix="finlib-mutation-"))
    try:
        copy_tracked(work)
        with (work / "pyproject.toml").open("a", encoding="utf-8") as f:
            f.write(mutmut_table(files, tests))
        t0 = time.perf_counter()
        run = subprocess.run(
            [sys.executable, "-m", "mutmut", "run", "--max-children", str(args.max_children)],
            cwd=work,
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - t0
        if run.returncode != 0:
            print(run.stdout[-3000:], run.stderr[-3000:], sep="\n")
            return run.returncode
        verdict = statuses(work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"copy kept at {work}")
    counts: dict[str, int] = {}
    for v in verdict.values():
        counts[v] = counts.get(v, 0) + 1
    survivors = sorted(k for k, v in verdict.items() if v == "survived")
    equivalents = read_equivalents()
    tested = sum(n for v, n in counts.items() if v not in ("skipped", "no tests"))
    killed = counts.get("killed", 0) + counts.get("timeout", 0)
    data = {
        "scope": args.scope,
        "files": list(files),
        "tests": list(tests),
        "max_children": args.max_children,
        "wall_s": round(wall, 1),
        "counts": counts,
        "mutants": len(verdict),
        "kill_rate": round(killed / tested, 4) if tested else None,
        "kill_rate_excluding_equivalents": (
            round(killed / (tested - len(set(survivors) & set(equivalents))), 4)
            if tested > len(set(survivors) & set(equivalents))
            else None
        ),
        "survivors": survivors,
        "survivors_named_equivalent": {k: equivalents[k] for k in survivors if k in equivalents},
        "survivors_unexplained": [k for k in survivors if k not in equivalents],
    }
    path = write_result("mutation" if args.scope == "all" else f"mutation_{args.scope}", data, before)
    print(
        f"{path.relative_to(ROOT)}: {killed}/{tested} killed, {len(survivors)} survived "
        f"({len(data['survivors_unexplained'])} not named equivalent)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
