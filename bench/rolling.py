"""A rolling restart of Typha replicas, each warm-started from its siblings:

    python -m bench rolling --replicas 3 --cluster medium --datastore kubernetes|etcdv3 \\
        [--churn RATE] [--go-typha PATH] --json

The datastore (the test bed API server in a child process, or a real etcd, seeded with the
synthetic cluster: ``bench/quiet.py``'s) sits behind one counting proxy per replica
(``bench/datastore_proxy.py``), so what each replica costs the datastore is its own.  The
replicas are ``python -m trio_typha serve`` processes.  All start cold, one after the
other (each one's ``cold_ready_s`` and cold LISTs); then each in turn is stopped (SIGTERM)
and started again with ``WarmStartPeers`` naming the other replicas, and from its start
until it is ready and its watches have run ``--settle`` seconds: the LIST requests it made
(Kubernetes list pages; etcd Range calls), the bytes the datastore sent it, and time to
ready.  ``--churn`` writes that many objects per second to the datastore throughout the
roll.  Then every replica's four caches, read by a gob client each, are checked against the
datastore by the invariant checker (``testbed/invariant.py``): ``keys_lost`` (missing),
``keys_phantom`` (extra or differing; 0 for all when ``converged``).

With ``--go-typha`` Go Typha's binary is started once against the same datastore after the
roll, as a restarted Go replica is (Go Typha always lists everything): its LISTs, bytes and
time to ready are reported beside, as ``go_typha_restart``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import trio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from datastore_proxy import CountingProxy, Counts  # noqa: E402
from quiet import (  # noqa: E402
    Datastore,
    etcd_datastore,
    free_port,
    kubernetes_datastore,
    stop,
    wait_ready,
)

SETTLE_S = 3.0  # after ready: the watches start (and any relist after a 410 happens)


@dataclass
class Replica:
    index: int
    proxy: CountingProxy
    port: int = field(default_factory=free_port)
    health: int = field(default_factory=free_port)
    proc: trio.Process | None = None

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"


def _env(ds: Datastore, replica: Replica, peers: list[str]) -> dict[str, str]:
    env = {**os.environ, **ds.typha_env(replica.proxy.port),
           "TYPHA_SERVERHOST": "127.0.0.1", "TYPHA_SERVERPORT": str(replica.port),
           "TYPHA_HEALTHENABLED": "true", "TYPHA_HEALTHHOST": "127.0.0.1",
           "TYPHA_HEALTHPORT": str(replica.health), "TYPHA_LOGSEVERITYSCREEN": "INFO",
           "TYPHA_LOGFILEPATH": "none", "TYPHA_LOGSEVERITYSYS": "none",
           "TYPHA_SERVERWORKERS": "1", "TYPHA_SHUTDOWNTIMEOUTSECS": "3",
           "TYPHA_PROMETHEUSMETRICSENABLED": "false"}
    if peers:
        env["TYPHA_WARMSTARTPEERS"] = ",".join(peers)
    return env


def _lists(counts: Counts, datastore: str) -> int:
    return counts.k8s_lists if datastore == "kubernetes" else counts.etcd_ranges


async def start(command: list[str], env: dict[str, str], health: int, name: str,
                log: Path, ds: Datastore, proxy: CountingProxy, datastore: str
                ) -> tuple[trio.Process, dict[str, Any]]:
    """Start one process; its cost at the datastore until ready + SETTLE_S."""
    before = Counts(**proxy.counts.as_dict())
    t0 = trio.current_time()
    with log.open("ab") as out:
        proc = await trio.lowlevel.open_process(command, env=env, stdin=subprocess.DEVNULL,
                                                stdout=out, stderr=out)
    await wait_ready(proc, health, name)
    ready = trio.current_time() - t0
    await trio.sleep(SETTLE_S)
    cost = proxy.counts.minus(before)
    return proc, {"ready_s": round(ready, 2), "lists": _lists(cost, datastore),
                  "list_bytes": cost.bytes_from_datastore, "requests": cost.requests,
                  "watch_streams": cost.watch_streams}


async def caches_of(replica: Replica) -> list[tuple[str, str, dict[str, bytes]]]:
    """Each syncer type's KV set as a gob client of ``replica`` receives it."""
    from trio_typha.client.typha import TyphaClient
    from trio_typha.model.kv import SYNCER_TYPES
    out = []
    for syncer in SYNCER_TYPES:
        async with TyphaClient(("127.0.0.1", replica.port), syncer_type=syncer,
                               hostname=f"rolling-{replica.index}") as client:
            with trio.fail_after(120):
                await client.wait_for_status()
            out.append((f"replica {replica.index}", syncer,
                        {k: u.value for k, u in client.kvs.items() if u.value}))
    return out


