"""The sibling's side of a warm start: a session on the sync port (records: :mod:`.wire`).

The listener hands over a connection that began with :data:`~.wire.MAGIC` once its
certificate passed the peers' identity rule (:class:`~trio_typha.server.listener.
ConnectionHandler`).  The request names the syncer types wanted and the starting replica's
fingerprint; a mismatch, a syncer type not served here or not in sync is refused with the
reason.  Each syncer type's state is captured at one instant at which its pipeline holds no
event not yet applied (:meth:`~trio_typha.syncer.pipeline.SyncerPipeline.export`), then
encoded (off the event loop when large) and written under ServerWriteTimeoutSecs.

With ServerWorkers the connection may land on a worker, which holds caches but no tracker
or watch state: it checks the certificate as the primary would, then splices the
connection to the primary's warm-start socket (:data:`WORKER_SOCKET`, beside the workers'
feed socket), where the primary serves it as its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import trio

from ..cache.build import THREAD_BUILD_SIZE
from ..datastore.known import StateError
from ..model.kv import SyncStatus
from ..records import RecordReader
from ..syncer.handover import SyncerState
from ..syncer.pipeline import SyncerPipeline
from . import wire

log = logging.getLogger(__name__)

#: The primary's Unix socket for warm starts its workers forward, in the feed socket's directory.
WORKER_SOCKET = "warm.sock"
#: How long the request may take to arrive, and a pipeline to drain before it is captured.
REQUEST_TIMEOUT = 10.0
DRAIN_TIMEOUT = 10.0
MAX_REQUEST = 64 * 1024


class WarmServer:
    """Serves warm starts from ``pipelines()`` (the primary's, once they run)."""

    def __init__(self, pipelines: Callable[[], Mapping[str, SyncerPipeline]],
                 fingerprint: Mapping[str, str], *, write_timeout: float) -> None:
        self.pipelines = pipelines
        self.fingerprint = dict(fingerprint)
        self.write_timeout = write_timeout
        self.served = 0  # transfers completed (tests, metrics)

    async def __call__(self, stream: trio.abc.Stream, ctx: Any, *, prefix: bytes = b"",
                       conn: Any = None) -> None:
        # No connection: one a ServerWorkers worker forwarded (it logged the peer).
        peer = getattr(conn, "peer", "a connection forwarded by a worker")
        try:
            request = await self._request(stream, prefix)
        except wire.WarmError as exc:
            log.warning("Warm-start request from %s refused: %s", peer, exc)
            await self._refuse(stream, str(exc))
            return
        reason = self._refusal(request)
        if reason:
            log.warning("Warm-start request from %s refused: %s", peer, reason)
            await self._refuse(stream, reason)
            return
        started = trio.current_time()
        sent = kvs = 0
        try:
            for syncer_type in request.syncer_types:
                state = await self._capture(syncer_type)
                kvs += len(state.updates)
                data = (await trio.to_thread.run_sync(_encode, state)
                        if len(state.updates) >= THREAD_BUILD_SIZE else _encode(state))
                with trio.fail_after(self.write_timeout):
                    await stream.send_all(data)
                sent += len(data)
            with trio.fail_after(self.write_timeout):
                await stream.send_all(wire.encode_done())
        except (trio.TooSlowError, StateError) as exc:
            log.warning("Warm start of %s cut off: %s", peer,
                        exc or "it took nothing within ServerWriteTimeoutSecs")
            return
        self.served += 1
        log.info("Warm start: sent the state of %s (%d KVs, %d bytes) to %s in %.2fs",
                 ", ".join(request.syncer_types), kvs, sent, peer,
                 trio.current_time() - started)

    async def _request(self, stream: trio.abc.Stream, prefix: bytes) -> wire.Request:
        """The request after the magic (which ``prefix``, the bytes sniffed, may hold)."""
        reader = RecordReader(MAX_REQUEST, wire.WarmError)
        head = prefix
        with trio.move_on_after(REQUEST_TIMEOUT):
            while len(head) < len(wire.MAGIC):
                head += await self._more(stream)
            if not head.startswith(wire.MAGIC):
                raise wire.WarmError("not a warm-start request")
            reader.feed(head[len(wire.MAGIC):])
            while True:
                for kind, payload in reader:
                    if kind != wire.REQUEST:
                        raise wire.WarmError(f"record {kind} where the request belongs")
                    return wire.decode_request(payload)
                reader.feed(await self._more(stream))
        raise wire.WarmError(f"no request within {REQUEST_TIMEOUT:g}s")

    @staticmethod
    async def _more(stream: trio.abc.Stream) -> bytes:
        data = await stream.receive_some(MAX_REQUEST)
        if not data:
            raise wire.WarmError("closed before its request")
        return bytes(data)

    def _refusal(self, request: wire.Request) -> str:
        why = wire.mismatch(self.fingerprint, request.fingerprint)
        if why:
            return f"its state would differ from ours: {why}"
        pipelines = self.pipelines()
        for syncer_type in request.syncer_types:
            pipeline = pipelines.get(syncer_type)
            if pipeline is None:
                return f"syncer type {syncer_type!r} is not served here"
            if pipeline.feed.status is not SyncStatus.IN_SYNC:
                return f"syncer {syncer_type} is not in sync here yet"
        return ""

    async def _capture(self, syncer_type: str) -> SyncerState:
        pipeline = self.pipelines()[syncer_type]
        with trio.move_on_after(DRAIN_TIMEOUT):
            # No checkpoint between the wait's return and the capture: exact at one instant.
            await pipeline.wait_drained()
            return pipeline.export()
        raise StateError(f"syncer {syncer_type} never caught up with its datastore events "
                         f"within {DRAIN_TIMEOUT:g}s")

    async def _refuse(self, stream: trio.abc.Stream, reason: str) -> None:
        with trio.move_on_after(self.write_timeout):
            await stream.send_all(wire.encode_refused(reason))


def _encode(state: SyncerState) -> bytes:
    return b"".join(wire.encode_state(state))



async def _pump(source: trio.abc.Stream, sink: trio.abc.Stream, done: trio.CancelScope) -> None:
    try:
        while data := await source.receive_some(1 << 20):
            await sink.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
        log.info("Warm start through a worker: %s", exc)
    done.cancel()  # either side gone: the transfer is over


def forwarder(path: str) -> Callable[..., Any]:
    """A worker's session for a warm start: the connection spliced to the primary's
    warm-start socket at ``path`` (the primary's own session answers it)."""
    async def forward(stream: trio.abc.Stream, ctx: Any, *, prefix: bytes = b"",
                      conn: Any = None) -> None:
        try:
            primary = await trio.open_unix_socket(path)
        except OSError as exc:
            log.warning("Warm-start request from %s: cannot reach the primary (%s)",
                        getattr(conn, "peer", "?"), exc)
            return
        async with primary:
            await primary.send_all(prefix)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_pump, stream, primary, nursery.cancel_scope)
                nursery.start_soon(_pump, primary, stream, nursery.cancel_scope)
    return forward
