"""``ServerWorkers``: more processes serving the same port, fed by the one that owns the cache.

With ``ServerWorkers=N`` (N > 1) the daemon (the *primary*) keeps the one datastore watch,
the pipelines and the caches, and serves clients itself; N - 1 worker processes serve a
share of the connections: the primary alone listens on the port and passes each new
socket to the least-loaded process over its control socket (:mod:`.handoff`).  Each
worker is a follower (:mod:`trio_typha.follower`): it mirrors the primary's caches from a
private feed on a Unix socket, one connection per syncer type
(:mod:`trio_typha.upstream`): per breadcrumb the updates, so it builds its own snapshots,
and the primary's encodings of it, which its clients are sent as they are; it never
watches the datastore and encodes no delta.  The primary supervises them: a worker that dies
is started again (its clients reconnect, and the primary fills it up first), and
health, readiness, metrics and ``/connections`` of the primary cover every worker.

Everything else between the primary and a worker travels on one control channel
(:mod:`.channel`, records of :mod:`.control`), the worker's stdin: its start record
(configuration included), the sockets passed to it, its status as it changes (readiness,
connections accepted and open), the answers to the primary's queries for its metrics and
``/connections``, and the drain.  A worker exits when the channel closes (the primary is
gone).  ``ServerWorkers=1`` is the single-process server.
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio

from ..config import Config
from ..logs import fields
from . import control as c
from .channel import WorkerLink

log = logging.getLogger(__name__)

#: Pause before starting a worker again after it died.
RESTART_DELAY = 1.0


# ---- primary side -------------------------------------------------------------------------


@dataclass
class WorkerState:
    index: int
    pid: int | None = None
    running: bool = False
    ready: bool = False
    restarts: int = 0
    detail: str = "starting"
    #: The primary's end of the worker's control channel while the process runs.
    link: WorkerLink | None = None
    #: Sockets passed to it since it started, and how many of them it has reported
    #: closed (:mod:`.handoff` balances on the difference).
    passed: int = 0
    closed: int = 0
    #: Connections it has open, as it last reported.
    open: int = 0

    def on_status(self, status: c.Status) -> None:
        self.running = True  # the first status says it is up
        self.ready, self.detail = status.ready, status.detail
        self.closed = max(self.closed, status.accepted - status.open)
        self.open = status.open


class WorkerPool:
    """The primary's workers: started, watched, restarted, and asked for aggregation."""

    def __init__(self, cfg: Config, *, count: int, upstream: str, port: int,
                 share: Callable[[], int]) -> None:
        """``share()``: what each worker may hold of the replica's connection limit; call
        :meth:`limit_changed` when it changes."""
        self.cfg = cfg
        self.share = share
        self._limit_changed = trio.Event()
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

    async def _ask(self, what: int) -> list[tuple[WorkerState, bytes]]:
        """Every running worker's answer to ``what``, asked of all at once (a worker that
        does not answer in time is left out)."""
        answers: dict[int, bytes] = {}

        async def ask(w: WorkerState, link: WorkerLink) -> None:
            body = await link.query(what)
            if body is not None:
                answers[w.index] = body

        async with trio.open_nursery() as nursery:
            for w in self.workers:
                if w.running and w.link is not None:
                    nursery.start_soon(ask, w, w.link)
        return [(w, answers[w.index]) for w in self.workers if w.index in answers]

    async def documents(self) -> dict[int, dict[str, Any]]:
        """Every running worker's own ``/connections`` document, by index."""
        out = {}
        for w, body in await self._ask(c.CONNECTIONS):
            try:
                out[w.index] = json.loads(body)
            except ValueError as exc:
                log.warning("Worker %d: its /connections answer is not JSON: %s", w.index, exc)
        return out

    async def connection_rows(self) -> list[dict[str, Any]]:
        """Every worker's ``/connections`` rows, each with its ``worker`` index."""
        return [{**row, "worker": index} for index, doc in (await self.documents()).items()
                for row in doc.get("connections", ())]

    async def metrics_texts(self) -> list[str]:
        """Every running worker's Prometheus exposition."""
        return [body.decode() for _, body in await self._ask(c.METRICS)]

    def limit_changed(self) -> None:
        """The replica's limit changed: every worker is sent its new share."""
        self._limit_changed.set()
        self._limit_changed = trio.Event()

    async def _send_limits(self, link: WorkerLink) -> None:
        sent: int | None = None
        while True:
            changed = self._limit_changed
            if (share := self.share()) != sent and await link.send(c.encode_limit(share)):
                sent = share
            await changed.wait()

    # -- lifetime

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        async with trio.open_nursery() as nursery:
            for w in self.workers:
                nursery.start_soon(self._supervise, w)
            task_status.started()

    async def stop(self) -> None:
        """Drain the workers (each drains like the primary) and wait for them."""
        self._stopping = True
        for w in self.workers:
            proc = self._procs.get(w.index)
            if proc is None or proc.returncode is not None:
                continue
            if w.link is None or not await w.link.send(c.DRAIN_RECORD):
                proc.send_signal(signal.SIGTERM)  # not (or no longer) reading its channel
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
        try:
            # The worker's stdin is its end of the channel.
            proc = await trio.lowlevel.open_process(
                [sys.executable, "-m", "trio_typha.follower"], stdin=theirs.fileno())
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        link = WorkerLink(ours, w.index)
        link.on_status = w.on_status
        w.link, w.passed, w.closed, w.open = link, 0, 0, 0
        w.detail = "starting"
        self._procs[w.index] = proc
        w.pid = proc.pid
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(link.run)
                start = c.Start(self.cfg, self.upstream, self.port, w.index)
                if await link.send(c.encode_start(start)):
                    log.info("Worker %d started", w.index, extra=fields(pid=proc.pid))
                    nursery.start_soon(self._send_limits, link)
                await proc.wait()
                nursery.cancel_scope.cancel()
        finally:
            w.link = None
            link.close()
            with trio.CancelScope(shield=True):
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()


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

