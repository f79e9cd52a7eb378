"""N concurrent grpcio (asyncio) clients of typha.v1.Sync, for bench/fanout.py.

Prints JSON lines on stdout: {"event": "in_sync", ...} once every client is in sync,
{"event": "count", ...} for each line read from stdin, and {"event": "done", ...} with the
delay statistics when stdin closes.  The clients are the one grpcio client's asyncio driver
(``tests/grpcio_sync.AioSync``), each on its own TCP connection, as each calico-node has its
own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from _common import churn_delays, count_line  # noqa: E402

from testbed.fleet import add_tls_arguments, tls_from_arguments  # noqa: E402
from tests.grpcio_sync import AioSync  # noqa: E402


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--target", required=True)
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--syncer", default="felix")
    p.add_argument("--sync-timeout", type=float, default=180.0,
                   help="give up waiting for stragglers after this long (they are reported)")
    add_tls_arguments(p)
    args = p.parse_args()
    stop = asyncio.Event()
    delays: list[float] = []

    def on_update(kvs: Sequence[Any]) -> None:
        delays.extend(churn_delays((kv.value for kv in kvs), time.time_ns()))

    tls = tls_from_arguments(args)
    clients = [AioSync(args.target, args.syncer, tls=tls, on_update=on_update)
               for _ in range(args.n)]
    t0 = time.monotonic()
    tasks = [asyncio.create_task(c.run(stop)) for c in clients]
    waits = [asyncio.create_task(c.in_sync.wait()) for c in clients]
    await asyncio.wait(waits, timeout=args.sync_timeout)
    stuck = [c for c in clients if not c.in_sync.is_set()]
    print(json.dumps({"event": "in_sync", "seconds": time.monotonic() - t0,
                      "keys_min": min(c.keys for c in clients),
                      "not_in_sync": len(stuck),
                      "stuck": [{"keys": c.keys, "last": c.last} for c in stuck][:5],
                      "errors": [c.error for c in clients if c.error][:5]}), flush=True)
    loop = asyncio.get_running_loop()
    # A count line per line on stdin, until the runner closes it.
    while await loop.run_in_executor(None, sys.stdin.readline):
        count_line(len(delays))
    stop.set()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    print(json.dumps({"event": "done", "delays": delays,
                      "updates": sum(c.updates for c in clients),
                      "errors": [c.error for c in clients if c.error][:5]}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
