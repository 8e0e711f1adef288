"""What every figure shares: one matplotlib style at print size (double column <= 7.2 in, text
>= 7 pt, drawn literally), one palette (a colour means one thing in every figure), and a caption
naming the run and its data source, saved beside the figure (under it only on request).

Kept apart from `figures` (results figures and the stage) and `figures_paper` (the paper's
example and case-study figures) so that both import it and neither imports the other.
"""
from __future__ import annotations

import textwrap
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

from finlib.core.config import RunConfig
from finlib.core.tables import FIGURE_PADDING_IN, PRINT_COLUMN_IN, print_column, save_figure
from finlib.finbias import conditions as condition_table
from finlib.finbias.vocab import Rating


def condition_order() -> tuple[str, ...]:
    """The declared conditions in their place in the figures (`finlib.finbias.conditions`), read when a
    figure is drawn, so a condition declared by a study is drawn too."""
    return condition_table.names()


class ConditionStyle(Mapping[str, str]):
    """Condition -> one attribute of its record (colour, marker or hatch), read from the condition table at
    each access: the palette has no copy of its own to fall out of step with the table."""

    def __init__(self, attribute: str) -> None:
        self.attribute = attribute

    def __getitem__(self, name: str) -> str:
        return getattr(condition_table.record(name), self.attribute)

    def __iter__(self) -> Iterator[str]:
        return iter(condition_table.names())

    def __len__(self) -> int:
        return len(condition_table.names())


# ---- one palette: each colour means one thing in every figure --------------------------------
# ratings (answers, labels, shown ratings) and conditions take the saturated hues; models take a
# separate qualitative set (Paul Tol's "muted", minus hues a rating or condition already uses), and
# base/DPO variants two neutrals, so blue never means "a model" in one figure and "original" in another.
RATING_COLORS = {Rating.BULLISH.value: "#2a9d55", Rating.NEUTRAL.value: "#8c8c8c", Rating.BEARISH.value: "#c8423b",
                 "unparsed": "#e0b040"}
# conditions: each record's colour, marker and hatch (finlib.finbias.conditions; the paper's four: navy, orange,
# sky blue, dark red, apart by CIELAB Delta E >= 40 for every colour vision, tests/finbias/colour_vision.py)
CONDITION_COLORS = ConditionStyle("color")
# every condition also has its own marker and hatch, so no reading depends on telling two hues apart
CONDITION_MARKERS = ConditionStyle("marker")
CONDITION_HATCHES = ConditionStyle("hatch")
MODEL_COLORS = ("#332288", "#44aa99", "#88ccee", "#999933", "#882255", "#ddcc77", "#117733")
MODEL_MARKERS = ("o", "s", "^", "D", "v", "P", "X")
VARIANT_COLORS = {"base": "#b8b8b8", "dpo": "#3b3b3b"}
# alternatives of one computation drawn over each other (two beta estimators, the MPQA matching
# policies): shades of grey in a fixed order, never a hue that means a rating, condition or model
ALTERNATIVE_GREYS = ("#3b3b3b", "#b8b8b8", "#7a7a7a")
HEATMAP_CMAP = "viridis"

# journal column widths are 3.5 in (single) and 7.2 in (double); figures are drawn 0.2 in narrower,
# the padding savefig's tight bounding box adds around them (finlib.core.tables: BizFinBench reads them too)
SINGLE_COLUMN_IN = PRINT_COLUMN_IN["single"] - FIGURE_PADDING_IN
DOUBLE_COLUMN_IN = PRINT_COLUMN_IN["double"] - FIGURE_PADDING_IN
MIN_TEXT_PT = 7          # smallest text at print size
CJK_FAMILIES = ("WenQuanYi Micro Hei", "WenQuanYi Zen Hei", "Noto Sans CJK SC", "Noto Sans CJK JP",
                "Source Han Sans SC", "SimHei", "Microsoft YaHei")

STYLE = {
    "figure.dpi": 100, "savefig.dpi": 150, "font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8,
    "xtick.labelsize": 7, "ytick.labelsize": 7, "legend.fontsize": 7, "legend.frameon": False,
    "figure.titlesize": 9,
    "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True, "grid.alpha": 0.3,
    "pdf.fonttype": 42,
    "text.parse_math": False,  # "$111 mn and a $0.84" is text, not math
}


def single_column(cfg: RunConfig) -> bool:
    """True when the run draws for a single journal column: multi-panel figures then stack their
    panels in one column instead of side by side, so no panel's text shrinks below MIN_TEXT_PT."""
    return print_column(cfg) == "single"


