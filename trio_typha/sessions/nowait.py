"""The broadcast round's non-blocking write, for the streams that have one.

:func:`nowait_sender` gives a connection's shell what its broadcast seat writes through:
``os.write`` on the socket for plain TCP, :meth:`trio_typha.tls.stream.TLSStream.send_nowait` for TLS
(encrypt, then one non-blocking send; the ciphertext the kernel does not take is *owed*,
and the seat goes back to its writer, which sends it first under its write timeout).
"""

from __future__ import annotations

import os
from typing import Protocol

import trio

from ..tls.stream import TLSStream


class NowaitSender(Protocol):
    def send_nowait(self, data: bytes | memoryview) -> int:
        """Bytes of ``data`` taken; BlockingIOError for none, OSError if broken."""
        ...

    @property
    def owes(self) -> bool:
        """Bytes taken are still waiting for the socket (the writer must flush them)."""
        ...


class SocketSender:
    """Plain TCP: whatever the kernel takes is sent; nothing is ever owed."""

    owes = False

    def __init__(self, stream: trio.SocketStream) -> None:
        self._fd = stream.socket.fileno()

    def send_nowait(self, data: bytes | memoryview) -> int:
        # trio's sockets are non-blocking: a full buffer raises BlockingIOError.
        return os.write(self._fd, data)


def nowait_sender(stream: trio.abc.Stream) -> NowaitSender | None:
    """What the broadcast round may write ``stream`` through (None: writer task only)."""
    if isinstance(stream, trio.SocketStream):
        return SocketSender(stream)
    if isinstance(stream, TLSStream):
        return stream
    return None
