"""The list-watch loop of one resource kind against the Kubernetes API (the trio shell).

The loop lists (in pages), sends what changed, then watches from the list's resourceVersion
with bookmarks on, resuming from the last revision seen whenever a stream ends or drops.  A
``410 Gone`` (HTTP or a watch ``ERROR`` event) means the resume point left the server's
history: list again and send only the differences.  The decisions about objects live in the
pure :class:`~trio_typha.datastore.k8s_reflector.KindReflector`; this module owns the I/O,
the retries and the ``Connection`` reports.

As in Calico's watcher cache (``libcalico-go/lib/backend/watchersyncer/watchercache.go``):
a kind whose list is ``404 Not Found`` (its CRD is not installed) counts as synced (and, if
never listed, empty) and is listed again every ``missing_kind_recheck`` (30 minutes); a
watch refused with 404 is followed by a list a ``WatchPollInterval`` later; repeated watch
failures without progress fall back to a full relist; watches restart no faster than
``min_watch_interval``.

Each watch stream is checked while silent (:mod:`.stall`).  On the shared HTTP/2
connection, whose PINGs prove it alive, the API server's bookmarks are the progress signal:
a stream that has delivered owes a bookmark about once a minute, and one that misses it (or
every stream of a connection whose hub went silent) is listed in its place - a consistent
list, diffed against what was sent, then a watch from the list's resourceVersion - and
listed again every ``stall_deadline`` until a watch delivers again.  Over HTTP/1.1, where a
watch has a connection of its own, a stream silent for most of ``stall_deadline`` is also
cross-checked by a short watch from its resourceVersion; a change that watch is given and
the stream is not tears the stream down, with one WARNING, and the watch resumes from that
resourceVersion.

Unlike Calico, which reports a datastore failure only after ten minutes without a successful
request, a failed list (or a watch refused with 401/403) is reported at once as
``Connection(ok=False, reason, kind)`` - once per distinct reason, naming the request, the
resource and, for 403, the missing RBAC permission - and ``Connection(ok=True, kind=kind)``
follows when a request for that kind works again.  Retries back off exponentially with jitter.
"""

from __future__ import annotations

import errno
import itertools
import logging
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import trio

from ..backoff import Backoff
from ..model.kinds import KUBEVIRT_MIGRATION, ResourceKind
from .base import Connection, DatastoreEvent, hand_over
from .crosscheck import delivering, until_stalled
from .http_edge import describe
from .k8s_api import KubeApi
from .k8s_errors import ApiError, K8sError, MalformedResponse
from .k8s_profile_watch import ProfileStamps
from .k8s_reflector import KindReflector, WatchErrorEvent
from .stall import (
    DEFAULT_DEADLINE,
    KUBE_BOOKMARK_INTERVAL,
    StallCheck,
    WatchStalled,
    probe_window,
)

log = logging.getLogger(__name__)

#: Kinds Calico lists in one request, without client-go's pager (so without ``limit``): its
#: LiveMigration client calls the KubeVirt client's List directly
#: (``libcalico-go/lib/backend/k8s/resources/livemigration.go``).
UNPAGED_LIST_KINDS = frozenset({KUBEVIRT_MIGRATION})


@dataclass(frozen=True, slots=True)
class WatchTuning:
    """Sizes and timings of the list-watch loops; defaults follow Calico and client-go."""

    page_size: int = 500  # list `limit`
    # None: watches carry no timeoutSeconds and run until the server ends them, as Calico's
    # (libcalico-go/lib/backend/k8s/resources/resources.go watchOptionsToK8sListOptions);
    # a number t asks for timeoutSeconds in [t, 2t), as client-go's reflector does
    watch_timeout: float | None = None
    min_watch_interval: float = 0.5  # floor between two watch requests of one kind
    missing_kind_recheck: float = 1800.0  # relist a kind that was 404 this often
    # Calico's WatchPollInterval: the wait before listing again when a list gives no
    # resourceVersion or a watch is refused with 404
    empty_rv_poll: float = 5.0
    max_errors_per_revision: int = 5  # failed watches without progress before a relist
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    stall_deadline: float = DEFAULT_DEADLINE  # a silent watch is cross-checked (.stall)
    # how often the API server sends a watch that owes one a bookmark (kube-apiserver: a
    # minute); a stream that misses one is listed in its place (.stall); None: never
    bookmark_interval: float | None = KUBE_BOOKMARK_INTERVAL