def panel_grid(cfg: RunConfig, panels: int, max_cols: int) -> tuple[int, int]:
    """(rows, columns) for `panels` panels: up to `max_cols` side by side in a double column, one
    column in a single column (a 3.3 in figure has no room for two panels' tick labels)."""
    ncols = 1 if single_column(cfg) else max(1, min(panels, max_cols))
    return -(-panels // ncols), ncols


def chars_per_line(width_in: float, fontsize: float = MIN_TEXT_PT) -> int:
    """How many characters of `fontsize` text fit across `width_in` inches (DejaVu Sans runs up to about
    0.6 em per character in report prose): the wrap width of titles and text panels, so none runs past
    the figure."""
    return max(10, int(width_in * 72 / (0.6 * fontsize)))


def wrap_lines(text: str, width_in: float, fontsize: float = MIN_TEXT_PT) -> str:
    """`text` with each of its lines wrapped to `width_in` inches: a tick label or legend entry (a long
    model name, "model: bullish -> bearish (N=4)") that would push a single-column figure past its column."""
    return "\n".join(part for line in text.split("\n")
                     for part in (textwrap.wrap(line, chars_per_line(width_in, fontsize)) or [""]))


def label_share(fig) -> float:
    """The width (in) a tick-label column or a legend entry may take: two fifths of the figure, so the
    axes keep the rest whichever column the figure is drawn for."""
    return 0.4 * fig.get_figwidth()


def model_colors(models) -> dict[str, str]:
    """A fixed colour per model (sorted order, cycling), from the models' own palette."""
    return {m: MODEL_COLORS[i % len(MODEL_COLORS)] for i, m in enumerate(sorted(models))}


def model_markers(models) -> dict[str, str]:
    return {m: MODEL_MARKERS[i % len(MODEL_MARKERS)] for i, m in enumerate(sorted(models))}


def text_color_on(rgba) -> str:
    """Black or white, whichever reads better on a cell of colour `rgba` (WCAG relative luminance:
    white text on viridis' yellow end, where herding is high, is unreadable)."""
    def lin(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = (lin(float(c)) for c in rgba[:3])
    luminance = 0.2126 * r + 0.7152 * g + 0.0722 * b
    return "black" if luminance > 0.179 else "white"


def legend_outside(ax, ncol: int | None = None, **kwargs):
    """A legend above the axes, never over the data."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return None
    ncol = ncol or min(len(handles), 4)
    while ncol > 1 and legend_row_in(labels, ncol) > 0.6 * ax.figure.get_figwidth():
        ncol -= 1  # it starts at the axes' left edge, which tick labels may push up to label_share to the right
    legend = ax.legend(handles, labels, loc="lower left", bbox_to_anchor=(0, 1.02), borderaxespad=0,
                       ncol=ncol, **kwargs)
    for loc in ("left", "center", "right"):  # a title moves up above the legend
        title = ax.get_title(loc=loc)
        if title:
            ax.set_title(title, loc=loc, pad=6 + 1.5 * MIN_TEXT_PT * -(-len(handles) // ncol))
    return legend


def legend_row_in(labels: list[str], ncol: int, fontsize: float = MIN_TEXT_PT) -> float:
    """Upper estimate of the width (in) of a legend laid out in `ncol` columns: every column as wide as the
    longest entry line plus the handle and gaps (about 4 em), at `fontsize` and 0.6 em per character."""
    longest = max((len(line) for label in labels for line in label.split("\n")), default=0)
    return ncol * (0.6 * fontsize * longest + 4 * fontsize) / 72


def font_families() -> list[str]:
    """DejaVu Sans, then the first installed CJK family as a glyph fallback (Chinese model names,
    report text); only installed families are named, so matplotlib warns about none."""
    from matplotlib import font_manager

    installed = {f.name for f in font_manager.fontManager.ttflist}
    return ["DejaVu Sans", *[f for f in CJK_FAMILIES if f in installed][:1]]


@contextmanager
def figure_style() -> Iterator[None]:
    """One look for every figure (fonts >= 7 pt, grid, no top/right spines, text drawn literally)."""
    import matplotlib.pyplot as plt

    with plt.rc_context({**STYLE, "font.family": font_families()}):
        yield


def data_source(cfg: RunConfig) -> str:
    """Where the numbers come from, in words, for every caption."""
    data = cfg["data"]
    if cfg.is_synthetic:
        return f"seeded synthetic market (finlib.finbias.data.synth, seed {cfg.seed}) — synthetic data"
    if data["source"] == "huggingface":
        return f"Hugging Face dataset {data['reports']['hf_dataset']}"
    return f"local corpus {data['reports']['path']}"


def caption(cfg: RunConfig, text: str) -> str:
    """Caption = what the figure shows + run + data source (says "synthetic data" when synthetic)."""
    return f"{text} Run '{cfg.name}'; data: {data_source(cfg)}."


@dataclass
class FigureRecord:
    """One figure of the stage: its name, caption and files, or why it was not drawn."""

    name: str
    caption: str
    files: list[str] = field(default_factory=list)
    skipped: str | None = None


def show_figure(cfg: RunConfig, fig) -> None:
    """Show a saved figure in a notebook with its caption under it (the caption file save_figure wrote
    beside it), then close it; None (a figure not drawn) shows nothing: the reason was printed."""
    if fig is None:
        return
    import matplotlib.pyplot as plt
    from IPython.display import Markdown, display

    display(fig)
    path = cfg.figures_dir / f"{fig.get_label()}.caption.txt"
    if fig.get_label() and path.is_file():
        display(Markdown(f"*{path.read_text(encoding='utf-8').strip()}*"))
    plt.close(fig)


def caption_in_image(cfg: RunConfig) -> bool:
    """`figures.caption_in_image: true` burns the caption under the image (slides); by default the
    caption lives in the report and the notebook, where a journal wants it."""
    return bool((cfg.params.get("figures") or {}).get("caption_in_image"))


def finish(cfg: RunConfig, fig, name: str, text: str) -> FigureRecord:
    """Save PNG + PDF with the caption beside them (and under the image only when asked), return the record."""
    cap = caption(cfg, text)
    if caption_in_image(cfg):
        box = fig.get_tightbbox(fig.canvas.get_renderer())  # below everything drawn (rotated tick labels)
        left, bottom = box.x0 / fig.get_figwidth(), box.y0 / fig.get_figheight()
        width_chars = chars_per_line(fig.get_figwidth())
        fig.text(min(left, 0.01), min(bottom, 0.0) - 0.02, "\n".join(textwrap.wrap(cap, width_chars)), ha="left",
                 va="top", fontsize=MIN_TEXT_PT, color="#333333")
    paths = save_figure(cfg, fig, name, caption=cap)
    return FigureRecord(name, cap, [str(p.relative_to(cfg.root)) for p in paths if p.suffix != ".txt"])
