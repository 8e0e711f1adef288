"""Model backends: one declared record per backend, and the registry that names them.

A registry record's `backend` field (params/models.yaml) names one `Backend` here. The engine,
the stages, the plan and the preflight never ask which backend a model has: they ask its record
(`backend_of(spec)`) what it can do (score labels, load weights in this process, serve over HTTP,
file a Batch API job, answer a subset of reports with constrained JSON) and let it open its own
client and send. Adding a backend is declaring one `BackendRecord` and calling `register_backend`;
docs/architecture.md ("Model backends") lists the fields.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from finlib.llm.progress import Progress
    from finlib.llm.spec import ModelSpec
    from finlib.llm.store import Request, ResponseStore

DEFAULT_MODEL_CACHE = Path("data/interim/models")  # params inference.model_cache (callers pass theirs)
DEFAULT_LOG_DIR = Path("runs/llamacpp")  # stages pass runs/<run>/
REDUCED_PRECISION = ("bfloat16", "float16")


@dataclass(frozen=True)
class SendOptions:
    """What a caller hands every sender; each backend reads the fields it needs (a server-backed
    one ignores `local_model`, an in-process one ignores `batch`)."""

    budget: Any = None
    progress: Progress | None = None
    local_model: Any = None
    batch: bool = False
    batch_dir: Path | None = None
    batch_poll_s: float = 60.0
    model_cache: Path | None = None
    log_dir: Path | None = None


class Backend(Protocol):
    """What the rest of the code may ask of a model's backend. Every flag is a capability the
    callers read instead of comparing backend names."""

    name: str
    via: str  # how stage 03's report names the transport (a Batch API run says "batch_api")
    self_hosted: bool  # runs on hardware the run pays for by the hour: the plan prices measured tokens/s
    in_process: bool  # the weights load in this process: own tokenizer, seeded draws, whole-list sender
    scores_labels: bool  # reads label probabilities in one forward pass (`inference.mode: score`)
    trains: bool  # DPO tunes and evaluates its weights here (LoRA adapter attached in process)
    http_endpoint: bool  # served at the record's `base_url`: endpoint overrides, reachability, vLLM command
    needs_key_env: bool  # a record must name `api_key_env` (the variable, or null for a keyless server)
    batch_api: bool  # `inference.batch` files its calls with the OpenAI Batch API (half price)
    constrained_json: bool  # may decode under a JSON schema (`inference.constrained_json`)
    subset_generator: bool  # answers the first `inference.generator_reports` reports only

    def send(self, spec: ModelSpec, pending: Iterable[Request], store: ResponseStore, opts: SendOptions) -> None:
        """Answer `pending` and put each result in `store`."""

    def engine_key(
        self, spec: ModelSpec, dtype: str | None, adapter_sha256: str | None, threads: int | None
    ) -> dict | None:
        """What besides messages and sampling fixes the output (part of the store key); None: the model id does."""

    def check(self, rec: dict) -> tuple[str, str] | None:
        """The first problem of a raw registry record for this backend, as (field, message), or None."""

    def gguf_path(self, spec: ModelSpec, cache_root: Path) -> Path | None:
        """The record's GGUF file (a tokenizer source), or None when it names none."""

    def open_model(self, spec: ModelSpec, cache_root: Path, **options: Any) -> Any:
        """The model loaded in this process (an `in_process` backend); an error for any other."""


@dataclass(frozen=True)
class BackendRecord:
    """One backend, declared: its capabilities and the functions that open its client and key its
    answers (see `Backend` for what each field means)."""

    name: str
    sender: Callable[..., None]
    engine_fields: Callable[..., dict | None]
    checker: Callable[[dict], tuple[str, str] | None]
    via: str
    self_hosted: bool = False
    in_process: bool = False
    scores_labels: bool = False
    trains: bool = False
    http_endpoint: bool = False
    needs_key_env: bool = False
    batch_api: bool = False
    constrained_json: bool = False
    subset_generator: bool = False
    gguf_locator: Callable[..., Path | None] | None = None
    loader: Callable[..., Any] | None = None

    def send(self, spec: ModelSpec, pending: Iterable[Request], store: ResponseStore, opts: SendOptions) -> None:
        """Answer `pending` through this backend's client; results land in `store`."""
        self.sender(spec, pending, store, opts)

    def engine_key(
        self, spec: ModelSpec, dtype: str | None = None, adapter_sha256: str | None = None, threads: int | None = None
    ) -> dict | None:
        """The store-key engine fields of `spec` (see `engine.engine_key`)."""
        return self.engine_fields(spec, dtype, adapter_sha256, threads)

    def check(self, rec: dict) -> tuple[str, str] | None:
        """The first backend-specific problem of a raw registry record, or None."""
        return self.checker(rec)

    def gguf_path(self, spec: ModelSpec, cache_root: Path) -> Path | None:
        """The GGUF file a tokenizer is read from: the record's locator, else a packaged GGUF."""
        if self.gguf_locator is not None:
            return self.gguf_locator(spec, cache_root)
        return packaged_gguf(spec, cache_root)

    def open_model(self, spec: ModelSpec, cache_root: Path, **options: Any) -> Any:
        """The model loaded in this process (in-process backends only); `options` go to its loader."""
        if self.loader is None:
            raise ValueError(f"model {spec.name!r}: backend {self.name!r} loads no weights in this process")
        return self.loader(spec, cache_root, **options)


