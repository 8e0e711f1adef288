"""Run configuration: one `params/<run>.yaml` resolved into paths and knobs.

Every stage notebook starts with `cfg = load_run(run_name)`; every path a stage reads or
writes comes from `RunConfig`, so a run's artifacts never mix with another run's.
"""
from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from finlib.core.errors import ConfigError

if TYPE_CHECKING:
    from finlib.core.params import Section

SECRET_MARKERS = ("api_key", "apikey", "secret", "token", "password")
# Set by the runner while it executes a run's stages: the kernel then reads the params the run's manifest
# recorded at its start (finlib.core.lab.open_run), never a params file edited mid-run.
PINNED_ENV = "FINLIB_PINNED_RUN"


def repo_root(start: Path | None = None) -> Path:
    """The repository root: the first parent holding both `pyproject.toml` and `params/`.

    Notebooks run with cwd `notebooks/` (papermill `--cwd`, JupyterLab); tests run from the
    root. Walking up makes `data/...` paths mean the same thing from both.
    """
    here = (start or Path.cwd()).resolve()
    for p in (here, *here.parents):
        if (p / "pyproject.toml").is_file() and (p / "params").is_dir():
            return p
    # Installed (non-editable) package: fall back to the package's own checkout if any.
    pkg = Path(__file__).resolve().parents[2]
    if (pkg / "params").is_dir():
        return pkg
    raise ConfigError(f"cannot find the repository root (pyproject.toml + params/) above {here}")


