"""A loopback TCP proxy a test controls, between a daemon and its datastore (the chaos
suite, the watch-stall tests and the etcd watcher tests share it).

``async with open_fault_proxy(upstream_port) as proxy:`` listens on a free loopback port and
forwards every connection to ``127.0.0.1:upstream_port``.  It notes the target of the last
HTTP request each client sent.  ``blackhole(watching)`` stops the server → client bytes of
every open connection whose last request target satisfies ``watching`` (all of them by
default): both TCP connections stay open, the client's kernel still ACKs everything, the
server's writes pile up behind the proxy, and nothing reaches the client; connections opened
later work unless :attr:`FaultProxy.blackhole_new` is set.  ``cut()`` closes every connection and refuses new ones until ``heal()``:
nothing reaches the datastore, so it can be changed (and compacted) behind the watcher's back.
``inject(status, reason)`` (HTTP datastores) closes every connection and answers each request
on a new one with that error (a Kubernetes ``Status``; ``Retry-After`` for 429) until
``heal()``.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import trio

_REASONS = {410: "Gone", 429: "Too Many Requests", 500: "Internal Server Error",
            503: "Service Unavailable"}
_REQUEST_LINE = re.compile(rb"(?:GET|POST|PUT|PATCH|DELETE|HEAD) (\S+) HTTP/1\.[01]\r\n")


def error_response(status: int, reason: str, retry_after: int | None = None) -> bytes:
    body = json.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {},
                       "status": "Failure", "message": f"injected by the chaos proxy: {reason}",
                       "reason": reason, "code": status}).encode()
    head = [f"HTTP/1.1 {status} {_REASONS.get(status, reason)}", "Content-Type: application/json",
            f"Content-Length: {len(body)}", "Connection: close"]
    if retry_after is not None:
        head.append(f"Retry-After: {retry_after}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class _Pair:
    def __init__(self, client: trio.SocketStream, server: trio.SocketStream) -> None:
        self.client = client
        self.server = server
        self.blackholed = False
        self.target = b""  # the last request target the client sent
        self.scope = trio.CancelScope()


class FaultProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.refusing = False
        self.injecting: bytes | None = None  # the canned answer to every request
        self.injected = 0
        #: blackhole every connection opened from now on too (a peer that accepts and is mute)
        self.blackhole_new = False
        self._pairs: set[_Pair] = set()
        self._targets_changed = trio.Event()  # a connection sent a request
        self._nursery: trio.Nursery | None = None

    @property
    def connections(self) -> int:
        return len(self._pairs)

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                    ) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(trio.serve_listeners, self._handle, listeners)
            task_status.started()

    def count(self, watching: Callable[[bytes], bool] = lambda target: True) -> int:
        """How many open connections' last request target satisfies ``watching``."""
        return sum(1 for pair in self._pairs if watching(pair.target))

    async def wait_for(self, watching: Callable[[bytes], bool], n: int) -> None:
        """Until at least ``n`` open connections' last request satisfies ``watching``."""
        while self.count(watching) < n:
            await self._targets_changed.wait()

    def blackhole(self, watching: Callable[[bytes], bool] = lambda target: True) -> int:
        """Silence server → client on every open connection whose last request target
        satisfies ``watching``; returns how many."""
        hit = [pair for pair in self._pairs if watching(pair.target)]
        for pair in hit:
            pair.blackholed = True
        return len(hit)

    def cut(self) -> int:
        """Close every connection and refuse new ones until :meth:`heal`."""
        self.refusing = True
        n = len(self._pairs)
        for pair in list(self._pairs):
            pair.scope.cancel()
        return n

    def inject(self, status: int, reason: str, *, retry_after: int | None = None) -> None:
        """Close every connection; answer every request on a new one with ``status``."""
        self.injecting = error_response(status, reason, retry_after)
        for pair in list(self._pairs):
            pair.scope.cancel()

    def heal(self) -> None:
        """Accept again, and drop the blackholed connections (their peers gave up)."""
        self.refusing = False
        self.injecting = None
        for pair in list(self._pairs):
            if pair.blackholed:
                pair.scope.cancel()

    async def _handle(self, client: trio.SocketStream) -> None:
        if self.refusing:
            await client.aclose()
            return
        if self.injecting is not None:
            await self._answer(client, self.injecting)
            return
        try:
            server = await trio.open_tcp_stream("127.0.0.1", self.upstream_port)
        except OSError:
            await client.aclose()
            return
        pair = _Pair(client, server)
        pair.blackholed = self.blackhole_new
        self._pairs.add(pair)
        try:
            with pair.scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._pump, client, server, pair, False)
                    nursery.start_soon(self._pump, server, client, pair, True)
        finally:
            self._pairs.discard(pair)
            await trio.aclose_forcefully(client)
            await trio.aclose_forcefully(server)

    async def _answer(self, client: trio.SocketStream, response: bytes) -> None:
        """Read one request head, answer it with ``response``, close."""
        head = b""
        with trio.move_on_after(5):
            try:
                while b"\r\n\r\n" not in head and len(head) < 65536:
                    data = await client.receive_some(65536)
                    if not data:
                        break
                    head += data
                if head:
                    await client.send_all(response)
                    self.injected += 1
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        await trio.aclose_forcefully(client)

    async def _pump(self, src: trio.SocketStream, dst: trio.SocketStream, pair: _Pair,
                    downstream: bool) -> None:
        try:
            while True:
                if downstream and pair.blackholed:
                    await trio.sleep_forever()  # bytes pile up upstream; none reach the client
                data = await src.receive_some(65536)
                if not data:
                    break
                if downstream and pair.blackholed:
                    await trio.sleep_forever()
                if not downstream:
                    for match in _REQUEST_LINE.finditer(data):
                        pair.target = match.group(1)
                        self._targets_changed.set()
                        self._targets_changed = trio.Event()
                await dst.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        pair.scope.cancel()


@asynccontextmanager
async def open_fault_proxy(upstream_port: int) -> AsyncIterator[FaultProxy]:
    proxy = FaultProxy(upstream_port)
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.serve)
        yield proxy
        nursery.cancel_scope.cancel()
