"""A flood of clients against a fast datastore: the cache keeps pace with the datastore.

Real etcd, written from another process at a high rate (so the writes come whatever the
server does), 300 Go gob clients: every write reaches every client, and at the end of every
broadcast round the datastore events not yet in the cache stay far below the decoupler's
capacity (the watcher is never pushed back, so no backlog builds upstream of the cache
where no fall-behind rule would see it).  The delays are the benchmark's to report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.etcd


def test_cache_keeps_pace_with_a_fast_datastore_under_a_client_flood() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "steady", "--datastore", "etcdv3", "--clients", "300",
         "--cluster", "small", "--rate", "200", "--seconds", "3", "--json"],
        cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True, timeout=180)
    row = json.loads(done.stdout.strip().splitlines()[-1])
    print("\nflood:", {k: row[k] for k in ("writes", "delay_p50_ms", "delay_p99_ms")},
          row["server_side"])
    assert row["writes"] > 0 and not row["client_errors"]
    assert row["delivered_fraction"] == 1.0
    side = row["server_side"]
    assert side["rounds"] > 0 and side["broadcast_deliveries"] > 0
    assert side["max_backlog"] < side["decoupler_capacity"] // 10
