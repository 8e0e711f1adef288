"""Shared fixtures: the repository root, a throwaway run, and ../shared/data when present."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from params_helpers import ParamsRoot

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = (ROOT / ".." / "shared" / "data").resolve()


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data (real MPQA, prices, BizFinBench); skip when a user's clone has none."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real test data not available at {SHARED_DATA} (a folder beside the checkout with mpqa/ = the MPQA subjectivity lexicon, "
                    "prices/ = daily S&P 500 prices, bizfinbench/ = the published BizFinBench JSONL files; "
                    ".ci/run links them when present)")
    return SHARED_DATA


@pytest.fixture()
def tmp_run(tmp_path: Path):
    """A RunConfig rooted in a temporary copy of params/, so tests never touch real run outputs."""
    from finlib.core.config import load_run

    root = tmp_path / "repo"
    (root / "params").mkdir(parents=True)
    for f in (ROOT / "params").glob("*.yaml"):
        shutil.copy(f, root / "params" / f.name)
    (root / "pyproject.toml").write_text("[project]\nname='tmp'\n")
    return load_run("smoke", root=root)


@pytest.fixture()
def repo(tmp_path: Path, monkeypatch) -> Path:
    """A throwaway repository (the shipped params, an empty notebooks folder) as the working directory,
    with no run chosen through the environment, for tests of how runs are opened and recorded."""
    from finlib.core import lab

    root = tmp_path / "repo"
    shutil.copytree(ROOT / "params", root / "params")
    (root / "notebooks").mkdir()
    (root / "pyproject.toml").write_text("[project]\nname='tmp'\n")
    monkeypatch.delenv(lab.RUN_ENV, raising=False)
    monkeypatch.chdir(root)
    return root


@pytest.fixture()
def simulated_clock(monkeypatch):
    """The OpenAI backend's waits (rate limits, backoff) go to a simulated clock instead of the wall."""
    from llm_helpers import SimulatedClock

    from finlib.llm import openai_backend

    clock = SimulatedClock()
    monkeypatch.setattr(openai_backend, "sleep", clock.sleep)
    monkeypatch.setattr(openai_backend, "clock", clock)  # the breakers' grace periods count simulated time
    return clock


@pytest.fixture(autouse=True)
def fresh_breakers():
    """Each test starts with no circuit breaker open and no interrupt set (both are process-wide)."""
    from finlib.llm.interrupt import STOP
    from finlib.llm.openai_backend import reset_breakers

    reset_breakers()
    STOP.clear()
    yield
    reset_breakers()
    STOP.clear()


@pytest.fixture()
def params_root(tmp_path: Path) -> ParamsRoot:
    """A throwaway repository root holding the shipped params files (see ParamsRoot)."""
    return ParamsRoot(tmp_path / "repo")
