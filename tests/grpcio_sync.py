"""The one grpcio ``typha.v1.Sync`` client, for the tests and the benchmarks.

What every grpcio stream does is here once: the channel (plain or mutual TLS,
:func:`open_channel`), the method with the checked-in ``typha_pb2`` serializers
(:func:`sync_method`), the start request and the ack answering each ping
(:func:`ack_for`).  Two drivers run it:

* :class:`GrpcioSync` (:func:`grpcio_sync`), the tests': grpcio's blocking API runs the call
  in a worker thread, which iterates the response stream, answers every ping unless told
  not to, and hands each response to the trio thread.  There it is folded into
  :attr:`GrpcioSync.kvs` (and the stream's header, in-sync marker and status) and queued for
  :meth:`GrpcioSync.recv`, so a test can follow either the state
  (:meth:`~GrpcioSync.wait_until`) or the messages one by one.  All client state is touched
  only in the trio thread: tests read it without locks.  A test of the generated stubs
  passes ``stub=lambda channel: stubs.SyncStub(channel).Sync``.
* :class:`AioSync`, the benchmarks' (``bench/grpc_clients.py``): many streams on one asyncio
  loop, each on its own TCP connection as each calico-node has its own, counting what
  arrives instead of keeping it.
"""

from __future__ import annotations

import asyncio
import queue
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import grpc
import trio

from testbed.fleet import ClientTLS
from trio_typha.protocols.grpc import typha_pb2 as pb

SYNC_METHOD = "/typha.v1.Sync/Sync"
MAX_RECEIVE = 64 << 20  # a large cluster's snapshot messages


def open_channel(target: str, *, tls: ClientTLS | None = None, own_connection: bool = False,
                 aio: bool = False) -> Any:
    """A grpcio channel to ``target`` (``grpc.Channel``, or ``grpc.aio.Channel`` with
    ``aio``), mutual TLS with ``tls``; ``own_connection``: not shared with other channels
    of the process (a local subchannel pool)."""
    options: list[tuple[str, Any]] = [("grpc.max_receive_message_length", MAX_RECEIVE)]
    if own_connection:
        options.append(("grpc.use_local_subchannel_pool", 1))
    module = grpc.aio if aio else grpc
    if tls is None:
        return module.insecure_channel(target, options=options)
    if tls.server_name:
        options.append(("grpc.ssl_target_name_override", tls.server_name))
    return module.secure_channel(target, credentials(tls), options=options)


def credentials(tls: ClientTLS) -> grpc.ChannelCredentials:
    def read(path: str) -> bytes | None:
        if not path:
            return None
        with open(path, "rb") as fh:
            return fh.read()
    return grpc.ssl_channel_credentials(read(tls.ca_file), read(tls.key_file),
                                        read(tls.cert_file))


def sync_method(channel: Any) -> Any:
    """The Sync call on ``channel`` (blocking or asyncio: both build it alike)."""
    return channel.stream_stream(SYNC_METHOD, request_serializer=pb.SyncRequest.SerializeToString,
                                 response_deserializer=pb.SyncResponse.FromString)


def start_request(syncer_type: str, hostname: str, **fields: Any) -> pb.SyncRequest:
    return pb.SyncRequest(start=pb.SyncRequestStart(syncer_type=syncer_type, hostname=hostname,
                                                    **fields))


def ack_for(resp: pb.SyncResponse) -> pb.SyncRequest | None:
    """The ack a ping asks for (None for any other response)."""
    if resp.WhichOneof("msg") != "ping":
        return None
    return pb.SyncRequest(ack=pb.Ack(ping_id=resp.ping.id,
                                     ping_timestamp_unix_nanos=resp.ping.timestamp_unix_nanos))


@dataclass(frozen=True, slots=True)
class Received:
    """What the client holds for one key: value, revision, and when it arrived."""

    value: bytes
    revision: str
    at: float  # time.monotonic() in the receiving thread


