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


def run_bench(*args: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "bench", *args, "--json"], cwd=ROOT,
                          check=True, stdout=subprocess.PIPE, text=True, timeout=120)
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench(*args: str) -> dict:
    row = run_bench(*args)
    assert row.keys() >= KEYS
    return row


@pytest.mark.parametrize("protocol", ["typha", "grpc"])
def test_storm(protocol: str) -> None:
    row = bench("storm", "--protocol", protocol, "--clients", "4", "--cluster", "tiny")
    assert row["clients"] == 4 and row["in_sync_s"] is not None and not row["client_errors"]
    # The raw-blast baseline served the same clients their snapshot and in-sync marker.
    assert row["raw_blast_clients_in_sync"] == 4 and not row["raw_blast_errors"]
    assert row["raw_blast_s"] > 0 and row["ratio_to_raw_blast"] > 0
    if protocol == "grpc":  # every grpcio client had the whole snapshot from it
        assert row["raw_blast_keys_min"] > 0


@pytest.mark.parametrize("protocol", ["typha", "grpc"])
def test_steady(protocol: str) -> None:
    row = bench("steady", "--protocol", protocol, "--clients", "3", "--cluster", "tiny",
                "--rate", "20", "--seconds", "1")
    assert row["writes"] > 0 and row["delivered_fraction"] == 1.0
    assert row["delay_p99_ms"] is not None and row["cores_used"] is not None
    # Counted by the clients over the churn window and after it, with both CPU figures.
    assert 0 < row["delivered_at_churn_end"] <= row["delivered_1s_after"] <= 1.0
    assert row["drain_s"] is not None and row["fleet_cpu_s"] is not None
    # (CPU is read in clock ticks: a tiny run may well cost 0 of them.)
    assert row["cpu_us_per_delivery"] >= 0 and row["cpu_us_per_delivery_whole_run"] >= 0
    assert row["writes_not_in_cache_at_churn_end"] >= 0
    assert row["sessions_behind_at_churn_end"] is not None
    assert row["server_send_queue_bytes"] >= 0 and row["client_recv_queue_bytes"] >= 0


def test_balance() -> None:
    """Both the real ServerWorkers and the SCM_RIGHTS prototype served every client, and
    the kill-and-reconnect round brought the count back."""
    result = run_bench("balance", "--clients", "8", "--cluster", "tiny",
                       "--workers-list", "2")
    (real,) = result["real_server"]
    assert real["workers"] == 2 and not real["errors"]
    assert sum(real["initial"]["per_process"]) == 8
    assert sum(real["after_reconnect"]["per_process"]) == 8
    modes = {p["mode"]: p for p in result["prototype"]}
    assert modes.keys() == {"reuseport", "scm_rights"}
    for proto in modes.values():
        assert not proto["errors"] and proto["accepts_per_s"] > 0
        assert sum(proto["initial"]["per_process"]) == 8
        assert sum(proto["after_reconnect"]["per_process"]) == 8
    # Least-connections passing is exact: 8 clients over 2 workers is 4 and 4.
    assert modes["scm_rights"]["initial"]["per_process"] == [4, 4]
    assert modes["scm_rights"]["primary_cpu_us_per_accept"] is not None


@pytest.mark.parametrize("protocol", ["typha", "grpc"])
def test_steady_over_mutual_tls(protocol: str) -> None:
    row = bench("steady", "--protocol", protocol, "--tls", "--clients", "3", "--cluster",
                "tiny", "--rate", "20", "--seconds", "1")
    assert row["tls"] is True and row["writes"] > 0 and row["delivered_fraction"] == 1.0
    assert not row["client_errors"]


@pytest.mark.parametrize(("protocol", "impl", "tls"),
                         [("typha", "python", False), ("grpc", "h2", True)])
