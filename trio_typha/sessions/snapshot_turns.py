"""Whose snapshot may be sent now: a bounded number at once, the rest in arrival order (pure).

A connection storm is thousands of sessions wanting the same snapshot at once.  Sent all at
once, every scheduling round of the event loop carries thousands of snapshot writes, so a
connection accepted during the storm waits minutes for its hello to be read and its first
bytes written (calico-node gives up after its 30 s read timeout and reconnects into the
storm), and every session holds its partly sent snapshot's buffers meanwhile.  Taking turns
bounds both: at most ``limit`` snapshot sends run, each at full speed; the others have had
their hello read and their first message written, get pings while they wait (gob), and
hold no snapshot until their turn (the snapshot is chosen when the turn starts, so it is
the newest, not the one current when they queued).

The caller names each request with a hashable ticket, passes the time in for the wait
figures, and starts the sends :meth:`SnapshotTurns.request` and
:meth:`SnapshotTurns.finish` say may start.
"""

from __future__ import annotations

__sans_io__ = True

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass


@dataclass(slots=True)
class TurnFigures:
    """What the turns have done so far (for metrics and the connections page)."""

    granted: int = 0
    #: Granted after waiting in the queue (the others started at once).
    queued: int = 0
    #: Longest wait in the queue before a turn, in seconds.
    longest_wait: float = 0.0
    #: Most requests waiting at one time.
    deepest_queue: int = 0


class SnapshotTurns:
    """At most ``limit`` tickets hold a turn; the others wait, first come first served.

    ``limit`` 0 means no limit (every request is granted at once).
    """

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError(f"snapshot send limit must be 0 (none) or positive, not {limit}")
        self.limit = limit
        self._running: set[Hashable] = set()
        #: Waiting tickets in arrival order, with the time each asked.
        self._waiting: OrderedDict[Hashable, float] = OrderedDict()
        self.figures = TurnFigures()

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def holds(self, ticket: Hashable) -> bool:
        """Whether ``ticket`` holds a turn now."""
        return ticket in self._running

    def position(self, ticket: Hashable) -> int | None:
        """How many tickets wait ahead of ``ticket`` (None if it is not waiting)."""
        for i, waiting in enumerate(self._waiting):
            if waiting == ticket:
                return i
        return None

    def request(self, ticket: Hashable, now: float) -> bool:
        """``ticket`` wants a turn; True if it has one now, False if it waits (a later
        :meth:`finish` returns it when its turn comes)."""
        if ticket in self._running or ticket in self._waiting:
            raise ValueError(f"ticket {ticket!r} has already asked for a turn")
        if not self._waiting and self._room():
            self._running.add(ticket)
            self.figures.granted += 1
            return True
        self._waiting[ticket] = now
        self.figures.deepest_queue = max(self.figures.deepest_queue, len(self._waiting))
        return False

    def finish(self, ticket: Hashable, now: float) -> list[Hashable]:
        """``ticket`` is done with its turn, or gives up waiting (its session ended);
        returns the tickets whose turn starts now, in the order they asked.  A ticket that
        holds no turn and is not waiting is ignored (finishing twice is harmless)."""
        if self._waiting.pop(ticket, None) is not None:
            return []
        self._running.discard(ticket)
        return self._start_waiting(now)

    def set_limit(self, limit: int, now: float) -> list[Hashable]:
        """Change the limit; returns the tickets a larger limit lets start now."""
        if limit < 0:
            raise ValueError(f"snapshot send limit must be 0 (none) or positive, not {limit}")
        self.limit = limit
        return self._start_waiting(now)

    def _room(self) -> bool:
        return not self.limit or len(self._running) < self.limit

    def _start_waiting(self, now: float) -> list[Hashable]:
        started: list[Hashable] = []
        f = self.figures
        while self._waiting and self._room():
            ticket, asked = self._waiting.popitem(last=False)
            self._running.add(ticket)
            f.granted += 1
            f.queued += 1
            f.longest_wait = max(f.longest_wait, now - asked)
            started.append(ticket)
        return started
