"""A listener that takes the whole accept backlog each time it is woken.

``trio.SocketListener.accept`` hands out one socket per scheduling turn (every trio socket
call ends in a checkpoint).  A turn lasts as long as every runnable task takes to run once,
and during a connection storm most of them are sessions writing snapshots: one socket per
turn leaves the last of a thousand clients connecting at once waiting for their handshake
behind a thousand turns, past grpcio's wait for the server's SETTINGS and calico-node's read
timeout.  :class:`BacklogListener` waits as trio's listener does, then accepts without
waiting whatever else the kernel already holds (up to :data:`ACCEPT_BATCH`) and returns
those from later :meth:`~BacklogListener.accept` calls without a turn in between, so every
connection waiting when the accept loop runs starts its handshake in the same turn.
"""

from __future__ import annotations

import os
import socket
from collections import deque

import trio

#: Sockets taken from the kernel's queue in one turn beyond the first: a bound on the work
#: one turn of the accept loop does (each socket costs a task start).
ACCEPT_BATCH = 256


class BacklogListener(trio.abc.Listener[trio.SocketStream]):
    """Wraps a :class:`trio.SocketListener`; its :meth:`accept` drains the backlog in
    batches."""

    def __init__(self, listener: trio.SocketListener) -> None:
        self.inner = listener
        self.socket = listener.socket  # what the daemon reads its port from
        # A second descriptor for the same listening socket, for accept(2) calls that must
        # not checkpoint (trio's socket methods always do).  It shares the open file (and
        # its O_NONBLOCK) with trio's, so either one takes from the same queue.
        self._raw = socket.socket(fileno=os.dup(listener.socket.fileno()))
        self._raw.setblocking(False)
        self._ready: deque[trio.SocketStream] = deque()

    async def accept(self) -> trio.SocketStream:
        if self._ready:
            return self._ready.popleft()
        stream = await self.inner.accept()
        self._take_backlog()
        return stream

    def _take_backlog(self) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                sock, _addr = self._raw.accept()
            except OSError:
                # Nothing more queued, or no room (EMFILE...): the batch ends here, and the
                # next waiting accept meets any lasting condition, where the caller handles it.
                return
            sock.setblocking(False)
            self._ready.append(trio.SocketStream(trio.socket.from_stdlib_socket(sock)))

    @property
    def backlog_taken(self) -> int:
        """Sockets accepted from the kernel and not yet handed out."""
        return len(self._ready)

    async def aclose(self) -> None:
        self._raw.close()
        while self._ready:
            await trio.aclose_forcefully(self._ready.popleft())
        await self.inner.aclose()
