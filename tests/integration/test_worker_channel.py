"""Both ends of the primary <-> worker control channel (workers/channel.py) over a real
socketpair, in virtual time: a worker's status arrives when it changes (not on a poll),
queries are answered, and limit, drain and the primary's going away reach the worker."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass, field

import pytest
import trio

from trio_typha.workers import control as c
from trio_typha.workers.channel import STATUS_RECHECK, ControlSocket, PrimaryLink, WorkerLink


@dataclass
class FakeWorkerState:
    """What the worker end reports and what reached it."""

    ready: bool = False
    accepted: int = 0
    open: int = 0
    limits: list[int] = field(default_factory=list)
    drained: int = 0
    gone: int = 0

    def status(self) -> c.Status:
        return c.Status(self.ready, self.accepted, self.open, "" if self.ready else "starting")

    def answer(self, what: int) -> bytes:
        if what == c.METRICS:
            return b"typha_connections_active %d.0\n" % self.open
        return json.dumps({"connections": [{"id": i} for i in range(self.open)]}).encode()


async def statuses_until(received: list[tuple[float, c.Status]], n: int) -> None:
    while len(received) < n:  # noqa: ASYNC110 - the link's reader appends
        await trio.sleep(0.001)


async def test_status_queries_limit_drain_and_the_primary_going(autojump_clock) -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    state = FakeWorkerState()
    worker = PrimaryLink(ControlSocket(theirs), status=state.status, answer=state.answer,
                         on_limit=state.limits.append,
                         on_drain=lambda: setattr(state, "drained", state.drained + 1),
                         on_gone=lambda: setattr(state, "gone", state.gone + 1))
    primary = WorkerLink(ours, 1)
    received: list[tuple[float, c.Status]] = []
    primary.on_status = lambda s: received.append((trio.current_time(), s))
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(primary.run)
            await nursery.start(worker.run)
            await statuses_until(received, 1)  # the first one says the worker is up
            assert received[0][1] == c.Status(False, 0, 0, "starting")
            # A change reported by whatever made it goes out at once (no virtual time
            # passes: nothing waited for a poll).
            t0 = trio.current_time()
            state.ready, state.accepted, state.open = True, 3, 2
            worker.changed()
            await statuses_until(received, 2)
            assert received[1] == (t0, c.Status(True, 3, 2, ""))
            # Nothing changed: nothing is sent, however often the worker looks.
            await trio.sleep(5 * STATUS_RECHECK)
            assert len(received) == 2
            # A change nobody announced (time-based health) is seen on the worker's own
            # recheck, and only then sent.
            t1 = trio.current_time()
            state.ready = False
            await statuses_until(received, 3)
            assert 0 < received[2][0] - t1 <= STATUS_RECHECK and not received[2][1].ready
            # Queries: answered with what the worker has now.
            assert await primary.query(c.METRICS) == b"typha_connections_active 2.0\n"
            doc = await primary.query(c.CONNECTIONS)
            assert doc is not None and len(json.loads(doc)["connections"]) == 2
            # Limit and drain reach the worker.
            assert await primary.send(c.encode_limit(1234))
            assert await primary.send(c.DRAIN_RECORD)
            while not state.drained:  # noqa: ASYNC110
                await trio.sleep(0.001)
            assert state.limits == [1234] and state.drained == 1
            # The primary goes: the worker hears it, and its listener accepts no more.
            primary.close()
            while not state.gone:  # noqa: ASYNC110
                await trio.sleep(0.001)
            with pytest.raises(trio.ClosedResourceError):
                await worker.listener.accept()
            nursery.cancel_scope.cancel()
    worker.close()


async def test_a_query_to_a_silent_worker_gives_up(autojump_clock) -> None:
    from trio_typha.workers.channel import QUERY_TIMEOUT

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    primary = WorkerLink(ours, 1)
    async with trio.open_nursery() as nursery:
        await nursery.start(primary.run)
        t0 = trio.current_time()
        assert await primary.query(c.METRICS) is None  # nobody reads the other end
        assert trio.current_time() - t0 == pytest.approx(QUERY_TIMEOUT)
        nursery.cancel_scope.cancel()
    primary.close()
    theirs.close()


async def test_garbage_from_the_primary_ends_the_worker_channel_alone(autojump_clock) -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    state = FakeWorkerState()
    worker = PrimaryLink(ControlSocket(theirs), status=state.status, answer=state.answer,
                         on_gone=lambda: setattr(state, "gone", state.gone + 1))
    ours.sendall(b"\x63\x00\x00\x00\x00")  # record type 99
    with trio.fail_after(10):
        await worker.run()  # returns: the channel is unusable, the worker is told
    assert state.gone == 1
    worker.close()
    ours.close()


async def test_passed_sockets_arrive_in_order_with_their_records() -> None:
    """Many passes in one burst, interleaved with queries: every descriptor is a live
    socket, delivered in the order passed."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    state = FakeWorkerState()
    worker = PrimaryLink(ControlSocket(theirs), status=state.status, answer=state.answer)
    primary = WorkerLink(ours, 1)
    pairs = [socket.socketpair() for _ in range(40)]
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(primary.run)
            await nursery.start(worker.run)
            for i, (mine, _) in enumerate(pairs):
                assert await primary.control.send(c.PASS_RECORD, [mine.fileno()])
                if i % 7 == 0:
                    assert await primary.query(c.METRICS) is not None
            for i, (_, peer) in enumerate(pairs):
                stream = await worker.listener.accept()
                peer.sendall(b"%d" % i)
                assert await stream.receive_some(16) == b"%d" % i
                await stream.aclose()
            assert worker.listener.accepted == len(pairs)
            nursery.cancel_scope.cancel()
    for mine, peer in pairs:
        mine.close()
        peer.close()
    worker.close()
    primary.close()


async def test_garbage_from_a_worker_closes_its_channel(autojump_clock) -> None:
    """The worker then hears its primary gone and drains; the pool starts a new one."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    primary = WorkerLink(ours, 1)
    theirs.sendall(c.encode_query(1, c.METRICS))  # only the primary sends queries
    with trio.fail_after(10):
        await primary.run()
    assert theirs.recv(16) == b""  # EOF
    theirs.close()
