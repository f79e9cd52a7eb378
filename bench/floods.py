"""A rapid reset spread over many connections from one address, as an attacker on the same
machine runs it: what the canaries, a kubelet's readiness probe and the server's memory see.

    python bench/floods.py --connections 200 --rate 80 --seconds 15 [--sync-start]

The daemon (memory datastore, ``tiny`` cluster, health port on) runs in this process with
two canaries (gob and gRPC) and a writer adding one canary key every 50 ms.  The attacker
is a separate process (same priority, same cores): ``--connections`` connections, each
opening and resetting ``--rate`` streams a second (with a real Sync start first under
``--sync-start``), reconnecting whenever the server closes one, for ``--seconds``.  A
thread probes ``/readiness`` every 250 ms with a 1 s timeout, as a kubelet does, during the
attack and for ``--after`` seconds after the attacker has exited.

Reported: the canaries' share of the keys written during the attack that reached them by
its end (and 1 s later), readiness probe latencies and failures during and after, how long
after the attack the first probe succeeded, CLOSE-WAIT sockets on the port once the attacker
exited, and this process's RSS before, at its peak and after.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import socket
import sys
import threading
import time
from typing import Any

import trio

sys.path.insert(0, os.path.dirname(__file__))
from _common import current_rss_mib, memory_daemon, percentiles, report  # noqa: E402

from testbed.hostile import (  # noqa: E402
    Canary,
    canary_key,
    close_wait_count,
    h2_paced_reset,
    write_canaries,
)

PROBE_INTERVAL = 0.25
PROBE_TIMEOUT = 1.0


class Prober:
    """A kubelet's probe in a thread of its own: it sees the server, not this loop."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.samples: list[tuple[float, float | None]] = []  # (monotonic, latency or None)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _probe(self) -> float | None:
        start = time.monotonic()
        try:
            with socket.create_connection(("127.0.0.1", self.port), PROBE_TIMEOUT) as s:
                s.settimeout(PROBE_TIMEOUT - (time.monotonic() - start))
                s.sendall(b"GET /readiness HTTP/1.1\r\nHost: typha\r\n\r\n")
                got = s.recv(64)
        except OSError:
            return None
        return time.monotonic() - start if got.startswith(b"HTTP/1.1 200") else None

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), self._probe()))
            self._stop.wait(PROBE_INTERVAL)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def between(self, start: float, end: float) -> dict[str, Any]:
        window = [lat for t, lat in self.samples if start <= t < end]
        ok = [lat for lat in window if lat is not None]
        return {"probes": len(window), "failed": len(window) - len(ok), **percentiles(ok)}


async def attacker(args: argparse.Namespace) -> None:
    """The attacking process: print one JSON line of what the server did to it."""
    until = trio.current_time() + args.seconds
    outcomes = []

    async def one() -> None:
        while trio.current_time() < until:
            try:
                outcomes.append(await h2_paced_reset(
                    "127.0.0.1", args.port, rate=args.rate, sync_start=args.sync_start,
                    seconds=until - trio.current_time()))
            except OSError:
                await trio.sleep(0.1)

    async with trio.open_nursery() as nursery:
        for _ in range(args.connections):
            nursery.start_soon(one)
    print(json.dumps({
        "connections": len(outcomes),
        "closed_calm": sum(o.goaway_code == 11 for o in outcomes),
        "closed_shared": sum(b"across connections" in o.goaway_debug for o in outcomes),
        "streams": sum(o.frames_sent for o in outcomes)}), flush=True)


