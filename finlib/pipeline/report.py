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
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from finlib.core.config import RunConfig
from finlib.core.tables import SYNTHETIC_CAVEAT

EXTERNAL_SCRIPT = re.compile(r"<script[^>]*\bsrc=\"https?://[^\"]*\"[^>]*>\s*</script>", re.IGNORECASE)
TABLE_EXTS = ("csv", "md", "tex")
# The tables the papers exist for, shown as HTML on the index (key columns first), in reading order.
HEADLINE_TABLES = (
    ("table3_analyst_ratings", "Fin-Bias Table 3 — analyst ratings"),
    ("table3_return_ratings", "Fin-Bias Table 3 — return-based ratings"),
    ("table4_herding_with_without", "Fin-Bias Table 4 — herding with / without the rating"),
    ("table5_herding_fake", "Fin-Bias Table 5 — herding towards a fake rating"),
    ("table6_accuracy_with_without", "Fin-Bias Table 6 — accuracy with / without the rating"),
    ("table7_accuracy_no_opinion", "Fin-Bias Table 7 — accuracy with opinions removed"),
    ("table_conditions", "Fin-Bias — herding and accuracy in every declared condition"),
    ("table8_accuracy_dpo", "Fin-Bias Table 8 — accuracy after DPO"),
    ("bizfin_table3", "BizFinBench Table 3 — scores per task"),
    ("bizfin_table4_judge", "BizFinBench Table 4 — judges against reference scores"),
    ("bizfin_table6", "BizFinBench Table 6 — query token lengths"),
)
KEY_COLUMNS = ("Average", "Average (pooled) 95 % CI", "Average (pooled) CI", "N per task", "Parse rate %", "N", "Not answered")  # shown right after the row names
ROW_COLUMNS = ("Source", "Group", "Model", "Registry name", "row", "model", "rating", "task", "source", "Methods")
CSS = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
.wide{overflow:auto;max-width:100%;max-height:32em} .wide table{font-size:.75em}
.wide th,.wide td{padding:.15em .35em} .wide td{white-space:nowrap} .wide th{min-width:4em;max-width:9em}
.wide thead th{position:sticky;top:0;background:#f7f7f7;z-index:1}
.wide th:first-child,.wide td:first-child{position:sticky;left:0;background:#fff;z-index:2}
details{display:inline} details summary{cursor:pointer;color:#1f5a99}
nav.toc{font-size:.9em} nav.toc ul ul{columns:2} .caption{font-size:.85em;color:#444;max-width:60em}
h1{font-size:1.5em} h2{font-size:1.2em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;font-size:.85em} td,th{border:1px solid #ddd;padding:.2em .5em;text-align:left}
.banner{background:#fff3cd;border:1px solid #e0b040;padding:.6em 1em;margin:1em 0}
figure{margin:1.5em 0} figure img{max-width:100%;border:1px solid #eee} figcaption{font-size:.85em;color:#444}
.skipped{color:#a33} code{background:#f4f4f4;padding:0 .2em}
"""


PROGRESS_NOISE = ("IProgress not found", "from .autonotebook import tqdm as notebook_tqdm")


def machine_paths(root: Path) -> list[tuple[str, str]]:
    """(absolute prefix, what to show instead), longest first: the repository, the Python install and
    the home folder of the machine that ran it -- pages meant to be mailed name none of them."""
    pairs = {str(root.resolve()): ".", str(root): ".", sys.prefix: "<python-env>",
             sys.base_prefix: "<python>", str(Path.home()): "~"}
    return sorted(((k, v) for k, v in pairs.items() if len(k) > 1), key=lambda kv: -len(kv[0]))


def scrub_paths(text: str, root: Path) -> str:
    for prefix, shown in machine_paths(root):
        text = text.replace(prefix, shown)
    return text


def final_lines(text: str) -> str:
    """What a terminal shows after carriage-return redraws: per line, the text after its last \\r."""
    return "\n".join(line.rstrip("\r").rsplit("\r", 1)[-1] for line in text.split("\n"))


def collapse_progress(nb) -> None:
    """Consecutive stream outputs of a cell merged and progress redraws collapsed to their final line
    (tqdm writes one stderr message per redraw); the ipywidgets fallback warning dropped."""
    for cell in nb.cells:
        merged: list = []
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream" and merged and merged[-1].get("output_type") == "stream" \
                    and merged[-1].get("name") == out.get("name"):
                merged[-1]["text"] += out["text"]
                continue
            merged.append(out)
        for out in merged:
            if out.get("output_type") == "stream":
                lines = final_lines(out["text"]).split("\n")
                out["text"] = "\n".join(ln for ln in lines if not any(n in ln for n in PROGRESS_NOISE))
        if "outputs" in cell:
            cell["outputs"] = [o for o in merged if o.get("output_type") != "stream" or o["text"].strip()]


def publishable_notebook(path: Path, root: Path) -> None:
    """Rewrite an executed notebook so it can be mailed: no absolute path of this machine (papermill's
    metadata, tracebacks, warnings), progress redraws collapsed to their final line."""
    import nbformat

    if not path.is_file():
        return
    nb = nbformat.reads(scrub_paths(path.read_text(encoding="utf-8"), root), as_version=4)
    collapse_progress(nb)
    nbformat.write(nb, path)


def notebook_html(path: Path, root: Path | None = None) -> str:
    """One executed notebook as a self-contained HTML page (images inline, no CDN scripts, no machine
    paths, progress collapsed)."""
    import nbformat
    from nbconvert import HTMLExporter

    text = path.read_text(encoding="utf-8")
    nb = nbformat.reads(scrub_paths(text, root) if root else text, as_version=4)
    collapse_progress(nb)
    exporter = HTMLExporter(template_name="lab", embed_images=True)
    body, _ = exporter.from_notebook_node(nb)
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
             "started": v.get("started"), "ended": v.get("ended")} for k, v in sorted(manifest.get("stages", {}).items())]
    return pd.DataFrame(rows)


def run_finished(manifest: dict) -> str:
    """When the run's last stage ended (the time its numbers are from), not when the last call began."""
    ends = [v.get("ended") for v in manifest.get("stages", {}).values() if v.get("ended")]
    return max(ends) if ends else "(no stage has finished)"


def parse_rates(cfg: RunConfig) -> pd.DataFrame:
    path = cfg.processed_dir / "scoring_report.json"
    if not path.is_file():
        return pd.DataFrame()
    df = pd.DataFrame(json.loads(path.read_text(encoding="utf-8")).get("parse_rate", []))
    if "parse_rate" in df.columns:  # a share everywhere in the data, a percentage wherever it is shown
        df["parse_rate"] = (100 * df["parse_rate"].astype(float)).round(1)
        df = df.rename(columns={"parse_rate": "parse rate %"})
    return df


def comparison_html(cfg: RunConfig) -> str:
    """Every saved paper-vs-ours table summarised (Fin-Bias from stage 06, BizFinBench from 07/08, which
    run after 06: the report is built last, so it sees them all)."""
    from finlib.core.compare import NOT_COMPARABLE, comparison_summary, read_comparisons

    banner = f'<p class="banner">{_e(NOT_COMPARABLE)}</p>' if cfg.is_synthetic else ""
    return banner + frame_html(comparison_summary(read_comparisons(cfg)))


def figure_records(cfg: RunConfig) -> list[dict]:
    """Stage 06's figure records in its reading order (the order notebook 06 shows them), then stage
    09's (`beyond_figures.json`)."""
    recs = []
    for name in ("figures_report.json", "beyond_figures.json"):
        path = cfg.processed_dir / name
        recs += json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []
    return recs


def figure_captions(cfg: RunConfig) -> tuple[dict[str, str], list[dict]]:
    """Captions by figure name, in reading order (stage 06's, then stage 09's, then the other stages'
    figures by name), and the figures that could not be drawn (with the reason)."""
    recs = figure_records(cfg)
    captions = {r["name"]: r["caption"] for r in recs if not r.get("skipped")}
    for p in sorted(cfg.figures_dir.glob("*.caption.txt")):
        captions.setdefault(p.name.removesuffix(".caption.txt"), p.read_text(encoding="utf-8").strip())
    skipped = [{"name": p.name.removesuffix(".skipped.txt"), "skipped": p.read_text(encoding="utf-8").strip()}
               for p in sorted(cfg.figures_dir.glob("*.skipped.txt"))]
    return captions, [*[r for r in recs if r.get("skipped")], *skipped]


def caption_html(text: str) -> str:
    """A caption's first sentence shown, the rest (method details, N, caveats) one click away, so a
    10-line caption does not push its table or figure off the screen."""
    head, sep, rest = text.partition(". ")
    if not sep or len(text) <= 160:
        return _e(text)
    return f"{_e(head)}. <details><summary>details</summary>{_e(rest)}</details>"


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
        cap = captions.get(png.stem, "(no caption recorded: the figure was saved without one)")
        parts.append(f'<figure id="{_e(png.stem)}"><img src="figures/{_e(png.name)}" alt="{_e(png.stem)}">'
                     f"<figcaption><b>{_e(png.stem)}</b>{pdf_link}: {caption_html(cap)}</figcaption></figure>")
    for other in sorted(cfg.figures_dir.glob("*.html")):
        _copy(other, out / "figures" / other.name)
        parts.append(f"<p>{_link('figures/' + other.name, other.name)} (HTML figure)</p>")
    for rec in skipped:
        parts.append(f'<p class="skipped">{_e(rec["name"])}: not drawn — {_e(rec["skipped"])}</p>')
    return "\n".join(parts) or "<p>(no figures)</p>"


def key_columns_first(df: pd.DataFrame) -> pd.DataFrame:
    """Row names, then the columns a reader looks for (Average, its interval, parse rate, N), then the rest:
    the pooled average must not sit off-screen to the right of nine sectors."""
    first = [c for c in (*ROW_COLUMNS, *KEY_COLUMNS) if c in df.columns]
    return df[first + [c for c in df.columns if c not in first]]


def _shown(value: Any) -> str:
    if isinstance(value, float):
        return "" if pd.isna(value) else f"{value:.2f}".rstrip("0").rstrip(".") if abs(value) < 1e6 else f"{value:.3g}"
    return "" if value is None else str(value)


def table_caption(path: Path) -> str:
    """The `# caption` line write_table puts first in every CSV."""
    with path.open(encoding="utf-8") as fh:
        first = fh.readline()
    return first[2:].strip() if first.startswith("# ") else ""


def headline_tables_html(cfg: RunConfig) -> tuple[str, list[tuple[str, str]]]:
    """Tables 3-8 of both papers as HTML (caption, key columns first, scrollable), and (anchor, title)
    for the table of contents; a table the run did not make is named as absent, with its stage."""
    from finlib.core.tables import read_table_csv

    parts, toc = [], []
    for stem, title in HEADLINE_TABLES:
        path = cfg.tables_dir / f"{stem}.csv"
        if not path.is_file():
            continue
        df = key_columns_first(read_table_csv(path)).map(_shown)
        anchor = f"t-{stem}"
        toc.append((anchor, title))
        parts.append(f'<h3 id="{anchor}">{_e(title)}</h3><div class="caption">{caption_html(table_caption(path))}</div>'
                     f'<div class="wide">{df.to_html(index=False, border=0, escape=True)}</div>')
    return "\n".join(parts) or "<p>(this run made none of Tables 3-8)</p>", toc


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
    for nb in sorted((cfg.run_dir / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        target = out / "notebooks" / f"{nb.stem}.html"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(notebook_html(nb, cfg.root), encoding="utf-8")
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
    from finlib.pipeline.answers_page import answers_html

    answers = answers_html(cfg)
    if answers is not None:
        (tmp / "answers.html").write_text(scrub_paths(answers, cfg.root), encoding="utf-8")
        extra += f"<p>{_link('answers.html', 'answers.html')} (every answer: prompt, reply, parsed answer, tokens, cost; filter by model, condition, sector)</p>"
    results_json = cfg.run_dir / "results.json"
    if results_json.is_file():
        _copy(results_json, tmp / "results.json")
        extra += f"<p>{_link('results.json', 'results.json')} (headline numbers with interval and N, params, versions, commit)</p>"
    reports, exclusions = _reports_section(cfg, tmp)
    banner = f'<div class="banner">⚠️ {_e(SYNTHETIC_CAVEAT)}</div>' if cfg.is_synthetic else ""
    git = manifest.get("git", {})
    headline, table_toc = headline_tables_html(cfg)
    sections = [("stages", "Stages (time per stage)", frame_html(stage_times(manifest))),
                ("tables-3-8", "Tables 3–8", headline),
                ("figures", "Figures", _figures_section(cfg, tmp)),
                ("notebooks", "Executed notebooks", _notebooks_section(cfg, tmp)),
                ("all-tables", "All tables (CSV / Markdown / LaTeX)", _tables_section(cfg, tmp)),
                ("paper-vs-ours", "Paper vs ours", comparison_html(cfg)),
                ("parse-rates", "Parse rates", frame_html(parse_rates(cfg))),
                ("exclusions", "Exclusions and skipped items", exclusions),
                ("stage-reports", "Stage reports (JSON)", reports)]
    toc = "".join(f'<li>{_link("#" + a, t)}' + ("<ul>" + "".join(f"<li>{_link('#' + ta, tt)}</li>" for ta, tt in table_toc)
                                                 + "</ul>" if a == "tables-3-8" and table_toc else "") + "</li>"
                  for a, t, _ in sections)
    body = "\n".join(f'<h2 id="{a}">{_e(t)}</h2>{html_part}' for a, t, html_part in sections)
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Run {_e(cfg.name)} — report</title>
<style>{CSS}</style></head><body>
<h1>Run <code>{_e(cfg.name)}</code></h1>{banner}
<p>params: <code>{_e(manifest.get('params_file', cfg.params_file.name))}</code> · commit <code>{_e(git.get('commit'))}</code>
(dirty: {_e(git.get('dirty'))}) · finished {_e(run_finished(manifest))} · {_link('manifest.json', 'manifest.json')}</p>{extra}
<nav class="toc"><h2>Contents</h2><ul>{toc}</ul></nav>
{body}
</body></html>
"""
    (tmp / "index.html").write_text(scrub_paths(page, cfg.root), encoding="utf-8")
    for copied in [*tmp.glob("*.json"), *tmp.glob("*.md"), *(tmp / "reports").glob("*.json")]:
        copied.write_text(scrub_paths(copied.read_text(encoding="utf-8"), cfg.root), encoding="utf-8")
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
