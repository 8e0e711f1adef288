"""The docs say only what is true now: every relative link resolves, every params key they quote
exists in the schema (finlib/core/params.py), and every measured figure they mark comes from a file a
project command writes.

A measured figure is written with a marker right after it, naming the file and the key that hold it:

    stage 03 took **412 s**<!-- measured: benchmarks/results/reproduce.json#stages.03.seconds -->

The figure before the marker must equal the value in the file (rounded as the doc rounds it). The
checks read the markdown with their own small parsers, not with the code that writes the docs."""
from __future__ import annotations

import ast
import functools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args, get_origin

import pytest
from pydantic import BaseModel

from finlib.core.params import PARAMS_MODEL, SECTION_MODELS

ROOT = Path(__file__).resolve().parents[2]
# Outputs of `make reproduce` (figures/<run>/, runs/<run>/): linked from the docs, absent in a fresh clone.
GENERATED_PREFIXES = ("figures/", "runs/")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
INLINE_CODE = re.compile(r"`([^`]+)`")  # may wrap a line
PARAMS_KEY = re.compile(r"^((?:" + "|".join(SECTION_MODELS) + r")(?:\.[A-Za-z0-9_]+)+)(?=$|[\s:=,)\]])")
MEASURED = re.compile(r"([-+]?\d[\d,]*(?:\.\d+)?)\s*(?:[^\d\s<]{0,12}\s?)?\**\s*<!--\s*measured:\s*([^#\s]+)#(\S+)\s*-->")


def doc_files() -> list[Path]:
    """The README, every page under docs/ and the folder READMEs a user reads."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    files += [p for p in (ROOT / d / "README.md" for d in ("data", "benchmarks", "notebooks", "params")) if p.is_file()]
    return files


def prose(text: str) -> str:
    """The text outside fenced code blocks (commands and YAML there are examples, not references)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def links(text: str) -> Iterator[str]:
    for m in LINK.finditer(prose(text)):
        yield m.group(1) or m.group(2)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", prose(path.read_text(encoding="utf-8")), re.M)}


