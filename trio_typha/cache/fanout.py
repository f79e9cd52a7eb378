"""Pure core of the broadcast write path (no I/O of its own, no event loop).

A client that has written everything up to the newest breadcrumb is *caught up*.  Instead of
waking one writer task per caught-up client for every breadcrumb, one round per syncer walks
the caught-up clients and hands each the bytes encoded once for what was published since its
position, with a non-blocking send.  Whoever is not caught up (a partial send, a full
socket buffer, an error, a ping to write) goes back to its own writer task, which finishes
the write, catches up through the batch path and joins again.

Who may write to a client's socket is explicit, one owner at a time::

    WRITER --join()--> BROADCAST --round: partial / would block / owes / error--> WRITER
                          \\--------reclaim() (ping due, shutting down)------------^
    any --leave()--> CLOSED

Only the owner writes: the writer task while ``owner is WRITER``, :meth:`Broadcast.round`
for the seats in its caught-up set (exactly those with ``owner is BROADCAST``).  Ownership
only changes inside these synchronous methods, so no one can write between a check and a
write.

A send either falls short (the rest is the seat's ``pending``: plain TCP) or takes all the
bytes while the transport still *owes* some of them to the socket (:meth:`Seat.owes`: TLS,
whose plaintext is always encrypted whole but whose ciphertext the kernel may not take).
Either way the seat goes back to its writer, which sends what is pending or owed first,
under its write timeout; a seat joins again only when nothing is.

A round carries every breadcrumb published since the seat's position in one write (adaptive
batching: the slower the round, the more it carries), unless that is more than
``max_updates`` updates or older than ``max_age``: such a client is behind, and its own
writer applies the batch limits and the fall-behind rule.
"""

from __future__ import annotations

__sans_io__ = True

import abc
import enum
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from .core import Breadcrumb


class Owner(enum.Enum):
    WRITER = "writer"  # the client's own writer task
    BROADCAST = "broadcast"  # the syncer's broadcast round
    CLOSED = "closed"


class Seat(abc.ABC):
    """One client's place at the broadcast; protocol shells subclass it.

    ``crumb`` is the newest breadcrumb whose bytes have been handed to this client's socket
    (or, with ``pending``, are owed to it).  Subclasses say which clients share bytes
    (:meth:`key`), what those bytes are (:meth:`render`), what committing them changes
    (:meth:`commit`), how to send without blocking (:meth:`send_nowait`) and how to wake the
    writer task (:meth:`wake`).
    """

    def __init__(self) -> None:
        self.owner = Owner.WRITER
        self.crumb: Breadcrumb | None = None
        #: Bytes the round could not hand to the socket: the writer must send them first.
        self.pending: bytes | memoryview = b""
        #: What the socket raised on the round's send (the writer ends the connection).
        self.error: OSError | None = None

    def key(self) -> Hashable:
        """Seats at the same breadcrumb with equal keys get the same bytes."""
        return None

    @abc.abstractmethod
    def render(self, crumbs: Sequence[Breadcrumb]) -> bytes:
        """The bytes for ``crumbs`` (must not change the seat: it is called once per key)."""

    def commit(self, crumbs: Sequence[Breadcrumb], data: bytes) -> None:  # noqa: B027 (optional hook)
        """``data`` (for ``crumbs``) is this client's now, sent or pending."""

    @abc.abstractmethod
    def send_nowait(self, data: bytes | memoryview) -> int:
        """Send without blocking; return the bytes taken (raise BlockingIOError for none)."""

    def owes(self) -> bool:
        """Bytes taken by :meth:`send_nowait` still wait for the socket (TLS ciphertext the
        kernel did not take): the round hands the seat back for its writer to flush."""
        return False

    def wake(self) -> None:  # noqa: B027 (optional hook)
        """The round handed the socket back: wake the writer task."""


@dataclass(slots=True)
class Delivery:
    """One group of a round: the same bytes for ``crumbs`` went to ``clients`` seats."""

    crumbs: Sequence[Breadcrumb]
    clients: int
    size: int


