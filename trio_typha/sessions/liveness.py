"""Typha's ping/pong rule, shared by every protocol's session (pure: the caller passes time).

Once a session streams, the server pings every ``ping_interval`` plus up to 10 % random
jitter (never less than the interval), and drops a client that has not answered any ping
for ``pong_timeout``.  Each protocol names its pings its own way (gob: the ping's wall-clock
timestamp, echoed back; gRPC: a counter), so the key type is the caller's.
"""

from __future__ import annotations

__sans_io__ = True

import math
import random
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

from .settings import ServerSettings

K = TypeVar("K", bound=Hashable)

#: Jitter added to each ping interval, as a fraction of it (Typha: up to 10 %).
PING_JITTER = 0.1
#: Unanswered pings remembered at least (a pong normally answers the latest); more if the
#: pong timeout spans more ping intervals, so every ping that may still be answered in time
#: is known.
PINGS_REMEMBERED = 8


class Liveness(Generic[K]):
    """When to ping, and until when the client may stay silent, for one session."""

    def __init__(self, settings: ServerSettings, rng: random.Random) -> None:
        self.settings = settings
        self._rng = rng
        self.running = False
        #: When the next ping is due (inf until :meth:`start`).
        self.next_ping_at = math.inf
        self.last_pong_at = 0.0
        #: Pongs received, and the round-trip time of the latest one that answered a
        #: remembered ping (None before the first).
        self.pongs = 0
        self.last_rtt: float | None = None
        self._unreported_rtt: float | None = None
        self._pings: OrderedDict[K, float] = OrderedDict()
        self._remember = max(PINGS_REMEMBERED,
                             math.ceil(settings.pong_timeout / settings.ping_interval) + 1)

    def start(self, now: float) -> None:
        """The session streams from ``now``: the pong clock starts, the first ping is due
        after one interval."""
        self.running = True
        self.last_pong_at = now
        self._schedule(now)

    def ping_due(self, now: float) -> bool:
        return self.running and now >= self.next_ping_at

    def ping_sent(self, key: K, now: float) -> None:
        """A ping named ``key`` went out at ``now``; the next one is scheduled."""
        self._pings[key] = now
        while len(self._pings) > self._remember:
            self._pings.popitem(last=False)
        self._schedule(now)

    def pong(self, key: K, now: float, *, answers_earlier: bool = False) -> bool:
        """A pong for ping ``key`` arrived; returns whether that ping was one of ours.

        Any pong proves the client alive.  ``answers_earlier``: the pong also answers every
        ping sent before ``key`` (they may have crossed in flight).
        """
        self.pongs += 1
        self.last_pong_at = now
        sent = self._pings.pop(key, None)
        if answers_earlier:
            while self._pings:
                first, at = next(iter(self._pings.items()))
                if sent is None or at > sent:
                    break
                del self._pings[first]
        if sent is None:
            return False
        self.last_rtt = self._unreported_rtt = now - sent
        return True

    def take_rtt(self) -> float | None:
        """The round-trip time measured since the last call, if any (for the latency
        metric: each measurement is reported once)."""
        rtt, self._unreported_rtt = self._unreported_rtt, None
        return rtt

    @property
    def deadline(self) -> float:
        """When the client is too late with a pong (inf until :meth:`start`)."""
        return self.last_pong_at + self.settings.pong_timeout if self.running else math.inf

    def expired(self, now: float) -> bool:
        return now >= self.deadline

    def silence(self, now: float) -> float:
        """Seconds since the last pong (or the start)."""
        return now - self.last_pong_at

    def _schedule(self, now: float) -> None:
        interval = self.settings.ping_interval
        self.next_ping_at = now + interval * (1 + PING_JITTER * self._rng.random())
