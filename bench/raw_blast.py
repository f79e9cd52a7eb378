"""The storm's baselines: minimal trio servers writing precomputed snapshot bytes.

No cache, no sessions, no registry.  What a storm costs when the server does nothing but
the socket work the protocol requires; ``python -m bench storm`` reports trio-typha's
ratio to it, for both protocols.

* :class:`RawBlast` (gob): per connection it reads the hello, writes the same precomputed
  ServerHello + restart, waits for the ACK, writes the same precomputed snappy snapshot,
  waits for the second ACK, writes the second stream's start and InSync, then only reads.
* :class:`GrpcRawBlast` (gRPC on HTTP/2, hand-written frames): the Sync stream's header,
  snapshot and finished messages are framed into DATA frames once per frame size; per
  connection it only answers SETTINGS and PINGs, waits for the request's HEADERS and first
  DATA, writes one precomputed HEADERS block and then slices of the precomputed DATA frames
  as the peer's flow-control windows allow.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import trio

from trio_typha.cache.core import Breadcrumb
from trio_typha.model.kv import SerializedUpdate, SyncStatus
from trio_typha.protocols.gob import encode_once
from trio_typha.protocols.gob.codec import NEED_DATA, Decoder
from trio_typha.protocols.gob.messages import ENVELOPE, REGISTRY, MsgServerHello
from trio_typha.protocols.grpc import encode_once as grpc_encode


class RawBlast:
    def __init__(self, snapshot: Sequence[SerializedUpdate] | bytes, syncer: str = "felix"
                 ) -> None:
        """``snapshot``: the updates, or their compressed snapshot stream already built."""
        hello = encode_once.encode(MsgServerHello("raw-blast", syncer, True, 1))
        self.first = encode_once.STREAM_PREFIX + hello + encode_once.RESTART_FOR_SNAPSHOT
        self.snapshot = (snapshot if isinstance(snapshot, bytes)
                         else encode_once.build_compressed_snapshot(snapshot))
        self.last = encode_once.SNAPPY_STREAM_START + encode_once.STATUS_CHUNKS[SyncStatus.IN_SYNC]
        self.in_sync = 0

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
                    ) -> None:
        await _serve(self.handle, task_status)

    async def handle(self, stream: trio.SocketStream) -> None:
        """Serve one connection until the client goes away."""
        # Whole client messages, not reads: Go's gob writes a type's first value in
        # several writes (its types, then the value), and answering the first part would
        # send the next stream before the client has restarted its decoder.
        decoder = Decoder(REGISTRY, ENVELOPE)
        try:
            for reply in (self.first, self.snapshot, self.last):
                while decoder.next_value() is NEED_DATA:  # hello, ACK, ACK
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    decoder.feed(data)
                await stream.send_all(reply)
            self.in_sync += 1
            while await stream.receive_some(65536):  # pongs
                pass
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(stream)


async def _serve(handler, task_status: trio.TaskStatus[int]) -> None:  # type: ignore[no-untyped-def]
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1", backlog=4096)
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(handler, listeners)


# --- HTTP/2, just enough of it (RFC 9113) ------------------------------------------------

DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0, 1, 3, 4, 6, 7, 8
ACK, END_HEADERS = 0x1, 0x4
INITIAL_WINDOW_SIZE = 4
# Every peer accepts 16 KiB frames (the protocol's minimum SETTINGS_MAX_FRAME_SIZE): one
# framing serves all connections, whatever larger size a peer would allow.
FRAME_SIZE = 16384
DEFAULT_WINDOW = 65535
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
# :status 200 (static index 8), content-type (static name 31, literal without indexing):
# the same bytes are a valid first header block on every connection.
RESPONSE_HEADERS = b"\x88\x0f\x10\x10application/grpc"


def _header(length: int, kind: int, flags: int, stream_id: int) -> bytes:
    return struct.pack(">I", length)[1:] + struct.pack(">BBI", kind, flags, stream_id)


class GrpcRawBlast:
    """A Sync stream's snapshot from precomputed DATA frames to plain gRPC clients."""

    def __init__(self, crumb: Breadcrumb, batch: int, syncer: str = "felix") -> None:
        messages = [grpc_encode.header_message(conn_id=1, server_version="raw-blast",
                                               syncer_type=syncer, status=crumb.status),
                    *grpc_encode.snapshot_messages(crumb, batch),
                    grpc_encode.finished_message(crumb)]
        self.payload = b"".join(messages)
        self._framed: dict[int, bytes] = {}
        self.framed(1)  # built before the storm, not by its first connection
        self.in_sync = 0

    def framed(self, stream_id: int) -> bytes:
        """The payload cut into DATA frames of FRAME_SIZE (the last one shorter); built once
        per stream id (and grpcio's first stream is always 1)."""
        out = self._framed.get(stream_id)
        if out is None:
            p, n = self.payload, FRAME_SIZE
            out = b"".join(_header(len(p[i:i + n]), DATA, 0, stream_id) + p[i:i + n]
                           for i in range(0, len(p), n))
            self._framed[stream_id] = out
        return out

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
                    ) -> None:
        await _serve(self._handle, task_status)

    async def _handle(self, stream: trio.SocketStream) -> None:
        conn = _Connection(self, stream)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(conn.write_loop)
                await conn.read_loop()
                nursery.cancel_scope.cancel()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(stream)


