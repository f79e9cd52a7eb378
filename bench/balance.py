"""How evenly ServerWorkers spreads clients (the server's primary passes each accepted socket to
the least-loaded process with SCM_RIGHTS, workers/handoff.py), and the two ways it could.

    python -m bench balance [--clients 1000] [--cluster medium] [--workers-list 2,4] [--json]

(a) The real daemon with ``ServerWorkers=N`` (a primary serving clients itself plus N-1
    workers it passes sockets to) and N Go gob clients: connections per
    process from the primary's ``/connections`` rows (the ``worker`` field; the primary's
    own rows have none), then one worker is killed and the clients it served connect
    again (a second fleet of as many clients: the Go fleet does not redial), and the
    spread is read again.
(b) A minimal prototype of both ways, in both shapes so the rest is equal: N
    processes each serving the raw-blast gob stream (bench/raw_blast.py) to the same Go
    clients, either each listening on the port with ``SO_REUSEPORT`` or fed by a primary
    process that accepts every connection and hands it with ``socket.send_fds`` over a
    Unix socket to the worker with the fewest connections.  Reported: the spread, accept
    throughput (connections/s from the first accept to the last) and, for the passing
    shape, the primary's CPU per accepted connection; then the same kill-and-reconnect.

Balance is max/mean of the per-process counts (1.0 is perfect) and their standard
deviation.  ``--json`` ends with one JSON line.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import trio

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import fanout  # noqa: E402
from _common import memory_daemon, process_cpu_seconds  # noqa: E402

#: Clients the fleet runs per process (two processes, as the other scenarios).
FLEET_PROCS = 2


def spread(counts: Sequence[int]) -> dict[str, Any]:
    """Per-process connection counts and how far from even they are."""
    mean = statistics.fmean(counts) if counts else 0.0
    return {"per_process": list(counts),
            "max_over_mean": round(max(counts) / mean, 3) if mean else None,
            "stddev": round(statistics.pstdev(counts), 1) if counts else None}


def go_fleet(gobtool: str, port: int, n: int, hostname: str) -> fanout.ClientFleet:
    """``n`` Go gob clients (tests/gotools fleet) in FLEET_PROCS processes."""
    return fanout.ClientFleet(fanout.fleet_commands("typha", "go", port, n, FLEET_PROCS,
                                                    gobtool=gobtool, hostname=hostname))


#: How long any one wait of this benchmark may take.
POLL_LIMIT_S = 180.0


async def poll(predicate: Any) -> Any:
    """Await ``predicate()`` every 0.2 s until it returns something other than None."""
    with trio.fail_after(POLL_LIMIT_S):
        while True:
            value = await predicate()
            if value is not None:
                return value
            await trio.sleep(0.2)


async def settled(read: Any, interval: float) -> list[int]:
    """Per-process counts once two reads ``interval`` apart agree (a client that failed
    -- its error is reported -- leaves the total short, so no expected total is waited
    for)."""
    seen: list[list[int]] = []
    with trio.fail_after(POLL_LIMIT_S):
        while len(seen) < 2 or seen[-1] != seen[-2]:
            seen.append(list(await read()))
            await trio.sleep(interval)
    return seen[-1]


# --- (a) the real server -------------------------------------------------------------------

async def real_server(workers: int, clients: int, cluster: str, gobtool: str
                      ) -> dict[str, Any]:
    import httpx

    out: dict[str, Any] = {"workers": workers}
    async with memory_daemon(cluster, ServerWorkers=str(workers), HealthEnabled="true",
                             HealthHost="127.0.0.1", HealthPort="0",
                             ServerPingIntervalSecs="10") as server, \
            httpx.AsyncClient() as http:
        daemon = server.daemon
        pool = daemon.workers
        await poll(lambda: _true(pool is None or pool.ready))
        url = f"http://127.0.0.1:{daemon.ports['health']}/connections"

        async def counts() -> list[int]:
            rows = (await http.get(url)).json()["connections"]
            by = [0] * workers  # index 0: the primary (rows without "worker")
            for r in rows:
                if r.get("syncer_type") == "felix":
                    by[r.get("worker", 0)] += 1
            return by

        # The primary asks its workers for their rows on each request; two equal reads
        # apart say the clients have stopped arriving.
        def settle() -> Any:
            return settled(counts, 1.2)

        first = go_fleet(gobtool, daemon.ports["server"], clients, "balance-a")
        out["errors"] = await first.in_sync_errors()
        before = await settle()
        out["initial"] = spread(before)
        if pool is not None and workers > 1:
            # Kill the worker serving the most; its clients come back as a new fleet.
            victim = max(range(1, workers), key=lambda i: before[i])
            state = pool.workers[victim - 1]
            assert state.pid is not None
            os.kill(state.pid, signal.SIGKILL)
            await poll(lambda: _true(not state.running))
            # Reconnect once the pool has the worker back (the prototype does the same):
            # SO_REUSEPORT's best case.
            await poll(lambda: _true(pool.ready and pool.workers[victim - 1].running))
            second = go_fleet(gobtool, daemon.ports["server"], before[victim], "balance-b")
            out["errors"] += await second.in_sync_errors()
            after = await settle()
            out["killed_worker"] = victim
            out["reconnected"] = before[victim]
            out["after_reconnect"] = spread(after)
            out["restarted_worker_share"] = round(after[victim] / before[victim], 3)
            await second.done()
        await first.done()
    return out


async def _true(value: bool) -> bool | None:
    return True if value else None


def _now(values: list[int]) -> Any:
    async def read() -> list[int]:
        return list(values)
    return read


# --- (b) the prototype ---------------------------------------------------------------------

def worker_main(argv: list[str]) -> None:
    """``balance.py worker MODE FD PORT SNAPSHOT_FILE``: serve raw-blast gob (the
    compressed snapshot stream in SNAPSHOT_FILE) to this process's share of the
    connections; report readiness, accepts and closes as lines on the Unix socket FD."""
    from raw_blast import RawBlast

    mode, fd, port, path = argv[0], int(argv[1]), int(argv[2]), argv[3]
    with open(path, "rb") as fh:
        blast = RawBlast(fh.read())
    trio.run(_worker, mode, socket.socket(fileno=fd), port, blast)


async def _worker(mode: str, control: socket.socket, port: int, blast: Any) -> None:
    ctl = trio.socket.from_stdlib_socket(control)
    lock = trio.Lock()

    async def tell(line: bytes) -> None:
        async with lock:
            await ctl.send(line)

    async def serve_one(sock: trio.socket.SocketType) -> None:
        await tell(f"A {time.monotonic():.6f}\n".encode())
        try:
            await blast.handle(trio.SocketStream(sock))
        finally:
            await tell(b"C\n")

    async with trio.open_nursery() as nursery:
        if mode == "reuseport":
            nursery.start_soon(_exit_on_eof, ctl, nursery.cancel_scope)
            lsock = trio.socket.socket()
            lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            await lsock.bind(("127.0.0.1", port))
            lsock.listen(4096)
            await tell(b"R\n")
            while True:
                sock, _ = await lsock.accept()
                nursery.start_soon(serve_one, sock)
        else:
            await tell(b"R\n")
            while True:
                await trio.lowlevel.wait_readable(control)
                try:
                    data, fds, _, _ = socket.recv_fds(control, 16, 64)
                except BlockingIOError:
                    continue
                if not data:  # the primary is gone
                    nursery.cancel_scope.cancel()
                    return
                for fd in fds:
                    nursery.start_soon(serve_one, trio.socket.socket(fileno=fd))


async def compressed_snapshot(cluster: str) -> bytes:
    """The felix snapshot of ``cluster`` as the compressed gob stream, built by the daemon
    as the other scenarios build it (once: every prototype worker reads it from a file)."""
    from trio_typha.protocols.gob import encode_once

    async with memory_daemon(cluster) as server:
        snapshot = server.daemon.pipelines["felix"].feed.snapshot_point().snapshot()
    return encode_once.build_compressed_snapshot(snapshot)


async def _exit_on_eof(ctl: trio.socket.SocketType, scope: trio.CancelScope) -> None:
    """A worker ends with its primary (the control socket's EOF)."""
    while await ctl.recv(1):
        pass
    scope.cancel()


class Prototype:
    """N worker processes, and (``scm_rights``) the accepting primary in this process."""

    def __init__(self, mode: str, n: int, snapshot_file: str) -> None:
        self.mode = mode
        self.n = n
        self.snapshot_file = snapshot_file
        self.counts = [0] * n
        self.accepts: list[float] = []
        self.controls: list[socket.socket] = []
        self.procs: list[subprocess.Popen[bytes]] = []
        self.ready = 0
        self.port = 0

    def start_worker(self, i: int) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ours.setblocking(False)
        proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "worker", self.mode,
             str(theirs.fileno()), str(self.port), self.snapshot_file],
            pass_fds=[theirs.fileno()])
        theirs.close()
        if i < len(self.procs):
            self.procs[i], self.controls[i] = proc, ours
        else:
            self.procs.append(proc)
            self.controls.append(ours)

    async def _read(self, i: int, sock: socket.socket) -> None:
        ctl = trio.socket.from_stdlib_socket(sock)
        buf = b""
        while self.controls[i] is sock:
            data = await ctl.recv(65536)
            if not data:
                return
            buf += data
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if line == b"R":
                    self.ready += 1
                elif line.startswith(b"A "):
                    self.accepts.append(float(line[2:]))
                    if self.mode == "reuseport":
                        self.counts[i] += 1
                elif line == b"C":
                    self.counts[i] -= 1

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        async with trio.open_nursery() as nursery:
            if self.mode == "scm_rights":
                listeners = await trio.open_tcp_listeners(0, host="127.0.0.1", backlog=4096)
                self.port = listeners[0].socket.getsockname()[1]
                lsock = listeners[0].socket
            else:
                probe = socket.socket()
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                probe.bind(("127.0.0.1", 0))  # reserved, never listening: workers take it
                self.port = probe.getsockname()[1]
            for i in range(self.n):
                self.start_worker(i)
                nursery.start_soon(self._read, i, self.controls[i])
            while self.ready < self.n:  # noqa: ASYNC110 (polled)
                await trio.sleep(0.05)
            task_status.started()
            self.cpu_at_start = process_cpu_seconds([os.getpid()])
            if self.mode == "scm_rights":
                while True:
                    sock, _ = await lsock.accept()
                    self.accepts.append(time.monotonic())
                    i = min(range(self.n), key=self.counts.__getitem__)
                    await self._pass(i, sock)

    async def _pass(self, i: int, sock: trio.socket.SocketType) -> None:
        fd = sock.fileno()
        while True:
            try:
                socket.send_fds(self.controls[i], [b"s"], [fd])
                break
            except BlockingIOError:
                await trio.lowlevel.wait_writable(self.controls[i])
            except OSError:  # the worker is gone: give it to the next one
                i = min((j for j in range(self.n) if j != i), key=self.counts.__getitem__)
        self.counts[i] += 1
        sock.close()

    async def kill_and_restart(self, nursery: trio.Nursery, i: int) -> int:
        """SIGKILL worker ``i`` and start a new one in its place; its clients are lost."""
        lost = self.counts[i]
        self.procs[i].kill()
        await trio.to_thread.run_sync(self.procs[i].wait)
        old = self.controls[i]
        self.counts[i] = 0
        self.ready -= 1
        self.start_worker(i)
        old.close()
        nursery.start_soon(self._read, i, self.controls[i])
        while self.ready < self.n:  # noqa: ASYNC110 (polled)
            await trio.sleep(0.05)
        return lost

    def stop(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait()


async def prototype(mode: str, n: int, clients: int, snapshot_file: str, gobtool: str
                    ) -> dict[str, Any]:
    proto = Prototype(mode, n, snapshot_file)
    out: dict[str, Any] = {"mode": mode, "processes": n}
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(proto.run)
            cpu0 = process_cpu_seconds([os.getpid()])
            t0 = time.monotonic()
            first = go_fleet(gobtool, proto.port, clients, "proto-a")
            out["errors"] = await first.in_sync_errors()
            out["all_in_sync_s"] = round(time.monotonic() - t0, 2)
            accepts = sorted(proto.accepts)
            span = accepts[-1] - accepts[0] if len(accepts) > 1 else 0.0
            out["accepts_per_s"] = round((len(accepts) - 1) / span) if span else None
            if mode == "scm_rights":  # this process only accepts and passes
                out["primary_cpu_us_per_accept"] = round(
                    (process_cpu_seconds([os.getpid()]) - cpu0) * 1e6 / max(len(accepts), 1), 1)
            out["initial"] = spread(await settled(_now(proto.counts), 0.5))
            victim = max(range(n), key=proto.counts.__getitem__)
            lost = await proto.kill_and_restart(nursery, victim)
            second = go_fleet(gobtool, proto.port, lost, "proto-b")
            out["errors"] += await second.in_sync_errors()
            out["reconnected"] = lost
            out["after_reconnect"] = spread(await settled(_now(proto.counts), 0.5))
            out["restarted_worker_share"] = round(proto.counts[victim] / lost, 3) if lost else None
            await second.done()
            await first.done()
            nursery.cancel_scope.cancel()
    finally:
        proto.stop()
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    gobtool = fanout.build_gobtool()
    result: dict[str, Any] = {"scenario": "balance", "clients": args.clients,
                              "cluster": args.cluster, "real_server": [], "prototype": []}
    with tempfile.NamedTemporaryFile(prefix="balance-snapshot-") as snap:
        snap.write(trio.run(compressed_snapshot, args.cluster))
        snap.flush()
        for n in args.workers_list:
            result["real_server"].append(
                trio.run(real_server, n, args.clients, args.cluster, gobtool))
            for mode in ("reuseport", "scm_rights"):
                result["prototype"].append(
                    trio.run(prototype, mode, n, args.clients, snap.name, gobtool))
    return result


def table(result: dict[str, Any]) -> str:
    lines = [f"{'':<32} {'initial max/mean':>16} {'stddev':>7} {'after kill':>10} "
             f"{'restarted share':>15} {'accepts/s':>9} {'primary us/accept':>17}"]
    rows = [(f"ServerWorkers={r['workers']} (SCM_RIGHTS)", r) for r in result["real_server"]]
    rows += [(f"prototype {p['mode']} x{p['processes']}", p) for p in result["prototype"]]
    for name, r in rows:
        after = r.get("after_reconnect", {})
        lines.append(f"{name:<32} {r['initial']['max_over_mean']!s:>16} "
                     f"{r['initial']['stddev']!s:>7} {after.get('max_over_mean')!s:>10} "
                     f"{r.get('restarted_worker_share')!s:>15} {r.get('accepts_per_s')!s:>9} "
                     f"{r.get('primary_cpu_us_per_accept')!s:>17}")
    return "\n".join(lines)


if __name__ == "__main__":  # a prototype worker (bench/__main__.py runs the scenario)
    worker_main(sys.argv[2:])
