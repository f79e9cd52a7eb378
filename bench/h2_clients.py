"""N concurrent typha.v1.Sync clients on trio_typha's own h2 client, for bench/fanout.py.

Same output contract as grpc_clients.py; used to tell server limits from grpcio-client ones.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time

import trio

from trio_typha.client import grpc as g

CHURN = re.compile(rb'"churn-ts":"(\d+)"')


async def one(port: int, syncer: str, delays: list[float], state: dict, done: trio.Event,
              n: int, t0: float) -> None:
    synced = False
    try:
        stream = await g.open_stream("127.0.0.1", port)
        async with stream:
            async for ev in g.sync(stream, syncer, hostname="bench"):
                if isinstance(ev, g.Updates):
                    state["updates"] += len(ev.updates)
                    if synced:
                        now = time.time_ns()
                        for u in ev.updates:
                            m = CHURN.search(u.value or b"")
                            if m:
                                delays.append((now - int(m.group(1))) / 1e9)
                elif isinstance(ev, g.Finished) and not synced:
                    synced = True
                    state["synced"].append(time.monotonic() - t0)
                    if len(state["synced"]) == n:
                        done.set()
    except Exception as exc:  # reported by the runner
        state["errors"].append(f"{type(exc).__name__}: {exc}")
        if not synced:
            state["synced"].append(time.monotonic() - t0)
            if len(state["synced"]) == n:
                done.set()


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--syncer", default="felix")
    args = p.parse_args()
    delays: list[float] = []
    state: dict = {"updates": 0, "errors": [], "synced": []}
    done = trio.Event()
    t0 = time.monotonic()
    async with trio.open_nursery() as nursery:
        for _ in range(args.n):
            nursery.start_soon(one, args.port, args.syncer, delays, state, done, args.n, t0)
        await done.wait()
        print(json.dumps({"event": "in_sync", "seconds": max(state["synced"]),
                          "errors": state["errors"][:5]}), flush=True)
        await trio.to_thread.run_sync(sys.stdin.read)
        nursery.cancel_scope.cancel()
    print(json.dumps({"event": "done", "delays": delays, "updates": state["updates"],
                      "errors": state["errors"][:5]}), flush=True)


if __name__ == "__main__":
    trio.run(main)
