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

    .venv/bin/python benchmarks/bench_mutation.py --scope stats --max-children 1 --keep
    .venv/bin/python benchmarks/bench_mutation.py --scope stats --rerun-survivors /tmp/finlib-mutation-XXXX
    .venv/bin/python benchmarks/bench_mutation.py --scope metrics --check-survivors /tmp/finlib-mutation-XXXX
    .venv/bin/python benchmarks/bench_mutation.py --scope metrics --summarise /tmp/finlib-mutation-XXXX

`--check-survivors COPY` runs a finished pass's unexplained survivors against the test files changed since
(they passed every other test). `--summarise` writes the verdicts a kept copy holds without running
anything: a pass stopped before its end is written with `complete: false` and its mutants not yet run
counted as "not checked", outside the kill rate.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
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
        (
            "tests/finbias/test_scoring.py",
            "tests/finbias/test_metrics_slicing.py",
            "tests/finbias/test_comparison_consistency.py",
            "tests/finbias/test_mutation_kills_metrics.py",
            TRUTHS,
        ),
    ),
    "labels": (
        ("finlib/finbias/labels/market_model.py", "finlib/finbias/labels/stage.py"),
        ("tests/finbias/test_labels.py", "tests/finbias/test_mutation_kills_labels.py", TRUTHS),
    ),
}
# Functions of a scope's files that are not mutated, with why: they draw figures or write the notebook's text
# from statistics computed (and mutated) elsewhere; a mutant there changes pixels or wording, not a number
# a table prints. The tables' writers are mutated.
NOT_MUTATED: dict[str, dict[str, str]] = {
    "labels": {
        "plot_car_by_year": "draws the figure of car_by_year's table (mutated), no statistic of its own",
        "plot_beta_distribution": "draws the figure of beta_distribution's table (mutated), no statistic of its own",
        "draw_figures": "calls the two drawing functions and closes their figures",
        "report_markdown": "renders the report's counts as Markdown for the notebook",
        "agreement_markdown": "renders agreement_rate's numbers (mutated) as a sentence for the notebook",
        "summary": "the notebook's one-paragraph summary of the report",
        "recovery_view": "chooses what the notebook shows of the recovery table",
    },
}
SCOPES["all"] = (
    tuple(f for k in ("stats", "metrics", "labels") for f in SCOPES[k][0]),
    tuple(dict.fromkeys(t for k in ("stats", "metrics", "labels") for t in SCOPES[k][1])),
)
EQUIVALENTS = ROOT / "benchmarks" / "mutation_equivalents.yaml"
# Functions whose only call runs while their module is imported: mutmut activates a mutant after the
# import (in a forked worker), so every mutant of these survives whatever the tests check. Listed apart,
# neither killed nor equivalent. Evidence: with MUTANT_UNDER_TEST set before the import, the first
# mutant of _specs tried (a misspelt column in prob_herding's filter) fails
# tests/finbias/test_scoring.py::test_herding_and_accuracy_by_hand_through_the_pipeline_specs.
RUN_AT_IMPORT = {"finlib.finbias.scoring.metrics.x__specs": "METRIC_SPECS = _specs() at import"}
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


def not_mutated(scope: str) -> dict[str, str]:
    """Function -> why it is not mutated, for `scope` (every scope's for `all`)."""
    if scope == "all":
        return {f: why for table in NOT_MUTATED.values() for f, why in table.items()}
    return NOT_MUTATED.get(scope, {})


def fence_functions(path: Path, names: set[str]) -> list[str]:
    """Put mutmut's `# pragma: no mutate start` / `end` comment lines around each top-level function of the
    copied file `path` that `names` lists (comments only: the code is unchanged); the names found."""
    import ast

    lines = path.read_text(encoding="utf-8").split("\n")
    spans = [(f.lineno - len(f.decorator_list), f.end_lineno, f.name) for f in ast.parse("\n".join(lines)).body
             if isinstance(f, ast.FunctionDef) and f.name in names]
    for start, end, _ in sorted(spans, reverse=True):
        lines[end:end] = ["# pragma: no mutate end"]
        lines[start - 1:start - 1] = ["# pragma: no mutate start"]
    path.write_text("\n".join(lines), encoding="utf-8")
    return [name for _, _, name in spans]


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