def broken_links(path: Path) -> list[str]:
    """Relative links from `path` whose file (or heading anchor) does not exist."""
    bad = []
    for target in links(path.read_text(encoding="utf-8")):
        if re.match(r"^[a-z]+:", target) or target.startswith("//"):
            continue  # https:, mailto:: not checked offline
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        rel = dest.relative_to(ROOT).as_posix() if dest.is_relative_to(ROOT) else str(dest)
        if not dest.exists():
            if not rel.startswith(GENERATED_PREFIXES):
                bad.append(f"{target} (no file {rel})")
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target} (no heading #{anchor} in {rel})")
    return bad


def model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic section model inside Optional[...] / Union[...], if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = model_of(arg)
        if found is not None:
            return found
    return None


def is_mapping(annotation: Any) -> bool:
    return get_origin(annotation) is dict or any(is_mapping(a) for a in get_args(annotation))


def schema_has(dotted: str) -> bool:
    """Whether `a.b.c` is a key of the params schema. Below a mapping (`inference.endpoints`) the next
    part is a free name (a model's); what follows it is checked against the mapping's value model."""
    model: type[BaseModel] | None = PARAMS_MODEL
    parts = dotted.split(".")
    i = 0
    while i < len(parts):
        field = model.model_fields.get(parts[i]) if model is not None else None
        if field is None:
            return False
        model = model_of(field.annotation)
        if is_mapping(field.annotation):
            if model is None:
                return True  # free-form below here
            i += 1  # the mapping's own key
        i += 1
    return True


def quoted_params_keys(text: str) -> set[str]:
    keys = set()
    for span in INLINE_CODE.findall(prose(text)):
        if re.search(r"\.(?:py|md|ya?ml|json|csv|parquet|ipynb|txt|log|html|png)\b", span):
            continue  # a file name (`data.py`), not a key
        m = PARAMS_KEY.match(span.strip())
        if m:
            keys.add(m.group(1))
    return keys


def lookup(data: Any, key: str) -> Any:
    for part in key.split("."):
        data = data[part] if isinstance(data, dict) else data[int(part)]
    return data


def figure_matches(shown: str, value: Any) -> bool:
    """The doc's figure equals the file's value at the precision the doc shows."""
    number = float(shown.replace(",", ""))
    decimals = len(shown.split(".")[1]) if "." in shown else 0
    return isinstance(value, (int, float)) and round(float(value), decimals) == number


def measured_mismatches(path: Path) -> list[str]:
    bad = []
    for m in MEASURED.finditer(path.read_text(encoding="utf-8")):
        shown, file, key = m.groups()
        source = ROOT / file
        if not file.startswith("benchmarks/results/") or source.suffix != ".json":
            bad.append(f"{shown}: {file} is not a results file a benchmark writes (benchmarks/results/*.json)")
            continue
        if not source.is_file():
            bad.append(f"{shown}: {file} does not exist")
            continue
        try:
            value = lookup(json.loads(source.read_text(encoding="utf-8")), key)
        except (KeyError, IndexError, ValueError):
            bad.append(f"{shown}: no key {key} in {file}")
            continue
        if not figure_matches(shown, value):
            bad.append(f"{shown}: {file}#{key} says {value}")
    return bad


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(path: Path):
    assert broken_links(path) == []


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_quoted_params_key_is_in_the_schema(path: Path):
    missing = sorted(k for k in quoted_params_keys(path.read_text(encoding="utf-8")) if not schema_has(k))
    assert missing == [], f"{path.name} quotes params keys the schema (finlib/core/params.py) does not have"


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_measured_figure_matches_the_file_that_measured_it(path: Path):
    assert measured_mismatches(path) == []


# A path or dotted name of the project quoted in a doc: `finlib/finbias/answers.py`, `tests/llm/test_store.py::test_x`,
# `finlib.finbias.answers.parse_rating`. Placeholders (`<run>`), globs and what the benchmarks write are not checked;
# a notebook may be named without its `.ipynb`.
QUOTED_PATH = re.compile(r"(?<![\w/.-])((?:finlib|tests|benchmarks|notebooks)/[\w./-]*\w)(?:::(\w+))?")
QUOTED_NAME = re.compile(r"(?<![\w/.-])(finlib(?:\.\w+)+)")


@functools.cache
def defined_names(path: Path) -> dict[str, set[str]]:
    """A module's top-level names (functions, classes, assignments, imports), each class with its members:
    read with `ast`, nothing imported."""
    names: dict[str, set[str]] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef):
            names[node.name] = {n.name for n in node.body
                                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
            names[node.name] |= {t.id for n in node.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                                 for t in ast.walk(n.targets[0] if isinstance(n, ast.Assign) else n.target)
                                 if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = set()
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update({t.id: set() for target in targets for t in ast.walk(target) if isinstance(t, ast.Name)})
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update({(a.asname or a.name).split(".")[0]: set() for a in node.names})
    return names


def name_exists(dotted: str, root: Path) -> bool:
    """`finlib.a.b.name[.member]`: the longest module prefix is a file or package, the rest a name it defines."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        base = root.joinpath(*parts[:i])
        module = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        if module.is_file():
            break
    else:
        return False
    rest = parts[i:]
    if not rest:
        return True
    names = defined_names(module)
    if rest[0] not in names:
        return (base / rest[0]).with_suffix(".py").is_file()
    return len(rest) == 1 or not names[rest[0]] or rest[1] in names[rest[0]]


def missing_references(text: str, root: Path) -> list[str]:
    """Project paths, test ids and finlib dotted names quoted in `text` that do not exist."""
    bad = []
    for line in prose(text).splitlines():
        line = re.sub(r"\S*[<*{]\S*", " ", line)  # placeholders and globs: `figures/<run>/`, `bench_*.py`
        for m in QUOTED_PATH.finditer(line):
            path, test = root / m.group(1), m.group(2)
            if m.group(1).startswith("benchmarks/results/"):
                continue  # written by a benchmark (the measured figures above check what is quoted from them)
            if not path.exists() and not path.with_suffix(".ipynb").is_file():
                bad.append(m.group(1))
            elif test and path.suffix == ".py" and test not in defined_names(path):
                bad.append(f"{m.group(1)}::{test}")
        bad += [m.group(1) for m in QUOTED_NAME.finditer(line) if not name_exists(m.group(1), root)]
    return bad


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_quoted_module_path_and_name_exists(path: Path):
    """A module moved or an entry renamed leaves no doc pointing at the old place."""
    assert missing_references(path.read_text(encoding="utf-8"), ROOT) == []


def test_a_moved_module_or_renamed_name_is_caught(tmp_path):
    (tmp_path / "finlib" / "pkg").mkdir(parents=True)
    (tmp_path / "finlib" / "__init__.py").write_text("")
    (tmp_path / "finlib" / "pkg" / "__init__.py").write_text("")
    (tmp_path / "finlib" / "pkg" / "mod.py").write_text("X = 1\nclass C:\n    def m(self): ...\ndef run(cfg): ...\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("def test_one(): ...\n")
    good = ("`finlib/pkg/mod.py`, `finlib.pkg.mod.run`, `finlib.pkg.mod.C.m`, `finlib.pkg.mod.X`, "
            "`tests/test_a.py::test_one`, `figures/<run>/tables`, `finlib/pkg/`")
    assert missing_references(good, tmp_path) == []
    bad = ("`finlib/pkg/old.py`, `finlib.pkg.mod.run_stage`, `finlib.pkg.mod.C.gone`, `finlib.other`, "
           "`tests/test_a.py::test_two`\n```\nfinlib/pkg/in_code_is_not_checked.py\n```\n")
    assert sorted(missing_references(bad, tmp_path)) == [
        "finlib.other", "finlib.pkg.mod.C.gone", "finlib.pkg.mod.run_stage", "finlib/pkg/old.py", "tests/test_a.py::test_two"]


# A figure that looks measured: a number followed by a unit of time (ms, s, min, h and their words), of memory
# (KB/MB/GB, KiB/MiB/GiB) or a rate (anything per second: tok/s, answers/s, GFLOP/s), or a speed-up written
# `2.4×` / `2.4x`. It is unmarked unless a `measured:` marker follows it.
UNIT = (r"(?:ms|s|min|h|seconds?|minutes?|hours?|[KMG]i?B|[A-Za-z]+/s)(?![\w/])")
FIGURE = re.compile(r"(?P<cmp>(?:[≤≥<>]=?|[<>]=)\s?)?(?<![\w.,])(?P<num>\d[\d,]*(?:\.\d+)?)"
                    r"(?:\s?" + UNIT + r"|[×x](?![\w\d]))")


def unmarked_figures(text: str) -> list[tuple[int, str]]:
    """(line, figure) for every measurement-looking figure without a `measured:` marker.

    The rule, kept simple: outside fenced code blocks, inline code spans and HTML comments, a FIGURE
    counts as a measurement unless (1) a `<!-- measured: file#key -->` marker follows it (the file then
    holds it, checked above), (2) a comparison sign comes right before it (`≤ 10 min`, `> 3×`: a goal or
    a limit, not a measurement), (3) it sits in a table row whose first cell is a params key in
    backticks (a table of settings and their defaults), or (4) it sits under a heading that says
    "estimate" (arithmetic shown in the text, not a measurement). A setting or a test's input is
    written as code (`timeout_s: 60`, `Retry-After: 4`), which (like any code) is not scanned."""
    found = []
    in_code = estimate = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        heading = None if in_code else re.match(r"^#+\s+(.*)", line)
        if heading:
            estimate = bool(re.search(r"\bestimate", heading.group(1), re.IGNORECASE))
        first_cell = re.match(r"^\|\s*`([^`]+)`", line)
        if in_code or estimate or (first_cell and PARAMS_KEY.match(first_cell.group(1))):
            continue
        line = MEASURED.sub(" ", line)
        line = re.sub(r"<!--.*?-->|`[^`]*`", " ", line)
        found += [(number, m.group(0).strip()) for m in FIGURE.finditer(line) if not m.group("cmp")]
    return found


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_measured_looking_figure_is_marked(path: Path):
    """A time, size, rate or speed-up quoted in a doc comes from a results file a project command writes
    (benchmarks/results/*.json): it carries a `measured:` marker, or the doc names the command instead."""
    rel = path.relative_to(ROOT).as_posix()
    assert [f"{rel}:{n}: {fig}" for n, fig in unmarked_figures(path.read_text(encoding="utf-8"))] == []


def test_readme_types_no_test_counts():
    """How many tests there are is pytest's to say (`pytest --collect-only -q`), not a typed number."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert not re.search(r"\d[\d,]*\s+(?:tests|passed|skipped)\b", text)


# -- the checks fail when the docs go wrong -----------------------------------------------------------
def test_a_broken_link_and_a_missing_anchor_are_caught(tmp_path, monkeypatch):
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# Title here\n")
    page = tmp_path / "docs" / "b.md"
    page.write_text("[ok](a.md#title-here) [gone](docs/a.md) [anchor](a.md#nope) [site](https://x.org) "
                    "![fig](../figures/default/f.png)\n```\n[in code](nowhere.md)\n```\n")
    assert broken_links(page) == ["docs/a.md (no file docs/docs/a.md)", "a.md#nope (no heading #nope in docs/a.md)"]


def test_a_params_key_the_schema_lacks_is_caught():
    assert schema_has("bizfin.rubrics_dir") and schema_has("bizfin.iterajudge.tasks")
    assert schema_has("inference.endpoints.any_model")  # a free-form mapping
    assert not schema_has("dpo.model") and not schema_has("bizfin.iterajudge.nope")
    assert quoted_params_keys("set `dpo.model: x` and `finlib.dpo.model` and `inference.max_new_tokens`") == {
        "dpo.model", "inference.max_new_tokens"}


def test_a_figure_that_differs_from_its_file_is_caught(tmp_path, monkeypatch):
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "benchmarks" / "results" / "x.json").write_text(json.dumps({"a": {"s": 412.26, "n": 1518}}))
    page = tmp_path / "p.md"
    page.write_text("**412.3 s**<!-- measured: benchmarks/results/x.json#a.s --> "
                    "1,518 tests<!-- measured: benchmarks/results/x.json#a.n -->\n")
    assert measured_mismatches(page) == []
    page.write_text("**413 s**<!-- measured: benchmarks/results/x.json#a.s --> "
                    "9 min<!-- measured: benchmarks/results/x.json#a.missing --> "
                    "5 s<!-- measured: runs/default/manifest.json#x -->\n")
    assert [b.split(":")[0] for b in measured_mismatches(page)] == ["413", "9", "5"]


def test_an_unmarked_timing_is_caught():
    page = ("Stage 03 took 412 s and 1.2 GB; the client sent 343 req/s, 2.4× the baseline (~15 s per call).\n"
            "Marked: **412 s**<!-- measured: benchmarks/results/x.json#a.s -->, goal ≤ 10 min, `timeout 30 s`.\n"
            "| `inference.timeout_s` | 30 s |\n| `make test` | 9 min |\n```\nreal 3m12s 45 s\n```\n"
            "500 tickers × 10 years, 19 models, 4,096-token cap, a 90-minute limit, Tables 4–7.\n"
            "## Memory (estimates)\n| weights | 16 GB |\n## Measured\n| weights | 17 GB |\n")
    assert unmarked_figures(page) == [(1, "412 s"), (1, "1.2 GB"), (1, "343 req/s"), (1, "2.4×"), (1, "15 s"),
                                      (4, "9 min"), (12, "17 GB")]


# Phrases that narrate how a number was obtained on a busy machine, or what used to be, instead of
# saying what the project is: the docs describe the project as it is now.
NARRATION = re.compile(r"\b(?:used to (?!\w+ (?:the|a)\b)|fixed on the way|other jobs|beside a (?:test|\.ci)|"
                       r"shared machine|heavy load|earlier measured|the earlier default|for the record)",
                       re.IGNORECASE)


def narration(text: str) -> list[str]:
    return [m.group(0) for m in NARRATION.finditer(text)]


@pytest.mark.parametrize("path", [*doc_files(), *sorted((ROOT / "params").glob("*.yaml"))],
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_docs_narrate_no_history_or_machine_load(path: Path):
    assert narration(path.read_text(encoding="utf-8")) == []


def test_narration_is_caught():
    assert narration("Fixed on the way: it used to be stored; measured while other jobs shared it "
                     "(the earlier default).") == ["Fixed on the way", "used to ", "other jobs", "the earlier default"]
    assert narration("a key used to sign the request; the runner writes what each stage used") == []
