"""Exponential backoff with jitter, shared by the datastore watchers and the clients.

Pure: the caller supplies the random source and does the sleeping, so a schedule is
deterministic under a seeded :class:`random.Random` and testable without an event loop.
Jitter only ever shortens a delay, so ``maximum`` is a hard ceiling and many watchers that
fail together (one API server outage, thirty resource kinds) spread their retries out.
"""

from __future__ import annotations

__sans_io__ = True

from collections.abc import Callable


class Backoff:
    """Delays ``initial * factor**n`` capped at ``maximum``, each cut by up to ``jitter``.

    Call :meth:`next_delay` after each failure and :meth:`reset` after a success.
    ``random`` returns floats in ``[0, 1)`` (e.g. ``random.Random(seed).random``).
    """

    def __init__(self, *, initial: float = 0.5, maximum: float = 30.0, factor: float = 2.0,
                 jitter: float = 0.2, random: Callable[[], float]) -> None:
        if initial <= 0:
            raise ValueError(f"backoff initial delay must be > 0, got {initial}")
        if maximum < initial:
            raise ValueError(f"backoff maximum {maximum} is below the initial delay {initial}")
        if factor < 1:
            raise ValueError(f"backoff factor must be >= 1, got {factor}")
        if not 0 <= jitter < 1:
            raise ValueError(f"backoff jitter must be in [0, 1), got {jitter}")
        self.initial = initial
        self.maximum = maximum
        self.factor = factor
        self.jitter = jitter
        self._random = random
        self._base = initial
        self.failures = 0

    def next_delay(self) -> float:
        """The delay before the next attempt; grows the following one."""
        base = self._base
        self._base = min(self._base * self.factor, self.maximum)
        self.failures += 1
        return base * (1.0 - self.jitter * self._random())

    def reset(self) -> None:
        """Back to the initial delay (the last attempt worked)."""
        self._base = self.initial
        self.failures = 0
