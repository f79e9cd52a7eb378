"""One HTTP/1.1 connection to the test bed API server: h11 on a trio stream.

h11 does the HTTP framing (sans-IO); this module owns the socket.  Requests are answered in
order on one connection (keep-alive).  A watch answers with a chunked body that stays open:
the connection's only writer streams event lines while a reader task waits for the peer to
hang up, so a vanished client ends its watch at once instead of at its timeout.
"""

from __future__ import annotations

import contextlib
import logging

import h11
import trio

from .api import Request, Response, WatchPlan
from .exchange import Host, WatchHandle, answer, stream_watch
from .status import ApiError, too_large_body

logger = logging.getLogger("testbed.apiserver")

MAX_BODY = 8 * 1024 * 1024
MAX_HEADER_BYTES = 64 * 1024
_RECEIVE_SIZE = 65536


class _Closed(Exception):
    """The connection must be closed without finishing the HTTP exchange."""


class Connection:
    """Serves requests from one client stream until either side closes it."""

    def __init__(self, server: Host, stream: trio.abc.Stream, peer: str,
                 initial: bytes = b"") -> None:
        self.server = server
        self.stream = stream
        self.peer = peer
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)
        if initial:  # what was read to tell HTTP/1.1 from HTTP/2 (b"" would mean EOF)
            self.h11.receive_data(initial)
        # True while bytes may be half-written: a send cancelled then (watch timeout or
        # drop) leaves the framing broken, so the connection must be closed, not reused.
        self._mid_send = False

    async def run(self) -> None:
        try:
            await self._serve()
        except (trio.BrokenResourceError, trio.ClosedResourceError, _Closed):
            pass
        except h11.RemoteProtocolError as e:
            logger.info("apiserver: bad HTTP from %s: %s", self.peer, e)
            await self._try_send_error(ApiError(e.error_status_hint, "BadRequest", str(e)))
        finally:
            await trio.aclose_forcefully(self.stream)

    async def _serve(self) -> None:
        while True:
            request = await self._read_request()
            if request is None:
                return
            await self._respond(request)
            if self.h11.our_state is not h11.DONE or self.h11.their_state is not h11.DONE:
                return
            self.h11.start_next_cycle()

    async def _send(self, event: h11.Event) -> None:
        data = self.h11.send(event)
        if data:
            self._mid_send = True
            self.server.traffic.bytes_out += len(data)
            await self.stream.send_all(data)
            self._mid_send = False

    async def _try_send_error(self, error: ApiError) -> None:
        if self.h11.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError,
                                 h11.LocalProtocolError):
            await self._send_response(Response.error(error), close=True)

    async def _read_request(self) -> Request | None:
        head: h11.Request | None = None
        body = bytearray()
        while True:
            event = self.h11.next_event()
            if event is h11.NEED_DATA:
                if self.h11.they_are_waiting_for_100_continue:
                    await self._send(h11.InformationalResponse(status_code=100, headers=[]))
                data = await self.stream.receive_some(_RECEIVE_SIZE)
                self.server.traffic.bytes_in += len(data)
                self.h11.receive_data(data)
            elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                return None
            elif isinstance(event, h11.Request):
                head = event
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > MAX_BODY:
                    await self._send_response(Response.error(too_large_body(MAX_BODY)),
                                              close=True)
                    raise _Closed
            elif isinstance(event, h11.EndOfMessage):
                assert head is not None
                headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                           for k, v in head.headers}
                return Request(head.method.decode("ascii"), head.target.decode("latin-1"),
                               headers, bytes(body))

    async def _respond(self, request: Request) -> None:
        result = await answer(self.server, request)
        if isinstance(result, WatchPlan):
            await self._stream_watch(result)
        else:
            await self._send_response(result, head_only=request.method == "HEAD")

    async def _send_response(self, response: Response, *, close: bool = False,
                             head_only: bool = False) -> None:
        headers = [("content-type", response.content_type),
                   ("content-length", str(len(response.body))),
                   ("cache-control", "no-cache, private")]
        if close:
            headers.append(("connection", "close"))
        await self._send(h11.Response(status_code=response.status, headers=headers))
        if response.body and not head_only:
            await self._send(h11.Data(data=response.body))
        await self._send(h11.EndOfMessage())

    # -- watches ---------------------------------------------------------------------

    async def _stream_watch(self, plan: WatchPlan) -> None:
        handle = WatchHandle(plan)
        self.server.watch_opened(handle)  # before the headers: a client that has them can
        try:                             # count on the hooks seeing its watch
            # No Content-Length: h11 frames the body with chunked transfer coding.
            await self._send(h11.Response(status_code=200, headers=[
                ("content-type", "application/json"), ("cache-control", "no-cache, private")]))
            with handle.scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._watch_peer, handle)
                    await stream_watch(self.server, plan, handle, self._send_chunk)
                    handle.scope.cancel()
        finally:
            self.server.watch_closed(handle)
        if handle.abrupt or handle.peer_gone or self._mid_send:
            raise _Closed
        await self._send(h11.EndOfMessage())

    async def _send_chunk(self, data: bytes) -> None:
        await self._send(h11.Data(data=data))

    async def _watch_peer(self, handle: WatchHandle) -> None:
        """Read while the watch streams: EOF means the client left; anything else is a
        pipelined request that h11 keeps for after the watch."""
        while True:
            data = await self.stream.receive_some(_RECEIVE_SIZE)
            self.server.traffic.bytes_in += len(data)
            if not data:
                handle.peer_gone = True
                handle.scope.cancel()
                return
            self.h11.receive_data(data)
            if len(self.h11.trailing_data[0]) > MAX_BODY:
                handle.drop(abrupt=True)
                return
