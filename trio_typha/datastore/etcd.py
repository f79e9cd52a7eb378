"""The etcd v3 datastore (``TYPHA_DATASTORETYPE=etcdv3``), over etcd's gRPC-JSON gateway.

For each pipeline, :meth:`EtcdDatastore.watch` runs one loop of *sessions* against one etcd
endpoint at a time:

1. ask ``/v3/maintenance/status`` who and where etcd is (cluster id, current revision);
2. if it must (first start, compaction, a different or rewound etcd), range every kind's
   prefix at one pinned revision, page by page, and send only the differences from what
   was sent before (:class:`~.etcd_state.EtcdSyncState`);
3. watch from the next revision, with a keepalive probe beside the stream so a frozen or
   unreachable etcd is noticed even when nothing changes.

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

import json
import logging
import random
from collections.abc import Sequence
from typing import Any

import httpx
import trio

from ..client.backoff import Backoff
from ..model.kinds import ResourceKind
from . import etcd_gateway as gw
from .base import Connection, DatastoreEvent
from .etcd_config import EtcdConfig, EtcdParams, etcd_config_from_params
from .etcd_layout import kind_prefix, watch_span
from .etcd_state import EtcdSyncState

log = logging.getLogger(__name__)

# Failures that end a session and are retried; anything else is a bug and propagates.
_SESSION_ERRORS = (httpx.HTTPError, gw.EtcdGatewayError, gw.EtcdProtocolError, OSError)


class _Compacted(Exception):
    """The range's pinned revision was compacted while we were paging: list again."""


class EtcdDatastore:
    """List-watches Calico v3 resources stored in etcd.

    ``keepalive_interval``/``request_timeout`` bound how long a dead etcd goes unnoticed;
    ``page_size`` bounds one range reply.  ``rng`` seeds the backoff jitter (tests).
    """

    name = "etcdv3"

    def __init__(self, config: EtcdConfig, *, page_size: int = 500,
                 request_timeout: float = 10.0, keepalive_interval: float = 10.0,
                 backoff_initial: float = 0.5, backoff_max: float = 30.0,
                 rng: random.Random | None = None) -> None:
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        self.config = config
        self.page_size = page_size
        self.request_timeout = request_timeout
        self.keepalive_interval = keepalive_interval
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self._rng = rng or random.Random()

    @classmethod
    def from_config(cls, params: EtcdParams, **kwargs: Any) -> EtcdDatastore:
        """From the daemon's config (its ``etcd_*`` fields); raises EtcdConfigError."""
        return cls(etcd_config_from_params(params), **kwargs)

    async def watch(self, kinds: Sequence[ResourceKind],
                    send: trio.MemorySendChannel[DatastoreEvent], *,
                    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """List then watch ``kinds`` forever (see the module docstring).

        Raises ValueError at once for kinds that etcd mode does not store (see
        :mod:`.etcd_layout`: v3 resources, and IPAM blocks and affinities at v1 paths).
        """
        watcher = _Watcher(self, EtcdSyncState(kinds), send)
        task_status.started()
        await watcher.run()


class _Watcher:
    """One pipeline's session loop against etcd."""

    def __init__(self, ds: EtcdDatastore, state: EtcdSyncState,
                 send: trio.MemorySendChannel[DatastoreEvent]) -> None:
        self.ds = ds
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
            except _SESSION_ERRORS as exc:
                reason = f"etcd {endpoint}: {type(exc).__name__}: {exc}"
                log.warning("etcd watch session failed: %s", reason)
                await self._report(False, reason)
            self._endpoint_index += 1
            await trio.sleep(self.backoff.next_delay())

    async def _report(self, ok: bool, reason: str = "") -> None:
        if self.connected is not ok:
            self.connected = ok
            if ok:
                log.info("Connected to etcd %s", reason)
            await self.send.send(Connection(ok=ok, reason=reason))

    def _client(self, endpoint: str) -> httpx.AsyncClient:
        verify: Any = self.ds.config.ssl_context() if endpoint.startswith("https:") else True
        return httpx.AsyncClient(base_url=endpoint, verify=verify, trust_env=False,
                                 timeout=self.ds.request_timeout)

    async def _session(self, endpoint: str) -> None:
        """One connection's worth of work; returns only when a compaction ends the watch."""
        async with self._client(endpoint) as client:
            status = gw.decode_status(await _post(client, gw.STATUS_PATH, {}))
            if self.state.needs_relist(status):
                await self._relist(client)
            await self._follow(client)

    async def _relist(self, client: httpx.AsyncClient) -> None:
        while True:
            try:
                header = await self._list_all(client)
            except _Compacted:
                continue
            self.state.list_complete(header)
            log.info("Listed %d objects of %d kinds from etcd at revision %d",
                     len(self.state), len(self.state.kinds), header.revision)
            return

    async def _list_all(self, client: httpx.AsyncClient) -> gw.Header:
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
                    page = gw.decode_range(await _post(client, gw.RANGE_PATH, body))
                except gw.EtcdGatewayError as exc:
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
            for ev in self.state.listed(kind, kvs, pinned):
                await self.send.send(ev)
        if pinned is None:  # unreachable: watch_span refused an empty kind list
            raise ValueError("no kinds to list")
        return pinned

    async def _follow(self, client: httpx.AsyncClient) -> None:
        """Stream the watch, with the keepalive probe beside it; returns on compaction."""
        failure: list[BaseException] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._keepalive, client, failure, nursery.cancel_scope)
            try:
                await self._stream(client)
            except _SESSION_ERRORS as exc:
                failure.append(exc)
            nursery.cancel_scope.cancel()
        if failure:
            raise failure[0]

    async def _keepalive(self, client: httpx.AsyncClient, failure: list[BaseException],
                         scope: trio.CancelScope) -> None:
        while True:
            await trio.sleep(self.ds.keepalive_interval)
            try:
                gw.decode_status(await _post(client, gw.STATUS_PATH, {}))
            except _SESSION_ERRORS as exc:
                failure.append(exc)
                scope.cancel()
                return

    async def _stream(self, client: httpx.AsyncClient) -> None:
        start_revision = self.state.revision + 1
        body = gw.watch_request(*self.span, start_revision)
        # The stream idles between changes, so no read timeout: the keepalive covers it.
        timeout = httpx.Timeout(self.ds.request_timeout, read=None)
        async with client.stream("POST", gw.WATCH_PATH, json=body, timeout=timeout) as resp:
            if resp.status_code != 200:
                gw.check_error(gw.parse_json(await resp.aread()))
                resp.raise_for_status()
            async for line in resp.aiter_lines():
                if not line.strip():
                    continue
                msg = gw.decode_watch_message(line)
                if msg.created:
                    log.debug("etcd watch created from revision %d", start_revision)
                    self.backoff.reset()
                    await self._report(True, str(client.base_url))
                if msg.canceled:
                    if msg.compact_revision:
                        self.state.compacted(msg.compact_revision)
                        return
                    raise gw.EtcdGatewayError(f"watch canceled: {msg.cancel_reason or 'no reason'}")
                for ev in self.state.watched(msg):
                    await self.send.send(ev)
        raise gw.EtcdProtocolError("etcd ended the watch stream")


async def _post(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> Any:
    """One unary gateway call; etcd's error replies become :class:`EtcdGatewayError`."""
    resp = await client.post(path, content=json.dumps(body).encode(),
                             headers={"content-type": "application/json"})
    payload = gw.parse_json(resp.content)
    gw.check_error(payload)
    if resp.status_code != 200:
        raise gw.EtcdGatewayError(f"HTTP {resp.status_code} from {path}")
    return payload
