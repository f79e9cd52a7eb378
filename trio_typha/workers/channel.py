"""Both ends of the control channel (:mod:`.control`) on the control socketpair (trio).

:class:`ControlSocket` is one end: the one writer (records go out whole, one at a time, a
client socket's descriptor beside its PASS) and the one reader.  :class:`WorkerLink` is the
primary's view of one worker over it: the worker's last :class:`~.control.Status`, queries
answered by REPLY, passes, the limit and drain.  :class:`PrimaryLink` is the worker's end:
it turns PASS records into accepted connections (:attr:`PrimaryLink.listener`), answers
queries, and sends a STATUS whenever what it reports changes.
"""

from __future__ import annotations

import collections
import errno
import itertools
import logging
import math
import socket
from collections.abc import Callable, Sequence

import trio

from . import control as c

log = logging.getLogger(__name__)

#: Errors of a send or receive that mean the other end is gone.
GONE_ERRNOS = frozenset({errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.EBADF})
#: How long the primary waits for a worker's answer to a query.
QUERY_TIMEOUT = 2.0
#: How often a worker looks again at what only time changes (a reporter's heartbeat
#: running out); every other change is reported when it happens.
STATUS_RECHECK = 1.0

_RECEIVE_SIZE = 1 << 16
_RECEIVE_FDS = 16


class ChannelClosed(Exception):
    """The other end closed the control socket (its process is gone or going)."""


class ControlSocket:
    """One end of the control socketpair: whole records out, decoded records in."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.decoder = c.Decoder()
        self._records: collections.deque[c.Record] = collections.deque()
        self._sending = trio.StrictFIFOLock()

    async def send(self, data: bytes, fds: Sequence[int] = (), *,
                   patience: float = math.inf) -> bool:
        """Send one record (``fds`` beside its first byte); False if it could not start
        within ``patience`` seconds (nothing was sent then).  :class:`ChannelClosed` if the
        other end is gone."""
        deadline = trio.current_time() + patience
        with trio.move_on_at(deadline) as waited:
            await self._sending.acquire()
        if waited.cancelled_caught:
            return False
        try:
            view = memoryview(data)
            first = True
            while view:
                try:
                    sent = (socket.send_fds(self.sock, [view], list(fds)) if first and fds
                            else self.sock.send(view))
                except BlockingIOError:
                    # Once a record has begun it is finished, however long that takes: the
                    # other end would read garbage otherwise.
                    with trio.move_on_at(deadline if first else math.inf) as waited:
                        try:
                            await trio.lowlevel.wait_writable(self.sock)
                        except trio.ClosedResourceError:
                            raise ChannelClosed("the control socket was closed here") from None
                    if waited.cancelled_caught:
                        return False
                    continue
                except OSError as exc:
                    if exc.errno in GONE_ERRNOS:
                        raise ChannelClosed(str(exc)) from None
                    raise
                first = False
                view = view[sent:]
            return True
        finally:
            self._sending.release()

    async def receive(self) -> c.Record:
        """The next record; :class:`ChannelClosed` at the other end's EOF,
        :class:`~.control.ControlError` if what came is not a record."""
        while True:
            if self._records:
                return self._records.popleft()
            self._records.extend(self.decoder)
            if self._records:
                continue
            if self.sock.fileno() < 0:
                raise ChannelClosed("the control socket is closed")
            try:
                await trio.lowlevel.wait_readable(self.sock)
            except trio.ClosedResourceError:
                raise ChannelClosed("the control socket was closed here") from None
            try:
                data, fds, flags, _addr = socket.recv_fds(self.sock, _RECEIVE_SIZE,
                                                          _RECEIVE_FDS)
            except BlockingIOError:
                continue
            except OSError as exc:
                if exc.errno in GONE_ERRNOS:
                    raise ChannelClosed(str(exc)) from None
                raise
            if flags & socket.MSG_CTRUNC:
                log.error("Control socket: descriptors were dropped (more than %d at once)",
                          _RECEIVE_FDS)
            if not data:
                for fd in fds:
                    socket.close(fd)
                raise ChannelClosed("the other end closed the control socket")
            self.decoder.feed(data, fds)

    def close(self) -> None:
        """Close the socket and every descriptor received that no record took."""
        while self.decoder.fds:
            socket.close(self.decoder.fds.popleft())
        if self.sock.fileno() >= 0:
            trio.lowlevel.notify_closing(self.sock)
            self.sock.close()


# ---- the primary's end --------------------------------------------------------------------


class WorkerLink:
    """The primary's end of one worker's channel (while that process runs)."""

    def __init__(self, sock: socket.socket, index: int) -> None:
        self.control = ControlSocket(sock)
        self.index = index
        #: The worker's last report; None until its first (it is starting).
        self.status: c.Status | None = None
        #: Called after each STATUS (the pool updates readiness, the balancer's counts).
        self.on_status: Callable[[c.Status], None] | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, trio.MemorySendChannel[bytes]] = {}

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Read the worker's records until it closes its end (returns then)."""
        task_status.started()
        try:
            while True:
                self._dispatch(await self.control.receive())
        except ChannelClosed:
            pass
        except c.ControlError as exc:
            # A bug on one side: closing the channel makes the worker drain and exit, and
            # the pool starts a fresh one.
            log.error("Worker %d: malformed control record (%s); closing its channel",
                      self.index, exc)
            self.close()
        finally:
            for send in self._pending.values():
                send.close()

    def _dispatch(self, record: c.Record) -> None:
        if isinstance(record, c.Status):
            self.status = record
            if self.on_status is not None:
                self.on_status(record)
        elif isinstance(record, c.Reply):
            send = self._pending.pop(record.id, None)
            if send is not None:
                send.send_nowait(record.body)
        else:
            raise c.ControlError(f"a worker sent {type(record).__name__}")

    async def send(self, data: bytes) -> bool:
        try:
            return await self.control.send(data)
        except ChannelClosed:
            return False

    async def query(self, what: int) -> bytes | None:
        """The worker's answer (its metrics or /connections document); None if it gave
        none within :data:`QUERY_TIMEOUT` or is gone."""
        ident = next(self._ids)
        send, receive = trio.open_memory_channel[bytes](1)
        self._pending[ident] = send
        try:
            with trio.move_on_after(QUERY_TIMEOUT):
                if await self.send(c.encode_query(ident, what)):
                    try:
                        return await receive.receive()
                    except trio.EndOfChannel:
                        return None
            return None
        finally:
            self._pending.pop(ident, None)

    def close(self) -> None:
        self.control.close()


