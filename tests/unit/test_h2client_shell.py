"""The trio HTTP/2 client connection: requests, keepalive PING deadline in virtual time
(autojump_clock), TLS with ALPN h2 and a client certificate (trustme), against a small h2
server written here on h2's own server state machine."""

from __future__ import annotations

import ssl
from functools import partial

import h2.config
import h2.connection
import h2.events
import pytest
import trio
import trio.lowlevel
import trio.testing
import trustme

from trio_typha.h2client.shell import (
    H2ClientConnection,
    H2ConnectionError,
    Keepalive,
    SharedConnection,
    connect_tcp,
)


async def echo_server(stream: trio.abc.Stream, *, stop_reading_after: float | None = None) -> None:
    """Answers each request with its body echoed and a ``grpc-status: 0`` trailer; h2 acks
    PINGs itself. With ``stop_reading_after`` it goes silent (reads and answers nothing)
    that many seconds in, as a peer behind a blackholed path does."""
    conn = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=False, header_encoding=None))
    conn.initiate_connection()
    await stream.send_all(conn.data_to_send())
    bodies: dict[int, bytes] = {}
    deadline = trio.current_time() + (stop_reading_after if stop_reading_after is not None
                                      else float("inf"))
    while True:
        with trio.move_on_at(deadline):
            data = await stream.receive_some(65536)
        if trio.current_time() >= deadline:
            await trio.sleep_forever()
        if not data:
            return
        for ev in conn.receive_data(data):
            if isinstance(ev, h2.events.DataReceived):
                bodies[ev.stream_id] = bodies.get(ev.stream_id, b"") + ev.data
                conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded):
                sid = ev.stream_id
                conn.send_headers(sid, [(b":status", b"200")])
                conn.send_data(sid, bodies.pop(sid, b""))
                conn.send_headers(sid, [(b"grpc-status", b"0")], end_stream=True)
        if out := conn.data_to_send():
            await stream.send_all(out)


async def test_request_round_trip() -> None:
    client_end, server_end = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(echo_server, server_end)
        conn = H2ClientConnection(client_end, authority="x")
        await nursery.start(conn.run)
        s = await conn.open_stream(b"POST", b"/echo")
        await s.send(b"ping-pong " * 1000, end_stream=True)
        assert dict(await s.response())[b":status"] == b"200"
        body = b""
        while chunk := await s.receive():
            body += chunk
        assert body == b"ping-pong " * 1000
        assert s.trailers == [(b"grpc-status", b"0")]
        await conn.aclose()
        await conn.ended.wait()
        nursery.cancel_scope.cancel()


async def test_keepalive_pings_keep_a_responsive_connection(autojump_clock) -> None:
    client_end, server_end = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(echo_server, server_end)
        conn = H2ClientConnection(client_end, authority="x",
                                  keepalive=Keepalive(idle=30.0, timeout=10.0))
        await nursery.start(conn.run)
        s = await conn.open_stream(b"POST", b"/watch")
        await trio.sleep(305.0)
        assert not conn.ended.is_set()
        # One PING per 30 s of read silence, each acked at once.
        assert conn.pings_acked == conn.core.pings_sent == 10
        s.reset()
        await conn.aclose()
        nursery.cancel_scope.cancel()


async def test_unanswered_ping_ends_the_connection_within_the_deadline(autojump_clock) -> None:
    client_end, server_end = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: echo_server(server_end, stop_reading_after=5.0))
        conn = H2ClientConnection(client_end, authority="x",
                                  keepalive=Keepalive.for_deadline(40.0))
        await nursery.start(conn.run)
        s = await conn.open_stream(b"POST", b"/watch")
        last_read = trio.current_time()  # the server's SETTINGS ack came in at once
        with pytest.raises(H2ConnectionError, match="no HTTP/2 PING ack within 10 s"):
            await s.receive()
        # Silent since its last frame: a PING 20 s later, dead 10 s after that.
        assert trio.current_time() - last_read == pytest.approx(30.0, abs=0.01)
        assert conn.ended.is_set() and "PING" in conn.end_reason
        with pytest.raises(H2ConnectionError, match="PING"):
            await conn.open_stream(b"POST", b"/again")
        nursery.cancel_scope.cancel()


async def test_peer_eof_fails_open_streams() -> None:
    client_end, server_end = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        conn = H2ClientConnection(client_end, authority="x")
        await nursery.start(conn.run)
        s = await conn.open_stream(b"POST", b"/watch")
        await server_end.aclose()
        with pytest.raises(H2ConnectionError) as info:
            await s.receive()
        assert not info.value.refused
        nursery.cancel_scope.cancel()


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