BACKENDS: dict[str, BackendRecord] = {}


class UnknownBackend(KeyError):
    """A backend name no record declares."""


def register_backend(record: BackendRecord) -> BackendRecord:
    """Declare a backend under its name (a second record of the same name is an error)."""
    if record.name in BACKENDS:
        raise ValueError(f"backend {record.name!r} is already declared")
    BACKENDS[record.name] = record
    return record


def backend_named(name: str) -> BackendRecord:
    """The record of backend `name`; an unknown name is an error listing the declared ones."""
    if name not in BACKENDS:
        raise UnknownBackend(f"unknown backend {name!r}; declared: {tuple(BACKENDS)}")
    return BACKENDS[name]


def backend_of(spec: ModelSpec) -> BackendRecord:
    """The record of a registry model's backend."""
    return backend_named(spec.backend)


# -- shared pieces -----------------------------------------------------------------------------
def packaged_gguf(spec: ModelSpec, cache_root: Path) -> Path | None:
    """A GGUF shipped inside a pip package (`gguf_package` + `gguf_file`), else None."""
    if not (spec.gguf_package and spec.gguf_file):
        return None
    from finlib.llm.local_backend import gguf_dir

    return gguf_dir(spec.gguf_package) / spec.gguf_file


def _weights_fields(spec: ModelSpec) -> dict:
    return {"gguf_package": spec.gguf_package, "gguf_file": spec.gguf_file, "hf_path": spec.hf_path}


# -- openai: any OpenAI-compatible HTTP server (API models, vLLM) --------------------------------
def _send_openai(spec: ModelSpec, pending: Iterable[Request], store: ResponseStore, opts: SendOptions) -> None:
    """Live chat completions, or the Batch API when the run asks for it."""
    if opts.batch:
        from finlib.llm.batch_api import run_batch

        run_batch(
            spec,
            pending,
            store,
            Path(opts.batch_dir or "data/interim/batches"),
            interval_s=float(opts.batch_poll_s),
            budget=opts.budget,
            progress=opts.progress,
        )
        return
    from finlib.llm.loop import run_coroutine
    from finlib.llm.openai_backend import run_openai

    run_coroutine(run_openai(spec, pending, store, budget=opts.budget, progress=opts.progress))


def _check_openai(rec: dict) -> tuple[str, str] | None:
    import re

    url = rec.get("base_url")
    if not url or not re.match(r"^https?://", url):
        return "base_url", f"an http(s) URL is required for backend openai, got {url!r}"
    return None


def _no_engine(spec: ModelSpec, dtype: str | None, adapter_sha256: str | None, threads: int | None) -> None:
    """A remote server's model id names its weights."""
    return None


OPENAI = register_backend(
    BackendRecord(
        name="openai",
        sender=_send_openai,
        engine_fields=_no_engine,
        checker=_check_openai,
        via="chat_completions",
        http_endpoint=True,
        needs_key_env=True,
        batch_api=True,
    )
)


# -- local: transformers in this process -----------------------------------------------------
def _send_local(spec: ModelSpec, pending: Iterable[Request], store: ResponseStore, opts: SendOptions) -> None:
    from finlib.llm.local_backend import run_local

    if opts.local_model is None:
        raise ValueError(f"model {spec.name!r}: the local backend needs a loaded LocalModel")
    run_local(opts.local_model, pending, store, opts.progress)


