"""BizFinBench items from the published JSONL format: a local folder, the Hugging Face dataset,
or the format samples shipped here.

Published format (one JSON object per line): `messages` = list of {role, content}, content a
list of parts {"type": "text", "text": ...} (a plain string is accepted too); `choices[0]
.message.content[0].text` is the gold answer (empty for judge-scored tasks). Every line is
validated; a bad one is an error naming the file, the line and the field, never skipped.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import pandas as pd

from finlib.bizfin.tasks import TASKS, task_info
from finlib.core.tables import paper_table

HF_DATASET = "HiThink-Research/BizFinBench"
ROLES = ("system", "user", "assistant")


class BizFinDataError(ValueError):
    """A BizFinBench file that does not follow the published format."""


@dataclass(frozen=True)
class BizFinItem:
    """One benchmark item: the messages exactly as published (text parts joined) and the gold text."""

    task: str
    id: str
    line: int
    messages: tuple[tuple[str, str], ...]     # (role, text)
    gold: str
    source: str                               # "benchmark" | "format_sample"
    path: str = field(default="", compare=False)

    @property
    def question(self) -> str:
        """The last user turn: what the judge is shown as the question."""
        return next(text for role, text in reversed(self.messages) if role == "user")

    def chat_messages(self, supports_system: bool = True) -> list[dict[str, str]]:
        """Messages for the engine. Empty system turns (the published FQA/FNER files carry
        `{"role": "system", "text": ""}`) are dropped: they say nothing and some servers refuse
        them. For models without a system role a system text is prepended to the next user turn."""
        out: list[dict[str, str]] = []
        pending = ""
        for r, t in self.messages:
            if r == "system":
                if t.strip():
                    if supports_system:
                        out.append({"role": "system", "content": t})
                    else:
                        pending += t + "\n\n"
                continue
            out.append({"role": r, "content": (pending + t) if r == "user" else t})
            if r == "user":
                pending = ""
        return out

    def query_text(self) -> str:
        """All non-empty message texts joined: what Table 6 measures as the query."""
        return "\n".join(t for _, t in self.messages if t.strip())


def _fail(path: Path | str, line: int, fld: str, msg: str) -> BizFinDataError:
    return BizFinDataError(f"{path}, line {line}, field '{fld}': {msg}")


def _text_of(content, path, line: int, fld: str) -> str:
    """Join the text parts of one message content (list of parts or a plain string)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _fail(path, line, fld, f"expected a list of parts or a string, got {type(content).__name__}")
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict):
            raise _fail(path, line, f"{fld}[{j}]", "expected an object with 'type' and 'text'")
        if part.get("type", "text") != "text":
            raise _fail(path, line, f"{fld}[{j}].type", f"only text parts are supported, got {part.get('type')!r}")
        if not isinstance(part.get("text"), str):
            raise _fail(path, line, f"{fld}[{j}].text", "missing or not a string")
        texts.append(part["text"])
    return "".join(texts)


CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # never in a prompt (newline, tab, CR kept)


class TaskItems(list):
    """A task file's items, with what reading them set aside (counted, shown in the stage report):
    `duplicates` -- (line, line of its first copy) of each line identical to an earlier one, asked
    and scored once; `control_cleaned` -- items whose text held control characters (removed, as
    stage 00 does for Fin-Bias reports)."""

    duplicates: list[tuple[int, int]]
    control_cleaned: int

    def __init__(self, items=(), duplicates=None, control_cleaned: int = 0):
        super().__init__(items)
        self.duplicates = list(duplicates or [])
        self.control_cleaned = control_cleaned


def _without_control(rec):
    """The record with control characters removed from every string (and whether any was)."""
    if isinstance(rec, str):
        clean = CONTROL.sub("", rec)
        return clean, clean != rec
    if isinstance(rec, list):
        pairs = [_without_control(v) for v in rec]
        return [v for v, _ in pairs], any(c for _, c in pairs)
    if isinstance(rec, dict):
        pairs = {k: _without_control(v) for k, v in rec.items()}
        return {k: v for k, (v, _) in pairs.items()}, any(c for _, c in pairs.values())
    return rec, False


