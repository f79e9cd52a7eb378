"""N concurrent Typha-protocol (gob + snappy) clients on trio, for bench/fanout.py.

Speaks the runner's contract through :class:`_common.TrioFleet` (see grpc_clients.py).
"""

from __future__ import annotations

import functools

import trio
from _common import TrioFleet, fleet_args

from trio_typha.client.typha import TyphaClient
from trio_typha.model.kv import SyncStatus


async def one(port: int, syncer: str, fleet: TrioFleet) -> None:
    client = TyphaClient("127.0.0.1", port, syncer_type=syncer, hostname="bench",
                         read_timeout=600)
    in_sync = False
    try:
        async for batch in client.batches():
            fleet.received([u.value for u in batch.updates], after_sync=in_sync)
            if batch.status is SyncStatus.IN_SYNC and not in_sync:
                in_sync = True
                fleet.synced_one()
    except Exception as exc:  # report, don't hide: the runner prints client errors
        fleet.failed(exc, was_synced=in_sync)
    finally:
        await client.aclose()


async def main() -> None:
    args = fleet_args()
    await TrioFleet(args.n).run(functools.partial(one, args.port, args.syncer))


if __name__ == "__main__":
    trio.run(main)
