"""Noticing a watch stream that has stopped delivering (pure: no I/O, no trio).

A long-lived watch can go silent without failing: a firewall that drops its inbound packets,
a proxy or middlebox that stops forwarding, a wedged server-side watcher.  A keepalive on
another connection proves nothing about this one, so every watch stream gets a check of its
own, in two layers:

* On the connection: HTTP/2 PINGs where the watch is a stream of an HTTP/2 connection
  (:class:`~trio_typha.h2client.core.Keepalive`), else TCP keepalive with short timers and
  ``TCP_USER_TIMEOUT`` on the watch's socket (:func:`.http_edge.keepalive_socket_options`):
  the probes travel the very path the missing data would, so a path that drops inbound
  packets kills the connection within the deadline.
* A cross-check of the stream (:class:`StallCheck`): once the stream has been silent for
  ``interval`` (a little under the deadline), the watcher asks the datastore whether the
  stream has missed anything: a Kubernetes watcher opens a short watch from the last
  revision the stream delivered (a connection of its own over HTTP/1.1, a stream of the
  shared connection over HTTP/2); etcd's sends a ``WatchProgressRequest`` up the stream
  itself, and no answer within the probe window counts as a missed change.  "Nothing"
  counts as progress, as a progress notification or a bookmark would; "something" makes the
  stream suspect, and if it still has not delivered a ``grace`` later (the probe window:
  the datastore sends a change to every watcher at once) it is stalled: the watcher tears
  it down and resumes from its last revision.  This catches what TCP cannot: a peer (or
  proxy) that keeps the connection open and ACKs but forwards nothing.

A stream is probed at most once per ``interval``, and never while it delivers events or
bookmarks.  With ``interval = deadline - 2 * grace``, a change made while the stream is
stalled is noticed at the first probe after it: within ``interval`` plus the probe's round
trip plus ``grace``, under the deadline.

:class:`WatchBoard` keeps the age of every watch's last event or progress for the
``typha_watch_progress_age_seconds`` metric and the readiness detail.

"Silent for" has one definition, :meth:`StallCheck.silent_for`: the seconds since the stream
was last known to be current - its last event, bookmark or progress notification, or a
cross-check that found nothing it had missed; on a shared HTTP/2 connection where every
stream is quiet, the last time the connection was heard from.  The stall WARNING, the
metric and readiness all read that one figure, so they agree about any one stall.  (The
time since the stream's last event is not it: a quiet stream confirmed current a moment
ago is not stale, however long ago its last object changed.)
"""

from __future__ import annotations

__sans_io__ = True

import enum
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

DEFAULT_DEADLINE = 30.0


def probe_window(deadline: float) -> float:
    """How long a cross-check waits for a replayed change after its watch is accepted.

    Datastores replay history to a new watch at once (etcd within its 100 ms sync loop), so
    a second is plenty; short deadlines (tests) get a proportionally short window.
    """
    return min(1.0, deadline / 6)


class Verdict(enum.Enum):
    FRESH = "fresh"  # the stream has delivered everything (or a probe confirmed it)
    SUSPECT = "suspect"  # a probe saw a change the stream has not delivered yet


class WatchStalled(Exception):
    """A watch stream stopped delivering; the watcher resumes it from its last revision."""

    def __init__(self, stream: str, silent_for: float) -> None:
        super().__init__(f"watch {stream} silent for {silent_for:.1f}s while the datastore "
                         f"had newer changes")
        self.stream = stream
        self.silent_for = silent_for


class Activity:
    """When any stream of one multiplexed connection last delivered (events, bookmarks, a
    new watch's acknowledgement; a confirming probe is not a delivery).

    Streams sharing an HTTP/2 connection whose liveness PINGs prove are only suspect when
    they fall silent while another stream of the connection goes on delivering: a quiet
    cluster, where every stream is silent, costs the datastore no probes at all, and a
    connection gone silent as a whole is the PINGs' to notice."""

    def __init__(self, heard_at: Callable[[], float] | None = None) -> None:
        self.last_delivery = -math.inf
        #: when the connection last read anything from the server (-inf: no connection);
        #: while every stream of it is quiet, that is when each was last known current
        self.heard_at = heard_at or (lambda: -math.inf)


