"""Stage artifacts on disk: each stage reads its predecessors' files, never their memory.

Writing goes through a temporary file and an atomic rename, so a crashed stage never
leaves a half-written parquet that the next stage would read as complete.
"""
from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from finlib.core.config import RunConfig

# Each paper lists its artifacts (`finlib.finbias.artifacts`, `finlib.bizfin.artifacts`: name -> the stage
# that writes it). The papers sit above this layer, so their lists are found through the package's entry
# points (pyproject.toml, group below), never imported by name; used in "run stage NN first" errors.
ARTIFACT_LISTS = "finlib.artifacts"


@functools.cache
def producers() -> dict[str, str]:
    """Artifact name -> the stage that writes it, over every paper's list; a name two stages claim is an error."""
    out: dict[str, str] = {}
    for entry in entry_points(group=ARTIFACT_LISTS):
        for name, stage in entry.load().items():
            if out.get(name, stage) != stage:
                raise ValueError(f"artifact {name!r} is written by stage {out[name]} and by stage {stage} "
                                 f"({entry.value})")
            out[name] = stage
    return out


def producer(name: str) -> str:
    """The stage that writes artifact `name` ("??" when no paper lists it)."""
    return producers().get(name, "??")


class MissingArtifactError(FileNotFoundError):
    """A stage's input is not on disk; the message says which stage makes it."""


class UnreadableArtifactError(OSError):
    """A stage's input is on disk but is not a readable Parquet file (cut short by a full disk or a
    copy that stopped); the message names the file and the stage that makes it again."""


def artifact_path(cfg: RunConfig, name: str, suffix: str = ".parquet") -> Path:
    return cfg.processed_dir / f"{name}{suffix}"


