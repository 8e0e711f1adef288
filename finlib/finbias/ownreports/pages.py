"""Page texts -> one report text: running headers/footers and page numbers out, hyphenation joined.

Why line structure is kept: a report's front matter ("Rating: BUY", "Price target: $42") is read line by
line by the rating finder; flattening pages into one paragraph would glue the rating to the next line.
"""

from __future__ import annotations

import re
from collections import Counter

from finlib.finbias.perturb.ratings import rating_of_sentence

# A line that is only a page number: "7", "- 7 -", "Page 7", "Page 7 of 12", "7 / 12", "p. 7".
PAGE_NUMBER = re.compile(
    r"^\s*(?:[-–—]\s*)?(?:page|p\.|pg\.?)?\s*\d{1,4}\s*(?:(?:of|/)\s*\d{1,4})?\s*(?:[-–—])?\s*$", re.IGNORECASE
)
# How many lines at the top and at the bottom of a page can be running matter.
EDGE_LINES = 3
# A line counts as running matter when it repeats (digits ignored) at the same edge of this share of pages.
RUNNING_SHARE = 0.5
# A hyphen at a line end followed by a lower-case word start is a word split by the layout.
HYPHEN_END = re.compile(r"(\w)[-\u00ad]\n\s*([a-z])")


def _shape(line: str) -> str:
    """A line with digits and spacing folded, so "Page 3 of 9" and "Page 4 of 9" repeat as one shape."""
    return re.sub(r"\s+", " ", re.sub(r"\d+", "#", line)).strip().lower()


def _edge_shapes(lines: list[str]) -> set[str]:
    kept = [x for x in lines if x.strip()]
    return {_shape(x) for x in kept[:EDGE_LINES] + kept[-EDGE_LINES:]}


def running_shapes(pages: list[list[str]]) -> set[str]:
    """Shapes of lines found at a page edge on at least RUNNING_SHARE of the pages (two pages at least)."""
    if len(pages) < 2:
        return set()
    counts = Counter(s for p in pages for s in _edge_shapes(p))
    need = max(2, int(RUNNING_SHARE * len(pages) + 0.5))
    return {s for s, c in counts.items() if c >= need and s}


def _strip_page(lines: list[str], running: set[str], first: bool) -> list[str]:
    """Drop page numbers and running lines from the top and bottom edges of one page only.

    Extractors that follow the content stream put a footer drawn first at the top of the page, so both
    edges are searched. The first page keeps a running line that states a rating: a header repeated on every
    page ("ACME | BUY | 1 Mar 2024") is the report's front matter there, and the rating finder needs it once.
    """
    idx = [i for i, x in enumerate(lines) if x.strip()]
    edges = set(idx[:EDGE_LINES] + idx[-EDGE_LINES:])
    return [
        x
        for i, x in enumerate(lines)
        if not (
            i in edges
            and (PAGE_NUMBER.match(x) or _shape(x) in running)
            and not (first and rating_of_sentence(x) is not None)
        )
    ]


def join_hyphenated(text: str) -> str:
    """Join a word the layout split at a line end ("analy-" + "sts" -> "analysts").

    The rest of the second line moves up onto the joined line; a hyphen before an upper-case start or a
    digit ("S&P-" + "500", "Buy-" + "Rated") is kept, as those are compounds more often than splits.
    """
    return HYPHEN_END.sub(r"\1\2", text)


def clean_pages(page_texts: list[str]) -> tuple[str, dict[str, int]]:
    """One report text from its pages, with counts of what was removed (shown in the card's notes)."""
    pages = [t.replace("\r\n", "\n").replace("\r", "\n").split("\n") for t in page_texts]
    running = running_shapes(pages)
    kept = [_strip_page(p, running, i == 0) for i, p in enumerate(pages)]
    removed = sum(len(p) for p in pages) - sum(len(p) for p in kept)
    body = "\n".join("\n".join(x.rstrip() for x in p) for p in kept)
    joined = join_hyphenated(body)
    text = re.sub(r"\n{3,}", "\n\n", joined).strip()
    return text, {"running_lines_removed": removed, "hyphens_joined": len(HYPHEN_END.findall(body))}
