"""Noticing a watch stream that has stopped delivering (pure: no I/O, no trio).

A long-lived watch can go silent without failing: a firewall that drops its inbound packets,
a proxy or middlebox that stops forwarding, a datastore whose watch machinery is wedged
while it still answers reads.  A keepalive on another connection proves nothing about this
one, so every watch stream gets checks of its own, in layers:

* On the connection: HTTP/2 PINGs where the watch is a stream of an HTTP/2 connection
  (:class:`~trio_typha.h2client.core.Keepalive`), else TCP keepalive with short timers and
  ``TCP_USER_TIMEOUT`` on the watch's socket (:func:`.http_edge.keepalive_socket_options`):
  the probes travel the very path the missing data would, so a path that drops inbound
  packets, or a proxy that stops forwarding, kills the connection within the deadline.
* On the stream, what the datastore promises to send:

  - Kubernetes sends a BOOKMARK on every watch about once a minute once the kind's watch
    cache has moved past the revision the watch started from
    (``storage/cacher/cache_watcher.go`` ``nextBookmarkTime``, and ``process``, which
    drops bookmarks not past the start).  So a stream that has delivered anything (an
    event or a bookmark) owes its next bookmark within ``bookmark_every`` (plus a slack)
    of that delivery; one that misses it, on a connection that is alive, is broken - and
    if nothing else on the connection delivered either, the API server's watch hub is
    wedged, which makes every stream of the connection suspect.  Bookmarks are the only
    progress signal on a shared HTTP/2 connection: a quiet stream there costs the server
    nothing, not even a probe.
  - etcd answers a ``WatchProgressRequest`` at once on a healthy stream: after
    ``interval`` (a little under the deadline) of silence the watcher sends one up the
    stream itself (:meth:`StallCheck.probed`); no answer within the probe window makes
    the stream suspect, and no delivery a ``grace`` later stalls it.
  - A Kubernetes watch on a connection of its own (HTTP/1.1, where no PING proves the
    connection) is cross-checked the same way after ``interval`` of silence, by a short
    watch from the stream's last revision: "nothing" counts as progress, "something"
    makes the stream suspect.

What follows depends on what the silence means.  A stream that missed a change a new watch
was given (a KDD cross-check), or an etcd stream that ignores its progress requests on a
connection that answers a PING, is resumed from its last revision on a new stream.  A
stream that owes a bookmark, or a resumed etcd stream that gets no reply within ``grace``
(:meth:`StallCheck.expect_reply`: not even its watch's creation), sits on a hub that gives
new watches nothing either, so the watcher falls back to listing in the stream's place
(:meth:`StallCheck.enter_fallback`): list now, diff against what was sent (the updates and
deletions a watch would have carried), watch again from the list's revision, and list
again every ``deadline`` while the watch still delivers nothing.  The first delivery - on
the stream, or on any other stream of its HTTP/2 connection, which shows the hub works -
ends the fallback; the watch goes on from where the last list left it, with no relist.  A
deletion made while the hub is wedged therefore reaches the cache within the deadline plus
one list once the fallback runs; the fallback starts, on Kubernetes, within
``bookmark_every`` plus its slack of the stream's last delivery, on etcd within the
deadline plus ``grace``.

:class:`WatchBoard` keeps every watch's :class:`StallCheck` for the
``typha_watch_progress_age_seconds`` metric and the readiness detail.

"Silent for" has one definition, :meth:`StallCheck.silent_for`: the seconds since the stream
was last known to be current - its last event, bookmark or progress notification, a new
watch's acknowledgement, a list, or a cross-check that found nothing it had missed; on a
shared HTTP/2 connection, for a stream that owes no overdue bookmark, the last time the
connection was heard from (its PINGs keep that recent while it lives).  A stream listed in
its place is not current: there only a delivery counts, so its silence keeps growing
through the fallback's lists and a cross-check's "nothing" (which a wedged hub gives every
new watch), and readiness names it until the watch delivers again.  The stall WARNING, the
metric and readiness all read that one figure, so they agree about any one stall.  (The
time since the stream's last event is not it: a quiet stream confirmed current a moment
ago is not stale, however long ago its last object changed.)
"""

