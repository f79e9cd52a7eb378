"""A ServerWorkers worker's CPU per breadcrumb: mirroring the primary's feed record (its
encodings pre-filled) against mirroring the updates alone and encoding each breadcrumb
itself, as a worker did when it followed the primary's gRPC stream into a cache of its own.

    python bench/worker_feed.py [--cluster small] [--writes 2000] [--json]

The breadcrumbs are real: the daemon runs in this process on the memory datastore and the
churn generator relabels pods (one felix WorkloadEndpoint update per write, as the steady
benchmark).  Both sides then run on the same records, without a socket or clients, so the
figure is the worker's own cost per breadcrumb (decode, cache, encodings), not its writes.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import trio
from _common import memory_daemon

from trio_typha.cache.core import Breadcrumb, SnapshotCache
from trio_typha.datastore.churn import Churn
from trio_typha.upstream import wire


async def breadcrumbs(cluster: str, writes: int) -> list[Breadcrumb]:
    async with memory_daemon(cluster, LogSeverityScreen="WARNING") as server:
        store = server.store
        feed = server.daemon.pipelines["felix"].feed
        start = feed.latest
        churn = Churn(store, 1000.0, policy_fraction=0.0)
        for _ in range(writes):
            churn.step()
            await trio.lowlevel.checkpoint()  # one write, one pass of the pipeline
        await trio.sleep(0.5)
        crumbs: list[Breadcrumb] = []
        crumb = start
        while crumb.next is not None:
            crumb = crumb.next
            crumbs.append(crumb)
    return crumbs


def mirror(records: bytes, *, prefilled: bool, encodings: tuple[wire.Encoding, ...]
           ) -> float:
    """CPU seconds to decode ``records`` into a worker cache and have every encoding."""
    cache = SnapshotCache()
    decoder = wire.Decoder()
    t0 = time.process_time()
    decoder.feed(records)
    for record in decoder:
        assert isinstance(record, wire.Crumb)
        crumb = cache.append(record.updates, record.status, 0.0,
                             memo=record.memo if prefilled else None)
        for e in encodings:  # what the worker's clients send
            e.build(crumb)
    return time.process_time() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cluster", default="small")
    p.add_argument("--writes", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    crumbs = trio.run(breadcrumbs, args.cluster, args.writes)
    encodings = wire.encodings_for("all")
    records = b"".join(wire.encode_crumb(c, 0.0, encodings) for c in crumbs)
    result: dict[str, Any] = {"cluster": args.cluster, "breadcrumbs": len(crumbs),
                              "updates": sum(len(c.updates) for c in crumbs),
                              "record_bytes": len(records)}
    for name, prefilled in (("reencode", False), ("prefilled", True)):
        times = sorted(mirror(records, prefilled=prefilled, encodings=encodings)
                       for _ in range(args.rounds))
        result[f"{name}_us_per_breadcrumb"] = [round(t * 1e6 / len(crumbs), 1)
                                               for t in (times[0], times[-1])]
    result["ratio_best"] = round(result["prefilled_us_per_breadcrumb"][0]
                                 / result["reencode_us_per_breadcrumb"][0], 2)
    for key, value in result.items():
        print(f"{key:<28} {value}")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
