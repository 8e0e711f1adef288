"""One file -> its page texts. PDF (text layer only), HTML, .txt and .md.

PDF library: `PDF_LIBRARY` is the one `benchmarks/bench_pdf_extract.py` measured best on test PDFs built
with reportlab and fpdf2 (one and two columns, running headers and footers, page numbers, tables,
hyphenation): the score counts the planted sentences found whole and in order, the speed is pages per
second per core; `benchmarks/results/pdf_extract.json` holds the figures. The other two readers stay
callable so the benchmark can keep comparing them.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path

# A page with fewer visible characters than this has no usable text layer (a scan, an image).
MIN_CHARS_PER_PAGE = 20


class Unreadable(ValueError):
    """A file the card cannot use; `reason` is the short name counted in the card's exclusions."""

    def __init__(self, path: Path, reason: str, detail: str = ""):
        super().__init__(f"{path}: {reason}{': ' + detail if detail else ''}")
        self.path, self.reason, self.detail = path, reason, detail


def _pdf_pypdfium2(path: Path) -> list[str]:
    import pypdfium2 as pdfium

    try:
        doc = pdfium.PdfDocument(str(path))
    except pdfium.PdfiumError as exc:
        reason = "encrypted" if "password" in str(exc).lower() else "unreadable PDF"
        raise Unreadable(path, reason, str(exc)) from None
    try:
        # pdfium already joins a word hyphenated at a line end and marks the join with U+FFFE
        return [doc[i].get_textpage().get_text_range().replace("\ufffe", "") for i in range(len(doc))]
    finally:
        doc.close()


def _pdf_pypdf(path: Path) -> list[str]:
    import pypdf

    try:
        reader = pypdf.PdfReader(str(path))
        if reader.is_encrypted:
            raise Unreadable(path, "encrypted", "the PDF needs a password")
        return [p.extract_text() or "" for p in reader.pages]
    except pypdf.errors.PdfReadError as exc:
        raise Unreadable(path, "unreadable PDF", str(exc)) from None


def _pdf_pdfplumber(path: Path) -> list[str]:
    import pdfplumber
    from pdfminer.pdfdocument import PDFPasswordIncorrect
    from pdfplumber.utils.exceptions import PdfminerException

    try:
        with pdfplumber.open(str(path)) as pdf:
            return [p.extract_text() or "" for p in pdf.pages]
    except PdfminerException as exc:  # pdfplumber wraps pdfminer's error; its first argument is the cause
        cause = exc.args[0] if exc.args else exc
        if isinstance(cause, PDFPasswordIncorrect):
            raise Unreadable(path, "encrypted", "the PDF needs a password") from None
        raise Unreadable(path, "unreadable PDF", repr(cause)) from None


PDF_READERS: dict[str, Callable[[Path], list[str]]] = {
    "pypdfium2": _pdf_pypdfium2,
    "pypdf": _pdf_pypdf,
    "pdfplumber": _pdf_pdfplumber,
}
PDF_LIBRARY = "pypdfium2"


def pdf_pages(path: Path, library: str = PDF_LIBRARY) -> list[str]:
    """Page texts of a PDF; a PDF whose pages carry (almost) no text has no text layer and is refused."""
    pages = PDF_READERS[library](path)
    visible = sum(len(re.sub(r"\s", "", p)) for p in pages)
    if not pages or visible < MIN_CHARS_PER_PAGE * len(pages):
        raise Unreadable(path, "no text layer", f"{visible} characters on {len(pages)} page(s); a scan needs OCR first")
    return pages


class _HTMLText(HTMLParser):
    """Visible text of an HTML page with block elements as line breaks (scripts and styles skipped)."""

    BLOCKS = {
        "p",
        "div",
        "br",
        "li",
        "tr",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "table",
        "section",
        "article",
        "header",
        "footer",
        "ul",
        "ol",
        "pre",
        "blockquote",
        "title",
    }
    CELLS = {"td", "th"}
    SKIP = {"script", "style", "noscript", "head"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skip = 0

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag in self.SKIP:
            self.skip += 1
        elif tag in self.BLOCKS:
            self.parts.append("\n")
        elif tag in self.CELLS:
            self.parts.append(" | ")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP:
            self.skip = max(0, self.skip - 1)
        elif tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.skip:
            self.parts.append(re.sub(r"\s+", " ", data))


def html_text(raw: str) -> str:
    """Visible text of an HTML document, one line per block element."""
    parser = _HTMLText()
    parser.feed(raw)
    parser.close()
    lines = (re.sub(r"^\s*\|\s*|\s+$", "", html.unescape(x)).strip() for x in "".join(parser.parts).split("\n"))
    return "\n".join(x for x in lines if x)


MARKDOWN_MARKS = re.compile(r"^\s{0,3}(?:#{1,6}\s+|>\s?)|(\*\*|__)(.+?)\1", re.MULTILINE)


def markdown_text(raw: str) -> str:
    """Markdown with heading marks, quote marks and bold markers removed; lines kept as written."""
    return MARKDOWN_MARKS.sub(lambda m: m.group(2) or "", raw)


def read_text_file(path: Path) -> str:
    """A UTF-8 text file (a byte-order mark is dropped); other encodings are refused with the byte offset."""
    try:
        return path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise Unreadable(path, "not UTF-8", f"byte {exc.start}") from None


def file_pages(path: Path, pdf_library: str = PDF_LIBRARY) -> list[str]:
    """Page texts of one report file by its suffix (.pdf, .html/.htm, .txt, .md)."""
    suffix = path.suffix.lower()
    if suffix == ".pdf":
        return pdf_pages(path, pdf_library)
    if suffix in (".html", ".htm"):
        return [html_text(read_text_file(path))]
    if suffix == ".md":
        return [markdown_text(read_text_file(path))]
    if suffix == ".txt":
        return read_text_file(path).split("\f")
    raise Unreadable(
        path, "unsupported file type", f"{suffix or 'no suffix'}; known: .pdf .html .htm .txt .md .csv .parquet .jsonl"
    )
