"""The ``trio-typha connections`` spread judges skew per syncer type as well as in total."""

from __future__ import annotations

from typing import Any

from trio_typha.observe.connections import spread


def doc(**per_syncer: int) -> dict[str, Any]:
    rows = [{"syncer_type": s.replace("_", "-"), "hostname": f"{s}-{i}"}
            for s, n in per_syncer.items() for i in range(n)]
    return {"connections": rows, "connection_limit": None}


def flags(documents: dict[str, Any]) -> dict[str, str]:
    lines = spread(documents)
    return {line.split()[0]: line for line in lines[1:] if line.split()[0] in documents}


def test_even_totals_with_each_syncer_on_one_replica_are_skewed() -> None:
    out = flags({"a:1": doc(felix=6), "b:1": doc(bgp=6)})
    assert "SKEW:" not in out["a:1"] and "SKEW:" not in out["b:1"]  # totals are even
    assert "SKEW felix: +3.0 vs mean 3.0" in out["a:1"]
    assert "SKEW bgp: -3.0 vs mean 3.0" in out["a:1"]
    assert "SKEW felix: -3.0 vs mean 3.0" in out["b:1"]
    assert "SKEW bgp: +3.0 vs mean 3.0" in out["b:1"]


def test_a_difference_rounding_explains_is_not_skew() -> None:
    # 3 felix over two replicas cannot split evenly; neither is flagged.
    out = flags({"a:1": doc(felix=2, bgp=1), "b:1": doc(felix=1, bgp=1)})
    assert "SKEW" not in out["a:1"] and "SKEW" not in out["b:1"]


def test_within_tolerance_per_syncer_is_not_flagged_beyond_it_is() -> None:
    # felix 11 vs 9: mean 10, off 1 (10 %) is within the 20 % tolerance.
    out = flags({"a:1": doc(felix=11), "b:1": doc(felix=9)})
    assert "SKEW" not in out["a:1"] + out["b:1"]
    # felix 13 vs 7: off 3 (30 %) is not.
    out = flags({"a:1": doc(felix=13), "b:1": doc(felix=7)})
    assert "SKEW felix: +3.0 vs mean 10.0" in out["a:1"]
    assert "SKEW: +3.0 vs mean 10.0" in out["a:1"]  # and so is the total


def test_one_replica_is_never_skewed() -> None:
    out = flags({"a:1": doc(felix=5, bgp=0)})
    assert "SKEW" not in out["a:1"]
