"""A Typha client in Python, on Trio: Typha's own gob protocol, as Felix speaks it.

:class:`TyphaClient` connects (optionally over TLS), says hello with snappy support (or as
a legacy client), follows both decoder restarts, answers pings and keeps the syncer's
key/value map and sync status.  Iterate over it to get what happens as events::

    async with TyphaClient("127.0.0.1:5473", syncer_type="felix") as client:
        async for event in client:
            if isinstance(event, SyncStatusReceived) and event.status is SyncStatus.IN_SYNC:
                print(len(client.kvs), "keys")

With ``reconnect=True`` a lost connection yields :class:`Disconnected` and the client dials
again after a backoff (the new connection's snapshot replaces the map); otherwise
:class:`Disconnected` is the last event.  Deadlines follow Felix: 10 s to dial, 30 s per
read, 10 s per write.
"""

from __future__ import annotations

import collections
import itertools
import random
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import trio

from .. import BUILD_VERSION
from ..backoff import Backoff
from ..model.kv import SerializedUpdate, SyncStatus
from ..protocols.gob.client_session import (
    ClientSession,
    DecoderRestarted,
    KVsReceived,
    PingAnswered,
    ServerHelloReceived,
    SyncStatusReceived,
    TyphaProtocolError,
)
from ..protocols.gob.messages import MsgServerHello
from ..tls.client import tls_handshake
from ..tls.diagnosis import TLSFailure, answered_in_tls

__all__ = [
    "Batch", "Connected", "DecoderRestarted", "Disconnected", "KVsReceived", "PingAnswered",
    "SyncStatusReceived", "TyphaClient", "TyphaDisconnected", "TyphaEvent",
    "TyphaProtocolError",
]

DEFAULT_PORT = 5473
_RECEIVE_SIZE = 65536


@dataclass(frozen=True, slots=True)
class Connected:
    """The server accepted the hello."""

    address: str
    server_hello: MsgServerHello


@dataclass(frozen=True, slots=True)
class Disconnected:
    """The connection ended (or could not be made); ``error`` is the TLS failure that
    ended it, if one did."""

    reason: str
    error: TLSFailure | None = None


@dataclass(frozen=True, slots=True)
class Batch:
    """What :meth:`TyphaClient.batches` yields: updates in order, or a status change."""

    updates: list[SerializedUpdate]
    status: SyncStatus | None = None
    #: False while the initial snapshot of this connection is still arriving.
    after_snapshot: bool = False


class TyphaDisconnected(ConnectionError):
    """The connection ended (raised by :meth:`TyphaClient.batches` without reconnect);
    ``tls_failure`` says why when TLS did (the server refused our certificate, ...)."""

    def __init__(self, reason: str, tls_failure: TLSFailure | None = None) -> None:
        super().__init__(reason)
        self.tls_failure = tls_failure


TyphaEvent = (Connected | DecoderRestarted | KVsReceived | SyncStatusReceived | PingAnswered
              | Disconnected)


def _conn_ids() -> itertools.count[int]:
    # Like Typha's Go client: random upper 32 bits, low bits count up from 1.
    return itertools.count(random.getrandbits(32) << 32 | 1)


