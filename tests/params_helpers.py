"""Params for tests: a throwaway repository root with the shipped params files, and full params in memory.

Every key of a params file is required, so a test never writes half a file: it extends the shipped
default (`with_defaults`) or writes into a root holding the shipped files (`ParamsRoot`). A module of
its own (not conftest.py) so that test modules can import it whichever conftest pytest loaded first.
"""
from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class ParamsRoot:
    """A repository root of its own with the shipped params/*.yaml (default.yaml, models.yaml, ...):
    `write(name, params)` adds a run file, a mapping deep-merged over nothing (say `extends:` in it)
    or YAML text; `load(name)` loads it as a run. Tests that need a params file of their own build it
    here, so every file they load is a full one (every key is required)."""

    def __init__(self, root: Path):
        self.root = root
        (root / "params").mkdir(parents=True, exist_ok=True)
        for f in (ROOT / "params").glob("*.yaml"):
            shutil.copy(f, root / "params" / f.name)
        (root / "pyproject.toml").write_text("[project]\nname='tmp'\n")

    def write(self, name: str, params: dict | str) -> Path:
        import yaml

        path = self.root / "params" / name
        path.write_text(params if isinstance(params, str) else yaml.safe_dump(params, sort_keys=False),
                        encoding="utf-8")
        return path

    def load(self, name: str):
        from finlib.core.config import load_run

        return load_run(Path(name).stem, root=self.root, make_dirs=False)


def with_defaults(overrides: dict | None = None) -> dict:
    """params/default.yaml with `overrides` deep-merged over it, the way an `extends: default.yaml` file
    is: the complete params mapping a test builds in memory (every key is required by the schema).
    Test modules import it: `from params_helpers import with_defaults`."""
    from finlib.core.config import deep_merge, load_params

    return deep_merge(load_params(ROOT / "params" / "default.yaml"), overrides or {})
