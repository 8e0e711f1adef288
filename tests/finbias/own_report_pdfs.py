"""Analyst-report PDFs built with reportlab and fpdf2 for the extraction tests and benchmark.

The text is written the way sell-side notes are (front matter, a rating line, body paragraphs, a table),
and the builders plant what extraction must survive: running headers and footers, page numbers, one or two
columns, a table, and a word split with a hyphen at a line end. `PLANTED` is the truth the tests compare to.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

RATING_LINE = "Northwind Freight (NWFT): we reiterate our Buy rating and a $48 price target."
HEADER = "Harbour Lane Securities | Equity Research | Northwind Freight"
FOOTER = "Please read the analyst certification and important disclosures at the end of this report."
BODY = [
    "Third-quarter volumes rose 6% year over year as intermodal contracts repriced ahead of peak season.",
    "Management kept its full-year margin guide despite higher fuel costs, which we read as a sign of "
    "pricing discipline.",
    "We think consensus underestimates the operating leverage from the new Memphis hub.",
    "The balance sheet remains conservative, with net debt at 1.1x trailing EBITDA.",
    "Risks include a slower freight cycle, labour disputes at the ports and a sharp rise in diesel prices.",
    "Our estimates move up by 3% for next year on better yields and a lower tax rate.",
]
# A word the layout splits at a line end; extraction must give it back whole.
SPLIT_WORD = ("transporta", "tion")
SPLIT_SENTENCE = "Cross-border transportation demand recovered in September after two weak months."
TABLE = [
    ["Metric", "FY23A", "FY24E", "FY25E"],
    ["Revenue ($m)", "4,120", "4,390", "4,710"],
    ["EPS ($)", "2.31", "2.64", "3.02"],
]


@dataclass(frozen=True)
class Planted:
    """What a built PDF contains: the rating line, the body sentences, the running lines and pages."""

    rating_line: str
    body: tuple[str, ...]
    header: str
    footer: str
    pages: int


def _lines(width_chars: int) -> list[str]:
    """The body wrapped at a fixed width, with SPLIT_SENTENCE's long word split by a hyphen at a line end."""
    words = " ".join(BODY * 3).split()
    lines, cur = [], ""
    for w in words:
        if len(cur) + len(w) + 1 > width_chars:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}".strip()
    lines.append(cur)
    head, tail = SPLIT_SENTENCE.split("transportation")
    lines.insert(0, f"{head.strip()} {SPLIT_WORD[0]}-")
    lines.insert(1, f"{SPLIT_WORD[1]}{tail}")
    return lines


def build_reportlab(path: Path, columns: int = 1, pages: int = 3, table: bool = True) -> Planted:
    """A letter-size report drawn line by line with reportlab: header, footer, "Page n of N", 1-2 columns."""
    from reportlab.lib.pagesizes import letter
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path), pagesize=letter)
    w, h = letter
    col_w = (w - 144 - 18 * (columns - 1)) / columns
    lines = _lines(int(col_w / 5.2))
    per_col = 40
    for page in range(pages):
        c.setFont("Helvetica", 8)
        c.drawString(72, h - 40, HEADER)
        c.drawString(72, 40, FOOTER)
        c.drawRightString(w - 72, 28, f"Page {page + 1} of {pages}")
        y0 = h - 80
        if page == 0:
            c.setFont("Helvetica-Bold", 10)
            c.drawString(72, y0, "12 March 2024")
            c.drawString(72, y0 - 14, RATING_LINE)
            y0 -= 40
            if table:
                c.setFont("Helvetica", 9)
                for r, row in enumerate(TABLE):
                    for k, cell in enumerate(row):
                        c.drawString(72 + 110 * k, y0 - 12 * r, cell)
                y0 -= 12 * len(TABLE) + 16
        c.setFont("Helvetica", 9)
        for col in range(columns):
            x = 72 + col * (col_w + 18)
            chunk = lines[(page * columns + col) * per_col : (page * columns + col + 1) * per_col]
            for i, line in enumerate(chunk):
                c.drawString(x, y0 - 11 * i, line)
        c.showPage()
    c.save()
    return Planted(RATING_LINE, (*BODY, SPLIT_SENTENCE), HEADER, FOOTER, pages)


def build_fpdf(path: Path, pages: int = 2) -> Planted:
    """A report laid out by fpdf2 (its own header/footer hooks, automatic line wrapping, a table)."""
    from fpdf import FPDF

    class Report(FPDF):
        def header(self):
            self.set_font("Helvetica", size=8)
            self.cell(0, 8, HEADER, new_x="LMARGIN", new_y="NEXT")

        def footer(self):
            self.set_y(-15)
            self.set_font("Helvetica", size=8)
            self.cell(0, 5, FOOTER, new_x="LMARGIN", new_y="NEXT")
            self.cell(0, 5, str(self.page_no()), align="C")

    pdf = Report(format="letter")
    pdf.add_page()
    pdf.set_font("Helvetica", "B", 10)
    pdf.multi_cell(0, 6, "12 March 2024\n" + RATING_LINE, new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("Helvetica", size=9)
    with pdf.table() as t:
        for row in TABLE:
            r = t.row()
            for cell in row:
                r.cell(cell)
    for i, line in enumerate(_lines(95)):
        pdf.multi_cell(0, 5, line, new_x="LMARGIN", new_y="NEXT")
        if pages > 1 and i % 12 == 11 and pdf.page_no() < pages:
            pdf.add_page()
    pdf.output(str(path))
    return Planted(RATING_LINE, (*BODY, SPLIT_SENTENCE), HEADER, FOOTER, pdf.page_no())


def build_scan(path: Path) -> None:
    """A page with only drawn shapes (what a scan looks like to a text extractor: no text layer)."""
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path))
    for i in range(30):
        c.rect(72, 700 - 20 * i, 400, 8, fill=1)
    c.showPage()
    c.save()


def build_encrypted(path: Path) -> None:
    """A report PDF that opens only with a user password."""
    from reportlab.lib import pdfencrypt
    from reportlab.pdfgen import canvas

    c = canvas.Canvas(str(path), encrypt=pdfencrypt.StandardEncryption("secret", canPrint=0))
    c.drawString(72, 700, RATING_LINE)
    c.showPage()
    c.save()
