"""The repository speaks of itself only, and the README stays a front page.

Every tracked text file is searched for words about how the code was written (tickets, work logs,
who wrote which part) instead of what it does; a reader of the repository has none of that context.
The words are assembled from pieces so that this file does not match itself.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_WORK = "ses" + "sion"
_TICKET = "iss" + "ue"
FORBIDDEN = re.compile("|".join([
    _TICKET + r" [0-9]", r"\(" + _TICKET, "the " + _TICKET, "help" + r"er [A-Z]",
    "develop" + r"ers.? workspace", r"\b" + _WORK,
]), re.IGNORECASE)  # \b: "obsession" (an MPQA lexicon entry, committed unmodified) is not the word
# Technical identifiers that contain the word in another sense: pytest's fixture scope, and the
# process-group flag that lets the llama.cpp server outlive a signal sent to its parent's group, and the
# header field of a Jupyter kernel message.
ALLOWED = ('scope="' + _WORK + '"', "start_new_" + _WORK, '"' + _WORK + '": ')
README_LIMIT = 12_000


def tracked_text_files() -> list[Path]:
    """Files git tracks (and untracked files not ignored), read as text; binaries are skipped."""
    try:
        out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"git is needed to list the repository's files: {exc}")
    files = []
    for name in out.splitlines():
        path = ROOT / name
        if path.is_file() and b"\0" not in path.read_bytes()[:8192]:
            files.append(path)
    return files


def forbidden_hits(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line that uses a forbidden word outside the allowed identifiers."""
    hits = []
    for i, line in enumerate(text.splitlines(), 1):
        cleaned = line
        for token in ALLOWED:
            cleaned = cleaned.replace(token, "")
        if FORBIDDEN.search(cleaned):
            hits.append((i, line.strip()[:160]))
    return hits


def test_forbidden_words_are_found():
    # the search must be able to fail: hand-made lines with and without the words
    assert forbidden_hits("as the " + _TICKET + " says")
    assert forbidden_hits("see (" + _TICKET + " 15)")
    assert forbidden_hits("written by help" + "er H")
    assert forbidden_hits("only in the develop" + "ers' workspace")
    assert forbidden_hits("a " + _WORK + " counted 65")
    assert not forbidden_hits('@pytest.fixture(scope="' + _WORK + '")')
    assert not forbidden_hits("an issuer's rating; tissue")
    assert not forbidden_hits("word1=ob" + _WORK + " pos1=noun")


def test_repository_speaks_of_itself_only():
    hits = [f"{p.relative_to(ROOT)}:{i}: {line}" for p in tracked_text_files()
            for i, line in forbidden_hits(p.read_text(encoding="utf-8", errors="replace"))]
    assert not hits, "words about how the repository was built:\n" + "\n".join(hits)


def test_readme_is_a_front_page_linking_every_docs_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme) <= README_LIMIT, f"README.md has {len(readme)} characters (limit {README_LIMIT})"
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert pages, "docs/ has no pages"
    missing = [name for name in pages if f"(docs/{name}" not in readme]
    assert not missing, f"README.md does not link {missing}"


def test_readme_links_to_docs_resolve():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for target in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / target).is_file(), f"README links {target}, which does not exist"
