"""The server's own TLS stream (tls/stream.py) against trio's client TLS, real sockets
and real certificates (trustme): handshake, reads concurrent with writes, the broadcast
round's send_nowait with its ciphertext carry, clean and unclean ends, garbage."""

from __future__ import annotations

import socket
import ssl

import pytest
import trio
import trustme

from trio_typha.tls.stream import TLSStream

BUFFER = 4096


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def server_context(ca: trustme.CA) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("typha-server").configure_cert(ctx)
    ca.configure_trust(ctx)
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    return ctx


def client_context(ca: trustme.CA, alpn: list[str] | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ca.configure_trust(ctx)
    ca.issue_cert("typha-client", common_name="typha-client").configure_cert(ctx)
    if alpn:
        ctx.set_alpn_protocols(alpn)
    return ctx


async def socket_pair(small: bool = False) -> tuple[trio.SocketStream, trio.SocketStream]:
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    client = trio.socket.socket()
    if small:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BUFFER)
    await client.connect(listener.getsockname())
    server, _ = await listener.accept()
    if small:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BUFFER)
    listener.close()
    return trio.SocketStream(server), trio.SocketStream(client)


async def tls_pair(ca: trustme.CA, *, small: bool = False, alpn: list[str] | None = None
                   ) -> tuple[TLSStream, trio.SSLStream[trio.SocketStream]]:
    raw_server, raw_client = await socket_pair(small)
    server = TLSStream(raw_server, server_context(ca))
    client = trio.SSLStream(raw_client, client_context(ca, alpn),
                            server_hostname="typha-server")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.do_handshake)
        nursery.start_soon(client.do_handshake)
    return server, client


async def receive_exactly(stream: trio.abc.ReceiveStream, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        data = await stream.receive_some(65536)
        assert data, f"EOF after {len(out)} of {n} bytes"
        out += data
    return bytes(out)


def pattern(n: int, seed: int = 0) -> bytes:
    return bytes((i * 7 + seed) % 251 for i in range(n))


async def test_handshake_peer_certificate_alpn_and_echo(ca: trustme.CA) -> None:
    server, client = await tls_pair(ca, alpn=["h2"])
    cert = server.getpeercert()
    assert cert is not None
    assert ("commonName", "typha-client") in [rdn[0] for rdn in cert["subject"]]
    assert server.selected_alpn_protocol() == "h2"
    server.context = server_context(ca)  # the listener swaps contexts after the handshake
    await client.send_all(b"hello")
    assert await receive_exactly(server, 5) == b"hello"
    await server.send_all(b"world")
    assert await receive_exactly(client, 5) == b"world"
    await server.aclose()
    await client.aclose()


async def test_reader_and_writer_tasks_at_once(ca: trustme.CA) -> None:
    """A reader task on each side while both write megabytes: neither blocks the other."""
    server, client = await tls_pair(ca, small=True)
    up, down = pattern(1_000_000, 1), pattern(3_000_000, 2)
    got: dict[str, bytes] = {}

    async def read(name: str, stream: trio.abc.ReceiveStream, n: int) -> None:
        got[name] = await receive_exactly(stream, n)

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read, "server", server, len(up))
            nursery.start_soon(read, "client", client, len(down))
            nursery.start_soon(client.send_all, up)
            nursery.start_soon(server.send_all, down)
    assert got == {"server": up, "client": down}


async def test_send_nowait_carries_what_the_kernel_does_not_take(ca: trustme.CA) -> None:
    server, client = await tls_pair(ca, small=True)
    first, second, third = pattern(200_000, 3), pattern(100, 4), pattern(50_000, 5)
    # The client is not reading: the plaintext is taken whole, the ciphertext is owed.
    assert server.send_nowait(first) == len(first)
    assert server.owes
    with pytest.raises(BlockingIOError):
        server.send_nowait(second)  # one writer: nothing new while bytes are owed
    got = bytearray()

    async def read_all(n: int) -> None:
        got.extend(await receive_exactly(client, n))

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_all, len(first) + len(third))
            await server.flush()  # the writer's flush: the carry goes out
            assert not server.owes
            assert server.send_nowait(third) == len(third)  # socket free again
            await server.flush()
    assert bytes(got) == first + third

    # send_all sends a carry first, so the stream stays in order.
    assert server.send_nowait(first) == len(first) and server.owes
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_all, len(first) + len(second))
            await server.send_all(second)
    assert bytes(got[-(len(first) + len(second)):]) == first + second