class _Count(logging.Handler):
    """Counts the "Received Hello" lines the server writes (whatever the screen shows)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("Received Hello"):
            self.count += 1


async def run(args: argparse.Namespace) -> dict[str, Any]:
    hellos = _Count()
    for name in ("trio_typha.protocols.grpc.sync_service", "trio_typha.protocols.gob.shell"):
        logging.getLogger(name).addHandler(hellos)
        logging.getLogger(name).setLevel(logging.INFO)
    async with memory_daemon("tiny", HealthEnabled="true", HealthPort="0",
                             HealthHost="127.0.0.1", LogSeverityScreen=args.log_level) as md:
        daemon = md.daemon
        port, health = daemon.ports["server"], daemon.ports["health"]
        canaries = [Canary("127.0.0.1", port, proto, prefix=canary_key("flood-"))
                    for proto in ("typha", "grpc")]
        prober = Prober(health)
        result: dict[str, Any] = {"scenario": "floods", "connections": args.connections,
                                  "rate": args.rate, "seconds": args.seconds,
                                  "sync_start": args.sync_start}
        async with trio.open_nursery() as nursery:
            for canary in canaries:
                await nursery.start(canary.run)
            rss_before = current_rss_mib()
            rss_peak = rss_before
            stop = trio.Event()
            written: list[str] = []

            async def writer() -> None:
                written.extend(await write_canaries(md.store.put, "flood", stop))

            async def rss_sampler() -> None:
                nonlocal rss_peak
                while True:
                    rss_peak = max(rss_peak, current_rss_mib())
                    await trio.sleep(0.5)

            nursery.start_soon(rss_sampler)
            prober.start()
            cmd = [sys.executable, __file__, "--attacker", "--port", str(port),
                   "--connections", str(args.connections), "--rate", str(args.rate),
                   "--seconds", str(args.seconds)] + (["--sync-start"] if args.sync_start
                                                      else [])
            m0 = time.monotonic()
            async with trio.open_nursery() as writing:
                writing.start_soon(writer)
                proc = await trio.run_process(cmd, capture_stdout=True, check=True)
                stop.set()
            t1, m1 = trio.current_time(), time.monotonic()  # the attacker has exited
            result["attacker"] = json.loads(proc.stdout.decode().strip().splitlines()[-1])
            result["close_wait_at_exit"] = close_wait_count(port)
            await trio.sleep(1.0)
            expected = len(written) * len(canaries)

            def share(by: float) -> float:
                got = sum(c.arrivals.get(k, math.inf) <= by for c in canaries for k in written)
                return round(100 * got / max(expected, 1), 1)

            result["canary_keys_written"] = len(written)
            result["canary_pct_by_attack_end"] = share(t1)
            result["canary_pct_1s_after"] = share(t1 + 1.0)
            close_wait = []
            cleared_after: float | None = None
            first_ok_after: float | None = None
            with trio.move_on_after(args.after):
                while True:
                    close_wait.append(close_wait_count(port))
                    if cleared_after is None and close_wait[-1] == 0:
                        cleared_after = time.monotonic() - m1
                    if first_ok_after is None and any(
                            t >= m1 and lat is not None for t, lat in prober.samples):
                        first_ok_after = min(t for t, lat in prober.samples
                                             if t >= m1 and lat is not None) - m1
                    await trio.sleep(0.5)
            prober.stop()
            stop.set()
            result["readiness_during"] = prober.between(m0, m1)
            result["readiness_after"] = prober.between(m1, m1 + args.after)
            result["first_ready_after_s"] = (round(first_ok_after, 2)
                                             if first_ok_after is not None else None)
            result["close_wait_max_after"] = max(close_wait, default=0)
            result["close_wait_at_end"] = close_wait[-1] if close_wait else 0
            result["close_wait_cleared_after_s"] = (round(cleared_after, 2)
                                                    if cleared_after is not None else None)
            result["hello_lines"] = hellos.count
            result["sync_starts_logged_of"] = result["attacker"]["streams"]
            result["rss_before_mib"] = round(rss_before, 1)
            result["rss_peak_mib"] = round(rss_peak, 1)
            result["rss_after_mib"] = round(current_rss_mib(), 1)
            result["canary_disconnects"] = sum(c.disconnects for c in canaries)
            # Reported before the daemon's graceful drain: how long it takes to shut down
            # with the attack's leftovers is not what is measured here.
            report(result)
            os._exit(0)
        return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--connections", type=int, default=200)
    p.add_argument("--rate", type=float, default=80.0, help="resets per second per connection")
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--after", type=float, default=15.0,
                   help="seconds to keep probing after the attacker has exited")
    p.add_argument("--sync-start", action="store_true",
                   help="a real Sync start before each reset")
    p.add_argument("--log-level", default="WARNING")
    p.add_argument("--attacker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.attacker:
        trio.run(attacker, args)
        return
    trio.run(run, args)


if __name__ == "__main__":
    main()
