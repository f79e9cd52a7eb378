"""Automatic garbage collection paused while the initial lists load (pure, process-wide).

The initial sync builds millions of objects that either live on (cache values, the tracker,
the watchers' revisions) or die by reference counting (decoded list pages); none of them
form cycles.  Python's collector still walks them all, over and over as the heap grows,
which is a large share of the start-up CPU and slows every list page's decode
(docs/performance.md).  So each pipeline holds a :class:`GCPause` until its cache is in sync, and
automatic collection resumes when the last holder lets go (the daemon then collects once
and freezes what exists, see ``Daemon._freeze_after_sync``).  Holders are counted, so
pipelines of several daemons in one process (tests) cannot leave the collector off, and it
is never switched on if something else had switched it off.
"""

from __future__ import annotations

import gc

_holders = 0
_resume = False  # whether the first holder found automatic collection on


class GCPause:
    """One holder of the process-wide pause; :meth:`hold` and :meth:`release` are
    idempotent, so the owner can release on every way out."""

    __slots__ = ("held",)

    def __init__(self) -> None:
        self.held = False

    def hold(self) -> None:
        global _holders, _resume
        if self.held:
            return
        self.held = True
        if _holders == 0:
            _resume = gc.isenabled()
            gc.disable()
        _holders += 1

    def release(self) -> None:
        global _holders
        if not self.held:
            return
        self.held = False
        _holders -= 1
        if _holders == 0 and _resume:
            gc.enable()


def holders() -> int:
    """How many pauses are held (for tests and the debug page)."""
    return _holders

