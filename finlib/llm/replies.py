"""Reading a model's reply, whatever the task: reasoning blocks, cut-off reasoning, JSON objects in text.

Generic on purpose: both papers' parsers (Fin-Bias ratings in `finlib.finbias.answers`, BizFinBench's
scorers and judges in `finlib.bizfin`) read replies through these functions, so a reply with a
`<think>` block or a fenced, single-quoted JSON object is read the same way by every stage.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
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
        kept.append(text[pos : o.start()])
        pos = c.end()
    t = "".join(kept) + text[pos:]
    closes = list(_THINK_CLOSE.finditer(t))
    if closes:  # an answer after a stray closing tag: keep what follows the last one
        t = t[closes[-1].end() :]
    opened = _THINK_OPEN.search(t)
    if opened:
        t = t[: opened.start()]
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
    skipped, never guessed. `max_chars=None` reads the whole reply: every `{` is tried, however
    many unreadable ones (LaTeX `\frac{a}{b}` in reasoning) come before the answer.
    """
    stripped = strip_think(text)
    return whole_text_objects(stripped) if max_chars is None else find_json_objects(stripped[:max_chars])


MAX_JSON_STARTS = 200  # bounded work on hostile input ("{" * 10**6): unreadable starts tried at most
WHOLE_REPLY_WORK_PER_CHAR = 16  # whole-reply reading: characters decoded or repaired per reply character, at most
_OBJECT_START = re.compile(r"""\{\s*["'}]""")  # an object with string keys (or empty) opens this way


def find_json_objects(text: str, max_starts: int | None = MAX_JSON_STARTS) -> list[dict]:
    """Every top-level JSON-ish object in `text` (strict JSON first, then Python-dict syntax
    with single quotes / trailing commas). Objects nested in strings are not visited.

    `max_starts`: unreadable `{` tried at most, each block scanned over at most MAX_PARSE_CHARS
    (cheap on hostile input). None: the whole text (`whole_text_objects`).
    """
    if max_starts is None:
        return whole_text_objects(text)
    out: list[dict] = []
    dec = json.JSONDecoder(strict=False)  # strict=False: raw line breaks inside strings (a multi-line "reason")
    braces = _Braces(text, MAX_PARSE_CHARS)
    i = text.find("{")
    failed = 0
    while i != -1 and failed < max_starts:
        obj, end = None, None
        try:
            obj, end = dec.raw_decode(text, i)
        except (ValueError, RecursionError):  # RecursionError: hostile nesting, not an answer
            block_end = braces.close(i)
            if block_end is not None:
                obj, end = _repaired(text[i : block_end + 1]), block_end + 1
        if isinstance(obj, dict):
            out.append(obj)
            i = text.find("{", end)
        else:
            failed += 1
            i = text.find("{", i + 1)
    return out


def whole_text_objects(text: str) -> list[dict]:
    """`find_json_objects` over the whole text, however many unreadable `{` come first (LaTeX
    `\\frac{a}{b}` in reasoning) and however long an object is. Linear work: only a `{` followed by a
    quote or `}` can open an object with string keys; a `{` no `}` closes is skipped (one shared scan
    settles the braces); each block is decoded on its own slice (a decoding error then costs the
    block, not the text before it). Hostile nesting (`'{"a": ' * n + '}' * n`) stops the reading
    after WHOLE_REPLY_WORK_PER_CHAR x the text's length of decoding."""
    out: list[dict] = []
    dec = json.JSONDecoder(strict=False)
    braces = _Braces(text, None)
    work_left = WHOLE_REPLY_WORK_PER_CHAR * len(text) + MAX_PARSE_CHARS
    m = _OBJECT_START.search(text)
    while m is not None:
        i = m.start()
        close = braces.close(i)
        if close is None:
            m = _OBJECT_START.search(text, i + 1)
            continue
        block = text[i : close + 1]
        work_left -= 2 * len(block)
        if work_left < 0:
            break
        try:
            obj, end = dec.raw_decode(block)
        except (ValueError, RecursionError):
            obj, end = _repaired(block), len(block)
        if isinstance(obj, dict):
            out.append(obj)
            m = _OBJECT_START.search(text, i + end)
        else:
            m = _OBJECT_START.search(text, i + 1)
    return out


