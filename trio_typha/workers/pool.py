"""``ServerWorkers``: more processes serving the same port, fed by the one that owns the cache.

With ``ServerWorkers=N`` (N > 1) the daemon (the *primary*) keeps the one datastore watch,
the pipelines and the caches, and serves clients itself; N - 1 worker processes serve a
share of the connections: the primary alone listens on the port and passes each new
socket to the least-loaded process over its control socket (:mod:`.handoff`).  Each worker mirrors the primary's caches from
a private feed on a Unix socket, one connection per syncer type (:mod:`.wire`): per
breadcrumb the updates, so it builds its own snapshots, and the primary's encodings of it,
which its clients are sent as they are; it never watches the datastore and encodes no
delta.  The primary supervises them: a worker that dies
is started again (its clients reconnect, and the primary fills it up first), and
health, readiness, metrics and ``/connections`` of the primary cover every worker.

Workers learn their configuration from the primary on stdin and exit when it closes (the
primary is gone).  ``ServerWorkers=1`` is the single-process server.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import httpx
import trio

from ..cache.build import THREAD_BUILD_SIZE
from ..cache.feed import CacheFeed
from ..model.kv import SyncStatus
from . import wire

log = logging.getLogger(__name__)

#: Pause before starting a worker again after it died.
RESTART_DELAY = 1.0
#: How often the primary reads its workers' health, metrics and connections.
POLL_INTERVAL = 1.0
#: How long the primary waits for a worker connection's hello.
HELLO_TIMEOUT = 10.0
#: How often the primary's feed looks for a new connection limit to hand its workers.
LIMIT_CHECK_INTERVAL = 1.0


# ---- worker side --------------------------------------------------------------------------


class ReplicaPipeline:
    """A worker's stand-in for a syncer pipeline: the primary's cache, mirrored from its feed.

    Has what the daemon uses of :class:`~trio_typha.syncer.pipeline.SyncerPipeline`.
    ``run`` reports started once the primary's snapshot is in the cache, so the worker
    opens its port with the primary's state, not an empty one.
    """

    def __init__(self, syncer_type: str, feed: CacheFeed, upstream: str) -> None:
        self.syncer_type = syncer_type
        self.feed = feed
        self.upstream = upstream
        self.failing: dict[Any, str] = {}
        self.pending_events = 0
        self.channel_size = 0
        #: Called with this worker's share of the replica's connection limit.
        self.on_limit: Callable[[int], None] | None = None

    @property
    def ready(self) -> bool:
        return self.feed.status is SyncStatus.IN_SYNC and not self.failing

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        try:
            stream = await trio.open_unix_socket(self.upstream)
        except OSError as exc:
            log.error("Worker: cannot reach the primary at %s (%s); exiting", self.upstream, exc)
            os.kill(os.getpid(), signal.SIGTERM)
            task_status.started()
            return
        try:
            await stream.send_all(wire.encode_hello(self.syncer_type))
            await self._follow(stream, task_status)
        except (wire.WireError, trio.BrokenResourceError, OSError) as exc:
            self.failing[None] = f"lost the primary: {exc}"
            log.error("Worker: feed from the primary ended (%s); exiting", exc)
        finally:
            await stream.aclose()
        # Without the primary this worker's cache goes stale: end the process (the primary
        # starts a new one, or is gone itself).
        os.kill(os.getpid(), signal.SIGTERM)

    async def _follow(self, stream: trio.abc.Stream, task_status: trio.TaskStatus[None]
                      ) -> None:
        decoder = wire.Decoder()
        feed = self.feed
        seq: int | None = None
        started = False
        while data := await stream.receive_some(1 << 20):
            decoder.feed(data)
            for record in decoder:
                now = trio.current_time()
                if isinstance(record, wire.Crumb):
                    if seq is not None and record.seq != seq + 1:
                        raise wire.WireError(f"breadcrumb {record.seq} after {seq}")
                    seq = record.seq
                    feed.append(record.updates, record.status, now - record.age, record.memo)
                elif isinstance(record, wire.Limit):
                    if self.on_limit is not None:
                        self.on_limit(record.connections)
                elif isinstance(record, wire.Snapshot) and not started:
                    feed.append(record.updates, record.status, now - record.age)
                    started = True
                    task_status.started()
                else:
                    raise wire.WireError(f"unexpected {type(record).__name__} record")
        raise trio.BrokenResourceError("the primary closed the feed")


class Upstream:
    """The worker's 'datastore': the primary."""

    name = "primary"

    def __init__(self, path: str) -> None:
        self.path = path


