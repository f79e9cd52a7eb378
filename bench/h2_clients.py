"""N concurrent typha.v1.Sync clients on trio_typha's own h2 client, for bench/fanout.py.

Same contract as grpc_clients.py; used to tell server limits from grpcio-client ones.
"""

from __future__ import annotations

import functools

import trio
from _common import TrioFleet, fleet_args

from trio_typha.client import grpc as g


async def one(port: int, syncer: str, fleet: TrioFleet) -> None:
    synced = False
    try:
        stream = await g.open_stream("127.0.0.1", port)
        async with stream:
            async for ev in g.sync(stream, syncer, hostname="bench"):
                if isinstance(ev, g.Updates):
                    fleet.received([u.value for u in ev.updates], after_sync=synced)
                elif isinstance(ev, g.Finished) and not synced:
                    synced = True
                    fleet.synced_one()
    except Exception as exc:  # reported by the runner
        fleet.failed(exc, was_synced=synced)


async def main() -> None:
    args = fleet_args()
    await TrioFleet(args.n).run(functools.partial(one, args.port, args.syncer))


if __name__ == "__main__":
    trio.run(main)