def deep_merge(base: dict, override: dict) -> dict:
    """Recursively merge `override` into a copy of `base` (dicts merge, everything else replaces)."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _check_no_secrets(params: Any, path: Path, prefix: str = "") -> None:
    """Refuse params that look like they carry a credential: keys belong in the environment."""
    if isinstance(params, dict):
        for key, value in params.items():
            name = f"{prefix}{key}"
            lowered = str(key).lower()
            if any(m in lowered for m in SECRET_MARKERS) and not lowered.endswith(("_env", "_tokens", "tokens")) \
                    and "max_" not in lowered and value not in (None, ""):
                raise ConfigError(
                    f"{path}: key '{name}' looks like a secret. Put API keys in environment variables and "
                    "name the variable in params/models.yaml (api_key_env)."
                )
            _check_no_secrets(value, path, prefix=f"{name}.")
    elif isinstance(params, list):
        for i, value in enumerate(params):
            _check_no_secrets(value, path, prefix=f"{prefix}[{i}].")


MAX_YAML_VALUES = 100_000  # values a params/registry file may expand to (ours: a few hundred)


def _expanded_size(node, memo: dict) -> int:
    """How many values `node` stands for once aliases are expanded (memoised on the shared nodes,
    so a "billion laughs" file is measured in linear time, never expanded)."""
    key = id(node)
    if key not in memo:
        memo[key] = 1  # a recursive alias counts once, then its own size
        value = node.value
        if isinstance(value, list):
            kids = [v for pair in value for v in (pair if isinstance(pair, tuple) else (pair,))]
            memo[key] = 1 + sum(_expanded_size(k, memo) for k in kids)
    return memo[key]


def _refuse_duplicate_keys(node, seen_nodes: set[int] | None = None) -> None:
    """A key written twice in one mapping is an error: YAML keeps the last copy silently, so an
    edited first copy would be ignored without a word."""
    seen_nodes = set() if seen_nodes is None else seen_nodes
    if id(node) in seen_nodes:
        return
    seen_nodes.add(id(node))
    if isinstance(node, yaml.MappingNode):
        first: dict[str, int] = {}
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                line = key_node.start_mark.line + 1
                if key_node.value in first:
                    raise yaml.YAMLError(f"key '{key_node.value}' appears twice in one mapping "
                                         f"(lines {first[key_node.value]} and {line})")
                first[key_node.value] = line
            _refuse_duplicate_keys(value_node, seen_nodes)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _refuse_duplicate_keys(item, seen_nodes)


def _safe_load_bounded(text: str) -> object:
    """yaml.safe_load, refusing files whose aliases (`*name`) expand past MAX_YAML_VALUES: nested
    aliases grow exponentially when the params are walked or merged (a 1 kB file hung the loader).
    Plain aliases stay legal (`yaml.safe_dump` writes them for repeated objects)."""
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    if node is None:
        return None
    _refuse_duplicate_keys(node)
    size = _expanded_size(node, {})
    if size > MAX_YAML_VALUES:
        raise yaml.YAMLError(f"aliases (*name) expand it to {size:,} values (limit {MAX_YAML_VALUES:,})")
    return yaml.safe_load(text)


def read_yaml_mapping(path: Path, what: str = "params file",
                      error: type[Exception] = ConfigError) -> dict:
    """A YAML file whose top level is a mapping; errors name the file (shared by params and registry)."""
    path = Path(path)
    if not path.is_file():
        raise error(f"{what} not found: {path}")
    try:
        raw = _safe_load_bounded(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise error(f"{path}: invalid YAML: {exc}") from exc
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[:exc.start].count(b"\n") + 1
        raise error(f"{path}: not valid UTF-8 at byte {exc.start} (line {line}); save the file as UTF-8") from None
    if not isinstance(raw, dict):
        raise error(f"{path}: top level must be a mapping, got {type(raw).__name__}")
    return raw


def extends_path(path: Path, parent: str) -> Path:
    """The file `extends: <parent>` of `path` names: beside `path` when it is there, else in the
    repository's `params/` (so `extends: default.yaml` means params/default.yaml from a file kept
    anywhere, as the docs write it); neither: an error naming both places."""
    beside = path.parent / parent
    if beside.is_dir():
        raise ConfigError(f"{path}: extends: {parent!r} is a directory ({beside}), not a params file: name the "
                          "YAML file to merge over, e.g. extends: default.yaml")
    if Path(parent).is_absolute() or beside.is_file():
        return beside
    try:
        in_params = repo_root(path.parent) / "params" / parent
    except ConfigError:
        in_params = None
    if in_params is not None and in_params.is_file():
        return in_params
    where = f"{beside}" + (f" or {in_params}" if in_params is not None else "")
    raise ConfigError(f"{path}: extends: {parent} not found ({where})")


def load_params(path: Path, _chain: tuple[Path, ...] = ()) -> dict:
    """Read a params file, following `extends:` chains (the file's folder first, then params/)."""
    return _load_chain(path, _chain)[0]


def params_chain(path: Path) -> list[Path]:
    """The params files `path` is made of: itself first, then the file it extends, and so on."""
    return _load_chain(path)[1]


def _load_chain(path: Path, _chain: tuple[Path, ...] = ()) -> tuple[dict, list[Path]]:
    """The merged params of `path` and the files merged, the file itself first (its `extends` last)."""
    path = Path(path)
    if path.resolve() in _chain:
        raise ConfigError(f"{path}: `extends` loops back to itself: "
                          + " -> ".join(str(p) for p in (*_chain, path.resolve())))
    raw = read_yaml_mapping(path)
    parent = raw.pop("extends", None)
    files = [path]
    if parent:
        if not isinstance(parent, str):
            raise ConfigError(f"{path}: extends must be a file name, got {parent!r}")
        base, above = _load_chain(extends_path(path, parent), (*_chain, path.resolve()))
        raw, files = deep_merge(base, raw), [path, *above]
    _check_no_secrets(raw, path)
    return raw, files


@dataclass(frozen=True)
class RunConfig:
    """Resolved parameters and the folders of one run."""

    name: str
    params: dict
    root: Path
    params_file: Path = field(default=Path())
    # the params as a notebook opened the run (finlib.core.lab.open_run); every artifact write compares
    # against them, so a cell that edits cfg cannot rewrite the run under numbers its manifest does not state
    opened_params: dict | None = field(default=None, repr=False, compare=False)

    def check_unchanged(self) -> None:
        """Refuse to write when `params` were edited after the run was opened, naming the keys."""
        if self.opened_params is None:
            return
        changed = changed_keys(self.opened_params, self.params)
        if changed:
            raise ParamsEditedError(
                f"run '{self.name}': params edited after the run was opened ({describe_changes(changed)}); "
                f"nothing written, so runs/{self.name}/ keeps matching its manifest. Put the change in a params "
                "file and open it (open_run(params_file=...): a changed file writes to an exploration run)")

    def __getitem__(self, key: str) -> Any:
        try:
            return self.params[key]
        except KeyError:
            raise ConfigError(f"{self.params_file}: missing section '{key}'") from None

    def section(self, name: str) -> Section:
        """A params section, checked again against its model in `finlib.core.params` (every declared
        key present, no other, types, ranges): what a stage reads, so a value changed after loading is
        refused too and a stage never needs a default or a key list of its own. Read-only
        (`finlib.core.params.Section`): a stage cannot change it, nor read a declared key with a default."""
        from finlib.core.params import validate_section

        return validate_section(name, self[name], self.params_file)

    def path(self, relative: str | Path) -> Path:
        """A params path made absolute against the repository root."""
        p = Path(relative)
        return p if p.is_absolute() else self.root / p

    @property
    def seed(self) -> int:
        """The run's seed (`seed:`, declared once in params/default.yaml)."""
        return int(self["seed"])

    @property
    def raw_dir(self) -> Path:
        return self.root / "data" / "raw"

    @property
    def processed_dir(self) -> Path:
        return self.root / "data" / "processed" / self.name

    @property
    def figures_dir(self) -> Path:
        return self.root / "figures" / self.name

    @property
    def tables_dir(self) -> Path:
        return self.figures_dir / "tables"

    @property
    def run_dir(self) -> Path:
        return self.root / "runs" / self.name

    @property
    def is_synthetic(self) -> bool:
        """Whether the run reads the seeded synthetic market (`data.source: synthetic`)."""
        data = self["data"]
        if "source" not in data:
            raise ConfigError(f"{self.params_file}: missing key 'data.source'")
        return data["source"] == "synthetic"


class ParamsEditedError(ConfigError):
    """A notebook changed `cfg.params` after opening a run, then tried to write an artifact."""


def _plain(obj: Any) -> Any:
    import json

    return json.loads(json.dumps(obj, sort_keys=True, default=str))


def changed_keys(before: Any, after: Any, prefix: str = "") -> dict[str, tuple[Any, Any]]:
    """Dotted key -> (before, after) for every leaf that differs (a key present on one side only too)."""
    before, after = _plain(before), _plain(after)
    if isinstance(before, dict) and isinstance(after, dict):
        out: dict[str, tuple[Any, Any]] = {}
        for k in sorted(set(before) | set(after)):
            out.update(changed_keys(before.get(k), after.get(k), f"{prefix}{k}."))
        return out
    return {} if before == after else {prefix.rstrip("."): (before, after)}


def describe_changes(changed: dict[str, tuple[Any, Any]], limit: int = 6) -> str:
    """"scoring.bootstrap_reps 1000 -> 200, ..." (the first `limit`, then how many more)."""
    shown = [f"{k} {a!r} -> {b!r}" for k, (a, b) in list(changed.items())[:limit]]
    more = len(changed) - limit
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def registry_names(path: Path) -> set[str]:
    """The record names of a model registry file (the full records are validated by
    finlib.llm.registry when a stage loads them; here only the names params may refer to)."""
    raw = read_yaml_mapping(path, "model registry (inference.registry)")
    records = raw.get("models")
    if not isinstance(records, list):
        raise ConfigError(f"{path}: top level must be a mapping with a 'models' list")
    return {str(r["name"]) for r in records if isinstance(r, dict) and "name" in r}


def check_params(params: dict, files: list[Path], root: Path) -> None:
    """The merged params of `files` (the run's file first, then what it extends) against the schema
    and the model registry: ONE ConfigError lists every problem (type, range, missing or unknown key,
    a rule between keys, a model name the registry lacks, a name outside a closed vocabulary), naming the file, each key and its value."""
    from finlib.core.params import model_name_errors, model_names_used, raise_errors, schema_errors, vocabulary_errors

    errors = schema_errors(params) + vocabulary_errors(params)
    inference = params.get("inference") if isinstance(params.get("inference"), dict) else {}
    registry = inference.get("registry") if isinstance(inference.get("registry"), str) else "params/models.yaml"
    rfile = Path(registry) if Path(registry).is_absolute() else root / registry
    if model_names_used(params):
        errors += model_name_errors(params, registry_names(rfile), rfile)
    where = str(files[0]) + (f" (merged over {' <- '.join(p.name for p in files[1:])})" if len(files) > 1 else "")
    raise_errors(errors, where)


def split_run_arg(run: str) -> tuple[str, str | None]:
    """`RUN=` may name a run (`default`) or a params file (`params/mine.yaml`): a path gives the run
    its file's stem as name and the file itself as params."""
    if run.endswith((".yaml", ".yml")) or "/" in run or os.sep in run:
        return Path(run).stem, run
    return run, None


def load_run(run_name: str = "default", params_file: str | Path | None = None,
             root: Path | None = None, make_dirs: bool = True) -> RunConfig:
    """Load `params/<run_name>.yaml` (or `params_file`), check it against `finlib.core.params`
    (unknown keys, wrong types, values out of range and model names missing from the registry are
    errors naming the file and the key), create the run's folders (unless `make_dirs` is False).
    `run_name` may be a params path (`params/mine.yaml`: run `mine`)."""
    root = root or repo_root()
    run_name, from_path = split_run_arg(run_name)
    params_file = params_file or from_path
    pfile = Path(params_file) if params_file else root / "params" / f"{run_name}.yaml"
    if not pfile.is_absolute():
        pfile = root / pfile
    params, files = _load_chain(pfile)
    check_params(params, files, root)
    cfg = RunConfig(name=run_name, params=params, root=root, params_file=pfile)
    for d in (cfg.processed_dir, cfg.tables_dir, cfg.run_dir) if make_dirs else ():
        d.mkdir(parents=True, exist_ok=True)
    return cfg
