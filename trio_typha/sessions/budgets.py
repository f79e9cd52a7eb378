"""Flood budgets shared by connections: per source address and per process (pure: the
caller passes the time).

A per-connection budget stops one connection flooding; an attacker that spreads the same
flood over hundreds of connections, each under it, is stopped only by a budget those
connections share, as Envoy's overload manager and Go's per-server limits do.  Each kind
of costly frame draws from two token buckets: its source address's and the process's.
While a bucket has tokens nothing happens.  Once one is empty, the connections that charge
it and have themselves cost the most lately (a decaying count of their charges, their
*score*) are the ones told to go; a connection with a low score, such as a client that
opened its one stream, is admitted even then, so a flood never costs a good client its
connection.
"""

from __future__ import annotations

__sans_io__ = True

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field

#: Per second for each kind, shared by all connections from one address / by the process.
#: A reset stream was opened first: new streams get twice the reset budget and count half
#: towards a connection's score, so a rapid reset flood is named for its resets.
DEFAULT_PER_ADDRESS: Mapping[str, float] = {
    "rapid_reset": 100, "new_streams": 200, "settings": 100, "ping": 200,
    "priority": 200, "empty_data": 200,
}
DEFAULT_PER_PROCESS: Mapping[str, float] = {
    "rapid_reset": 500, "new_streams": 1000, "settings": 500, "ping": 1000,
    "priority": 1000, "empty_data": 1000,
}


@dataclass(frozen=True, slots=True)
class SharedLimits:
    """Rates per kind (kinds missing from both maps are not shared-budgeted), how many
    seconds of its rate a bucket holds, and what makes a connection an offender."""

    per_address: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_PER_ADDRESS))
    per_process: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_PER_PROCESS))
    burst_seconds: float = 2.0
    #: A connection's score halves every this many seconds without charges.
    half_life: float = 5.0
    #: Below this score a connection is admitted even when a bucket is empty.
    offender_score: float = 20.0
    #: What one frame of a kind adds to the score (1 if not named).
    weights: Mapping[str, float] = field(default_factory=lambda: {"new_streams": 0.5})
    #: Addresses remembered at once (quiet ones are forgotten first).
    max_addresses: int = 10_000


class TokenBucket:
    """``rate`` tokens per second, holding at most ``burst``; starts full."""

    __slots__ = ("rate", "burst", "tokens", "stamp")

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self.stamp = now

    def refill(self, now: float) -> None:
        if now > self.stamp:
            self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now

    def take(self, now: float, n: float = 1.0) -> bool:
        """Take ``n`` tokens if there are that many; False (nothing taken) if not."""
        self.refill(now)
        if self.tokens >= n:
            self.tokens -= n
            return True
        return False

    def full(self, now: float) -> bool:
        self.refill(now)
        return self.tokens >= self.burst


@dataclass(frozen=True, slots=True)
class Overdraft:
    """Why a connection is told to go: whose bucket of which kind ran dry, and how much
    this connection had been charging."""

    kind: str
    scope: str  # "address 10.0.0.1" or "process"
    rate: float
    score: float

    def __str__(self) -> str:
        return (f"{self.kind} flood across connections: {self.score:.0f} recent frames in "
                f"this one while the {self.scope}'s shared budget of {self.rate:g}/s ran dry")


class SharedBudgets:
    """The process's buckets and one set per source address; :meth:`account` gives each
    connection its own view."""

    def __init__(self, limits: SharedLimits | None = None) -> None:
        self.limits = limits or SharedLimits()
        self._process: dict[str, TokenBucket] = {}
        self._addresses: dict[Hashable, dict[str, TokenBucket]] = {}
        #: Connections told to go, per kind, over the process's life.
        self.overdrafts: dict[str, int] = {}

    def account(self, address: str) -> Account:
        return Account(self, address)

    def _bucket(self, table: dict[str, TokenBucket], kind: str, rate: float,
                now: float) -> TokenBucket:
        bucket = table.get(kind)
        if bucket is None:
            bucket = table[kind] = TokenBucket(rate, rate * self.limits.burst_seconds, now)
        return bucket

    def _address(self, address: str, now: float) -> dict[str, TokenBucket]:
        table = self._addresses.get(address)
        if table is None:
            if len(self._addresses) >= self.limits.max_addresses:
                self._prune(now)
            table = self._addresses[address] = {}
        return table

    def _prune(self, now: float) -> None:
        """Forget addresses whose buckets are full again (forgetting them changes nothing),
        then the oldest if still too many."""
        self._addresses = {a: t for a, t in self._addresses.items()
                           if not all(b.full(now) for b in t.values())}
        while len(self._addresses) >= self.limits.max_addresses:
            self._addresses.pop(next(iter(self._addresses)))

    def draw(self, address: str, kind: str, now: float) -> tuple[str, float] | None:
        """Take one ``kind`` token from the address's and the process's buckets; the
        (scope, rate) of one that was empty, or None if both had a token."""
        empty: tuple[str, float] | None = None
        rate = self.limits.per_address.get(kind)
        if rate is not None and not self._bucket(self._address(address, now), kind, rate,
                                                 now).take(now):
            empty = (f"address {address}", rate)
        rate = self.limits.per_process.get(kind)
        if rate is not None and not self._bucket(self._process, kind, rate, now).take(now):
            empty = empty or ("process", rate)
        return empty


class Account:
    """One connection's charges against the shared budgets, and its score per kind."""

    __slots__ = ("budgets", "address", "_scores")

    def __init__(self, budgets: SharedBudgets, address: str) -> None:
        self.budgets = budgets
        self.address = address
        self._scores: dict[str, tuple[float, float]] = {}  # kind -> (score, when)

    def score(self, kind: str, now: float) -> float:
        score, when = self._scores.get(kind, (0.0, now))
        decay: float = 0.5 ** (max(now - when, 0.0) / self.budgets.limits.half_life)
        return score * decay

    def charge(self, kind: str, now: float) -> Overdraft | None:
        """Count one frame of ``kind``; an :class:`Overdraft` if a shared bucket is empty
        and this connection is among those that emptied it."""
        limits = self.budgets.limits
        if kind not in limits.per_address and kind not in limits.per_process:
            return None
        score = self.score(kind, now) + limits.weights.get(kind, 1.0)
        self._scores[kind] = (score, now)
        empty = self.budgets.draw(self.address, kind, now)
        if empty is None or score < limits.offender_score:
            return None
        self.budgets.overdrafts[kind] = self.budgets.overdrafts.get(kind, 0) + 1
        return Overdraft(kind, empty[0], empty[1], score)
