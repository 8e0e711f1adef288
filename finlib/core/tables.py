"""Tables in three formats (CSV for machines, Markdown for reading, LaTeX for the paper)
and the published figures of both papers, carried as reference data.

The paper tables under `finlib/reference/paper_tables/` are transcribed facts (see the
README there); every table the project writes can be printed beside them.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path

import pandas as pd

from finlib.core.artifacts import write_atomic
from finlib.core.config import RunConfig

# Every table, figure caption and report page of a run on the synthetic market carries this line.
SYNTHETIC_CAVEAT = (
    "Synthetic data: numbers below come from finlib's seeded synthetic market, not from real "
    "analyst reports; they exercise the pipeline and are not research results."
)

PAPER_TABLES = {
    "finbias_table2": "finbias_table2_sectors.csv",
    "finbias_table3": "finbias_table3_ratings.csv",
    "finbias_table4": "finbias_table4_herding_with_without.csv",
    "finbias_table5": "finbias_table5_herding_fake.csv",
    "finbias_table6": "finbias_table6_accuracy_with_without.csv",
    "finbias_table7": "finbias_table7_accuracy_opinions_removed.csv",
    "finbias_table8": "finbias_table8_accuracy_dpo.csv",
    "bizfin_table2": "bizfin_table2_tasks.csv",
    "bizfin_table3": "bizfin_table3_results.csv",
    "bizfin_table4": "bizfin_table4_judge.csv",
    "bizfin_table6": "bizfin_table6_token_lengths.csv",
}


def paper_table(key: str) -> pd.DataFrame:
    """A published table as printed in the paper (e.g. `paper_table("finbias_table2")`)."""
    if key not in PAPER_TABLES:
        raise KeyError(f"unknown paper table '{key}'; known: {sorted(PAPER_TABLES)}")
    ref = resources.files("finlib") / "reference" / "paper_tables" / PAPER_TABLES[key]
    with ref.open("r", encoding="utf-8") as fh:
        return pd.read_csv(fh)


def synthetic_title(cfg: RunConfig, title: str) -> str:
    """A figure title that says "synthetic data" whenever the run is synthetic."""
    return f"{title} (synthetic data)" if cfg.is_synthetic else title


# journal column widths a figure prints at (`figures.width`); a figure is drawn FIGURE_PADDING_IN
# narrower, the padding savefig's tight bounding box adds around it, so the saved image fits the column
PRINT_COLUMN_IN = {"single": 3.5, "double": 7.2}
FIGURE_PADDING_IN = 0.2


def print_column(cfg: RunConfig) -> str:
    """`figures.width` ("single" or "double"): the journal column every figure of the run is drawn for.
    Kept in core so that every layer's figures (Fin-Bias, BizFinBench) read the one knob the same way."""
    return str(cfg.section("figures")["width"])


def figure_width(cfg: RunConfig) -> float:
    """Drawing width (in) of every figure of the run: its journal column less the savefig padding, so
    the style's 7-8 pt text prints at 7-8 pt instead of being scaled down to fit a narrower column."""
    return PRINT_COLUMN_IN[print_column(cfg)] - FIGURE_PADDING_IN


def literal_text(fig) -> None:
    """Every text of the figure drawn as typed: `$` pairs in a report sentence or a model name are
    not math (matplotlib's mathtext would italicise "$111 mn and a $0.84" into "111mnanda0.84")."""
    from matplotlib.text import Text

    for text in fig.findobj(Text):
        text.set_parse_math(False)


# no creation date, no library version: the same figure gives the same bytes on every run and machine
REPRODUCIBLE_METADATA = {"pdf": {"CreationDate": None, "Producer": None, "Creator": None},
                         "png": {"Software": None}}


def save_figure(cfg: RunConfig, fig, name: str, caption: str | None = None) -> list[Path]:
    """Save a matplotlib figure as `figures/<run>/<name>.{png,pdf}` and return the paths; the caption,
    when given, goes to `<name>.caption.txt` beside them (the HTML report shows it under the figure).

    The figure stays open, so a notebook can display it inline (no `matplotlib.use("Agg")`:
    switching backends inside a kernel stops inline display).
    """
    cfg.check_unchanged()
    cfg.figures_dir.mkdir(parents=True, exist_ok=True)
    literal_text(fig)
    fig.set_label(name)  # finlib.finbias.figures.base.show_figure finds the caption by it
    (cfg.figures_dir / f"{name}.skipped.txt").unlink(missing_ok=True)
    paths = [cfg.figures_dir / f"{name}.{ext}" for ext in ("png", "pdf")]
    for path in paths:  # atomically: a full disk leaves no half-written image (the format named: tmp has no suffix)
        write_atomic(path, lambda tmp, ext=path.suffix[1:]: fig.savefig(tmp, dpi=150, bbox_inches="tight", format=ext,
                                                                      metadata=REPRODUCIBLE_METADATA[ext]))
    if caption:
        path = cfg.figures_dir / f"{name}.caption.txt"
        write_atomic(path, lambda tmp: tmp.write_text(" ".join(caption.split()) + "\n", encoding="utf-8"))
        paths.append(path)
    return paths


