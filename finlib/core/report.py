"""`make report`: the run as a static HTML site under `runs/<run>/report/` (the last step of
`make reproduce`).

The index links every executed notebook (rendered by nbconvert), every figure (PNG shown, PDF
linked, caption from stage 06), every table (CSV / Markdown / LaTeX), the manifest with the time
per stage, the stages' JSON reports, the exclusions and the parse rates. Everything the index
links is copied into the report folder, so the folder alone is the report: it can be zipped,
mailed or served, and opens offline. nbconvert's pages pull MathJax and require.js from a CDN;
our notebooks use neither (no math, no widgets), so those script tags are removed and the pages
load without network.
"""
from __future__ import annotations

import html
import json
import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from finlib.core.config import RunConfig
from finlib.core.vocab import SYNTHETIC_CAVEAT

EXTERNAL_SCRIPT = re.compile(r"<script[^>]*\bsrc=\"https?://[^\"]*\"[^>]*>\s*</script>", re.IGNORECASE)
TABLE_EXTS = ("csv", "md", "tex")
CSS = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.5em} h2{font-size:1.2em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;font-size:.85em} td,th{border:1px solid #ddd;padding:.2em .5em;text-align:left}
.banner{background:#fff3cd;border:1px solid #e0b040;padding:.6em 1em;margin:1em 0}
figure{margin:1.5em 0} figure img{max-width:100%;border:1px solid #eee} figcaption{font-size:.85em;color:#444}
.skipped{color:#a33} code{background:#f4f4f4;padding:0 .2em}
"""


def notebook_html(path: Path) -> str:
    """One executed notebook as a self-contained HTML page (images inline, no CDN scripts)."""
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="lab", embed_images=True)
    body, _ = exporter.from_filename(str(path))
    return EXTERNAL_SCRIPT.sub("", body)


def _copy(src: Path, dst: Path) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)
    return dst


def _e(x: Any) -> str:
    return html.escape(str(x))


def _link(href: str, text: str) -> str:
    return f'<a href="{_e(href)}">{_e(text)}</a>'


def frame_html(df: pd.DataFrame) -> str:
    return df.to_html(index=False, border=0, na_rep="", escape=True) if not df.empty else "<p>(none)</p>"


def find_keys(obj: Any, words: Iterable[str], prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted key, value) for every key containing one of `words` (exclusion/skip counts in any report)."""
    out: list[tuple[str, Any]] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            name = f"{prefix}{k}"
            if any(w in str(k).lower() for w in words):
                out.append((name, v))
            else:
                out += find_keys(v, words, f"{name}.")
    return out


def _compact(value: Any, limit: int = 400) -> str:
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + " …"


def stage_times(manifest: dict) -> pd.DataFrame:
    rows = [{"stage": k, "notebook": v.get("notebook"), "status": v.get("status"), "seconds": v.get("seconds"),
             "started": v.get("started")} for k, v in sorted(manifest.get("stages", {}).items())]
    return pd.DataFrame(rows)


def parse_rates(cfg: RunConfig) -> pd.DataFrame:
    path = cfg.processed_dir / "scoring_report.json"
    if not path.is_file():
        return pd.DataFrame()
    return pd.DataFrame(json.loads(path.read_text(encoding="utf-8")).get("parse_rate", []))


def comparison_html(cfg: RunConfig) -> str:
    """Every saved paper-vs-ours table summarised (Fin-Bias from stage 06, BizFinBench from 07/08, which
    run after 06: the report is built last, so it sees them all)."""
    from finlib.core.compare import NOT_COMPARABLE, comparison_summary, read_comparisons

    banner = f'<p class="banner">{_e(NOT_COMPARABLE)}</p>' if cfg.is_synthetic else ""
    return banner + frame_html(comparison_summary(read_comparisons(cfg)))


def figure_captions(cfg: RunConfig) -> tuple[dict[str, str], list[dict]]:
    """Captions by figure name, and the figures stage 06 (and stage 09, beyond the paper: its
    `beyond_figures.json`) could not draw (with the reason)."""
    recs = []
    for name in ("figures_report.json", "beyond_figures.json"):
        path = cfg.processed_dir / name
        recs += json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []
    return ({r["name"]: r["caption"] for r in recs if not r.get("skipped")},
            [r for r in recs if r.get("skipped")])


def _figures_section(cfg: RunConfig, out: Path) -> str:
    captions, skipped = figure_captions(cfg)
    parts = []
    order = {name: i for i, name in enumerate(captions)}  # stage 06's reading order, then the other stages'
    for png in sorted(cfg.figures_dir.glob("*.png"), key=lambda p: (order.get(p.stem, len(order)), p.name)):
        _copy(png, out / "figures" / png.name)
        pdf = png.with_suffix(".pdf")
        pdf_link = ""
        if pdf.is_file():
            _copy(pdf, out / "figures" / pdf.name)
            pdf_link = " · " + _link(f"figures/{pdf.name}", "PDF")
        cap = captions.get(png.stem, f"{png.stem} (stage figure)")
        parts.append(f'<figure id="{_e(png.stem)}"><img src="figures/{_e(png.name)}" alt="{_e(png.stem)}">'
                     f"<figcaption><b>{_e(png.stem)}</b>: {_e(cap)}{pdf_link}</figcaption></figure>")
    for other in sorted(cfg.figures_dir.glob("*.html")):
        _copy(other, out / "figures" / other.name)
        parts.append(f"<p>{_link('figures/' + other.name, other.name)} (HTML figure)</p>")
    for rec in skipped:
        parts.append(f'<p class="skipped">{_e(rec["name"])}: not drawn — {_e(rec["skipped"])}</p>')
    return "\n".join(parts) or "<p>(no figures)</p>"


def _tables_section(cfg: RunConfig, out: Path) -> str:
    names = sorted({p.stem for p in cfg.tables_dir.glob("*") if p.suffix.lstrip(".") in TABLE_EXTS})
    rows = []
    for name in names:
        links = []
        for ext in TABLE_EXTS:
            src = cfg.tables_dir / f"{name}.{ext}"
            if src.is_file():
                _copy(src, out / "tables" / src.name)
                links.append(_link(f"tables/{src.name}", ext.upper()))
        rows.append(f"<tr><td>{_e(name)}</td><td>{' · '.join(links)}</td></tr>")
    return f"<table><tr><th>table</th><th>files</th></tr>{''.join(rows)}</table>" if rows else "<p>(none)</p>"


def _notebooks_section(cfg: RunConfig, out: Path) -> str:
    items = []
    for nb in sorted((cfg.run_dir / "notebooks").glob("*.ipynb")):
        target = out / "notebooks" / f"{nb.stem}.html"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(notebook_html(nb), encoding="utf-8")
        items.append(f"<li>{_link(f'notebooks/{target.name}', nb.stem)}</li>")
    return f"<ul>{''.join(items)}</ul>" if items else "<p>(no executed notebooks)</p>"


def _reports_section(cfg: RunConfig, out: Path) -> tuple[str, str]:
    """Links to every stage JSON report, and the exclusion / skip entries found in them."""
    links, excl = [], []
    for rep in sorted(cfg.processed_dir.glob("*.json")):
        _copy(rep, out / "reports" / rep.name)
        links.append(f"<li>{_link(f'reports/{rep.name}', rep.name)}</li>")
        try:
            data = json.loads(rep.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            excl.append(f"<tr><td>{_e(rep.name)}</td><td>unreadable</td><td>{_e(exc)}</td></tr>")
            continue
        for key, value in find_keys(data, ("exclu", "skip", "drop", "unparsed")):
            excl.append(f"<tr><td>{_e(rep.name)}</td><td>{_e(key)}</td><td><code>{_e(_compact(value))}</code></td></tr>")
    table = (f"<table><tr><th>report</th><th>key</th><th>value</th></tr>{''.join(excl)}</table>"
             if excl else "<p>(no exclusions recorded)</p>")
    return f"<ul>{''.join(links)}</ul>", table


def build_report(cfg: RunConfig) -> Path:
    """Write `runs/<run>/report/index.html` and everything it links; return the index path."""
    out = cfg.run_dir / "report"
    tmp = out.with_name(f".report.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    manifest_path = cfg.run_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8")) if manifest_path.is_file() else {}
    if manifest_path.is_file():
        _copy(manifest_path, tmp / "manifest.json")
    plan_md = cfg.run_dir / "plan.md"
    extra = ""
    if plan_md.is_file():
        _copy(plan_md, tmp / "plan.md")
        extra = f"<p>{_link('plan.md', 'plan.md')} (requests, tokens, cost, wall time; `make plan`)</p>"
    reports, exclusions = _reports_section(cfg, tmp)
    banner = f'<div class="banner">⚠️ {_e(SYNTHETIC_CAVEAT)}</div>' if cfg.is_synthetic else ""
    git = manifest.get("git", {})
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Run {_e(cfg.name)} — report</title>
<style>{CSS}</style></head><body>
<h1>Run <code>{_e(cfg.name)}</code></h1>{banner}
<p>params: <code>{_e(manifest.get('params_file', cfg.params_file.name))}</code> · commit <code>{_e(git.get('commit'))}</code>
(dirty: {_e(git.get('dirty'))}) · updated {_e(manifest.get('updated'))} · {_link('manifest.json', 'manifest.json')}</p>{extra}
<h2>Stages (time per stage)</h2>{frame_html(stage_times(manifest))}
<h2>Executed notebooks</h2>{_notebooks_section(cfg, tmp)}
<h2>Figures</h2>{_figures_section(cfg, tmp)}
<h2>Tables</h2>{_tables_section(cfg, tmp)}
<h2>Paper vs ours</h2>{comparison_html(cfg)}
<h2>Parse rates</h2>{frame_html(parse_rates(cfg))}
<h2>Exclusions and skipped items</h2>{exclusions}
<h2>Stage reports (JSON)</h2>{reports}
</body></html>
"""
    (tmp / "index.html").write_text(page, encoding="utf-8")
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return out / "index.html"


def local_links(index: Path) -> list[str]:
    """Every relative href/src of a page (what the report promises to contain)."""
    text = index.read_text(encoding="utf-8")
    refs = re.findall(r'(?:href|src)="([^"#]+)"', text)
    return [r for r in refs if not re.match(r"^[a-z]+:", r)]


def main(argv: list[str] | None = None) -> int:
    import argparse

    from finlib.core.config import load_run, repo_root

    ap = argparse.ArgumentParser(description="Build runs/<run>/report/ (static HTML) from a run's outputs.")
    ap.add_argument("--run", default=os.environ.get("RUN", "default"))
    ap.add_argument("--params", default=None)
    args = ap.parse_args(argv)
    os.chdir(repo_root())
    index = build_report(load_run(args.run, args.params))
    print(f"report: {index}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