def run_mutmut(work: Path, max_children: int, names: list[str]) -> tuple[float, str]:
    """`mutmut run` in `work` (every mutant, or only `names`): wall seconds and the error text ("" when it ran)."""
    t0 = time.perf_counter()
    run = subprocess.run(
        [sys.executable, "-m", "mutmut", "run", "--max-children", str(max_children), *names],
        cwd=work,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t0
    return wall, "" if run.returncode == 0 else run.stdout[-3000:] + "\n" + run.stderr[-3000:]


def summary(scope: str, verdict: dict[str, str], max_children: int, wall: float) -> dict:
    """Kill rate and survivors, the survivors split into named equivalents and unexplained ones."""
    files, tests = SCOPES[scope]
    counts: dict[str, int] = {}
    for v in verdict.values():
        counts[v] = counts.get(v, 0) + 1
    survivors = sorted(k for k, v in verdict.items() if v == "survived")
    equivalents = read_equivalents()
    named = [k for k in survivors if k in equivalents]
    at_import = [k for k in survivors if k not in equivalents and k.rsplit("__mutmut_", 1)[0] in RUN_AT_IMPORT]
    tested = sum(n for v, n in counts.items() if v not in ("skipped", "no tests", "not checked"))
    killed = counts.get("killed", 0) + counts.get("timeout", 0)
    return {
        "scope": scope,
        "files": list(files),
        "tests": list(tests),
        "not_mutated": not_mutated(scope),
        "max_children": max_children,
        "wall_s": round(wall, 1),
        "counts": counts,
        "mutants": len(verdict),
        "complete": counts.get("not checked", 0) == 0,
        "kill_rate": round(killed / tested, 4) if tested else None,
        "kill_rate_excluding_equivalents": round(killed / (tested - len(named)), 4) if tested > len(named) else None,
        "survivors": survivors,
        "survivors_named_equivalent": {k: equivalents[k] for k in named},
        "survivors_run_at_import": {f: n for f, n in RUN_AT_IMPORT.items() if any(k.startswith(f) for k in at_import)},
        "survivors_run_at_import_count": len(at_import),
        "survivors_unexplained": [k for k in survivors if k not in equivalents and k not in at_import],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scope", choices=sorted(SCOPES), default="stats")
    ap.add_argument("--max-children", type=int, default=1, help="parallel mutants (the machine is shared)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary copy (to `mutmut show` a mutant)")
    ap.add_argument(
        "--rerun-survivors",
        type=Path,
        metavar="COPY",
        help="a copy kept by --keep: bring the checkout's tests into it and run its unexplained "
        "survivors again (the mutants already killed stay killed)",
    )
    ap.add_argument(
        "--check-survivors",
        type=Path,
        metavar="COPY",
        help="a copy kept by --keep whose mutated files equal the checkout's: run each survivor not named "
        "equivalent against the scope's test files that changed since the pass (it passed every other "
        "test then); a failing test kills it",
    )
    ap.add_argument(
        "--summarise",
        type=Path,
        metavar="COPY",
        help="a copy kept by --keep (its run finished, stopped or still going): write its verdicts, run nothing",
    )
    args = ap.parse_args()
    if args.check_survivors:
        return check_survivors(args.scope, args.check_survivors, args.max_children)
    if args.summarise:
        data = summary(args.scope, statuses(args.summarise), args.max_children, float("nan"))
        return write_summary(
            {**data, "wall_s": None, "tests": copy_tests(args.summarise), "rerun_of_survivors": False}, machine()
        )
    files, tests = SCOPES[args.scope]
    before = machine()
    work = args.rerun_survivors or Path(tempfile.mkdtemp(prefix="finlib-mutation-"))
    try:
        if args.rerun_survivors:
            shutil.rmtree(work / "tests")
            shutil.copytree(ROOT / "tests", work / "tests", ignore=shutil.ignore_patterns("__pycache__"))
            equivalents = read_equivalents()
            names = [k for k, v in statuses(work).items() if v == "survived" and k not in equivalents]
        else:
            copy_tracked(work)
            with (work / "pyproject.toml").open("a", encoding="utf-8") as f:
                f.write(mutmut_table(files, tests))
            skip = set(not_mutated(args.scope))
            fenced = [n for f in files for n in fence_functions(work / f, skip)]
            if sorted(fenced) != sorted(skip):
                raise SystemExit(f"NOT_MUTATED names functions the scope's files do not define: "
                                 f"{sorted(skip - set(fenced))}")
            names = []
        wall, error = run_mutmut(work, args.max_children, names)
        if error:
            print(error)
            return 1
        verdict = statuses(work)
    finally:
        if args.keep or args.rerun_survivors:
            print(f"copy kept at {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    data = summary(args.scope, verdict, args.max_children, wall)
    return write_summary({**data, "rerun_of_survivors": bool(args.rerun_survivors)}, before)


def _unfenced(path: Path) -> str:
    return "\n".join(line for line in path.read_text(encoding="utf-8").split("\n")
                     if line not in ("# pragma: no mutate start", "# pragma: no mutate end"))


def check_survivors(scope: str, work: Path, max_children: int) -> int:
    """Run the pass's unexplained survivors against the scope's test files changed since the pass.

    A survivor passed every test of the pass, so a test file unchanged since cannot kill it; each changed
    file is run with the survivor switched on (mutmut's MUTANT_UNDER_TEST) and a failure kills it. The copy
    must hold the checkout's code: a survivor is a change of the code the checkout has."""
    from concurrent.futures import ThreadPoolExecutor

    files, tests = SCOPES[scope]
    stale = [f for f in files if _unfenced(work / f) != (ROOT / f).read_text(encoding="utf-8")]
    if stale:
        raise SystemExit(f"{work}: the copy's {stale} differ from the checkout; run the pass again")
    changed = [t for t in tests if (work / t).read_text(encoding="utf-8") != (ROOT / t).read_text(encoding="utf-8")]
    for t in changed:
        shutil.copy2(ROOT / t, work / "mutants" / t)
    equivalents = read_equivalents()
    verdict = statuses(work)
    names = sorted(k for k, v in verdict.items() if v == "survived" and k not in equivalents
                   and k.rsplit("__mutmut_", 1)[0] not in RUN_AT_IMPORT)
    before = machine()

    def run_one(name: str) -> tuple[str, int]:
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "not slow", *changed]
        env = {**os.environ, "MUTANT_UNDER_TEST": name}
        return name, subprocess.run(cmd, cwd=work / "mutants", env=env, capture_output=True).returncode

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_children) as pool:
        codes = dict(pool.map(run_one, names)) if changed else {n: 0 for n in names}
    odd = {n: c for n, c in codes.items() if c not in (0, 1)}
    if odd:
        raise SystemExit(f"pytest did not run to a verdict for {odd} (exit codes other than 0 and 1)")
    killed = sorted(n for n, c in codes.items() if c == 1)
    verdict.update({n: "killed" for n in killed})
    data = summary(scope, verdict, max_children, time.perf_counter() - t0)
    return write_summary({**data, "wall_s": None, "tests": copy_tests(work), "rerun_of_survivors": False,
                          "survivors_checked_against": changed, "killed_by_tests_changed_since_the_pass": killed},
                         before)


def copy_tests(work: Path) -> list[str]:
    """The test selection a kept copy ran with (its [tool.mutmut] table), which may predate SCOPES."""
    with (work / "pyproject.toml").open("rb") as f:
        return list(tomllib.load(f)["tool"]["mutmut"]["pytest_add_cli_args_test_selection"])


def write_summary(data: dict, before: dict) -> int:
    """benchmarks/results/mutation_<scope>.json (mutation.json for `all`); wall_s is None when summarised
    from a kept copy (the run's own time is not known then)."""
    scope = data["scope"]
    path = write_result("mutation" if scope == "all" else f"mutation_{scope}", data, before)
    print(
        f"{path.relative_to(ROOT)}: kill rate {data['kill_rate']}, {len(data['survivors'])} survived "
        f"({len(data['survivors_unexplained'])} not named equivalent); "
        f"{data['counts'].get('not checked', 0)} not checked"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
