"""Whole reports in every context window: the output room a prompt leaves, and the server's word on it.

The authors send every report whole and let the output stop where the context ends (vLLM's
offline `generate` caps nothing else). A fixed output cap subtracted from the context before the
report is placed cut about half of the ~4,000-token reports for the 8k-context models. Here the
input is never cut to make room for output: a request asks for `min(cap, context - prompt)` output
tokens (recorded per item), and a report whose prompt alone leaves no room is not sent at all --
counted as not answered, with the reason.

The client counts tokens with the model's own tokenizer when it is on disk, else with an estimate
(`inference.prompt_length_by`); a server that counts more answers 400 with its own count (vLLM:
"... your request has N input tokens ..."), and `room_from_error` reads the room it leaves so the
call is retried once with that output cap. A report is never held back on the client's count:
it is sent, and a server that refuses it for its context length (`is_context_refusal`, no room
left) gives an empty answer inside N -- what the authors' offline vLLM returned for a prompt
longer than the model's context -- counted with the reason `CONTEXT_REFUSED`.
"""
from __future__ import annotations

import re

MIN_OUTPUT_TOKENS = 16   # below this the answer cannot be written: the item is not sent
SAFETY_TOKENS = 8        # chat-template tokens the estimate may miss

# vLLM >= 0.8: "... maximum context length is 8192 tokens and your request has 5000 input tokens (...)"
# vLLM <= 0.7 / OpenAI: "... maximum context length is 8192 tokens. However, you requested 9000 tokens
# (4904 in the messages, 4096 in the completion) ..."
_NEW = re.compile(r"maximum context length is (\d+) tokens and your request has (\d+) input tokens")
_OLD = re.compile(r"maximum context length is (\d+) tokens\. However, you requested \d+ tokens \((\d+) in the messages")


CONTEXT_REFUSED = "context_length_refused"  # the reason an empty answer carries (error field of an ok row)
_REFUSAL = re.compile(r"maximum context length|exceeds the available context size|context length exceeded"
                      r"|context_length_exceeded|prompt is too long", re.IGNORECASE)


def is_context_refusal(message: str) -> bool:
    """Whether a server's HTTP 400 says the prompt does not fit the model's context (vLLM, OpenAI,
    llama.cpp server wordings)."""
    return message.startswith("HTTP 400") and _REFUSAL.search(message) is not None


def output_room(context_length: int, prompt_tokens: int, cap: int) -> int:
    """Output tokens to ask for: the cap, or what the context leaves after the whole prompt (< MIN_OUTPUT_TOKENS:
    the prompt does not fit)."""
    return min(int(cap), int(context_length) - int(prompt_tokens) - SAFETY_TOKENS)


def fits(context_length: int, prompt_tokens: int, cap: int) -> bool:
    """Whether the whole prompt leaves room for an answer: MIN_OUTPUT_TOKENS, or the whole cap when the
    run asks for fewer (a 4-token cap is the run's choice, not a context that is full)."""
    left = int(context_length) - int(prompt_tokens) - SAFETY_TOKENS
    return left >= min(int(cap), MIN_OUTPUT_TOKENS)


def not_fit_reason(context_length: int, prompt_tokens: int) -> str:
    """The counted reason of an item that is not sent."""
    return (f"report does not fit the context window: {prompt_tokens} prompt tokens leave fewer than "
            f"{MIN_OUTPUT_TOKENS} of {context_length} for the answer (an empty answer inside N; the report is "
            "never cut)")


def room_from_error(message: str) -> int | None:
    """The output room a server's context-length 400 leaves (its context minus its prompt count), or None
    when the message is not such an error or leaves no room."""
    m = _NEW.search(message) or _OLD.search(message)
    if not m:
        return None
    room = int(m.group(1)) - int(m.group(2)) - 1
    return room if room >= MIN_OUTPUT_TOKENS else None
