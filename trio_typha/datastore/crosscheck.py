"""The stall-check loop beside a watch stream (the trio shell of :class:`.stall.StallCheck`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

import trio

from .stall import StallCheck, Step, WatchStalled

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
        check.reading_again(trio.current_time())


async def until_stalled(check: StallCheck, probe: Probe, stream: str) -> WatchStalled:
    """Follow ``check``'s steps for a new stream: wait, probe when it says so, and return
    once the stream is stalled (a probe saw a change it then failed to deliver within
    ``check.grace``) or wedged (it owes a bookmark, its hub is silent, or the fallback's
    next list is due: ``WatchStalled.wedged``).

    ``probe()`` answers whether the datastore has a change the stream has not delivered
    (True/False, None when it cannot tell); one that takes longer than an interval counts
    as None.  The caller then tears the stream down and resumes it, or lists in its place.
    """
    check.new_stream()
    while True:
        now = trio.current_time()
        step, at = check.step(now)
        if step is Step.WAIT:
            await trio.sleep_until(at)
        elif step is Step.PROBE:
            missed: bool | None = None
            with trio.move_on_after(check.interval):
                missed = await probe()
            check.probed(missed, trio.current_time())
        elif step is Step.STALLED:
            return WatchStalled(stream, check.silent_for(now))
        else:  # WEDGED, RELIST
            return WatchStalled(stream, check.silent_for(now), wedged=True, reason=check.why)
