"""Shared pieces of the fan-out benchmarks: the in-process server, churn, stats."""

from __future__ import annotations

import json
import os
import resource
import statistics
import sys
from typing import Any

CHURN_RE = rb'"churn-ts":"(\d+)"'


def rss_peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    values = sorted(values)
    def q(p: float) -> float:
        return values[min(len(values) - 1, int(p * len(values)))]
    return {"n": len(values), "p50_ms": round(q(0.50) * 1e3, 2),
            "p99_ms": round(q(0.99) * 1e3, 2), "max_ms": round(values[-1] * 1e3, 2),
            "mean_ms": round(statistics.fmean(values) * 1e3, 2)}


def report(result: dict[str, Any]) -> None:
    print(json.dumps(result, indent=2))
    out = os.environ.get("BENCH_OUT")
    if out:
        with open(out, "a") as fh:
            fh.write(json.dumps(result) + "\n")
    sys.stdout.flush()
