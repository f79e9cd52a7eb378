"""docs/architecture.md's module map and README's paths match the tree."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "trio_typha"


def test_architecture_module_map_names_every_module() -> None:
    """Each module's row (its directory's, or its own) names it, or a pattern such as
    ``k8s_*.py`` that matches it."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    rows = [line for line in text[text.index("## Module map"):].splitlines()
            if line.startswith("| `")]
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name in ("__init__.py", "__main__.py"):
            continue
        rel = path.relative_to(ROOT).as_posix()
        row = next((r for r in rows if f"`{rel}`" in r), None) or next(
            (r for r in rows if f"`{path.parent.relative_to(ROOT).as_posix()}/`" in r), "")
        names = re.findall(r"`([\w*./-]+)`", row)
        if not any(fnmatch.fnmatch(path.name, n) or n == rel for n in names):
            missing.append(rel)
    assert missing == []


def test_every_path_the_docs_name_exists() -> None:
    for doc in ("README.md", "docs/architecture.md", "docs/typha-protocol.md"):
        text = (ROOT / doc).read_text()
        for path in set(re.findall(r"`((?:trio_typha|testbed|tests|bench|docs|proto)/[\w./-]*)`",
                                   text)):
            assert (ROOT / path).exists(), f"{doc} names {path}"
