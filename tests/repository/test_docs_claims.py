"""The architectural claims of `docs/architecture.md` and the README, each checked against the code.

One test per checkable claim; each scan is also shown a known-bad snippet (a planted violation) and must
report it, so a claim that stops holding fails here instead of passing a scan that finds nothing.
Claims checked elsewhere are named where they are: the import ranks in `test_import_graph.py` (this file
checks the docs' rank table against them), the stage contract in `tests/pipeline/test_stage_contract.py`,
the backend records in `test_backend_switches.py` and `tests/pipeline/test_backend_record.py`.
"""
from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
import re
import types
import typing
from pathlib import Path

import pytest
import yaml

from finlib.core.artifacts import producers
from finlib.pipeline.stages import NOTEBOOK_HELPERS, STAGE_MODULES, stage_module

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
STAGES = sorted(STAGE_MODULES)
BASE_NAMES = ("run", "summary")


def notebook_source(path: Path) -> str:
    """The code cells of a notebook, joined, IPython magics and shell lines blanked so the text parses."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in code.splitlines())


def stage_notebook(stage: str) -> Path:
    """The one notebook `NN_*.ipynb` of stage NN."""
    (path,) = sorted((ROOT / "notebooks").glob(f"{stage}_*.ipynb"))
    return path


def stage_alias(tree: ast.Module, module: str) -> str | None:
    """The name a notebook binds its stage module to (`from <package> import stage [as x]`)."""
    package, _, leaf = module.rpartition(".")
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == package:
            for alias in node.names:
                if alias.name == leaf:
                    return alias.asname or leaf
    return None


def result_names(tree: ast.Module, alias: str) -> set[str]:
    """The variables a notebook binds to what its stage's `run` returned (`res = stage.run(cfg)`)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            fn = node.value.func
            if isinstance(fn, ast.Attribute) and fn.attr == "run" and isinstance(fn.value, ast.Name) \
                    and fn.value.id == alias:
                names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def undeclared_calls(code: str, module: str, api: tuple[str, ...]) -> list[str]:
    """Names of the stage module a notebook uses beyond `run`, `summary` and the module's `NOTEBOOK_API`."""
    tree = ast.parse(code)
    alias = stage_alias(tree, module)
    allowed = set(BASE_NAMES) | set(api)
    return sorted({f"{alias}.{n.attr}" for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                   and isinstance(n.value, ast.Name) and n.value.id == alias and n.attr not in allowed})


def is_view_of(node: ast.AST, results: set[str], view: str) -> bool:
    """Whether `node` is `<result>.<view>` (`tables` or `report`) for one of the result variables."""
    return isinstance(node, ast.Attribute) and node.attr == view and isinstance(node.value, ast.Name) \
        and node.value.id in results


def undeclared_keys(code: str, module: str, declared: tuple[str, ...], view: str = "tables") -> list[str]:
    """Reads of `result.<view>` (or of a variable bound to it) by a name the stage does not declare
    (`TABLES` for `tables`, `REPORT_KEYS` for `report`), or by a computed key."""
    tree = ast.parse(code)
    results = result_names(tree, stage_alias(tree, module) or "")
    aliases = {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) and is_view_of(n.value, results, view)
               for t in n.targets if isinstance(t, ast.Name)}
    found = []
    for node in ast.walk(tree):
        target = node.value if isinstance(node, ast.Subscript) else None
        if is_view_of(target, results, view) or (isinstance(target, ast.Name) and target.id in aliases):
            key = node.slice
            if not (isinstance(key, ast.Constant) and key.value in declared):
                found.append(ast.unparse(node))
    return found


def result_fields(module) -> set[str]:
    """The declared fields and properties of the dataclass a stage's `run` returns (its annotation)."""
    cls = typing.get_type_hints(module.run)["return"]
    props = {name for name, value in vars(cls).items() if isinstance(value, property)}
    return {f.name for f in dataclasses.fields(cls)} | props


def undeclared_fields(code: str, module: str, fields: set[str]) -> list[str]:
    """Attributes a notebook reads from its stage's result that the result's type does not declare."""
    tree = ast.parse(code)
    results = result_names(tree, stage_alias(tree, module) or "")
    return sorted({f"{n.value.id}.{n.attr}" for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                   and isinstance(n.value, ast.Name) and n.value.id in results and n.attr not in fields})


