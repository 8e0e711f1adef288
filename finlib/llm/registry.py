"""The model registry (`params/models.yaml`): one validated record per model.

Validation is strict (unknown fields, wrong types, missing fields are errors naming the file,
the record and the field) because a typo in a registry record would otherwise run the whole
grid against the wrong endpoint or price it wrongly. Keys never live here: `api_key_env`
names an environment variable, and a field that looks like a key is refused.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from finlib.core.config import read_yaml_mapping
from finlib.llm.backends import BACKENDS, backend_named, backend_of
from finlib.llm.spec import ModelSpec

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class RegistryError(ValueError):
    """A malformed registry record; the message names the file, the record and the field."""


_TYPES: dict[str, tuple[type, ...]] = {
    "name": (str,), "backend": (str,), "model_id": (str,), "supports_system": (bool,),
    "context_length": (int,), "price_input_per_m": (int, float), "price_output_per_m": (int, float),
    "sampling": (dict,), "concurrency": (int,), "rpm": (int,), "tpm": (int,), "max_attempts": (int,),
    "timeout_s": (int, float), "max_tokens_param": (str,), "base_url": (str, type(None)),
    "api_key_env": (str, type(None)), "gguf_package": (str, type(None)), "gguf_file": (str, type(None)),
    "hf_path": (str, type(None)), "paper_name": (str, type(None)), "plumbing": (bool,),
    "gguf_parts": (list, type(None)), "gguf_sha256": (str, type(None)), "threads": (int, type(None)), "thinks": (bool,),
    "max_new_tokens": (int,), "breaker_failures": (int,), "breaker_grace_s": (int, float),
    "retry_after_max_s": (int, float),
    "stall_s": (int, float),
    "sends_sampling": (bool,), "reasoning_tokens": (int,),
    "dtype": (str, type(None)), "parameters_b": (int, float, type(None)),
}
VLLM_DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")  # `vllm serve --dtype` choices
_REQUIRED = ("name", "backend", "model_id", "supports_system", "context_length",
             "price_input_per_m", "price_output_per_m", "sampling")
_SAMPLING_KEYS = {"temperature", "top_p", "seed"}


def _fail(path: Path, where: str, field_: str, msg: str) -> RegistryError:
    return RegistryError(f"{path}: {where}, field '{field_}': {msg}")


def validate_record(rec: Any, path: Path, index: int) -> ModelSpec:
    """Check one merged record and build its ModelSpec, or raise naming record and field."""
    where = f"models[{index}]"
    if not isinstance(rec, dict):
        raise RegistryError(f"{path}: {where} must be a mapping, got {type(rec).__name__}")
    if isinstance(rec.get("name"), str):
        where = f"models[{index}] '{rec['name']}'"
    for key in rec:
        lowered = str(key).lower()
        secretish = any(m in lowered for m in ("key", "secret", "token", "password"))
        if secretish and key not in ("api_key_env", "max_tokens_param", "max_new_tokens", "reasoning_tokens"):
            raise _fail(path, where, key, "looks like a secret; name the environment variable in api_key_env")
        if key not in _TYPES:
            raise _fail(path, where, key, f"unknown field (known: {', '.join(sorted(_TYPES))})")
    for key in _REQUIRED:
        if key not in rec:
            raise _fail(path, where, key, "missing")
    for key, value in rec.items():
        ok = _TYPES[key]
        if isinstance(value, bool) and bool not in ok or not isinstance(value, ok):
            raise _fail(path, where, key, f"expected {'/'.join(t.__name__ for t in ok)}, got {value!r}")
    if not _NAME.match(rec["name"]):
        raise _fail(path, where, "name", "use letters, digits, '.', '_' or '-'")
    if isinstance(rec.get("paper_name"), str) and not rec["paper_name"].strip():
        raise _fail(path, where, "paper_name", "empty (omit it or give the row name printed in the paper)")
    if rec["backend"] not in BACKENDS:
        raise _fail(path, where, "backend", f"must be one of {tuple(BACKENDS)}, got {rec['backend']!r}")
    backend = backend_named(rec["backend"])
    if rec["context_length"] <= 0:
        raise _fail(path, where, "context_length", "must be positive")
    for key in ("price_input_per_m", "price_output_per_m", "rpm", "tpm"):
        if rec.get(key, 0) < 0:
            raise _fail(path, where, key, "must be >= 0")
    for key in ("concurrency", "max_attempts", "max_new_tokens"):
        if rec.get(key, 1) < 1:
            raise _fail(path, where, key, "must be >= 1")
    for key in ("breaker_failures", "breaker_grace_s", "retry_after_max_s", "stall_s", "reasoning_tokens"):
        if rec.get(key, 0) < 0:
            raise _fail(path, where, key, "must be >= 0")
    if rec.get("dtype") is not None and (not backend.http_endpoint or rec["dtype"] not in VLLM_DTYPES):
        raise _fail(path, where, "dtype", f"a vLLM-served (backend openai) record's --dtype, one of {VLLM_DTYPES}; "
                    f"got {rec['dtype']!r} on backend {rec['backend']!r} (local torch models: inference.dtype)")
    if rec.get("timeout_s", 1) <= 0:
        raise _fail(path, where, "timeout_s", "must be positive")
    if rec.get("parameters_b") is not None and rec["parameters_b"] <= 0:
        raise _fail(path, where, "parameters_b", "must be positive (billions of parameters, e.g. 8.0)")
    sampling = rec["sampling"]
    unknown = set(sampling) - _SAMPLING_KEYS
    if unknown:
        raise _fail(path, where, "sampling", f"unknown keys {sorted(unknown)} (known: {sorted(_SAMPLING_KEYS)})")
    for key in ("temperature", "top_p"):
        if key not in sampling:
            raise _fail(path, where, f"sampling.{key}", "missing (make it explicit; the authors' code uses 1.0)")
        v = sampling[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or (key == "top_p" and v > 1):
            raise _fail(path, where, f"sampling.{key}", f"invalid value {v!r}")
    if rec.get("max_tokens_param", "max_tokens") not in ("max_tokens", "max_completion_tokens"):
        raise _fail(path, where, "max_tokens_param", "must be max_tokens or max_completion_tokens")
    problem = backend.check(rec)
    if problem is not None:
        raise _fail(path, where, *problem)
    if backend.needs_key_env:
        if "api_key_env" not in rec:
            raise _fail(path, where, "api_key_env", "missing (the NAME of the env var, or null for a keyless server)")
        env = rec["api_key_env"]
        if env is not None and not _ENV_NAME.match(env):
            raise _fail(path, where, "api_key_env", f"must be an environment variable NAME, got {env[:4]!r}...")
    if isinstance(rec.get("gguf_parts"), list):
        rec = {**rec, "gguf_parts": tuple(rec["gguf_parts"])}
    seconds = ("timeout_s", "breaker_grace_s", "retry_after_max_s", "stall_s")
    return ModelSpec(**{k: (float(v) if k.startswith("price") or k in seconds else v) for k, v in rec.items()})


def load_registry(path: Path) -> dict[str, ModelSpec]:
    """All records of a registry file, merged over its `defaults`, validated, keyed by name."""
    path = Path(path)
    raw = read_yaml_mapping(path, "model registry", RegistryError)
    if not isinstance(raw.get("models"), list):
        raise RegistryError(f"{path}: top level must be a mapping with a 'models' list")
    extra = set(raw) - {"defaults", "models"}
    if extra:
        raise RegistryError(f"{path}: unknown top-level keys {sorted(extra)}")
    defaults = raw.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise RegistryError(f"{path}: 'defaults' must be a mapping")
    specs: dict[str, ModelSpec] = {}
    for i, rec in enumerate(raw["models"]):
        merged = {**defaults, **rec} if isinstance(rec, dict) else rec
        spec = validate_record(merged, path, i)
        if spec.name in specs:
            raise _fail(path, f"models[{i}] '{spec.name}'", "name", "duplicate model name")
        specs[spec.name] = spec
    return specs


# Per-model endpoints. A run can point each model at its own server without editing the registry:
# params `inference.endpoints: {<name>: {base_url, api_key_env, rpm, tpm, concurrency}}`, and the
# environment, which wins over params: FINLIB_BASE_URL__<NAME> and FINLIB_API_KEY_ENV__<NAME>, where
# <NAME> is the registry name upper-cased with every other character as "_" (llama-3-8b-it ->
# LLAMA_3_8B_IT). rpm/tpm/concurrency follow your account tier or server size.
ENDPOINT_FIELDS = ("base_url", "api_key_env", "rpm", "tpm", "concurrency")


def endpoint_env_name(model: str, field_: str = "base_url") -> str:
    """The environment variable that overrides one endpoint field of a model."""
    return f"FINLIB_{field_.upper()}__" + re.sub(r"[^A-Za-z0-9]", "_", model).upper()


def apply_endpoints(registry: dict[str, ModelSpec], endpoints: dict | None = None,
                    environ: dict | None = None, source: str = "inference.endpoints") -> dict[str, ModelSpec]:
    """The registry with per-model endpoint overrides from params, then from the environment.

    Only API-served records (backend openai) take an endpoint; each override is validated like a
    registry record, so a wrong URL or a key pasted where a variable NAME belongs is an error
    naming the model and the field.
    """
    import dataclasses

    environ = os.environ if environ is None else environ
    endpoints = dict(endpoints or {})
    unknown = sorted(set(endpoints) - set(registry))
    if unknown:
        raise RegistryError(f"{source}: unknown model(s) {unknown}; registry has {sorted(registry)}")
    out = dict(registry)
    for name, spec in registry.items():
        over = dict(endpoints.get(name) or {})
        bad = sorted(set(over) - set(ENDPOINT_FIELDS))
        if bad:
            raise RegistryError(f"{source}.{name}: unknown field(s) {bad} (known: {list(ENDPOINT_FIELDS)})")
        for f in ("base_url", "api_key_env"):
            env = environ.get(endpoint_env_name(name, f))
            if env:
                over[f] = None if (f == "api_key_env" and env.lower() in ("null", "none")) else env
        if not over:
            continue
        if not backend_of(spec).http_endpoint:
            raise RegistryError(f"{source}.{name}: backend {spec.backend} has no endpoint to set (only openai records)")
        rec = {**dataclasses.asdict(spec), **over}
        rec["gguf_parts"] = list(rec["gguf_parts"]) if rec.get("gguf_parts") else rec.get("gguf_parts")
        out[name] = validate_record(rec, Path(source), 0)
    return out


def run_registry(cfg) -> dict[str, ModelSpec]:
    """The registry a run uses: `inference.registry` with the run's `inference.endpoints` and the
    environment's overrides applied (see `apply_endpoints`)."""
    inf = cfg["inference"]
    return apply_endpoints(load_registry(cfg.path(inf["registry"])),
                           inf.get("endpoints"), source=f"{cfg.params_file}: inference.endpoints")


