"""A real grpcio ``typha.v1.Sync`` client for the end-to-end tests, driven from trio.

grpcio's blocking API runs the call in a worker thread: the thread iterates the response
stream, answers every ping with an ack (through the request iterator) and hands each response
to the trio thread, which folds it into :attr:`GrpcioSync.kvs`.  All client state is only
touched in the trio thread, so tests read it without locks and wait on it with
:meth:`GrpcioSync.wait_until`.

The stub is built by hand with ``channel.stream_stream`` and the checked-in ``typha_pb2``
serializers: no generated ``_pb2_grpc`` module is needed.
"""

from __future__ import annotations

import queue
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import grpc
import trio

from trio_typha.protocols.grpc import typha_pb2 as pb

SYNC_METHOD = "/typha.v1.Sync/Sync"


@dataclass(frozen=True, slots=True)
class Received:
    """What the client holds for one key: value, revision, and when it arrived."""

    value: bytes
    revision: str
    at: float  # time.monotonic() in the receiving thread


class GrpcioSync:
    """One grpcio Sync stream; see the module docstring.

    ``kvs`` is the key/value set the client has built (deletions applied), ``header`` and
    ``finished`` the stream's first messages, ``status`` the latest sync status, ``pings``
    how many pings were answered and ``ended`` how the call ended (None while it runs).
    """

    def __init__(self, port: int, syncer_type: str, *, hostname: str = "e2e-host") -> None:
        self.syncer_type = syncer_type
        self.channel = grpc.insecure_channel(
            f"127.0.0.1:{port}", options=[("grpc.max_receive_message_length", 64 << 20)])
        self._method = self.channel.stream_stream(
            SYNC_METHOD, request_serializer=pb.SyncRequest.SerializeToString,
            response_deserializer=pb.SyncResponse.FromString)
        self._start = pb.SyncRequest(start=pb.SyncRequestStart(
            syncer_type=syncer_type, hostname=hostname, info="trio-typha e2e", version="e2e"))
        self._requests: queue.SimpleQueue[pb.SyncRequest | None] = queue.SimpleQueue()
        self.call: Any = None  # grpcio's response iterator (also a grpc.Call)
        self.kvs: dict[str, Received] = {}
        self.header: pb.Header | None = None
        self.finished: pb.Finished | None = None
        self.status: int | None = None
        self.updates_received = 0
        self.pings = 0
        self.ended: tuple[grpc.StatusCode, str] | None = None
        self._changed = trio.Event()

    # -- worker thread ----------------------------------------------------------------------

    def _request_iter(self) -> Iterator[pb.SyncRequest]:
        yield self._start
        while (req := self._requests.get()) is not None:
            yield req

    def _consume(self) -> None:
        deliver = partial(trio.from_thread.run_sync, self._deliver)
        assert self.call is not None
        try:
            for resp in self.call:
                if resp.WhichOneof("msg") == "ping":
                    self._requests.put(pb.SyncRequest(ack=pb.Ack(
                        ping_id=resp.ping.id,
                        ping_timestamp_unix_nanos=resp.ping.timestamp_unix_nanos)))
                deliver(resp, time.monotonic())
            deliver(None, (grpc.StatusCode.OK, ""))
        except grpc.RpcError as exc:
            deliver(None, (exc.code(), exc.details() or ""))

    # -- trio thread ------------------------------------------------------------------------

    def _deliver(self, resp: pb.SyncResponse | None, info: object) -> None:
        if resp is None:
            assert isinstance(info, tuple)
            self.ended = info
        else:
            assert isinstance(info, float)
            which = resp.WhichOneof("msg")
            if which == "header":
                self.header = resp.header
                self.status = resp.header.sync_status
            elif which == "update":
                for kv in resp.update.kvs:
                    self.updates_received += 1
                    if kv.deleted:
                        self.kvs.pop(kv.key, None)
                    else:
                        self.kvs[kv.key] = Received(kv.value, kv.revision, info)
            elif which == "finished":
                self.finished = resp.finished
                self.status = resp.finished.sync_status
            elif which == "status":
                self.status = resp.status.sync_status
            elif which == "ping":
                self.pings += 1
        self._changed.set()
        self._changed = trio.Event()

    def values(self) -> dict[str, bytes]:
        return {k: r.value for k, r in self.kvs.items()}

    @property
    def in_sync(self) -> bool:
        return self.finished is not None and self.status == pb.SYNC_STATUS_IN_SYNC

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        """Sleep until ``condition()`` holds, re-checking after every received message.

        Fails if the call ends first.  No deadline here: callers bound their waits with
        ``trio.fail_after`` as hang protection.
        """
        while not condition():
            if self.ended is not None:
                raise AssertionError(f"{self.syncer_type} client's call ended: {self.ended}")
            await self._changed.wait()


@asynccontextmanager
async def grpcio_sync(port: int, syncer_type: str, **kwargs: str
                      ) -> AsyncIterator[GrpcioSync]:
    """Run a :class:`GrpcioSync` for the block; cancels the call and joins its thread after."""
    client = GrpcioSync(port, syncer_type, **kwargs)
    client.call = client._method(client._request_iter())
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(trio.to_thread.run_sync, client._consume,
                                       abandon_on_cancel=False))
            try:
                yield client
            finally:
                client.call.cancel()
                client._requests.put(None)
    finally:
        client.channel.close()
