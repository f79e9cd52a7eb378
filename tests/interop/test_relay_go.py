"""A relay tier following a Go Typha server over the gob protocol, as calico-node connects.

In CI the Go upstream is ``gobtool server`` (tests/gotools/server.go: Go's encoding/gob and
snappy, the message order of Typha's sync server; this project's own code).  The relay's
caches must hold exactly the Go server's keys, values and revisions; a Go client reading the
relay must decode the same digest the Go server computes of its own state; and when the
first Go upstream goes silent the relay must fail over to the second, taking its snapshot
as a relist: its keys only, the relay's clients still connected.
"""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.interop.test_gob_go import gobtool  # noqa: F401 (the session fixture)
from trio_typha.client.typha import TyphaClient
from trio_typha.config_sources import load_config
from trio_typha.model.kv import SyncStatus
from trio_typha.relay_process import Relay

pytestmark = pytest.mark.go

SYNCERS = ("felix", "bgp")
HANG = 60.0


class GoServer:
    """``gobtool server`` driven over its stdin/stdout JSON lines."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self._buf = b""
        self.port = 0

    async def line(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        while b"\n" not in self._buf:
            data = await self.process.stdout.receive_some(65536)
            assert data, "gobtool server ended"
            self._buf += data
        line, _, self._buf = self._buf.partition(b"\n")
        return json.loads(line)

    async def do(self, op: str, **fields: Any) -> dict[str, Any]:
        assert self.process.stdin is not None
        await self.process.stdin.send_all(json.dumps({"op": op, **fields}).encode() + b"\n")
        reply = await self.line()
        assert reply.get("event") != "error", reply
        return reply

    async def put(self, syncer: str, key: str, value: bytes, revision: str) -> None:
        await self.do("put", syncer=syncer, key=key, value=base64.b64encode(value).decode(),
                      revision=revision)


@asynccontextmanager
async def go_server(tool: Path, *args: str) -> AsyncIterator[GoServer]:
    process = await trio.lowlevel.open_process(
        [str(tool), "server", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    server = GoServer(process)
    try:
        hello = await server.line()
        server.port = hello["port"]
        yield server
    finally:
        process.kill()
        await process.wait()


async def fill(server: GoServer, *, skip: str = "", extra: str = "") -> None:
    for syncer in SYNCERS:
        for i in range(150):  # more than one snapshot batch
            key = f"/calico/v1/config/{syncer}-{i:03d}"
            if key != skip:
                await server.put(syncer, key, bytes([i, 0, 255]) + key.encode(), str(1000 + i))
        if extra:
            await server.put(syncer, extra, b"only here", "7")
        await server.do("status", syncer=syncer, status=int(SyncStatus.IN_SYNC))


def state(pipeline: Any) -> dict[str, tuple[bytes | None, str]]:
    cache = pipeline.feed.cache
    return {k: (cache.get(k).value, cache.get(k).revision) for k in cache.values_by_key()}


def expected(syncer: str, *, skip: str = "", extra: str = "") -> dict[str, tuple[bytes, str]]:
    out = {}
    for i in range(150):
        key = f"/calico/v1/config/{syncer}-{i:03d}"
        if key != skip:
            out[key] = (bytes([i, 0, 255]) + key.encode(), str(1000 + i))
    if extra:
        out[extra] = (b"only here", "7")
    return out


async def go_client_digest(tool: Path, port: int, syncer: str) -> dict[str, Any]:
    done = await trio.run_process(
        [str(tool), "client", "-addr", f"127.0.0.1:{port}", "-syncer", syncer,
         "-timeout", "30s"], capture_stdout=True, check=True)
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


async def test_a_relay_follows_go_typha_byte_exactly_and_fails_over(
        gobtool: Path) -> None:  # noqa: F811
    gone = "/calico/v1/config/felix-007"  # the second upstream lacks it
    extra = "/calico/v1/config/zz-only-on-b"
    with trio.fail_after(HANG):
        async with go_server(gobtool, "-ping", "300ms") as a, \
                go_server(gobtool, "-ping", "300ms") as b, trio.open_nursery() as nursery:
            await fill(a)
            await fill(b, skip=gone, extra=extra)
            cfg = load_config({}, config_file=None, overrides={
                "DatastoreType": "typha", "UpstreamTyphaProtocol": "gob",
                "UpstreamTyphaAddrs": f"127.0.0.1:{a.port},127.0.0.1:{b.port}",
                "ServerHost": "127.0.0.1", "WatchStallTimeoutSecs": "2"})
            relay = await nursery.start(Relay(cfg, syncer_types=SYNCERS, listen_port=0).run)
            await relay.wait_in_sync()
            port = relay.ports["server"]
            for syncer in SYNCERS:
                assert state(relay.pipelines[syncer]) == expected(syncer)
                # A Go client decodes, from the relay, what the Go server holds.
                mine = await go_client_digest(gobtool, port, syncer)
                theirs = await a.do("digest", syncer=syncer)
                assert (mine["kvs"], mine["digest"]) == (theirs["kvs"], theirs["digest"])
                assert mine["snapshot_sorted"] and mine["snapshot_all_new"]

            # Changes flow through; a client of the relay stays on it from here on.
            client = TyphaClient(("127.0.0.1", port), syncer_type="felix")
            await client.wait_for_status()

            async def consume() -> None:
                async for _ in client:
                    pass

            nursery.start_soon(consume)
            await a.put("felix", "/calico/v1/config/felix-new", b"\x00new", "2000")
            await a.do("delete", syncer="felix", key="/calico/v1/config/felix-001",
                       revision="2001")
            want = expected("felix")
            want["/calico/v1/config/felix-new"] = (b"\x00new", "2000")
            del want["/calico/v1/config/felix-001"]
            while state(relay.pipelines["felix"]) != want:  # noqa: ASYNC110
                await trio.sleep(0.02)
            assert relay.pipelines["felix"].state.lag < 5.0

            # The first upstream goes silent: the relay fails over to the second and holds
            # exactly its state (felix-007 deleted, the extra key created).
            await a.do("silence")
            for syncer in SYNCERS:
                pipeline = relay.pipelines[syncer]
                while state(pipeline) != expected(syncer, skip=gone, extra=extra):  # noqa: ASYNC110
                    await trio.sleep(0.05)
                assert pipeline.state.address == f"127.0.0.1:{b.port}"
                assert pipeline.state.failovers == 1
            while {k: v.value for k, v in client.kvs.items()} != {  # noqa: ASYNC110
                    k: v for k, (v, _) in expected("felix", skip=gone, extra=extra).items()}:
                await trio.sleep(0.05)
            assert client.connections == 1
            assert f"state from gob upstream 127.0.0.1:{b.port}" in relay.health.table()
            await client.aclose()
            nursery.cancel_scope.cancel()
