"""A gob client that stops reading must not stall the others, and is dropped in time."""

from __future__ import annotations

import trio
import trio.lowlevel

from trio_typha.client.typha import Connected, TyphaClient
from trio_typha.config_sources import load_config
from trio_typha.daemon import Daemon
from trio_typha.datastore.memory import MemoryStore
from trio_typha.datastore.synthetic import generate
from trio_typha.model.kv import SyncStatus


async def test_stuck_reader_does_not_stall_others(nursery) -> None:
    store = MemoryStore()
    store.put_all(generate("tiny"))
    cfg = load_config({}, config_file=None, overrides={
        "DatastoreType": "memory", "ServerHost": "127.0.0.1", "ServerWorkers": "1", "ServerWriteTimeoutSecs": "2"})
    daemon = await nursery.start(Daemon(cfg, store=store, listen_port=0).run)
    with trio.fail_after(10):
        await daemon.wait_in_sync()
    port = daemon.ports["server"]

    # A legacy (uncompressed) client, so the bulk below really fills its socket buffers.
    stuck = TyphaClient("127.0.0.1", port, syncer_type="felix", hostname="stuck",
                        read_timeout=600, compression=False)
    with trio.fail_after(10):
        async for event in stuck:
            if isinstance(event, Connected):
                break  # ... and never read again
    good = TyphaClient("127.0.0.1", port, syncer_type="felix", hostname="good")
    with trio.fail_after(10):
        await good.wait_for_status(SyncStatus.IN_SYNC)

    nets = [f"10.{i // 250}.{i % 250}.1/32" for i in range(1000)]
    sets = 800  # ~20 KB each, ~16 MB in all: more than the stuck socket's buffers hold
    got_all = trio.Event()

    async def read_good() -> None:
        # Reads all along, as a real agent does: the server streams while the sets are
        # still being written, and a client that stopped reading would be dropped too.
        async for _ in good:
            if sum(k.startswith("/calico/v1/netset/bulk-") for k in good.kvs) >= sets:
                got_all.set()

    nursery.start_soon(read_good)
    with trio.fail_after(60):
        for i in range(sets):
            store.put({"apiVersion": "projectcalico.org/v3", "kind": "GlobalNetworkSet",
                       "metadata": {"name": f"bulk-{i}"}, "spec": {"nets": nets}})
            if i % 20 == 0:
                await trio.lowlevel.checkpoint()
        # The good client sees every set while the stuck one blocks.
        await got_all.wait()
        # The stuck client is dropped once a write has been blocked for the write timeout.
        # (the sessions registry has no change event to wait on, so poll it)
        while any(s.hostname == "stuck" for s in daemon.ctx.sessions.values()):  # noqa: ASYNC110
            await trio.sleep(0.2)
    assert {s.hostname for s in daemon.ctx.sessions.values()} == {"good"}
    await good.aclose()
    await stuck.aclose()
    daemon.shutdown()
