"""Comments and docs say why, in the present, and cite only what the repository holds.

Figures belong in docs/performance.md and the bench output, history in commit messages,
and a citation names a file of this repository or of Calico's source. This scans the
comments and docstrings of every Python, Go, shell and YAML file, the build files and the
Markdown docs for the patterns that mark the opposite: issue numbers, sections or example
numbers of a document kept elsewhere, seed names, and measurement notes.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CODE_DIRS = ("trio_typha", "testbed", "bench", "tests", "tools", "deploy")
HASH_COMMENTED = (".sh", ".yaml", ".yml", "")  # "" for Justfile, Containerfile, .ci/run

OUTSIDE = re.compile("|".join((
    r"\bissues?\s*#?\d+",                 # an issue tracker entry
    r"\breference\s*§",                   # a section of an outside reference
    r"(?<!\.md )§",                       # a section not of one of our docs/*.md
    r"\b(?:reference|goldens?)\s+G\d+",   # an outside document's numbered example
    r"\bshared/reference",
    r"\bseed\s+0\d\d\b",                  # the seed a session started from
    r"\bmeasured:",                       # a figure noted where the code is
)), re.IGNORECASE)


def _python_texts(src: str) -> Iterator[tuple[int, str]]:
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                yield node.body[0].lineno, doc


def _line_comments(src: str, marker: str) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(src.splitlines(), 1):
        at = line.find(marker)
        if at >= 0:
            yield number, line[at:]


def texts(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of each comment and docstring of ``path``; all of a Markdown file."""
    src = path.read_text("utf-8")
    if path.suffix == ".py":
        yield from _python_texts(src)
    elif path.suffix == ".go":
        yield from _line_comments(src, "//")
    elif path.suffix in HASH_COMMENTED:
        yield from _line_comments(src, "#")
    else:
        yield from enumerate(src.splitlines(), 1)


def _files() -> list[Path]:
    code = [p for d in CODE_DIRS for p in (ROOT / d).rglob("*")
            if p.suffix in (".py", ".go", ".sh", ".yaml", ".yml") and p.is_file()]
    build = [ROOT / "Justfile", ROOT / "Containerfile", ROOT / ".ci" / "run"]
    docs = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "tools").glob("*.md")]
    return sorted(code + build + docs)


def offences(path: Path) -> list[str]:
    return [f"{path.relative_to(ROOT)}:{line}: {m.group()!r}"
            for line, text in texts(path) for m in OUTSIDE.finditer(text)]


def test_no_comment_cites_what_the_repository_does_not_hold() -> None:
    found = [o for p in _files() for o in offences(p)]
    assert found == []


def test_the_scan_reads_every_kind_of_file() -> None:
    kinds = {p.suffix for p in _files()}
    assert {".py", ".go", ".md", ".yaml", ".sh", ""} <= kinds
    assert ROOT / "trio_typha" / "daemon.py" in _files()


@pytest.mark.parametrize(("name", "text"), [
    ("a.py", "# see issue 9's targets\nx = 1\n"),
    ("b.py", '"""Keys (reference §4.6)."""\n'),
    ("c.py", 'def f():\n    """Measured: 1,000 clients."""\n'),
    ("d.go", "package x // the golden G4 of the spec\n"),
    ("e.md", "Started from seed 000.\n"),
])
def test_each_pattern_is_caught(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text, "utf-8")
    assert [t for _, t in texts(path) if OUTSIDE.search(t)]


@pytest.mark.parametrize("text", [
    '"""The frames of docs/typha-protocol.md §2.3."""\n',
    "# the issuer of the client's certificate\n",
    "ISSUE = 'issue 9'  # a string the code uses is not a comment\n",
])
def test_what_is_allowed(tmp_path: Path, text: str) -> None:
    path = tmp_path / "ok.py"
    path.write_text(text, "utf-8")
    assert not [t for _, t in texts(path) if OUTSIDE.search(t)]
