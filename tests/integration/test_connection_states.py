"""Every connection state ends in time, with a named reason, while canaries keep receiving:
TLS and HTTP/1.x on the plaintext port at once, idle HTTP/2 connections after their timeout."""

from __future__ import annotations

import logging

import trio

from testbed.hostile import (
    HTTP1_REQUEST,
    Canary,
    canary_key,
    h2_idle,
    raw_bytes,
    rss_bytes,
    tls_client_hello,
    wait_delivered,
    write_canaries,
)

IDLE = 200  # idle HTTP/2 connections at once


async def test_tls_client_hello_on_the_plaintext_port_is_closed_at_once(memory_daemon, caplog):
    caplog.set_level(logging.INFO)
    daemon = await memory_daemon()
    # Well inside the 10 s handshake timeout: the hello is recognized, not waited out.
    with trio.fail_after(5):
        outcome = await raw_bytes("127.0.0.1", daemon.ports["server"], tls_client_hello())
    assert outcome.closed and outcome.bytes_received == 0
    assert "TLS ClientHello on a plaintext connection" in caplog.text
    assert "invalid type id" not in caplog.text


async def test_http1_request_gets_400_and_is_closed(memory_daemon, caplog):
    caplog.set_level(logging.INFO)
    daemon = await memory_daemon()
    with trio.fail_after(5):
        outcome = await raw_bytes("127.0.0.1", daemon.ports["server"], HTTP1_REQUEST)
    assert outcome.closed
    assert outcome.first_bytes.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert b"gRPC over HTTP/2" in outcome.first_bytes
    assert "HTTP/1.x request" in caplog.text


async def test_idle_h2_connections_are_closed_while_canaries_receive(memory_daemon, caplog):
    caplog.set_level(logging.INFO)
    daemon = await memory_daemon(ServerHandshakeTimeoutSecs="2", ServerH2IdleTimeoutSecs="3")
    port = daemon.ports["server"]
    canaries = [Canary("127.0.0.1", port, proto, prefix=canary_key("idle-"))
                for proto in ("typha", "grpc")]
    outcomes = []
    written: list[str] = []
    async with trio.open_nursery() as nursery:
        for canary in canaries:
            with trio.fail_after(15):
                await nursery.start(canary.run)
        rss_before = rss_bytes()
        stop = trio.Event()

        async def writer() -> None:
            written.extend(await write_canaries(daemon.store.put, "idle", stop))

        async def idler(i: int) -> None:
            outcomes.append(await h2_idle("127.0.0.1", port, open_stream=i % 2 == 1,
                                          give_up_after=30))

        nursery.start_soon(writer)
        started = trio.current_time()
        async with trio.open_nursery() as idlers:
            for i in range(IDLE):
                idlers.start_soon(idler, i)
        ended = trio.current_time()
        stop.set()
        with trio.fail_after(20):
            await wait_delivered(canaries, written)
        nursery.cancel_scope.cancel()

    assert len(outcomes) == IDLE
    bad = [o for o in outcomes if not (o.closed and o.goaway_code == 0)]
    assert not bad, (len(bad), bad[:3])  # GOAWAY NO_ERROR, then closed
    reasons = {o.goaway_debug.decode() for o in outcomes}
    assert reasons == {"no stream opened within 2s", "idle: no open stream for 3s"}
    for canary in canaries:
        assert canary.received_between(started, ended) > 0
        assert set(written) <= canary.arrivals.keys()
    # One line per peer per interval, however many connections.
    assert caplog.text.count("no stream opened within 2s; sending GOAWAY") <= 2
    assert rss_bytes() - rss_before < 64 << 20