def parse_address(address: str | tuple[str, int]) -> tuple[str, int]:
    """``host:port``, ``[v6]:port`` or a bare host (port 5473)."""
    if isinstance(address, tuple):
        return address
    if address.startswith("["):
        host, _, rest = address[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else DEFAULT_PORT
    host, sep, port = address.rpartition(":")
    if not sep or ":" in host:
        return address, DEFAULT_PORT
    return host, int(port)


class TyphaClient:
    """A Typha client: an async iterator of :data:`TyphaEvent` plus the state they built."""

    def __init__(self, address: str | tuple[str, int], port: int | None = None, *,
                 syncer_type: str = "felix",
                 hostname: str | None = None, info: str = "trio-typha client",
                 version: str = BUILD_VERSION, compression: bool = True,
                 ssl_context: ssl.SSLContext | None = None, server_hostname: str | None = None,
                 server_cn: str = "", server_uri_san: str = "",
                 dial_timeout: float = 10.0, read_timeout: float = 30.0,
                 write_timeout: float = 10.0, reconnect: bool = False,
                 backoff: Backoff | None = None,
                 open_stream: Callable[[], Awaitable[trio.abc.Stream]] | None = None) -> None:
        self.host, self.port = (address, port) if port is not None and isinstance(
            address, str) else parse_address(address)
        self.address = f"{self.host}:{self.port}"
        self.syncer_type = syncer_type
        self.hostname = hostname if hostname is not None else socket.gethostname()
        self.info = info
        self.version = version
        self.compression = compression
        self.ssl_context = ssl_context
        self.server_hostname = server_hostname
        self.server_cn = server_cn
        self.server_uri_san = server_uri_san
        self.dial_timeout = dial_timeout
        self.read_timeout = read_timeout
        self.write_timeout = write_timeout
        self.reconnect = reconnect
        self.backoff = backoff or Backoff(initial=0.5, maximum=30.0,
                                          random=random.Random().random)
        # Dials the server; TCP to ``address`` unless given (tests pass in-memory streams).
        self._open_stream = open_stream or self._open_tcp
        #: The syncer's key/value map as of the last event.
        self.kvs: dict[str, SerializedUpdate] = {}
        self.status = SyncStatus.WAIT_FOR_DATASTORE
        self.server_hello: MsgServerHello | None = None
        self.connections = 0
        self.pings = 0
        self._conn_ids = _conn_ids()
        self._stream: trio.abc.Stream | None = None
        self._core: ClientSession | None = None
        self._pending: collections.deque[TyphaEvent] = collections.deque()
        self._finished = False
        self._failed = False
        self._heard = False

    async def __aenter__(self) -> TyphaClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection; iteration ends."""
        self._finished = True
        await self._drop_stream()

    def __aiter__(self) -> TyphaClient:
        return self

    async def __anext__(self) -> TyphaEvent:
        while not self._pending:
            if self._finished:
                raise StopAsyncIteration
            await self._step()
        event = self._pending.popleft()
        self._apply(event)  # state changes as events are consumed, never ahead of them
        return event

    async def batches(self) -> AsyncIterator[Batch]:
        """Just the data: a :class:`Batch` per MsgKVs or status change.

        Raises :class:`TyphaDisconnected` when the connection ends and ``reconnect`` is off.
        """
        after_snapshot = False
        restarts = 0
        async for event in self:
            if isinstance(event, KVsReceived):
                yield Batch(list(event.updates), after_snapshot=after_snapshot)
            elif isinstance(event, SyncStatusReceived):
                after_snapshot = True
                yield Batch([], event.status, after_snapshot=True)
            elif isinstance(event, DecoderRestarted):
                restarts += 1
                after_snapshot = restarts >= 2  # the compressed snapshot ends at restart #2
            elif isinstance(event, Connected):
                after_snapshot, restarts = False, 0
            elif isinstance(event, Disconnected) and not self.reconnect:
                raise TyphaDisconnected(event.reason, event.error)

    async def wait_for_status(self, status: SyncStatus = SyncStatus.IN_SYNC) -> None:
        """Consume events until the server reports ``status``.

        Raises :class:`TyphaProtocolError` if the connection ends first (without reconnect).
        """
        async for event in self:
            if isinstance(event, SyncStatusReceived) and event.status == status:
                return
        raise TyphaProtocolError(f"connection ended before status {status.name}")

    # ---- one step: connect, or read once and react

    async def _step(self) -> None:
        if self._stream is None:
            if self._failed:
                await trio.sleep(self.backoff.next_delay())
            try:
                await self._connect()
            except TLSFailure as exc:
                await self._disconnected(f"connecting to {self.address} failed: {exc}", exc)
            except (OSError, trio.TooSlowError, trio.BrokenResourceError) as exc:
                await self._disconnected(f"connecting to {self.address} failed: "
                                         f"{exc or type(exc).__name__}")
            return
        assert self._core is not None
        try:
            with trio.fail_after(self.read_timeout):
                data = await self._stream.receive_some(_RECEIVE_SIZE)
            if not data:
                raise TyphaProtocolError("server closed the connection")
            if not self._heard:
                self._heard = True
                if self.ssl_context is None and (failure := answered_in_tls(data)):
                    raise failure
            events = self._core.receive_data(data)
            reply = self._core.data_to_send()
            if reply:
                with trio.fail_after(self.write_timeout):
                    await self._stream.send_all(reply)
        except trio.TooSlowError:
            await self._disconnected("read or write timed out")
            return
        except TLSFailure as exc:
            await self._disconnected(str(exc), exc)
            return
        except (TyphaProtocolError, trio.BrokenResourceError, trio.ClosedResourceError,
                OSError) as exc:
            await self._disconnected(str(exc) or type(exc).__name__)
            return
        for event in events:
            self._pending.append(Connected(self.address, event.hello)
                                 if isinstance(event, ServerHelloReceived) else event)

    async def _connect(self) -> None:
        with trio.fail_after(self.dial_timeout):
            stream = await self._open_stream()
            try:
                if self.ssl_context is not None:
                    stream = await tls_handshake(
                        stream, self.ssl_context, server_hostname=self.server_hostname,
                        server_cn=self.server_cn, server_uri_san=self.server_uri_san)
                core = ClientSession(
                    syncer_type=self.syncer_type, hostname=self.hostname, info=self.info,
                    version=self.version, compression=self.compression,
                    conn_id=next(self._conn_ids))
                await stream.send_all(core.data_to_send())
            except BaseException:
                await trio.aclose_forcefully(stream)
                raise
        self._stream, self._core = stream, core
        self._heard = False  # no byte from the server yet on this connection

    async def _open_tcp(self) -> trio.abc.Stream:
        return await trio.open_tcp_stream(self.host, self.port)

    def _apply(self, event: TyphaEvent) -> None:
        if isinstance(event, Connected):
            # A new connection's snapshot is complete in itself; until its status arrives we
            # are resyncing, as Felix's client reports.
            self.kvs.clear()
            self.status = SyncStatus.RESYNC_IN_PROGRESS
            self.server_hello = event.server_hello
            self.connections += 1
            self._failed = False
            self.backoff.reset()
        elif isinstance(event, KVsReceived):
            kvs = self.kvs
            for update in event.updates:
                if update.deleted:
                    kvs.pop(update.key, None)
                else:
                    kvs[update.key] = update
        elif isinstance(event, SyncStatusReceived):
            self.status = event.status
        elif isinstance(event, PingAnswered):
            self.pings += 1
        elif isinstance(event, Disconnected):
            self.status = SyncStatus.WAIT_FOR_DATASTORE

    async def _disconnected(self, reason: str, error: TLSFailure | None = None) -> None:
        await self._drop_stream(graceful=False)
        self._failed = True
        if not self.reconnect:
            self._finished = True
        self._pending.append(Disconnected(reason, error))

    async def _drop_stream(self, *, graceful: bool = True) -> None:
        """Close the connection; gracefully, TLS says close_notify first, so the server
        sees the end of a finished conversation rather than a truncated one."""
        stream, self._stream, self._core = self._stream, None, None
        if stream is None:
            return
        if graceful:
            with trio.move_on_after(self.write_timeout):
                await stream.aclose()
        await trio.aclose_forcefully(stream)
