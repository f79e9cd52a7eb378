"""The one registry of live client connections: it accepts them, runs them, and sheds them.

:meth:`ConnectionRegistry.serve` has the shape of :func:`trio.serve_listeners`: one accept
loop per listener, every connection's handler in the registry's own handler nursery, and
only the accept errors that mean "out of capacity for now" (EMFILE, ENFILE, ENOMEM,
ENOBUFS) are retried after a pause; any other accept error ends the server.

Everything that needs to know who is connected reads it here: the connection-limit
governor and Kubernetes rebalancing (:meth:`shed_one`), the graceful drain
(:meth:`drain`), ``GET /connections`` (:meth:`snapshot`), and the sessions' own metrics.
A :class:`Connection` is one accepted socket; its :class:`Session` objects are the syncer
streams it carries (gob: exactly one, with the connection's id; gRPC: one per stream).
"""

from __future__ import annotations

import contextlib
import enum
import errno
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

import trio

from ..observe.accept import ACCEPT_CAPACITY_ERRNOS, ACCEPT_RETRY_SLEEP

if TYPE_CHECKING:
    from ..cache.feed import CacheFeed

log = logging.getLogger(__name__)

#: How long to wait before accepting again after ``on_capacity_error`` has closed a
#: connection to make room (else ACCEPT_RETRY_SLEEP).
ACCEPT_RETRY_AFTER_SHED = 0.005


class State(enum.Enum):
    """Where a connection (or session) is in its life, as ``/connections`` shows it."""

    HANDSHAKE = "handshake"
    SNAPSHOT = "snapshot"
    STREAMING = "streaming"
    DRAINING = "draining"


_STATE_ORDER = {s: i for i, s in enumerate(State)}


@dataclass(eq=False)
class Session:
    """One syncer stream: what the server knows about the client behind it."""

    id: int
    connection: Connection
    protocol: str
    syncer_type: str = ""
    hostname: str = ""
    client_version: str = ""
    compression: str = ""
    #: How the stream started: "snapshot", or a resume ("position", "digest").
    resume: str = ""
    state: State = State.HANDSHAKE
    #: Cancelling it ends this session alone (gRPC: the stream; gob: the connection).
    cancel_scope: trio.CancelScope | None = None
    feed: CacheFeed | None = None
    #: The last breadcrumb written to the client: its seq and its (trio clock) timestamp.
    seq: int = -1
    seq_timestamp: float = 0.0
    bytes_sent: int = 0
    messages_sent: int = 0
    started_at: float = field(default_factory=trio.current_time)

    @property
    def peer(self) -> str:
        return self.connection.peer

    def sent(self, nbytes: int, messages: int = 1) -> None:
        self.bytes_sent += nbytes
        self.messages_sent += messages

    def reached(self, seq: int, timestamp: float) -> None:
        """The client has been sent everything up to breadcrumb ``seq``."""
        self.seq = seq
        self.seq_timestamp = timestamp

    def lag(self) -> tuple[int, float]:
        """(breadcrumbs, seconds) between what the client has and the cache's newest."""
        if self.feed is None or self.seq < 0:
            return 0, 0.0
        latest = self.feed.latest
        behind = max(latest.seq - self.seq, 0)
        return behind, (max(latest.timestamp - self.seq_timestamp, 0.0) if behind else 0.0)


@dataclass(eq=False)
class Connection:
    """One accepted socket, from accept to close."""

    id: int
    peer: str
    protocol: str = ""  # set once sniffed: "typha-gob" or "grpc"
    tls_identity: str = ""  # the verified client certificate's subject, under mTLS
    connected_at: float = field(default_factory=trio.current_time)
    connected_wall: float = field(default_factory=time.time)
    sessions: dict[int, Session] = field(default_factory=dict)
    #: Set when the server asked this connection to go (shed or drain).
    draining: bool = False
    cancel_scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    #: The protocol's graceful close (gRPC: GOAWAY, then UNAVAILABLE on its streams);
    #: without one, shedding cancels the connection.
    graceful_close: Callable[[str], None] | None = None

    @property
    def state(self) -> State:
        if self.draining:
            return State.DRAINING
        states = [s.state for s in self.sessions.values()]
        return max(states, key=_STATE_ORDER.__getitem__) if states else State.HANDSHAKE

    def close(self, reason: str) -> None:
        """Ask the connection to go: gracefully where its protocol can, else at once."""
        self.draining = True
        if self.graceful_close is not None:
            self.graceful_close(reason)
        else:
            self.cancel_scope.cancel()


# Every listener the server serves hands out socket streams (TCP, a worker's received
# socket, the balancer's), so the peer and the raw socket are read from the type itself.
SocketListener = trio.abc.Listener[trio.SocketStream]
Handler = Callable[[trio.SocketStream, Connection], Awaitable[None]]  # (stream, its record)