class _Connection:
    """One connection's windows and control replies; ``write_loop`` is its only writer."""

    def __init__(self, blast: GrpcRawBlast, stream: trio.SocketStream) -> None:
        self.blast = blast
        self.stream = stream
        self.control = bytearray(_header(0, SETTINGS, 0, 0))  # the server preface
        self.conn_window = DEFAULT_WINDOW
        self.stream_window = DEFAULT_WINDOW
        self.initial_window = DEFAULT_WINDOW
        self.stream_id = 0
        self.requested = False  # the request's first DATA frame (the start message) is in
        self.sent = 0  # payload bytes sent
        self.wake = trio.Event()

    def _poke(self) -> None:
        self.wake.set()

    async def read_loop(self) -> None:
        buf = bytearray()
        preface = len(PREFACE)
        while True:
            data = await self.stream.receive_some(65536)
            if not data:
                return
            buf += data
            if preface:
                if len(buf) < preface:
                    continue
                del buf[:preface]
                preface = 0
            pos = 0
            while len(buf) - pos >= 9:
                length = int.from_bytes(buf[pos:pos + 3], "big")
                if len(buf) - pos - 9 < length:
                    break
                kind, flags = buf[pos + 3], buf[pos + 4]
                sid = int.from_bytes(buf[pos + 5:pos + 9], "big") & 0x7FFFFFFF
                body = bytes(buf[pos + 9:pos + 9 + length])
                pos += 9 + length
                if self._frame(kind, flags, sid, body):
                    return
            del buf[:pos]
            self._poke()

    def _frame(self, kind: int, flags: int, sid: int, body: bytes) -> bool:
        """Apply one frame; True when the peer ended the conversation."""
        if kind == SETTINGS and not flags & ACK:
            for i in range(0, len(body) - 5, 6):
                ident, value = struct.unpack_from(">HI", body, i)
                if ident == INITIAL_WINDOW_SIZE:
                    self.stream_window += value - self.initial_window
                    self.initial_window = value
            self.control += _header(0, SETTINGS, ACK, 0)
        elif kind == WINDOW_UPDATE:
            inc = int.from_bytes(body[:4], "big") & 0x7FFFFFFF
            if sid == 0:
                self.conn_window += inc
            elif sid == self.stream_id:
                self.stream_window += inc
        elif kind == PING and not flags & ACK:
            self.control += _header(8, PING, ACK, 0) + body
        elif kind == HEADERS and not self.stream_id:
            self.stream_id = sid
        elif kind == DATA and sid == self.stream_id:
            self.requested = True
            if body:  # give the connection window back; the stream's is never exhausted
                self.control += _header(4, WINDOW_UPDATE, 0, 0) + struct.pack(">I", len(body))
        elif kind in (RST_STREAM, GOAWAY):
            return True
        return False

    async def write_loop(self) -> None:
        total = len(self.blast.payload)
        headers_sent = False
        while True:
            if self.control:
                out, self.control = bytes(self.control), bytearray()
                await self.stream.send_all(out)
                continue
            if self.requested and not headers_sent:
                headers_sent = True
                await self.stream.send_all(_header(len(RESPONSE_HEADERS), HEADERS,
                                                   END_HEADERS, self.stream_id)
                                           + RESPONSE_HEADERS)
            window = min(self.conn_window, self.stream_window, total - self.sent)
            if headers_sent and window > 0:
                await self._send_data(window)
                if self.sent == total:
                    self.blast.in_sync += 1
                continue
            self.wake = trio.Event()
            await self.wake.wait()

    async def _send_data(self, window: int) -> None:
        """Up to ``window`` payload bytes: whole precomputed frames where the window and
        our position allow, else one frame built here to get back onto a frame boundary."""
        size = FRAME_SIZE
        first, offset = divmod(self.sent, size)
        if offset == 0 and window >= min(size, len(self.blast.payload) - self.sent):
            framed = self.blast.framed(self.stream_id)
            frames = max(1, window // size)
            n = min(frames * size, len(self.blast.payload) - self.sent)
            count = -(-n // size)
            start = first * (size + 9)
            await self.stream.send_all(
                memoryview(framed)[start:start + count * 9 + n])
        else:
            n = min(window, size - offset)
            chunk = self.blast.payload[self.sent:self.sent + n]
            await self.stream.send_all(_header(n, DATA, 0, self.stream_id) + chunk)
        self.sent += n
        self.conn_window -= n
        self.stream_window -= n
