"""``python -m bench reconnect``: what a reconnect costs when clients resume, against a full
snapshot, in one run (docs/resume.md).

Two replicas (A, B) of the real daemon in this process on one memory datastore holding the
cluster; N of our gRPC clients in a separate process (``bench/reconnect_fleet.py``) keeping
their copies.  The clients sync from A; then, four times, they drop, ``--writes`` writes
land during an ``--outage`` of that many seconds, and they come back:

* ``position``: to A again (resume by position);
* ``digest``: to B (another epoch: resume by digest);
* ``cold``: to C, a replica started during the outage from a fresh list (digest);
* ``snapshot``: to A with no resume at all (today's reconnect: the yardstick of each).

Per path: bytes the clients received per client, seconds from reconnect until all are in
sync at the newest breadcrumb, server CPU (this process) over that window.  ``converged``:
every client's tree root and key count equal the serving replica's and the cache's
content equals the datastore's through the invariant checker.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import trio
from _common import cpu_seconds

HERE = os.path.dirname(os.path.abspath(__file__))


async def _settle(*daemons: Any) -> None:
    def seqs() -> list[int]:
        return [d.pipelines["felix"].feed.latest.seq for d in daemons]
    last = seqs()
    while True:
        await trio.sleep(0.3)
        if (now := seqs()) == last:
            return
        last = now


class _Fleet:
    def __init__(self, proc: trio.Process) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc, self._in, self._out = proc, proc.stdin, proc.stdout
        self._buf = b""

    async def close(self) -> None:
        await self._in.aclose()

    async def ask(self, line: str) -> dict[str, Any]:
        await self._in.send_all(line.encode() + b"\n")
        while b"\n" not in self._buf:
            data = await self._out.receive_some(1 << 16)
            if not data:
                raise RuntimeError("the fleet process ended")
            self._buf += data
        reply, self._buf = self._buf.split(b"\n", 1)
        out: dict[str, Any] = json.loads(reply)
        return out


async def run(args: Any) -> dict[str, Any]:
    from trio_typha.config_sources import load_config
    from trio_typha.daemon import Daemon
    from trio_typha.datastore.memory import MemoryStore
    from trio_typha.datastore.synthetic import generate

    store = MemoryStore()
    store.put_all(generate(args.cluster))
    cfg = load_config({}, config_file=None, overrides={
        "DatastoreType": "memory", "ServerHost": "127.0.0.1", "ServerWorkers": "1"})
    writes = int(args.rate) if args.rate else 100
    outage = args.seconds if args.seconds else 10.0
    counter = 0

    def churn() -> None:
        nonlocal counter
        for _ in range(writes):
            counter += 1
            store.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {
                "name": f"reconnect-{counter % 50}", "labels": {"write": str(counter)}}})

    result: dict[str, Any] = {"scenario": "reconnect", "protocol": "grpc",
                              "clients": args.clients, "cluster": args.cluster,
                              "writes": writes, "outage_s": outage, "paths": {}}
    async with trio.open_nursery() as nursery:
        replicas = {}
        for name in ("A", "B"):
            d = await nursery.start(Daemon(cfg, store=store, listen_port=0).run)
            await d.wait_in_sync()
            replicas[name] = d
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")])}
        proc = await trio.lowlevel.open_process(
            [sys.executable, os.path.join(HERE, "reconnect_fleet.py"), str(args.clients)],
            stdin=-1, stdout=-1, env=env)
        fleet = _Fleet(proc)
        a = replicas["A"]
        first = await fleet.ask(f"connect {a.ports['server']} "
                                f"{a.pipelines['felix'].feed.latest.seq} 0")
        result["first_sync"] = first
        measured: dict[str, dict[str, Any]] = {}
        for path in ("position", "digest", "cold", "snapshot"):
            await fleet.ask("drop")
            churn()
            if path == "cold":
                c = await nursery.start(Daemon(cfg, store=store, listen_port=0).run)
                await c.wait_in_sync()
                replicas["C"] = c
            await trio.sleep(outage)
            await _settle(*replicas.values())
            target = {"position": "A", "digest": "B", "cold": "C", "snapshot": "A"}[path]
            d = replicas[target]
            cpu0 = cpu_seconds()
            got = await fleet.ask(f"connect {d.ports['server']} "
                                  f"{d.pipelines['felix'].feed.latest.seq} "
                                  f"{0 if path == 'snapshot' else 1}")
            got["cpu_s"] = round(cpu_seconds() - cpu0, 3)
            got["bytes_per_client"] = round(got["bytes"] / max(args.clients, 1))
            roots = await fleet.ask("roots")
            cache = d.pipelines["felix"].feed.cache
            got["converged"] = roots["roots"] == [[f"{cache.tree.root:016x}", len(cache),
                                                   args.clients]]
            measured[path] = got
        base = measured.pop("snapshot")
        for path, got in measured.items():
            result["paths"][path] = {
                "bytes_per_client": got["bytes_per_client"],
                "snapshot_bytes_per_client": base["bytes_per_client"],
                "bytes_ratio": round(got["bytes_per_client"] / max(base["bytes_per_client"], 1),
                                     4),
                "cpu_s": got["cpu_s"], "snapshot_cpu_s": base["cpu_s"],
                "cpu_ratio": round(got["cpu_s"] / base["cpu_s"], 3) if base["cpu_s"] else None,
                "in_sync_s": got["in_sync_s"], "snapshot_in_sync_s": base["in_sync_s"],
                "methods": got["methods"], "errors": got["errors"],
                "converged": got["converged"]}
        result["snapshot"] = base
        result["converged"] = all(p["converged"] for p in measured.values()) and \
            base["converged"] and _invariant_holds(store, replicas)
        await fleet.close()
        with trio.move_on_after(10):
            await proc.wait()
        for d in replicas.values():
            d.shutdown()
    return result


def _invariant_holds(store: Any, replicas: dict[str, Any]) -> bool:
    """Every replica's felix cache holds what the datastore converts to (the clients' trees
    were compared with the caches' above)."""
    from testbed import invariant
    reports = invariant.check(invariant.read_memory(store), [
        (name, "felix", d.pipelines["felix"].feed.cache) for name, d in replicas.items()])
    for r in reports:
        if not r.ok:
            print(r.summary(), file=sys.stderr)
    return all(r.ok for r in reports)
