"""The two ways a relay tier follows an upstream Typha, one connection per syncer type.

* :class:`FeedSource`: another trio-typha's cache feed on its sync port
  (:mod:`trio_typha.upstream.wire`, after :data:`~trio_typha.records.FEED_PREAMBLE`): its
  breadcrumbs arrive numbered, with the encodings the upstream made of them (the relay
  publishes them byte for byte and encodes nothing the upstream already has) and with how
  old their oldest datastore event is, so lag adds up along the chain.
* :class:`GobSource`: Typha's own protocol, as calico-node speaks it
  (:class:`~trio_typha.client.typha.TyphaClient`), so Go Typha can be the upstream: a
  snapshot up to the first status message, then update batches, statuses and pings (whose
  timestamps give the lag: the upstream's clock against ours).

Both raise :class:`UpstreamLost` saying why a connection ended; silence past the deadline is
one of the reasons, named with the deadline.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import trio

from ..client.discovery import TyphaAddress
from ..client.typha import (
    Connected,
    Disconnected,
    KVsReceived,
    PingAnswered,
    SyncStatusReceived,
    TyphaClient,
)
from ..model.kv import SerializedUpdate, SyncStatus
from ..records import FEED_PREAMBLE
from ..tls.client import tls_handshake
from ..tls.diagnosis import TLSFailure
from ..upstream import wire

#: Dialling an upstream (TCP and TLS) may take this long, as calico-node allows.
DIAL_TIMEOUT = 10.0


class UpstreamLost(Exception):
    """The connection to an upstream ended; ``after_data``: it had delivered a snapshot."""

    def __init__(self, reason: str, *, after_data: bool) -> None:
        super().__init__(reason)
        self.after_data = after_data


class Sink(Protocol):
    """What a source hands over (:class:`~.pipeline.RelayPipeline`)."""

    def connected(self) -> None: ...
    def snapshot(self, updates: Sequence[SerializedUpdate], status: SyncStatus,
                 lag: float) -> None: ...
    def crumb(self, record: wire.Crumb) -> None: ...
    def updates(self, updates: Sequence[SerializedUpdate]) -> None: ...
    def status(self, status: SyncStatus) -> None: ...
    def lag(self, seconds: float) -> None: ...
    def pending(self, seconds: float) -> None: ...


class Source(Protocol):
    protocol: str

    async def follow(self, address: TyphaAddress, syncer_type: str, sink: Sink, *,
                     deadline: float, on_first: Callable[[], None]) -> None:
        """Follow ``address`` until the connection ends (raises :class:`UpstreamLost`);
        ``on_first`` once the first snapshot is in the sink."""
        ...


@dataclass(frozen=True)
class UpstreamTLS:
    """How a relay authenticates to its upstreams and checks them (calico-node's Typha*
    TLS parameters, as UpstreamTypha*)."""

    context: ssl.SSLContext
    server_cn: str = ""
    server_uri_san: str = ""


class FeedSource:
    """A trio-typha upstream's feed over TCP (and TLS when configured)."""

    protocol = "feed"

    def __init__(self, tls: UpstreamTLS | None = None) -> None:
        self.tls = tls

    async def _dial(self, address: TyphaAddress) -> trio.abc.Stream:
        with trio.fail_after(DIAL_TIMEOUT):
            stream: trio.abc.Stream = await trio.open_tcp_stream(address.host, address.port)
            if self.tls is not None:
                try:
                    stream = await tls_handshake(
                        stream, self.tls.context, server_cn=self.tls.server_cn,
                        server_uri_san=self.tls.server_uri_san)
                except BaseException:
                    await trio.aclose_forcefully(stream)
                    raise
        return stream

    async def follow(self, address: TyphaAddress, syncer_type: str, sink: Sink, *,
                     deadline: float, on_first: Callable[[], None]) -> None:
        try:
            stream = await self._dial(address)
        except (OSError, trio.TooSlowError, TLSFailure, trio.BrokenResourceError) as exc:
            raise UpstreamLost(f"cannot connect: {exc or type(exc).__name__}",
                               after_data=False) from None
        got_snapshot = False
        try:
            await stream.send_all(FEED_PREAMBLE + wire.encode_hello(syncer_type))
            sink.connected()
            decoder = wire.Decoder()
            seq: int | None = None
            while True:
                with trio.move_on_after(deadline) as silent:
                    data = await stream.receive_some(1 << 20)
                if silent.cancelled_caught:
                    raise UpstreamLost(f"silent for {deadline:g}s (WatchStallTimeoutSecs)",
                                       after_data=got_snapshot)
                if not data:
                    raise UpstreamLost("the upstream closed the feed", after_data=got_snapshot)
                decoder.feed(data)
                for record in decoder:
                    if isinstance(record, wire.Crumb) and got_snapshot:
                        # Numbers rise, by one except where a relay upstream of us
                        # resynced (its own numbers) and then took its upstream's again.
                        if seq is not None and record.seq <= seq:
                            raise wire.WireError(f"breadcrumb {record.seq} after {seq}")
                        seq = record.seq
                        sink.crumb(record)
                    elif isinstance(record, wire.Ping):
                        sink.pending(record.lag)
                    elif isinstance(record, wire.Snapshot) and not got_snapshot:
                        sink.snapshot(record.updates, record.status, record.age)
                        got_snapshot = True
                        on_first()
                    else:
                        raise wire.WireError(f"unexpected {type(record).__name__} record")
        except (wire.WireError, trio.BrokenResourceError, OSError, TLSFailure) as exc:
            raise UpstreamLost(f"feed broke: {exc or type(exc).__name__}",
                               after_data=got_snapshot) from None
        finally:
            await trio.aclose_forcefully(stream)