def _repaired(block: str) -> Any:
    """The block read as JSON or a Python dict after repairs (raw breaks, trailing commas); None if neither."""
    block = re.sub(r",\s*([}\]])", r"\1", _escape_raw_breaks(block))
    for loader in (json.loads, _literal):
        try:
            return loader(block)
        except Exception:  # noqa: BLE001 - any failure just means "not this block"
            continue
    return None


def _escape_raw_breaks(block: str) -> str:
    """Raw line breaks and tabs inside quoted strings written as escapes, so a Python-dict reply
    with a multi-line 'reason' still reads (literal_eval rejects a raw newline in a string)."""
    return "".join(_RAW_BREAK.sub(_escaped, block[a:b]) if quoted else block[a:b] for a, b, quoted in _segments(block))


_QUOTE_CHAR = re.compile(r"[\"']")
# A quoted string from its opening quote: escaped pairs, the other quote kind and any other character,
# up to the same quote unescaped, or to the end of the scanned range (an unclosed string, a lone "\" last).
_STRING = re.compile(r"""(["'])(?:[^"'\\]|\\.|(?!\1)["'])*(?:\1|\\?\Z)""", re.DOTALL)
_RAW_BREAK = re.compile(r"\\.|[\n\r\t]", re.DOTALL)  # an escaped pair (kept) or a raw break (escaped)
_BREAK_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(m: re.Match) -> str:
    return _BREAK_ESCAPES.get(m.group(), m.group())


def _segments(text: str, start: int = 0, stop: int | None = None) -> Iterator[tuple[int, int, bool]]:
    """`text[start:stop]` as consecutive (from, to, quoted) pieces: a quoted piece is one string literal of
    either quote kind, delimiters included, backslash escapes honoured inside it (outside a string a
    backslash escapes nothing); a string the range ends inside runs to `stop`. The one quote scanner of
    the module: `_escape_raw_breaks` rewrites inside the quoted pieces, `_Braces` counts outside them."""
    stop = len(text) if stop is None else stop
    pos = start
    while pos < stop:
        q = _QUOTE_CHAR.search(text, pos, stop)
        if q is None:
            yield pos, stop, False
            return
        if q.start() > pos:
            yield pos, q.start(), False
        m = _STRING.match(text, q.start(), stop)
        yield q.start(), m.end(), True
        pos = m.end()


def _literal(block: str) -> Any:
    block = re.sub(r"\btrue\b", "True", re.sub(r"\bfalse\b", "False", re.sub(r"\bnull\b", "None", block)))
    return ast.literal_eval(block)


_BRACE = re.compile(r"[{}]")


class _Braces:
    """The `}` closing each `{`, scanned from that `{` with quoted strings of either kind skipped, within
    `limit` characters (None: to the end). One scan also settles every `{` it passes outside quotes
    (from there the scan from that `{` would be the same), so nested or repeated braces cost one pass."""

    def __init__(self, text: str, limit: int | None):
        self.text, self.limit, self.known = text, limit, {}

    def close(self, start: int) -> int | None:
        if start in self.known:
            return self.known[start]
        text = self.text
        stop = len(text) if self.limit is None else min(len(text), start + self.limit)
        opened: list[int] = []
        for a, b, quoted in _segments(text, start, stop):
            if quoted:
                continue
            for m in _BRACE.finditer(text, a, b):
                j = m.start()
                if text[j] == "{":
                    opened.append(j)
                    continue
                self.known.setdefault(opened.pop(), j)
                if not opened:
                    return j
        if stop == len(text):  # the text ended: none of the open braces closes (a limit settles nothing)
            for k in opened:
                self.known.setdefault(k, None)
        return None