class KindWatcher:
    """Lists then watches one kind forever, sending :mod:`~trio_typha.datastore.base` events."""

    def __init__(self, api: KubeApi, kind: ResourceKind,
                 send: trio.MemorySendChannel[DatastoreEvent], *,
                 tuning: WatchTuning, random: Callable[[], float],
                 check: StallCheck | None = None, stream: str = "",
                 profile: ProfileStamps | None = None,
                 reflector: KindReflector | None = None) -> None:
        """``reflector``: one restored from a sibling (:meth:`KindReflector.restore`) to
        resume from; its profile stamps become ``profile``."""
        self.api = api
        self.kind = kind
        self.stream = stream or kind.plural
        self.check = check or StallCheck(tuning.stall_deadline, trio.current_time(),
                                         name=self.stream)
        self.check.bookmark_every = tuning.bookmark_interval
        self.tuning = tuning
        self.reflector = KindReflector(kind, profile=profile)
        if reflector is not None:
            reflector.profile = self.reflector.profile
            self.reflector = reflector
        self._send = send
        self._random = random
        self._backoff = Backoff(initial=tuning.backoff_initial, maximum=tuning.backoff_max,
                                random=random)
        self._errors_at_rv = 0
        self._failure: str | None = None  # the reason last sent with Connection(ok=False)
        self._next_watch = -math.inf
        self._absent = False

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
                  ) -> None:
        """Loop forever; ready as soon as it starts (syncing is reported with KindSynced)."""
        task_status.started()
        while True:
            if self.reflector.resume_rv is None:
                await self._list()
            else:
                await self._watch()

    async def _list(self) -> None:
        try:
            pages, list_rv = await self._list_all()
        except ApiError as exc:
            if exc.http_status == 404:
                await self._not_served()
            else:
                if exc.expired:  # the revision asked for is gone (or too new): any will do
                    self.reflector.expire()
                await self._failed("list", exc)
            return
        except K8sError as exc:
            await self._failed("list", exc)
            return
        self._backoff.reset()
        self._errors_at_rv = 0
        self.check.listed(trio.current_time())
        await self._recovered()
        items = _Counted(itertools.chain.from_iterable(pages))
        try:
            # Objects are decoded as the pipeline takes them (at most a channelful ahead).
            await self._emit(self.reflector.stream_listed(items, list_rv))
        except MalformedResponse as exc:
            self.reflector.expire()  # list again; what was sent stays known
            await self._failed("list", exc)
            return
        if self._absent:
            log.info("%s is served again; listed %d objects", self.kind, items.count)
            self._absent = False
        if self.reflector.resume_rv is None:
            # Nothing to resume a watch from: poll by listing (Calico does the same).
            log.info("List of %s returned no resourceVersion; polling", self.kind)
            await trio.sleep(self.tuning.empty_rv_poll)

    async def _list_all(self) -> tuple[list[Iterator[Any]], str]:
        """All pages of the list (their items still to be decoded) and its resourceVersion;
        an expired continue token falls back to one full list."""
        pages: list[Iterator[Any]] = []
        token: str | None = None
        limit: int | None = None if self.kind in UNPAGED_LIST_KINDS else self.tuning.page_size
        rv = self.reflector.list_rv
        while True:
            try:
                page, items = await self.api.list_page(self.kind, limit=limit,
                                                       continue_token=token,
                                                       resource_version=rv)
            except ApiError as exc:
                if not (exc.expired and token is not None):
                    raise
                log.info("List of %s: continue token expired; listing in one page", self.kind)
                pages, token, limit = [], None, None
                continue
            pages.append(items)
            metadata = page.get("metadata") or {}
            if not isinstance(metadata, dict):
                raise MalformedResponse(f"list of {self.kind}: metadata is not an object")
            token, rv_now = metadata.get("continue") or None, metadata.get("resourceVersion")
            if not isinstance(token, str | None) or not isinstance(rv_now, str | None):
                raise MalformedResponse(f"list of {self.kind}: metadata.continue or "
                                        f"metadata.resourceVersion is not a string")
            if token is None:
                return pages, rv_now or ""

    async def _not_served(self) -> None:
        """404: the kind's API (typically a CRD) is not installed: synced, recheck later.

        As in Calico's watcher cache, a kind never listed counts as synced and empty, and
        one that was listed before keeps what it had (what went meanwhile is deleted by
        the list that finds the API again); either way the next list is
        ``missing_kind_recheck`` later.
        """
        if not self.reflector.synced:
            log.info("%s is not served by the API server (404); counting it as in sync and "
                     "empty, and listing it again every %gs", self.kind,
                     self.tuning.missing_kind_recheck)
        else:
            log.debug("%s is not served by the API server (404); listing it again in %gs",
                      self.kind, self.tuning.missing_kind_recheck)
        self._absent = True
        events = self.reflector.absent()
        self.check.progressed(trio.current_time())
        self.check.dormant = True  # no watch until the kind is served: nothing to go stale
        self._backoff.reset()
        await self._recovered()
        await self._emit(events)
        await trio.sleep(self.tuning.missing_kind_recheck)

    async def _watch(self) -> None:
        await trio.sleep_until(self._next_watch)
        self._next_watch = trio.current_time() + self.tuning.min_watch_interval
        start_rv = self.reflector.resume_rv
        assert start_rv is not None
        base = self.tuning.watch_timeout
        timeout = None if base is None else max(int(base + base * self._random()), 1)
        progressed = False
        stalled: list[WatchStalled] = []
        error: Exception
        try:
            async with self.api.watch(self.kind, resource_version=start_rv,
                                      timeout_seconds=timeout) as events:
                self.reflector.watch_started()
                await self._recovered()
                self.check.shared = self.api.activity if events.multiplexed else None
                self.check.progressed(trio.current_time())
                failure: list[Exception] = []
                async with trio.open_nursery() as nursery:
                    await nursery.start(self._cross_check, stalled, nursery.cancel_scope)
                    try:
                        async for event in events:
                            self.check.delivered(trio.current_time())
                            with delivering(self.check):
                                await self._emit(self.reflector.watched(event))
                            if not progressed:
                                progressed = True
                                self._errors_at_rv = 0
                                self._backoff.reset()
                    except (WatchErrorEvent, K8sError) as exc:
                        failure.append(exc)  # raised below, outside the nursery
                    nursery.cancel_scope.cancel()
                if failure:
                    raise failure[0]
            if stalled:
                self._stalled(stalled[0])
            return  # the server ended the stream (its timeout), or it stalled: resume
        except WatchErrorEvent as exc:
            if exc.status.expired or exc.status.too_large_rv:
                self._expired(start_rv, exc)
                return
            error = exc
        except ApiError as exc:
            if exc.http_status == 404:
                # The API went away (its CRD was deleted): poll it by listing, from where
                # the watch was, a WatchPollInterval from now (Calico does the same).
                log.debug("Watch of %s is not served (404); listing it again in %gs",
                          self.kind, self.tuning.empty_rv_poll)
                self.reflector.expire(gone=False)
                await trio.sleep(self.tuning.empty_rv_poll)
                return
            if exc.expired:
                self._expired(start_rv, exc)
                return
            if exc.http_status in (401, 403):
                await self._failed("watch", exc)
                return
            error = exc
        except MalformedResponse as exc:
            # The same event would come again on a resumed watch: list instead, which
            # sends what changed (nothing is lost); the failure is reported until it works.
            self.reflector.expire(gone=False)
            await self._failed("watch", exc)
            return
        except K8sError as exc:
            error = exc
        silent = self.check.silent_for(trio.current_time())
        if _timed_out(error):
            # TCP keepalive (or TCP_USER_TIMEOUT) gave up on a path that drops this stream's
            # packets: the stream was dead for a while, say so once.
            log.warning("Watch of %s (%s) broke after %.1fs silent (%s); resuming from "
                        "resourceVersion %s", self.kind, self.stream, silent, describe(error),
                        self.reflector.resume_rv)
        if progressed:
            if not _timed_out(error):
                log.info("Watch of %s dropped (%s); resuming from resourceVersion %s",
                         self.kind, describe(error), self.reflector.resume_rv)
            return
        self._errors_at_rv += 1
        if self._errors_at_rv >= self.tuning.max_errors_per_revision:
            log.warning("Watch of %s failed %d times at resourceVersion %s (%s); relisting",
                        self.kind, self._errors_at_rv, start_rv, describe(error))
            self._errors_at_rv = 0
            self.reflector.expire(gone=False)
        else:
            log.info("Watch of %s failed (%s); retrying", self.kind, describe(error))
        await trio.sleep(self._backoff.next_delay())

    def _stalled(self, stalled: WatchStalled) -> None:
        """A stalled stream resumes from its resourceVersion (a new watch was given what it
        missed); a wedged one is listed in its place, now and every deadline until a watch
        delivers again (one WARNING when that starts)."""
        if not stalled.wedged:
            log.warning("Watch of %s (%s) stalled: silent for %.1fs while the API server "
                        "has changes after resourceVersion %s; resuming the watch on a new "
                        "connection", self.kind, self.stream, stalled.silent_for,
                        self.reflector.resume_rv)
            return
        if self.check.enter_fallback(trio.current_time()):
            log.warning("Watch of %s (%s) wedged: silent for %.1fs (%s); listing %s in its "
                        "place every %gs until a watch delivers again", self.kind,
                        self.stream, stalled.silent_for, stalled.reason, self.kind.plural,
                        self.check.deadline)
        else:
            log.info("Watch of %s (%s): %s; listing again", self.kind, self.stream,
                     stalled.reason)
        self.reflector.relist()

    async def _cross_check(self, stalled: list[WatchStalled], scope: trio.CancelScope, *,
                           task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                           ) -> None:
        task_status.started()
        stalled.append(await until_stalled(self.check, self._probe, self.stream))
        scope.cancel()

    async def _probe(self) -> bool | None:
        rv = self.reflector.resume_rv
        if rv is None:
            return None
        return await self.api.changed_since(self.kind, rv,
                                            window=probe_window(self.check.deadline))

    def _expired(self, rv: str, why: Exception) -> None:
        log.info("Watch of %s cannot resume from resourceVersion %s (%s); relisting",
                 self.kind, rv, why)
        self.reflector.expire()

    async def _failed(self, verb: str, exc: Exception) -> None:
        """Report the failure (once per distinct reason) and back off."""
        reason = describe_failure(self.kind, verb, exc)
        if reason != self._failure:
            self._failure = reason
            log.warning("%s", reason)
            denied = isinstance(exc, ApiError) and exc.http_status in (401, 403)
            await self._send.send(Connection(ok=False, reason=reason, kind=self.kind,
                                             denied=denied))
        else:
            log.debug("%s (again)", reason)
        await trio.sleep(self._backoff.next_delay())

    async def _recovered(self) -> None:
        if self._failure is not None:
            log.info("Access to %s restored", self.kind)
            self._failure = None
            await self._send.send(Connection(ok=True, kind=self.kind))

    async def _emit(self, events: Iterable[DatastoreEvent]) -> None:
        await hand_over(self._send, events)