def undeclared_imports(code: str, module: str | None) -> list[str]:
    """finlib imports of a notebook other than its stage module and `NOTEBOOK_HELPERS`."""
    found = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "finlib"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "finlib":
            found += [f"{node.module}.{a.name}" for a in node.names]
    allowed = set(NOTEBOOK_HELPERS) | ({module} if module else set())
    return [name for name in found if name not in allowed]


# ---- notebooks read declared views ------------------------------------------------------------

@pytest.mark.parametrize("stage", STAGES)
def test_notebook_calls_only_the_stage_contract_and_its_notebook_api(stage: str):
    """Claim: a notebook calls `run`, `summary` and the functions its stage declares, nothing else."""
    mod = stage_module(stage)
    code = notebook_source(stage_notebook(stage))
    assert stage_alias(ast.parse(code), STAGE_MODULES[stage]), f"notebook {stage} imports no stage module"
    assert undeclared_calls(code, STAGE_MODULES[stage], mod.NOTEBOOK_API) == []


@pytest.mark.parametrize("stage", STAGES)
def test_notebook_api_is_what_the_notebook_calls(stage: str):
    """Claim: `NOTEBOOK_API` declares the notebook's view, no name the notebook leaves unused."""
    mod = stage_module(stage)
    code = notebook_source(stage_notebook(stage))
    alias = stage_alias(ast.parse(code), STAGE_MODULES[stage])
    assert [name for name in mod.NOTEBOOK_API if f"{alias}.{name}(" not in code] == []


@pytest.mark.parametrize("stage", STAGES)
def test_notebook_reads_tables_by_declared_name(stage: str):
    """Claim: a notebook reads `result.tables` only by a name in its stage's `TABLES`."""
    mod = stage_module(stage)
    assert undeclared_keys(notebook_source(stage_notebook(stage)), STAGE_MODULES[stage], mod.TABLES) == []


@pytest.mark.parametrize("stage", STAGES)
def test_notebook_reads_the_report_by_declared_key(stage: str):
    """Claim: a notebook reads `result.report` only by a key in its stage's `REPORT_KEYS`."""
    mod = stage_module(stage)
    assert undeclared_keys(notebook_source(stage_notebook(stage)), STAGE_MODULES[stage], mod.REPORT_KEYS,
                           "report") == []


@pytest.mark.parametrize("stage", STAGES)
def test_report_keys_are_what_the_notebook_reads(stage: str):
    """Claim: `REPORT_KEYS` declares the notebook's reads of the report, no key the notebook leaves unused."""
    mod = stage_module(stage)
    code = notebook_source(stage_notebook(stage))
    assert [k for k in mod.REPORT_KEYS if f'report["{k}"]' not in code and f"report['{k}']" not in code] == []


@pytest.mark.parametrize("stage", STAGES)
def test_notebook_reads_typed_result_fields(stage: str):
    """Claim: what a notebook reads from the result is a declared field of its type."""
    mod = stage_module(stage)
    code = notebook_source(stage_notebook(stage))
    assert undeclared_fields(code, STAGE_MODULES[stage], result_fields(mod)) == []


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.name)
def test_notebook_imports_only_its_stage_and_declared_helpers(path: Path):
    """Claim: notebooks call finlib through their stage module and the helpers `NOTEBOOK_HELPERS` names."""
    module = STAGE_MODULES.get(path.name[:2])
    assert undeclared_imports(notebook_source(path), module) == []