def test_fanout_with_the_test_bed_agents(protocol: str, impl: str, tls: bool) -> None:
    """bench/fanout.py's Python clients: the test bed's agents (python -m testbed.fleet_bench)
    speaking the runner's contract, over plain TCP and mutual TLS."""
    done = subprocess.run([sys.executable, "bench/fanout.py", "--protocol", protocol,
                           "--client-impl", impl, "--clients", "3", "--cluster", "tiny",
                           "--rate", "20", "--seconds", "1", *(["--tls"] if tls else [])],
                          cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True, timeout=120)
    result = json.loads(done.stdout)
    assert result["client_impl"] == impl and result["tls"] is tls
    assert not result["client_errors"] and not result["clients_not_in_sync"]
    assert result["churn_writes"] > 0
    assert result["delay"]["n"] == result["expected_deliveries"] == 3 * result["churn_writes"]


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


@pytest.mark.parametrize("datastore", [pytest.param("etcdv3", marks=pytest.mark.etcd),
                                       "kubernetes"])
def test_startup_as_a_process(datastore: str) -> None:
    """bench/etcd_startup.py: the daemon's own process from start to ready on etcd, or on
    the test bed's Kubernetes API server."""
    result = run_bench("startup", "--datastore", datastore, "--cluster", "tiny",
                       "--repeats", "1")
    assert result["datastore"] == datastore
    trio = result["trio_typha"]
    assert result["objects"] > 0 and len(trio["runs"]) == 1
    assert trio["ready_s"]["min"] > 0 and trio["cpu_s"]["min"] > 0
    assert trio["peak_rss_mib"]["min"] > 0 and trio["runs"][0]["processes"] == 1
    assert "go_typha" not in result  # only with --go-typha


def test_worker_feed_micro_benchmark() -> None:
    """bench/worker_feed.py: a worker's CPU per breadcrumb, records vs re-encoding."""
    done = subprocess.run([sys.executable, "bench/worker_feed.py", "--cluster", "tiny",
                           "--writes", "20", "--rounds", "1", "--json"], cwd=ROOT,
                          check=True, stdout=subprocess.PIPE, text=True, timeout=120)
    row = json.loads(done.stdout.strip().splitlines()[-1])
    assert row["breadcrumbs"] > 0 and row["updates"] >= row["breadcrumbs"]
    assert len(row["prefilled_us_per_breadcrumb"]) == 2 and row["ratio_best"] > 0


def test_worker_latency_benchmark() -> None:
    """bench/worker_latency.py: publication-to-receipt delay, primary's clients vs workers'."""
    done = subprocess.run([sys.executable, "bench/worker_latency.py", "--cluster", "tiny",
                           "--rate", "20", "--seconds", "1", "--clients", "8", "--json"],
                          cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True, timeout=120)
    row = json.loads(done.stdout.strip().splitlines()[-1])
    assert row["workers"] == 2 and row["on_primary"]["n"] + row["on_workers"]["n"] > 0


def test_floods_benchmark() -> None:
    """bench/floods.py: a spread rapid reset from a separate process; the shared budgets
    close the attacker's connections and every figure is reported."""
    done = subprocess.run([sys.executable, "bench/floods.py", "--connections", "10",
                           "--rate", "150", "--seconds", "2", "--after", "1"], cwd=ROOT,
                          check=True, stdout=subprocess.PIPE, text=True, timeout=120)
    row = json.loads(done.stdout[done.stdout.index("{"):])
    assert row["attacker"]["closed_shared"] > 0
    assert row["canary_keys_written"] > 0 and row["canary_pct_1s_after"] > 0
    assert row["readiness_after"]["probes"] > 0 and row["rss_peak_mib"] >= row["rss_before_mib"]


QUIET_FIGURES = {"connections", "requests", "watch_streams", "pings_sent",
                 "bytes_to_datastore", "bytes_from_datastore"}


@pytest.mark.parametrize("datastore", ["kubernetes",
                                       pytest.param("etcdv3", marks=pytest.mark.etcd)])
