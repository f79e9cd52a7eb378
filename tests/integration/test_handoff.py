"""The primary's BalancingListener passes real TCP sockets (SCM_RIGHTS) to its workers'
ReceivedSocketListeners; here both "workers" are in this process, over real socketpairs."""

from __future__ import annotations

import socket
from dataclasses import dataclass

import pytest
import trio

from trio_typha.workers.handoff import BalancingListener, ReceivedSocketListener


@dataclass
class FakeWorker:
    """What the balancer reads of a worker: the pool's WorkerState fields."""

    index: int
    control: socket.socket | None
    running: bool = True
    passed: int = 0
    closed: int = 0


async def echo(stream: trio.SocketStream, tag: bytes) -> None:
    async with stream:
        while data := await stream.receive_some(4096):
            await stream.send_all(tag + data)


async def test_balancer_spreads_connections_and_passed_sockets_work() -> None:
    inner = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = inner.socket.getsockname()[1]
    pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(2)]
    workers = [FakeWorker(i + 1, ours) for i, (ours, _) in enumerate(pairs)]
    for ours, _ in pairs:
        ours.setblocking(False)
    own: list[trio.SocketStream] = []
    balancer = BalancingListener(inner, lambda: len(own), lambda: workers)
    received = [ReceivedSocketListener(theirs) for _, theirs in pairs]
    served = [0, 0]
    clients: list[trio.SocketStream] = []

    async def primary() -> None:
        while True:
            stream = await balancer.accept()
            own.append(stream)
            nursery.start_soon(echo, stream, b"p:")

    async def worker(i: int) -> None:
        while True:
            try:
                stream = await received[i].accept()
            except trio.ClosedResourceError:
                return  # closed below: this worker is gone
            served[i] += 1
            nursery.start_soon(echo, stream, f"w{i + 1}:".encode())

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(primary)
            for i in range(2):
                nursery.start_soon(worker, i)
            replies = []
            for n in range(40):
                client = await trio.open_tcp_stream("127.0.0.1", port)
                clients.append(client)
                await client.send_all(b"hello %d" % n)
                replies.append(await client.receive_some(4096))
            # Every socket works end to end, and each process served a third (+-1).
            tags = [r.split(b":")[0] for r in replies]
            assert all(r.endswith(b"hello %d" % n) for n, r in enumerate(replies))
            counts = [tags.count(t) for t in (b"p", b"w1", b"w2")]
            assert counts == [len(own), *served]
            assert max(counts) - min(counts) <= 1, counts
            assert [w.passed for w in workers] == served == [r.accepted for r in received]
            # A worker that goes away: the balancer marks it and serves its share itself.
            await received[0].aclose()
            before = len(own)
            for _ in range(6):
                client = await trio.open_tcp_stream("127.0.0.1", port)
                clients.append(client)
                await client.send_all(b"x")
                assert not (await client.receive_some(4096)).startswith(b"w1:")
            assert not workers[0].running and len(own) > before
            for c in clients:
                await c.aclose()
            nursery.cancel_scope.cancel()
    await balancer.aclose()
    await received[1].aclose()


async def test_control_socket_eof_closes_the_worker_listener() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    listener = ReceivedSocketListener(theirs)
    ours.close()  # the primary is gone
    with trio.fail_after(5), pytest.raises(trio.ClosedResourceError):
        await listener.accept()
    await listener.aclose()
