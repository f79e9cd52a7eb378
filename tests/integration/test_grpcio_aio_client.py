"""The benchmarks' grpcio client (tests/grpcio_sync.AioSync) reports a call that fails
before its first message as an error, so a storm's failed clients are not counted as
clients still waiting for their snapshot."""

from __future__ import annotations

import asyncio
import socket

from tests.grpcio_sync import AioSync


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_a_call_that_cannot_connect_ends_with_its_error() -> None:
    async def main() -> AioSync:
        client = AioSync(f"127.0.0.1:{closed_port()}", "felix")
        task = asyncio.create_task(client.run(asyncio.Event()))
        await asyncio.wait_for(client.in_sync.wait(), 30)
        await task  # ends by itself, without an exception
        return client

    client = asyncio.run(main())
    assert client.error is not None and client.error.startswith("UNAVAILABLE"), client.error
    assert client.keys == 0
