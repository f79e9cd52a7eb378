"""Has the peer gone?  Asked of the kernel, without reading what the peer left behind.

A peer that floods a connection and then exits leaves its last frames unread in our
receive buffer, and the kernel says nothing of the FIN until they have all been read:
parsing them is work for nobody.  The socket's TCP state says at once that the peer has
closed its side (CLOSE_WAIT) or reset the connection (CLOSE), so a reader that finds a full
buffer can ask, and drop the rest unparsed.
"""

from __future__ import annotations

import socket

import trio

from ..tls.stream import TLSStream

# Linux's tcp_states.h: the states in which the peer will send nothing more.
_TCP_CLOSE, _TCP_CLOSE_WAIT = 7, 8
_TCP_INFO = getattr(socket, "TCP_INFO", None)


def peer_hung_up(stream: trio.abc.Stream) -> bool:
    """True if the peer of ``stream`` (TCP, or TLS over TCP) has closed or reset it; False
    if it has not, or the platform cannot tell."""
    if isinstance(stream, TLSStream):
        stream = stream.transport
    if not isinstance(stream, trio.SocketStream) or _TCP_INFO is None:
        return False
    try:
        info = stream.socket.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, 8)
    except OSError:
        return False
    return bool(info) and info[0] in (_TCP_CLOSE, _TCP_CLOSE_WAIT)