def test_quiet(datastore: str) -> None:
    """bench/quiet.py reports, for trio-typha, the datastore's figures for the window and
    since its start (a short run under a little churn: that something was counted is
    checked, not how much)."""
    result = run_bench("quiet", "--datastore", datastore, "--cluster", "tiny", "--settle",
                       "1", "--seconds", "2", "--churn", "5")
    assert result["scenario"] == "quiet" and result["datastore"] == datastore
    assert result["go_typha"] is None  # not given --go-typha
    run = result["trio_typha"]
    assert run["window"].keys() >= QUIET_FIGURES and run["since_start"].keys() >= QUIET_FIGURES
    start = run["since_start"]
    assert start["connections"] > 0 and start["requests"] > 0 and start["watch_streams"] > 0
    assert start["bytes_to_datastore"] > 0 and start["bytes_from_datastore"] > 0
    assert run["churn_writes"] > 0 and run["window"]["bytes_from_datastore"] > 0
    assert run["datastore_cpu_s"] >= 0
    if datastore == "kubernetes":  # the API server's own count sits beside the proxy's
        assert run["server_side"].keys() >= {"requests", "watches", "bytes_out"}


def test_quiet_wire_count_reads_http1_and_http2() -> None:
    """The proxy's counter on bytes the h2 library (client side) and HTTP/1.1 clients
    write: requests, watch streams (Kubernetes ``watch=``, etcd's gRPC watch creations and
    progress requests), PINGs, fed in pieces as a socket delivers them."""
    import h2.connection

    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from datastore_proxy import Counts, WireCount

    counts = Counts()
    http1 = WireCount(counts)
    data = (b"GET /api/v1/pods?limit=500 HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /api/v1/pods?watch=true&resourceVersion=5 HTTP/1.1\r\nHost: x\r\n\r\n"
            b'POST /v3/watch HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}')
    for i in range(0, len(data), 7):
        http1.feed(data[i:i + 7])
    assert (counts.requests, counts.http1_requests, counts.watch_streams) == (3, 3, 2)

    counts = Counts()
    wire = WireCount(counts)
    conn = h2.connection.H2Connection()
    conn.initiate_connection()

    def request(path: str, end: bool = True) -> int:
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, [(":method", "GET"), (":path", path), (":scheme", "http"),
                                (":authority", "x")], end_stream=end)
        return sid

    request("/api/v1/pods?limit=500")
    request("/api/v1/namespaces?watch=1&allowWatchBookmarks=true")
    watch = request("/etcdserverpb.Watch/Watch", end=False)
    create, progress = b"\x0a\x02\x08\x01", b"\x1a\x00"
    grpc = b"".join(b"\x00" + len(m).to_bytes(4) + m for m in (create, create, progress))
    conn.send_data(watch, grpc)
    conn.ping(b"8 bytes!")
    out = conn.data_to_send()
    for i in range(0, len(out), 5):
        wire.feed(out[i:i + 5])
    assert wire.h2 and counts.h2_connections == 1
    assert (counts.requests, counts.h2_streams, counts.http1_requests) == (3, 3, 0)
    assert (counts.watch_streams, counts.progress_requests, counts.pings_sent) == (3, 1, 1)
    assert counts.bytes_to_datastore == len(out)


def test_reconnect() -> None:
    row = run_bench("reconnect", "--protocol", "grpc", "--clients", "3", "--cluster", "tiny",
                    "--rate", "10", "--seconds", "0.2")
    assert row["converged"] is True
    assert set(row["paths"]) == {"position", "digest", "cold"}
    for name, path in row["paths"].items():
        assert {"bytes_per_client", "snapshot_bytes_per_client", "cpu_s", "snapshot_cpu_s",
                "in_sync_s"} <= path.keys()
        assert not path["errors"]
        assert path["methods"] == {"digest" if name == "cold" else name: 3}


def test_connections_with_leave_and_measure() -> None:
    done = subprocess.run([sys.executable, "bench/connections.py", "--clients", "4", "--procs",
                           "1", "--cluster", "tiny", "--hold", "1", "--leave-wait", "0.5"],
                          cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True, timeout=120)
    row = json.loads(done.stdout)
    assert row["sessions_in_sync"] == 4 and row["dropped"] == 0
    # Every client left; the resident set is read while loaded, at its peak and after.
    assert row["sessions_after_leave"] == 0
    for key in ("rss_peak_mib", "rss_per_conn_kib", "rss_after_leave_mib",
                "rss_kept_after_leave_mib", "rss_after_leave_and_gc_mib",
                "rss_after_leave_gc_and_trim_mib"):
        assert isinstance(row[key], float), key
    assert row["rss_peak_mib"] >= row["rss_after_leave_mib"] > 0
