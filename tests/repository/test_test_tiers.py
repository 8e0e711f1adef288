"""The two test tiers: `make test` / `make unit` leave out the tests marked slow, `make test-all`
runs everything and is what CI calls, and every tier fails when pytest collects nothing (exit 5).

The targets are read through `make -n` (what make would run), and the exit-code handling is run
for real with a stand-in pytest, so a recipe that swallows exit 5 fails here."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="GNU make not installed")


@pytest.fixture(scope="module")
def stamp(tmp_path_factory) -> str:
    """A venv stamp newer than pyproject.toml, so make never (re)installs the environment here."""
    path = tmp_path_factory.mktemp("venv") / ".finlib-installed"
    path.touch()
    return f"STAMP={path}"


def dry_run(target: str, stamp: str) -> str:
    """The commands `make <target>` would run."""
    out = subprocess.run(["make", "-n", target, stamp], cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout


def test_fast_tiers_exclude_slow_tests_and_test_all_runs_them(stamp):
    assert "pip install" not in dry_run("test", stamp)
    assert '-m "not slow"' in dry_run("test", stamp)
    assert '-m "not slow"' in dry_run("unit", stamp)
    assert "not slow" not in dry_run("test-all", stamp)
    assert "notebooks --nbval-lax" in dry_run("test", stamp) and "notebooks --nbval-lax" in dry_run("test-all", stamp)
    assert "notebooks" not in dry_run("unit", stamp)


def test_both_test_tiers_lint_first(stamp):
    for target in ("test", "test-all"):
        commands = dry_run(target, stamp).splitlines()
        lint = next(i for i, c in enumerate(commands) if "ruff check finlib tests benchmarks" in c)
        assert lint < next(i for i, c in enumerate(commands) if "pytest" in c), commands


@pytest.mark.parametrize("target", ["test", "test-all"])
def test_a_lint_finding_fails_the_tier_before_any_test_runs(target, stamp, tmp_path):
    ran = tmp_path / "pytest-ran"
    out = subprocess.run(["make", target, stamp, "LINT=false", f"PYTEST=touch {ran}; true"], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode != 0 and not ran.exists()


def test_ci_runs_every_test():
    commands = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    assert "make test-all" in commands


@pytest.mark.parametrize("target", ["test", "test-all", "unit", "test-integration"])
@pytest.mark.parametrize("code, fails", [(0, False), (1, True), (5, True)])
def test_every_tier_fails_when_pytest_fails_or_collects_nothing(target, code, fails, stamp):
    fake = f"python3 -c 'import sys; sys.exit({code})'"
    out = subprocess.run(["make", target, stamp, f"PYTEST={fake}", "LINT=true"], cwd=ROOT, capture_output=True,
                         text=True)
    assert (out.returncode != 0) is fails, out.stderr
    assert ("collected no tests" in out.stderr) is (code == 5)