def test_the_notebook_scans_find_planted_violations():
    module = "finlib.finbias.labels.stage"
    bad = ("from finlib.finbias.labels import stage\nfrom finlib.finbias.labels.market_model import fit\n"
           "res = stage.run(cfg)\nstage.summary(cfg, res)\nstage.write_tables(cfg, res)\n"
           "res.tables['made_up']\nres.tables[name]\nres.not_a_field\nt = res.tables\nt['other']\n"
           "res.report['counts']\nres.report['secret']\nr = res.report\nr[k]\n")
    assert undeclared_calls(bad, module, ("agreement_markdown",)) == ["stage.write_tables"]
    assert sorted(undeclared_keys(bad, module, ("labels_shares_by_year",))) == [
        "res.tables['made_up']", "res.tables[name]", "t['other']"]
    assert sorted(undeclared_keys(bad, module, ("counts",), "report")) == ["r[k]", "res.report['secret']"]
    assert undeclared_fields(bad, module, {"tables", "report"}) == ["res.not_a_field"]
    assert undeclared_imports(bad, module) == ["finlib.finbias.labels.market_model.fit"]
    good = "from finlib.finbias.labels import stage\nres = stage.run(cfg)\nres.tables['labels_shares_by_year']\n"
    assert undeclared_keys(good, module, ("labels_shares_by_year",)) == []
    assert undeclared_imports(good, module) == []


def test_declared_helpers_exist():
    """Every name in `NOTEBOOK_HELPERS` is defined where it says (a name without its definition fails here, not in a notebook run)."""
    for dotted in NOTEBOOK_HELPERS:
        module, _, name = dotted.rpartition(".")
        assert importlib.util.find_spec(module) is not None, dotted
        assert re.search(rf"^(def|class) {name}\b", Path(ROOT, *module.split(".")).with_suffix(".py")
                         .read_text(encoding="utf-8"), re.M), dotted


# ---- layers, stage folders, what each stage reads and writes ---------------------------------

def table_rows(text: str, heading: str) -> list[list[str]]:
    """The body rows of the first Markdown table under `## <heading>`, cells stripped."""
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return [[c.strip() for c in row.strip("|").split("|")] for row in rows[2:]]


def documented_ranks(text: str) -> dict[str, int]:
    """The layers table of the architecture page: package -> rank."""
    return {re.search(r"`finlib/(\w+)`", row[1]).group(1): int(row[0]) for row in table_rows(text, "Layers")}


