"""The etcd v3 datastore (``TYPHA_DATASTORETYPE=etcdv3``), over etcd's native gRPC API.

All pipelines share one HTTP/2 connection per etcd endpoint (:mod:`.etcd_client`, hosted
by :meth:`EtcdDatastore.run`, so it outlives any one pipeline's session); each pipeline's
watch is a Watch stream on it, and its ranges and status calls are streams on it too.  For each pipeline, :meth:`EtcdDatastore.watch` runs one loop of *sessions* against one
endpoint at a time:

1. ask Maintenance/Status who and where etcd is (cluster id, current revision);
2. if it must (first start, compaction, a different or rewound etcd), range every kind's
   prefix at one pinned revision, page by page, and send only the differences from what
   was sent before (:class:`~.etcd_state.EtcdSyncState`);
3. watch from the next revision.  Liveness is checked on that very connection: HTTP/2 PINGs
   when it has been read-idle, and the connection declared dead when one goes unanswered
   (both times derived from the stall deadline, as clientv3's keepalive); and while the
   watch stream is quiet, a ``WatchProgressRequest`` on the stream itself, which etcd
   answers at once on a healthy stream (:mod:`.stall` decides: two unanswered in a row
   mean the stream is stalled).  A stalled stream is reset (RST_STREAM CANCEL) and the
   watch resumed from its last revision on a new stream of the same connection when the
   connection still answers a PING, leaving the other pipelines' streams running; when it
   answers none, the connection is closed and the watch resumes on a new one.  A new
   stream that gets no reply either (not even its watch's creation) sits on a wedged
   watch hub, which gives every watch nothing while ranges still work: the pipeline then
   lists in the watch's place (step 2, on the same connection), watches again from the
   list's revision, and lists again every stall deadline until a watch delivers.

One watch covers the whole key span of the pipeline's kinds rather than one per kind: a
single stream gives one revision sequence to resume from after a reconnect, and events for
other kinds inside the span are dropped by key before any decoding.  (With IPAM kinds the
span starts under ``/calico/ipam/``, so it also carries IPAM handle churn, dropped the same
way.)  A compacted start revision cancels the watch with ``compact_revision`` set: the
pipeline lists again on the same connection.  Every call asks for a leader (``hasleader``,
clientv3's ``WithRequireLeader``): a member that has lost quorum cancels the watch with
"no leader", which ends the session.  A failed session is reported once as
``Connection(ok=False)``, retried with exponential backoff and jitter on the next endpoint;
``Connection(ok=True)`` is sent once a watch is running again (and when the first one
starts).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from functools import partial
from typing import Any

import trio

from ..backoff import Backoff
from ..config import Config
from ..model.kinds import ResourceKind
from ..model.syncers import DatastoreMode
from . import etcd_rpc as rpc
from .base import Connection, Datastore, DatastoreEvent, hand_over
from .crosscheck import delivering, until_stalled
from .etcd_client import EtcdClient, WatchStream
from .etcd_config import EtcdConfig
from .etcd_errors import EtcdError, EtcdServerError
from .etcd_layout import kind_prefix, watch_span
from .etcd_state import EtcdSyncState
from .http_edge import describe
from .stall import (
    DEFAULT_DEADLINE,
    StallCheck,
    WatchBoard,
    WatchStalled,
    probe_window,
)

log = logging.getLogger(__name__)


class _Compacted(Exception):
    """The range's pinned revision was compacted while we were paging: list again."""


#: Range pages fetched ahead of the one being handled (see ``_Watcher._list_all``).
LIST_PAGES_AHEAD = 1

#: A page of a kind's range, or (None) the end of that kind's pages.
_Page = tuple[ResourceKind, "rpc.RangePage | None"]


class _Relist(Exception):
    """The watch's start revision was compacted away: list again, on the same connection."""


class _Reconnect(Exception):
    """The watch stalled and its connection answers no PING: resume on a new connection."""