@dataclass(slots=True)
class RoundResult:
    delivered: list[Delivery] = field(default_factory=list)
    #: Seats given back to their writers (already woken): partial, owing, failed or behind.
    handed_back: list[Seat] = field(default_factory=list)

    @property
    def deliveries(self) -> int:
        return sum(d.clients for d in self.delivered)


class Broadcast:
    """The caught-up set of one syncer type, and the rounds that write to it."""

    def __init__(self, *, max_updates: int = 10000, max_age: float = 300.0) -> None:
        self.max_updates = max_updates
        self.max_age = max_age
        self._seats: dict[Seat, None] = {}  # insertion-ordered set

    def __len__(self) -> int:
        return len(self._seats)

    def __contains__(self, seat: Seat) -> bool:
        return seat in self._seats

    # ---- ownership, called by a seat's writer task

    def join(self, seat: Seat, crumb: Breadcrumb) -> bool:
        """Hand the socket to the broadcast if ``crumb`` is the newest; False otherwise."""
        if seat.owner is not Owner.WRITER:
            raise RuntimeError(f"join by a seat owned by {seat.owner.name}")
        if seat.pending or seat.owes():
            raise RuntimeError("join with bytes still pending or owed")
        if crumb.next is not None:
            return False  # not caught up: the writer has more to send itself
        seat.crumb = crumb
        seat.error = None
        seat.owner = Owner.BROADCAST
        self._seats[seat] = None
        return True

    def reclaim(self, seat: Seat) -> None:
        """Take the socket back for the writer (no-op if the round already handed it back)."""
        if seat.owner is Owner.BROADCAST:
            del self._seats[seat]
            seat.owner = Owner.WRITER

    def leave(self, seat: Seat) -> None:
        """The connection is ending: nobody writes to it any more."""
        self._seats.pop(seat, None)
        seat.owner = Owner.CLOSED

    # ---- the round

    def round(self, latest: Breadcrumb) -> RoundResult:
        """Write what was published up to ``latest`` to every caught-up seat behind it."""
        result = RoundResult()
        groups: dict[tuple[int, Hashable], list[Seat]] = {}
        for seat in self._seats:
            assert seat.crumb is not None
            if seat.crumb is not latest:
                groups.setdefault((id(seat.crumb), seat.key()), []).append(seat)
        for seats in groups.values():
            start = seats[0].crumb
            assert start is not None
            crumbs = self._span(start, latest)
            if crumbs is None:  # behind: the writer's batch path and lag rule take over
                for seat in seats:
                    self._hand_back(seat, result)
                continue
            data = seats[0].render(crumbs)
            end = crumbs[-1]
            for seat in seats:
                try:
                    sent = seat.send_nowait(data) if data else 0
                except BlockingIOError:
                    sent = 0
                except OSError as exc:
                    seat.error = exc
                    self._hand_back(seat, result)
                    continue
                seat.crumb = end
                seat.commit(crumbs, data)
                if sent < len(data):
                    seat.pending = memoryview(data)[sent:]
                    self._hand_back(seat, result)
                elif seat.owes():
                    self._hand_back(seat, result)
            result.delivered.append(Delivery(crumbs, len(seats), len(data)))
        return result

    def _span(self, start: Breadcrumb, latest: Breadcrumb) -> list[Breadcrumb] | None:
        """The breadcrumbs after ``start`` up to ``latest``, or None if too many/too old."""
        crumbs: list[Breadcrumb] = []
        updates = 0
        crumb = start
        while crumb is not latest:
            nxt = crumb.next
            assert nxt is not None, "latest is not after the seat's breadcrumb"
            crumb = nxt
            crumbs.append(crumb)
            updates += len(crumb.updates)
            if updates > self.max_updates:
                return None
        if latest.timestamp - crumbs[0].origin > self.max_age:
            return None
        return crumbs

    def _hand_back(self, seat: Seat, result: RoundResult) -> None:
        del self._seats[seat]
        seat.owner = Owner.WRITER
        result.handed_back.append(seat)
        seat.wake()
