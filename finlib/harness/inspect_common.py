"""What the inspect tasks share: the registry record as inspect's config, and one model call whose
failure after the record's attempts is a "not answered" record, never an exception that drops the
sample (inspect would mark the whole sample as an error and its other calls would be lost)."""

from __future__ import annotations

from pathlib import Path

from inspect_ai.model import (
    CachePolicy,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageUser,
    GenerateConfig,
    Model,
)
from inspect_ai.util import LimitExceededError

from finlib.llm.registry import load_registry
from finlib.llm.spec import ModelSpec

REPO = Path(__file__).resolve().parents[2]


def registry_record(record: str, registry: str | Path) -> ModelSpec:
    """The named record of a model registry (a relative path is read from the repository when it
    is not found from the working folder)."""
    path = Path(registry)
    specs = load_registry(path if path.is_absolute() or path.exists() else REPO / path)
    if record not in specs:
        raise ValueError(f"{registry}: no model record {record!r}; records: {sorted(specs)}")
    return specs[record]


def generate_config(spec: ModelSpec, max_new_tokens: int | None, temperature: float | None = None) -> GenerateConfig:
    """The record's sampling, output limit, attempts, timeout and concurrency as inspect's config
    (inspect's defaults -- unlimited retries, adaptive concurrency -- are not the record's)."""
    sampling = dict(spec.sampling) if spec.sends_sampling else {}
    if temperature is not None and spec.accepts_temperature:
        sampling["temperature"] = float(temperature)
    return GenerateConfig(
        temperature=sampling.get("temperature"),
        top_p=sampling.get("top_p"),
        max_tokens=int(max_new_tokens or spec.max_new_tokens),
        max_retries=spec.max_attempts - 1,
        timeout=int(spec.timeout_s),
        max_connections=spec.concurrency,
    )


def to_inspect(messages: list[dict[str, str]]) -> list:
    """The project's chat messages as inspect's message objects."""
    kinds = {"system": ChatMessageSystem, "user": ChatMessageUser, "assistant": ChatMessageAssistant}
    return [kinds[m["role"]](content=m["content"]) for m in messages]


async def ask(model: Model, messages: list[dict[str, str]], cache: bool, config: GenerateConfig | None = None) -> dict:
    """One call as a reply record: status "ok" with its text (and whether it stopped at the output
    limit) or "error" with the reason, after the attempts inspect's config allows. The cache policy
    is passed to the call itself: the CLI's `--cache` is not relied on to reach a call made in a solver."""
    try:
        out = await model.generate(
            to_inspect(messages), config=config or GenerateConfig(), cache=CachePolicy(expiry=None) if cache else False
        )
    except LimitExceededError:
        raise
    except Exception as exc:  # noqa: BLE001 -- any failure after the retries is "not answered", as stage 03 stores it
        return {
            "status": "error",
            "raw_text": None,
            "error": f"{type(exc).__name__}: {exc}"[:300],
            "truncated_output": None,
        }
    if out.error:
        return {"status": "error", "raw_text": None, "error": str(out.error)[:300], "truncated_output": None}
    return {
        "status": "ok",
        "raw_text": out.completion,
        "error": None,
        "truncated_output": out.stop_reason == "max_tokens",
    }
