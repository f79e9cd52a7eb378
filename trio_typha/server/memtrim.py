"""The garbage collector during a connection storm, and memory given back after it.

While a storm arrives, every connection adds objects (tasks, cancel scopes, HTTP/2 state,
sessions) that the collector's full collections walk again and again: with 5,000 clients
on ``medium`` the full collections of one storm took 49 s in all, the longest 9.4 s, each a
pause in which no hello is read and no byte written.  So each time the connection count has
grown by :attr:`FreezePolicy.step`, the young generations are collected and what is left is
frozen (``gc.freeze``, as the caches are once in sync): later collections walk only what came
after.  What is frozen is still freed by reference counting; only its cycles (a departed
session's tasks and frames) wait for the return below, which thaws, collects and freezes
again.

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
#: Seconds between looks at the count while connections may be arriving.
FREEZE_INTERVAL = 1.0


@dataclass
class FreezePolicy:
    """When to freeze what exists (pure): each time the count has grown by ``step`` since the
    last freeze (or since the lowest count after it)."""

    step: int = 256
    base: int = field(default=0)

    def observe(self, count: int) -> bool:
        """Note the count now; True when the objects alive now should be frozen."""
        self.base = min(self.base, count)
        if count - self.base >= self.step:
            self.base = count
            return True
        return False


class Freezer:
    """Freezes the objects of arriving connections (see the module docstring)."""

    def __init__(self, policy: FreezePolicy | None = None) -> None:
        self.policy = policy or FreezePolicy()
        #: Frozen here since the last :func:`give_back` (which must thaw to collect them).
        self.frozen = False
        self.freezes = 0

    def check(self, count: int) -> bool:
        if not self.policy.observe(count):
            return False
        gc.collect(1)  # the young garbage first: frozen, it would stay until the thaw
        gc.freeze()
        self.frozen = True
        self.freezes += 1
        return True


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


def give_back(freezer: Freezer | None = None) -> None:
    """Collect the cycles departed sessions left (thawing what ``freezer`` froze, and
    freezing what survives again), then return free heap pages."""
    if freezer is not None and freezer.frozen:
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        freezer.frozen = False
    else:
        gc.collect()
    if MALLOC_TRIM is not None:
        MALLOC_TRIM()


async def run_freezer(count: Callable[[], int], freezer: Freezer, *,
                      interval: float = FREEZE_INTERVAL,
                      task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Every ``interval``, freeze the objects alive if connections have arrived."""
    task_status.started()
    while True:
        await trio.sleep(interval)
        freezer.check(count())


async def run_trimmer(count: Callable[[], int], *, policy: TrimPolicy | None = None,
                      interval: float = CHECK_INTERVAL, freezer: Freezer | None = None,
                      task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Every ``interval``, give memory back if ``policy`` says the storm has left."""
    policy = policy or TrimPolicy()
    task_status.started()
    while True:
        await trio.sleep(interval)
        before = policy.high
        if policy.observe(count()):
            give_back(freezer)
            log.info("Connections fell from %d to %d; freed memory returned to the system",
                     before, policy.high)
