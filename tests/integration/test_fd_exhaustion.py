"""Out of file descriptors: client connections stop short of the limit by a reserve, the
daemon sheds the oldest connections that are not streaming (one WARNING per interval, no
traceback) and never a client that has just got in, a real client on each protocol still
gets in and syncs long before the handshake timeout would have freed anything, and the
health port still answers."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
from functools import partial

import trio

from testbed.hostile import h2_idle
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


def _env(port: int, health_port: int) -> dict[str, str]:
    return {**os.environ, "TYPHA_DATASTORETYPE": "memory", "TYPHA_MEMORYDEMOCLUSTER": "tiny",
            "TYPHA_SERVERHOST": "127.0.0.1", "TYPHA_SERVERPORT": str(port),
            "TYPHA_SERVERHANDSHAKETIMEOUTSECS": "120", "TYPHA_LOGSEVERITYSCREEN": "INFO",
            "TYPHA_HEALTHENABLED": "true", "TYPHA_HEALTHHOST": "127.0.0.1",
            "TYPHA_HEALTHPORT": str(health_port)}


async def _liveness(port: int) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(b"GET /liveness HTTP/1.1\r\nHost: x\r\n\r\n")
        got = b""
        while chunk := await stream.receive_some(4096):
            got += chunk
    return got


async def _late_clients_sync(port: int) -> None:
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


async def _run_daemon(tmp_path, attack) -> str:
    """Start the daemon under FD_LIMIT, run ``attack(port, health_port)``, stop it; its log."""
    port, health_port = _free_port(), _free_port()
    log_path = tmp_path / "daemon.log"
    with open(log_path, "w") as log_file:  # noqa: ASYNC230 - before anything runs
        proc = subprocess.Popen([sys.executable, "-m", "trio_typha", "serve"],  # noqa: ASYNC220
                                env=_env(port, health_port), stdout=log_file,
                                stderr=subprocess.STDOUT, preexec_fn=_low_fd_limit)
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
        await attack(port, health_port)
    finally:
        proc.terminate()
        with trio.fail_after(30):
            await trio.to_thread.run_sync(proc.wait)
    text = log_path.read_text()
    assert f"Open-file limit (RLIMIT_NOFILE): {FD_LIMIT}" in text
    assert internal_errors(text) == []  # no handler crashed, no accept loop's traceback
    assert "Traceback" not in text
    return text


def _shed_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "to make room" in line]


async def test_fd_exhaustion_sheds_half_open_connections(tmp_path) -> None:
    socks: list[trio.SocketStream] = []

    async def attack(port: int, health_port: int) -> None:
        try:
            with trio.fail_after(30):
                # Connect and say nothing: each one holds a descriptor in the daemon.
                for _ in range(HALF_OPEN):
                    socks.append(await trio.open_tcp_stream("127.0.0.1", port))
                await _late_clients_sync(port)
                # The reserve: the health port still gets a descriptor.
                assert (await _liveness(health_port)).startswith(b"HTTP/1.1 200")
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

    text = await _run_daemon(tmp_path, attack)
    warnings = [line for line in text.splitlines() if "WARNING" in line
                and ("descriptor reserve" in line or "accept failed with" in line)]
    # One per kind (reserve, EMFILE) per 10 s interval, not one per shed connection.
    assert 1 <= len(warnings) <= 4, warnings
    assert "half-open" in warnings[0] and "to make room" in warnings[0]
    rest = "\n".join(line for line in text.splitlines() if line not in warnings)
    assert "Too many open files" not in rest


async def test_idle_attackers_are_shed_before_a_client_that_just_got_in(tmp_path) -> None:
    """The HTTP/2 attackers have said their preface and nothing more (the gRPC idle
    timeout is far off); the late clients, not yet even sniffed when the next accept needs
    a descriptor, are never the ones chosen."""
    async def attack(port: int, health_port: int) -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(HALF_OPEN):
                nursery.start_soon(partial(h2_idle, "127.0.0.1", port, give_up_after=60))
                await trio.sleep(0.002)
            with trio.fail_after(30):
                await _late_clients_sync(port)
                assert (await _liveness(health_port)).startswith(b"HTTP/1.1 200")
            nursery.cancel_scope.cancel()

    text = await _run_daemon(tmp_path, attack)
    shed = _shed_lines(text)
    assert shed, text[-2000:]
    for line in shed:
        # Only connections that had at least said their preface were chosen.
        assert "(no session," in line and "half-open" not in line, line
