"""A default lives in one place: no `.get(key, default)` on a params section a stage read.

`cfg.section(name)` returns a validated section in which every declared key is present
(`finlib.core.params.Section` refuses `.get(key, default)` on one at run time); a default beside
it is a second, silent declaration of what params/default.yaml writes. This check reads the source
with `ast`, so it also finds the calls no test runs, and the ones on a plain copy
(`dict(cfg.section(...))`), which the run-time refusal cannot see.

What counts as a section (within one function, or the module's top level):
- a call of `<anything>.section(...)`, and `dict(...)` or a subscript (`p["iterajudge"]`) of a section;
- a call of a finlib function that returns a section (`data_params(cfg)`: found by the same rules);
- `p.get(key)` (no default) and `p.get(key) or {}` of a section: a nested section;
- a name assigned from a section (`lp = cfg.section("labels")`, `rp, pp = d["reports"], d["prices"]`);
- a parameter of a finlib function that some call passes a section to (matched by the function's name).
Not seen: a section kept in a container or an attribute (`self.p`) and read from there.
"""
from __future__ import annotations

import ast
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class _Scope:
    """The names bound to a section in one function body (or the module's top level)."""

    def __init__(self, returning: set[str]) -> None:
        self.names: set[str] = set()
        self.returning = returning

    def is_section(self, node: ast.AST) -> bool:
        """Whether expression `node` evaluates to a params section (or a plain copy of one)."""
        if isinstance(node, ast.Name):
            return node.id in self.names
        if isinstance(node, ast.Subscript):
            return self.is_section(node.value)
        if isinstance(node, ast.BoolOp):  # `p.get("reports") or {}`
            return self.is_section(node.values[0])
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "get" and len(node.args) == 1 and not node.keywords:
                return self.is_section(func.value)  # `p.get("mackinlay")`: a nested section
            if isinstance(func, ast.Attribute) and func.attr == "section":
                return True
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name == "dict" and len(node.args) == 1:
                return self.is_section(node.args[0])
            return name in self.returning
        return False

    def bind(self, body: list[ast.AST]) -> None:
        """Add the names assigned from a section, until no more are found (chains of assignments)."""
        assigns = [n for stmt in body for n in ast.walk(stmt) if isinstance(n, (ast.Assign, ast.AnnAssign))]
        while True:
            before = len(self.names)
            for node in assigns:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    self._bind_target(target, node.value)
            if len(self.names) == before:
                return

    def _bind_target(self, target: ast.AST, value: ast.AST | None) -> None:
        if value is None:
            return
        if isinstance(target, ast.Name) and self.is_section(value):
            self.names.add(target.id)
        elif isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
            for t, v in zip(target.elts, value.elts):
                self._bind_target(t, v)


_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _scopes(tree: ast.AST) -> list[tuple[str, list[str], list[ast.AST]]]:
    """(function name, its parameter names, its body) for every function of `tree`, and ("", [], the
    module's own statements)."""
    out = []
    for func in (n for n in ast.walk(tree) if isinstance(n, _FUNCS)):
        a = func.args
        out.append((func.name, [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)], func.body))
    top = [s for s in getattr(tree, "body", []) if not isinstance(s, (*_FUNCS, ast.ClassDef))]
    return [*out, ("", [], top)]


