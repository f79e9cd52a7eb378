"""One HTTP/2 connection to the test bed API server: h2 on a trio stream.

kube-apiserver serves HTTP/2 to every client that offers ``h2`` in TLS ALPN
(``k8s.io/apiserver/pkg/server/secure_serving.go``: ``NextProtos`` ``h2``, ``http/1.1``;
``MaxConcurrentStreams`` 100).  It has no plaintext port at all; the test bed's plaintext
listener takes HTTP/2 with prior knowledge (h2c: the connection opens with the client
preface) beside HTTP/1.1, so the HTTP/2 path can be tested without TLS.  The HTTP/1.1
``Upgrade: h2c`` dance is not served: no Kubernetes client uses it.

Every request is a stream; a watch is a stream that stays open, its event lines going out
as DATA frames, ended with END_STREAM at its timeout.  One task reads and hands h2 the
bytes; one task (the only writer) sends what h2 has queued; each stream's handler queues
its frames only as far as the peer's flow-control windows allow, so a client that stops
reading one watch stalls only that stream.  h2 answers PINGs and SETTINGS itself.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import trio
from h2.errors import ErrorCodes

from .api import Request, Response, WatchPlan
from .exchange import Host, WatchHandle, answer, stream_watch
from .status import too_large_body

logger = logging.getLogger("testbed.apiserver")

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
MAX_CONCURRENT_STREAMS = 100  # kube-apiserver's default
MAX_BODY = 8 * 1024 * 1024
_RECEIVE_SIZE = 65536


@dataclass(slots=True)
class _Stream:
    headers: list[tuple[bytes, bytes]]
    body: bytearray = field(default_factory=bytearray)
    scope: trio.CancelScope | None = None
    handle: WatchHandle | None = None
    too_large: bool = False


class _ConnectionLost(Exception):
    """The connection is over: the peer left, broke the protocol, or a test dropped it."""


class H2Connection:
    """Serves the streams of one HTTP/2 client connection until either side closes it.

    ``initial`` holds bytes already read from the stream (the client preface, when the
    plaintext listener peeked at it to choose the protocol)."""

    def __init__(self, server: Host, stream: trio.abc.Stream, peer: str,
                 initial: bytes = b"") -> None:
        self.server = server
        self.stream = stream
        self.peer = peer
        self._initial = initial
        config = h2.config.H2Configuration(client_side=False, header_encoding=None)
        self.h2 = h2.connection.H2Connection(config)
        self.h2.local_settings = h2.settings.Settings(client=False, initial_values={
            h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: MAX_CONCURRENT_STREAMS,
        })
        self._streams: dict[int, _Stream] = {}
        self._wake_writer = trio.Event()
        self._progress = trio.Event()  # set when windows open or the writer drains
        self._queued = 0  # generations of output queued (each _kick) ...
        self._written = 0  # ... and the last one the writer has put on the socket
        self._nursery: trio.Nursery | None = None

    async def run(self) -> None:
        self.server.traffic.h2_connections += 1
        self.h2.initiate_connection()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._write_loop)
                await self._read_loop(nursery)
                nursery.cancel_scope.cancel()
        except (trio.BrokenResourceError, trio.ClosedResourceError, _ConnectionLost):
            pass
        finally:
            for state in self._streams.values():
                if state.handle is not None:
                    state.handle.peer_gone = True
            await trio.aclose_forcefully(self.stream)

    # -- bytes in ----------------------------------------------------------------------

    async def _read_loop(self, nursery: trio.Nursery) -> None:
        data, self._initial = self._initial, b""
        while True:
            if data:
                self.server.traffic.bytes_in += len(data)
                try:
                    events = self.h2.receive_data(data)
                except h2.exceptions.ProtocolError as e:
                    # h2 has queued a GOAWAY naming the error; let the writer send it.
                    logger.info("apiserver: bad HTTP/2 from %s: %s", self.peer, e)
                    self._kick()
                    await self._flushed()
                    return
                for event in events:
                    if self._handle_event(event, nursery):
                        return
                self._kick()
            data = await self.stream.receive_some(_RECEIVE_SIZE)
            if not data:
                return

    def _handle_event(self, event: h2.events.Event, nursery: trio.Nursery) -> bool:
        """Act on one h2 event; True once the connection is over."""
        if isinstance(event, h2.events.RequestReceived):
            self._streams[event.stream_id] = _Stream(list(event.headers))
        elif isinstance(event, h2.events.DataReceived):
            state = self._streams.get(event.stream_id)
            # Flow control: what a request body takes is given back at once; bodies are
            # bounded by MAX_BODY instead.
            self.h2.acknowledge_received_data(event.flow_controlled_length,
                                              event.stream_id)
            if state is not None and not state.too_large:
                state.body += event.data
                state.too_large = len(state.body) > MAX_BODY
        elif isinstance(event, h2.events.StreamEnded):
            state = self._streams.get(event.stream_id)
            if state is not None and state.scope is None:
                state.scope = trio.CancelScope()
                nursery.start_soon(self._serve_stream, event.stream_id, state)
        elif isinstance(event, h2.events.StreamReset):
            state = self._streams.pop(event.stream_id, None)
            if state is not None:
                if state.handle is not None:
                    state.handle.peer_gone = True
                if state.scope is not None:
                    state.scope.cancel()
            self._notify()
        elif isinstance(event, h2.events.PingReceived):
            self.server.traffic.pings += 1
        elif isinstance(event, h2.events.WindowUpdated | h2.events.RemoteSettingsChanged):
            self._notify()
        elif isinstance(event, h2.events.ConnectionTerminated):
            return True
        return False

    # -- bytes out ---------------------------------------------------------------------

    def _kick(self) -> None:
        self._queued += 1
        self._wake_writer.set()

    def _notify(self) -> None:
        self._progress.set()
        self._progress = trio.Event()

    async def _write_loop(self) -> None:
        """The connection's only writer: sends whatever h2 has queued, as it appears."""
        while True:
            queued = self._queued
            data = self.h2.data_to_send()
            if data:
                self.server.traffic.bytes_out += len(data)
                await self.stream.send_all(data)
                self._written = queued
                self._notify()
                continue
            await self._wake_writer.wait()
            self._wake_writer = trio.Event()

    async def _flushed(self) -> None:
        """Until the writer has written what was queued before this call: a stream
        handler waits here after each frame, so what sits unsent is bounded by one write
        per stream."""
        mine = self._queued
        while self._written < mine:
            await self._progress.wait()

    async def _send_headers(self, stream_id: int, headers: list[tuple[str, str]],
                            end: bool = False) -> None:
        self.h2.send_headers(stream_id, headers, end_stream=end)
        self._kick()

    async def _send_data(self, stream_id: int, data: bytes, end: bool = False) -> None:
        """Queue ``data`` on the stream as the peer's windows allow (waiting for them to
        open, and for the writer when much is unsent), ending the stream if ``end``."""
        view = memoryview(data)
        while True:
            # As a socket's send_all does: a cancelled (dropped, timed-out) watch must not
            # queue another frame, which the writer could still put out.
            await trio.lowlevel.checkpoint_if_cancelled()
            window = self.h2.local_flow_control_window(stream_id)
            if view and window <= 0:
                await self._progress.wait()
                continue
            size = min(len(view), window, self.h2.max_outbound_frame_size)
            last = size == len(view)
            self.h2.send_data(stream_id, bytes(view[:size]), end_stream=end and last)
            self._kick()
            view = view[size:]
            await self._flushed()
            if last:
                return

    # -- one stream ----------------------------------------------------------------------

    async def _serve_stream(self, stream_id: int, state: _Stream) -> None:
        assert state.scope is not None
        try:
            with state.scope:
                await self._respond(stream_id, state)
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
            pass  # the peer reset the stream, or the connection is closing
        finally:
            self._streams.pop(stream_id, None)

    async def _respond(self, stream_id: int, state: _Stream) -> None:
        if state.too_large:
            await self._send_response(stream_id, Response.error(too_large_body(MAX_BODY)))
            return
        request = _request(state.headers, bytes(state.body))
        result = await answer(self.server, request)
        if isinstance(result, WatchPlan):
            await self._stream_watch(stream_id, state, result)
        else:
            await self._send_response(stream_id, result, head_only=request.method == "HEAD")

    async def _send_response(self, stream_id: int, response: Response, *,
                             head_only: bool = False) -> None:
        headers = [(":status", str(response.status)),
                   ("content-type", response.content_type),
                   ("content-length", str(len(response.body))),
                   ("cache-control", "no-cache, private")]
        if not response.body or head_only:
            await self._send_headers(stream_id, headers, end=True)
            return
        await self._send_headers(stream_id, headers)
        await self._send_data(stream_id, response.body, end=True)

    async def _stream_watch(self, stream_id: int, state: _Stream, plan: WatchPlan) -> None:
        handle = state.handle = WatchHandle(plan)
        self.server.watch_opened(handle)  # before the headers, as on HTTP/1.1
        try:
            await self._send_headers(stream_id, [
                (":status", "200"), ("content-type", "application/json"),
                ("cache-control", "no-cache, private")])
            with handle.scope:

                async def send(data: bytes) -> None:
                    await self._send_data(stream_id, data)

                await stream_watch(self.server, plan, handle, send)
        finally:
            self.server.watch_closed(handle)
        if handle.peer_gone:
            return
        if handle.abrupt:
            # A crashed server takes every stream of the connection with it.
            assert self._nursery is not None
            self._nursery.cancel_scope.cancel()
            return
        await self._send_data(stream_id, b"", end=True)

    def reset(self, stream_id: int) -> None:
        """Reset one stream (tests: a server that cancels one watch with RST_STREAM)."""
        self.h2.reset_stream(stream_id, ErrorCodes.CANCEL)
        self._kick()


def _request(headers: list[tuple[bytes, bytes]], body: bytes) -> Request:
    fields: dict[str, str] = {}
    method = target = ""
    for name, value in headers:
        key, text = name.decode("latin-1").lower(), value.decode("latin-1")
        if key == ":method":
            method = text
        elif key == ":path":
            target = text
        elif key == ":authority":
            fields.setdefault("host", text)
        elif not key.startswith(":"):
            fields[key] = text
    return Request(method, target, fields, body)
