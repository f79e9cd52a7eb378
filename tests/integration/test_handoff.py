"""The primary's BalancingListener passes real TCP sockets (SCM_RIGHTS) over its workers'
control channels to their ReceivedSocketListeners; here both "workers" are in this process,
over real socketpairs."""

from __future__ import annotations

import socket
from dataclasses import dataclass

import pytest
import trio

from trio_typha.workers import control as c
from trio_typha.workers.channel import ControlSocket, PrimaryLink, WorkerLink
from trio_typha.workers.handoff import BalancingListener


@dataclass
class Worker:
    """What the balancer reads of a worker: the pool's WorkerState fields."""

    index: int
    link: WorkerLink | None
    running: bool = True
    passed: int = 0
    closed: int = 0


def worker_end(sock: socket.socket) -> PrimaryLink:
    return PrimaryLink(ControlSocket(sock), status=lambda: c.Status(True, 0, 0), answer=lambda what: b"")


async def echo(stream: trio.SocketStream, tag: bytes) -> None:
    async with stream:
        while data := await stream.receive_some(4096):
            await stream.send_all(tag + data)


async def test_balancer_spreads_connections_and_passed_sockets_work() -> None:
    inner = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = inner.socket.getsockname()[1]
    pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(2)]
    workers = [Worker(i + 1, WorkerLink(ours, i + 1)) for i, (ours, _) in enumerate(pairs)]
    own: list[trio.SocketStream] = []
    balancer = BalancingListener(inner, lambda: len(own), lambda: workers)
    links = [worker_end(theirs) for _, theirs in pairs]
    received = [link.listener for link in links]
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
            for link in links:
                await nursery.start(link.run)
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
            links[0].close()
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
    links[1].close()


async def test_control_socket_eof_closes_the_worker_listener() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    gone: list[bool] = []
    link = PrimaryLink(ControlSocket(theirs), status=lambda: c.Status(True, 0, 0), answer=lambda what: b"",
                       on_gone=lambda: gone.append(True))
    ours.close()  # the primary is gone
    with trio.fail_after(5):
        await link.run()
        with pytest.raises(trio.ClosedResourceError):
            await link.listener.accept()
    assert gone == [True]
    link.close()