def enforced_ranks() -> dict[str, int]:
    """`RANKS` of the import-graph test, read from its source (the test that holds the layers)."""
    tree = ast.parse((ROOT / "tests" / "repository" / "test_import_graph.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "RANKS":
            return ast.literal_eval(node.value)
    raise AssertionError("test_import_graph.py has no RANKS")


def test_layers_table_is_the_enforced_ranks():
    """Claim: the layers table gives every package of finlib its rank, the one the import test holds."""
    assert documented_ranks(ARCHITECTURE.read_text(encoding="utf-8")) == enforced_ranks()


def test_the_rank_comparison_sees_a_changed_rank():
    text = ARCHITECTURE.read_text(encoding="utf-8").replace("| 3 | `finlib/pipeline`", "| 2 | `finlib/pipeline`")
    assert documented_ranks(text)["pipeline"] == 2 != enforced_ranks()["pipeline"]


def stage_rows(text: str) -> dict[str, list[str]]:
    """The stage table of the architecture page: stage id -> [notebook, folder, reads, writes]."""
    return {row[0]: row[1:] for row in table_rows(text, "One folder per stage")}


def test_stage_table_is_the_stage_modules():
    """Claim: one folder per stage, `stage.py` in it, the notebook named after the stage."""
    rows = stage_rows(ARCHITECTURE.read_text(encoding="utf-8"))
    assert sorted(rows) == STAGES
    for stage, (notebook, folder, _, _) in rows.items():
        assert folder.strip("`").rstrip("/").replace("/", ".") + ".stage" == STAGE_MODULES[stage], stage
        assert notebook.strip("`") == stage_notebook(stage).stem, stage


def artifact_problems(rows: dict[str, list[str]], made_by: dict[str, str]) -> list[str]:
    """Where the stage table's reads and writes disagree with the artifact lists: a stage that reads an
    artifact of its own or a later stage, writes another stage's, or leaves one of its own unnamed."""
    problems = []
    for stage, (_, _, reads, writes) in rows.items():
        named = set(re.findall(r"`(\w+\*?)`", writes))
        for name in set(re.findall(r"`(\w+)`", reads)) & set(made_by):
            if made_by[name] >= stage:
                problems.append(f"{stage} reads `{name}` of stage {made_by[name]}")
        for name in named & set(made_by):
            if made_by[name] != stage:
                problems.append(f"{stage} writes `{name}` of stage {made_by[name]}")
        for name in (n for n, s in made_by.items() if s == stage):
            if name not in named and not any(w.endswith("*") and name.startswith(w[:-1]) for w in named):
                problems.append(f"{stage} does not name its artifact `{name}`")
    return problems


def test_each_stage_reads_earlier_stages_and_names_what_it_writes():
    """Claim: each stage reads earlier stages' artifacts from disk; the table names what each writes."""
    assert artifact_problems(stage_rows(ARCHITECTURE.read_text(encoding="utf-8")), producers()) == []


def test_the_artifact_check_sees_a_stage_reading_forward():
    rows = {"01": ["", "", "`predictions` (03)", "`labels`"], "03": ["", "", "", "`predictions`"]}
    made_by = {"labels": "01", "labels_report": "01", "predictions": "03"}
    assert artifact_problems(rows, made_by) == ["01 reads `predictions` of stage 03",
                                                "01 does not name its artifact `labels_report`"]


# ---- who imports what -------------------------------------------------------------------------

def imported_names(path: Path) -> list[tuple[str, str]]:
    """Every (module, name) a file imports, at module level or inside a function (`import m`: (m, ""))."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(a.name, "") for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found += [(node.module, a.name) for a in node.names]
    return found


def stage_imports(path: Path) -> list[str]:
    """The stage modules (or their folders' parts) a file imports."""
    folders = {m.rpartition(".")[0] for m in STAGE_MODULES.values()}
    return sorted({f"{m}.{n}".rstrip(".") for m, n in imported_names(path)
                   if m in folders or m.rpartition(".")[0] in folders})


def test_the_runner_imports_no_stage_module():
    """Claim: the runner executes the notebooks and imports no stage module (`SECTION` is read from source)."""
    assert stage_imports(ROOT / "finlib" / "pipeline" / "runner.py") == []


def private_imports(path: Path, package: str) -> list[str]:
    """`_private` names a file imports from outside `package`."""
    return [f"{m}.{n}" for m, n in imported_names(path) if m.split(".")[:2] != ["finlib", package]
            and m.startswith("finlib") and (n.startswith("_") or any(p.startswith("_") for p in m.split(".")))]


def test_the_rehearsal_imports_no_private_name_of_another_package():
    """Claim: the rehearsal reads other packages through their public names."""
    files = sorted((ROOT / "finlib" / "rehearsal").glob("*.py"))
    assert [p for f in files for p in private_imports(f, "rehearsal")] == []


def test_the_import_scans_find_planted_imports(tmp_path: Path):
    planted = tmp_path / "planted.py"
    planted.write_text("def f():\n    from finlib.pipeline.plan import _model_names\n"
                       "    from finlib.finbias.labels.stage import run\n"
                       "    from finlib.finbias.labels import market_model\n"
                       "    from finlib.rehearsal.intervals import _own\n", encoding="utf-8")
    assert private_imports(planted, "rehearsal") == ["finlib.pipeline.plan._model_names"]
    assert stage_imports(planted) == ["finlib.finbias.labels.market_model", "finlib.finbias.labels.stage.run"]


# ---- names, sections, parsers, tests ----------------------------------------------------------

def test_stage_results_are_named_after_their_stage_results():
    """Claim: every stage's `run` returns a dataclass named `<Name>Result`."""
    names = {stage: typing.get_type_hints(stage_module(stage).run)["return"].__name__ for stage in STAGES}
    assert {s: n for s, n in names.items() if not re.fullmatch(r"[A-Z][A-Za-z]*Result", n)} == {}


def test_stage_08_knobs_are_the_subsection_named_after_its_folder():
    """Claim: stage 08 reads the `bizfin` section; its own knobs are `bizfin.iterajudge`, its folder's name."""
    folder = STAGE_MODULES["08"].split(".")[-2]
    default = yaml.safe_load((ROOT / "params" / "default.yaml").read_text(encoding="utf-8"))
    assert stage_module("08").SECTION == "bizfin" and isinstance(default["bizfin"].get(folder), dict)


@pytest.mark.parametrize("parser", ["finlib/finbias/answers.py", "finlib/bizfin/scorers.py",
                                    "finlib/bizfin/iterajudge/judge.py"])
def test_parsers_read_replies_through_the_llm_layer(parser: str):
    """Claim: both papers' parsers read replies through `finlib.llm.replies`."""
    names = imported_names(ROOT / parser)
    assert any(m == "finlib.llm.replies" or (m, n) == ("finlib.llm", "replies") for m, n in names)


def test_tests_mirror_the_packages():
    """Claim: `tests/<package>` tests each package of finlib."""
    packages = {p.parent.name for p in (ROOT / "finlib").glob("*/__init__.py")}
    assert sorted(p for p in packages if not (ROOT / "tests" / p).is_dir()) == []


READERS = ("read_frame", "read_json", "existing_artifact", "artifact_path")


def code_reads(folder: Path) -> set[str]:
    """Artifacts the modules of a stage folder read by a literal name (`read_frame(cfg, "labels")`, ...)."""
    names = set()
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            fn = node.func if isinstance(node, ast.Call) else None
            name = getattr(fn, "id", None) or getattr(fn, "attr", None)
            if name in READERS and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant):
                names.add(node.args[1].value)
    return names


def undocumented_reads(stage: str, reads: set[str], cell: str, made_by: dict[str, str]) -> list[str]:
    """Artifacts a stage's code reads that are a later stage's, or an earlier stage's the table's reads
    cell names neither by name nor by a stage range (`00–02`)."""
    ranges = [(a, b) for a, b in re.findall(r"\b(\d\d)[–-](\d\d)\b", cell)]
    problems = []
    for name in sorted(reads & set(made_by)):
        by = made_by[name]
        if by > stage:
            problems.append(f"{stage} reads `{name}` of the later stage {by}")
        elif by < stage and f"`{name}`" not in cell and not any(a <= by <= b for a, b in ranges):
            problems.append(f"{stage} reads `{name}` ({by}), not in its reads cell")
    return problems


@pytest.mark.parametrize("stage", STAGES)
def test_the_reads_column_is_what_the_stage_reads(stage: str):
    """Claim: each stage reads earlier stages' artifacts from disk, the ones its row names."""
    folder = ROOT.joinpath(*STAGE_MODULES[stage].split(".")[:-1])
    cell = stage_rows(ARCHITECTURE.read_text(encoding="utf-8"))[stage][2]
    assert undocumented_reads(stage, code_reads(folder), cell, producers()) == []


def test_the_reads_check_sees_a_read_the_row_leaves_out(tmp_path: Path):
    (tmp_path / "stage.py").write_text("def run(cfg):\n    return read_frame(cfg, 'truth'), read_frame(cfg, 'x')\n",
                                       encoding="utf-8")
    made_by = {"truth": "00", "x": "02", "reports": "00"}
    assert code_reads(tmp_path) == {"truth", "x"}
    assert undocumented_reads("01", code_reads(tmp_path), "`reports` (00)", made_by) == [
        "01 reads `truth` (00), not in its reads cell", "01 reads `x` of the later stage 02"]
    assert undocumented_reads("05", {"truth", "x"}, "00–02", made_by) == []


def test_the_contract_refuses_undeclared_views():
    """Claim: `NOTEBOOK_API`, `TABLES` and `REPORT_KEYS` are part of the contract: each is a tuple of names,
    and every name of `NOTEBOOK_API` is a function of the module."""
    from finlib.core.stage import contract_problems

    mod = types.ModuleType("finlib.planted.stage")
    mod.__dict__.update(SECTION=None, run=lambda cfg: None, summary=lambda cfg, result: "", shown=lambda r: r,
                        NOTEBOOK_API=("shown", "gone"), TABLES=["table4"], REPORT_KEYS=("counts", 3))
    assert contract_problems(mod) == [
        "finlib.planted.stage.TABLES must be a tuple of names, not ['table4']",
        "finlib.planted.stage.REPORT_KEYS must be a tuple of names, not ('counts', 3)",
        "finlib.planted.stage.NOTEBOOK_API names 'gone', which is not a function of the module"]
    del mod.NOTEBOOK_API
    assert contract_problems(mod)[0] == "finlib.planted.stage: no `NOTEBOOK_API`"