def reader(ds: Datastore, datastore: str) -> Any:
    from testbed import invariant as inv
    if datastore == "etcdv3":
        return partial(inv.read_etcd, f"http://127.0.0.1:{ds.port}")

    def read() -> Any:
        import kubernetes
        from quiet import kubeconfig
        cfg = kubernetes.client.Configuration()
        cfg.host = kubeconfig(f"http://127.0.0.1:{ds.port}")["clusters"][0]["cluster"]["server"]
        cfg.api_key = {"authorization": "Bearer bench"}
        with kubernetes.client.ApiClient(cfg) as api:
            return inv.read_kubernetes(api)
    return read


async def converged(replicas: list[Replica], read: Any) -> dict[str, Any]:
    """The invariant over every replica's caches, once the datastore is quiet (up to 60 s
    for the last writes to arrive)."""
    from testbed import invariant as inv
    reports: list[inv.Report] = []
    with trio.move_on_after(60):
        while True:
            contents = await trio.to_thread.run_sync(read)
            holders = [h for r in replicas for h in await caches_of(r)]
            reports = inv.check(contents, holders)
            if all(r.ok for r in reports):
                break
            await trio.sleep(1.0)
    return {"converged": all(r.ok for r in reports),
            "keys_lost": sum(r.missing for r in reports),
            "keys_phantom": sum(r.extra + r.differing for r in reports),
            "keys_checked": sum(r.expected_keys for r in reports)}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    opener = kubernetes_datastore if args.datastore == "kubernetes" else etcd_datastore
    command = [sys.executable, "-m", "trio_typha", "serve"]
    result: dict[str, Any] = {"scenario": "rolling", "datastore": args.datastore,
                              "cluster": args.cluster, "replicas": args.replicas,
                              "churn": args.churn}
    async with opener(args.cluster) as ds, trio.open_nursery() as nursery:
        result["objects"] = ds.objects
        replicas = []
        for i in range(args.replicas):
            proxy = CountingProxy(ds.port)
            await nursery.start(proxy.serve)
            replicas.append(Replica(i, proxy))
        cold: list[dict[str, Any]] = []
        try:
            for r in replicas:
                r.proc, figures = await start(command, _env(ds, r, []), r.health,
                                              f"replica {r.index}", ds.workdir / f"r{r.index}.log",
                                              ds, r.proxy, args.datastore)
                cold.append(figures)
            if args.churn:
                nursery.start_soon(ds.churn_cmd, args.churn,
                                   args.replicas * (30.0 + SETTLE_S))
            restarts = []
            for r, first in zip(replicas, cold, strict=True):
                assert r.proc is not None
                await stop(r.proc)
                peers = [o.addr for o in replicas if o is not r]
                r.proc, figures = await start(command, _env(ds, r, peers), r.health,
                                              f"replica {r.index}",
                                              ds.workdir / f"r{r.index}.log", ds, r.proxy,
                                              args.datastore)
                restarts.append({"replica": r.index, **figures,
                                 "cold_ready_s": first["ready_s"],
                                 "cold_lists": first["lists"],
                                 "cold_list_bytes": first["list_bytes"]})
            result["restarts"] = restarts
            result.update(await converged(replicas, reader(ds, args.datastore)))
        finally:
            for r in replicas:
                if r.proc is not None:
                    await stop(r.proc)
        result["go_typha_restart"] = None
        if args.go_typha:
            proxy = CountingProxy(ds.port)
            await nursery.start(proxy.serve)
            go = Replica(args.replicas, proxy)
            env = {**_env(ds, go, []), "FELIX_TYPHAK8SSERVICENAME": ""}
            proc, figures = await start([args.go_typha], env, go.health, "go typha",
                                        ds.workdir / "go.log", ds, proxy, args.datastore)
            await stop(proc)
            result["go_typha_restart"] = figures
        result["logs"] = str(ds.workdir)
        nursery.cancel_scope.cancel()
    return result


def table(result: dict[str, Any]) -> str:
    rows = [f"rolling: {result['replicas']} replicas, {result['datastore']} "
            f"{result['cluster']} ({result['objects']} objects), churn {result['churn']}/s",
            f"{'replica':<8}{'lists':>8}{'cold lists':>12}{'bytes':>14}{'cold bytes':>14}"
            f"{'ready s':>9}{'cold s':>9}"]
    for r in result["restarts"]:
        rows.append(f"{r['replica']:<8}{r['lists']:>8}{r['cold_lists']:>12}"
                    f"{r['list_bytes']:>14}{r['cold_list_bytes']:>14}{r['ready_s']:>9}"
                    f"{r['cold_ready_s']:>9}")
    go = result.get("go_typha_restart")
    if go:
        rows.append(f"{'go':<8}{go['lists']:>8}{'':>12}{go['list_bytes']:>14}{'':>14}"
                    f"{go['ready_s']:>9}")
    rows.append(f"converged {result['converged']}: {result['keys_checked']} keys checked, "
                f"lost {result['keys_lost']}, phantom {result['keys_phantom']}")
    return "\n".join(rows)


def main(args: argparse.Namespace) -> dict[str, Any]:
    if args.go_typha:
        args.go_typha = os.path.abspath(args.go_typha)
    result = trio.run(run, args)
    print(table(result))
    return result
