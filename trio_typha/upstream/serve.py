"""The upstream side of a follower's feed (records: :mod:`.wire`): a snapshot, then every
breadcrumb, as they are published here, and a ping while none is.

Served to the ServerWorkers workers on the primary's private socket, and on the sync port
to relay tiers (:func:`serve_feed_session`: a connection that began with the feed's
preamble, under the port's TLS and client identity rules, counted and drained as a client).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import partial

import trio

from ..cache.build import THREAD_BUILD_SIZE
from ..cache.core import Breadcrumb
from ..cache.feed import CacheFeed
from ..records import FEED_PREAMBLE
from ..sessions.connections import Connection, Session, State
from ..sessions.context import ServerContext
from . import wire

log = logging.getLogger(__name__)

#: How long the upstream waits for a follower connection's hello.
HELLO_TIMEOUT = 10.0


async def serve_follower(feeds: Mapping[str, CacheFeed],
                         encodings: tuple[wire.Encoding, ...], write_timeout: float,
                         stream: trio.abc.Stream, *, prefix: bytes = b"",
                         conn: Connection | None = None,
                         ctx: ServerContext | None = None) -> None:
    """One follower connection (a ServerWorkers worker): a snapshot, then every breadcrumb.

    Each breadcrumb's record (its updates and its encodings for the enabled protocols) is
    built once however many followers there are; several published since the last write
    go in one write, each still its own record.  A follower that takes no bytes for
    ``write_timeout`` (ServerWriteTimeoutSecs) is cut off (a worker then exits and is
    started again) rather than holding the chain of breadcrumbs behind it in memory here.
    ``prefix``: bytes of the hello already read; ``conn`` and ``ctx``: the sync port's
    record of the connection, on which the feed is registered as a session.
    """
    decoder = wire.Decoder(max_record=4096)
    decoder.feed(prefix)
    hello: wire.Record | str | None = None
    with trio.move_on_after(HELLO_TIMEOUT):
        try:
            hello = next(iter(decoder), None)
            while hello is None and (data := await stream.receive_some(4096)):
                decoder.feed(data)
                hello = next(iter(decoder), None)
        except (wire.WireError, trio.BrokenResourceError) as exc:
            hello = str(exc)
    if not isinstance(hello, wire.Hello) or hello.syncer_type not in feeds:
        log.error("Feed from %s: no valid hello (%s); closing",
                  conn.peer if conn is not None else "a worker", hello)
        await trio.aclose_forcefully(stream)
        return
    feed = feeds[hello.syncer_type]
    if conn is not None and ctx is not None:
        with ctx.registry.session(conn, "feed", syncer_type=hello.syncer_type,
                                  feed=feed, state=State.SNAPSHOT) as session:
            session.cancel_scope = conn.cancel_scope
            await _serve(feed, hello.syncer_type, encodings, write_timeout, stream, session)
    else:
        await _serve(feed, hello.syncer_type, encodings, write_timeout, stream, None)


async def _serve(feed: CacheFeed, syncer_type: str, encodings: tuple[wire.Encoding, ...],
                 write_timeout: float, stream: trio.abc.Stream, session: Session | None
                 ) -> None:
    crumb = feed.snapshot_point()
    snapshot = crumb.snapshot()
    encode = partial(wire.encode_snapshot, crumb.status,
                     feed.staleness(trio.current_time()), snapshot)
    try:
        # A large snapshot is encoded off the event loop (as the clients' snapshots are).
        data = (await trio.to_thread.run_sync(encode) if len(snapshot) >= THREAD_BUILD_SIZE
                else encode())
        with trio.fail_after(write_timeout):
            await stream.send_all(data)
        _sent(session, crumb, len(data))
        while True:
            with trio.move_on_after(wire.PING_INTERVAL):
                await feed.wait_published(crumb)
            records = []
            now = trio.current_time()
            while crumb.next is not None:
                crumb = crumb.next
                records.append(wire.encode_crumb(crumb, now - crumb.origin, encodings))
            if not records:  # quiet: say so, with how far behind the datastore we are
                records.append(wire.encode_ping(feed.staleness(now)))
            data = b"".join(records)
            with trio.fail_after(write_timeout):
                await stream.send_all(data)
            _sent(session, crumb, len(data))
    except trio.TooSlowError:
        log.error("Feed for %s: the follower took nothing for %.0fs; cutting it off",
                  syncer_type, write_timeout)
    except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        log.info("Feed for %s ended: %s", syncer_type, exc)
    finally:
        await trio.aclose_forcefully(stream)


def _sent(session: Session | None, crumb: Breadcrumb, nbytes: int) -> None:
    if session is not None:
        session.state = State.STREAMING
        session.sent(nbytes)
        session.reached(crumb.seq, crumb.timestamp)


async def serve_feed_session(encodings: tuple[wire.Encoding, ...], stream: trio.abc.Stream,
                             ctx: ServerContext, *, prefix: bytes, conn: Connection) -> None:
    """The sync port's session for a connection that began with :data:`FEED_PREAMBLE`
    (a relay tier following this process)."""
    conn.protocol = "feed"
    await serve_follower(ctx.feeds, encodings, ctx.settings.write_timeout, stream,
                         prefix=prefix.removeprefix(FEED_PREAMBLE), conn=conn, ctx=ctx)