# ---- the worker's end ---------------------------------------------------------------------


class PrimaryLink:
    """A worker's end of its channel: connections, queries, limit and drain in; status out.

    ``status()`` says what the worker reports now; :meth:`changed` (called by whatever
    changes it) makes the link send it.  ``answer(what)`` builds the reply to a query.
    """

    def __init__(self, control: ControlSocket, *, status: Callable[[], c.Status],
                 answer: Callable[[int], bytes],
                 on_limit: Callable[[int], None] | None = None,
                 on_drain: Callable[[], None] | None = None,
                 on_gone: Callable[[], None] | None = None) -> None:
        self.control = control
        self.listener = ReceivedSocketListener(self)
        self.status = status
        self.answer = answer
        self.on_limit = on_limit
        self.on_drain = on_drain
        self.on_gone = on_gone
        self._received_send, self._received = trio.open_memory_channel[int](float("inf"))
        self._changed = trio.Event()
        self._replies: list[bytes] = []

    def changed(self) -> None:
        """Something :meth:`status` reports may have changed: send it if it did."""
        self._changed.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Read the primary's records and write this worker's, until the primary closes
        the channel (``on_gone`` is called then)."""
        async with trio.open_nursery() as nursery:
            self._changed.set()  # the first STATUS says this worker is up
            nursery.start_soon(self._write)
            task_status.started()
            try:
                while True:
                    self._dispatch(await self.control.receive())
            except (ChannelClosed, c.ControlError) as exc:
                log.info("Control channel from the primary ended: %s", exc)
            finally:
                self._received_send.close()
            if self.on_gone is not None:
                self.on_gone()
            nursery.cancel_scope.cancel()

    def _dispatch(self, record: c.Record) -> None:
        if isinstance(record, c.Pass):
            self._received_send.send_nowait(record.fd)
        elif isinstance(record, c.Query):
            self._replies.append(c.encode_reply(record.id, self.answer(record.what)))
            self._changed.set()
        elif isinstance(record, c.Limit):
            if self.on_limit is not None:
                self.on_limit(record.connections)
        elif isinstance(record, c.Drain):
            if self.on_drain is not None:
                self.on_drain()
        else:
            raise c.ControlError(f"the primary sent {type(record).__name__}")

    async def _write(self) -> None:
        """The one writer of this end: replies as they are built, the status on change."""
        sent: c.Status | None = None
        while True:
            with trio.move_on_after(STATUS_RECHECK):
                await self._changed.wait()
            self._changed = trio.Event()
            replies, self._replies = self._replies, []
            now = self.status()
            out = [*replies] + ([c.encode_status(now)] if now != sent else [])
            if out:
                try:
                    await self.control.send(b"".join(out))
                except ChannelClosed:
                    return
                sent = now

    async def receive_socket(self) -> int:
        """The next passed descriptor; :class:`trio.ClosedResourceError` once the primary
        is gone."""
        try:
            return await self._received.receive()
        except trio.EndOfChannel:
            raise trio.ClosedResourceError("the primary closed the control channel") from None

    def close(self) -> None:
        while True:
            try:
                socket.close(self._received.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel):
                break
        self.control.close()


class ReceivedSocketListener(trio.abc.Listener[trio.SocketStream]):
    """A worker's listener: the sockets the primary passes over its channel."""

    def __init__(self, link: PrimaryLink) -> None:
        self.link = link
        #: Sockets accepted from here so far (the worker's STATUS reports it).
        self.accepted = 0

    async def accept(self) -> trio.SocketStream:
        sock = socket.socket(fileno=await self.link.receive_socket())  # family from the fd
        self.accepted += 1
        return trio.SocketStream(trio.socket.from_stdlib_socket(sock))

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()
