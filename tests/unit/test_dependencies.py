"""Every third-party module a distribution's package imports is a dependency that
distribution declares: trio_typha in pyproject.toml, the test bed (trio-typha-testbed) in
testbed/pyproject.toml.

A module that only arrives as some other package's dependency (h11 through httpx,
hyperframe through h2) can disappear in that package's next release; declaring it says we
rely on it ourselves.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Each distribution's package and the pyproject that declares it.  One's import of the
#: other counts as any third-party import: trio_typha must never import the test bed.
DISTRIBUTIONS = {"trio_typha": ROOT / "pyproject.toml",
                 "testbed": ROOT / "testbed" / "pyproject.toml"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared(pyproject: Path) -> set[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    return {_norm(re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0])
            for req in project["dependencies"]}


def _imports(package: str) -> dict[str, str]:
    """Top-level module name -> first file importing it (absolute imports only)."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                found.setdefault(name.split(".")[0], str(path.relative_to(ROOT)))
    return found


def test_every_imported_distribution_is_declared() -> None:
    dists = packages_distributions()
    missing = {}
    for package, pyproject in DISTRIBUTIONS.items():
        declared = _declared(pyproject)
        for top, where in _imports(package).items():
            if top in sys.stdlib_module_names or top == package:
                continue
            owners = {_norm(d) for d in dists.get(top, [top])}
            if not owners & declared:
                missing[top] = where
    assert missing == {}


def test_declared_markers_are_used() -> None:
    markers = tomllib.loads((ROOT / "pyproject.toml").read_text())[
        "tool"]["pytest"]["ini_options"]["markers"]
    text = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("*.py"))
    for marker in (m.split(":")[0] for m in markers):
        assert f"mark.{marker}" in text, marker
