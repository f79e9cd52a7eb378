"""Log lines about one peer, at most one per kind per interval (pure: the caller passes time).

A hostile peer can make the server describe each of its misdeeds, and one line per reset
stream would fill the log at the attacker's rate.  :class:`LogThrottle` lets the first
``burst`` lines of each (peer, kind) through, holds back the rest for ``interval`` seconds,
and has the next line that gets through say how many were held back.
"""

from __future__ import annotations

__sans_io__ = True

from collections.abc import Hashable


class LogThrottle:
    """Decides which lines about a peer are written; counts the ones that are not."""

    def __init__(self, interval: float = 10.0, *, burst: int = 1,
                 max_keys: int = 10_000) -> None:
        self.interval = interval
        self.burst = burst
        self.max_keys = max_keys
        # key -> (when its interval began, lines written in it, lines held back since)
        self._last: dict[Hashable, tuple[float, int, int]] = {}

    def allow(self, key: Hashable, now: float) -> int | None:
        """None: hold this line back.  Otherwise write it, noting the count returned (the
        lines held back since the previous one)."""
        entry = self._last.get(key)
        if entry is not None and now - entry[0] < self.interval:
            start, written, held = entry
            if written >= self.burst:
                self._last[key] = (start, written, held + 1)
                return None
            self._last[key] = (start, written + 1, 0)
            return held
        if entry is None and len(self._last) >= self.max_keys:
            self._prune(now)
        self._last[key] = (now, 1, 0)
        return entry[2] if entry is not None else 0

    def _prune(self, now: float) -> None:
        """Forget keys quiet for an interval (their held-back count is lost: bounded memory
        matters more than the exact count for a peer that went away)."""
        self._last = {k: v for k, v in self._last.items() if now - v[0] < self.interval}
        while len(self._last) >= self.max_keys:
            self._last.pop(next(iter(self._last)))


def held_back(count: int) -> str:
    """The suffix for a line that follows ``count`` held-back ones."""
    return f" ({count} similar lines held back)" if count else ""
