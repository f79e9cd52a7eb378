"""N concurrent Typha-protocol (gob + snappy) clients on trio, for bench/fanout.py.

Same output contract as grpc_clients.py: an "in_sync" JSON line once every client is in
sync, and a "done" line with the delays when stdin closes.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time

import trio

from trio_typha.client.typha import TyphaClient
from trio_typha.model.kv import SyncStatus

CHURN = re.compile(rb'"churn-ts":"(\d+)"')


async def one(port: int, syncer: str, delays: list[float], synced: list[float],
              stats: dict, all_synced: trio.Event, n: int, t0: float) -> None:
    client = TyphaClient("127.0.0.1", port, syncer_type=syncer, hostname="bench",
                         read_timeout=600)
    in_sync = False
    try:
        async for batch in client.batches():
            now = time.time_ns()
            stats["updates"] += len(batch.updates)
            if in_sync:
                for u in batch.updates:
                    m = CHURN.search(u.value or b"")
                    if m:
                        delays.append((now - int(m.group(1))) / 1e9)
            if batch.status is SyncStatus.IN_SYNC and not in_sync:
                in_sync = True
                synced.append(time.monotonic() - t0)
                if len(synced) == n:
                    all_synced.set()
    except Exception as exc:  # report, don't hide: the runner prints client errors
        stats["errors"].append(f"{type(exc).__name__}: {exc}")
        if not in_sync:
            synced.append(time.monotonic() - t0)
            if len(synced) == n:
                all_synced.set()
    finally:
        await client.aclose()


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--syncer", default="felix")
    args = p.parse_args()
    delays: list[float] = []
    synced: list[float] = []
    stats: dict = {"updates": 0, "errors": []}
    all_synced = trio.Event()
    t0 = time.monotonic()
    async with trio.open_nursery() as nursery:
        for _ in range(args.n):
            nursery.start_soon(one, args.port, args.syncer, delays, synced, stats, all_synced,
                               args.n, t0)
        await all_synced.wait()
        print(json.dumps({"event": "in_sync", "seconds": max(synced),
                          "errors": stats["errors"][:5]}), flush=True)
        await trio.to_thread.run_sync(sys.stdin.read)
        nursery.cancel_scope.cancel()
    print(json.dumps({"event": "done", "delays": delays, "updates": stats["updates"],
                      "errors": stats["errors"][:5]}), flush=True)


if __name__ == "__main__":
    trio.run(main)
