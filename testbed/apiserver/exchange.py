"""What both wire protocols share: answering a request, and the life of a watch stream.

:mod:`.connection` (HTTP/1.1, h11) and :mod:`.h2connection` (HTTP/2, h2) only frame what
these functions produce: a request becomes a :class:`~.api.Response` or a
:class:`~.api.WatchPlan` here, and a watch's lines come from :func:`stream_watch` whichever
protocol carries them (chunks of a chunked body, or DATA frames of one stream).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

import trio

from .api import Api, Request, Response, WatchPlan
from .status import ApiError, internal_error
from .watch import error_line

logger = logging.getLogger("testbed.apiserver")

CHUNK_TARGET = 256 * 1024  # coalesce watch lines into writes of about this size


class WatchHandle:
    """An open watch stream, as the server's test hooks see it."""

    def __init__(self, plan: WatchPlan) -> None:
        self.plan = plan
        self.scope = trio.CancelScope(deadline=trio.current_time() + plan.timeout)
        self.abrupt = False  # end by closing the connection rather than the stream
        self.peer_gone = False

    def drop(self, *, abrupt: bool) -> None:
        self.abrupt = abrupt
        self.scope.cancel()


@dataclass(slots=True)
class Traffic:
    """What clients have cost this server, counted by its connections (both protocols).

    ``requests`` counts HTTP/1.1 request lines and HTTP/2 HEADERS frames that open a
    stream; ``watches`` the watch streams among them; ``pings`` the HTTP/2 PINGs
    received (each answered by h2 itself)."""

    connections: int = 0
    h2_connections: int = 0
    requests: int = 0
    watches: int = 0
    pings: int = 0
    bytes_in: int = 0
    bytes_out: int = 0


class Host(Protocol):
    """What a connection uses of the server it belongs to (:class:`~.server.ApiServer`)."""

    api: Api
    latency: float
    bookmark_interval: float
    traffic: Traffic

    def changed_event(self) -> trio.Event: ...

    def watch_opened(self, handle: WatchHandle) -> None: ...

    def watch_closed(self, handle: WatchHandle) -> None: ...

    async def hub_open(self) -> None:
        """Return once watches may send (at once unless the hub is wedged)."""


async def answer(server: Host, request: Request) -> Response | WatchPlan:
    """The API's answer to ``request``, after the latency hook; a bug in the API costs
    this one request a 500, never the connection."""
    server.traffic.requests += 1
    if server.latency > 0:
        await trio.sleep(server.latency)
    try:
        result = server.api.handle(request)
    except Exception as e:  # a bug must cost one request, not the server
        logger.exception("apiserver: %s %s failed", request.method, request.target)
        result = Response.error(internal_error(repr(e)))
    logger.debug("apiserver: %s %s -> %s", request.method, request.target,
                 "watch" if isinstance(result, WatchPlan) else result.status)
    return result


def opening(plan: WatchPlan) -> tuple[list[bytes], bool]:
    """The lines a watch starts with, and whether they end it (an in-stream ERROR, e.g.
    410 for a forgotten revision, as the real server reports it)."""
    try:
        return plan.cursor.initial_lines(), False
    except ApiError as e:
        return [error_line(e)], True


async def stream_watch(server: Host, plan: WatchPlan, handle: WatchHandle,
                       send: Callable[[bytes], Awaitable[None]]) -> None:
    """Send the watch's opening lines, then its events and bookmarks, until compaction
    ends it (an ERROR line) or the caller's ``handle.scope`` does (timeout, drop, the peer
    gone).  ``send`` takes one batch of whole lines.  While the server's watch hub is
    wedged (:meth:`Host.hub_open`) the watch sends nothing at all, then catches up."""
    server.traffic.watches += 1
    await server.hub_open()
    lines, failed = opening(plan)
    await _send_lines(send, lines)
    if failed:
        return
    cursor = plan.cursor
    interval = server.bookmark_interval
    deadline = handle.scope.deadline

    def bookmark_after(now: float) -> float:
        # kube-apiserver's schedule (storage/cacher/cache_watcher.go nextBookmarkTime):
        # every interval whatever the traffic, and once 2 s before the deadline.
        at = min(now + interval, deadline - 2.0)
        return at if at > now else math.inf

    next_bookmark = bookmark_after(trio.current_time()) if plan.bookmarks else math.inf
    while True:
        await server.hub_open()
        changed = server.changed_event()  # taken before polling: no lost wakeups
        try:
            lines = cursor.poll()
        except ApiError as e:  # history moved past us (compaction)
            await _send_lines(send, [error_line(e)])
            return
        if trio.current_time() >= next_bookmark:
            bookmark = cursor.periodic_bookmark()
            if bookmark is not None:
                lines.append(bookmark)
            next_bookmark = bookmark_after(trio.current_time())
        if lines:
            await _send_lines(send, lines)
        else:
            with trio.move_on_at(next_bookmark):
                await changed.wait()


def batches(lines: Iterable[bytes]) -> Iterator[bytes]:
    """``lines`` joined into writes of about :data:`CHUNK_TARGET` bytes."""
    batch: list[bytes] = []
    size = 0
    for line in lines:
        batch.append(line)
        size += len(line)
        if size >= CHUNK_TARGET:
            yield b"".join(batch)
            batch, size = [], 0
    if batch:
        yield b"".join(batch)


async def _send_lines(send: Callable[[bytes], Awaitable[None]], lines: Iterable[bytes]
                      ) -> None:
    for batch in batches(lines):
        await send(batch)
