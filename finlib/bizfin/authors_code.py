"""Run the authors' published BizFinBench evaluation scripts verbatim from a local checkout.

`bizfin.official_code_dir` names a checkout of HiThink-Research/BizFinBench (nothing of it is copied
into this repository). Each scorer is imported from that folder (its own `utils` package first on
`sys.path`) and called the way the authors' `post_eval.py` calls it: `evaluation(path)` on a JSONL of
records carrying the gold in `choices` and the reply in `predict_result`. Per-item scores are read
from what the script writes back (`score`, `eval_result`, FNER's `output.jsonl`); the judge scripts'
`data_preprocess` writes the judge prompts, and their `evaluation` reads the judge's replies.

Two stand-ins make the scripts importable offline, each used only when the real module is absent:
`chardet` (eval_AEA.py detects the encoding of the file we wrote, which is UTF-8) and
`tools.ExternalApi.GPT4OClient` (unpublished; imported by the FTU and IteraJudge scripts), whose
`texts2texts` routes every call through a callable the caller sets (this project's engine and
response store).

A script that raises on a batch is rerun one record at a time, so the items it raises on are named
(`None` score with the error) and every other item keeps its score.
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import math
import re
import subprocess
import sys
import tempfile
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from finlib.bizfin.tasks import TASKS

_CODE = Path("benchmark_code") / "BizFinBench"
_README_COMMIT = re.compile(r"commit\s+`?([0-9a-f]{7,40})`?", re.IGNORECASE)


class AuthorsCodeError(RuntimeError):
    """The folder is not a usable checkout of the published evaluation code (names what is missing)."""


@dataclass(frozen=True)
class ScriptScore:
    """One item under the authors' script: score in 0..1 (None: outside its N or the script raised)."""

    score: float | None
    error: str = ""
    n: int = 1      # times the script counts the item in its N (the FDD script counts some verdicts twice)


def checkout_commit(root: Path) -> str:
    """The checkout's commit as `git` reports it; for a copy that is not a git checkout, the commit its
    README states; else an error (a caption never names an unchecked revision)."""
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel", "HEAD"], capture_output=True,
                             text=True, timeout=20, check=False)
        lines = out.stdout.split()
        # only the checkout's own repository counts, never one that merely contains the folder
        if out.returncode == 0 and len(lines) == 2 and Path(lines[0]).resolve() == Path(root).resolve() \
                and re.fullmatch(r"[0-9a-f]{40}", lines[1]):
            return lines[1]
    except (OSError, subprocess.SubprocessError):
        pass
    readme = root / "README.md"
    m = _README_COMMIT.search(readme.read_text(encoding="utf-8")) if readme.is_file() else None
    if m:
        return f"{m.group(1)} (stated by {readme.name}; not a git checkout)"
    raise AuthorsCodeError(f"{root}: neither a git checkout nor a README stating its commit")


def prompt_text(item: Any) -> str:
    """The prompt of one GPT4OClient request: the scripts pass their upload template (the text under
    `query` and in the user message), or a plain string."""
    if isinstance(item, str):
        return item
    if isinstance(item, dict):
        if isinstance(item.get("query"), str) and item["query"]:
            return item["query"]
        try:
            return item["messages"][0]["content"][0]["text"]
        except (KeyError, IndexError, TypeError):
            pass
    return json.dumps(item, ensure_ascii=False)


def engine_judge(spec, store, *, max_new_tokens: int, version: str, budget=None, sampling: dict | None = None,
                 log_dir=None) -> Callable[[list[str]], list[str]]:
    """The stand-in GPT4OClient's route: each prompt sent as one user turn through this project's engine
    (response store: cached, resumable, cost-counted); a call that failed returns "" (the scripts then
    see an empty reply, as they would an empty API answer) and stays counted in the store."""
    from finlib.llm.engine import ChatItem, chat

    def send(prompts: list[str]) -> list[str]:
        items = [ChatItem(f"published-{i}", [{"role": "user", "content": p}], version) for i, p in enumerate(prompts)]
        rows = chat(spec, items, store, max_new_tokens=max_new_tokens, budget=budget, sampling=sampling,
                    progress=False, log_dir=log_dir)
        return [t if s == "ok" and isinstance(t, str) else "" for s, t in zip(rows["status"], rows["raw_text"])]
    return send


def _stub_modules(judge: Callable[[list[str]], list[str]] | None) -> dict[str, types.ModuleType]:
    """The stand-in modules for what the checkout imports but does not ship (only where absent)."""
    mods: dict[str, types.ModuleType] = {}
    if importlib.util.find_spec("chardet") is None:
        chardet = types.ModuleType("chardet")
        chardet.detect = lambda raw: {"encoding": "utf-8", "confidence": 1.0, "language": ""}
        mods["chardet"] = chardet

    class GPT4OClient:
        """Stand-in for the unpublished client: every prompt goes through this project's judge engine."""

        async def texts2texts(self, prompts: list, *args: Any, **kwargs: Any) -> list[str]:
            if judge is None:
                raise AuthorsCodeError("a published script called GPT4OClient, but no judge engine was given")
            return judge([prompt_text(p) for p in prompts])

    tools, api = types.ModuleType("tools"), types.ModuleType("tools.ExternalApi")
    api.GPT4OClient = GPT4OClient
    tools.ExternalApi = api
    tools.__path__ = []
    mods["tools"], mods["tools.ExternalApi"] = tools, api
    return mods