class ClientEnded(Exception):
    """How the call ended (raised by :meth:`GrpcioSync.recv` once it has)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(code, details)
        self.code = code
        self.details = details


class GrpcioSync:
    """One grpcio Sync stream; see the module docstring.

    ``kvs`` is the key/value set the client has built (deletions applied), ``header`` and
    ``finished`` the stream's first messages, ``status`` the latest sync status, ``pings``
    how many pings arrived, ``acks_sent`` how many were answered, and ``end`` how the call
    ended (None while it runs).
    """

    def __init__(self, port: int, syncer_type: str = "felix", *, hostname: str = "test-host",
                 auto_ack: bool = True, stub: Callable[[grpc.Channel], Any] | None = None,
                 recv_timeout: float = 20.0, tls: ClientTLS | None = None) -> None:
        self.syncer_type = syncer_type
        self.auto_ack = auto_ack
        self.recv_timeout = recv_timeout
        self.channel = open_channel(f"127.0.0.1:{port}", tls=tls)
        self._method = stub(self.channel) if stub is not None else sync_method(self.channel)
        self._start = start_request(syncer_type, hostname, info="trio-typha tests",
                                    version="test", client_conn_id=7)
        self._requests: queue.SimpleQueue[pb.SyncRequest | None] = queue.SimpleQueue()
        self._send, self._recv = trio.open_memory_channel[pb.SyncResponse | ClientEnded](
            float("inf"))
        self.call: Any = None  # grpcio's response iterator (also a grpc.Call)
        self.kvs: dict[str, Received] = {}
        self.header: pb.Header | None = None
        self.finished: pb.Finished | None = None
        self.status: int | None = None
        self.updates_received = 0
        self.pings = 0
        self.acks_sent = 0
        self.end: ClientEnded | None = None
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
                if self.auto_ack and (ack := ack_for(resp)) is not None:
                    self._requests.put(ack)
                    self.acks_sent += 1
                deliver(resp, time.monotonic())
            deliver(ClientEnded(grpc.StatusCode.OK, ""), 0.0)
        except grpc.RpcError as exc:
            deliver(ClientEnded(exc.code(), exc.details() or ""), 0.0)

    # -- trio thread ------------------------------------------------------------------------

    def _deliver(self, resp: pb.SyncResponse | ClientEnded, at: float) -> None:
        self._send.send_nowait(resp)
        if isinstance(resp, ClientEnded):
            self.end = resp
        else:
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
                        self.kvs[kv.key] = Received(kv.value, kv.revision, at)
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
            if self.end is not None:
                raise AssertionError(f"{self.syncer_type} client's call ended: "
                                     f"{self.end.code} {self.end.details}")
            await self._changed.wait()

    async def recv(self) -> pb.SyncResponse:
        """The next response not yet taken; raises :class:`ClientEnded` once the call is
        over (bounded by ``recv_timeout``)."""
        with trio.fail_after(self.recv_timeout):
            item = await self._recv.receive()
        if isinstance(item, ClientEnded):
            raise item
        return item

    async def recv_kind(self, kind: str, *, skip: Iterable[str] = ("ping",)) -> pb.SyncResponse:
        """The next response of ``kind``, skipping only kinds listed in ``skip``."""
        while True:
            resp = await self.recv()
            got = resp.WhichOneof("msg")
            if got == kind:
                return resp
            assert got in skip, f"expected {kind}, got {got}"

    async def ended(self) -> ClientEnded:
        """Skip responses until the call ends; how it ended."""
        while True:
            try:
                await self.recv()
            except ClientEnded as end:
                return end

    def cancel(self) -> None:
        self.call.cancel()


@asynccontextmanager
async def grpcio_sync(port: int, syncer_type: str = "felix", **kwargs: Any
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


class AioSync:
    """One grpcio asyncio Sync stream of a benchmark fleet (see the module docstring).

    It counts the keys of the snapshot (``keys``) and every update (``updates``), shows
    each batch received once in sync to ``on_update``, notes the kind of the last response
    (where a stuck client stopped) and how the call failed (``error``); ``in_sync`` is set
    at the in-sync marker, or when the call fails first.
    """

    def __init__(self, target: str, syncer_type: str, *, hostname: str = "bench",
                 tls: ClientTLS | None = None,
                 on_update: Callable[[Sequence[pb.KV]], None] | None = None) -> None:
        self.target = target
        self.syncer_type = syncer_type
        self.hostname = hostname
        self.tls = tls
        self.on_update = on_update
        self.in_sync = asyncio.Event()
        self.keys = 0
        self.updates = 0
        self.error: str | None = None
        self.last = ""

    async def run(self, stop: asyncio.Event) -> None:
        """Until the call ends, fails, or ``stop`` is set (seen at the next response)."""
        async with open_channel(self.target, tls=self.tls, own_connection=True,
                                aio=True) as channel:
            call = sync_method(channel)()
            finished = False
            try:
                # Inside the try: a call that fails before its first message (no
                # connection) fails here, and must count as an error, not as stuck.
                await call.write(start_request(self.syncer_type, self.hostname))
                async for msg in call:
                    which = msg.WhichOneof("msg")
                    self.last = which
                    if which == "update":
                        self.updates += len(msg.update.kvs)
                        if not finished:
                            self.keys += len(msg.update.kvs)
                        elif self.on_update is not None:
                            self.on_update(msg.update.kvs)
                    elif which == "finished":
                        finished = True
                        self.in_sync.set()
                    elif (ack := ack_for(msg)) is not None:
                        await call.write(ack)
                    if stop.is_set():
                        break
            except grpc.aio.AioRpcError as exc:
                self.error = f"{exc.code().name}: {exc.details()}"
                self.in_sync.set()
            finally:
                call.cancel()