class ConnectionRegistry:
    """Live connections by id, the nursery they run in, and the accept loops feeding it.

    ``active``/``accepted``: optional metric objects (``inc``/``dec``) kept in step with
    the registry.  ``on_capacity_error`` is called when accept fails with one of
    :data:`ACCEPT_CAPACITY_ERRNOS`, before the pause (a place to shed load).
    """

    def __init__(self, *, active: Any = None, accepted: Any = None,
                 first_id: int | None = None) -> None:
        self.connections: dict[int, Connection] = {}
        #: Every live session by its id (gob: the connection id; gRPC: one per stream).
        self.sessions: dict[int, Session] = {}
        self.active = active
        self.accepted = accepted
        #: Called on a capacity error; returns True if it closed a connection to make room.
        self.on_capacity_error: Callable[[OSError], bool] | None = None
        #: Accepted sockets whose descriptor is at or above this eat into the reserve kept
        #: for everything but clients: ``on_reserve(fd, ceiling)`` then sheds one (True) or
        #: the new socket is closed.
        self.fd_ceiling: int | None = None
        self.on_reserve: Callable[[int, int], bool] | None = None
        #: Called whenever a connection comes or goes (a worker reports its count then).
        self.on_change: Callable[[], None] | None = None
        # Like Typha: random upper 32 bits, low bits count up from 1.
        self._next_id = first_id if first_id is not None else (
            (random.getrandbits(31) + 1) << 32 | 1)
        self._accepting: trio.CancelScope | None = None
        self._handlers: trio.Nursery | None = None
        self.listening = False
        self._emptied = trio.Event()

    # -- bookkeeping ----------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.connections)

    def __iter__(self) -> Iterator[Connection]:
        return iter(list(self.connections.values()))

    def next_id(self) -> int:
        ident = self._next_id
        self._next_id += 1
        return ident

    @contextlib.contextmanager
    def track(self, peer: str) -> Iterator[Connection]:
        """Register a connection for the duration of the block (its cancel scope entered).

        :meth:`serve` uses it for every accepted socket; a protocol entry point called on a
        stream the registry did not accept (tests, in-memory streams) uses it too.
        """
        conn = Connection(self.next_id(), peer)
        self.connections[conn.id] = conn
        if self.active is not None:
            self.active.inc()
        if self.on_change is not None:
            self.on_change()
        try:
            with conn.cancel_scope:
                yield conn
        finally:
            for session in list(conn.sessions.values()):
                self.sessions.pop(session.id, None)
            del self.connections[conn.id]
            if self.active is not None:
                self.active.dec()
            if self.on_change is not None:
                self.on_change()
            if not self.connections:
                self._emptied.set()

    @contextlib.contextmanager
    def session(self, conn: Connection, protocol: str, *, session_id: int | None = None,
                **details: Any) -> Iterator[Session]:
        """Register one syncer session of ``conn`` for the duration of the block."""
        ident = session_id if session_id is not None else self.next_id()
        session = Session(ident, conn, protocol, **details)
        conn.protocol = conn.protocol or protocol
        conn.sessions[ident] = session
        self.sessions[ident] = session
        try:
            yield session
        finally:
            conn.sessions.pop(ident, None)
            self.sessions.pop(ident, None)

    @property
    def load(self) -> int:
        """What the connection limit counts: a session each, or one for a bare connection
        (Typha counts connections, and every Typha connection carries one syncer)."""
        return sum(max(len(c.sessions), 1) for c in self.connections.values())

    # -- accepting ------------------------------------------------------------------------

    async def serve(self, handler: Handler, listeners: Sequence[SocketListener], *,
                    task_status: trio.TaskStatus[Sequence[SocketListener]]
                    = trio.TASK_STATUS_IGNORED) -> None:
        """Accept on ``listeners`` and run ``handler(stream, connection)`` for each socket.

        Reports ``listeners`` once accepting.  Returns after :meth:`stop_accepting` (or
        :meth:`drain`) once the last connection is gone; cancel it to end them all.
        """
        async with trio.open_nursery() as handlers:
            self._handlers = handlers
            with trio.CancelScope() as accepting:
                self._accepting = accepting
                async with trio.open_nursery() as nursery:
                    for listener in listeners:
                        nursery.start_soon(self._accept_loop, listener, handler)
                    self.listening = True
                    task_status.started(listeners)
            self.listening = False
        self._handlers = None

    def stop_accepting(self) -> None:
        """Close the listen sockets now; connections already accepted carry on."""
        if self._accepting is not None:
            self._accepting.cancel()
        self.listening = False

    def close_all(self) -> None:
        """End every connection at once (after a drain, or on a hard stop)."""
        self.stop_accepting()
        if self._handlers is not None:
            self._handlers.cancel_scope.cancel()

    async def _accept_loop(self, listener: SocketListener, handler: Handler) -> NoReturn:
        async with listener:
            while True:
                try:
                    stream = await listener.accept()
                except trio.ClosedResourceError as exc:
                    # A worker's listener whose primary is gone: nothing more comes; the
                    # worker drains on the same news (its stdin's EOF).
                    log.info("Listener closed (%s); accepting no more", exc)
                    await trio.sleep_forever()
                except OSError as exc:
                    if exc.errno not in ACCEPT_CAPACITY_ERRNOS:
                        raise
                    shed = False
                    if self.on_capacity_error is not None:
                        # Sheds a connection and logs at its own pace.
                        shed = bool(self.on_capacity_error(exc))
                    else:
                        log.error("accept returned %s (%s); retrying in %g seconds",
                                  errno.errorcode.get(exc.errno or 0, "?"), exc.strerror,
                                  ACCEPT_RETRY_SLEEP)
                    # A shed connection frees its descriptor as soon as its task unwinds.
                    await trio.sleep(ACCEPT_RETRY_AFTER_SHED if shed else ACCEPT_RETRY_SLEEP)
                else:
                    if self.accepted is not None:
                        self.accepted.inc()
                    if not self._within_reserve(stream):
                        await trio.aclose_forcefully(stream)
                        continue
                    assert self._handlers is not None
                    self._handlers.start_soon(self._run, stream, handler)

    def _within_reserve(self, stream: trio.SocketStream) -> bool:
        """May ``stream`` be served?  Descriptors are handed out lowest first, so one at or
        above the ceiling means at least the ceiling's worth are open."""
        ceiling = self.fd_ceiling
        if ceiling is None or self.on_reserve is None:
            return True
        fd = stream.socket.fileno()
        return fd < ceiling or self.on_reserve(fd, ceiling)

    async def _run(self, stream: trio.SocketStream, handler: Handler) -> None:
        with self.track(peer_of(stream)) as conn:
            try:
                await handler(stream, conn)
            finally:
                if conn.cancel_scope.cancel_called:
                    await trio.aclose_forcefully(stream)

    # -- shedding -------------------------------------------------------------------------

    def shed_one(self, reason: str) -> Connection | None:
        """Close one randomly chosen connection not already going; None if there is none.

        Random, as Typha's: which client moves does not matter, only that one moves at a
        time.
        """
        candidates = [c for c in self.connections.values() if not c.draining]
        if not candidates:
            return None
        conn = random.choice(candidates)
        log.info("Closing connection %#x from %s; reason: %s.", conn.id, conn.peer, reason)
        conn.close(reason)
        return conn

    async def drain(self, *, spread_over: float, max_interval: float) -> None:
        """Typha's graceful shutdown: stop accepting, then close one connection at a time,
        spread over ``spread_over`` seconds (but at least one per ``max_interval``), then the rest."""
        self.stop_accepting()
        with trio.move_on_after(spread_over):
            n = len(self)
            if n:
                interval = min(spread_over * 0.95 / n, max_interval)
                while self.connections:
                    await trio.sleep(interval * 0.95 + random.random() * interval * 0.10)
                    if self.shed_one("graceful shutdown in progress") is None:
                        # Everyone left has been asked; wait for them to go.
                        await self._wait_empty()
        log.info("Finished closing connections, completing shutdown")
        self.close_all()

    async def _wait_empty(self) -> None:
        while self.connections:
            self._emptied = trio.Event()
            await self._emptied.wait()

    # -- introspection --------------------------------------------------------------------

    def snapshot(self) -> list[dict[str, Any]]:
        """One row per session (and per connection still in its handshake), for
        ``GET /connections``; times are wall-clock seconds since the epoch."""
        now = trio.current_time()
        rows = []
        for conn in self.connections.values():
            base = {"connection_id": conn.id, "peer": conn.peer,
                    "protocol": conn.protocol or "unknown", "tls_identity": conn.tls_identity,
                    "connected_since": round(conn.connected_wall, 3),
                    "connected_secs": round(now - conn.connected_at, 3)}
            if not conn.sessions:
                rows.append({**base, "id": conn.id, "hostname": "", "syncer_type": "",
                             "compression": "", "resume": "", "seq": None, "lag_seq": 0, "lag_secs": 0.0,
                             "bytes_sent": 0, "messages_sent": 0,
                             "state": conn.state.value})
            for s in conn.sessions.values():
                lag_seq, lag_secs = s.lag()
                rows.append({**base, "id": s.id, "protocol": s.protocol,
                             "hostname": s.hostname, "syncer_type": s.syncer_type,
                             "client_version": s.client_version, "compression": s.compression,
                             "resume": s.resume,
                             "seq": s.seq if s.seq >= 0 else None, "lag_seq": lag_seq,
                             "lag_secs": round(lag_secs, 3), "bytes_sent": s.bytes_sent,
                             "messages_sent": s.messages_sent,
                             "state": (State.DRAINING if conn.draining else s.state).value})
        return rows


def peer_of(stream: trio.SocketStream) -> str:
    """``host:port`` (``[host]:port`` for IPv6) of a socket stream's peer, else ``?``."""
    try:
        addr = stream.socket.getpeername()
    except OSError:
        return "?"
    if isinstance(addr, str) or not addr:  # unix socket
        return str(addr) or "?"
    return f"[{addr[0]}]:{addr[1]}" if ":" in addr[0] else f"{addr[0]}:{addr[1]}"