class AuthorsCode:
    """A checkout of the published code, its scripts importable in this process."""

    def __init__(self, root: Path | str, judge: Callable[[list[str]], list[str]] | None = None):
        self.root = Path(root).resolve()
        missing = [t.script for t in TASKS.values() if t.script and not (self.root / _CODE / t.script).is_file()]
        if missing or not (self.root / "utils" / "JsonPaser.py").is_file():
            raise AuthorsCodeError(f"{self.root}: not a checkout of the published BizFinBench evaluation code "
                                   f"(missing {', '.join(missing) or 'utils/JsonPaser.py'})")
        self.commit = checkout_commit(self.root)
        self.judge = judge
        self._modules: dict[str, types.ModuleType] = {}

    @contextlib.contextmanager
    def _imports(self):
        """The checkout first on sys.path (its `utils`), the stand-ins in sys.modules; restored after."""
        saved_path, saved_mods = list(sys.path), {k: sys.modules.get(k) for k in ("utils", "utils.JsonPaser")}
        stubs = {k: v for k, v in _stub_modules(self.judge).items() if k not in sys.modules or k.startswith("tools")}
        before = {k: sys.modules.get(k) for k in stubs}
        sys.path.insert(0, str(self.root))
        for k in ("utils", "utils.JsonPaser"):
            sys.modules.pop(k, None)
        sys.modules.update(stubs)
        try:
            yield
        finally:
            sys.path[:] = saved_path
            for k, v in {**saved_mods, **before}.items():
                if v is None:
                    sys.modules.pop(k, None)
                else:
                    sys.modules[k] = v

    def module(self, script: str) -> types.ModuleType:
        """The script imported (once) from the checkout, under a private name."""
        if script not in self._modules:
            path = self.root / _CODE / script
            spec = importlib.util.spec_from_file_location(f"_bizfin_published_{path.stem}", path)
            mod = importlib.util.module_from_spec(spec)
            with self._imports(), contextlib.redirect_stdout(io.StringIO()):
                spec.loader.exec_module(mod)
            self._modules[script] = mod
        return self._modules[script]

    def _evaluate(self, script: str, path: Path) -> dict:
        """`evaluation(path)` with the script's prints swallowed (they print per line)."""
        mod = self.module(script)
        with self._imports(), contextlib.redirect_stdout(io.StringIO()):
            return mod.evaluation(str(path))

    # ---------------------------------------------------------------- rule-scored tasks

    def score_rules(self, task: str, golds: list[str], replies: list[str],
                    script: str | None = None) -> list[ScriptScore]:
        """Per-item scores of one task's replies under its published script (batched; a batch the
        script raises on is rescored item by item)."""
        script = script or TASKS[task].script
        records = [_record(g, r) for g, r in zip(golds, replies, strict=True)]
        try:
            return self._score_batch(script, records)
        except Exception:  # noqa: BLE001 - find the records it raises on
            return [self._score_one(script, rec) for rec in records]

    def _score_one(self, script: str, rec: dict) -> ScriptScore:
        try:
            return self._score_batch(script, [rec])[0]
        except Exception as exc:  # noqa: BLE001
            return ScriptScore(None, f"{script} raises {type(exc).__name__}: {str(exc)[:200]}")

    def _score_batch(self, script: str, records: list[dict]) -> list[ScriptScore]:
        with tempfile.TemporaryDirectory(prefix="bizfin-official-") as tmp:
            path = Path(tmp) / "items.jsonl"
            _write_jsonl(path, records)
            acc = self._evaluate(script, path)
            if script == "eval_fin_ner.py":
                out = [ScriptScore(float(r["evalresult"]["score"])) for r in _read_jsonl(Path(tmp) / "output.jsonl")]
            else:
                out = [_row_score(script, r) for r in _read_jsonl(path)]
        _check_mean(script, acc, out)
        return out

    # ---------------------------------------------------------------- judge-scored tasks

    def judge_prompts(self, task: str, queries: list[str], replies: list[str]) -> list[str]:
        """The judge prompt of every reply as the script's `data_preprocess` writes it."""
        rows = self._preprocessed(TASKS[task].script, queries, replies)
        return [r.get("instruction") or r["query"] for r in rows]

    def iterajudge_prompts(self, queries: list[str], replies: list[str]) -> list[str]:
        """FDD's published IteraJudge: `eval_financial_description_revise.data_preprocess` revises every
        reply twice through GPT4OClient (this object's `judge` route) and writes the final judge
        instructions, returned here."""
        return [r["query"] for r in self._preprocessed("eval_financial_description_revise.py", queries, replies)]

    def _preprocessed(self, script: str, queries: list[str], replies: list[str]) -> list[dict]:
        """The rows a script's `data_preprocess` writes for (query, reply) pairs, read back from its folder."""
        mod = self.module(script)
        with tempfile.TemporaryDirectory(prefix="bizfin-official-") as tmp:
            _write_jsonl(Path(tmp) / "answers.jsonl", [{"query": q, "predict_result": r}
                                                       for q, r in zip(queries, replies, strict=True)])
            with self._imports(), contextlib.redirect_stdout(io.StringIO()):
                mod.data_preprocess(tmp, "answers.jsonl", save_dir="step1")
            return _read_jsonl(Path(tmp) / "step1" / "answers.jsonl")

    def score_verdicts(self, task: str, verdicts: list[str]) -> list[ScriptScore]:
        """Per-item judge scores (0..1) and N counts as the script's `evaluation` reads the judge's replies:
        each verdict scored alone (the scripts keep no per-line score), then the whole batch run once and
        its mean required to equal the per-item scores weighted by their N counts."""
        out = [self._one_verdict(task, v) for v in verdicts]
        if verdicts:
            _check_verdict_mean(task, self._verdict_acc(task, verdicts), out)
        return out

    def _verdict_acc(self, task: str, verdicts: list[str]) -> float:
        """The script's `acc` on these verdicts (one JSONL line each)."""
        with tempfile.TemporaryDirectory(prefix="bizfin-official-") as tmp:
            path = Path(tmp) / "verdicts.jsonl"
            _write_jsonl(path, [{"predict_result": v} for v in verdicts])
            return float(self._evaluate(TASKS[task].script, path)["acc"])

    def _one_verdict(self, task: str, verdict: str) -> ScriptScore:
        """One verdict's score; for a verdict scored 0 by a task whose record gives a full-mark verdict (FDD),
        its N count measured by running it beside that verdict: acc = (0 + 100) / (n + 1) / 100."""
        s = _verdict_score(task, self._verdict_acc(task, [verdict]), verdict)
        full_mark = TASKS[task].full_mark_verdict
        if full_mark is not None and s.score == 0:
            both = self._verdict_acc(task, [verdict, full_mark])
            return ScriptScore(s.score, s.error, round(1 / both) - 1)
        return s


