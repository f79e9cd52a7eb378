"""What a Typha costs its datastore in a quiet minute after sync (or under a given churn):

    python -m bench quiet --datastore kubernetes|etcdv3 --cluster medium --seconds 60 \\
        [--churn RATE] [--settle 20] [--go-typha PATH] --json

The datastore (the test bed API server in a child process, seeded with the synthetic
cluster; or a real etcd loaded with it as Calico v3 resources) sits behind a counting
proxy (``bench/datastore_proxy.py``).  Each Typha runs as its own process against the proxy,
one after the other on the same datastore: trio-typha (``python -m trio_typha serve``), then
Go Typha when ``--go-typha`` names its binary.  For each, from its start until ``--settle``
seconds (or until it is ready, if later), then a window of ``--seconds``; the figures of that
window: TCP connections opened, requests (HTTP/1.1 request lines, HTTP/2 streams), watch
streams opened (for etcd's gRPC, watch creations on its Watch streams), HTTP/2 PINGs, bytes
each way, and the datastore process's CPU.  ``--churn RATE`` writes that many objects per
second during the window (pods relabelled in the API server; WorkloadEndpoints in etcd).
For Kubernetes the API server's own count (``ApiServer.traffic``) is reported beside the
proxy's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import trio
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from _common import process_cpu_seconds  # noqa: E402
from datastore_proxy import CountingProxy, Counts  # noqa: E402

from testbed.jsonlines import JsonLines, send_json  # noqa: E402

READY_TIMEOUT = 300.0


@dataclass
class Datastore:
    """The datastore under test: where it listens, its process, how to churn it."""

    kind: str  # kubernetes | etcdv3
    port: int
    pid: int
    objects: int
    churn_cmd: Any = None  # (rate, seconds) -> awaitable writes
    traffic: Any = None  # () -> awaitable server-side counts (Kubernetes)
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="quiet-")))

    def typha_env(self, proxy_port: int) -> dict[str, str]:
        """Both Typhas' datastore settings (Go's KDD client reads the Calico client's
        variables, DATASTORE_TYPE and KUBECONFIG; trio-typha reads them too)."""
        if self.kind == "kubernetes":
            path = self.workdir / f"kubeconfig-{proxy_port}"
            path.write_text(yaml.safe_dump(kubeconfig(f"http://127.0.0.1:{proxy_port}")))
            return {"TYPHA_DATASTORETYPE": "kubernetes", "DATASTORE_TYPE": "kubernetes",
                    "KUBECONFIG": str(path)}
        url = f"http://127.0.0.1:{proxy_port}"
        return {"TYPHA_DATASTORETYPE": "etcdv3", "DATASTORE_TYPE": "etcdv3",
                "TYPHA_ETCDENDPOINTS": url, "ETCD_ENDPOINTS": url}


def kubeconfig(server: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "bench", "cluster": {"server": server}}],
            "users": [{"name": "bench", "user": {"token": "bench"}}],
            "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench"}}],
            "current-context": "bench"}


@contextlib.asynccontextmanager
async def kubernetes_datastore(cluster: str) -> AsyncIterator[Datastore]:
    """The test bed API server in a child process (``bench/kdd_startup.py``'s), seeded."""
    proc = await trio.lowlevel.open_process(
        [sys.executable, str(HERE / "kdd_startup.py"), "--serve-apiserver", cluster],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    lines = JsonLines(proc.stdout)
    serving = await lines.json()
    lock = trio.Lock()  # one command at a time on the child's stdin/stdout

    async def ask(cmd: dict[str, Any]) -> dict[str, Any]:
        assert proc.stdin is not None
        async with lock:
            await send_json(proc.stdin, cmd)
            return await lines.json()

    async def churn(rate: float, seconds: float) -> int:
        return int((await ask({"cmd": "churn", "rate": rate, "seconds": seconds}))["writes"])

    async def traffic() -> dict[str, Any]:
        return await ask({"cmd": "traffic"})

    try:
        yield Datastore("kubernetes", serving["port"], proc.pid, serving["objects"],
                        churn, traffic)
    finally:
        await proc.stdin.aclose()
        with trio.move_on_after(10):
            await proc.wait()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


@contextlib.asynccontextmanager
async def etcd_datastore(cluster: str) -> AsyncIterator[Datastore]:
    import etcd_cluster

    from tests.etcd_server import run_etcd
    async with run_etcd() as etcd, etcd.client() as client:
        objects = await etcd_cluster.load(client, cluster)

        async def churn(rate: float, seconds: float) -> int:
            done = await trio.run_process(
                [sys.executable, str(HERE / "etcd_cluster.py"), "churn", "--url", etcd.url,
                 "--cluster", cluster, "--rate", str(rate), "--seconds", str(seconds)],
                capture_stdout=True)
            return int(json.loads(done.stdout)["writes"])

        assert etcd.process is not None
        yield Datastore("etcdv3", etcd.client_port, etcd.process.pid, objects, churn)


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_ready(proc: trio.Process, health_port: int, name: str,
                     poll: float = 0.2) -> None:
    url = f"http://127.0.0.1:{health_port}/readiness"
    async with httpx.AsyncClient(timeout=2.0, trust_env=False) as http:
        with trio.fail_after(READY_TIMEOUT):
            while True:
                if proc.returncode is not None:
                    raise RuntimeError(f"{name} exited with code {proc.returncode}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(url)).status_code == 200:
                        return
                await trio.sleep(poll)


async def stop(proc: trio.Process) -> None:
    """SIGTERM, then SIGKILL after 15 s."""
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    with trio.move_on_after(15):
        await proc.wait()
    if proc.returncode is None:
        proc.kill()
        await proc.wait()


async def measure(name: str, command: list[str], ds: Datastore, args: argparse.Namespace,
                  log: Path) -> dict[str, Any]:
    """One Typha's run against ``ds`` through a fresh counting proxy."""
    async with trio.open_nursery() as nursery:
        proxy = CountingProxy(ds.port)
        await nursery.start(proxy.serve)
        health = free_port()
        env = {**os.environ, **ds.typha_env(proxy.port),
               "TYPHA_SERVERHOST": "127.0.0.1", "TYPHA_SERVERPORT": str(free_port()),
               "TYPHA_HEALTHENABLED": "true", "TYPHA_HEALTHHOST": "127.0.0.1",
               "TYPHA_HEALTHPORT": str(health), "TYPHA_LOGSEVERITYSCREEN": "INFO",
               "TYPHA_LOGFILEPATH": "none", "TYPHA_LOGSEVERITYSYS": "none",
               "TYPHA_SERVERWORKERS": "1", "TYPHA_SHUTDOWNTIMEOUTSECS": "3",
               "TYPHA_PROMETHEUSMETRICSENABLED": "false"}
        t0 = trio.current_time()
        with log.open("ab") as out:
            proc = await trio.lowlevel.open_process(command, env=env, stdin=subprocess.DEVNULL,
                                                    stdout=out, stderr=out)
        try:
            await wait_ready(proc, health, name)
            ready_s = trio.current_time() - t0
            await trio.sleep_until(t0 + max(args.settle, ready_s))
            start, cpu0 = _copy(proxy.counts), process_cpu_seconds([ds.pid])
            server0 = await ds.traffic() if ds.traffic else None
            writes = 0
            if args.churn:
                writes = await ds.churn_cmd(args.churn, args.seconds)
            await trio.sleep_until(t0 + max(args.settle, ready_s) + args.seconds)
            window = proxy.counts.minus(start)
            cpu = process_cpu_seconds([ds.pid]) - cpu0
            server1 = await ds.traffic() if ds.traffic else None
        finally:
            await stop(proc)
        nursery.cancel_scope.cancel()
    result: dict[str, Any] = {
        "ready_s": round(ready_s, 2),
        "window_s": args.seconds,
        "window_from_start_s": round(max(args.settle, ready_s), 2),
        "window": window.as_dict(),
        "since_start": proxy.counts.as_dict(),
        "datastore_cpu_s": round(cpu, 2),
        "churn_writes": writes,
        "log": str(log),
    }
    if server0 is not None and server1 is not None:
        result["server_side"] = {k: server1[k] - server0[k] for k in server1
                                 if isinstance(server1[k], int) and k in server0}
    return result


def _copy(counts: Counts) -> Counts:
    return Counts(**counts.as_dict())


async def run(args: argparse.Namespace) -> dict[str, Any]:
    opener = kubernetes_datastore if args.datastore == "kubernetes" else etcd_datastore
    result: dict[str, Any] = {"scenario": "quiet", "datastore": args.datastore,
                              "cluster": args.cluster, "seconds": args.seconds,
                              "settle": args.settle, "churn": args.churn or 0.0}
    async with opener(args.cluster) as ds:
        result["objects"] = ds.objects
        typhas = [("trio_typha", [sys.executable, "-m", "trio_typha", "serve"])]
        if args.go_typha:
            typhas.append(("go_typha", [args.go_typha]))
        for name, command in typhas:
            result[name] = await measure(name, command, ds, args,
                                         ds.workdir / f"{name}.log")
    result.setdefault("go_typha", None)
    return result


FIGURES = ("connections", "requests", "watch_streams", "pings_sent", "bytes_to_datastore",
           "bytes_from_datastore")


def table(result: dict[str, Any]) -> str:
    names = [n for n in ("trio_typha", "go_typha") if result.get(n)]
    rows = [f"quiet: {result['datastore']} {result['cluster']}, {result['seconds']} s window "
            f"(churn {result['churn']}/s)", f"{'':<22}" + "".join(f"{n:>14}" for n in names)]
    for key in FIGURES:
        rows.append(f"{key:<22}" + "".join(f"{result[n]['window'][key]:>14}" for n in names))
    rows.append(f"{'datastore_cpu_s':<22}"
                + "".join(f"{result[n]['datastore_cpu_s']:>14}" for n in names))
    return "\n".join(rows)


def check_go_typha(args: argparse.Namespace) -> None:
    """``--go-typha`` made absolute, and refused unless it is an executable file."""
    if args.go_typha:
        args.go_typha = os.path.abspath(args.go_typha)
        if not os.access(args.go_typha, os.X_OK):
            raise SystemExit(f"--go-typha {args.go_typha}: not an executable file")


def main(args: argparse.Namespace) -> dict[str, Any]:
    check_go_typha(args)
    result = trio.run(run, args)
    print(table(result))
    return result
