"""A client for one etcd endpoint over etcd's native gRPC API, on the project's HTTP/2
client (:mod:`trio_typha.h2client`): one connection, every call and watch a stream on it.

``async with EtcdClient(config, endpoint) as client`` connects (TCP, or TLS with ALPN h2 and
the configured client certificate) and runs the connection's task until the block ends;
a client shared by many tasks (:class:`~.etcd.EtcdDatastore`'s pipelines) instead has its
:meth:`EtcdClient.run` started once, and connects on the first call and again after the
connection ends (:class:`~trio_typha.h2client.shell.SharedConnection`).
Unary calls (:meth:`EtcdClient.status`, :meth:`~EtcdClient.range`, ...) carry the messages
:mod:`.etcd_rpc` builds and decodes; :meth:`EtcdClient.watch` opens a Watch stream.  With a
``stall_deadline`` the connection sends HTTP/2 PINGs when it has been read-idle and is
declared dead when one goes unanswered, both times derived from the deadline
(:meth:`~trio_typha.h2client.core.Keepalive.for_deadline`), as clientv3's keepalive does.
Every failure leaves as one of :mod:`.etcd_errors`' classes, translated here, once.
"""

from __future__ import annotations

import ssl
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from types import TracebackType
from urllib.parse import urlsplit

import trio

from ..grpcwire.framing import FramingError, MessageDecoder
from ..h2client.shell import (
    H2ClientConnection,
    H2Stream,
    Keepalive,
    SharedConnection,
    connect_tcp,
)
from . import etcd_pb2 as pb
from . import etcd_rpc as rpc
from . import http_edge
from .etcd_config import EtcdConfig
from .etcd_errors import EtcdProtocolError, EtcdTimeout, EtcdTransportError

#: What this client raises for a failed transport (see :mod:`.etcd_errors`).
ERRORS = http_edge.ErrorFamily(transport=EtcdTransportError, timeout=EtcdTimeout,
                               malformed=EtcdProtocolError)


@contextmanager
def translated() -> Iterator[None]:
    """The HTTP/2 client's exceptions (by the edges' one mapping,
    :func:`.http_edge.translated`) and the framing's as :mod:`.etcd_errors`' classes."""
    try:
        with http_edge.translated(ERRORS):
            yield
    except FramingError as exc:
        raise EtcdProtocolError(f"gRPC framing: {exc}") from exc


