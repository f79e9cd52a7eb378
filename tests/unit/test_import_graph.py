"""The package graph read from the imports: no circle, no arrow running up the declared layers.

Every import counts, function-level and ``TYPE_CHECKING`` ones included (tools/import_graph.py
reads them with ``ast``); docs/architecture.md ("Layers") states the same order. A failure
names the import that breaks the rule.
"""

from __future__ import annotations

from pathlib import Path

from tools import import_graph as graph

ROOT = graph.ROOT


def _described(imports: list[graph.Import]) -> str:
    return "\n".join(f"  {imp}" for imp in imports)


def test_every_package_has_a_layer() -> None:
    declared = {name for layer in graph.LAYERS for name in layer}
    missing = sorted(graph.packages("trio_typha") - declared)
    assert missing == [], f"add {missing} to tools/import_graph.py LAYERS"


def test_no_arrow_runs_up_the_layers() -> None:
    up = graph.upward(graph.arrows(graph.imports("trio_typha")))
    assert up == {}, "imports of a package in the same or a higher layer:\n" + "\n".join(
        f"{a} -> {b}:\n{_described(imps)}" for (a, b), imps in sorted(up.items()))


def test_no_circle_between_packages() -> None:
    edges = graph.arrows(graph.imports("trio_typha"))
    found = graph.circles(edges)
    assert found == [], "\n".join(
        f"circle {' '.join(c)}:\n" + _described(
            [imp for (a, b), imps in edges.items() if a in c and b in c for imp in imps])
        for c in found)


def test_no_circle_between_modules() -> None:
    for top in ("trio_typha", "testbed"):
        found = graph.imports(top)
        circles = graph.circles((imp.source, imp.target) for imp in found)
        assert circles == [], "\n".join(
            f"circle {' '.join(c)}:\n" + _described(
                [imp for imp in found if imp.source in c and imp.target in c])
            for c in circles)


def test_the_top_level_package_imports_nothing_of_its_own() -> None:
    # Every arrow into it is left out of the graph: that holds only while it is a leaf.
    assert [imp for imp in graph.imports("trio_typha") if imp.source == "trio_typha"] == []


def _package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_reader_sees_function_level_and_type_checking_imports(tmp_path: Path) -> None:
    # The checks above could fail: a circle closed only inside a function, and an arrow
    # made only under TYPE_CHECKING, both show.
    root = _package(tmp_path, {
        "__init__.py": "",
        "low/__init__.py": "",
        "low/a.py": "def f():\n    from ..high import b\n    return b\n",
        "high/__init__.py": "",
        "high/b.py": "from ..low.a import f\n",
        "mid.py": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                   "    from .high.b import f\n"),
    })
    found = graph.imports("pkg", root)
    assert {(i.source, i.target, i.line) for i in found} == {
        ("pkg.low.a", "pkg.high.b", 2), ("pkg.high.b", "pkg.low.a", 1),
        ("pkg.mid", "pkg.high.b", 3)}
    edges = graph.arrows(found)
    assert graph.circles(edges) == [["high", "low"]]
    assert graph.fewest_upward(edges) == 1
    assert graph.packages("pkg", root) == {"low", "high", "mid"}


def test_fewest_upward_is_the_best_order_of_all() -> None:
    # a -> b -> c -> a and a -> c: dropping c -> a breaks the one circle.
    edges = [("a", "b"), ("b", "c"), ("c", "a"), ("a", "c")]
    assert graph.fewest_upward(edges) == 1
    assert graph.fewest_upward([("a", "b"), ("b", "c")]) == 0
