"""The etcd v3 datastore (``TYPHA_DATASTORETYPE=etcdv3``), over etcd's gRPC-JSON gateway.

For each pipeline, :meth:`EtcdDatastore.watch` runs one loop of *sessions* against one etcd
endpoint at a time:

1. ask ``/v3/maintenance/status`` who and where etcd is (cluster id, current revision);
2. if it must (first start, compaction, a different or rewound etcd), range every kind's
   prefix at one pinned revision, page by page, and send only the differences from what
   was sent before (:class:`~.etcd_state.EtcdSyncState`);
3. watch from the next revision, with a keepalive probe beside the stream so a frozen or
   unreachable etcd is noticed even when nothing changes, and a stall check of the stream
   itself (:mod:`.stall`): TCP keepalive on its socket, and while it is silent a short
   watch on another connection from the stream's last revision; a change the stream has
   not delivered one check later tears the stream down and resumes it from that revision.

One watch covers the whole key span of the pipeline's kinds rather than one per kind: over
HTTP/1.1 each watch costs a connection, a single stream gives one revision sequence to
resume from after a reconnect, and events for other kinds inside the span are dropped by
key before any decoding.  (With IPAM kinds the span starts under ``/calico/ipam/``, so it
also carries IPAM handle churn, dropped the same way.)  A failed session is reported once
as ``Connection(ok=False)``, retried with exponential backoff and jitter on the next
endpoint; ``Connection(ok=True)`` is sent once a watch is running again (and when the
first one starts).
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
from . import etcd_gateway as gw
from .base import Connection, Datastore, DatastoreEvent, hand_over
from .crosscheck import delivering, until_stalled
from .etcd_client import EtcdClient
from .etcd_config import EtcdConfig
from .etcd_errors import EtcdError, EtcdGatewayError, EtcdProtocolError
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


class EtcdDatastore(Datastore):
    """List-watches Calico v3 resources stored in etcd.

    ``keepalive_interval``/``request_timeout`` bound how long a dead etcd goes unnoticed;
    ``stall_deadline`` how long a watch stream that stopped delivering goes unnoticed (see
    :mod:`.stall`); ``page_size`` bounds one range reply.  ``rng`` seeds the backoff jitter
    (tests).  :attr:`watches` holds each running watch's progress.
    """

    name = "etcdv3"
    mode = DatastoreMode.ETCD

    def __init__(self, config: EtcdConfig, *, page_size: int = 500,
                 request_timeout: float = 10.0, keepalive_interval: float = 10.0,
                 backoff_initial: float = 0.5, backoff_max: float = 30.0,
                 stall_deadline: float = DEFAULT_DEADLINE,
                 rng: random.Random | None = None) -> None:
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        self.config = config
        self.page_size = page_size
        self.request_timeout = request_timeout
        self.keepalive_interval = keepalive_interval
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.stall_deadline = stall_deadline
        self._watches = WatchBoard(trio.current_time)
        self._rng = rng or random.Random()

    @property
    def watches(self) -> WatchBoard:
        return self._watches

    @classmethod
    def from_config(cls, cfg: Config, **kwargs: Any) -> EtcdDatastore:
        """From the daemon's config (its ``etcd_*`` fields)."""
        return cls(EtcdConfig.from_config(cfg), **kwargs)

    async def probe(self) -> str | None:
        """Ask each endpoint for its status once; None if one answered, else why none did
        (the daemon's start-up check: an etcd unreachable at start is a clean exit)."""
        problems = []
        for endpoint in self.config.endpoints:
            try:
                async with self.client(endpoint) as client:
                    gw.decode_status(await client.call(gw.STATUS_PATH, {}))
                return None
            except EtcdError as exc:
                problems.append(f"{endpoint}: {describe(exc)}")
        return "; ".join(problems)

    def client(self, endpoint: str) -> EtcdClient:
        """A client for ``endpoint`` with this datastore's timeouts (not yet entered)."""
        return EtcdClient(self.config, endpoint, request_timeout=self.request_timeout,
                          stall_deadline=self.stall_deadline)

    async def watch(self, kinds: Sequence[ResourceKind],
                    send: trio.MemorySendChannel[DatastoreEvent], *, name: str = "",
                    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """List then watch ``kinds`` forever (see the module docstring); the watch is
        ``<name>/etcd`` in :attr:`watches`.

        Raises ValueError at once for kinds that etcd mode does not store (see
        :mod:`.etcd_layout`: v3 resources, and IPAM blocks and affinities at v1 paths).
        """
        stream = f"{name}/etcd" if name else "etcd"
        watcher = _Watcher(self, EtcdSyncState(kinds), send, stream)
        task_status.started()
        try:
            await watcher.run()
        finally:
            self.watches.remove(stream, watcher.check)


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

    async def run(self) -> None:
        endpoints = self.ds.config.endpoints
        while True:
            endpoint = endpoints[self._endpoint_index % len(endpoints)]
            try:
                await self._session(endpoint)
                continue  # compaction ended the watch: relist straight away
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

    async def _session(self, endpoint: str) -> None:
        """One connection's worth of work; returns only when a compaction ends the watch."""
        async with self.ds.client(endpoint) as client:
            status = gw.decode_status(await client.call(gw.STATUS_PATH, {}))
            if self.state.needs_relist(status):
                await self._relist(client)
            await self._follow(client)

    async def _relist(self, client: EtcdClient) -> None:
        while True:
            try:
                header = await self._list_all(client)
            except _Compacted:
                continue
            self.state.list_complete(header)
            self.check.progressed(trio.current_time())
            log.info("Listed %d objects of %d kinds from etcd at revision %d",
                     len(self.state), len(self.state.kinds), header.revision)
            return

    async def _list_all(self, client: EtcdClient) -> gw.Header:
        """Range every kind at one revision (the first reply's), sending differences."""
        pinned: gw.Header | None = None
        for kind in self.state.kinds:
            prefix = kind_prefix(kind).encode()
            end = gw.prefix_end(prefix)
            start = prefix
            kvs: list[gw.KeyValue] = []
            while True:
                body = gw.range_request(start, end, revision=pinned.revision if pinned else 0,
                                        limit=self.ds.page_size)
                try:
                    page = gw.decode_range(await client.call(gw.RANGE_PATH, body))
                except EtcdGatewayError as exc:
                    if exc.compacted:
                        log.info("etcd compacted during the list: %s; listing again", exc)
                        raise _Compacted from exc
                    raise
                if pinned is None:
                    pinned = page.header
                kvs.extend(page.kvs)
                if not page.more or not page.kvs:
                    break
                start = gw.next_page_key(page.kvs[-1].key)
            await hand_over(self.send, self.state.listed(kind, kvs, pinned))
        if pinned is None:  # unreachable: watch_span refused an empty kind list
            raise ValueError("no kinds to list")
        return pinned

    async def _follow(self, client: EtcdClient) -> None:
        """Stream the watch, with the keepalive probe and the stall check beside it; returns
        on compaction or a stall (the caller then resumes at once)."""
        failure: list[BaseException] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._keepalive, client, failure, nursery.cancel_scope)
            await nursery.start(self._cross_check, client, failure, nursery.cancel_scope)
            try:
                await self._stream(client)
            except EtcdError as exc:
                failure.append(exc)
            nursery.cancel_scope.cancel()
        if failure:
            if isinstance(failure[0], WatchStalled):
                log.warning("etcd watch %s stalled: nothing delivered for %.1fs while etcd "
                            "has changes after revision %d; resuming the watch on a new "
                            "connection", self.stream, failure[0].silent_for,
                            self.state.revision)
                return
            raise failure[0]

    async def _cross_check(self, client: EtcdClient, failure: list[BaseException],
                           scope: trio.CancelScope, *,
                           task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                           ) -> None:
        task_status.started()
        failure.append(await until_stalled(self.check, partial(self._probe, client),
                                           self.stream))
        scope.cancel()

    async def _probe(self, client: EtcdClient) -> bool | None:
        """Whether etcd holds a change in the watched span after the stream's revision
        (None: it could not tell).  A short watch on a connection of its own, closed after."""
        revision = self.state.revision
        try:
            with trio.move_on_after(self.ds.request_timeout):  # until_stalled bounds it too
                status = gw.decode_status(await client.call(gw.STATUS_PATH, {}))
                if status.revision <= revision:
                    return False  # nothing at all changed in etcd since
                body = gw.watch_request(*self.span, revision + 1, progress_notify=False)
                async with client.watch(body, idle_timeout=self.ds.request_timeout,
                                        close=True) as lines:
                    async for line in lines:
                        msg = gw.decode_watch_message(line)
                        if msg.canceled or msg.events:
                            return bool(msg.events) or None
                        if msg.created:
                            break
                    # etcd replays history to an unsynced watch within ~100 ms.
                    with trio.move_on_after(probe_window(self.ds.stall_deadline)):
                        async for line in lines:
                            msg = gw.decode_watch_message(line)
                            if msg.canceled or msg.events:
                                return bool(msg.events) or None
                    return False
        except EtcdError as exc:
            log.debug("etcd stall probe for %s failed: %s", self.stream, exc)
        return None

    async def _keepalive(self, client: EtcdClient, failure: list[BaseException],
                         scope: trio.CancelScope) -> None:
        while True:
            await trio.sleep(self.ds.keepalive_interval)
            try:
                gw.decode_status(await client.call(gw.STATUS_PATH, {}))
            except EtcdError as exc:
                failure.append(exc)
                scope.cancel()
                return

    async def _stream(self, client: EtcdClient) -> None:
        start_revision = self.state.revision + 1
        body = gw.watch_request(*self.span, start_revision)
        # The stream idles between changes, so no read timeout: the keepalive covers it.
        async with client.watch(body) as lines:
            async for line in lines:
                msg = gw.decode_watch_message(line)
                self.check.progressed(trio.current_time())
                if msg.created:
                    log.debug("etcd watch created from revision %d", start_revision)
                    self.backoff.reset()
                    await self._report(True, client.endpoint)
                if msg.canceled:
                    if msg.compact_revision:
                        self.state.compacted(msg.compact_revision)
                        return
                    raise EtcdGatewayError(f"watch canceled: {msg.cancel_reason or 'no reason'}")
                with delivering(self.check):
                    await hand_over(self.send, self.state.watched(msg))
        raise EtcdProtocolError("etcd ended the watch stream")

