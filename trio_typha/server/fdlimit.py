"""File descriptors: raise the soft limit at start-up, and shed load when they run out.

Every client costs a socket.  The default soft ``RLIMIT_NOFILE`` (often 1024) is far below
what a Typha serves, so start-up raises it to the hard limit.  If the process still runs
out (EMFILE, or the system does: ENFILE), accept cannot take the next connection off the
listen backlog, and retrying alone only spins while the backlog fills with calico-nodes.
:class:`FdShedder` frees a descriptor instead: it closes the oldest connection that is not
yet streaming, half-open ones (nothing sniffed yet: a scanner, a stuck TLS handshake)
first, with one WARNING per interval however often accept fails.
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


# Shed first what costs a descriptor and gives nothing yet; never a streaming client.
_SHED_ORDER = {State.HANDSHAKE: 1, State.SNAPSHOT: 2}


def shed_candidate(connections: Iterable[Connection]) -> Connection | None:
    """The connection to close for a descriptor: half-open (not even sniffed) first, then
    handshaking, then mid-snapshot; the oldest of its kind.  None if all are streaming."""
    best: tuple[int, float] | None = None
    chosen = None
    for conn in connections:
        if conn.draining:
            continue
        rank = 0 if not conn.protocol else _SHED_ORDER.get(conn.state)
        if rank is None:
            continue
        key = (rank, conn.connected_at)
        if best is None or key < best:
            best, chosen = key, conn
    return chosen


def describe(conn: Connection, now: float) -> str:
    kind = "half-open" if not conn.protocol else conn.state.value
    return f"{conn.peer} ({kind}, {now - conn.connected_at:.1f}s old)"


class FdShedder:
    """The registry's ``on_capacity_error``: one connection shed per failed accept."""

    def __init__(self, registry: ConnectionRegistry, *, log_interval: float = 10.0) -> None:
        self.registry = registry
        self.shed = 0
        self._log = LogThrottle(log_interval)

    def __call__(self, exc: OSError) -> bool:
        conn = shed_candidate(self.registry)
        name = errno.errorcode.get(exc.errno or 0, "?")
        now = trio.current_time()
        if conn is not None:
            self.shed += 1
            what = f"closing {describe(conn, now)} to make room"
            conn.close(f"shed: out of file descriptors ({name})")
        else:
            what = "every connection is streaming; nothing to shed"
        held = self._log.allow("capacity", now)
        if held is not None:
            log.warning("accept failed with %s (%s, limit %d); %s%s", name, exc.strerror,
                        resource.getrlimit(resource.RLIMIT_NOFILE)[0], what, held_back(held))
        return conn is not None