def worker_main() -> None:
    """``python -m trio_typha.workers.pool``: a worker process (started by the primary)."""
    from ..daemon import Daemon
    from ..logs import setup_logging
    size = struct.unpack("!I", sys.stdin.buffer.read(4))[0]
    spec = pickle.loads(sys.stdin.buffer.read(size))
    cfg = spec["config"]
    setup_logging(cfg.log_severity_screen if hasattr(cfg, "log_severity_screen") else "INFO")

    async def main() -> None:
        control = socket.socket(fileno=spec["control"])  # the primary passes sockets here
        daemon = Daemon(cfg, upstream=spec["upstream"], listen_port=spec["port"],
                        handle_signals=True, control=control)

        async def primary_gone() -> None:
            # The primary holds our stdin: EOF means it is gone.  Read without a thread, so
            # none is left blocked in stdin when the interpreter exits.
            async with trio.lowlevel.FdStream(os.dup(sys.stdin.fileno())) as stdin:
                while await stdin.receive_some(4096):
                    pass
            daemon.shutdown()

        async with trio.open_nursery() as outer:
            outer.start_soon(primary_gone)
            async with trio.open_nursery() as nursery:
                await nursery.start(daemon.run)
                print(json.dumps({"event": "started", "pid": os.getpid(),
                                  "health": daemon.ports.get("health"),
                                  "metrics": daemon.ports.get("metrics")}), flush=True)
            outer.cancel_scope.cancel()  # drained (SIGTERM or EOF): the process ends

    trio.run(main)


# ---- primary side -------------------------------------------------------------------------


@dataclass
class WorkerState:
    index: int
    pid: int | None = None
    health_port: int | None = None
    metrics_port: int | None = None
    running: bool = False
    ready: bool = False
    restarts: int = 0
    metrics: str = ""
    connections: list[dict[str, Any]] = field(default_factory=list)
    detail: str = "starting"
    #: The primary's end of the control socket (:mod:`.handoff`) while the process runs.
    control: socket.socket | None = None
    #: Sockets passed to it since it started, and how many of them it had closed when
    #: last read (its ``accepted`` less its rows; :mod:`.handoff` balances on the difference).
    passed: int = 0
    closed: int = 0


