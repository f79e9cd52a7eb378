"""A loopback TCP proxy whose test can stall chosen connections, for watch-stall tests.

``async with stall_proxy(upstream_port) as proxy:`` listens on a free loopback port and
forwards every connection to ``127.0.0.1:upstream_port``.  It notes the target of the last
HTTP request each client sent, so :meth:`StallProxy.stall` can pick the connections that
are carrying a watch at that moment and stop forwarding their server → client bytes: both
TCP connections stay open, the client's kernel still ACKs everything, the server's writes
pile up in the proxy's receive buffer, and nothing reaches the client.  Connections opened
later, and all others, keep working (unless :attr:`StallProxy.stall_new` is set).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import trio

_REQUEST_LINE = re.compile(rb"(?:GET|POST|PUT|PATCH|DELETE|HEAD) (\S+) HTTP/1\.[01]\r\n")


class _Pair:
    def __init__(self) -> None:
        self.target = b""  # the last request target the client sent
        self.stalled = trio.Event()
        self.open = True


class StallProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.pairs: list[_Pair] = []
        #: stall every connection opened from now on too (a peer that accepts and is mute)
        self.stall_new = False

    def stall(self, watching: Callable[[bytes], bool]) -> int:
        """Stop forwarding server → client bytes on every open connection whose last
        request target satisfies ``watching``; returns how many were stalled."""
        hit = [p for p in self.pairs if p.open and watching(p.target)]
        for pair in hit:
            pair.stalled.set()
        return len(hit)

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                    ) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, client: trio.SocketStream) -> None:
        pair = _Pair()
        if self.stall_new:
            pair.stalled.set()
        self.pairs.append(pair)
        try:
            async with client, await trio.open_tcp_stream("127.0.0.1", self.upstream_port) \
                    as server, trio.open_nursery() as nursery:
                nursery.start_soon(self._upstream, client, server, pair, nursery.cancel_scope)
                nursery.start_soon(self._downstream, server, client, pair, nursery.cancel_scope)
        except* (OSError, trio.BrokenResourceError):
            pass  # either side reset: this pair is done, the others carry on
        finally:
            pair.open = False

    @staticmethod
    async def _upstream(client: trio.SocketStream, server: trio.SocketStream, pair: _Pair,
                        scope: trio.CancelScope) -> None:
        while data := await client.receive_some(65536):
            for match in _REQUEST_LINE.finditer(data):
                pair.target = match.group(1)
            await server.send_all(data)
        scope.cancel()

    @staticmethod
    async def _downstream(server: trio.SocketStream, client: trio.SocketStream, pair: _Pair,
                          scope: trio.CancelScope) -> None:
        while True:
            if pair.stalled.is_set():
                await trio.sleep_forever()  # read nothing more: etcd's writes back up
            data: bytes | None = None
            with trio.move_on_after(0.05):  # re-check the stall flag between reads
                data = await server.receive_some(65536)
            if data is None:
                continue
            if not data:
                break
            if pair.stalled.is_set():
                await trio.sleep_forever()  # read while stalling: hold it back too
            await client.send_all(data)
        scope.cancel()


@asynccontextmanager
async def stall_proxy(upstream_port: int) -> AsyncIterator[StallProxy]:
    proxy = StallProxy(upstream_port)
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.serve)
        yield proxy
        nursery.cancel_scope.cancel()