from __future__ import annotations

__sans_io__ = True

import enum
import logging
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

log = logging.getLogger(__name__)

DEFAULT_DEADLINE = 30.0

#: kube-apiserver's bookmark period (``storage/cacher``: ``defaultBookmarkFrequency``).
KUBE_BOOKMARK_INTERVAL = 60.0


def probe_window(deadline: float) -> float:
    """How long a cross-check waits for a replayed change after its watch is accepted.

    Datastores replay history to a new watch at once (etcd within its 100 ms sync loop), so
    a second is plenty; short deadlines (tests) get a proportionally short window.
    """
    return min(1.0, deadline / 6)


class Verdict(enum.Enum):
    FRESH = "fresh"  # the stream has delivered everything (or a probe confirmed it)
    SUSPECT = "suspect"  # a probe saw a change the stream has not delivered yet


class Step(enum.Enum):
    """What the watcher does next for one stream (:meth:`StallCheck.step`)."""

    WAIT = "wait"  # nothing until the time given (or the stream delivers)
    PROBE = "probe"  # cross-check the stream now
    STALLED = "stalled"  # a probe's change never came: resume the stream
    WEDGED = "wedged"  # the stream (or its hub) gives nothing: list in its place
    RELIST = "relist"  # listing in its place, and a deadline has passed: list again


class WatchStalled(Exception):
    """A watch stream stopped delivering; ``wedged``: list in its place (the watcher
    resumes a stream that is merely stalled from its last revision)."""

    def __init__(self, stream: str, silent_for: float, *, wedged: bool = False,
                 reason: str = "") -> None:
        why = reason or ("the datastore gives it nothing" if wedged
                         else "the datastore had newer changes")
        super().__init__(f"watch {stream} silent for {silent_for:.1f}s: {why}")
        self.stream = stream
        self.silent_for = silent_for
        self.wedged = wedged
        self.reason = why


class Activity:
    """What the streams of one multiplexed connection share: when any of them last
    delivered (events, bookmarks; a list or a confirming probe is not a delivery), when
    the connection was last read from, and when a stream that owed a bookmark found the
    whole connection silent (the hub wedged: every stream of it is then suspect, until
    anything is delivered again)."""

    def __init__(self, heard_at: Callable[[], float] | None = None) -> None:
        self.last_delivery = -math.inf
        #: when the connection last read anything from the server (-inf: no connection);
        #: a stream owing no overdue bookmark is as current as that
        self.heard_at = heard_at or (lambda: -math.inf)
        #: when a stream found its bookmark overdue and nothing delivered since its own
        #: last delivery (None: never)
        self.wedged_at: float | None = None

    @property
    def hub_silent(self) -> bool:
        """A stream found the hub silent, and nothing has been delivered since."""
        return self.wedged_at is not None and self.last_delivery < self.wedged_at


