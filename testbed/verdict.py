"""The demo's verdict: one dict (the ``--json`` object) and its text rendering (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def percentiles_ms(values: Sequence[float]) -> dict[str, float | int]:
    """p50/p99/max of ``values`` (seconds) in milliseconds, and their count."""
    if not values:
        return {"n": 0, "p50_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0}
    ordered = sorted(values)

    def q(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1e3, 2)

    return {"n": len(ordered), "p50_ms": q(0.5), "p99_ms": q(0.99),
            "max_ms": round(ordered[-1] * 1e3, 2)}


def render(v: dict[str, Any]) -> str:
    """The verdict for a terminal."""
    p = v["propagation"]
    lines = [
        f"== verdict: {'CONVERGED' if v['converged'] else 'NOT CONVERGED'}",
        f"   agents        {v['agents']} ({', '.join(f'{k} {n}' for k, n in sorted(v['protocols'].items()))})"
        f", all in sync after {v['time_to_all_in_sync_s']} s",
        f"   keys checked  {v['keys_checked']} (missing {v['missing']}, extra {v['extra']}, "
        f"differing {v['differing']}, agents not in sync {v['agents_not_in_sync']})",
        f"   writes        {v['writes']} ({v['write_errors']} failed) at {v['churn_rate']}/s "
        f"for {v['churn_s']} s",
        f"   propagation   p50 {p['p50_ms']} ms, p99 {p['p99_ms']} ms, max {p['max_ms']} ms "
        f"({p['n']} receipts)",
        f"   replica kills {v['replica_kills']}, survived {v['replica_kills_survived']}, "
        f"restarts {v['replica_restarts']}",
    ]
    for r in v["replicas"]:
        state = "alive" if r["alive"] else "killed"
        lines.append(f"   {r['name']:<10} {r['address']:<18} {state:<7} "
                     f"connections {r['connections']:<5} reconnects {r['reconnects']:<5} "
                     f"cpu {r['cpu_s']} s  "
                     f"rss {r['rss_mib']} MiB (peak {r['peak_rss_mib']})")
    for m in v["mismatched"][:10]:
        lines.append(f"   ! {m}")
    return "\n".join(lines)