def _atomic_target(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def write_atomic(path: Path, write: Callable[[Path], Any]) -> Path:
    """`write(tmp)` then rename onto `path`. When writing fails (disk full, no permission) the
    temporary file is removed and the error names the file that could not be written -- a bare
    "[Errno 28] No space left on device" names none."""
    path = Path(path)
    try:
        tmp = _atomic_target(path)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot write {path}: {exc.strerror or exc}") from exc
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OSError(exc.errno, f"cannot write {path}: {exc.strerror or exc} (nothing written, no partial "
                                 "file left)") from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


TEXT_ROW_GROUP = 1000  # rows per parquet row group of a text-heavy artifact (~15 MB of report text): the
                       # unit `ArtifactTexts` reads, so a reader holds one group, never the whole corpus


def write_frame(cfg: RunConfig, name: str, df: pd.DataFrame, row_group_size: int | None = None) -> Path:
    """Write a DataFrame artifact as parquet, atomically (`row_group_size`: rows per row group,
    for artifacts read a group at a time)."""
    cfg.check_unchanged()
    return write_atomic(artifact_path(cfg, name),
                        lambda tmp: df.to_parquet(tmp, index=False, row_group_size=row_group_size))


def stage_command(cfg: RunConfig, stage: str) -> str:
    """The command that makes stage `stage` of this run: `make stage` when the run's name is its params
    file's (params/<run>.yaml or RUN=<path>), the runner with both otherwise (a notebook exploration)."""
    pfile = Path(cfg.params_file)
    rel = str(pfile.relative_to(cfg.root)) if pfile.is_relative_to(cfg.root) else str(pfile)
    if pfile.stem == cfg.name:
        run = cfg.name if rel == f"params/{cfg.name}.yaml" else rel
        return f"make stage STAGE={stage} RUN={run}"
    return f".venv/bin/python -m finlib.pipeline.runner --run {cfg.name} --params {rel} --stages {stage}"


def runs_with_artifact(cfg: RunConfig, name: str, suffix: str = ".parquet") -> list[str]:
    """Other runs on disk that hold the artifact (what a reader may have meant to open)."""
    base = cfg.root / "data" / "processed"
    return sorted(p.parent.name for p in base.glob(f"*/{name}{suffix}") if p.parent.name != cfg.name)


def existing_artifact(cfg: RunConfig, name: str) -> Path:
    """The path of a parquet artifact, or an error that says which stage (and command) makes it for
    this run, and which runs on disk already have it."""
    path = artifact_path(cfg, name)
    if not path.is_file():
        stage = producer(name)
        others = runs_with_artifact(cfg, name)
        where = (f" Runs on disk that have it: {', '.join(others)} (open one with run_name = \"{others[0]}\")."
                 if others else " No run on disk has it yet.")
        rel = path.relative_to(cfg.root) if path.is_relative_to(cfg.root) else path
        raise MissingArtifactError(
            f"run '{cfg.name}': {rel} does not exist: run stage {stage} first "
            f"(`{stage_command(cfg, stage)}`).{where}"
        )
    return path


def read_frame(cfg: RunConfig, name: str, columns: list[str] | None = None, **arrow: Any) -> pd.DataFrame:
    """Read a parquet artifact (`columns`: only these; `arrow`: pyarrow's reading options, such as
    `read_dictionary` for categoricals), or explain which stage to run to make it."""
    path = existing_artifact(cfg, name)
    try:
        return pd.read_parquet(path, columns=columns, **arrow)
    except (pa.ArrowException, OSError) as exc:  # pyarrow's own message names no file
        raise unreadable(cfg, name, path, exc) from exc


def unreadable(cfg: RunConfig, name: str, path: Path, exc: Exception) -> UnreadableArtifactError:
    """The error for an artifact pyarrow cannot read: the file, pyarrow's reason and the stage to rerun."""
    stage = producer(name)
    return UnreadableArtifactError(
        f"run '{cfg.name}': {path} is not a readable Parquet file ({type(exc).__name__}: {exc}); it may have "
        f"been cut short (a full disk, an interrupted copy): run stage {stage} again "
        f"(`{stage_command(cfg, stage)}`)")


def read_frame_head(cfg: RunConfig, name: str, n: int, columns: list[str] | None = None) -> tuple[pd.DataFrame, int]:
    """(the first `n` rows of a parquet artifact, its number of rows): read a batch at a time and
    stopped once `n` rows are in, so a view of a few rows of a paper-size artifact (674k answers)
    does not hold the whole file. Errors as `read_frame`'s."""
    path = existing_artifact(cfg, name)
    try:
        file = pq.ParquetFile(path)
        batches, got = [], 0
        for batch in file.iter_batches(batch_size=max(min(n, 65_536), 1), columns=columns):
            if got >= n:
                break
            batches.append(batch)
            got += batch.num_rows
        if batches:
            table = pa.Table.from_batches(batches)
        else:
            table = file.schema_arrow.empty_table()
            table = table.select(columns) if columns else table
        return table.to_pandas().head(n), file.metadata.num_rows
    except (pa.ArrowException, OSError) as exc:
        raise unreadable(cfg, name, path, exc) from exc


def use_returning_arrow_pool() -> str:
    """Set Arrow's allocator to jemalloc with its decay time 0, so that pages freed by a row group
    read (or a frame converted) go back to the system at once; returns the pool's name.

    Why: a stage that reads a large artifact a row group at a time keeps only one group alive, but
    with the default pool (mimalloc) the freed pages stayed resident. Stage 03's plan of one model
    (every row group of the conditions, 35k rows at the paper's size) grew the process by ~210 MB
    with mimalloc and by ~95 MB with jemalloc at decay 0 (Python's own allocations: ~32 MB). A
    pyarrow built without jemalloc keeps its default pool."""
    try:
        pool = pa.jemalloc_memory_pool()
        pa.jemalloc_set_decay_ms(0)
    except (NotImplementedError, pa.ArrowNotImplementedError):
        return pa.default_memory_pool().backend_name
    pa.set_memory_pool(pool)
    return pool.backend_name


class ArtifactTexts(Mapping):
    """id -> text of a parquet artifact, read one row group at a time (the last group read is kept).

    Why: at the paper's size the conditions artifact holds ~0.6 GB of report text, and a pandas
    frame of it took ~1.4 GB of memory; stage 03 needs each text only while it plans, sends or
    parses that row, in file order, once per model. Reading in file order loads each row group
    once; a row whose text is null is absent (as in `{id: text}` built from non-null rows)."""

    def __init__(self, path: Path, id_column: str = "item_id", text_column: str = "text"):
        self.path, self.text_column = Path(path), text_column
        self._file = pq.ParquetFile(self.path)
        self._pos: dict[str, tuple[int, int]] = {}
        for g in range(self._file.num_row_groups):
            for i, key in enumerate(self._file.read_row_group(g, columns=[id_column]).column(0).to_pylist()):
                self._pos[key] = (g, i)
        self._group: tuple[int, pa.ChunkedArray | None] = (-1, None)

    def _texts(self, group: int) -> pa.ChunkedArray:
        if self._group[0] != group:
            self._group = (-1, None)  # the old group is released before the next is read
            self._group = (group, self._file.read_row_group(group, columns=[self.text_column]).column(0))
        return self._group[1]

    def __getitem__(self, key: str) -> str:
        group, i = self._pos[key]
        text = self._texts(group)[i].as_py()
        if text is None:
            raise KeyError(key)
        return text

    def subset(self, keys: Iterable[str]) -> dict[str, str]:
        """The texts of these ids (null or unknown ones absent), each row group read once and in file
        order, whatever order the ids come in: a chunk of rows sorted otherwise than the file still
        reads each group it needs once."""
        by_group: dict[int, list[tuple[str, int]]] = {}
        for key in keys:
            if key in self._pos:
                group, i = self._pos[key]
                by_group.setdefault(group, []).append((key, i))
        out: dict[str, str] = {}
        for group in sorted(by_group):
            texts = self._texts(group)
            for key, i in by_group[group]:
                text = texts[i].as_py()
                if text is not None:
                    out[key] = text
        return out

    def __iter__(self):
        return iter(self._pos)

    def __len__(self) -> int:
        return len(self._pos)

    def frames(self, columns: list[str] | None = None) -> Iterator[pd.DataFrame]:
        """The artifact a row group at a time, each frame indexed by its rows' positions in the file."""
        start = 0
        for g in range(self._file.num_row_groups):
            part = self._file.read_row_group(g, columns=columns).to_pandas()
            part.index = pd.RangeIndex(start, start + len(part))
            start += len(part)
            yield part


def without_root(text: str, root: Path) -> str:
    """`text` with this machine's repository path made relative ("/home/x/repo/data/a.csv" ->
    "data/a.csv"): a report read on another machine names the file the same way, and no home folder."""
    for prefix in sorted({str(root.resolve()), str(root)}, key=len, reverse=True):
        text = text.replace(prefix + "/", "")
    return text


def write_json(cfg: RunConfig, name: str, obj: Any) -> Path:
    """Write a JSON report (counts, exclusions) next to the stage's frames, atomically."""
    cfg.check_unchanged()
    text = without_root(json.dumps(obj, indent=2, sort_keys=True, default=str), cfg.root)
    return write_atomic(artifact_path(cfg, name, ".json"), lambda tmp: tmp.write_text(text, encoding="utf-8"))


def read_json(cfg: RunConfig, name: str) -> Any:
    path = artifact_path(cfg, name, ".json")
    if not path.is_file():
        stage = producer(name)
        raise MissingArtifactError(f"{path} does not exist: run stage {stage} first.")
    return json.loads(path.read_text(encoding="utf-8"))


def write_jsonl(path: Path, records: Iterable[dict]) -> Path:
    """Write records as JSON lines, atomically."""
    def write(tmp: Path) -> None:
        with tmp.open("w", encoding="utf-8") as fh:
            for rec in records:
                fh.write(json.dumps(rec, ensure_ascii=False, default=str) + "\n")

    return write_atomic(path, write)


def require_columns(df: pd.DataFrame, columns: Iterable[str], source: str) -> None:
    """Fail naming the artifact (or file) and the missing fields, instead of a KeyError deep inside."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{source}: missing column(s) {missing}; has {list(df.columns)}")


def load_manifest(cfg: RunConfig) -> dict[str, Any]:
    path = cfg.run_dir / "manifest.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def write_manifest(cfg: RunConfig, manifest: dict[str, Any]) -> Path:
    """Atomically; a full disk raises an error naming the manifest and leaves no temporary file."""
    text = json.dumps(manifest, indent=2, sort_keys=True, default=str)
    return write_atomic(cfg.run_dir / "manifest.json", lambda tmp: tmp.write_text(text))