def _local_engine(spec: ModelSpec, dtype: str | None, adapter_sha256: str | None, threads: int | None) -> dict:
    """The weight source and dtype; in bfloat16 / float16 also the CPU threads the reductions split over."""
    engine = {**_weights_fields(spec), "dtype": dtype}
    if dtype in REDUCED_PRECISION:
        from finlib.llm.precision import compute_threads

        engine["cpu_threads"] = compute_threads(threads)
    if adapter_sha256:  # a LoRA adapter on top (stage 05's DPO model): its content hash names the weights
        engine["adapter_sha256"] = adapter_sha256
    return engine


def _check_local(rec: dict) -> tuple[str, str] | None:
    has_gguf = bool(rec.get("gguf_package") and rec.get("gguf_file"))
    if not has_gguf and not rec.get("hf_path"):
        return (
            "gguf_package/gguf_file/hf_path",
            "a local model needs gguf_package + gguf_file, or hf_path (a folder or hub id)",
        )
    return None


def _load_local(spec: ModelSpec, cache_root: Path, **options: Any) -> Any:
    from finlib.llm.local_backend import LocalModel

    return LocalModel(spec, cache_root, **options)


LOCAL = register_backend(
    BackendRecord(
        name="local",
        sender=_send_local,
        engine_fields=_local_engine,
        checker=_check_local,
        via="local",
        self_hosted=True,
        in_process=True,
        scores_labels=True,
        trains=True,
        loader=_load_local,
    )
)


# -- llamacpp: a GGUF served here by llama.cpp (finlib/llm/llamacpp.py) ------------------------
def _send_llamacpp(spec: ModelSpec, pending: Iterable[Request], store: ResponseStore, opts: SendOptions) -> None:
    """A llama.cpp server on a free local port (one per process, reused), then sent exactly like a
    vLLM record, through the openai backend with the server's slots as its concurrency."""
    from finlib.llm.llamacpp import ensure_server, served_spec
    from finlib.llm.loop import run_coroutine
    from finlib.llm.openai_backend import run_openai

    url = ensure_server(spec, Path(opts.model_cache or DEFAULT_MODEL_CACHE), Path(opts.log_dir or DEFAULT_LOG_DIR))
    run_coroutine(run_openai(served_spec(spec, url), pending, store, budget=opts.budget, progress=opts.progress))


def _llamacpp_engine(spec: ModelSpec, dtype: str | None, adapter_sha256: str | None, threads: int | None) -> dict:
    """The pinned hash names the weights; llama.cpp has no dtype choice."""
    return {
        "gguf_file": spec.gguf_file,
        "gguf_sha256": spec.gguf_sha256,
        "gguf_package": spec.gguf_package,
        "runtime": "llama.cpp",
    }


def _check_llamacpp(rec: dict) -> tuple[str, str] | None:
    """A llama.cpp-served GGUF: one file in a package, or chunks in pinned packages + the joined
    file's SHA-256 (anonymous uploads are trusted only by hash); the URL is made at run time."""
    import re

    if rec.get("base_url"):
        return "base_url", (
            "a llamacpp model is served by finlib on a free local port: omit it "
            "(for a server you run yourself use backend openai with its base_url)"
        )
    if not rec.get("gguf_file"):
        return "gguf_file", "missing (the GGUF file name)"
    parts = rec.get("gguf_parts")
    if parts is not None:
        if not parts or not all(
            isinstance(p, str) and re.match(r"^[A-Za-z0-9._-]+==[A-Za-z0-9._+-]+$", p) for p in parts
        ):
            return "gguf_parts", "a non-empty list of pinned pip requirements 'name==version'"
        if not re.match(r"^[0-9a-f]{64}$", rec.get("gguf_sha256") or ""):
            return "gguf_sha256", "64 lowercase hex digits required with gguf_parts"
    elif not rec.get("gguf_package"):
        return "gguf_package/gguf_parts", "a llamacpp model needs gguf_package or gguf_parts"
    if rec.get("threads") is not None and rec["threads"] < 1:
        return "threads", "must be >= 1 or null"
    return None


def _llamacpp_gguf(spec: ModelSpec, cache_root: Path) -> Path:
    from finlib.llm.llamacpp import gguf_path

    return gguf_path(spec, cache_root)


LLAMACPP = register_backend(
    BackendRecord(
        name="llamacpp",
        sender=_send_llamacpp,
        engine_fields=_llamacpp_engine,
        checker=_check_llamacpp,
        via="llama.cpp server (chat_completions)",
        self_hosted=True,
        constrained_json=True,
        subset_generator=True,
        gguf_locator=_llamacpp_gguf,
    )
)
