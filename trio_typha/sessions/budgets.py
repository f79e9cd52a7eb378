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
    #: An address whose connections keep being closed for a kind (an attacker that
    #: reconnects) has its offender score divided by 1 + its recent closures over this,
    #: down to ``min_offender_score``: each new connection then costs fewer frames.
    strikes_per_halving: float = 10.0
    min_offender_score: float = 4.0
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
        # (address, kind) -> (decaying count of its connections closed, when)
        self._strikes: dict[tuple[str, str], tuple[float, float]] = {}
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

    def offender_score(self, address: str, kind: str, now: float) -> float:
        """The score over which a connection from ``address`` is an offender for ``kind``."""
        limits = self.limits
        entry = self._strikes.get((address, kind))
        if entry is None:
            return limits.offender_score
        strikes = _decayed(entry, now, limits.half_life)
        return max(limits.offender_score / (1.0 + strikes / limits.strikes_per_halving),
                   limits.min_offender_score)

    def strike(self, address: str, kind: str, now: float) -> None:
        """A connection from ``address`` was closed for ``kind``."""
        self.overdrafts[kind] = self.overdrafts.get(kind, 0) + 1
        key = (address, kind)
        entry = self._strikes.get(key)
        if entry is None and len(self._strikes) >= self.limits.max_addresses:
            self._strikes = {k: v for k, v in self._strikes.items()
                             if _decayed(v, now, self.limits.half_life) >= 1.0}
            while len(self._strikes) >= self.limits.max_addresses:
                self._strikes.pop(next(iter(self._strikes)))
        self._strikes[key] = ((_decayed(entry, now, self.limits.half_life) if entry else 0.0)
                              + 1.0, now)

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
        return _decayed(self._scores.get(kind, (0.0, now)), now, self.budgets.limits.half_life)

    def charge(self, kind: str, now: float) -> Overdraft | None:
        """Count one frame of ``kind``; an :class:`Overdraft` if a shared bucket is empty
        and this connection is among those that emptied it."""
        limits = self.budgets.limits
        if kind not in limits.per_address and kind not in limits.per_process:
            return None
        score = self.score(kind, now) + limits.weights.get(kind, 1.0)
        self._scores[kind] = (score, now)
        empty = self.budgets.draw(self.address, kind, now)
        if empty is None or score < self.budgets.offender_score(self.address, kind, now):
            return None
        self.budgets.strike(self.address, kind, now)
        return Overdraft(kind, empty[0], empty[1], score)


def _decayed(entry: tuple[float, float], now: float, half_life: float) -> float:
    """A (count, when) halved for every ``half_life`` since."""
    count, when = entry
    decay: float = 0.5 ** (max(now - when, 0.0) / half_life)
    return count * decay
