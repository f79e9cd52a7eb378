"""Go-style summary quantiles: values, bounded memory, bulk observations, the age window."""

from __future__ import annotations

import math

import pytest
import trio
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from trio_typha.observe.quantiles import QuantileSummary, Window


@pytest.mark.parametrize("capacity", [4096, 64])  # without and with compaction
def test_quantiles_of_a_known_distribution(capacity: int) -> None:
    w = Window(max_age=600, age_buckets=5, capacity=capacity)
    for v in range(1, 1001):
        w.observe(float(v), now=10.0)
    p50, p90, p99 = w.quantiles(now=10.0)
    tolerance = 1 if capacity > 1000 else 40
    assert abs(p50 - 500) <= tolerance and abs(p90 - 900) <= tolerance
    assert abs(p99 - 990) <= tolerance
    assert sum(len(s) for s in w._slices.values()) <= capacity


def test_bulk_observations_weigh_as_many() -> None:
    w = Window(capacity=16)
    w.observe(1.0, now=0.0, count=9000)
    w.observe(100.0, now=0.0, count=1000)
    assert w.quantiles(now=0.0) == [1.0, 1.0, 100.0]


def test_old_slices_leave_the_window_as_in_go() -> None:
    # MaxAge 60 s in 2 buckets (typha_client_latency_secs): 30 s slices.
    w = Window(max_age=60, age_buckets=2)
    w.observe(5.0, now=1.0)
    assert w.quantiles(now=59.0) == [5.0] * 3  # still within the head window
    w.observe(7.0, now=61.0)
    assert w.quantiles(now=61.0) == [7.0] * 3  # the 0-30 s slice is gone
    assert all(math.isnan(q) for q in w.quantiles(now=200.0))


async def test_summary_exposition_parses_with_quantiles(autojump_clock) -> None:
    registry = CollectorRegistry()
    s = QuantileSummary("typha_ping_latency", "Round-trip ping latency to client.",
                        ["syncer"], registry=registry, max_age=60, age_buckets=2,
                        clock=trio.current_time)
    for v in range(1, 101):
        s.labels(syncer="felix").observe(v / 1000)
    s.labels(syncer="bgp").observe_many(0.25, 40)
    text = generate_latest(registry).decode()
    (family,) = [f for f in text_string_to_metric_families(text)
                 if f.name == "typha_ping_latency"]
    assert family.type == "summary"
    got = {(x.labels["syncer"], x.labels.get("quantile"), x.name): x.value
           for x in family.samples}
    assert got["felix", "0.5", "typha_ping_latency"] == 0.05
    assert got["felix", "0.9", "typha_ping_latency"] == 0.09
    assert got["felix", "0.99", "typha_ping_latency"] == 0.099
    assert got["felix", None, "typha_ping_latency_count"] == 100
    assert got["bgp", "0.99", "typha_ping_latency"] == 0.25
    assert got["bgp", None, "typha_ping_latency_sum"] == pytest.approx(10.0)
    await trio.sleep(121)  # past MaxAge: quantiles NaN, count and sum stay
    after = {(x.labels["syncer"], x.labels.get("quantile"), x.name): x.value
             for f in text_string_to_metric_families(generate_latest(registry).decode())
             if f.name == "typha_ping_latency" for x in f.samples}
    assert math.isnan(after["felix", "0.5", "typha_ping_latency"])
    assert after["felix", None, "typha_ping_latency_count"] == 100


def test_the_summary_reads_only_the_clock_it_is_given() -> None:
    """Observations and collections both take "now" from ``clock``, so a summary outside
    any event loop slides exactly as that clock says."""
    now = [0.0]
    s = QuantileSummary("typha_kvs_per_msg", "KVs per message.", ["syncer"], max_age=60,
                        age_buckets=2, clock=lambda: now[0])
    s.labels(syncer="felix").observe(5.0)
    now[0] = 45.0
    s.labels(syncer="felix").observe(9.0)
    assert s.labels(syncer="felix").quantiles() == [5.0, 9.0, 9.0]
    now[0] = 75.0  # the 0-30 s slice has left the window
    assert s.labels(syncer="felix").quantiles() == [9.0, 9.0, 9.0]