class WorkerPool:
    """The primary's workers: started, watched, restarted, and read for aggregation."""

    def __init__(self, cfg: Any, *, count: int, upstream: str, port: int) -> None:
        self.cfg = cfg
        self.count = count
        self.upstream = upstream
        self.port = port
        self.workers = [WorkerState(i + 1) for i in range(count)]
        self._stopping = False
        self._procs: dict[int, trio.Process] = {}

    # -- what the primary reports

    @property
    def ready(self) -> bool:
        return all(w.running and w.ready for w in self.workers)

    def detail(self) -> str:
        bad = [f"worker {w.index}: {w.detail}" for w in self.workers
               if not (w.running and w.ready)]
        return "; ".join(bad)

    def connection_rows(self) -> list[dict[str, Any]]:
        return [{**row, "worker": w.index} for w in self.workers if w.running
                for row in w.connections]

    def metrics_texts(self) -> list[str]:
        return [w.metrics for w in self.workers if w.running and w.metrics]

    # -- lifetime

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        async with trio.open_nursery() as nursery:
            for w in self.workers:
                nursery.start_soon(self._supervise, w)
            nursery.start_soon(self._poll)
            task_status.started()

    async def stop(self) -> None:
        """Drain the workers (SIGTERM: each drains like the primary) and wait for them."""
        self._stopping = True
        for proc in self._procs.values():
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
        for proc in list(self._procs.values()):
            await proc.wait()

    def kill(self, index: int) -> int | None:
        """SIGKILL worker ``index`` (tests, chaos); returns its pid."""
        proc = self._procs.get(index)
        if proc is None or proc.returncode is not None:
            return None
        proc.kill()
        return proc.pid

    async def _supervise(self, w: WorkerState) -> None:
        while not self._stopping:
            await self._run_one(w)
            w.running = w.ready = False
            if self._stopping:
                return
            w.restarts += 1
            w.detail = f"restarting (exit, restart #{w.restarts})"
            log.warning("Worker %d exited; starting it again in %.0fs", w.index, RESTART_DELAY)
            await trio.sleep(RESTART_DELAY)

    async def _run_one(self, w: WorkerState) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ours.setblocking(False)
        spec = pickle.dumps({"config": self.cfg, "upstream": self.upstream,
                             "port": self.port, "control": theirs.fileno()})
        try:
            proc = await trio.lowlevel.open_process(
                [sys.executable, "-m", "trio_typha.workers.pool"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, pass_fds=(theirs.fileno(),))
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        assert proc.stdin is not None and proc.stdout is not None
        w.control, w.passed, w.closed, w.connections = ours, 0, 0, []
        self._procs[w.index] = proc
        w.pid = proc.pid
        try:
            await proc.stdin.send_all(struct.pack("!I", len(spec)) + spec)
            line = b""
            while not line.endswith(b"\n"):
                chunk = await proc.stdout.receive_some(4096)
                if not chunk:
                    break
                line += chunk
            if line:
                started = json.loads(line)
                w.health_port, w.metrics_port = started["health"], started["metrics"]
                w.running = True
                w.detail = "not ready yet"
                log.info("Worker %d started pid=%d", w.index, proc.pid)
            await proc.wait()
        except (trio.BrokenResourceError, trio.ClosedResourceError, json.JSONDecodeError):
            await proc.wait()
        finally:
            w.control = None
            ours.close()
            with trio.CancelScope(shield=True):
                await proc.stdin.aclose()
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()

    async def _poll(self) -> None:
        async with httpx.AsyncClient(timeout=2.0, trust_env=False) as http:
            while True:
                for w in self.workers:
                    if w.running:
                        await self._read(http, w)
                await trio.sleep(POLL_INTERVAL)

    async def _read(self, http: httpx.AsyncClient, w: WorkerState) -> None:
        try:
            if w.health_port:
                r = await http.get(f"http://127.0.0.1:{w.health_port}/readiness")
                w.ready = r.status_code == 200
                w.detail = "" if w.ready else r.text.strip()[:200] or "not ready"
                c = await http.get(f"http://127.0.0.1:{w.health_port}/connections")
                doc = c.json()
                w.connections = doc.get("connections", [])
                w.closed = max(w.closed, int(doc.get("accepted", 0)) - len(w.connections))
            if w.metrics_port:
                m = await http.get(f"http://127.0.0.1:{w.metrics_port}/metrics")
                w.metrics = m.text
        except (httpx.HTTPError, ValueError) as exc:
            w.ready = False
            w.detail = f"unreachable: {exc}"


async def serve_worker_feed(feeds: Mapping[str, CacheFeed],
                            encodings: tuple[wire.Encoding, ...], write_timeout: float,
                            share: Callable[[], int], stream: trio.abc.Stream) -> None:
    """The primary's side of one worker connection: a snapshot, then every breadcrumb.

    Each breadcrumb's record (its updates and its encodings for the enabled protocols) is
    built once however many workers there are; several published since the last write
    go in one write, each still its own record.  A worker that takes no bytes for
    ``write_timeout`` (ServerWriteTimeoutSecs) is cut off: it exits and is started again,
    rather than holding the chain of breadcrumbs behind it in the primary's memory.
    ``share()`` is the worker's share of the connection limit, sent whenever it changes.
    """
    decoder = wire.Decoder(max_record=4096)
    hello: wire.Record | str | None = None
    with trio.move_on_after(HELLO_TIMEOUT):
        try:
            while hello is None and (data := await stream.receive_some(4096)):
                decoder.feed(data)
                hello = next(iter(decoder), None)
        except (wire.WireError, trio.BrokenResourceError) as exc:
            hello = str(exc)
    if not isinstance(hello, wire.Hello) or hello.syncer_type not in feeds:
        log.error("Worker feed: no valid hello (%s); closing", hello)
        await trio.aclose_forcefully(stream)
        return
    feed = feeds[hello.syncer_type]
    crumb = feed.snapshot_point()
    snapshot = crumb.snapshot()
    encode = partial(wire.encode_snapshot, crumb.status, 0.0, snapshot)
    try:
        # A large snapshot is encoded off the event loop (as the clients' snapshots are).
        data = (await trio.to_thread.run_sync(encode) if len(snapshot) >= THREAD_BUILD_SIZE
                else encode())
        with trio.fail_after(write_timeout):
            await stream.send_all(data)
        sent_limit: int | None = None
        while True:
            with trio.move_on_after(LIMIT_CHECK_INTERVAL):
                await feed.wait_published(crumb)
            records = []
            if (limit := share()) != sent_limit:
                records.append(wire.encode_limit(limit))
                sent_limit = limit
            now = trio.current_time()
            while crumb.next is not None:
                crumb = crumb.next
                records.append(wire.encode_crumb(crumb, now - crumb.origin, encodings))
            if records:
                with trio.fail_after(write_timeout):
                    await stream.send_all(b"".join(records))
    except trio.TooSlowError:
        log.error("Worker feed for %s: the worker took nothing for %.0fs; cutting it off",
                  hello.syncer_type, write_timeout)
    except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        log.info("Worker feed for %s ended: %s", hello.syncer_type, exc)
    finally:
        await trio.aclose_forcefully(stream)


def aggregate_exposition(own: str, others: list[str]) -> str:
    """Prometheus text with every sample summed over the primary and its workers
    (process metrics stay the primary's: they describe one process)."""
    if not others:
        return own
    totals: dict[str, float] = {}
    for text in others:
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            name, _, value = line.rpartition(" ")
            if name.startswith(("process_", "python_")):
                continue
            try:
                totals[name] = totals.get(name, 0.0) + float(value)
            except ValueError:
                continue
    out = []
    for line in own.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            if name in totals:
                with contextlib.suppress(ValueError):
                    line = f"{name} {_fmt(float(value) + totals[name])}"
        out.append(line)
    return "\n".join(out) + "\n"


def _fmt(value: float) -> str:
    from prometheus_client.utils import floatToGoString
    text: str = floatToGoString(value)
    return text


if __name__ == "__main__":
    worker_main()
