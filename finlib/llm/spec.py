"""One registry model as the code holds it (`ModelSpec`): where it runs, how to call it, what it costs.

`finlib.llm.registry` reads and validates `params/models.yaml` into these records; the backends
(`finlib.llm.backends` and the senders it calls) read them without depending on the registry's reader.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field


class MissingKeyError(RuntimeError):
    """The environment variable named by a record's `api_key_env` is unset or empty."""


@dataclass(frozen=True)
class ModelSpec:
    """One model: where it runs, how to call it, what it costs."""

    name: str
    backend: str
    model_id: str
    supports_system: bool
    context_length: int
    price_input_per_m: float
    price_output_per_m: float
    sampling: dict = field(default_factory=dict)
    concurrency: int = 1
    rpm: int = 0
    tpm: int = 0
    max_attempts: int = 6
    timeout_s: float = 120.0
    max_tokens_param: str = "max_tokens"
    base_url: str | None = None
    api_key_env: str | None = None
    gguf_package: str | None = None
    gguf_file: str | None = None
    hf_path: str | None = None
    paper_name: str | None = None  # the row name in Fin-Bias Tables 4-7 (e.g. "GPT-5" for gpt-5.1)
    plumbing: bool = False  # a pipeline-test model whose numbers are not research results
    gguf_parts: tuple[str, ...] | None = None  # llamacpp: GGUF split across packages (pip pins, in order)
    gguf_sha256: str | None = None  # llamacpp: SHA-256 of the (joined) GGUF file, verified before serving
    threads: int | None = None  # llamacpp: server threads (None = every core llama.cpp sees)
    thinks: bool = False  # reasons by default (<think> or hidden reasoning tokens) before answering
    max_new_tokens: int = 4096  # output-token limit for this model (the authors' code: 4096 for API/vLLM)
    # circuit breaker (finlib.llm.openai_backend.Breaker, one per endpoint and process): stop after this many
    # consecutive attempts failing in one kind waiting cannot heal (401/403, DNS, quota, unknown model,
    # timeout; refused, 5xx, 429 without Retry-After once the streak lasted breaker_grace_s); 0 = never
    breaker_failures: int = 10
    breaker_grace_s: float = 20.0  # refused / 5xx / 429 must also have lasted this long (a restart heals)
    # a 429's Retry-After up to this long is waited out (a per-minute window ends within 60 s): a streak of
    # them opens the breaker only after the grace beyond that wait; a longer one (a daily limit) opens it
    retry_after_max_s: float = 90.0
    # a stalled endpoint (accepts, never answers): no response to any call in flight for this long and no
    # answer to a GET /models probe either stops the model, whatever timeout_s is; 0 = off
    stall_s: float = 30.0
    sends_sampling: bool = True  # false: temperature/top_p are never sent (OpenAI o-series refuse any but 1)
    reasoning_tokens: int = 0  # output tokens a thinker may spend reasoning, added to a stage's answer
    # budget (max_completion_tokens counts hidden reasoning; a vLLM thinker's
    # <think> block counts against max_tokens): its thinking budget
    # vLLM-served records: the precision the weights are served at (`vllm serve --dtype`), as the authors
    # ran them (run_vllm.py: "half", "bfloat16" for gemma-2); None = vLLM's own choice (the config's dtype)
    dtype: str | None = None
    # billions of parameters a token passes through (a mixture of experts: the active ones), from the model
    # card: `make plan` turns a self-hosted model's tokens into GPU-hours with it (None = size not recorded)
    parameters_b: float | None = None

    @property
    def accepts_temperature(self) -> bool:
        return self.sends_sampling

    def cost(self, input_tokens: int, output_tokens: int, discount: float = 1.0) -> float:
        """USD for one call (discount 0.5 for the Batch API)."""
        return discount * (input_tokens * self.price_input_per_m + output_tokens * self.price_output_per_m) / 1e6

    def api_key(self) -> str:
        """The key from the environment; a keyless server (api_key_env null) gets a placeholder."""
        if self.api_key_env is None:
            return "EMPTY"
        value = os.environ.get(self.api_key_env, "")
        if not value:
            raise MissingKeyError(
                f"model '{self.name}' needs an API key in the environment variable "
                f"{self.api_key_env} (unset or empty). Export it; never put keys in params files."
            )
        return value
