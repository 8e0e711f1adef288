"""The hand-written provider front-page corpus (tests/finbias/fixtures/provider_reports): its loader.

The corpus is written from how research providers lay out front pages, not from the project's generator;
a layout's expected statement, removal and rule come from the fixture text (a slot or [[ ]] markers),
never from the code under test.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent / "fixtures" / "provider_reports"
SLOT = "{RATING}"


@dataclass(frozen=True)
class Sentence:
    provider: str
    rating: str  # bullish | neutral | bearish | none
    text: str


@dataclass(frozen=True)
class Layout:
    name: str
    provider: str
    rule: str
    rating: str  # slot, or the rating of the marked statement
    flags: tuple[str, ...]
    template: str


@dataclass(frozen=True)
class Report:
    """A rendered report: its text, the statement's span, the text without the statement, the rating."""

    layout: str
    text: str
    start: int
    end: int
    removed: str
    rating: str
    rule: str


def sentences() -> list[Sentence]:
    out = []
    for line in (HERE / "sentences.tsv").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            provider, rating, text = line.split("\t")
            out.append(Sentence(provider, rating, text))
    return out


def layouts() -> list[Layout]:
    out = []
    for block in (HERE / "layouts.txt").read_text(encoding="utf-8").split("\n=== ")[1:]:
        head, _, body = block.partition("\n")
        name, provider, rule, rating, flags = (x.strip() for x in head.split("|"))
        out.append(Layout(name, provider, rule, rating, tuple(f for f in flags.split(",") if f != "-"), body))
    return out


def takes(layout: Layout, sentence: Sentence) -> bool:
    """Can `sentence` stand in the layout's slot as a reader would still split it? A statement without a
    final period ("BUY: raising estimates after a clean beat") only before a blank line: run into a body
    line or prose it is ambiguous to a person too."""
    if sentence.rating == "none" or layout.rating != "slot":
        return False
    after = layout.template.split(SLOT)[1]
    return sentence.text.rstrip().endswith((".", "!", "?")) or after.startswith("\n\n") or not after.strip()


def _shape(sentence: str, flags: tuple[str, ...]) -> str:
    if "ellipsis" in flags and sentence.endswith("."):
        return sentence[:-1] + "..."
    if "wrap" in flags:
        return "\n".join(textwrap.wrap(sentence, 56))
    return sentence


def render(layout: Layout, sentence: str | None = None) -> Report:
    """The layout with `sentence` in its slot (or its marked statement); the expected removal takes out the
    statement, a list marker opening its line, and the "|" or whitespace after it."""
    t = layout.template
    if layout.rating == "slot":
        stmt = _shape(sentence or "", layout.flags)
        pre, post = t.split(SLOT)
    elif "[[" in t:
        pre, rest = t.split("[[")
        stmt, post = rest.split("]]")
    else:  # a control: no statement
        pre, stmt, post = t, "", ""
    tail = post.lstrip(" \t")
    if tail.startswith("|"):
        tail = tail[1:].lstrip(" \t")
    if not tail[:1].strip() or tail[:1] in "\r\n":
        tail = tail.lstrip()
    line_start = pre.rfind("\n") + 1
    head = pre
    if pre[line_start:].strip() and pre[line_start:].rstrip()[-1:] in "•.)":
        head = pre[:line_start]
    removed = tail if not head.strip() else head + tail
    text = pre + stmt + post
    if "crlf" in layout.flags:
        text, removed, pre, stmt = (x.replace("\n", "\r\n") for x in (text, removed, pre, stmt))
    return Report(layout.name, text, len(pre), len(pre) + len(stmt), removed, layout.rating, layout.rule)
