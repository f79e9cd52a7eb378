"""One HTTP/1.1 connection to the test bed API server: h11 on a trio stream.

h11 does the HTTP framing (sans-IO); this module owns the socket.  Requests are answered in
order on one connection (keep-alive).  A watch answers with a chunked body that stays open:
the connection's only writer streams event lines while a reader task waits for the peer to
hang up, so a vanished client ends its watch at once instead of at its timeout.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterable
from typing import Protocol

import h11
import trio

from .api import Api, Request, Response, WatchPlan
from .status import ApiError, internal_error, too_large_body
from .watch import error_line

logger = logging.getLogger("testbed.apiserver")

MAX_BODY = 8 * 1024 * 1024
MAX_HEADER_BYTES = 64 * 1024
_RECEIVE_SIZE = 65536
_CHUNK_TARGET = 256 * 1024  # coalesce watch lines into chunks of about this size


class _Closed(Exception):
    """The connection must be closed without finishing the HTTP exchange."""


class WatchHandle:
    """An open watch stream, as the server's test hooks see it."""

    def __init__(self, plan: WatchPlan) -> None:
        self.plan = plan
        self.scope = trio.CancelScope(deadline=trio.current_time() + plan.timeout)
        self.abrupt = False  # end by closing the socket rather than the chunked body
        self.peer_gone = False

    def drop(self, *, abrupt: bool) -> None:
        self.abrupt = abrupt
        self.scope.cancel()


class Host(Protocol):
    """What a connection uses of the server it belongs to (:class:`~.server.ApiServer`)."""

    api: Api
    latency: float
    bookmark_interval: float

    def changed_event(self) -> trio.Event: ...

    def watch_opened(self, handle: WatchHandle) -> None: ...

    def watch_closed(self, handle: WatchHandle) -> None: ...


class Connection:
    """Serves requests from one client stream until either side closes it."""

    def __init__(self, server: Host, stream: trio.abc.Stream, peer: str) -> None:
        self.server = server
        self.stream = stream
        self.peer = peer
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)
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
                self.h11.receive_data(await self.stream.receive_some(_RECEIVE_SIZE))
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
        server = self.server
        if server.latency > 0:
            await trio.sleep(server.latency)
        try:
            result = server.api.handle(request)
        except Exception as e:  # a bug must cost one request, not the server
            logger.exception("apiserver: %s %s failed", request.method, request.target)
            result = Response.error(internal_error(repr(e)))
        logger.debug("apiserver: %s %s -> %s", request.method, request.target,
                     "watch" if isinstance(result, WatchPlan) else result.status)
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
        try:
            opening = plan.cursor.initial_lines()
            failed = False
        except ApiError as e:  # e.g. 410: reported in-stream, as the real server does
            opening, failed = [error_line(e)], True
        handle = WatchHandle(plan)
        self.server.watch_opened(handle)  # before the headers: a client that has them can
        try:                             # count on the hooks seeing its watch
            # No Content-Length: h11 frames the body with chunked transfer coding.
            await self._send(h11.Response(status_code=200, headers=[
                ("content-type", "application/json"), ("cache-control", "no-cache, private")]))
            with handle.scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._watch_peer, handle)
                    await self._send_lines(opening)
                    if not failed:
                        await self._watch_loop(plan, handle.scope.deadline)
                    handle.scope.cancel()
        finally:
            self.server.watch_closed(handle)
        if handle.abrupt or handle.peer_gone or self._mid_send:
            raise _Closed
        await self._send(h11.EndOfMessage())

    async def _watch_loop(self, plan: WatchPlan, deadline: float) -> None:
        cursor = plan.cursor
        interval = self.server.bookmark_interval

        def bookmark_after(now: float) -> float:
            # kube-apiserver's schedule (storage/cacher/cache_watcher.go nextBookmarkTime):
            # every interval whatever the traffic, and once 2 s before the deadline.
            at = min(now + interval, deadline - 2.0)
            return at if at > now else math.inf

        next_bookmark = bookmark_after(trio.current_time()) if plan.bookmarks else math.inf
        while True:
            changed = self.server.changed_event()  # taken before polling: no lost wakeups
            try:
                lines = cursor.poll()
            except ApiError as e:  # history moved past us (compaction)
                await self._send_lines([error_line(e)])
                return
            if trio.current_time() >= next_bookmark:
                bookmark = cursor.periodic_bookmark()
                if bookmark is not None:
                    lines.append(bookmark)
                next_bookmark = bookmark_after(trio.current_time())
            if lines:
                await self._send_lines(lines)
            else:
                with trio.move_on_at(next_bookmark):
                    await changed.wait()

    async def _watch_peer(self, handle: WatchHandle) -> None:
        """Read while the watch streams: EOF means the client left; anything else is a
        pipelined request that h11 keeps for after the watch."""
        while True:
            data = await self.stream.receive_some(_RECEIVE_SIZE)
            if not data:
                handle.peer_gone = True
                handle.scope.cancel()
                return
            self.h11.receive_data(data)
            if len(self.h11.trailing_data[0]) > MAX_BODY:
                handle.drop(abrupt=True)
                return

    async def _send_lines(self, lines: Iterable[bytes]) -> None:
        batch: list[bytes] = []
        size = 0
        for line in lines:
            batch.append(line)
            size += len(line)
            if size >= _CHUNK_TARGET:
                await self._send(h11.Data(data=b"".join(batch)))
                batch, size = [], 0
        if batch:
            await self._send(h11.Data(data=b"".join(batch)))
