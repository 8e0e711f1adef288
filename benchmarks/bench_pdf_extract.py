"""Benchmark: which PDF library reads analysts' reports best, and how fast (pages per second per core).

Test PDFs are built here with reportlab and fpdf2 (tests/finbias/own_report_pdfs.py: one and two columns,
running header and footer, "Page n of N", a table, a word hyphenated at a line end). Each library's page
texts go through the same cleanup (finlib.finbias.ownreports.pages.clean_pages), then the score counts, per
PDF, the checks passed out of: the rating statement on one line, each planted body sentence found whole,
the hyphenated word joined, header and footer gone. Speed: one process, so pages/s is per core; the
machine's load is written beside it (a shared, loaded machine reads slower than an idle one).
Usage: `python benchmarks/bench_pdf_extract.py [--repeat N]`; writes benchmarks/results/pdf_extract.json.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import ROOT, machine, write_result

sys.path.insert(0, str(ROOT / "tests" / "finbias"))
from own_report_pdfs import FOOTER, HEADER, build_fpdf, build_reportlab

from finlib.finbias.ownreports.extract import PDF_LIBRARY, PDF_READERS
from finlib.finbias.ownreports.pages import clean_pages

LAYOUTS = {
    "reportlab_1col": lambda p: build_reportlab(p, columns=1, pages=4),
    "reportlab_2col": lambda p: build_reportlab(p, columns=2, pages=4),
    "fpdf2_1col": lambda p: build_fpdf(p, pages=3),
}


def checks(text: str, planted) -> list[bool]:
    """One boolean per thing extraction must get right (see the module docstring)."""
    flat = re.sub(r"\s+", " ", text)
    lines = [x.strip() for x in text.split("\n")]
    return [
        planted.rating_line in lines,
        *(s in flat for s in planted.body),
        "transportation" in flat,
        HEADER not in text,
        FOOTER not in text,
    ]


def measure(library: str, pdfs: dict, repeat: int) -> dict:
    passed = total = pages = 0
    start = time.perf_counter()
    for _ in range(repeat):
        for path, planted in pdfs.values():
            texts = PDF_READERS[library](path)
            pages += len(texts)
            result = checks(clean_pages(texts)[0], planted)
            passed, total = passed + sum(result), total + len(result)
    seconds = time.perf_counter() - start
    return {
        "pages_per_s_per_core": round(pages / seconds, 1),
        "quality": round(passed / total, 4),
        "pages": pages,
        "seconds": round(seconds, 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    before = machine()
    with tempfile.TemporaryDirectory() as tmp:
        pdfs = {}
        for name, build in LAYOUTS.items():
            path = Path(tmp) / f"{name}.pdf"
            pdfs[name] = (path, build(path))
        out = {lib: measure(lib, pdfs, args.repeat) for lib in PDF_READERS}
    for lib, r in out.items():
        print(f"{lib:11s} quality {r['quality']:.3f}  {r['pages_per_s_per_core']:8.1f} pages/s/core")
    path = write_result(
        "pdf_extract",
        {"libraries": out, "chosen": PDF_LIBRARY, "layouts": sorted(LAYOUTS), "repeat": args.repeat},
        before,
    )
    print(f"written {path}")


if __name__ == "__main__":
    main()
