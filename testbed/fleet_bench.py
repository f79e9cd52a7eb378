"""``python -m testbed.fleet_bench``: agents of :mod:`testbed.fleet` speaking the benchmark
runner's JSON-lines contract, the one the Go fleet (tests/gotools/fleet.go) and the grpcio
fleet (bench/grpc_clients.py) speak too.

    python -m testbed.fleet_bench --protocol typha|grpc --addr HOST:PORT --n N
                                  [--syncer felix] [--ca F --cert F --key F --server-name S]

Every agent dials at once.  On stdout: ``{"event": "in_sync", ...}`` once every agent is in
sync or has failed (or ``--sync-timeout`` passed: the rest are reported), then
``{"event": "count", "stamped": N}`` for each line read from stdin (churn-stamped updates
received in sync so far), and ``{"event": "done", "delays": [...], ...}`` when stdin closes.
The ``in_sync`` line has each agent's wait for its first message (``first_waits``), the
``done`` line how many were still in sync (``in_sync_at_end``), as the Go fleet's do.
Each agent connects once; one whose connection fails or ends is counted (``lost``) and its
error reported.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from typing import Any

import trio

from trio_typha.client.discovery import ReconnectPolicy

from .fleet import AgentGroup, AgentSpec, DiscoverySpec, add_tls_arguments, tls_from_arguments

#: Agents dial at once, and once: one whose connection fails or ends is reported and stays
#: down, so a benchmark's counts never include a second snapshot.
POLICY = ReconnectPolicy(startup_delay_max=0.0)


def _line(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _errors(group: AgentGroup) -> list[str]:
    return [a.last_error for a in group.agents if a.last_error][:5]


async def run(args: argparse.Namespace) -> None:
    tls = tls_from_arguments(args)
    specs = [AgentSpec(f"{args.hostname}-{i}", args.protocol, args.syncer)
             for i in range(args.n)]
    group = AgentGroup(specs, DiscoverySpec(static=(args.addr,)), POLICY, tls=tls,
                       read_timeout=args.read_timeout, reconnect=False, receipts=False)
    t0 = trio.current_time()
    async with trio.open_nursery() as nursery:
        await nursery.start(group.run)
        with trio.move_on_after(args.sync_timeout):
            await group.wait_until(lambda g: all(
                a.first_in_sync is not None or a.failures or a.drops for a in g.agents))
        stuck = [a for a in group.agents if a.first_in_sync is None]
        _line({"event": "in_sync", "seconds": trio.current_time() - t0,
               "keys_min": min(len(a.kvs) for a in group.agents) if group.agents else 0,
               "not_in_sync": len(stuck),
               "stuck": [{"agent": a.spec.name, "status": a.status.name} for a in stuck][:5],
               "errors": _errors(group),
               # Seconds from the start to each agent's first message (-1: none came).
               "first_waits": [round(a.connects[0] - a.started_at, 3) if a.connects else -1
                               for a in group.agents]})
        stdin = trio.lowlevel.FdStream(os.dup(0))
        while data := await stdin.receive_some(4096):
            for _ in range(data.count(b"\n")):
                _line({"event": "count", "stamped": len(group.delays)})
        in_sync_at_end = sum(a.in_sync for a in group.agents)
        nursery.cancel_scope.cancel()
    _line({"event": "done", "in_sync_at_end": in_sync_at_end, "delays": group.delays,
           "updates": sum(a.updates for a in group.agents),
           "lost": sum(bool(a.failures or a.drops) for a in group.agents),
           "errors": _errors(group)})


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m testbed.fleet_bench",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--protocol", choices=("typha", "grpc"), required=True)
    p.add_argument("--addr", required=True, metavar="HOST:PORT")
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--syncer", default="felix")
    p.add_argument("--hostname", default="bench", help="agent i is HOSTNAME-i")
    p.add_argument("--sync-timeout", type=float, default=180.0)
    p.add_argument("--read-timeout", type=float, default=600.0,
                   help="typha protocol: seconds without a message before the client gives up")
    add_tls_arguments(p)
    args = p.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        trio.run(run, args)


if __name__ == "__main__":
    main()
