"""A loopback proxy that counts what a Typha costs its datastore.

Every byte between the Typha and the datastore passes it, so it sees what the datastore
sees: TCP connections opened, requests, watch streams opened, HTTP/2 PINGs and bytes each
way.  A connection is HTTP/2 if it opens with the client preface (h2c with prior knowledge,
as gRPC to etcd does, or a Kubernetes client speaking h2c), HTTP/1.1 otherwise; TLS is not
looked into (count at the server then: the test bed's ``ApiServer.traffic``).

* HTTP/1.1: a request is a request line; a watch is a Kubernetes ``watch=`` request (or
  the legacy ``/watch/`` path) or the etcd JSON gateway's ``POST /v3/watch``.
* HTTP/2: a request is a HEADERS frame opening a client stream (header blocks decoded with
  hpack for ``:path``); a watch is a Kubernetes ``watch=`` stream, and on etcd's gRPC
  ``Watch`` streams each ``WatchCreateRequest`` message (one stream carries many watches);
  ``WatchProgressRequest`` messages are counted apart.

:class:`WireCount` is the sans-IO part (fed bytes, counts); :class:`CountingProxy` is the
trio shell.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import hpack
import trio

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_REQUEST_LINE = re.compile(r"(GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS) (\S+) HTTP/1\.[01]$")
_DATA, _HEADERS, _PING, _CONTINUATION = 0, 1, 6, 9
_END_HEADERS, _PADDED, _PRIORITY, _ACK = 0x4, 0x8, 0x20, 0x1
_ETCD_WATCH = "/etcdserverpb.Watch/Watch"
_ETCD_RANGE = "/etcdserverpb.KV/Range"


@dataclass
class Counts:
    connections: int = 0
    h2_connections: int = 0
    requests: int = 0
    http1_requests: int = 0
    h2_streams: int = 0
    watch_streams: int = 0
    progress_requests: int = 0
    etcd_ranges: int = 0  # KV/Range calls (a list's pages, or single reads)
    k8s_lists: int = 0  # Kubernetes list pages (a non-watch GET with limit/resourceVersion)
    pings_sent: int = 0  # PINGs from the Typha (not acks)
    bytes_to_datastore: int = 0
    bytes_from_datastore: int = 0

    def minus(self, earlier: Counts) -> Counts:
        mine, theirs = asdict(self), asdict(earlier)
        return Counts(**{k: mine[k] - theirs[k] for k in mine})

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def is_k8s_list(target: str) -> bool:
    """A list page as trio-typha and Calico ask for them: a collection GET (not a watch)
    with ``limit`` or ``resourceVersion``; single-object GETs and discovery carry neither."""
    path, _, query = target.partition("?")
    return (path.startswith("/api") and not is_k8s_watch(target)
            and bool(re.search(r"(?:^|&)(?:limit|resourceVersion)=", query)))


def is_k8s_watch(target: str) -> bool:
    path, _, query = target.partition("?")
    return "/watch/" in path or bool(re.search(r"(?:^|&)watch=(?:true|1)(?:&|$)", query))


class WireCount:
    """Counts the client → datastore bytes of one connection (sans-IO)."""

    def __init__(self, counts: Counts) -> None:
        self.counts = counts
        self.h2: bool | None = None  # unknown until the first bytes
        self._buf = bytearray()
        self._body_left = 0  # HTTP/1.1: request body bytes still to skip
        self._decoder = hpack.Decoder()
        self._highest_stream = 0
        self._block: tuple[int, bytearray] | None = None  # a header block in CONTINUATIONs
        self._grpc_watch: dict[int, bytearray] = {}  # etcd Watch streams: message bytes

    def feed(self, data: bytes) -> None:
        self.counts.bytes_to_datastore += len(data)
        self._buf += data
        if self.h2 is None:
            if len(self._buf) < len(PREFACE) and PREFACE.startswith(self._buf):
                return
            self.h2 = self._buf.startswith(PREFACE)
            if self.h2:
                self.counts.h2_connections += 1
                del self._buf[:len(PREFACE)]
        if self.h2:
            self._frames()
        else:
            self._request_lines()

    def _request_lines(self) -> None:
        # Request heads, each followed by a Content-Length body to skip (what HTTP/1.1
        # datastore clients send; a chunked request body is not expected and would be
        # scanned as heads, which at worst miscounts).
        buf = self._buf
        while True:
            if self._body_left:
                skip = min(self._body_left, len(buf))
                del buf[:skip]
                self._body_left -= skip
                if self._body_left:
                    return
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(buf[:end]).decode("latin-1")
            del buf[:end + 4]
            line, *fields = head.split("\r\n")
            m = _REQUEST_LINE.match(line)
            if m is None:
                continue
            self.counts.requests += 1
            self.counts.http1_requests += 1
            method, target = m.group(1), m.group(2)
            if is_k8s_watch(target) or (method == "POST" and target.startswith("/v3/watch")):
                self.counts.watch_streams += 1
            elif method == "GET" and is_k8s_list(target):
                self.counts.k8s_lists += 1
            for header in fields:
                name, _, value = header.partition(":")
                if name.strip().lower() == "content-length" and value.strip().isdigit():
                    self._body_left = int(value)

    def _frames(self) -> None:
        buf = self._buf
        while len(buf) >= 9:
            length = int.from_bytes(buf[0:3])
            if len(buf) < 9 + length:
                return
            ftype, flags = buf[3], buf[4]
            stream = int.from_bytes(buf[5:9]) & 0x7FFFFFFF
            payload = bytes(buf[9:9 + length])
            del buf[:9 + length]
            if ftype == _HEADERS:
                self._headers(stream, flags, payload)
            elif ftype == _CONTINUATION and self._block is not None:
                self._block[1].extend(payload)
                if flags & _END_HEADERS:
                    self._header_block(*self._block)
                    self._block = None
            elif ftype == _PING and not flags & _ACK:
                self.counts.pings_sent += 1
            elif ftype == _DATA and stream in self._grpc_watch:
                if flags & _PADDED:
                    payload = payload[1:len(payload) - payload[0]]
                self._grpc_messages(stream, payload)

    def _headers(self, stream: int, flags: int, payload: bytes) -> None:
        if flags & _PADDED:
            pad = payload[0]
            payload = payload[1:len(payload) - pad]
        if flags & _PRIORITY:
            payload = payload[5:]
        if stream > self._highest_stream:  # a new stream (not trailers)
            self._highest_stream = stream
            self.counts.requests += 1
            self.counts.h2_streams += 1
        if flags & _END_HEADERS:
            self._header_block(stream, bytearray(payload))
        else:
            self._block = (stream, bytearray(payload))

    def _header_block(self, stream: int, block: bytearray) -> None:
        try:
            headers = dict(self._decoder.decode(bytes(block)))
        except hpack.HPACKError:
            return
        path = headers.get(":path", "")
        if path == _ETCD_WATCH:
            self._grpc_watch[stream] = bytearray()
        elif path == _ETCD_RANGE:
            self.counts.etcd_ranges += 1
        elif is_k8s_watch(path):
            self.counts.watch_streams += 1
        elif headers.get(":method", "GET") == "GET" and is_k8s_list(path):
            self.counts.k8s_lists += 1

    def _grpc_messages(self, stream: int, data: bytes) -> None:
        buf = self._grpc_watch[stream]
        buf += data
        while len(buf) >= 5:
            size = int.from_bytes(buf[1:5])
            if len(buf) < 5 + size:
                return
            message = bytes(buf[5:5 + size])
            del buf[:5 + size]
            # WatchRequest's oneof: field 1 create_request, 2 cancel, 3 progress.
            if message[:1] == b"\x0a":
                self.counts.watch_streams += 1
            elif message[:1] == b"\x1a":
                self.counts.progress_requests += 1


class CountingProxy:
    """Forwards loopback connections to ``upstream_port`` and counts them (:attr:`counts`)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.counts = Counts()

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
                    ) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started(self.port)
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, client: trio.SocketStream) -> None:
        self.counts.connections += 1
        try:
            server = await trio.open_tcp_stream("127.0.0.1", self.upstream_port)
        except OSError:
            await client.aclose()
            return
        wire = WireCount(self.counts)

        def downstream(data: bytes) -> None:
            self.counts.bytes_from_datastore += len(data)

        async with client, server, trio.open_nursery() as nursery:
            nursery.start_soon(self._pump, client, server, wire.feed, nursery.cancel_scope)
            nursery.start_soon(self._pump, server, client, downstream, nursery.cancel_scope)

    @staticmethod
    async def _pump(source: trio.SocketStream, sink: trio.SocketStream,
                    count: Callable[[bytes], None], scope: trio.CancelScope) -> None:
        try:
            while data := await source.receive_some(65536):
                count(data)
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        scope.cancel()  # either side gone: the connection is over
