"""The import graph of trio_typha/ (and the test bed's), read from the source with ``ast``.

Every import counts: module-level, function-level and those under ``TYPE_CHECKING``, since
each is a dependency of the importing module on the imported one. Modules fold into the
package that owns them (the first name under ``trio_typha``: ``server.tls`` is ``server``;
a top-level module such as ``config`` is its own package). ``LAYERS`` declares the order,
lowest first; an arrow from a package to one in a higher layer runs *upward*.

``python tools/import_graph.py`` prints the figures; tests/unit/test_import_graph.py keeps
them at zero.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: The declared layer order of trio_typha's packages, lowest first. A package may import
#: those in its own layer's predecessors only; packages in one layer do not import each
#: other. docs/architecture.md ("Layers") says the same in prose.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("gofmt", "native"),
    ("backoff", "grpcwire", "logs", "records", "startup"),
    ("model",),
    ("config",),
    ("config_sources", "cpus", "tls", "h2client"),
    ("host",),
    ("datastore", "cache"),
    ("observe",),
    ("syncer",),
    ("sessions",),
    ("protocols",),
    ("server", "client", "upstream"),
    ("workers", "warm", "relay"),
    ("serving",),
    ("daemon", "follower", "relay_process"),
    ("cli",),
    ("__main__",),
)


@dataclass(frozen=True)
class Import:
    """One import statement's dependency of module ``source`` on module ``target``."""

    source: str
    target: str
    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.source} imports {self.target}"


def module_names(top: str, root: Path = ROOT) -> dict[str, Path]:
    """Every module of package ``top`` (dotted name -> file)."""
    names = {}
    for path in sorted((root / top).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base.pop()
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports(top: str, root: Path = ROOT) -> list[Import]:
    """Every import inside ``top`` of another module inside ``top``, anywhere in a file."""
    modules = module_names(top, root)
    found = []
    for name, path in modules.items():
        rel = path.relative_to(root).as_posix()
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, is_package, node)
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    found.append(Import(name, target, rel, node.lineno))
    return found


def package_of(module: str) -> str:
    """The package that owns ``module``: the first name under the top-level package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def arrows(found: Iterable[Import]) -> dict[tuple[str, str], list[Import]]:
    """Package arrows, each with the imports that make it. The top-level package's own
    ``__init__`` (the version) is not a package of the graph: every module is inside it."""
    out: dict[tuple[str, str], list[Import]] = {}
    for imp in found:
        edge = (package_of(imp.source), package_of(imp.target))
        if edge[0] != edge[1] and "." in imp.target:
            out.setdefault(edge, []).append(imp)
    return out


def circles(edges: Iterable[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def layer_of(package: str) -> int:
    for rank, layer in enumerate(LAYERS):
        if package in layer:
            return rank
    raise KeyError(f"package {package!r} is not in import_graph.LAYERS")


def upward(edges: dict[tuple[str, str], list[Import]]) -> dict[tuple[str, str], list[Import]]:
    """The arrows that do not run to a lower layer (same-layer arrows count as upward)."""
    return {edge: imps for edge, imps in edges.items()
            if layer_of(edge[0]) <= layer_of(edge[1])}


def fewest_upward(edges: Iterable[tuple[str, str]]) -> int:
    """The fewest arrows that run upward under the best layer order of all (the minimum
    feedback arc set, by dynamic programming over subsets: for small graphs only)."""
    arcs = set(edges)
    nodes = sorted({n for arc in arcs for n in arc})
    if len(nodes) > 22:
        raise ValueError("too many packages for the exact search")
    bit = {n: 1 << i for i, n in enumerate(nodes)}
    importers = [sum(bit[a] for a, b in arcs if b == n) for n in nodes]
    # best[placed]: fewest upward arrows with the set ``placed`` laid out lowest first;
    # putting n above them makes every arrow from them to n run upward.
    best = [0] + [len(arcs) + 1] * ((1 << len(nodes)) - 1)
    for placed in range(1 << len(nodes)):
        for i in range(len(nodes)):
            if not placed & (1 << i):
                cost = best[placed] + (importers[i] & placed).bit_count()
                if cost < best[placed | (1 << i)]:
                    best[placed | (1 << i)] = cost
    return best[-1]


def file_circles(top: str, root: Path = ROOT) -> list[list[str]]:
    """Circles between modules (files) of ``top``."""
    return circles((imp.source, imp.target) for imp in imports(top, root))


def packages(top: str, root: Path = ROOT) -> set[str]:
    return {package_of(name) for name in module_names(top, root) if name != top}


def report(top: str = "trio_typha", root: Path = ROOT) -> Iterator[str]:
    found = imports(top, root)
    edges = arrows(found)
    yield f"packages: {len(packages(top, root))}"
    yield f"arrows: {len(edges)}"
    try:
        up = upward(edges)
    except KeyError as exc:
        yield f"arrows upward: unknown ({exc.args[0]})"
    else:
        yield f"arrows upward: {len(up)}"
        for (a, b), imps in sorted(up.items()):
            yield f"  {a} -> {b}: {imps[0]}" + (f" (+{len(imps) - 1})" if len(imps) > 1 else "")
    package_circles = circles(edges)
    # Without a circle some order has every arrow pointing down (a topological order).
    fewest = fewest_upward(edges) if package_circles else 0
    yield f"fewest arrows upward under any layer order: {fewest}"
    yield f"package circles: {len(package_circles)}"
    for circle in package_circles:
        yield f"  {' '.join(circle)}"
    for each in (top, "testbed"):
        modules = file_circles(each, root)
        yield f"file circles in {each}/: {len(modules)}"
        for circle in modules:
            yield f"  {' '.join(circle)}"


if __name__ == "__main__":
    print("\n".join(report(root=Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT)))
