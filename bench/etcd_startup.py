"""Start to ready on a real etcd or the test bed's Kubernetes API server, trio-typha beside
Go Typha in one sitting:

    python -m bench startup --datastore etcdv3|kubernetes --cluster medium [--repeats 3] \\
        [--workers N] [--go-typha PATH] [--baseline TREE] --json

One etcd (``tests/etcd_server.py``) is loaded with the cluster as Calico v3 resources
(``bench/etcd_cluster.py``), or the test bed's API server in a child process is seeded with
it (``bench/kdd_startup.py --serve-apiserver``, as ``quiet`` runs it); then each Typha is
started as its own process straight against it (no proxy: a proxy in Python would tax both on this machine), ``--repeats`` times,
interleaved (trio, Go, trio, Go, ...) so neighbouring runs share the machine's state.  For
each run: wall time from the process's start to its first 200 on ``/readiness`` (polled every
20 ms), the CPU of the process and its children (ServerWorkers' workers) by then, and their
peak RSS (VmHWM) by then.  Ranges and the medians' ratio trio/Go are reported.
``--baseline TREE`` adds another trio-typha source tree (say ``git worktree add`` of the
commit before a change) to the rotation as ``trio_typha_baseline``, for before/after
figures from one sitting, and reports the medians' ratio to it.

trio-typha runs from byte code compiled beforehand (``compileall`` into a
``PYTHONPYCACHEPREFIX`` of the run's own), as an installed wheel does (pip compiles it): a
checkout run under ``PYTHONDONTWRITEBYTECODE=1`` would compile every module on each start,
0.3 s of CPU no deployment pays.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import trio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from quiet import (  # noqa: E402
    Datastore,
    check_go_typha,
    etcd_datastore,
    free_port,
    kubernetes_datastore,
    stop,
    wait_ready,
)

POLL_S = 0.02


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (from /proc/PID/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    todo.extend(int(c) for c in fh.read().split())
    return out


def _cpu(pid: int) -> float:
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
        total = int(fields[11]) + int(fields[12])
    return total / tick


def _hwm_mib(pid: int) -> float:
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _env(ds: Datastore, health: int, workers: int,
         pycache: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if pycache:
        env["PYTHONPYCACHEPREFIX"] = pycache
    # straight at the datastore's own port (no counting proxy)
    return {**env, **ds.typha_env(ds.port),
            "TYPHA_SERVERHOST": "127.0.0.1", "TYPHA_SERVERPORT": str(free_port()),
            "TYPHA_HEALTHENABLED": "true", "TYPHA_HEALTHHOST": "127.0.0.1",
            "TYPHA_HEALTHPORT": str(health), "TYPHA_LOGSEVERITYSCREEN": "INFO",
            "TYPHA_LOGFILEPATH": "none", "TYPHA_LOGSEVERITYSYS": "none",
            "TYPHA_SERVERWORKERS": str(workers), "TYPHA_SHUTDOWNTIMEOUTSECS": "3",
            "TYPHA_PROMETHEUSMETRICSENABLED": "false"}


def compile_package(pycache: str, tree: str | None = None) -> None:
    """trio-typha's byte code (this one's, or ``tree``'s) into ``pycache`` (see the module
    docstring)."""
    import trio_typha
    package = (os.path.join(tree, "trio_typha") if tree
               else os.path.dirname(trio_typha.__file__))
    subprocess.run([sys.executable, "-m", "compileall", "-q", package], check=True,
                   env={**os.environ, "PYTHONPYCACHEPREFIX": pycache},
                   stdout=subprocess.DEVNULL)


async def one_run(command: list[str], ds: Datastore, workers: int,
                  log: Path, pycache: str | None = None,
                  tree: str | None = None) -> dict[str, Any]:
    health = free_port()
    t0 = trio.current_time()
    env = _env(ds, health, workers, pycache)
    with log.open("ab") as out:
        # ``python -m`` puts its working directory first on sys.path: run in ``tree`` and
        # its package is the one imported, ahead of this checkout's editable install.
        proc = await trio.lowlevel.open_process(
            command, env=env, cwd=tree, stdin=subprocess.DEVNULL,
            stdout=out, stderr=out)
    try:
        await wait_ready(proc, health, command[0], poll=POLL_S)
        ready = trio.current_time() - t0
        pids = _tree(proc.pid)
        cpu = sum(_cpu(p) for p in pids)
        rss = sum(_hwm_mib(p) for p in pids)
    finally:
        await stop(proc)
    return {"ready_s": round(ready, 3), "cpu_s": round(cpu, 2),
            "peak_rss_mib": round(rss, 1), "processes": len(pids)}


def _range(runs: list[dict[str, Any]], key: str) -> dict[str, float]:
    values = [r[key] for r in runs]
    return {"min": min(values), "median": round(statistics.median(values), 3),
            "max": max(values)}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    serve = [sys.executable, "-m", "trio_typha", "serve"]
    typhas: list[tuple[str, list[str], str | None]] = [("trio_typha", serve, None)]
    if args.baseline:
        typhas.append(("trio_typha_baseline", serve, args.baseline))
    if args.go_typha:
        typhas.append(("go_typha", [args.go_typha], None))
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in typhas}
    opener = kubernetes_datastore if args.datastore == "kubernetes" else etcd_datastore
    async with opener(args.cluster) as ds:
        for _ in range(args.repeats):
            for name, command, tree in typhas:
                workers = 1 if name == "go_typha" else args.workers
                runs[name].append(await one_run(command, ds, workers,
                                                ds.workdir / f"{name}.log",
                                                args.pycache, tree))
        result: dict[str, Any] = {"scenario": "startup", "datastore": args.datastore,
                                  "cluster": args.cluster, "objects": ds.objects,
                                  "workers": args.workers, "repeats": args.repeats,
                                  "logs": str(ds.workdir)}
    for name, rs in runs.items():
        result[name] = {"runs": rs, **{k: _range(rs, k)
                                       for k in ("ready_s", "cpu_s", "peak_rss_mib")}}
    for other, key in (("go_typha", "ratio_trio_to_go"),
                       ("trio_typha_baseline", "ratio_to_baseline")):
        if other in result:
            result[key] = {
                k: round(result["trio_typha"][k]["median"] / result[other][k]["median"], 2)
                for k in ("ready_s", "cpu_s", "peak_rss_mib") if result[other][k]["median"]}
    return result


def table(result: dict[str, Any]) -> str:
    names = [n for n in ("trio_typha", "trio_typha_baseline", "go_typha") if n in result]
    rows = [f"startup: {result['datastore']} {result['cluster']} ({result['objects']} objects), "
            f"{result['repeats']} runs each, ServerWorkers={result['workers']}"]
    for key in ("ready_s", "cpu_s", "peak_rss_mib"):
        cells = [f"{n}: {result[n][key]['min']}-{result[n][key]['max']} "
                 f"(median {result[n][key]['median']})" for n in names]
        rows.append(f"{key:<14}" + "   ".join(cells))
    for key, label in (("ratio_to_baseline", "trio/baseline"), ("ratio_trio_to_go", "trio/go")):
        if key in result:
            rows.append(f"{label:<14}{result[key]}")
    return "\n".join(rows)


def main(args: argparse.Namespace) -> dict[str, Any]:
    check_go_typha(args)
    with tempfile.TemporaryDirectory(prefix="etcd-startup-pyc-") as pycache:
        compile_package(pycache)
        if args.baseline:
            args.baseline = os.path.abspath(args.baseline)
            compile_package(pycache, args.baseline)
        args.pycache = pycache
        result = trio.run(run, args)
    print(table(result))
    return result
