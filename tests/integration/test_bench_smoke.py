"""Every benchmark scenario runs at a tiny size, so ``python -m bench`` cannot rot.

Only the shape of the report is checked here; the figures belong in README's benchmark
section, never in assertions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KEYS = {"delivered_fraction", "delay_p50_ms", "delay_p99_ms", "delay_max_ms", "server_cpu_s",
        "cores_used", "peak_rss_mib", "in_sync_s"}


def bench(*args: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "bench", *args, "--json"], cwd=ROOT,
                          check=True, stdout=subprocess.PIPE, text=True, timeout=120)
    row = json.loads(done.stdout.strip().splitlines()[-1])
    assert row.keys() >= KEYS
    return row


@pytest.mark.parametrize("protocol", ["typha", "grpc"])
def test_storm(protocol: str) -> None:
    row = bench("storm", "--protocol", protocol, "--clients", "4", "--cluster", "tiny")
    assert row["clients"] == 4 and row["in_sync_s"] is not None and not row["client_errors"]
    if protocol == "typha":  # the raw-blast baseline ran against the same clients
        assert row["baseline_in_sync_s"] is not None and row["storm_ratio"] is not None


def test_steady() -> None:
    row = bench("steady", "--clients", "3", "--cluster", "tiny", "--rate", "20",
                "--seconds", "1")
    assert row["writes"] > 0 and row["delivered_fraction"] == 1.0
    assert row["delay_p99_ms"] is not None and row["cores_used"] is not None


def test_memory() -> None:
    row = bench("memory", "--clients", "2", "--cluster", "tiny")
    assert row["peak_rss_mib"] > 0 and row["rss_with_clients_mib"] > 0


def test_startup() -> None:
    row = bench("startup", "--cluster", "tiny")
    assert row["in_sync_s"] > 0 and row["server_cpu_s"] is not None


@pytest.mark.etcd
def test_steady_on_etcd() -> None:
    row = bench("steady", "--datastore", "etcdv3", "--clients", "2", "--cluster", "tiny",
                "--rate", "20", "--seconds", "1")
    assert row["writes"] > 0 and row["delivered_fraction"] == 1.0


def test_startup_on_etcd_is_a_clear_error() -> None:
    done = subprocess.run([sys.executable, "-m", "bench", "startup", "--datastore", "etcdv3"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 2 and "--datastore etcdv3" in done.stderr