class GobSource:
    """Any Typha over its gob protocol, one connection per syncer type, as calico-node."""

    protocol = "gob"

    def __init__(self, tls: UpstreamTLS | None = None, *, hostname: str = "",
                 clock: Callable[[], float] = time.time) -> None:
        self.tls = tls
        self.hostname = hostname
        self.clock = clock  # wall clock: a ping's timestamp is the upstream's wall clock

    async def follow(self, address: TyphaAddress, syncer_type: str, sink: Sink, *,
                     deadline: float, on_first: Callable[[], None]) -> None:
        tls = self.tls
        client = TyphaClient(
            (address.host, address.port), syncer_type=syncer_type,
            hostname=self.hostname or None, info="trio-typha relay",
            ssl_context=tls.context if tls else None,
            server_cn=tls.server_cn if tls else "",
            server_uri_san=tls.server_uri_san if tls else "",
            dial_timeout=DIAL_TIMEOUT, read_timeout=deadline + DIAL_TIMEOUT)
        # Until the first status: the snapshot, and any update that came after it.
        snapshot: dict[str, SerializedUpdate] | None = None
        got_snapshot = False
        try:
            while True:
                # Our own deadline per event: the client's read timeout is only a backstop.
                with trio.move_on_after(deadline + (0 if snapshot is not None else
                                                    DIAL_TIMEOUT)) as silent:
                    event = await client.__anext__()
                if silent.cancelled_caught:
                    raise UpstreamLost(f"silent for {deadline:g}s (WatchStallTimeoutSecs)",
                                       after_data=got_snapshot)
                if isinstance(event, Connected):
                    snapshot = {}
                    sink.connected()
                elif isinstance(event, KVsReceived):
                    if got_snapshot:
                        sink.updates(event.updates)
                    elif snapshot is not None:
                        for u in event.updates:
                            if u.deleted:
                                snapshot.pop(u.key, None)
                            else:
                                snapshot[u.key] = u
                elif isinstance(event, SyncStatusReceived):
                    if got_snapshot:
                        sink.status(event.status)
                    else:  # the snapshot ends at the first status message
                        sink.snapshot(list((snapshot or {}).values()), event.status, 0.0)
                        got_snapshot = True
                        snapshot = None
                        on_first()
                elif isinstance(event, PingAnswered):
                    sink.lag(max(self.clock() - event.timestamp.unix_ns / 1e9, 0.0))
                elif isinstance(event, Disconnected):
                    raise UpstreamLost(event.reason, after_data=got_snapshot)
        except StopAsyncIteration:
            raise UpstreamLost("the connection ended", after_data=got_snapshot) from None
        finally:
            with trio.CancelScope(shield=True):
                await client.aclose()
