"""The upstream side of a follower's feed (records: :mod:`.wire`): a snapshot, then every
breadcrumb, as they are published here."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import partial

import trio

from ..cache.build import THREAD_BUILD_SIZE
from ..cache.feed import CacheFeed
from . import wire

log = logging.getLogger(__name__)

#: How long the upstream waits for a follower connection's hello.
HELLO_TIMEOUT = 10.0


async def serve_follower(feeds: Mapping[str, CacheFeed],
                         encodings: tuple[wire.Encoding, ...], write_timeout: float,
                         stream: trio.abc.Stream) -> None:
    """One follower connection (a ServerWorkers worker): a snapshot, then every breadcrumb.

    Each breadcrumb's record (its updates and its encodings for the enabled protocols) is
    built once however many followers there are; several published since the last write
    go in one write, each still its own record.  A follower that takes no bytes for
    ``write_timeout`` (ServerWriteTimeoutSecs) is cut off (a worker then exits and is
    started again) rather than holding the chain of breadcrumbs behind it in memory here.
    """
    decoder = wire.Decoder(max_record=4096)
    hello: wire.Record | str | None = None
    with trio.move_on_after(HELLO_TIMEOUT):
        try:
            while hello is None and (data := await stream.receive_some(4096)):
                decoder.feed(data)
                hello = next(iter(decoder), None)
        except (wire.WireError, trio.BrokenResourceError) as exc:
            hello = str(exc)
    if not isinstance(hello, wire.Hello) or hello.syncer_type not in feeds:
        log.error("Worker feed: no valid hello (%s); closing", hello)
        await trio.aclose_forcefully(stream)
        return
    feed = feeds[hello.syncer_type]
    crumb = feed.snapshot_point()
    snapshot = crumb.snapshot()
    encode = partial(wire.encode_snapshot, crumb.status, 0.0, snapshot)
    try:
        # A large snapshot is encoded off the event loop (as the clients' snapshots are).
        data = (await trio.to_thread.run_sync(encode) if len(snapshot) >= THREAD_BUILD_SIZE
                else encode())
        with trio.fail_after(write_timeout):
            await stream.send_all(data)
        while True:
            await feed.wait_published(crumb)
            records = []
            now = trio.current_time()
            while crumb.next is not None:
                crumb = crumb.next
                records.append(wire.encode_crumb(crumb, now - crumb.origin, encodings))
            if records:
                with trio.fail_after(write_timeout):
                    await stream.send_all(b"".join(records))
    except trio.TooSlowError:
        log.error("Worker feed for %s: the worker took nothing for %.0fs; cutting it off",
                  hello.syncer_type, write_timeout)
    except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        log.info("Worker feed for %s ended: %s", hello.syncer_type, exc)
    finally:
        await trio.aclose_forcefully(stream)