def parse_record(rec, task: str, line: int, path: Path | str, source: str) -> BizFinItem:
    """Validate one decoded line and turn it into an item (errors name file, line and field)."""
    if not isinstance(rec, dict):
        raise _fail(path, line, "<line>", "expected a JSON object")
    msgs = rec.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise _fail(path, line, "messages", "missing or empty list")
    messages = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise _fail(path, line, f"messages[{i}]", "expected an object")
        if m.get("role") not in ROLES:
            raise _fail(path, line, f"messages[{i}].role", f"expected one of {ROLES}, got {m.get('role')!r}")
        messages.append((m["role"], _text_of(m.get("content"), path, line, f"messages[{i}].content")))
    if messages[-1][0] != "user" or not messages[-1][1].strip():
        raise _fail(path, line, f"messages[{len(msgs) - 1}]", "the last message must be a non-empty user turn")
    choices = rec.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _fail(path, line, "choices", "missing or empty list")
    msg = choices[0].get("message")
    if not isinstance(msg, dict):
        raise _fail(path, line, "choices[0].message", "missing")
    gold = _text_of(msg.get("content", ""), path, line, "choices[0].message.content")
    if task_info(task).kind == "accuracy" and not gold.strip():
        raise _fail(path, line, "choices[0].message.content", f"{task} is scored against a gold answer, which is empty")
    check = task_info(task).gold_check
    if check is not None:
        try:
            check(gold)
        except (ValueError, TypeError, AttributeError) as exc:
            raise _fail(path, line, "choices[0].message.content", f"{task} gold answer unreadable ({exc})") from None
    return BizFinItem(task=task, id=f"{task}-{source[0]}{line:05d}", line=line, messages=tuple(messages),
                      gold=gold.strip(), source=source, path=str(path))


def read_jsonl(path: Path | str, task: str, source: str = "benchmark", text: str | None = None) -> list[BizFinItem]:
    """All items of one task file (`text` given: parse it instead of reading `path`)."""
    task_info(task)
    body = _read_utf8(Path(path)) if text is None else text
    items, first_line, duplicates, cleaned = [], {}, [], 0
    for n, rec in _records(body, path):
        key = json.dumps(rec, sort_keys=True, ensure_ascii=False)
        if key in first_line:  # the same item again: asked and scored once, the copy counted
            duplicates.append((n, first_line[key]))
            continue
        first_line[key] = n
        rec, changed = _without_control(rec)
        cleaned += changed
        items.append(parse_record(rec, task, n, path, source))
    items = TaskItems(items, duplicates, cleaned)
    if not items:
        raise BizFinDataError(f"{path}: no items (the file is empty or holds only blank lines); a {task} task "
                              f"file holds one JSON object per line")
    return items


def _records(body: str, path: Path | str):
    """(line, decoded object) of a JSONL body -- or of a JSON array (a task file saved as `.json`)."""
    if str(path).lower().endswith(".json") and body.lstrip().startswith("["):
        try:
            records = json.loads(body)
        except json.JSONDecodeError as exc:
            raise _fail(path, exc.lineno, "<file>", f"not a valid JSON array ({exc.msg} at column {exc.colno})") from None
        yield from ((i, rec) for i, rec in enumerate(records, 1))  # "line" = the record's position
        return
    for n, raw in enumerate(file_lines(body), 1):
        if not raw.strip():
            continue
        try:
            yield n, json.loads(raw)
        except json.JSONDecodeError as exc:
            raise _fail(path, n, "<line>", f"not valid JSON ({exc.msg} at column {exc.colno})") from None


def file_lines(body: str) -> list[str]:
    """The lines of a JSONL body as the authors read their task files (iterating a file opened in text
    mode): a line ends at \\n, \\r\\n or \\r only. `str.splitlines` also splits at U+2028, U+2029 and U+0085,
    which JSON allows raw inside a string (a record holding one is one line), and at \\v, \\f and \\x1c-\\x1e."""
    return body.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _read_utf8(path: Path) -> str:
    """The file's text; bytes that are not UTF-8 are an error naming the file and the line."""
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise BizFinDataError(f"{path}, line {line}: not UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
                              f"the published files are UTF-8 JSONL") from None


def load_local(folder: Path | str, tasks: list[str]) -> dict[str, list[BizFinItem]]:
    """Items of every task whose published file `<folder>/<File_Stem>.jsonl` exists (absent tasks
    are simply not in the result: the caller reports them)."""
    folder = Path(folder)
    out = {}
    for t in tasks:
        p = task_file(folder, task_info(t).file_stem)
        if p is not None:
            out[t] = read_jsonl(p, t)
    return out


