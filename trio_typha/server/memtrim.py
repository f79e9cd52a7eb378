"""Memory given back to the system after a connection storm has left.

CPython frees a departed session's objects to its allocators, which keep the pages: the
resident set stays at the storm's peak.  When the connection count has fallen well below
the peak seen since the last return, one garbage collection (the sessions' reference
cycles: trio tasks, exceptions and their frames) and glibc's ``malloc_trim`` return the
free pages.  Both cost a pause of the loop, so they run only after such a fall, at most
once per check interval.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

log = logging.getLogger(__name__)

#: Seconds between looks at the connection count.
CHECK_INTERVAL = 5.0


@dataclass
class TrimPolicy:
    """When to give memory back (pure): after the count has fallen to at most ``fraction``
    of the highest count since the last return, by at least ``min_drop`` connections."""

    fraction: float = 0.5
    min_drop: int = 64
    high: int = field(default=0)

    def observe(self, count: int) -> bool:
        """Note the count now; True when memory should be given back now."""
        self.high = max(self.high, count)
        if self.high - count >= self.min_drop and count <= self.high * self.fraction:
            self.high = count
            return True
        return False


def _malloc_trim() -> Callable[[], int] | None:
    """glibc's ``malloc_trim(0)``, or None where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        trim = libc.malloc_trim
    except (OSError, AttributeError, TypeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: int(trim(0))


MALLOC_TRIM = _malloc_trim()


def give_back() -> None:
    """Collect the cycles departed sessions left, then return free heap pages."""
    gc.collect()
    if MALLOC_TRIM is not None:
        MALLOC_TRIM()


async def run_trimmer(count: Callable[[], int], *, policy: TrimPolicy | None = None,
                      interval: float = CHECK_INTERVAL,
                      task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Every ``interval``, give memory back if ``policy`` says the storm has left."""
    policy = policy or TrimPolicy()
    task_status.started()
    while True:
        await trio.sleep(interval)
        before = policy.high
        if policy.observe(count()):
            give_back()
            log.info("Connections fell from %d to %d; freed memory returned to the system",
                     before, policy.high)
