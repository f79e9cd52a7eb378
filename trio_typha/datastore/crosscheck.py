"""The cross-check loop beside a watch stream (the trio shell of :class:`.stall.StallCheck`)."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

import trio

from .stall import StallCheck, WatchStalled

Probe = Callable[[], Awaitable[bool | None]]


@contextmanager
def delivering(check: StallCheck) -> Iterator[None]:
    """Around handing a stream's events downstream: time blocked on a full pipeline is not
    the stream's silence, and getting back to reading counts as progress."""
    check.paused = True
    try:
        yield
    finally:
        check.paused = False
        check.progressed(trio.current_time())


async def until_stalled(check: StallCheck, probe: Probe, stream: str) -> WatchStalled:
    """Probe once the stream has been silent for ``check.interval`` (and no more often
    than that); return once a probe has seen a change the stream then fails to deliver
    within ``check.grace``.

    ``probe()`` answers whether the datastore has a change the stream has not delivered
    (True/False, None when it cannot tell); one that takes longer than an interval counts
    as None.  The caller then tears the stream down and resumes it.
    """
    check.new_stream()
    next_probe = -math.inf
    while True:
        since = check.suspect_since
        if since is not None:
            await trio.sleep_until(since + check.grace)
            if check.overdue(trio.current_time()):
                return WatchStalled(stream, check.silent_for(trio.current_time()))
            if check.suspect:  # busy downstream: judge it once we read it again
                await trio.sleep(check.grace)
            continue
        await trio.sleep_until(max(check.last_progress + check.interval, next_probe))
        if not check.due(trio.current_time()):
            if check.paused:  # busy downstream: look again an interval later
                next_probe = trio.current_time() + check.interval
            elif check.alone_in_silence:  # every stream of the connection is quiet
                next_probe = trio.current_time() + check.grace
            continue  # (or the stream delivered meanwhile)
        missed: bool | None = None
        with trio.move_on_after(check.interval):
            missed = await probe()
        now = trio.current_time()
        next_probe = now + check.interval
        check.probed(missed, now)
