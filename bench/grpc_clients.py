"""N concurrent grpcio (asyncio) clients of typha.v1.Sync, for bench/fanout.py.

Prints JSON lines on stdout: {"event": "in_sync", ...} once every client is in sync,
{"event": "count", ...} for each line read from stdin, and {"event": "done", ...} with the
delay statistics when stdin closes.  Each client has its own TCP connection (a local
subchannel pool), as each calico-node has its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

import grpc
from _common import churn_delays, count_line

from testbed.fleet import add_tls_arguments, tls_from_arguments
from trio_typha.protocols.grpc import typha_pb2 as pb


class Client:
    def __init__(self, target: str, syncer: str,
                 tls: tuple[grpc.ChannelCredentials, str] | None = None) -> None:
        self.target = target
        self.tls = tls
        self.syncer = syncer
        self.in_sync = asyncio.Event()
        self.delays: list[float] = []
        self.keys = 0
        self.updates = 0
        self.error: str | None = None
        self.last: str = ""  # what it last received, to tell where a stuck client stopped

    async def run(self, stop: asyncio.Event) -> None:
        opts = [("grpc.use_local_subchannel_pool", 1),
                ("grpc.max_receive_message_length", 64 << 20)]
        if self.tls is not None:
            creds, server_name = self.tls
            channel = grpc.aio.secure_channel(
                self.target, creds, options=[*opts, ("grpc.ssl_target_name_override",
                                                     server_name)])
        else:
            channel = grpc.aio.insecure_channel(self.target, options=opts)
        async with channel:
            method = channel.stream_stream(
                "/typha.v1.Sync/Sync", request_serializer=pb.SyncRequest.SerializeToString,
                response_deserializer=pb.SyncResponse.FromString)
            call = method()
            await call.write(pb.SyncRequest(start=pb.SyncRequestStart(
                syncer_type=self.syncer, hostname="bench")))
            finished = False
            try:
                async for msg in call:
                    which = msg.WhichOneof("msg")
                    self.last = which
                    if which == "update":
                        self.updates += len(msg.update.kvs)
                        if finished:
                            self.delays.extend(churn_delays(
                                (kv.value for kv in msg.update.kvs), time.time_ns()))
                        else:
                            self.keys += len(msg.update.kvs)
                    elif which == "finished":
                        finished = True
                        self.in_sync.set()
                    elif which == "ping":
                        await call.write(pb.SyncRequest(ack=pb.Ack(
                            ping_id=msg.ping.id,
                            ping_timestamp_unix_nanos=msg.ping.timestamp_unix_nanos)))
                    if stop.is_set():
                        break
            except grpc.aio.AioRpcError as exc:
                self.error = f"{exc.code().name}: {exc.details()}"
                self.in_sync.set()
            finally:
                call.cancel()


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
    tls = None
    if (paths := tls_from_arguments(args)) is not None:
        def read(path: str) -> bytes:
            with open(path, "rb") as fh:
                return fh.read()
        tls = (grpc.ssl_channel_credentials(read(paths.ca_file), read(paths.key_file),
                                            read(paths.cert_file)), paths.server_name)
    clients = [Client(args.target, args.syncer, tls) for _ in range(args.n)]
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
        count_line(sum(len(c.delays) for c in clients))
    stop.set()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    delays = [d for c in clients for d in c.delays]
    print(json.dumps({"event": "done", "delays": delays,
                      "updates": sum(c.updates for c in clients),
                      "errors": [c.error for c in clients if c.error][:5]}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
