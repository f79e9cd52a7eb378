"""KDD benchmark: start-up to InSync against a Kubernetes API, then update propagation.

    python bench/kdd_startup.py --clusters medium,large --churn-cluster large \\
        --rate 50 --seconds 30

For each synthetic cluster size (``trio_typha.datastore.synthetic``; ``large`` has 100k pods)
a test bed API server runs in a child process, seeded straight into its store.  The daemon
runs in this process with the real Kubernetes datastore (API-group discovery, paginated lists
of 500, watches), so its CPU time and peak RSS are this process's.  It reports:

* ``startup``: from starting the daemon to each syncer reporting InSync, and to all of them;
* ``client_snapshot``: a grpcio client (``bench/grpc_clients.py``, a separate process)
  connecting after that, until it has the whole felix snapshot;
* ``propagation`` (``--churn-cluster`` only): the API server process relabels random pods at
  ``--rate`` writes/s for ``--seconds``, stamping label ``churn-ts`` with ``time.time_ns()``
  at the store write; the client takes the delay to receipt from the workload endpoint value.

The API server child is this same script with ``--serve-apiserver``: it prints one JSON line
when it is serving, then obeys JSON lines on stdin (``{"cmd": "churn", ...}``) and exits when
stdin closes (``{"cmd": "traffic"}`` answers with its ``ApiServer.traffic`` counts).  Results are printed as JSON (and appended to ``$BENCH_OUT`` if set).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _common import cpu_seconds, percentiles, report, rss_peak_mib  # noqa: E402

from testbed.cluster import cluster_objects  # noqa: E402
from testbed.jsonlines import JsonLines, send_json  # noqa: E402
from trio_typha.model import kinds as K  # noqa: E402

HERE = Path(__file__).resolve().parent
GROUPS = {"crd": K.CALICO_CRD_GROUP, "v3": K.CALICO_V3_GROUP}


# --- the API server child -----------------------------------------------------------------------

async def serve_apiserver(size: str, group: str) -> None:
    from testbed.apiserver import ApiServer
    from trio_typha.datastore.churn import CHURN_LABEL

    server = ApiServer(calico_groups=(group,))
    t0 = time.monotonic()
    pods: list[tuple[str, str]] = []
    with server.store.bulk():
        count = 0
        for kind, obj in cluster_objects(size, group):
            server.store.create(kind, obj)
            count += 1
            if kind == K.POD:
                pods.append((obj["metadata"]["namespace"], obj["metadata"]["name"]))
    seed_s = time.monotonic() - t0
    kubeconfig_dir = tempfile.mkdtemp(prefix="kdd-bench-")
    stdin = trio.lowlevel.FdStream(os.dup(0))
    stdout = trio.lowlevel.FdStream(os.dup(1))
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        path = server.kubeconfig_path(kubeconfig_dir)
        await send_json(stdout, {"event": "serving", "kubeconfig": str(path),
                                 "port": server.port, "objects": count,
                                 "pods": len(pods), "seed_s": round(seed_s, 2)})
        commands = JsonLines(stdin)
        rng = random.Random(11)
        while True:
            try:
                cmd = await commands.json()
            except EOFError:
                break
            if cmd["cmd"] == "churn":
                writes = await churn(server, pods, rng, CHURN_LABEL, cmd["rate"],
                                     cmd["seconds"])
                await send_json(stdout, {"event": "churned", "writes": writes})
            elif cmd["cmd"] == "traffic":  # what clients have cost the server so far
                await send_json(stdout, {"event": "traffic", **asdict(server.traffic)})
        nursery.cancel_scope.cancel()


async def churn(server: Any, pods: list[tuple[str, str]], rng: random.Random, label: str,
                rate: float, seconds: float) -> int:
    """Relabel random pods at ``rate`` per second, stamping ``label`` with the wall clock."""
    store = server.store
    interval = 1.0 / rate
    next_write = trio.current_time()
    end = next_write + seconds
    writes = 0
    while next_write < end:
        ns, name = pods[rng.randrange(len(pods))]
        obj = store.get(K.POD, ns, name)
        md = obj["metadata"]
        store.update(K.POD, {**obj, "metadata": {
            **md, "resourceVersion": "",
            "labels": {**(md.get("labels") or {}), label: str(time.time_ns())}}})
        writes += 1
        next_write += interval
        await trio.sleep_until(next_write)
    return writes


# --- the measuring side ----------------------------------------------------------------------

async def measure(size: str, args: argparse.Namespace, *, do_churn: bool) -> dict[str, Any]:
    from trio_typha.config import Config
    from trio_typha.config_sources import load_config
    from trio_typha.daemon import Daemon
    from trio_typha.datastore.k8s_config import load_kube_client_config
    from trio_typha.datastore.kubernetes import open_kubernetes_datastore

    result: dict[str, Any] = {"bench": "kdd_startup", "cluster": size, "group": args.group}
    apiserver = await trio.lowlevel.open_process(
        [sys.executable, __file__, "--serve-apiserver", size, "--group", args.group],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert apiserver.stdin is not None and apiserver.stdout is not None
    api_lines = JsonLines(apiserver.stdout)
    serving = await api_lines.json()
    result.update(objects=serving["objects"], pods=serving["pods"],
                  apiserver_seed_s=serving["seed_s"])
    cfg = load_config({}, overrides={
        "DatastoreType": "kubernetes", "ServerHost": "127.0.0.1", "ServerWorkers": "1",
        "ShutdownTimeoutSecs": "2", "ShutdownConnectionDropIntervalMaxSecs": "0.05"})
    kube = load_kube_client_config(Config(kubeconfig=serving["kubeconfig"]))
    async with open_kubernetes_datastore(kube) as ds, trio.open_nursery() as nursery:
        daemon = Daemon(cfg, datastore=ds, listen_port=0)  # ServerPort 0 would be 5473
        synced: dict[str, float] = {}
        cpu0 = cpu_seconds()
        t0 = trio.current_time()

        async def note_in_sync(syncer: str) -> None:
            await daemon.pipelines[syncer].feed.wait_in_sync()
            synced[syncer] = round(trio.current_time() - t0, 2)

        await nursery.start(daemon.run)
        async with trio.open_nursery() as waiters:
            for syncer in daemon.pipelines:
                waiters.start_soon(note_in_sync, syncer)
        result["startup"] = {"all_in_sync_s": max(synced.values()), "by_syncer_s": synced,
                             "cpu_s": round(cpu_seconds() - cpu0, 2)}
        result["felix_keys"] = len(daemon.pipelines["felix"].feed.cache)
        result["daemon_peak_rss_mib_so_far"] = round(rss_peak_mib(), 1)

        client = await trio.lowlevel.open_process(
            [sys.executable, str(HERE / "grpc_clients.py"), "--target",
             f"127.0.0.1:{daemon.ports['server']}", "--n", "1", "--syncer", "felix"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert client.stdin is not None and client.stdout is not None
        client_lines = JsonLines(client.stdout)
        in_sync = await client_lines.json()
        result["client_snapshot"] = {"seconds": round(in_sync["seconds"], 2),
                                     "keys": in_sync["keys_min"], "errors": in_sync["errors"]}
        if do_churn:
            cpu1 = cpu_seconds()
            await send_json(apiserver.stdin, {"cmd": "churn", "rate": args.rate,
                                              "seconds": args.seconds})
            churned = await api_lines.json()
            await trio.sleep(2)  # the last writes' journey
            result["propagation"] = {"rate": args.rate, "seconds": args.seconds,
                                     "writes": churned["writes"],
                                     "daemon_cpu_s": round(cpu_seconds() - cpu1, 2)}
        await client.stdin.aclose()
        done = await client_lines.json()
        await client.wait()
        if do_churn:
            result["propagation"]["received"] = len(done["delays"])
            result["propagation"]["delay"] = percentiles(done["delays"])
            result["propagation"]["client_errors"] = done["errors"]
        daemon.shutdown()
    await apiserver.stdin.aclose()
    await apiserver.wait()
    result["daemon_peak_rss_mib"] = round(rss_peak_mib(), 1)
    return result


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    results = []
    for size in args.clusters.split(","):
        t = time.monotonic()
        res = await measure(size, args, do_churn=size == args.churn_cluster)
        res["wall_s"] = round(time.monotonic() - t, 1)
        report(res)
        results.append(res)
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clusters", default="medium,large",
                   help="comma-separated synthetic cluster sizes, measured in this order")
    p.add_argument("--group", choices=sorted(GROUPS), default="crd",
                   help="serve Calico resources as crd.projectcalico.org/v1 or "
                        "projectcalico.org/v3")
    p.add_argument("--churn-cluster", default="large",
                   help="which of --clusters gets the propagation run ('' for none)")
    p.add_argument("--rate", type=float, default=50.0, help="pod writes per second")
    p.add_argument("--seconds", type=float, default=30.0, help="churn duration")
    p.add_argument("--serve-apiserver", metavar="SIZE", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve_apiserver:
        trio.run(serve_apiserver, args.serve_apiserver, GROUPS[args.group])
        return
    trio.run(run, args)


if __name__ == "__main__":
    main()
