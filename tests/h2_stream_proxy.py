"""A loopback proxy that reads the HTTP/2 frames passing through it and can silence chosen
streams while the rest of their connection keeps working.

:mod:`tests.fault_proxy` silences a whole TCP connection; a multiplexed client needs the
finer faults too: one stream of a live connection that stops delivering, or every stream
of one method (etcd's watch hub wedged: every Watch stream silent, new ones too, while
Range, Status, PINGs and SETTINGS still flow).  ``async with open_h2_stream_proxy(port) as
proxy:`` listens on a free loopback port and forwards every connection to
``127.0.0.1:port``.  It reads the client's HEADERS (HPACK-decoded in order, so its decoder
keeps each connection's dynamic table) to note each stream's ``:path``
(:attr:`H2StreamProxy.streams`), and notes the streams the client resets.
:meth:`~H2StreamProxy.stall` drops the server's DATA frames of one stream from then on;
:meth:`~H2StreamProxy.wedge` those of every stream of a path, open or opened later, until
:meth:`~H2StreamProxy.unwedge` (a stream that lost DATA stays silent: a gRPC message may
have been cut in two).  HEADERS always pass (they change the HPACK table the client
decodes with).  Each dropped frame's flow-control credit is given back to the server
(WINDOW_UPDATE on the stream and the connection), so the connection's window never runs
dry for the streams that still flow.

Where this differs from a real stuck server: nothing of a silenced stream reaches the
client, not even the reply that creates its watch; and the server keeps working, its
windows refilled by the proxy rather than by the client reading.
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import hpack
import trio

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, WINDOW_UPDATE, CONTINUATION = 0x0, 0x1, 0x3, 0x8, 0x9
END_HEADERS, PADDED, PRIORITY = 0x4, 0x8, 0x20


@dataclass
class Stream:
    connection: int  # which accepted connection (0, 1, ...)
    stream_id: int
    path: str
    reset_by_client: bool = False
    stalled: bool = False
    dropped: int = 0  # DATA frames withheld from the client


@dataclass
class _Frames:
    """Splits a byte stream into whole HTTP/2 frames (after ``skip`` bytes of preface)."""

    skip: int = 0
    buf: bytearray = field(default_factory=bytearray)

    def feed(self, data: bytes) -> list[tuple[int, int, int, bytes, bytes]]:
        """Whole frames as (type, flags, stream id, payload, the frame's own bytes); the
        preface comes out as a frame of type -1."""
        self.buf += data
        frames = []
        if self.skip:
            if len(self.buf) < self.skip:
                return []
            frames.append((-1, 0, 0, b"", bytes(self.buf[:self.skip])))
            del self.buf[:self.skip]
            self.skip = 0
        while len(self.buf) >= 9:
            length = int.from_bytes(self.buf[:3], "big")
            if len(self.buf) < 9 + length:
                break
            ftype, flags = self.buf[3], self.buf[4]
            sid = struct.unpack(">I", self.buf[5:9])[0] & 0x7FFFFFFF
            raw = bytes(self.buf[:9 + length])
            frames.append((ftype, flags, sid, raw[9:], raw))
            del self.buf[:9 + length]
        return frames


def window_update(stream_id: int, increment: int) -> bytes:
    return (b"\x00\x00\x04" + bytes([WINDOW_UPDATE, 0]) + stream_id.to_bytes(4, "big")
            + increment.to_bytes(4, "big"))


class H2StreamProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.accepted = 0  # TCP connections accepted, ever
        self.connections = 0  # open now
        self.streams: list[Stream] = []
        self.wedged: set[str] = set()  # paths whose every stream is silenced
        self.credit_returned = 0  # bytes of flow-control credit given back to the server
        self._changed = trio.Event()

    def matching(self, path: str) -> list[Stream]:
        return [s for s in self.streams if s.path == path]

    @property
    def silenced(self) -> int:
        """Streams that have lost DATA."""
        return sum(1 for s in self.streams if s.dropped)

    async def wait_for(self, path: str, n: int) -> list[Stream]:
        """Until at least ``n`` streams of ``path`` have been opened; those streams."""
        while len(self.matching(path)) < n:
            await self._changed.wait()
        return self.matching(path)

    def stall(self, stream: Stream) -> None:
        """Withhold every DATA frame the server sends on ``stream`` from now on."""
        stream.stalled = True

    def wedge(self, path: str) -> None:
        """Withhold the server's DATA on every stream of ``path``, open or opened later."""
        self.wedged.add(path)

    def unwedge(self, path: str) -> None:
        """Let ``path``'s streams through again (those that lost DATA stay silent)."""
        self.wedged.discard(path)

    def _silent(self, stream: Stream) -> bool:
        return stream.stalled or stream.dropped > 0 or stream.path in self.wedged

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                    ) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        await trio.serve_listeners(self._handle, listeners, task_status=task_status)

    async def _handle(self, client: trio.SocketStream) -> None:
        index = self.accepted
        self.accepted += 1
        try:
            server = await trio.open_tcp_stream("127.0.0.1", self.upstream_port)
        except OSError:
            await client.aclose()
            return
        mine: dict[int, Stream] = {}
        to_server = trio.Lock()  # whole frames only: the client's and the credit
        self.connections += 1
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._upstream, client, server, to_server, index, mine,
                                   nursery.cancel_scope)
                nursery.start_soon(self._downstream, server, client, to_server, mine,
                                   nursery.cancel_scope)
        finally:
            self.connections -= 1
            await trio.aclose_forcefully(client)
            await trio.aclose_forcefully(server)

    async def _upstream(self, src: trio.SocketStream, dst: trio.SocketStream,
                        to_server: trio.Lock, index: int, mine: dict[int, Stream],
                        scope: trio.CancelScope) -> None:
        frames = _Frames(skip=len(PREFACE))
        decoder = hpack.Decoder()
        block = bytearray()  # a header block continued in CONTINUATION frames
        try:
            while data := await src.receive_some(65536):
                out = bytearray()
                for ftype, flags, sid, payload, raw in frames.feed(data):
                    if ftype in (HEADERS, CONTINUATION):
                        block += _header_fragment(ftype, flags, payload)
                        if flags & END_HEADERS:
                            headers = dict(decoder.decode(bytes(block)))
                            block.clear()
                            if sid not in mine and ":path" in headers:
                                mine[sid] = Stream(index, sid, headers[":path"])
                                self.streams.append(mine[sid])
                                self._changed.set()
                                self._changed = trio.Event()
                    elif ftype == RST_STREAM and sid in mine:
                        mine[sid].reset_by_client = True
                    out += raw
                async with to_server:
                    await dst.send_all(bytes(out))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        scope.cancel()

    async def _downstream(self, src: trio.SocketStream, dst: trio.SocketStream,
                          to_server: trio.Lock, mine: dict[int, Stream],
                          scope: trio.CancelScope) -> None:
        frames = _Frames()
        try:
            while data := await src.receive_some(65536):
                out, credit = bytearray(), bytearray()
                for ftype, _, sid, payload, raw in frames.feed(data):
                    stream = mine.get(sid)
                    if ftype == DATA and stream is not None and self._silent(stream):
                        stream.dropped += 1
                        if payload:  # its whole length counts, padding included
                            credit += window_update(sid, len(payload))
                            credit += window_update(0, len(payload))
                            self.credit_returned += len(payload)
                        continue
                    out += raw
                if credit:
                    async with to_server:
                        await src.send_all(bytes(credit))
                if out:
                    await dst.send_all(bytes(out))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        scope.cancel()


def _header_fragment(ftype: int, flags: int, payload: bytes) -> bytes:
    """The header block fragment of a HEADERS (padding and priority removed) or
    CONTINUATION frame."""
    if ftype == CONTINUATION:
        return payload
    start, pad = 0, 0
    if flags & PADDED:
        pad = payload[0]
        start = 1
    if flags & PRIORITY:
        start += 5
    return payload[start:len(payload) - pad]


@asynccontextmanager
async def open_h2_stream_proxy(upstream_port: int) -> AsyncIterator[H2StreamProxy]:
    proxy = H2StreamProxy(upstream_port)
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.serve)
        yield proxy
        nursery.cancel_scope.cancel()
