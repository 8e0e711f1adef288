"""The herding card's run and its two faces: `runs/<name>/card/index.html` and a one-page `card.pdf`.

`build_card` runs the free stages, shows the plan, asks before spending (unless told yes), runs the paid
ones and draws the card from stage 04's own metrics and paired tests; `finlib.pipeline.card` holds the
request, the sampling and the selections the card shows. The chart puts the model among the paper's
models on the same axes, the published points drawn hollow and labelled with their n.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from finlib.core.config import RunConfig
from finlib.finbias.figures.stage import min_sector_n
from finlib.pipeline.card_stats import CONDITIONS, planning_half_width

AXES = (("original", "with_rating"), ("no_rating", "without_rating"), ("fake_rating", "herding_fake"))


@dataclass
class CardData:
    """What the card shows, gathered once for the HTML, the PDF and the notebook."""

    cfg: RunConfig
    req: Any  # finlib.pipeline.card.CardRequest (the run imports this module, not the other way)
    notes: dict
    head: pd.DataFrame
    sectors: pd.DataFrame
    tests: pd.DataFrame
    usage: dict
    answers: pd.DataFrame
    published: pd.DataFrame
    rows: pd.DataFrame
    seconds: dict
    against: pd.DataFrame | None = None


def write_card(data: CardData, out: Path) -> Path:
    """index.html, answers.html, card.pdf and card.json (the numbers, for a second card or a test)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "answers.html").write_text(_page("Answers behind the card", _table(data.answers)), encoding="utf-8")
    (out / "card.json").write_text(
        json.dumps(
            {
                "headline": data.head.to_dict(orient="records"),
                "tests": data.tests.to_dict(orient="records"),
                "usage": data.usage,
                "notes": data.notes,
                "seconds": data.seconds,
            },
            default=str,
            indent=2,
        ),
        encoding="utf-8",
    )
    write_pdf(data, out / "card.pdf")
    path = out / "index.html"
    path.write_text(_page(f"Herding card: {data.req.model}", _body(data)), encoding="utf-8")
    return path


def _fmt(v) -> str:
    return "" if pd.isna(v) else f"{v:.3f}" if isinstance(v, float) else str(v)


def _table(df: pd.DataFrame) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in row) + "</tr>"
        for row in df.itertuples(index=False)
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _page(title: str, body: str) -> str:
    style = (
        "body{font-family:sans-serif;max-width:60em;margin:2em auto}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 6px;font-size:90%}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1>{body}</body></html>"
    )


def _cell(head: pd.DataFrame, cond: str, metric: str) -> pd.Series | None:
    r = head[(head["condition"] == cond) & (head["metric"] == metric)]
    return None if r.empty else r.iloc[0]


def headline_text(data: CardData) -> list[str]:
    """One line per condition: herding, its interval and n (the card's first lines, HTML and PDF)."""
    lines = []
    for cond, label in CONDITIONS.items():
        r = _cell(data.head, cond, "herding")
        if r is not None:
            lines.append(
                f"Herding {label}: {r['value']:.1%} [{r['ci_low']:.1%}, {r['ci_high']:.1%}] "
                f"(95 % cluster bootstrap, width {r['ci_high'] - r['ci_low']:.1%}), n={int(r['n'])}"
            )
    for cond, label in CONDITIONS.items():
        r = _cell(data.head, cond, "accuracy")
        if r is not None and r["n"] > 0:
            lines.append(f"Accuracy {label}: {r['value']:.1%} [{r['ci_low']:.1%}, {r['ci_high']:.1%}], n={int(r['n'])}")
    return lines


def _svg(data: CardData) -> str:
    """Three axes (with, without, fake): published models hollow with n, this model filled with interval."""
    w, x0, x1 = 720, 150, 690
    parts = [f"<svg width='{w}' height='{60 * len(AXES) + 30}' xmlns='http://www.w3.org/2000/svg' font-size='10'>"]
    for i, (cond, col) in enumerate(AXES):
        y = 30 + 60 * i

        def x(v: float) -> float:
            return x0 + (x1 - x0) * v

        parts.append(
            f"<text x='0' y='{y + 4}'>{CONDITIONS[cond]}</text><line x1='{x0}' x2='{x1}' y1='{y}' "
            f"y2='{y}' stroke='#999'/>"
        )
        for t in (0, 0.5, 1):
            parts.append(f"<text x='{x(t) - 8}' y='{y + 22}'>{t:.0%}</text>")
        for _, p in data.published.dropna(subset=[col]).iterrows():
            parts.append(
                f"<circle cx='{x(p[col]):.1f}' cy='{y}' r='4' fill='none' stroke='#555'>"
                f"<title>{html.escape(p['model'])}: {p[col]:.1%}, published, n={p['n']}</title></circle>"
            )
        r = _cell(data.head, cond, "herding")
        if r is not None:
            parts.append(
                f"<line x1='{x(r['ci_low']):.1f}' x2='{x(r['ci_high']):.1f}' y1='{y - 10}' "
                f"y2='{y - 10}' stroke='#c00' stroke-width='2'/><circle cx='{x(r['value']):.1f}' "
                f"cy='{y - 10}' r='5' fill='#c00'/><text x='{x(r['value']) + 7:.1f}' y='{y - 14}'>"
                f"{html.escape(data.req.model)} n={int(r['n'])}</text>"
            )
    parts.append("</svg>")
    return "".join(parts)