def skip_figure(cfg: RunConfig, name: str, reason: str) -> Path:
    """A figure with no data is not drawn: its old files go, `<name>.skipped.txt` says why (the HTML
    report lists it as "not drawn" with the reason) -- an empty panel must not pass for a result."""
    cfg.figures_dir.mkdir(parents=True, exist_ok=True)
    for ext in ("png", "pdf", "caption.txt"):
        (cfg.figures_dir / f"{name}.{ext}").unlink(missing_ok=True)
    path = cfg.figures_dir / f"{name}.skipped.txt"
    write_atomic(path, lambda tmp: tmp.write_text(" ".join(reason.split()) + "\n", encoding="utf-8"))
    print(f"{name}: not drawn — {reason}")
    return path


def caption_with_caveat(cfg: RunConfig, caption: str) -> str:
    """Prefix the synthetic-data caveat whenever the run is synthetic: no table may hide it."""
    return f"{caption} [{SYNTHETIC_CAVEAT}]" if cfg.is_synthetic else caption


LATEX_SPECIALS = {"\\": r"\textbackslash{}", "%": r"\%", "_": r"\_", "&": r"\&", "#": r"\#",
                  "$": r"\$", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def latex_escape(text: str) -> str:
    """Escape LaTeX specials, so a caption like 'score (%) in *_ci' compiles (to_latex leaves captions raw)."""
    return "".join(LATEX_SPECIALS.get(ch, ch) for ch in text)


def read_table_csv(path: str | Path) -> pd.DataFrame:
    """Read a table CSV written by `write_table` (its first line is the `# caption` comment)."""
    with open(path, encoding="utf-8") as fh:
        first = fh.readline()
    return pd.read_csv(path, skiprows=1 if first.startswith("# ") else 0)


def write_table(cfg: RunConfig, name: str, df: pd.DataFrame, caption: str,
                float_format: str = "{:.2f}", synthetic_caveat: bool = True) -> dict[str, Path]:
    """Write `df` as `<tables>/<name>.{csv,md,tex}` and return the three paths.

    The CSV keeps full precision and starts with one `# caption` line (read it back with
    `read_table_csv`, or `pd.read_csv(path, skiprows=1)`), so the synthetic-data caveat travels
    with the numbers. Markdown and LaTeX round with `float_format`; the caption heads the
    Markdown file and the LaTeX table (escaped). `synthetic_caveat=False` is for tables that do
    not use the synthetic market at all (BizFinBench, stage 07: its captions carry their own caveat).
    """
    cfg.check_unchanged()
    caption = caption_with_caveat(cfg, caption) if synthetic_caveat else caption
    out = cfg.tables_dir
    out.mkdir(parents=True, exist_ok=True)
    paths = {ext: out / f"{name}.{ext}" for ext in ("csv", "md", "tex")}

    def write_csv(tmp: Path) -> None:
        with tmp.open("w", encoding="utf-8", newline="") as fh:
            fh.write("# " + " ".join(caption.split()) + "\n")
            df.to_csv(fh, index=False)

    write_atomic(paths["csv"], write_csv)  # each file whole or not at all; a full disk names the file
    shown = df.copy()
    for col in shown.columns:
        if pd.api.types.is_float_dtype(shown[col]):
            shown[col] = shown[col].map(lambda v: "" if pd.isna(v) else float_format.format(v))
    markdown = f"**{caption}**\n\n{shown.to_markdown(index=False)}\n"
    write_atomic(paths["md"], lambda tmp: tmp.write_text(markdown, encoding="utf-8"))
    latex = shown.to_latex(index=False, caption=latex_escape(caption), label=f"tab:{name}", escape=True)
    write_atomic(paths["tex"], lambda tmp: tmp.write_text(latex, encoding="utf-8"))
    return paths
