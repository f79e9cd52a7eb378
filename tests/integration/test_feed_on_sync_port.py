"""The cache feed on the sync port (upstream/serve.serve_feed_session): a peer that starts
with the feed's preamble gets the snapshot, every breadcrumb and pings while nothing is
published, is listed in /connections as a feed session, and a bad hello is closed."""

from __future__ import annotations

import trio

from tests.unit.test_worker_feed import read_records as records
from trio_typha.model.kv import SerializedUpdate, SyncStatus
from trio_typha.records import FEED_PREAMBLE
from trio_typha.upstream import wire


async def test_a_relay_follows_the_cache_over_the_sync_port(memory_daemon) -> None:
    daemon = await memory_daemon()
    port = daemon.ports["server"]
    feed = daemon.ctx.feeds["felix"]
    with trio.fail_after(20):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(FEED_PREAMBLE + wire.encode_hello("felix"))
        decoder = wire.Decoder()
        (snapshot,) = await records(stream, decoder, 1)
        assert isinstance(snapshot, wire.Snapshot) and snapshot.status is SyncStatus.IN_SYNC
        assert {u.key: u.value for u in snapshot.updates} == feed.cache.values_by_key()
        rows = [r for r in daemon.connections.snapshot() if r.get("protocol") == "feed"]
        assert len(rows) == 1
        # Idle: pings, each with the primary's own lag (nothing pending: 0).
        ping = (await records(stream, decoder, 1))[0]
        assert ping == wire.Ping(0.0)
        key = next(iter(feed.cache.values_by_key()))
        (crumb,) = feed.apply([SerializedUpdate(key, None, "9")])
        got = await records(stream, decoder, 1)
        while isinstance(got[-1], wire.Ping):  # a ping may have been on its way
            got = await records(stream, decoder, 1)
        assert isinstance(got[-1], wire.Crumb)
        assert (got[-1].seq, got[-1].updates) == (crumb.seq, crumb.updates)
        await stream.aclose()


async def test_a_feed_peer_with_a_bad_hello_is_closed(memory_daemon) -> None:
    daemon = await memory_daemon()
    with trio.fail_after(20):
        stream = await trio.open_tcp_stream("127.0.0.1", daemon.ports["server"])
        await stream.send_all(FEED_PREAMBLE + wire.encode_hello("no-such-syncer"))
        assert await stream.receive_some(100) == b""
