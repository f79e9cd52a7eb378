"""The client fleet of ``python -m bench reconnect``: N of our gRPC clients (trio_typha's
own, on trio) in one process, each keeping its KV map, position and hash tree between
streams.  Driven by lines on stdin, answered by one JSON line each on stdout:

    connect PORT TARGET_SEQ RESUME   every client opens a stream (RESUME 1: resuming from
                                     what it kept; 0: a plain snapshot) and counts it in
                                     sync at ``finished`` once its seq is at TARGET_SEQ;
                                     answered when all are: bytes, seconds, starts by method
    drop                             every stream is closed
    roots                            the distinct tree roots and KV counts the clients hold
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from typing import Any

import trio

from trio_typha.cache.digest import KeyTree
from trio_typha.client import grpc as g
from trio_typha.client.view import SyncView


class Fleet:
    def __init__(self, n: int) -> None:
        self.views = [SyncView(tree=KeyTree()) for _ in range(n)]
        self.scope: trio.CancelScope | None = None

    async def connect(self, nursery: trio.Nursery, port: int, target: int,
                      resume: bool) -> dict[str, Any]:
        done = trio.Event()
        state: dict[str, Any] = {"left": len(self.views), "bytes": 0, "methods": Counter(),
                                 "errors": []}
        started = time.monotonic()

        async def one(i: int, view: SyncView) -> None:
            try:
                stream = g.CountingStream(await g.open_stream("127.0.0.1", port))
                reported = False
                async with stream:
                    async for ev in g.sync(stream, "felix", hostname=f"fleet-{i}",
                                           resume=g.resume_of(view) if resume else None):
                        g.apply_event(view, ev)
                        if isinstance(ev, g.Header):
                            state["methods"][ev.resume] += 1
                        if (not reported and view.snapshot_done and view.in_sync
                                and view.seq >= target):
                            reported = True
                            state["bytes"] += stream.received
                            state["left"] -= 1
                            if not state["left"]:
                                done.set()
            except (OSError, g.GrpcError, trio.BrokenResourceError) as exc:
                state["errors"].append(f"{type(exc).__name__}: {exc}")
                state["left"] -= 1
                if not state["left"]:
                    done.set()

        scope = self.scope = trio.CancelScope()

        async def run_all() -> None:
            with scope:
                async with trio.open_nursery() as inner:
                    for i, view in enumerate(self.views):
                        inner.start_soon(one, i, view)
        nursery.start_soon(run_all)
        await done.wait()
        return {"bytes": state["bytes"], "in_sync_s": round(time.monotonic() - started, 3),
                "methods": dict(state["methods"]), "errors": state["errors"][:5]}

    def drop(self) -> dict[str, Any]:
        if self.scope is not None:
            self.scope.cancel()
        return {"dropped": True}

    def roots(self) -> dict[str, Any]:
        roots = Counter((v.tree.root if v.tree else 0, len(v.kvs)) for v in self.views)
        return {"roots": [[f"{r:016x}", n, c] for (r, n), c in roots.items()]}


async def main() -> None:
    fleet = Fleet(int(sys.argv[1]))
    stdin = trio.lowlevel.FdStream(0)
    buf = b""
    async with trio.open_nursery() as nursery:
        while True:
            while b"\n" not in buf:
                data = await stdin.receive_some(4096)
                if not data:
                    nursery.cancel_scope.cancel()
                    return
                buf += data
            line, buf = buf.split(b"\n", 1)
            cmd = line.decode().split()
            if cmd[0] == "connect":
                out = await fleet.connect(nursery, int(cmd[1]), int(cmd[2]), cmd[3] == "1")
            elif cmd[0] == "drop":
                out = fleet.drop()
                await trio.sleep(0.2)
            elif cmd[0] == "roots":
                out = fleet.roots()
            else:
                nursery.cancel_scope.cancel()
                return
            print(json.dumps(out), flush=True)


if __name__ == "__main__":
    trio.run(main)