def _body(data: CardData) -> str:
    n = int(data.rows["report_id"].nunique()) if len(data.rows) else data.req.n_reports  # reports on the card
    parts = [
        f"<p>{'<br>'.join(html.escape(x) for x in headline_text(data))}</p>",
        f"<p>Sample: {html.escape(str(data.notes.get('sample')))}. Planned widest 95 % half-width for n={n}: "
        f"±{planning_half_width(n):.1%} (before clustering by firm; the measured widths are above).</p>",
    ]
    if data.cfg.is_synthetic:
        parts.append(
            "<p><b>Synthetic data and an embedded plumbing model: these numbers exercise the card, "
            "they are not research results.</b></p>"
        )
    parts += [
        "<h2>Among the paper's models</h2><p>Hollow: published figures (Fin-Bias Tables 4-5, "
        "'Average' rows), each n=8,868 reports; filled: this card with its 95 % interval.</p>",
        _svg(data),
        "<h2>Paired tests (same reports, exact McNemar)</h2>",
        _table(data.tests),
        "<h2>Every number with its interval and n</h2>",
        _table(data.head),
        f"<h2>Sectors with n ≥ {min_sector_n(data.cfg)}</h2>",
        f"<p>A sector is drawn when its n reaches figures.min_sector_n = {min_sector_n(data.cfg)} "
        "(the threshold the figures use).</p>",
        _table(data.sectors) if len(data.sectors) else "<p>No sector reaches the threshold.</p>",
        "<h2>Parse rate, tokens, cost</h2>",
        _table(pd.DataFrame([data.usage])),
        "<p><a href='answers.html'>The answers behind each number</a> (the first 20 per condition).</p>",
    ]
    counts = data.notes.get("counts") or {}
    if counts:
        parts += [
            "<h2>Reports read and left out</h2>",
            _table(pd.DataFrame([counts])),
            _table(pd.DataFrame(data.notes.get("exclusions") or [], columns=["source_file", "reason", "detail"])),
            f"<p>Rules: {html.escape(json.dumps(data.notes.get('rules'), default=str))}</p>",
        ]
    if data.against is not None:
        parts += [
            f"<h2>Beside card {html.escape(str(data.req.against))} (paired on the same items)</h2>",
            _table(data.against),
        ]
    parts.append(f"<p>Stage seconds: {html.escape(json.dumps(data.seconds))}</p>")
    return "".join(parts)


def write_pdf(data: CardData, path: Path) -> None:
    """The one-page PDF: the headline lines and the three axes among the published models."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(AXES) + 1, 1, figsize=(8.27, 11.69), gridspec_kw={"height_ratios": [2, 1, 1, 1]})
    axes[0].axis("off")
    text = [f"Herding card: {data.req.model}", *headline_text(data), f"Sample: {data.notes.get('sample')}"]
    if data.cfg.is_synthetic:
        text.append("Synthetic data, embedded plumbing model: not research results.")
    axes[0].text(0, 1, "\n".join(text), va="top", fontsize=9, wrap=True)
    for ax, (cond, col) in zip(axes[1:], AXES, strict=True):
        pub = data.published.dropna(subset=[col])
        ax.scatter(pub[col], [0] * len(pub), facecolors="none", edgecolors="#555", label="published, n=8,868")
        r = _cell(data.head, cond, "herding")
        if r is not None:
            ax.errorbar(
                [r["value"]],
                [0.3],
                xerr=[[r["value"] - r["ci_low"]], [r["ci_high"] - r["value"]]],
                fmt="o",
                color="#c00",
                label=f"{data.req.model}, n={int(r['n'])}",
            )
        ax.set_xlim(0, 1)
        ax.set_ylim(-0.5, 0.8)
        ax.set_yticks([])
        ax.set_title(f"herding, {CONDITIONS[cond]}", fontsize=9)
        ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