def _check_verdict_mean(task: str, batch_acc: float, scores: list[ScriptScore]) -> None:
    """The batch mean of a judge script must equal the per-item scores weighted by their N counts
    (else a per-item reading, or an N count, differs from the script's own)."""
    kept = [s for s in scores if s.score is not None]
    n = sum(s.n for s in kept)
    mean = sum(s.score * s.n for s in kept) / n if n else 0.0
    want = batch_acc / TASKS[task].script_scale
    if not math.isclose(mean, want, rel_tol=1e-9, abs_tol=1e-9):
        raise AuthorsCodeError(f"{TASKS[task].script}: per-item verdict scores weighted by their N average {mean!r}, the "
                               f"script's batch mean is {want!r}")


def _verdict_score(task: str, acc: float, verdict: str) -> ScriptScore:
    """One verdict's score from a one-line run, on the record's `script_scale` (FTU's mean is on 0-100); a
    task whose zero verdict leaves N (FQA) leaves a total <= 0 or an unreadable verdict out of N (a one-line
    run then reports 0)."""
    record = TASKS[task]
    if record.zero_verdict_outside_n and acc <= 0:
        return ScriptScore(None, f"outside N under {record.script} (no total above 0)", 0)
    return ScriptScore(acc / record.script_scale)


def _record(gold: str, reply: str) -> dict:
    return {"messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": [{"type": "text", "text": gold}]}}],
            "predict_result": reply}


def _row_score(script: str, row: dict) -> ScriptScore:
    """The per-record result a script writes back: `score`, or ER's True/False; SP leaves a record
    whose reading raised out of N (its eval_result carries the error)."""
    res = row.get("eval_result") or {}
    if script == "eval_financial_sentiment.py":
        return ScriptScore(1.0 if res.get("result") == "True" else 0.0)
    if script == "eval_stock_prediction.py" and "error" in res:
        return ScriptScore(None, f"outside N under {script}: {res['error'][:200]}")
    return ScriptScore(float(row["score"]))


def _check_mean(script: str, acc: dict, scores: list[ScriptScore]) -> None:
    """The per-item scores read back must reproduce the script's own mean (else the reading is wrong)."""
    vals = [s.score for s in scores if s.score is not None]
    mean = sum(vals) / len(vals) if vals else 0.0
    if not math.isclose(mean, float(acc["acc"]), rel_tol=1e-9, abs_tol=1e-9):
        raise AuthorsCodeError(f"{script}: per-item scores read back average {mean!r}, the script reports "
                               f"{acc['acc']!r}")


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]


__all__ = ["AuthorsCode", "AuthorsCodeError", "ScriptScore", "checkout_commit", "engine_judge", "prompt_text"]
