"""The primary's side of the worker feed (upstream/serve.serve_follower), in memory and in
virtual time: what a worker reads mirrors the cache, and a worker that stops reading is cut
off after the write timeout."""

from __future__ import annotations

import trio
import trio.testing

from trio_typha.cache.feed import CacheFeed
from trio_typha.model.kv import SerializedUpdate, SyncStatus
from trio_typha.upstream import wire
from trio_typha.upstream.serve import serve_follower


def upd(key: str, value: bytes | None) -> SerializedUpdate:
    return SerializedUpdate(key, value, revision="1")


async def read_records(stream: trio.abc.Stream, decoder: wire.Decoder, n: int
                       ) -> list[wire.Record]:
    """The next ``n`` records."""
    out: list[wire.Record] = []
    while len(out) < n:
        data = await stream.receive_some(1 << 16)
        assert data, "the feed ended early"
        decoder.feed(data)
        out.extend(decoder)
    return out


async def test_a_worker_mirrors_the_cache_with_the_primarys_bytes(autojump_clock) -> None:
    primary = CacheFeed("felix", max_batch_size=2)
    primary.apply([upd("/a", b"1"), upd("/b", b"2")])
    primary.set_status(SyncStatus.IN_SYNC)
    server, worker = trio.testing.memory_stream_pair()
    encodings = wire.encodings_for("all")
    mirror = CacheFeed("felix", max_batch_size=2)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_follower, {"felix": primary}, encodings, 120.0, server)
        await worker.send_all(wire.encode_hello("felix"))
        decoder = wire.Decoder()
        (snapshot,) = await read_records(worker, decoder, 1)
        assert isinstance(snapshot, wire.Snapshot)
        assert snapshot.status is SyncStatus.IN_SYNC
        mirror.append(snapshot.updates, snapshot.status)
        published = primary.apply([upd("/a", b"1"), upd("/c", b"3"), upd("/b", None)])
        # The no-op on /a was dropped by the primary; what is published is mirrored as is.
        records = await read_records(worker, decoder, len(published))
        for record, crumb in zip(records, published, strict=True):
            assert isinstance(record, wire.Crumb)
            assert (record.seq, record.updates) == (crumb.seq, crumb.updates)
            mine = mirror.append(record.updates, record.status, memo=record.memo)
            for e in encodings:
                assert mine.memo(e.memo_key, lambda _: b"not the primary's") == e.build(crumb)
        assert mirror.cache.values_by_key() == primary.cache.values_by_key()
        nursery.cancel_scope.cancel()


async def test_a_worker_that_reads_nothing_is_cut_off_after_the_write_timeout(
        autojump_clock) -> None:
    primary = CacheFeed("felix")
    primary.apply([upd(f"/k{i}", b"x" * 1000) for i in range(50)])
    server, worker = trio.testing.lockstep_stream_pair()  # a send waits for the reader
    async with trio.open_nursery() as nursery:
        nursery.start_soon(worker.send_all, wire.encode_hello("felix"))
        with trio.fail_after(200):
            start = trio.current_time()
            await serve_follower({"felix": primary}, wire.encodings_for("all"), 60.0, server)
        assert 60.0 <= trio.current_time() - start < 61.0
        nursery.cancel_scope.cancel()


async def test_a_peer_that_is_no_worker_is_closed(autojump_clock) -> None:
    primary = CacheFeed("felix")
    for hello in (wire.encode_hello("no-such-syncer"), b"\x09\x00\x00\x00\x00"):
        server, worker = trio.testing.memory_stream_pair()
        await worker.send_all(hello)
        with trio.fail_after(30):
            await serve_follower({"felix": primary}, (), 60.0, server)
        assert await worker.receive_some(100) == b""
