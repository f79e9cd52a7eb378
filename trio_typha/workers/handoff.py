"""ServerWorkers' share of the port: the primary accepts and passes sockets (``SCM_RIGHTS``).

Only the primary listens on the port.  :class:`BalancingListener` accepts there and gives
each new connection to the least-loaded process — the primary itself or one of its running
workers — passing the socket to a worker over that worker's control socket (a Unix
socketpair made before the worker started).  A worker's :class:`ReceivedSocketListener`
receives them.  Measured with ``python -m bench balance``: this spreads clients evenly
(max/mean 1.00 even after a worker restart), where ``SO_REUSEPORT`` left 1.33-1.45 and a
restarted worker with a fraction of its share.

Both are :class:`trio.abc.Listener`, so the connection registry accepts from them as from
any listen socket.
"""

from __future__ import annotations

import collections
import errno
import logging
import socket
from collections.abc import Callable, Sequence
from typing import Protocol

import trio

log = logging.getLogger(__name__)

#: The byte each passed socket travels with (a stream message must carry data).
_TOKEN = b"S"
#: How long a pass waits for a worker's full control socket before the primary keeps the
#: connection (the accept loop waits meanwhile: one accept point).
PASS_WAIT = 0.5
#: Errors of a pass that mean the worker is gone.
_GONE_ERRNOS = frozenset({errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.EBADF})


def least_loaded(loads: Sequence[int]) -> int:
    """Index of the smallest load; the first of equals (index 0 is the primary). Pure."""
    return min(range(len(loads)), key=loads.__getitem__)


class Target(Protocol):
    """A worker as the balancer sees it (:class:`~.workers.WorkerState` is one)."""

    running: bool
    passed: int  # sockets passed to it since it started (exact: counted here)
    closed: int  # of those, how many it had closed at the pool's last poll
    control: socket.socket | None  # the primary's end of its control socket
    index: int


class BalancingListener(trio.abc.Listener[trio.SocketStream]):
    """The primary's listener: accepts on ``inner`` and keeps only its own share.

    ``own()`` is the primary's connection count; ``targets()`` its workers.
    """

    def __init__(self, inner: trio.SocketListener, own: Callable[[], int],
                 targets: Callable[[], Sequence[Target]]) -> None:
        self.inner = inner
        self.socket = inner.socket  # what the daemon reads its port from
        self.own = own
        self.targets = targets

    async def accept(self) -> trio.SocketStream:
        while True:
            stream = await self.inner.accept()
            workers = [w for w in self.targets() if w.running and w.control is not None]
            # A worker's load: what it was given less what it reported closed (stale by
            # up to a poll, so a worker looks busier only by clients already gone).
            loads = [self.own()] + [w.passed - w.closed for w in workers]
            choice = least_loaded(loads)
            if choice == 0 or not await self._pass(stream, workers[choice - 1]):
                return stream

    async def _pass(self, stream: trio.SocketStream, worker: Target) -> bool:
        """Hand ``stream``'s socket to ``worker``; False if it stays with the primary."""
        control = worker.control
        assert control is not None
        try:
            while True:
                try:
                    socket.send_fds(control, [_TOKEN], [stream.socket.fileno()])
                    break
                except BlockingIOError:
                    # A worker busy with a storm's snapshots reads its control socket late;
                    # wait a little for it rather than keep its share here.
                    with trio.move_on_after(PASS_WAIT) as waited:
                        await trio.lowlevel.wait_writable(control)
                    if waited.cancelled_caught:
                        return False
        except trio.BusyResourceError:
            return False  # another listener (the other address family) waits on it
        except OSError as exc:
            if exc.errno not in _GONE_ERRNOS:
                raise
            log.warning("Worker %d is gone (%s); serving its share here until it is back",
                        worker.index, exc)
            worker.running = False
            return False
        worker.passed += 1
        stream.socket.close()  # the worker has its own descriptor now
        return True

    async def aclose(self) -> None:
        await self.inner.aclose()


class ReceivedSocketListener(trio.abc.Listener[trio.SocketStream]):
    """A worker's listener: the sockets the primary passes over ``control``.

    The control socket's EOF means the primary is gone: :class:`trio.ClosedResourceError`.
    """

    def __init__(self, control: socket.socket) -> None:
        control.setblocking(False)
        self.control = control
        self._received: collections.deque[int] = collections.deque()
        #: Sockets accepted from here so far (the primary learns its closes from it).
        self.accepted = 0

    async def accept(self) -> trio.SocketStream:
        while not self._received:
            if self.control.fileno() < 0:
                raise trio.ClosedResourceError("the control socket is closed")
            await trio.lowlevel.wait_readable(self.control)
            try:
                data, fds, _flags, _addr = socket.recv_fds(self.control, 64, 16)
            except BlockingIOError:
                continue
            if not data:
                raise trio.ClosedResourceError("the primary closed the control socket")
            self._received.extend(fds)
        sock = socket.socket(fileno=self._received.popleft())  # family read from the fd
        self.accepted += 1
        return trio.SocketStream(trio.socket.from_stdlib_socket(sock))

    async def aclose(self) -> None:
        while self._received:
            socket.close(self._received.popleft())
        trio.lowlevel.notify_closing(self.control)
        self.control.close()
        await trio.lowlevel.checkpoint()