class StallCheck:
    """The stall decisions for one watch stream (pure; times from the caller).

    The watcher reports what the stream does: :meth:`delivered` for anything the server
    sent on it (an event, a bookmark, a progress notification, a new etcd watch's
    creation), :meth:`progressed` for other evidence that it is current (a new watch's
    acknowledgement, a list), :meth:`listed` for a list, and each cross-check's answer to
    :meth:`probed`: True (the datastore has a change after the stream's last revision),
    False (it has none) or None (the probe could not tell: it failed or timed out).
    :meth:`step` says what to do next.
    """

    def __init__(self, deadline: float, now: float, *, name: str = "") -> None:
        if deadline <= 0:
            raise ValueError(f"watch stall deadline must be > 0, got {deadline}")
        self.name = name  # the stream's name, for the log
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
        #: how often the server sends this stream a bookmark once it owes one (Kubernetes;
        #: None: the datastore sends none unasked)
        self.bookmark_every: float | None = None
        #: since when the watcher lists in the stream's place (None: it watches)
        self.fallback_since: float | None = None
        #: when the last list completed
        self.listed_at = -math.inf
        self._suspect_since: float | None = None
        self._next_probe = -math.inf
        self._delivered_at: float | None = None  # the current stream's last delivery
        self._reply_due: float | None = None  # a resumed stream must answer by then
        #: why :meth:`step` last said WEDGED or RELIST (for the watcher's log line)
        self.why = ""

    # --- what the stream does -------------------------------------------------------------

    def progressed(self, now: float) -> None:
        """Evidence that the stream is current, other than a delivery of its own (which a
        stream listed in its place needs to count as current again)."""
        self.dormant = False
        self._suspect_since = None
        if self.fallback_since is None:
            self.last_progress = now

    def delivered(self, now: float) -> None:
        """The server sent something on the stream: it is current, owes its next bookmark
        a period from now, and any fallback ends."""
        self._delivered_at = now
        self._reply_due = None
        if self.shared is not None and now > self.shared.last_delivery:
            self.shared.last_delivery = now
        self._leave_fallback(now, "the watch delivers again")
        self.progressed(now)

    def reading_again(self, now: float) -> None:
        """The watcher is back to reading after blocking downstream: what the stream sent
        meanwhile waits unread, so the bookmark clock restarts now."""
        if self._delivered_at is not None:
            self._delivered_at = now
        self.progressed(now)

    def listed(self, now: float) -> None:
        """A list completed (the cache holds the datastore's state as of it)."""
        self.listed_at = now
        self.progressed(now)

    def new_stream(self) -> None:
        """A new stream replaces the old one: what a probe suspected of the old one is
        not held against it, and it owes no bookmark until it delivers (its silence still
        counts from the last progress)."""
        self._suspect_since = None
        self._delivered_at = None
        self._next_probe = -math.inf

    def expect_reply(self, now: float) -> None:
        """The stream stalled and is resumed on a new one (etcd): that one must deliver
        something (its watch's creation) within ``grace``, else the hub gives every watch
        nothing (:attr:`Step.WEDGED`)."""
        self._reply_due = now + self.grace

    def enter_fallback(self, now: float) -> bool:
        """List in the stream's place from now on (until it delivers); True the first
        time (the watcher's WARNING), False while it already does."""
        self._reply_due = None
        if self.fallback_since is not None:
            return False
        self.fallback_since = now
        return True

    def _leave_fallback(self, now: float, why: str) -> None:
        if self.fallback_since is not None:
            log.info("Watch %s is back to streaming after %.1fs of listing in its place: "
                     "%s", self.name, now - self.fallback_since, why)
            self.fallback_since = None

    # --- decisions ------------------------------------------------------------------------

    @property
    def bookmark_slack(self) -> float:
        """How late a bookmark may be: the server's timer granularity and jitter (about
        a second on kube-apiserver) and a round trip."""
        every = self.bookmark_every or 0.0
        return max(2 * self.grace, every / 20)

    @property
    def bookmark_due(self) -> float | None:
        """By when the stream owes its next bookmark (None: it owes none)."""
        if self.bookmark_every is None or self._delivered_at is None:
            return None
        return self._delivered_at + self.bookmark_every + self.bookmark_slack

    @property
    def probing(self) -> bool:
        """Whether silence alone gets the stream cross-checked: on a connection of its own
        (etcd's progress requests travel the stream itself); on a shared HTTP/2 connection
        the PINGs prove the connection and bookmarks the stream."""
        return self.shared is None

    def step(self, now: float) -> tuple[Step, float]:
        """What to do now, and (for :attr:`Step.WAIT`) until when to wait at most."""
        if self.paused:  # busy downstream: judge the stream once we read it again
            return Step.WAIT, now + self.grace
        shared = self.shared
        if self.fallback_since is not None:
            if shared is not None and shared.last_delivery > self.fallback_since:
                # Another stream of the connection delivers: the hub works, and this
                # stream, opened after the last list, is merely quiet.
                self.last_progress = max(self.last_progress, self.listed_at)
                self._leave_fallback(now, "another watch of the connection delivers")
                return self.step(now)
            at = self.listed_at + self.deadline
            if now < at:  # (on a shared connection, looking for the hub's deliveries)
                return Step.WAIT, at if shared is None else min(at, now + self.interval / 4)
            self.why = (f"still nothing delivered {now - self.listed_at:.1f}s after the last "
                        f"list")
            return Step.RELIST, at
        since = self._suspect_since
        if since is not None:
            at = since + self.grace
            return (Step.STALLED, at) if now >= at else (Step.WAIT, at)
        if self._reply_due is not None:
            if now >= self._reply_due:
                self.why = ("the watch resumed on a new stream got no reply either, not "
                            "even its creation")
                return Step.WEDGED, now
            return Step.WAIT, self._reply_due  # (no probe meanwhile: its answer is due)
        wake = math.inf
        due = self.bookmark_due
        if due is not None:
            if now >= due:
                if shared is not None and self._delivered_at is not None \
                        and shared.last_delivery <= self._delivered_at:
                    shared.wedged_at = now  # nothing else delivered either
                assert self._delivered_at is not None
                self.why = (f"no bookmark for {now - self._delivered_at:.1f}s though the "
                            f"server sends one every {self.bookmark_every:g}s, on a "
                            f"connection that answers")
                return Step.WEDGED, now
            wake = due
        if shared is not None:
            if shared.hub_silent:
                self.why = ("every watch of its connection is silent (one missed its "
                            "bookmark)")
                return Step.WEDGED, now
            # (Polled: another stream may find the hub silent meanwhile.)
            wake = min(wake, now + self.interval / 4)
        if self.probing:
            at = max(self.last_progress + self.interval, self._next_probe)
            if now >= at:
                return Step.PROBE, now
            wake = min(wake, at)
        return Step.WAIT, wake

    def probed(self, missed: bool | None, now: float) -> Verdict:
        self._next_probe = now + self.interval
        if self.paused:  # the answer is about a stream we were not reading meanwhile
            return Verdict.SUSPECT if self._suspect_since is not None else Verdict.FRESH
        if missed is None:
            return Verdict.SUSPECT if self._suspect_since is not None else Verdict.FRESH
        if not missed:
            self.progressed(now)
            return Verdict.FRESH
        if self._suspect_since is None:
            self._suspect_since = now
        return Verdict.SUSPECT

    @property
    def suspect(self) -> bool:
        return self._suspect_since is not None

    @property
    def suspect_since(self) -> float | None:
        return self._suspect_since

    def silent_for(self, now: float) -> float:
        """Seconds since the stream was last known current: the one "silent for" that the
        WARNING, the metric and readiness report (see the module docstring)."""
        since = self.last_progress
        shared = self.shared
        if (shared is not None and self.fallback_since is None and not self.suspect
                and not shared.hub_silent):
            due = self.bookmark_due
            if due is None or now < due:
                since = max(since, shared.heard_at())
        return now - since


@dataclass(frozen=True, slots=True)
class WatchState:
    """What the board says about one watch at one moment."""

    name: str
    age: float  # StallCheck.silent_for: since it was last known current
    stale: bool  # silent past its deadline, known to be missing changes, or listed instead
    listing_every: float | None = None  # listed in its place this often (None: watched)

    def describe(self) -> str:
        if self.listing_every is not None:
            return (f"watch {self.name} silent for {self.age:.0f}s: the datastore gives it "
                    f"nothing; listing it every {self.listing_every:g}s instead")
        return f"watch {self.name} silent for {self.age:.0f}s: the cache may be stale"


class WatchBoard:
    """Every running watch's :class:`StallCheck`, by stream name ("felix/pods")."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._checks: dict[str, StallCheck] = {}

    def add(self, name: str, deadline: float) -> StallCheck:
        """A new check for ``name`` (replacing an older one of that name)."""
        check = StallCheck(deadline, self._clock(), name=name)
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
                if check.fallback_since is not None:
                    yield WatchState(name, age, True, check.deadline)
                    continue
                yield WatchState(name, age, check.suspect or age > check.deadline)