def task_file(folder: Path, stem: str) -> Path | None:
    """`<folder>/<stem>.jsonl`, else the one file named like it in another case or as `.json`
    (`financial_data_description.json`); two such files are an error naming both, never a guess."""
    exact = folder / f"{stem}.jsonl"
    if exact.is_file():
        return exact
    wanted = {f"{stem}.jsonl".lower(), f"{stem}.json".lower()}
    found = sorted(p for p in folder.iterdir() if p.is_file() and p.name.lower() in wanted)
    if len(found) > 1:
        raise BizFinDataError(f"{folder}: {len(found)} files could be the {stem} task file "
                              f"({', '.join(p.name for p in found)}); keep one, named {stem}.jsonl")
    return found[0] if found else None


def load_huggingface(tasks: list[str], repo: str = HF_DATASET, revision: str | None = None) -> dict[str, list[BizFinItem]]:
    """Download the published files (`<Stem>/<Stem>.jsonl` in the dataset repo) and validate them
    with the same reader. Offline this fails at once with what to do instead."""
    try:
        from huggingface_hub import hf_hub_download
    except ImportError as exc:  # pragma: no cover - huggingface_hub comes with datasets/transformers
        raise RuntimeError("bizfin.source: huggingface needs the package huggingface_hub") from exc
    out = {}
    for t in tasks:
        stem = task_info(t).file_stem
        try:
            path = hf_hub_download(repo, f"{stem}/{stem}.jsonl", repo_type="dataset", revision=revision)
        except Exception as exc:  # noqa: BLE001 - any hub failure gets the same actionable message
            raise RuntimeError(
                f"could not fetch {repo} file {stem}/{stem}.jsonl from the Hugging Face Hub ({type(exc).__name__}: "
                f"{exc}). Offline? Download the dataset once where you have network, put the JSONL files in a "
                f"folder and set bizfin.source: local with bizfin.data_dir pointing at it.") from None
        out[t] = read_jsonl(path, t)
    return out


def load_format_samples(tasks: list[str]) -> dict[str, list[BizFinItem]]:
    """The few items per task written for this repository in the published format (Chinese): the file
    its record names (`samples`), else the package's `format_samples/sample_<abbrev>.jsonl`. They test the
    pipeline; they are a format sample, not the benchmark."""
    out = {}
    root = resources.files("finlib.bizfin") / "format_samples"
    for t in tasks:
        declared = task_info(t).samples
        if declared is not None:
            if Path(declared).is_file():
                out[t] = read_jsonl(declared, t, source="format_sample")
            continue
        ref = root / f"sample_{t}.jsonl"  # by abbreviation: never named like the published files
        if ref.is_file():
            out[t] = read_jsonl(f"finlib/bizfin/format_samples/{ref.name}", t, source="format_sample",
                                text=ref.read_text(encoding="utf-8"))
    return out


def check_counts(items: dict[str, list[BizFinItem]]) -> pd.DataFrame:
    """Items per task vs the paper (Table 2 "Numbers" and Table 6 "Count"): only meaningful for
    full benchmark files, so format samples are marked as such."""
    t2 = paper_table("bizfin_table2").set_index("abbrev")["numbers"]
    t6 = paper_table("bizfin_table6").set_index("dataset")["count"]
    rows = []
    for t, its in items.items():
        info = TASKS[t]
        n, dups = len(its), len(getattr(its, "duplicates", []))
        source = its[0].source if its else "none"
        if not info.paper:  # a declared task the paper does not print: no count to match
            paper2 = paper6 = None
        else:
            paper2, paper6 = int(t2[t]), int(t6[info.table6_name])
        rows.append({"task": t, "source": source, "items": n, "duplicate_lines_excluded": dups,
                     "control_characters_removed": int(getattr(its, "control_cleaned", 0)),
                     "table2": paper2, "table6": paper6,
                     "matches_paper": bool(source == "benchmark" and n + dups in (paper2, paper6))})
    return pd.DataFrame(rows, columns=["task", "source", "items", "duplicate_lines_excluded",
                                       "control_characters_removed", "table2", "table6", "matches_paper"])
