"""Stage artifacts on disk: each stage reads its predecessors' files, never their memory.

Writing goes through a temporary file and an atomic rename, so a crashed stage never
leaves a half-written parquet that the next stage would read as complete.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Iterable

import pandas as pd

from finlib.core.config import RunConfig

# artifact name -> the stage (notebook prefix) that writes it; used in "run stage NN first" errors.
PRODUCERS: dict[str, str] = {
    "reports": "00", "prices": "00", "market": "00", "truth": "00", "data_report": "00",
    "labels": "01", "labels_report": "01",
    "conditions": "02", "lexicon_stats": "02", "perturb_report": "02",
    "predictions": "03", "inference_report": "03", "draws": "03",
    "metrics": "04", "paired_tests": "04", "scoring_report": "04",
    "dpo_split": "05", "dpo_triplets": "05", "dpo_drops": "05", "dpo_predictions": "05", "dpo_metrics": "05",
    "dpo_paired_tests": "05", "dpo_report": "05",
    "figures_report": "06",
    "bizfin_items": "07", "bizfin_report": "07",
    "iterajudge_trajectories": "08", "iterajudge_results": "08", "judge_calibration_scores": "08",
    "judge_calibration": "08", "iterajudge_report": "08",
    "beyond_noise_estimates": "09", "beyond_paper_vs_noise": "09", "beyond_draws_needed": "09",
    "beyond_response_matrix": "09", "beyond_sweep_lift": "09", "beyond_sweep_lift_sector": "09",
    "beyond_fully_herded": "09", "beyond_report": "09", "beyond_figures": "09",
}


class MissingArtifactError(FileNotFoundError):
    """A stage's input is not on disk; the message says which stage makes it."""


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


def write_frame(cfg: RunConfig, name: str, df: pd.DataFrame) -> Path:
    """Write a DataFrame artifact as parquet, atomically."""
    return write_atomic(artifact_path(cfg, name), lambda tmp: df.to_parquet(tmp, index=False))


def read_frame(cfg: RunConfig, name: str) -> pd.DataFrame:
    """Read a parquet artifact, or explain which stage to run to make it."""
    path = artifact_path(cfg, name)
    if not path.is_file():
        stage = PRODUCERS.get(name, "??")
        raise MissingArtifactError(
            f"{path} does not exist: run stage {stage} first "
            f"(`make stage STAGE={stage} RUN={cfg.name}`)."
        )
    return pd.read_parquet(path)


def write_json(cfg: RunConfig, name: str, obj: Any) -> Path:
    """Write a JSON report (counts, exclusions) next to the stage's frames, atomically."""
    text = json.dumps(obj, indent=2, sort_keys=True, default=str)
    return write_atomic(artifact_path(cfg, name, ".json"), lambda tmp: tmp.write_text(text, encoding="utf-8"))


def read_json(cfg: RunConfig, name: str) -> Any:
    path = artifact_path(cfg, name, ".json")
    if not path.is_file():
        stage = PRODUCERS.get(name, "??")
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