class StallCheck:
    """The cross-check's decisions for one watch stream (pure; times from the caller).

    The watcher calls :meth:`progressed` whenever the stream delivers anything (an event, a
    progress notification or bookmark, the acknowledgement of a new watch); after
    ``interval`` of silence it asks :meth:`due` whether to probe, and reports each probe's
    answer to :meth:`probed`: True (the datastore has a change after the stream's last
    revision), False (it has none) or None (the probe could not tell: it failed or timed
    out).  A True makes the stream suspect; :meth:`overdue` says when the ``grace`` for
    delivering the change has passed without progress.
    """

    def __init__(self, deadline: float, now: float) -> None:
        if deadline <= 0:
            raise ValueError(f"watch stall deadline must be > 0, got {deadline}")
        self.deadline = deadline
        #: how long a suspect stream has to deliver the change its probe saw
        self.grace = probe_window(deadline)
        #: the silence before a probe, and the least time between two probes
        self.interval = deadline - 2 * self.grace
        #: when the stream was last known current (see :meth:`silent_for`)
        self.last_progress = now
        #: no stream runs, and rightly so (the kind is not served): nothing can go stale
        self.dormant = False
        #: the watcher is handing events downstream and not reading the stream: a full
        #: pipeline must not look like a silent stream
        self.paused = False
        #: the multiplexed connection the stream is on (None: a connection of its own)
        self.shared: Activity | None = None
        self._suspect_since: float | None = None

    def progressed(self, now: float) -> None:
        self.last_progress = now
        self.dormant = False
        self._suspect_since = None
        if self.shared is not None and now > self.shared.last_delivery:
            self.shared.last_delivery = now

    def new_stream(self) -> None:
        """A new stream replaces the old one: what a probe suspected of the old one is
        not held against it (its silence still counts from the last progress)."""
        self._suspect_since = None

    def due(self, now: float) -> bool:
        """Whether the stream has been silent long enough to be cross-checked (on a shared
        connection: and another stream of it delivered well after this one went quiet)."""
        # (The same sum the caller sleeps until, so float rounding cannot disagree.)
        return (not self.paused and now >= self.last_progress + self.interval
                and not self.alone_in_silence)

    @property
    def alone_in_silence(self) -> bool:
        """On a shared connection, has no other stream delivered since half an interval
        after this one's last progress?  (Streams that start together are not told apart
        by the few seconds between their starts.)"""
        shared = self.shared
        return (shared is not None
                and shared.last_delivery < self.last_progress + self.interval / 2)

    def probed(self, missed: bool | None, now: float) -> Verdict:
        if self.paused:  # the answer is about a stream we were not reading meanwhile
            return Verdict.SUSPECT if self._suspect_since is not None else Verdict.FRESH
        if missed is None:
            return Verdict.SUSPECT if self._suspect_since is not None else Verdict.FRESH
        if not missed:
            self.last_progress = now
            self._suspect_since = None
            return Verdict.FRESH
        if self._suspect_since is None:
            self._suspect_since = now
        return Verdict.SUSPECT

    def overdue(self, now: float) -> bool:
        """Whether a suspect stream has had its ``grace`` and delivered nothing meanwhile
        (a stream we were not reading is not judged)."""
        since = self._suspect_since
        return since is not None and not self.paused and now >= since + self.grace

    @property
    def suspect(self) -> bool:
        return self._suspect_since is not None

    @property
    def suspect_since(self) -> float | None:
        return self._suspect_since

    def silent_for(self, now: float) -> float:
        """Seconds since the stream was last known current: the one "silent for" that the
        WARNING, the metric and readiness report.  On a shared connection where every
        stream is quiet, a stream is as current as the connection was last heard from
        (its PINGs keep that recent while it lives)."""
        since = self.last_progress
        if self.alone_in_silence and not self.suspect:
            assert self.shared is not None
            since = max(since, self.shared.heard_at())
        return now - since


@dataclass(frozen=True, slots=True)
class WatchState:
    """What the board says about one watch at one moment."""

    name: str
    age: float  # StallCheck.silent_for: since its last event, progress or confirming probe
    stale: bool  # silent past its deadline, or known to be missing changes

    def describe(self) -> str:
        return f"watch {self.name} silent for {self.age:.0f}s: the cache may be stale"


class WatchBoard:
    """Every running watch's :class:`StallCheck`, by stream name ("felix/pods")."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._checks: dict[str, StallCheck] = {}

    def add(self, name: str, deadline: float) -> StallCheck:
        """A new check for ``name`` (replacing an older one of that name)."""
        check = StallCheck(deadline, self._clock())
        self._checks[name] = check
        return check

    def remove(self, name: str, check: StallCheck) -> None:
        if self._checks.get(name) is check:
            del self._checks[name]

    def states(self, prefix: str = "") -> Iterator[WatchState]:
        """The watches whose names start with ``prefix``, in name order."""
        now = self._clock()
        for name in sorted(self._checks):
            if name.startswith(prefix):
                check = self._checks[name]
                if check.dormant:
                    yield WatchState(name, 0.0, False)
                    continue
                age = check.silent_for(now)
                yield WatchState(name, age, check.suspect or age > check.deadline)
