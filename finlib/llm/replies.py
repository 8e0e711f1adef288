"""Reading a model's reply, whatever the task: reasoning blocks, cut-off reasoning, JSON objects in text.

Generic on purpose: both papers' parsers (Fin-Bias ratings in `finlib.finbias.answers`, BizFinBench's
scorers and judges in `finlib.bizfin`) read replies through these functions, so a reply with a
`<think>` block or a fenced, single-quoted JSON object is read the same way by every stage.
"""
from __future__ import annotations

import ast
import json
import re
from typing import Any

MAX_PARSE_CHARS = 20_000  # model replies are short; bounding the work keeps hostile input cheap


_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)


def strip_think(text: str) -> str:
    """The reply without its reasoning: `<think>…</think>` blocks removed.

    Reasoning models (Qwen3 in thinking mode, DeepSeek-R1 distills) write their deliberation
    first; ratings weighed there are not the answer. Servers whose chat template opens the
    `<think>` tag in the prompt return only the closing tag, so everything before the last
    `</think>` is reasoning. An unclosed `<think>` (cut off while thinking) leaves only the text
    before it: the model never reached its answer.
    """
    if not isinstance(text, str):
        return ""
    # Complete blocks removed in one forward scan (a lazy `<think>.*?</think>` regex rescans to the
    # end from every unclosed tag: quadratic on hostile input).
    kept, pos = [], 0
    while (o := _THINK_OPEN.search(text, pos)) is not None:
        c = _THINK_CLOSE.search(text, o.end())
        if c is None:
            break
        kept.append(text[pos:o.start()])
        pos = c.end()
    t = "".join(kept) + text[pos:]
    closes = list(_THINK_CLOSE.finditer(t))
    if closes:  # an answer after a stray closing tag: keep what follows the last one
        t = t[closes[-1].end():]
    opened = _THINK_OPEN.search(t)
    if opened:
        t = t[:opened.start()]
    return t.strip()


def cut_in_think(text: Any) -> bool:
    """True when the reply ends inside an unclosed `<think>` block: the output budget ran out while the
    model was reasoning, so it holds no answer (a status of its own, not a wrong answer)."""
    if not isinstance(text, str):
        return False
    opens = list(_THINK_OPEN.finditer(text))
    return bool(opens) and _THINK_CLOSE.search(text, opens[-1].end()) is None


def read_json_objects(text: str, max_chars: int | None = MAX_PARSE_CHARS) -> list[dict]:
    """The JSON object(s) a model wrote in its reply, in order: `<think>` stripped, ```json fences
    and text around them tolerated, strings with raw line breaks (a multi-line "reason" or "cot")
    read, single-quoted / trailing-comma dicts repaired.

    The one JSON-in-text reader (stages 04, 05, 07 and the BizFinBench scorers use it): top-level
    objects only, nested objects are inside their parent; an object that cannot be read is
    skipped, never guessed.
    """
    stripped = strip_think(text)
    return find_json_objects(stripped if max_chars is None else stripped[:max_chars])


MAX_JSON_STARTS = 200  # bounded work on hostile input ("{" * 10**6): unreadable starts tried at most


def find_json_objects(text: str) -> list[dict]:
    """Every top-level JSON-ish object in `text` (strict JSON first, then Python-dict syntax
    with single quotes / trailing commas). Objects nested in strings are not visited."""
    out: list[dict] = []
    dec = json.JSONDecoder(strict=False)  # strict=False: raw line breaks inside strings (a multi-line "reason")
    i = text.find("{")
    failed = 0
    while i != -1 and failed < MAX_JSON_STARTS:
        obj, end = None, None
        try:
            obj, end = dec.raw_decode(text, i)
        except (ValueError, RecursionError):  # RecursionError: hostile nesting, not an answer
            block_end = _matching_brace(text, i)
            if block_end is not None:
                block = re.sub(r",\s*([}\]])", r"\1", _escape_raw_breaks(text[i:block_end + 1]))
                for loader in (json.loads, _literal):
                    try:
                        obj = loader(block)
                        end = block_end + 1
                        break
                    except Exception:  # noqa: BLE001 - any failure just means "not this block"
                        obj = None
        if isinstance(obj, dict):
            out.append(obj)
            i = text.find("{", end)
        else:
            failed += 1
            i = text.find("{", i + 1)
    return out


def _escape_raw_breaks(block: str) -> str:
    """Raw line breaks and tabs inside quoted strings written as escapes, so a Python-dict reply
    with a multi-line 'reason' still reads (literal_eval rejects a raw newline in a string)."""
    out, quote, esc = [], None, False
    for ch in block:
        if quote:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == quote:
                quote = None
            elif ch in "\n\r\t":
                ch = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}[ch]
        elif ch in "\"'":
            quote = ch
        out.append(ch)
    return "".join(out)


def _literal(block: str) -> Any:
    block = re.sub(r"\btrue\b", "True", re.sub(r"\bfalse\b", "False", re.sub(r"\bnull\b", "None", block)))
    return ast.literal_eval(block)


def _matching_brace(text: str, start: int) -> int | None:
    """Index of the `}` closing the `{` at `start`, skipping quoted strings of either kind."""
    depth, quote, esc = 0, None, False
    for j in range(start, min(len(text), start + MAX_PARSE_CHARS)):
        ch = text[j]
        if quote:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return j
    return None
