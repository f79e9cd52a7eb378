"""Out of file descriptors: the daemon sheds the oldest half-open connections (one WARNING
per interval) and a real client still gets in and syncs, long before the handshake timeout
would have freed anything."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys

import trio

from tests.internal_errors import internal_errors
from trio_typha.client import grpc as grpc_client
from trio_typha.client.typha import TyphaClient
from trio_typha.client.view import SyncView
from trio_typha.model.kv import SyncStatus

FD_LIMIT = 160
HALF_OPEN = 300  # more than the daemon has descriptors


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _low_fd_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


async def test_fd_exhaustion_sheds_half_open_connections(tmp_path) -> None:
    port = _free_port()
    env = {**os.environ, "TYPHA_DATASTORETYPE": "memory", "TYPHA_MEMORYDEMOCLUSTER": "tiny",
           "TYPHA_SERVERHOST": "127.0.0.1", "TYPHA_SERVERPORT": str(port),
           "TYPHA_SERVERHANDSHAKETIMEOUTSECS": "120", "TYPHA_LOGSEVERITYSCREEN": "INFO"}
    log_path = tmp_path / "daemon.log"
    with open(log_path, "w") as log_file:  # noqa: ASYNC230 - before anything runs
        proc = subprocess.Popen([sys.executable, "-m", "trio_typha", "serve"], env=env,  # noqa: ASYNC220
                                stdout=log_file, stderr=subprocess.STDOUT,
                                preexec_fn=_low_fd_limit)
    socks: list[trio.SocketStream] = []
    try:
        with trio.fail_after(30):
            while True:
                try:
                    probe = await trio.open_tcp_stream("127.0.0.1", port)
                except OSError:
                    await trio.sleep(0.1)
                    continue
                await probe.aclose()
                break
            # Connect and say nothing: each one holds a descriptor in the daemon.
            for _ in range(HALF_OPEN):
                socks.append(await trio.open_tcp_stream("127.0.0.1", port))
            # A late client on each protocol gets in and syncs.
            client = TyphaClient("127.0.0.1", port, syncer_type="felix", hostname="late")
            async with client:
                await client.wait_for_status(SyncStatus.IN_SYNC)
            assert client.kvs
            view = SyncView()
            stream = await grpc_client.open_stream("127.0.0.1", port)
            async with stream:
                async for event in grpc_client.sync(stream, "felix", hostname="late-grpc"):
                    grpc_client.apply_event(view, event)
                    if view.snapshot_done and view.in_sync:
                        break
            assert view.kvs.keys() == client.kvs.keys()
        # The oldest half-open ones were closed to make room.
        closed = 0
        for s in socks[:50]:
            with trio.move_on_after(1):
                try:
                    if await s.receive_some(1) == b"":
                        closed += 1
                except trio.BrokenResourceError:
                    closed += 1
        assert closed == 50
    finally:
        for s in socks:
            await s.aclose()
        proc.terminate()
        with trio.fail_after(30):
            await trio.to_thread.run_sync(proc.wait)
    text = log_path.read_text()
    assert f"Open-file limit (RLIMIT_NOFILE): {FD_LIMIT}" in text
    warnings = [line for line in text.splitlines() if "accept failed with EMFILE" in line]
    assert 1 <= len(warnings) <= 2, warnings  # one per 10 s interval, not one per failure
    assert "half-open" in warnings[0] and "to make room" in warnings[0]
    assert "Too many open files" not in text.replace(warnings[0], "")
    assert internal_errors(text) == []  # no connection's handler crashed on the way