class EtcdDatastore(Datastore):
    """List-watches Calico v3 resources stored in etcd.

    ``request_timeout`` bounds each call; ``stall_deadline`` how long a dead connection or
    a watch stream that stopped delivering goes unnoticed (see :mod:`.stall`);
    ``page_size`` bounds one range reply.  ``rng`` seeds the backoff jitter (tests).
    :attr:`watches` holds each running watch's progress.
    """

    name = "etcdv3"
    mode = DatastoreMode.ETCD

    def __init__(self, config: EtcdConfig, *, page_size: int = 500,
                 request_timeout: float = 10.0,
                 backoff_initial: float = 0.5, backoff_max: float = 30.0,
                 stall_deadline: float = DEFAULT_DEADLINE,
                 rng: random.Random | None = None) -> None:
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        self.config = config
        self.page_size = page_size
        self.request_timeout = request_timeout
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.stall_deadline = stall_deadline
        self._watches = WatchBoard(trio.current_time)
        self._rng = rng or random.Random()
        #: the client (one connection) of each endpoint, shared by every pipeline
        self._clients = {endpoint: EtcdClient(config, endpoint,
                                              request_timeout=request_timeout,
                                              stall_deadline=stall_deadline)
                         for endpoint in config.endpoints}
        self._running = False
        #: each running watch's state, by its ``name`` (for :meth:`export_watch`)
        self._states: dict[str, EtcdSyncState] = {}
        #: states restored from a sibling, taken by the next watch of that ``name``
        self._restored: dict[str, EtcdSyncState] = {}

    @property
    def watches(self) -> WatchBoard:
        return self._watches

    @classmethod
    def from_config(cls, cfg: Config, **kwargs: Any) -> EtcdDatastore:
        """From the daemon's config (its ``etcd_*`` fields)."""
        return cls(EtcdConfig.from_config(cfg), **kwargs)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Host the connection to each endpoint (opened on first use, shared by every
        pipeline) until cancelled; :meth:`probe` and :meth:`watch` need it running."""
        if self._running:
            task_status.started()
            return
        self._running = True
        try:
            async with trio.open_nursery() as nursery:
                for client in self._clients.values():
                    await nursery.start(client.run)
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._running = False

    async def probe(self) -> str | None:
        """Ask each endpoint for its status once; None if one answered, else why none did
        (the daemon's start-up check: an etcd unreachable at start is a clean exit)."""
        problems = []
        for endpoint, client in self._clients.items():
            try:
                await client.status()
                return None
            except EtcdError as exc:
                problems.append(f"{endpoint}: {describe(exc)}")
        return "; ".join(problems)

    def client(self, endpoint: str) -> EtcdClient:
        """The client of ``endpoint``, shared by every pipeline (hosted by :meth:`run`)."""
        return self._clients[endpoint]

    def export_watch(self, name: str) -> dict[str, Any] | None:
        state = self._states.get(name)
        return None if state is None else state.export()

    def restore_watch(self, name: str, kinds: Sequence[ResourceKind], state: object) -> None:
        restored = EtcdSyncState(kinds)
        restored.restore(state)
        self._restored[name] = restored

    async def watch(self, kinds: Sequence[ResourceKind],
                    send: trio.MemorySendChannel[DatastoreEvent], *, name: str = "",
                    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """List then watch ``kinds`` forever (see the module docstring); the watch is
        ``<name>/etcd`` in :attr:`watches`.

        Raises ValueError at once for kinds that etcd mode does not store (see
        :mod:`.etcd_layout`: v3 resources, and IPAM blocks and affinities at v1 paths).
        """
        stream = f"{name}/etcd" if name else "etcd"
        state = self._restored.pop(name, None)
        if state is None or state.kinds != tuple(dict.fromkeys(kinds)):
            state = EtcdSyncState(kinds)
        watcher = _Watcher(self, state, send, stream)
        self._states[name] = state
        task_status.started()
        try:
            await watcher.run()
        finally:
            self.watches.remove(stream, watcher.check)
            if self._states.get(name) is state:
                del self._states[name]


class _Watcher:
    """One pipeline's session loop against etcd."""

    def __init__(self, ds: EtcdDatastore, state: EtcdSyncState,
                 send: trio.MemorySendChannel[DatastoreEvent], stream: str) -> None:
        self.ds = ds
        self.stream = stream
        self.check: StallCheck = ds.watches.add(stream, ds.stall_deadline)
        self.state = state
        self.send = send
        self.span = watch_span(state.kinds)
        self.backoff = Backoff(initial=ds.backoff_initial, maximum=ds.backoff_max,
                               random=ds._rng.random)
        self.connected: bool | None = None  # None until etcd first answers or fails
        self._endpoint_index = 0
        self._heard = trio.Event()  # set by any reply on the stream since the last probe

    async def run(self) -> None:
        endpoints = self.ds.config.endpoints
        while True:
            endpoint = endpoints[self._endpoint_index % len(endpoints)]
            try:
                await self._session(self.ds.client(endpoint))
            except _Reconnect:
                continue  # the stalled connection is closed: resume at once on a new one
            except EtcdError as exc:
                reason = f"etcd {endpoint}: {describe(exc)}"
                log.warning("etcd watch session failed (watch %s silent for %.1fs): %s",
                            self.stream, self.check.silent_for(trio.current_time()), reason)
                await self._report(False, reason)
            self._endpoint_index += 1
            await trio.sleep(self.backoff.next_delay())

    async def _report(self, ok: bool, reason: str = "") -> None:
        if self.connected is not ok:
            self.connected = ok
            if ok:
                log.info("Connected to etcd %s", reason)
            await self.send.send(Connection(ok=ok, reason=reason))

    async def _session(self, client: EtcdClient) -> None:
        """One connection's worth of work: raises when it fails, :class:`_Reconnect` when
        a stall closed it.  A stalled stream on a live connection is resumed on a new
        stream, the other pipelines' streams on the connection untouched."""
        status = await client.status()
        if self.state.needs_relist(status.header) or self.check.fallback_since is not None:
            await self._relist(client)
        while True:
            try:
                relist = await self._follow(client)
            except _Relist:
                relist = True
            if relist:  # compacted, or the watch gave nothing: list in its place
                await self._relist(client)

    async def _relist(self, client: EtcdClient) -> None:
        while True:
            try:
                header = await self._list_all(client)
            except _Compacted:
                continue
            self.state.list_complete(header)
            self.check.listed(trio.current_time())
            log.info("Listed %d objects of %d kinds from etcd at revision %d",
                     len(self.state), len(self.state.kinds), header.revision)
            return

    async def _list_all(self, client: EtcdClient) -> rpc.Header:
        """Range every kind at one revision (the first reply's), sending differences.

        The pages are fetched by a task of their own that keeps the next one in flight
        while this one decodes, converts and hands over the last: etcd serves (and the
        connection carries) page N+1 while page N is this process's work, instead of each
        page waiting for the one before it to be handled; each page's objects go
        downstream as soon as it is in, the deletions a kind's list implies once its last
        page is (:meth:`EtcdSyncState.listed_page`, :meth:`~EtcdSyncState.kind_listed`).
        At most :data:`LIST_PAGES_AHEAD` fetched pages wait."""
        self.state.begin_list()
        send, pages = trio.open_memory_channel[_Page](LIST_PAGES_AHEAD)
        failure: list[EtcdError | _Compacted] = []
        pinned: rpc.Header | None = None
        async with trio.open_nursery() as nursery:
            await nursery.start(self._fetch_pages, client, send, failure)
            async with pages:
                async for kind, page in pages:
                    if page is None:
                        await hand_over(self.send, self.state.kind_listed(kind))
                        continue
                    pinned = pinned or page.header
                    await hand_over(self.send, self.state.listed_page(kind, page.kvs))
        if failure:
            raise failure[0]
        if pinned is None:  # unreachable: watch_span refused an empty kind list
            raise ValueError("no kinds to list")
        return pinned

    async def _fetch_pages(self, client: EtcdClient, send: trio.MemorySendChannel[_Page],
                           failure: list[EtcdError | _Compacted], *,
                           task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                           ) -> None:
        """Every kind's pages in order, each kind ended by ``(kind, None)``; a failure is
        put in ``failure`` (raised by the lister, outside its nursery) and ends the pages."""
        task_status.started()
        pinned = 0
        async with send:
            try:
                for kind in self.state.kinds:
                    prefix = kind_prefix(kind).encode()
                    end = rpc.prefix_end(prefix)
                    start = prefix
                    while True:
                        page = await client.range(start, end, revision=pinned,
                                                  limit=self.ds.page_size)
                        pinned = pinned or page.header.revision
                        await send.send((kind, page))
                        if not page.more or not page.kvs:
                            break
                        start = rpc.next_page_key(page.kvs[-1].key)
                    await send.send((kind, None))
            except EtcdServerError as exc:
                if not exc.compacted:
                    failure.append(exc)
                    return
                log.info("etcd compacted during the list: %s; listing again", exc)
                failure.append(_Compacted())
            except EtcdError as exc:
                failure.append(exc)

    async def _follow(self, client: EtcdClient) -> bool:
        """Stream the watch with the stall check beside it; returns after a stall of the
        stream alone (the stream reset, RST_STREAM CANCEL): True when the stream and the one
        before it gave nothing (list in its place), raises :class:`_Reconnect` after a
        stall of the connection (closed) and :class:`_Relist` on compaction."""
        stalled: list[WatchStalled] = []
        failure: EtcdError | _Relist | None = None
        async with client.watch() as watch, trio.open_nursery() as nursery:
            await nursery.start(self._stall_check, watch, stalled, nursery.cancel_scope)
            try:
                await self._stream(client, watch)
            except (EtcdError, _Relist) as exc:
                failure = exc  # raised outside the nursery, not in an exception group
            nursery.cancel_scope.cancel()
        if failure is not None:
            raise failure
        if stalled:
            return await self._stalled(client, stalled[0])
        return False

    async def _stalled(self, client: EtcdClient, stalled: WatchStalled) -> bool:
        """The stream is reset (leaving :meth:`_follow`'s ``watch`` block).  A stream that
        gave nothing after another stalled (the hub wedged) is listed in its place (True).
        Otherwise whether the connection goes too is the PING's to say: answered, every
        other stream on it is fine and the watch resumes on a new stream from its last
        revision, which must answer within the probe window; unanswered, the connection is
        dead for every pipeline and is closed."""
        now = trio.current_time()
        if stalled.wedged:
            if self.check.enter_fallback(now):
                log.warning("etcd watch %s wedged: silent for %.1fs (%s); listing in its "
                            "place every %gs until a watch delivers again", self.stream,
                            stalled.silent_for, stalled.reason, self.check.deadline)
            else:
                log.info("etcd watch %s: %s; listing again", self.stream, stalled.reason)
            return True
        conn = client.conn
        alive = conn is not None and await conn.alive(probe_window(self.ds.stall_deadline))
        log.warning("etcd watch %s stalled: nothing delivered for %.1fs and no answer to a "
                    "progress request; %s", self.stream, stalled.silent_for,
                    f"the connection answers PINGs: resuming from revision "
                    f"{self.state.revision + 1} on a new stream" if alive else
                    "its connection answers no PING either: resuming on a new connection")
        if not alive:
            await client.aclose()
            raise _Reconnect
        self.check.expect_reply(trio.current_time())
        return False

    async def _stall_check(self, watch: WatchStream, stalled: list[WatchStalled],
                           scope: trio.CancelScope, *,
                           task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                           ) -> None:
        task_status.started()
        stalled.append(await until_stalled(self.check, partial(self._probe, watch),
                                           self.stream))
        scope.cancel()

    async def _probe(self, watch: WatchStream) -> bool | None:
        """Ask etcd for the stream's progress on the stream itself: False (nothing missed)
        when any reply arrives within the probe window, True when none does."""
        heard = self._heard = trio.Event()
        try:
            await watch.send(rpc.watch_progress())
        except EtcdError as exc:
            log.debug("etcd progress request for %s failed: %s", self.stream, exc)
            return None
        with trio.move_on_after(probe_window(self.ds.stall_deadline)):
            await heard.wait()
        return not heard.is_set()

    async def _stream(self, client: EtcdClient, watch: WatchStream) -> None:
        """Read the watch until it fails, is cancelled, or is compacted (:class:`_Relist`)."""
        start_revision = self.state.revision + 1
        await watch.send(rpc.watch_create(*self.span, start_revision))
        while True:
            msg = await watch.receive()
            self.check.delivered(trio.current_time())
            self._heard.set()
            if msg.created:
                log.debug("etcd watch created from revision %d", start_revision)
                self.backoff.reset()
                await self._report(True, client.endpoint)
            if msg.canceled:
                if msg.compact_revision:
                    self.state.compacted(msg.compact_revision)
                    raise _Relist
                raise EtcdServerError(f"watch canceled: {msg.cancel_reason or 'no reason'}")
            if msg.stream_progress:
                continue
            with delivering(self.check):
                await hand_over(self.send, self.state.watched(msg))
