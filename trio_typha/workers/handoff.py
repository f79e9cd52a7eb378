"""ServerWorkers' share of the port: the primary accepts and passes sockets (``SCM_RIGHTS``).

Only the primary listens on the port.  :class:`BalancingListener` accepts there and gives
each new connection to the least-loaded process — the primary itself or one of its running
workers — passing the socket to a worker as a PASS record over that worker's control
channel (:mod:`.channel`, a Unix socketpair made before the worker started), where the
worker's :class:`~.channel.ReceivedSocketListener` receives them.  Unlike ``SO_REUSEPORT``
this keeps the spread even after a worker restart (``python -m bench balance``; the
figures are in docs/performance.md).

Both are :class:`trio.abc.Listener`, so the connection registry accepts from them as from
any listen socket.  A worker's load is what it was passed less what it has closed, which
it reports on the channel as each connection closes (:class:`~.control.Status`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

import trio

from ..server.backlog import BacklogListener
from . import control as c
from .channel import ChannelClosed, WorkerLink

log = logging.getLogger(__name__)

#: How long a pass waits for a worker's full control socket before the primary keeps the
#: connection (the accept loop waits meanwhile: one accept point).
PASS_WAIT = 0.5


def least_loaded(loads: Sequence[int]) -> int:
    """Index of the smallest load; the first of equals (index 0 is the primary). Pure."""
    return min(range(len(loads)), key=loads.__getitem__)


class Target(Protocol):
    """A worker as the balancer sees it (:class:`~.workers.WorkerState` is one)."""

    running: bool
    passed: int  # sockets passed to it since it started (exact: counted here)
    closed: int  # of those, how many it has reported closed
    link: WorkerLink | None  # the primary's end of its control channel
    index: int


class BalancingListener(trio.abc.Listener[trio.SocketStream]):
    """The primary's listener: accepts on ``inner`` and keeps only its own share.

    ``own()`` is the primary's connection count; ``targets()`` its workers.
    """

    def __init__(self, inner: BacklogListener | trio.SocketListener, own: Callable[[], int],
                 targets: Callable[[], Sequence[Target]]) -> None:
        self.inner = inner
        self.socket = inner.socket  # what the daemon reads its port from
        self.own = own
        self.targets = targets
        # Sockets kept here since the inner listener last waited: a backlog batch is handed
        # out without a scheduling turn, so their connections are not in ``own()`` yet.
        self._kept_unseen = 0

    async def accept(self) -> trio.SocketStream:
        while True:
            if not (isinstance(self.inner, BacklogListener) and self.inner.backlog_taken):
                self._kept_unseen = 0  # the accept below waits: the kept ones get counted
            stream = await self.inner.accept()
            workers = [w for w in self.targets() if w.running and w.link is not None]
            # A worker's load: what it was given less what it has reported closed (a close
            # is reported as it happens, so a worker looks busier only by clients gone
            # since its last report).
            loads = [self.own() + self._kept_unseen] + [w.passed - w.closed for w in workers]
            choice = least_loaded(loads)
            if choice != 0:
                passed = await self._pass(stream, workers[choice - 1])
                self._kept_unseen = 0  # passing awaits the channel: the kept ones are counted
                if passed:
                    continue
            self._kept_unseen += 1
            return stream

    async def _pass(self, stream: trio.SocketStream, worker: Target) -> bool:
        """Hand ``stream``'s socket to ``worker``; False if it stays with the primary."""
        link = worker.link
        assert link is not None
        try:
            # A worker busy with a storm's snapshots reads its control socket late; wait a
            # little for it rather than keep its share here.
            if not await link.control.send(c.PASS_RECORD, [stream.socket.fileno()],
                                           patience=PASS_WAIT):
                return False
        except ChannelClosed as exc:
            log.warning("Worker %d is gone (%s); serving its share here until it is back",
                        worker.index, exc)
            worker.running = False
            return False
        worker.passed += 1
        stream.socket.close()  # the worker has its own descriptor now
        return True

    async def aclose(self) -> None:
        await self.inner.aclose()
