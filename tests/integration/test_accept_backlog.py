"""Connections waiting in the kernel's backlog are all accepted in one scheduling turn.

Under a connection storm every session writing a snapshot runs once per trio scheduling
turn, so a turn lasts as long as all of them take; an accept loop that takes one socket per
turn leaves the last clients of a thousand waiting tens of seconds for their handshake.
Counted in turns here (a task that does nothing but checkpoint runs once per turn), so the
test depends on the scheduling order, not on the machine's speed.
"""

from __future__ import annotations

import socket

import trio
import trio.lowlevel

from trio_typha.server.backlog import ACCEPT_BATCH, BacklogListener
from trio_typha.sessions.connections import Connection, ConnectionRegistry, SocketListener

CLIENTS = 120


async def turns_to_accept(listener: SocketListener, port: int, n: int) -> int:
    """Scheduling turns from ``n`` clients' connect() until the registry has started a
    handler for every one of them (the real accept loop, ConnectionRegistry.serve)."""
    turns = 0
    started: list[int] = []
    all_started = trio.Event()

    async def count_turns() -> None:
        nonlocal turns
        while True:
            turns += 1
            await trio.lowlevel.checkpoint()

    async def handler(stream: trio.SocketStream, conn: Connection) -> None:
        started.append(turns)
        if len(started) == n:
            all_started.set()
        await trio.sleep_forever()

    registry = ConnectionRegistry()
    clients: list[socket.socket] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(count_turns)
        await nursery.start(registry.serve, handler, [listener])
        try:
            # Connected (the kernel completes the handshake) before the server runs again.
            for _ in range(n):
                clients.append(socket.create_connection(("127.0.0.1", port)))
            first = turns
            with trio.fail_after(30):
                await all_started.wait()
            nursery.cancel_scope.cancel()
        finally:
            for c in clients:
                c.close()
    return max(started) - first


async def test_a_storm_of_connections_is_accepted_in_a_few_turns() -> None:
    inner = (await trio.open_tcp_listeners(0, host="127.0.0.1", backlog=1024))[0]
    port = inner.socket.getsockname()[1]
    turns = await turns_to_accept(BacklogListener(inner), port, CLIENTS)
    # One turn to wake on the listening socket, one per batch, one for the handlers.
    assert turns <= 2 + CLIENTS // ACCEPT_BATCH + 2, turns


async def test_trio_listener_alone_takes_a_turn_per_connection() -> None:
    # The measure against which the test above means something: the plain listener.
    inner = (await trio.open_tcp_listeners(0, host="127.0.0.1", backlog=1024))[0]
    port = inner.socket.getsockname()[1]
    turns = await turns_to_accept(inner, port, CLIENTS)
    assert turns >= CLIENTS - 1, turns


def closed_by_server(client: socket.socket) -> bool:
    client.settimeout(5)
    try:
        return client.recv(1) == b""
    except ConnectionResetError:
        return True


async def test_closing_closes_sockets_taken_but_not_handed_out() -> None:
    inner = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = inner.socket.getsockname()[1]
    listener = BacklogListener(inner)
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
    try:
        first = await listener.accept()
        assert listener.backlog_taken == 2
        await listener.aclose()
        assert listener.backlog_taken == 0
        others = [c for c in clients if c.getsockname() != first.socket.getpeername()]
        assert len(others) == 2
        assert all(closed_by_server(c) for c in others)
        await first.aclose()
    finally:
        for c in clients:
            c.close()
