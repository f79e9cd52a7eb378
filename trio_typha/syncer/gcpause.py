"""Automatic garbage collection paused while the initial lists load (pure: the collector is
passed in).

The initial sync builds millions of objects that either live on (cache values, the tracker,
the watchers' revisions) or die by reference counting (decoded list pages); none of them
form cycles.  Python's collector still walks them all, over and over as the heap grows,
which is a large share of the start-up CPU and slows every list page's decode
(docs/performance.md).  So each pipeline holds a :class:`GCPause` until its cache is in
sync, and automatic collection resumes when the last holder lets go (the daemon then
collects once and freezes what exists, see ``Daemon._freeze_after_sync``).

The daemon owns one :class:`GCPauses` over the interpreter's ``gc`` module and hands its
pipelines their pauses; holders are counted there, and collection is never switched on if
something else had switched it off.
"""

from __future__ import annotations

__sans_io__ = True

from typing import Protocol


class Collector(Protocol):
    """What is paused: the ``gc`` module's switch."""

    def isenabled(self) -> bool: ...

    def enable(self) -> None: ...

    def disable(self) -> None: ...


class GCPauses:
    """The holders of one collector's pause: automatic collection is off while any holds."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector
        self.holders = 0
        self._resume = False  # whether the first holder found automatic collection on

    def pause(self) -> GCPause:
        """A new holder, not yet holding."""
        return GCPause(self)

    def _hold(self) -> None:
        if self.holders == 0:
            self._resume = self.collector.isenabled()
            self.collector.disable()
        self.holders += 1

    def _release(self) -> None:
        self.holders -= 1
        if self.holders == 0 and self._resume:
            self.collector.enable()


class GCPause:
    """One holder of a :class:`GCPauses`; :meth:`hold` and :meth:`release` are idempotent,
    so the owner can release on every way out."""

    __slots__ = ("_pauses", "held")

    def __init__(self, pauses: GCPauses) -> None:
        self._pauses = pauses
        self.held = False

    def hold(self) -> None:
        if not self.held:
            self.held = True
            self._pauses._hold()

    def release(self) -> None:
        if self.held:
            self.held = False
            self._pauses._release()
