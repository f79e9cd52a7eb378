"""The broadcast round's non-blocking write to a stream the peer has just reset is refused
(False), not an exception: one peer's reset must not end the round for everyone (found by
the chaos run: a StreamGone from a reset stream ended the daemon's broadcast task)."""

from __future__ import annotations

import socket

import hpack
import trio
from hyperframe.frame import HeadersFrame, RstStreamFrame

from testbed.hostile import PREFACE, REQUEST
from trio_typha.protocols.grpc.shell import GrpcConnection
from trio_typha.sessions.context import ServerContext


async def test_send_nowait_to_a_reset_stream_is_refused() -> None:
    ours, theirs = socket.socketpair()
    try:
        conn = GrpcConnection(trio.SocketStream(trio.socket.from_stdlib_socket(ours)),
                              ServerContext(feeds={}))
        headers = HeadersFrame(1, hpack.Encoder().encode(REQUEST), flags=["END_HEADERS"])
        conn.core.receive(PREFACE + headers.serialize())
        assert conn.core.has_stream(1)
        conn.core.receive(RstStreamFrame(1, error_code=8).serialize())
        assert not conn.core.has_stream(1)
        assert conn._send_nowait(1, b"\x00\x00\x00\x00\x00") is False
    finally:
        ours.close()
        theirs.close()