# vLLM flags some checkpoints need (their repositories ship custom model code).
VLLM_EXTRA_FLAGS: dict[str, str] = {"internlm/internlm2-chat-7b": "--trust-remote-code",
                                    "THUDM/glm-4-9b-chat": "--trust-remote-code",
                                    "deepseek-ai/DeepSeek-V2-Lite-Chat": "--trust-remote-code"}


def vllm_command(spec: ModelSpec) -> str:
    """The documented vLLM command serving one registry model at its `base_url`'s port.

    `--generation-config vllm`: vLLM's server otherwise applies the checkpoint's generation_config.json
    (top_k, repetition penalty, its own temperature) under the request's sampling, while the authors'
    offline sampling applies none; `--max-model-len` is the registry context window (a smaller one
    changes which reports fit); `--dtype` is the record's `dtype`, the precision the authors served
    the model at (half precision; bfloat16 for gemma-2, which overflows in float16), omitted when
    the record has none (vLLM then takes the checkpoint's).
    """
    from urllib.parse import urlparse

    if not backend_of(spec).http_endpoint or not spec.base_url:
        raise RegistryError(f"model '{spec.name}' is not served over HTTP (backend {spec.backend})")
    port = urlparse(spec.base_url).port or 8000
    extra = VLLM_EXTRA_FLAGS.get(spec.model_id, "")
    dtype = f" --dtype {spec.dtype}" if spec.dtype else ""
    return (f"vllm serve {spec.model_id} --port {port} --max-model-len {spec.context_length}{dtype} "
            f"--generation-config vllm {extra}").rstrip()


def select_models(registry: dict[str, ModelSpec], names: list[str], source: str = "inference.models") -> list[ModelSpec]:
    """The records named in params, in order; an unknown name is an error listing the known ones."""
    missing = [n for n in names if n not in registry]
    if missing:
        raise RegistryError(f"{source}: unknown model(s) {missing}; registry has {sorted(registry)}")
    return [registry[n] for n in names]
