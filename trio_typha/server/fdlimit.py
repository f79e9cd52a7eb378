"""File descriptors: raise the soft limit at start-up, and shed load when they run out.

Every client costs a socket.  The default soft ``RLIMIT_NOFILE`` (often 1024) is far below
what a Typha serves, so start-up raises it to the hard limit.  If the process still runs
out (EMFILE, or the system does: ENFILE), accept cannot take the next connection off the
listen backlog, and retrying alone only spins while the backlog fills with calico-nodes.
:class:`FdShedder` frees a descriptor instead: it closes the connection that has cost most
and given least (:func:`shed_candidate`), never a streaming one nor, while another will
do, one inside its handshake window, with one WARNING per interval however often accept
fails.  Client connections also stop short of the limit by a reserve, so the health and
metrics ports and the datastore still get a descriptor when clients have taken the rest.
"""

from __future__ import annotations

import errno
import logging
import resource
from collections.abc import Iterable

import trio

from ..observe.throttle import LogThrottle, held_back
from ..sessions.connections import Connection, ConnectionRegistry, State

log = logging.getLogger(__name__)


def raise_nofile_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit; returns (before, after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == hard:
        # An unlimited hard limit cannot be the soft one (the kernel caps it at nr_open).
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as exc:
        log.warning("Could not raise the open-file limit from %d to %d: %s", soft, hard, exc)
        return soft, soft
    return soft, hard


def log_nofile_limit() -> int:
    """Raise the limit and say what it is; returns the limit now in force."""
    before, after = raise_nofile_limit()
    if after != before:
        log.info("Raised the open-file limit (RLIMIT_NOFILE) from %d to %d, the hard limit",
                 before, after)
    else:
        log.info("Open-file limit (RLIMIT_NOFILE): %d", after)
    return after


#: Descriptors kept back from client connections for the health and metrics ports, the
#: datastore's connections, log files and worker pipes: at most this many (an eighth of
#: the limit when that is less).
FD_RESERVE = 64


def fd_ceiling(limit: int) -> int | None:
    """The lowest descriptor a client connection may not have under ``limit``; None when
    the limit is unlimited."""
    if limit == resource.RLIM_INFINITY or limit <= 0:
        return None
    return limit - max(min(FD_RESERVE, limit // 8), 1)


# Past its handshake window: what costs a descriptor and has given nothing first.
_SHED_ORDER = {State.HANDSHAKE: 1, State.SNAPSHOT: 2}
_IN_WINDOW = 3


def shed_candidate(connections: Iterable[Connection], now: float, window: float
                   ) -> Connection | None:
    """The connection to close for a descriptor; None if all are streaming or going.

    A connection still inside its handshake ``window`` (seconds since accept) may be a
    client that has just got in, so every connection past it goes first: those with no
    session at all (half-open, or an HTTP/2 connection that never opened a stream), then
    those whose session is still in its handshake, then those mid-snapshot.  Within a kind
    the oldest goes first (it has held its descriptor longest for the least); the ones
    inside their window go last, oldest first too, and a streaming client never."""
    best: tuple[int, float] | None = None
    chosen = None
    for conn in connections:
        if conn.draining:
            continue
        state = conn.state
        if state is State.STREAMING:
            continue
        if now - conn.connected_at < window:
            rank = _IN_WINDOW
        else:
            rank = 0 if not conn.sessions else _SHED_ORDER[state]
        key = (rank, conn.connected_at)
        if best is None or key < best:
            best, chosen = key, conn
    return chosen


def describe(conn: Connection, now: float) -> str:
    kind = "half-open" if not conn.protocol else (
        "no session" if not conn.sessions else conn.state.value)
    return f"{conn.peer} ({kind}, {now - conn.connected_at:.1f}s old)"


class FdShedder:
    """Sheds a connection for each failed accept (the registry's ``on_capacity_error``)
    and for each accepted one that reached the descriptor reserve (``on_reserve``)."""

    def __init__(self, registry: ConnectionRegistry, *, window: float = 10.0,
                 log_interval: float = 10.0) -> None:
        self.registry = registry
        self.window = window
        self.shed = 0
        self._log = LogThrottle(log_interval)

    def _shed(self, reason: str) -> tuple[bool, str]:
        now = trio.current_time()
        conn = shed_candidate(self.registry, now, self.window)
        if conn is None:
            return False, "every connection is streaming; nothing to shed"
        self.shed += 1
        what = f"closing {describe(conn, now)} to make room"
        conn.close(reason)
        return True, what

    def __call__(self, exc: OSError) -> bool:
        name = errno.errorcode.get(exc.errno or 0, "?")
        shed, what = self._shed(f"shed: out of file descriptors ({name})")
        held = self._log.allow("capacity", trio.current_time())
        if held is not None:
            log.warning("accept failed with %s (%s, limit %d); %s%s", name, exc.strerror,
                        resource.getrlimit(resource.RLIMIT_NOFILE)[0], what, held_back(held))
        return shed

    def on_reserve(self, fd: int, ceiling: int) -> bool:
        """A client connection got descriptor ``fd``, at or past ``ceiling``: shed one to
        keep the reserve free; False if there was none to shed (the caller closes the new
        one instead)."""
        shed, what = self._shed("shed: client connections reached the descriptor reserve")
        if not shed:
            what = "every connection is streaming; refusing the new one"
        held = self._log.allow("reserve", trio.current_time())
        if held is not None:
            limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            log.warning("client connections reached the descriptor reserve (descriptor %d, "
                        "limit %d, %d kept for health, metrics and the datastore); %s%s",
                        fd, limit, limit - ceiling, what, held_back(held))
        return shed
