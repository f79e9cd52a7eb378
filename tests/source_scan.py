"""What a module of trio_typha/ imports and touches, read from its syntax tree.

Every import counts wherever it stands (module level, inside a function, under
``TYPE_CHECKING``), so a dependency cannot hide in a function body.  Used by the purity
probe (tests/unit/test_purity.py) and the client-edge check (tests/unit/test_client_edges.py).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import trio_typha

PACKAGE_ROOT = Path(trio_typha.__file__).resolve().parent


@dataclass(frozen=True, slots=True)
class Imported:
    """One name an import statement brings in: ``module`` (absolute, relative ones
    resolved), ``name`` for ``from module import name`` (None for ``import module``)."""

    module: str
    name: str | None
    line: int

    @property
    def top(self) -> str:
        return self.module.split(".")[0]


@dataclass(frozen=True, slots=True)
class Source:
    """One module of trio_typha: its dotted name, file and syntax tree."""

    name: str
    path: Path
    tree: ast.Module

    @property
    def rel(self) -> str:
        return self.path.relative_to(PACKAGE_ROOT).as_posix()

    def imports(self) -> Iterator[Imported]:
        package = self.name.split(".")
        if self.path.name != "__init__.py":
            package.pop()
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield Imported(alias.name, None, node.lineno)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[: len(package) - (node.level - 1)]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                for alias in node.names:
                    yield Imported(module, alias.name, node.lineno)

    def names_used(self, name: str) -> list[int]:
        """Lines where the bare name ``name`` is read (``httpx.get``'s ``httpx``)."""
        return [node.lineno for node in ast.walk(self.tree)
                if isinstance(node, ast.Name) and node.id == name]

    def module_level(self, dunder: str) -> object:
        """The constant a module-level ``dunder = <constant>`` binds (None if absent)."""
        for node in self.tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and any(
                    isinstance(t, ast.Name) and t.id == dunder for t in node.targets):
                return node.value.value
        return None


def parse(path: Path) -> Source:
    parts = list(path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return Source(".".join(parts), path, ast.parse(path.read_text(), str(path)))


def sources() -> list[Source]:
    """Every module of trio_typha, in path order."""
    return [parse(path) for path in sorted(PACKAGE_ROOT.rglob("*.py"))]
