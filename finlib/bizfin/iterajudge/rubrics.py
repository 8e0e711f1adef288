"""Which judge rubric a run uses: ours (each judge task record's `rubric`, `finlib.bizfin.tasks`; the published structure in
our words) or the authors' prompt files used verbatim from a local checkout of their repository
(`bizfin.rubrics_dir`).

The published prompts are read at run time from the checkout and never copied into this
repository: the templates are string assignments in their evaluation scripts, found with `ast`
(nothing of theirs is imported or executed) and filled the way their code fills them. What they
cover: the vanilla judge of FDD, FTU and FQA, and IteraJudge for FDD (two revision prompts, one per
dimension, and a judge that compares with the revised reference). FTU's published revision script
simulates the tools' responses and compares them with the gold call instead of refining per
dimension, so FTU's IteraJudge keeps our refiner and contrastive judge; the run's caption says so.
"""
from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from finlib.bizfin.iterajudge.records import calibration_tasks, iterajudge_record, published_prompts
from finlib.bizfin.prompts import (
    JUDGE_CONTRASTIVE_VERSION,
    JUDGE_REFINE_VERSION,
    JUDGE_VANILLA_VERSION,
    build_contrastive_judge_messages,
    build_refine_messages,
    build_vanilla_judge_messages,
    fill_published_template,
)
from finlib.bizfin.tasks import judge_rubric

# task -> role -> (file, variable), from each judge task's IteraJudge record (FDD's refiners in the authors'
# order, keyed by our dimension name); `published_prompts()` reads them at each run.
PUBLISHED: dict[str, dict[str, tuple[str, str]]] = published_prompts()


class RubricError(ValueError):
    """A rubrics folder that is not a checkout of the published repository (names file and variable)."""


def read_template(path: Path, name: str) -> str:
    """The string assigned to `name` in a Python file (module level or inside a function; a trailing
    `.strip()` applied), found by parsing, never by running the file."""
    if not path.is_file():
        raise RubricError(f"{path}: missing (bizfin.rubrics_dir must be a checkout of HiThink-Research/BizFinBench)")
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (SyntaxError, UnicodeDecodeError) as exc:
        raise RubricError(f"{path}: not a readable Python file ({exc})") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            value, strip = node.value, False
            if (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "strip"
                    and not value.args):
                value, strip = value.func.value, True
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                return value.value.strip() if strip else value.value
    raise RubricError(f"{path}: no string assigned to '{name}' (a different revision of the published code?)")


def load_published(root: Path) -> dict[str, dict[str, str]]:
    """Every published template this project uses, task -> role -> text."""
    return {task: {role: read_template(Path(root) / f, var) for role, (f, var) in roles.items()}
            for task, roles in published_prompts().items()}


def check_rubrics_dir(root: Path, where: str) -> None:
    """Params check: the folder exists and holds every template (an error names what is missing)."""
    if not Path(root).is_dir():
        raise RubricError(f"{where}: {root} is not a folder (a local checkout of HiThink-Research/BizFinBench)")
    load_published(root)


def _version(role: str, text: str) -> str:
    """Store-key version of a published template: its role and a hash of its text."""
    return f"bizfin-published-{role}-{hashlib.sha256(text.encode('utf-8')).hexdigest()[:12]}"


@dataclass(frozen=True)
class Rubrics:
    """The prompts of both judges for one run: ours, or the published ones where they exist."""

    root: Path | None = None
    published: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def from_dir(cls, root: Path | str | None) -> Rubrics:
        return cls() if root is None else cls(Path(root), load_published(Path(root)))

    def label(self) -> str:
        """What the captions say about the rubric (the Table 4 tasks without a published IteraJudge: ours)."""
        if self.root is None:
            return ("ours (the published per-task rubric structure in our words, finlib/bizfin/prompts.py; "
                    "JSON verdict)")
        judges = "/".join(t for t, roles in self.published.items() if "vanilla" in roles)
        refiners = "/".join(t for t, roles in self.published.items() if any(r.startswith("refine:") for r in roles))
        ours = "/".join(t for t in calibration_tasks() if "contrastive" not in self.published.get(t, {}))
        return (f"the authors' published prompt files used verbatim from {self.root} ({judges} judges, {refiners} "
                f"refiners); {ours}'s IteraJudge refiner and judge: ours")

    def mixed(self) -> dict[str, str]:
        """Tasks whose vanilla judge and IteraJudge get different rubrics (a published vanilla prompt
        without a published IteraJudge one), with why: their paired difference is not computed."""
        return {t: "the vanilla judge used the published prompt, IteraJudge ours (none is published)"
                for t, roles in self.published.items() if "vanilla" in roles and "contrastive" not in roles}

    def vanilla(self, inp, score_range: tuple[int, int]) -> tuple[list[dict[str, str]], str, str]:
        """(messages, store version, verdict format) of the vanilla judge call."""
        tpl = self.published.get(inp.task, {}).get("vanilla")
        if tpl is None:
            return (build_vanilla_judge_messages(judge_rubric(inp.task), inp.question, inp.answer, inp.dimensions, score_range,
                                                 inp.reference), JUDGE_VANILLA_VERSION, "json")
        # the fields each published data_preprocess fills, in its order
        record = iterajudge_record(inp.task)
        fields = {"question": inp.question, record.answer_field: inp.answer}
        return fill_published_template(tpl, fields), _version("vanilla", tpl), record.verdict_format

    def refine(self, inp, dimension: str, current: str) -> tuple[list[dict[str, str]], str]:
        """(messages, store version) of one refinement step."""
        tpl = self.published.get(inp.task, {}).get(f"refine:{dimension}")
        if tpl is None:
            return build_refine_messages(judge_rubric(inp.task), inp.question, current, dimension), JUDGE_REFINE_VERSION
        return fill_published_template(tpl, {"question": inp.question, "answer": current}), _version("refine", tpl)

    def contrastive(self, inp, refined: str, score_range: tuple[int, int]) -> tuple[list[dict[str, str]], str, str]:
        """(messages, store version, verdict format) of IteraJudge's judge call."""
        tpl = self.published.get(inp.task, {}).get("contrastive")
        if tpl is None:
            return (build_contrastive_judge_messages(judge_rubric(inp.task), inp.question, inp.answer, refined, inp.dimensions,
                                                     score_range), JUDGE_CONTRASTIVE_VERSION, "json")
        fields = {"question": inp.question, "answer": inp.answer, "ref_answer": refined}
        return (fill_published_template(tpl, fields), _version("contrastive", tpl),
                iterajudge_record(inp.task).verdict_format)


def dimensions_for(task: str, order: str = "published") -> tuple[str, ...]:
    """The rubric's dimensions in the order IteraJudge refines them: `published` (the authors' order:
    FDD checks the numbers before the trend) or `reversed` (to measure the order's effect)."""
    names = judge_rubric(task).names()
    if order == "published":
        return names
    if order == "reversed":
        return tuple(reversed(names))
    raise ValueError(f"bizfin.iterajudge.dimension_order: {order!r} (known: published, reversed)")


__all__ = ["Rubrics", "RubricError", "read_template", "load_published", "check_rubrics_dir", "dimensions_for",
           "PUBLISHED"]