async def test_send_nowait_refused_while_send_all_runs(ca: trustme.CA) -> None:
    server, client = await tls_pair(ca, small=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.send_all, pattern(500_000))
        await trio.testing.wait_all_tasks_blocked()  # the writer is blocked mid-send
        with pytest.raises(BlockingIOError):
            server.send_nowait(b"x")
        with pytest.raises(trio.BusyResourceError):
            await server.send_all(b"y")
        await receive_exactly(client, 500_000)


async def test_send_nowait_on_a_reset_connection_raises_oserror(ca: trustme.CA) -> None:
    server, client = await tls_pair(ca)
    client.transport_stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                              b"\x01\x00\x00\x00\x00\x00\x00\x00")
    client.transport_stream.socket.close()  # RST
    await trio.sleep(0.05)
    with pytest.raises(OSError):
        for _ in range(3):  # the first send may still be taken before the RST is seen
            server.send_nowait(b"x" * 1000)
    with pytest.raises(trio.BrokenResourceError):
        await server.send_all(b"more")


async def test_close_notify_from_the_client_is_a_clean_eof(ca: trustme.CA) -> None:
    server, client = await tls_pair(ca)
    await client.send_all(b"bye")
    await client.aclose()  # sends close_notify
    assert await receive_exactly(server, 3) == b"bye"
    assert await server.receive_some(100) == b""
    await server.aclose()
    with pytest.raises(trio.ClosedResourceError):
        await server.receive_some(100)


async def test_server_close_sends_close_notify(ca: trustme.CA) -> None:
    server, client = await tls_pair(ca)
    await server.send_all(b"last")
    await server.aclose()
    assert await receive_exactly(client, 4) == b"last"
    assert await client.receive_some(100) == b""  # close_notify, not a ragged EOF


async def test_eof_without_close_notify_is_broken(ca: trustme.CA) -> None:
    server, client = await tls_pair(ca)
    await server.send_all(b"x")
    await receive_exactly(client, 1)  # and the session tickets: nothing left unread
    await client.transport_stream.aclose()  # TCP FIN, no close_notify
    with pytest.raises(trio.BrokenResourceError) as info:
        await server.receive_some(100)
    assert isinstance(info.value.__cause__, ssl.SSLError)


async def test_garbage_instead_of_a_handshake(ca: trustme.CA) -> None:
    raw_server, raw_client = await socket_pair()
    server = TLSStream(raw_server, server_context(ca))
    await raw_client.send_all(b"\x16\x03\x01\x00\x05" + b"\xff" * 64)
    with pytest.raises(trio.BrokenResourceError) as info:
        await server.do_handshake()
    assert isinstance(info.value.__cause__, ssl.SSLError)
    # The alert goes out (best effort, non-blocking), then the server closes.
    await server.aclose()
    data = await raw_client.receive_some(100)
    assert data[:1] == b"\x15"  # an alert record
    assert await raw_client.receive_some(100) == b""


async def test_garbage_after_the_handshake(ca: trustme.CA) -> None:
    server, client = await tls_pair(ca)
    await client.transport_stream.send_all(b"\x17\x03\x03\x00\x20" + b"\x00" * 32)
    with pytest.raises(trio.BrokenResourceError) as info:
        await server.receive_some(100)
    assert isinstance(info.value.__cause__, ssl.SSLError)
    with pytest.raises(trio.BrokenResourceError):
        await server.send_all(b"x")
    with pytest.raises(OSError):
        server.send_nowait(b"x")
    await server.aclose()
    # The client hears why (OpenSSL's alert for the bad record), not just an unclean EOF.
    with pytest.raises(trio.BrokenResourceError) as heard:
        await client.receive_some(100)
    assert "ALERT" in str(heard.value.__cause__), heard.value.__cause__


def test_server_context_refuses_renegotiation(ca: trustme.CA, tmp_path) -> None:
    """A write must never need a read: TLS 1.2 renegotiation is off on the server."""
    from trio_typha.config import Config
    from trio_typha.tls.server import TLSPolicy, server_ssl_context
    server = ca.issue_cert("typha-server")
    paths = {name: str(tmp_path / f"{name}.pem") for name in ("cert", "key", "ca")}
    server.cert_chain_pems[0].write_to_path(paths["cert"])
    server.private_key_pem.write_to_path(paths["key"])
    ca.cert_pem.write_to_path(paths["ca"])
    ctx = server_ssl_context(paths["cert"], paths["key"], paths["ca"],
                             TLSPolicy.from_config(Config()))
    assert ctx.options & ssl.OP_NO_RENEGOTIATION