class EtcdClient:
    """One etcd endpoint (``endpoint``, else the config's first); an async context manager.

    ``request_timeout`` bounds the connect and each unary call; ``stall_deadline`` (when
    given) turns on the PING keepalive that bounds how long a dead connection goes
    unnoticed.
    """

    def __init__(self, config: EtcdConfig, endpoint: str | None = None, *,
                 request_timeout: float = 10.0, stall_deadline: float | None = None) -> None:
        self.config = config
        self.endpoint = endpoint or config.endpoints[0]
        self.request_timeout = request_timeout
        self.keepalive = Keepalive.for_deadline(stall_deadline) if stall_deadline else None
        url = urlsplit(self.endpoint)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"etcd endpoint {self.endpoint!r} is not http(s)://host:port")
        self.scheme = url.scheme
        self.host = url.hostname
        self.port = url.port or 2379
        #: the one connection to the endpoint, shared by every call and watch
        self.link = SharedConnection(self._connect)
        self._stack = AsyncExitStack()

    @property
    def usable(self) -> bool:
        return self.link.usable

    @property
    def conn(self) -> H2ClientConnection | None:
        """The current connection (None before the first call, or once it has ended)."""
        return self.link.conn

    async def __aenter__(self) -> EtcdClient:
        await self._stack.__aenter__()
        try:
            await self._stack.enter_async_context(self._running())
        except BaseException:
            if not await self._stack.__aexit__(*sys.exc_info()):
                raise
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> bool | None:
        return await self._stack.__aexit__(exc_type, exc, tb)

    @asynccontextmanager
    async def _running(self) -> AsyncIterator[None]:
        """Host the connection for the block, connected at its start (so an endpoint that
        cannot be reached fails the ``async with`` itself)."""
        failure: Exception | None = None
        async with trio.open_nursery() as nursery:
            await nursery.start(self.run)
            try:
                await self._connection()
                yield
            except Exception as exc:
                failure = exc  # raised outside the nursery, not in an exception group
            finally:
                await self.aclose()
                nursery.cancel_scope.cancel()
        if failure is not None:
            raise failure

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Host the connection (whoever shares this client: :class:`~.etcd.EtcdDatastore`
        starts it once for all its pipelines) until cancelled; calls connect on demand and
        reconnect once the connection has ended."""
        await self.link.run(task_status=task_status)

    async def _connect(self) -> H2ClientConnection:
        ctx: ssl.SSLContext | None = None
        if self.scheme == "https":
            try:
                ctx = self.config.ssl_context()  # the TLS files are read here
            except (OSError, ssl.SSLError) as exc:
                raise EtcdTransportError(f"TLS files: {exc}") from exc
        stream = await connect_tcp(self.host, self.port, ssl_context=ctx)
        return H2ClientConnection(stream, authority=f"{self.host}:{self.port}",
                                  scheme=self.scheme, keepalive=self.keepalive)

    async def aclose(self) -> None:
        """Close the connection; the next call opens a new one (while :meth:`run` runs)."""
        await self.link.aclose()

    async def _connection(self) -> H2ClientConnection:
        """The shared connection, opened now (bounded by ``request_timeout``) if need be."""
        with trio.move_on_after(self.request_timeout) as scope, translated():
            return await self.link.get()
        assert scope.cancelled_caught
        raise EtcdTimeout(f"connect to {self.host}:{self.port} took over "
                          f"{self.request_timeout:g} s")

    # --- calls --------------------------------------------------------------------------

    async def call(self, path: bytes, request: bytes) -> bytes:
        """One unary call: the reply message's bytes; a non-OK status raises
        :class:`~.etcd_errors.EtcdServerError` with etcd's message."""
        conn = await self._connection()
        with trio.move_on_after(self.request_timeout) as scope, translated():
            stream = await conn.open_stream(b"POST", path, rpc.request_headers())
            try:
                await stream.send(request, end_stream=True)
                reply = await _read_unary(stream, path)
            finally:
                stream.reset()
            return reply
        assert scope.cancelled_caught
        raise EtcdTimeout(f"{path.decode()} took over {self.request_timeout:g} s")

    async def status(self) -> rpc.Status:
        return rpc.decode_status(await self.call(rpc.STATUS_PATH, rpc.status_request()))

    async def range(self, key: bytes, range_end: bytes, *, revision: int = 0,
                    limit: int = 0) -> rpc.RangePage:
        body = rpc.range_request(key, range_end, revision=revision, limit=limit)
        return rpc.decode_range(await self.call(rpc.RANGE_PATH, body))

    async def put(self, key: bytes, value: bytes) -> rpc.Header:
        reply = await self.call(rpc.PUT_PATH, rpc.put_request(key, value))
        return rpc.decode_header(reply, pb.PutResponse)

    async def delete(self, key: bytes, range_end: bytes = b"") -> rpc.Header:
        reply = await self.call(rpc.DELETE_RANGE_PATH, rpc.delete_request(key, range_end))
        return rpc.decode_header(reply, pb.DeleteRangeResponse)

    async def compact(self, revision: int, *, physical: bool = True) -> rpc.Header:
        reply = await self.call(rpc.COMPACT_PATH,
                                rpc.compaction_request(revision, physical=physical))
        return rpc.decode_header(reply, pb.CompactionResponse)

    @asynccontextmanager
    async def watch(self) -> AsyncIterator[WatchStream]:
        """A Watch stream on this connection (cancelled when the block ends)."""
        conn = await self._connection()
        with translated():
            stream = await conn.open_stream(b"POST", rpc.WATCH_PATH, rpc.request_headers())
        try:
            yield WatchStream(stream)
        finally:
            stream.reset()


async def _read_unary(stream: H2Stream, path: bytes) -> bytes:
    """The single reply message of a unary call, after its status said OK."""
    decoder = MessageDecoder(rpc.MAX_MESSAGE)
    messages: list[bytes] = []
    headers = await stream.response()
    while data := await stream.receive():
        messages += decoder.feed(data)
    rpc.check_status(stream.trailers if stream.trailers is not None else headers, path)
    if len(messages) != 1 or not decoder.at_boundary:
        raise EtcdProtocolError(f"{path.decode()}: {len(messages)} reply messages, not 1")
    return messages[0]


class WatchStream:
    """etcd's bidirectional Watch stream: requests up, :class:`~.etcd_rpc.WatchResponse`
    messages down."""

    def __init__(self, stream: H2Stream) -> None:
        self._stream = stream
        self._decoder = MessageDecoder(rpc.MAX_MESSAGE)
        self._pending: list[bytes] = []
        self._headers_seen = False

    async def send(self, request: bytes) -> None:
        """Send one framed WatchRequest (:func:`~.etcd_rpc.watch_create`, ...)."""
        with translated():
            await self._stream.send(request)

    async def receive(self) -> rpc.WatchResponse:
        """The next reply; a stream etcd ends raises its status as an error."""
        with translated():
            if not self._headers_seen:
                await self._stream.response()
                self._headers_seen = True
            while not self._pending:
                data = await self._stream.receive()
                if not data:
                    rpc.check_status(self._stream.trailers or self._stream.headers,
                                     rpc.WATCH_PATH)
                    raise EtcdProtocolError("etcd ended the watch stream")
                self._pending += self._decoder.feed(data)
        return rpc.decode_watch_response(self._pending.pop(0))