async def _tls_server(ca: trustme.CA, alpn: list[str]):
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    ca.configure_trust(server_ctx)
    server_ctx.verify_mode = ssl.CERT_REQUIRED  # a client certificate is required
    server_ctx.set_alpn_protocols(alpn)
    seen: list[str | None] = []

    async def handle(tcp: trio.SocketStream) -> None:
        tls = trio.SSLStream(tcp, server_ctx, server_side=True)
        try:
            await tls.do_handshake()
            seen.append(tls.selected_alpn_protocol())
            await echo_server(tls)
        except trio.BrokenResourceError:
            pass

    return handle, seen


def _client_ctx(ca: trustme.CA) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    ca.issue_cert("typha-client").configure_cert(ctx)
    return ctx


async def test_tls_alpn_h2_with_client_certificate(ca: trustme.CA) -> None:
    handle, seen = await _tls_server(ca, ["h2"])
    async with trio.open_nursery() as nursery:
        (listener,) = await nursery.start(partial(trio.serve_tcp, handle, 0, host="127.0.0.1"))
        port = listener.socket.getsockname()[1]
        sock = await connect_tcp("127.0.0.1", port, ssl_context=_client_ctx(ca))
        conn = H2ClientConnection(sock, authority=f"127.0.0.1:{port}", scheme="https")
        await nursery.start(conn.run)
        s = await conn.open_stream(b"POST", b"/echo")
        await s.send(b"over tls", end_stream=True)
        assert await s.receive() == b"over tls"
        assert seen == ["h2"]
        await conn.aclose()
        nursery.cancel_scope.cancel()


async def test_tls_server_without_h2_is_refused(ca: trustme.CA) -> None:
    handle, _ = await _tls_server(ca, ["http/1.1"])
    async with trio.open_nursery() as nursery:
        (listener,) = await nursery.start(partial(trio.serve_tcp, handle, 0, host="127.0.0.1"))
        port = listener.socket.getsockname()[1]
        with pytest.raises(H2ConnectionError, match="did not agree to HTTP/2") as info:
            await connect_tcp("127.0.0.1", port, ssl_context=_client_ctx(ca))
        assert info.value.refused
        nursery.cancel_scope.cancel()


async def test_alive_is_answered_by_a_peer_that_reads(autojump_clock) -> None:
    """``alive``: a PING acked in time says the connection is fine (one quiet stream is
    that stream's trouble); a peer gone silent leaves it unacked."""
    for silent_after, expected in ((None, True), (1.0, False)):
        client_end, server_end = trio.testing.memory_stream_pair()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(echo_server, server_end,
                                       stop_reading_after=silent_after))
            conn = H2ClientConnection(client_end, authority="x")
            await nursery.start(conn.run)
            await trio.sleep(2.0)
            assert await conn.alive(0.5) is expected
            assert conn.pings_acked == (1 if expected else 0)
            await conn.aclose()
            nursery.cancel_scope.cancel()


async def test_shared_connection_is_opened_once_and_reopened_after_it_ends() -> None:
    opened: list[H2ClientConnection] = []

    async def connect() -> H2ClientConnection:
        client_end, server_end = trio.testing.memory_stream_pair()
        nursery.start_soon(echo_server, server_end)
        await trio.lowlevel.checkpoint()  # the others ask meanwhile: they wait, not open
        opened.append(H2ClientConnection(client_end, authority="x"))
        return opened[-1]

    ended: list[H2ClientConnection] = []
    shared = SharedConnection(connect, on_end=ended.append)
    with pytest.raises(RuntimeError, match="not running"):
        await shared.get()
    async with trio.open_nursery() as nursery:
        await nursery.start(shared.run)
        got: list[H2ClientConnection] = []

        async def ask() -> None:
            got.append(await shared.get())

        async with trio.open_nursery() as askers:
            for _ in range(5):
                askers.start_soon(ask)
        assert len(opened) == 1 and got == opened * 5
        s = await got[0].open_stream(b"POST", b"/echo")
        await s.send(b"x", end_stream=True)
        assert await s.receive() == b"x"
        await shared.aclose()  # ended: the next get opens a new one
        await trio.testing.wait_all_tasks_blocked()
        assert ended == opened[:1] and shared.conn is None
        assert await shared.get() is opened[1] and shared.connections_opened == 2
        nursery.cancel_scope.cancel()