def _called_name(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


class Flow:
    """Which functions return a section and which parameters receive one, found over all modules
    together to a fixed point (functions are matched by name, so a name shared by two functions
    marks both: the check errs on the side of reading more places as sections)."""

    def __init__(self, trees: list[ast.AST]) -> None:
        self.returning: set[str] = set()
        self.params: dict[str, set[str]] = {}
        self.signatures = {n.name: [x.arg for x in (*n.args.posonlyargs, *n.args.args)]
                           for tree in trees for n in ast.walk(tree) if isinstance(n, _FUNCS)}
        while True:
            before = (len(self.returning), sum(map(len, self.params.values())))
            for tree in trees:
                for name, params, body in _scopes(tree):
                    self._visit(name, params, body)
            if (len(self.returning), sum(map(len, self.params.values()))) == before:
                return

    def scope(self, name: str, params: list[str], body: list[ast.AST]) -> _Scope:
        """The section names of one body: its parameters that receive a section, then its assignments."""
        scope = _Scope(self.returning)
        scope.names |= self.params.get(name, set()) & set(params)
        scope.bind(body)
        return scope

    def _visit(self, name: str, params: list[str], body: list[ast.AST]) -> None:
        scope = self.scope(name, params, body)
        nodes = [n for stmt in body for n in ast.walk(stmt)]
        if name and any(isinstance(r, ast.Return) and r.value is not None and scope.is_section(r.value)
                        for r in nodes):
            self.returning.add(name)
        for call in (n for n in nodes if isinstance(n, ast.Call)):
            callee = _called_name(call)
            signature = self.signatures.get(callee, [])
            offset = 1 if signature[:1] in (["self"], ["cls"]) and isinstance(call.func, ast.Attribute) else 0
            for i, arg in enumerate(call.args):
                if i + offset < len(signature) and scope.is_section(arg):
                    self.params.setdefault(callee, set()).add(signature[i + offset])
            for kw in call.keywords:
                if kw.arg and scope.is_section(kw.value):
                    self.params.setdefault(callee, set()).add(kw.arg)


def defaulted_section_reads(tree: ast.AST, flow: Flow) -> list[str]:
    """`line: <receiver>.get('key', <default>)` for every such call on a section in `tree`."""
    out = []
    for name, params, body in _scopes(tree):
        scope = flow.scope(name, params, body)
        for node in (n for stmt in body for n in ast.walk(stmt)):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"):
                continue
            defaulted = len(node.args) == 2 or any(k.arg == "default" for k in node.keywords)
            keyed = node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
            if defaulted and keyed and scope.is_section(node.func.value):
                out.append(f"{node.lineno}: {ast.unparse(node)}")
    return sorted(set(out), key=lambda s: (int(s.split(":")[0]), s))


def _finlib_trees() -> dict[str, ast.AST]:
    return {str(p.relative_to(ROOT)): ast.parse(p.read_text(encoding="utf-8"))
            for p in sorted((ROOT / "finlib").rglob("*.py"))}


def _notebook_trees() -> dict[str, ast.AST]:
    """Each notebook's code cells as one module (cells with IPython syntax are left out)."""
    out = {}
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = []
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            source = "".join(cell["source"]) if cell["cell_type"] == "code" else ""
            try:
                cells.append(ast.parse(source))
            except SyntaxError:
                continue
        out[str(path.relative_to(ROOT))] = ast.Module(body=[s for c in cells for s in c.body], type_ignores=[])
    return out


PLANTED = '''
def labels_params(cfg):
    return cfg.section("labels")

def window(cfg):
    lp = cfg.section("labels")
    return lp.get("window", 60)

def chained(cfg):
    mk = labels_params(cfg)["mackinlay"]
    return mk.get("gap", 30)

def copied(cfg):
    inf = dict(cfg.section("inference"))
    return inf.get("progress", True), cfg.section("plan").get("corpus_reports", 0)

def free(records, cfg):
    lp = cfg.section("labels")
    mk = lp.get("mackinlay") or {}
    mk.get("min_obs", 120)
    return records.get("window", 60), lp.get("window"), lp["window"], passed(cfg, lp)

def passed(cfg, labels):
    return labels.get("quantiles", [0.3, 0.7])
'''


def test_the_check_finds_a_planted_default_on_a_section():
    tree = ast.parse(PLANTED)
    found = defaulted_section_reads(tree, Flow([tree]))
    assert found == ["7: lp.get('window', 60)", "11: mk.get('gap', 30)", "15: cfg.section('plan').get('corpus_reports', 0)",
                     "15: inf.get('progress', True)", "20: mk.get('min_obs', 120)", "24: labels.get('quantiles', [0.3, 0.7])"]


def test_no_stage_reads_a_section_key_with_a_default_of_its_own():
    trees = {**_finlib_trees(), **_notebook_trees()}
    flow = Flow(list(trees.values()))
    assert {"data_params", "plan_params"} <= flow.returning  # the helpers the stages read their sections through
    found = {path: calls for path, tree in trees.items() if (calls := defaulted_section_reads(tree, flow))}
    assert not found, ("a default beside a declared params key (the schema requires every key; its default is "
                       f"the one in params/default.yaml): read section[key] instead: {found}")


# ---- the synthetic market's knobs: declared once (finlib.core.params.SyntheticSection) ----------------

def knob_declarations(tree: ast.AST, knobs: set[str], least: int = 4) -> list[str]:
    """`line: what` for every class body, dict literal or `dict(...)` call naming `least` or more of `knobs`:
    a second declaration of the section (a dataclass of the knobs, a dict of their defaults)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            names = {t.id for s in node.body for t in ([s.target] if isinstance(s, ast.AnnAssign) else
                                                        s.targets if isinstance(s, ast.Assign) else [])
                     if isinstance(t, ast.Name)}
            what = f"class {node.name}"
        elif isinstance(node, ast.Dict):
            names = {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
            what = "a dict"
        elif isinstance(node, ast.Call) and _called_name(node) == "dict":
            names = {k.arg for k in node.keywords if k.arg}
            what = "dict(...)"
        else:
            continue
        if len(names & knobs) >= least:
            out.append(f"{node.lineno}: {what} names {sorted(names & knobs)}")
    return out


def _synthetic_knobs() -> set[str]:
    from finlib.core.params import SyntheticSection

    return set(SyntheticSection.model_fields)


def test_the_check_finds_a_planted_second_declaration_of_the_synthetic_knobs():
    planted = ("from dataclasses import dataclass\n\n@dataclass\nclass Knobs:\n    n_reports: int = 60\n"
               "    n_firms: int = 40\n    words_min: int = 400\n    words_max: int = 600\n\n"
               "DEFAULTS = {'n_reports': 60, 'n_firms': 40, 'market_vol': 0.011, 'layout': 'prose'}\n"
               "PARTIAL = {'n_reports': 60, 'n_firms': 40}\n")
    assert knob_declarations(ast.parse(planted), _synthetic_knobs()) == [
        "4: class Knobs names ['n_firms', 'n_reports', 'words_max', 'words_min']",
        "10: a dict names ['layout', 'market_vol', 'n_firms', 'n_reports']"]


def test_the_synthetic_section_is_declared_once():
    """The generator's knobs are the schema's `data.synthetic` model (SynthParams is that model) and their
    defaults are params/default.yaml's: no other class or dict in finlib lists them."""
    knobs = _synthetic_knobs()
    found = {path: hits for path, tree in _finlib_trees().items()
             if (hits := [h for h in knob_declarations(tree, knobs) if path != "finlib/core/params.py"
                          or "SyntheticSection" not in h])}
    assert not found, f"a second declaration of data.synthetic's knobs (declare them in SyntheticSection only): {found}"