class _Counted:
    """Iterates ``items`` and counts them."""

    def __init__(self, items: Iterator[Any]) -> None:
        self._items = items
        self.count = 0

    def __iter__(self) -> Iterator[Any]:
        for item in self._items:
            self.count += 1
            yield item


def describe_failure(kind: ResourceKind, verb: str, exc: Exception) -> str:
    """A ``Connection`` reason: which request on which resource failed, and why."""
    resource = f"{kind.plural}.{kind.group}" if kind.group else kind.plural
    if isinstance(exc, ApiError):
        detail = exc.status.message or exc.status.reason or "no detail"
        if exc.http_status == 403:
            return (f"forbidden to {verb} {resource}: missing RBAC permission {verb!r} on "
                    f"resource {kind.plural!r} in API group {kind.group!r} "
                    f"(API server: {detail})")
        if exc.http_status == 401:
            return (f"unauthorized to {verb} {resource}: the API server rejected our "
                    f"credentials (API server: {detail})")
        return f"failed to {verb} {resource}: HTTP {exc.http_status}: {detail}"
    if isinstance(exc, MalformedResponse):
        return f"bad response to {verb} {resource}: {exc}"
    return f"cannot reach the API server to {verb} {resource}: {describe(exc)}"


def _timed_out(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is a connection timing out (ETIMEDOUT)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno == errno.ETIMEDOUT:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


