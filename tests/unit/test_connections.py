"""The one registry of live connections: accepting like trio.serve_listeners, shedding, drain."""

from __future__ import annotations

import errno
import logging
from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing

from trio_typha.sessions.connections import Connection, ConnectionRegistry, State


class Gauge:
    def __init__(self) -> None:
        self.value = 0

    def inc(self) -> None:
        self.value += 1

    def dec(self) -> None:
        self.value -= 1


class FlakyListener(trio.abc.Listener[trio.SocketStream]):
    """Accept fails with the given errors first, then hands out one end of a socket pair."""

    def __init__(self, errors: list[OSError]) -> None:
        self.errors = errors
        self.peers: list[trio.SocketStream] = []
        self.closed = False

    async def accept(self) -> trio.SocketStream:
        await trio.lowlevel.checkpoint()
        if self.errors:
            raise self.errors.pop(0)
        if len(self.peers) >= 2:
            await trio.sleep_forever()
        server, client = trio.socket.socketpair()
        self.peers.append(trio.SocketStream(client))
        return trio.SocketStream(server)

    async def aclose(self) -> None:
        self.closed = True


async def test_each_accepted_socket_is_registered_while_its_handler_runs() -> None:
    active, accepted = Gauge(), Gauge()
    registry = ConnectionRegistry(active=active, accepted=accepted)
    seen: list[Connection] = []
    release = trio.Event()

    async def handler(stream: trio.SocketStream, conn: Connection) -> None:
        seen.append(conn)
        await release.wait()

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        await nursery.start(registry.serve, handler, listeners)
        assert registry.listening
        clients = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(3)]
        with trio.fail_after(5):
            while len(registry) < 3:  # noqa: ASYNC110 - the accept loop has no event
                await trio.sleep(0.01)
        assert active.value == accepted.value == 3
        assert {c.peer for c in registry} == {
            f"127.0.0.1:{c.socket.getsockname()[1]}" for c in clients}
        assert all(c.state is State.HANDSHAKE for c in registry)
        assert len({c.id for c in seen}) == 3 and seen[1].id == seen[0].id + 1
        release.set()
        with trio.fail_after(5):
            while len(registry):  # noqa: ASYNC110
                await trio.sleep(0.01)
        assert active.value == 0
        registry.stop_accepting()
        for c in clients:
            await c.aclose()
    assert not registry.listening


async def test_accept_retries_only_capacity_errors(autojump_clock: Any,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    registry = ConnectionRegistry()
    listener = FlakyListener([OSError(errno.EMFILE, "Too many open files"),
                              OSError(errno.ENOBUFS, "No buffer space available")])
    shed_calls: list[int] = []
    registry.on_capacity_error = lambda exc: shed_calls.append(exc.errno or 0)
    handled = trio.Event()

    async def handler(stream: trio.SocketStream, conn: Connection) -> None:
        handled.set()
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        await nursery.start(registry.serve, handler, [listener])
        start = trio.current_time()
        await handled.wait()
        assert trio.current_time() - start >= 0.2  # two pauses of 0.1 s
        assert shed_calls == [errno.EMFILE, errno.ENOBUFS]
        # With a hook installed the hook logs, at its own pace (FdShedder: once per
        # interval), so a flood of failing accepts is not a flood of lines.
        assert "accept returned EMFILE" not in caplog.text
        registry.close_all()
    assert listener.closed

    other = FlakyListener([OSError(errno.EBADF, "Bad file descriptor")])
    with pytest.raises(ExceptionGroup) as group:
        async with trio.open_nursery() as nursery:
            await nursery.start(ConnectionRegistry().serve, handler, [other])
    assert group.group_contains(OSError, match="Bad file descriptor")


async def test_shed_uses_the_protocols_graceful_close_else_cancels(autojump_clock: Any
                                                                   ) -> None:
    registry = ConnectionRegistry()
    graceful: list[str] = []
    ended: list[str] = []

    async def hold(name: str, *, polite: bool, task_status: Any) -> None:
        with registry.track(name) as conn:
            if polite:
                conn.graceful_close = graceful.append
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                ended.append(name)

    async with trio.open_nursery() as nursery:
        await nursery.start(lambda task_status: hold("rude", polite=False,
                                                     task_status=task_status))
        await nursery.start(lambda task_status: hold("polite", polite=True,
                                                     task_status=task_status))
        first = registry.shed_one("test")
        second = registry.shed_one("test")
        assert {first.peer, second.peer} == {"polite", "rude"}
        assert registry.shed_one("test") is None  # both already asked
        await trio.testing.wait_all_tasks_blocked()
        assert ended == ["rude"] and graceful == ["test"]
        assert [c.state for c in registry] == [State.DRAINING]
        nursery.cancel_scope.cancel()


async def test_sessions_are_listed_with_their_lag(autojump_clock: Any) -> None:
    from trio_typha.cache.feed import CacheFeed
    from trio_typha.model.kv import SerializedUpdate

    feed = CacheFeed("felix")
    feed.apply([SerializedUpdate("/a", b"1")])
    registry = ConnectionRegistry()
    with registry.track("10.0.0.1:5") as conn, \
            registry.session(conn, "grpc", hostname="n1", syncer_type="felix",
                             feed=feed) as one, \
            registry.session(conn, "grpc", hostname="n1", syncer_type="bgp") as two:
        conn.tls_identity = "CN=typha-client"
        one.state = State.STREAMING
        one.reached(feed.latest.seq, feed.latest.timestamp)
        one.sent(100, 2)
        await trio.sleep(3)
        feed.apply([SerializedUpdate("/b", b"2")])
        feed.apply([SerializedUpdate("/c", b"3")])
        assert registry.load == 2
        rows = {r["id"]: r for r in registry.snapshot()}
        assert set(rows) == {one.id, two.id}
        assert rows[one.id]["lag_seq"] == 2 and rows[one.id]["lag_secs"] == pytest.approx(3)
        assert rows[one.id]["bytes_sent"] == 100 and rows[one.id]["messages_sent"] == 2
        assert rows[one.id]["state"] == "streaming" and rows[two.id]["state"] == "handshake"
        assert rows[two.id]["seq"] is None
        assert {r["tls_identity"] for r in rows.values()} == {"CN=typha-client"}
        assert conn.state is State.STREAMING
    assert not registry.sessions and not len(registry)


async def test_drain_closes_one_at_a_time_then_the_rest(autojump_clock: Any) -> None:
    registry = ConnectionRegistry()
    closed_at: list[float] = []

    async def handler(stream: trio.SocketStream, conn: Connection) -> None:
        try:
            await trio.sleep_forever()
        finally:
            closed_at.append(trio.current_time())

    listener = FlakyListener([])
    async with trio.open_nursery() as nursery:
        await nursery.start(registry.serve, handler, [listener])
        await trio.testing.wait_all_tasks_blocked()
        assert len(registry) == 2
        start = trio.current_time()
        await registry.drain(spread_over=10, max_interval=1.0)
    assert listener.closed
    assert len(closed_at) == 2
    assert [round(t - start) for t in closed_at] == [1, 2]
