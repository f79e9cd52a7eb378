"""One HTTP/2 connection to the Kubernetes API server, shared by every request and watch.

client-go's transport speaks HTTP/2 to kube-apiserver whenever TLS ALPN agrees to it, so one
connection carries every list and every watch of a process, and it checks that connection's
health with HTTP/2 PINGs (``k8s.io/apimachinery/pkg/util/net/http.go``: a PING after
``ReadIdleTimeout`` (30 s) without a frame read, the connection closed when it stays
unanswered for ``PingTimeout`` (15 s)).  :class:`H2Link` does the same on the project's
h2 client core (:mod:`trio_typha.h2client`), with the two timings derived from the watch
stall deadline (:meth:`~trio_typha.h2client.Keepalive.for_deadline`), so a connection that
goes silent - a proxy that stops forwarding, a path that drops packets - is noticed within
the deadline and every watch on it resumes on a new connection.

Which protocol: over TLS, ALPN offers ``h2`` then ``http/1.1`` and the server's choice
holds (kube-apiserver picks ``h2`` unless started with HTTP/2 disabled).  In plaintext,
where Go's client always speaks HTTP/1.1 (it has no h2c), the link tries h2c with prior
knowledge once: a server that answers the preface with anything but HTTP/2 (Go's plaintext
servers answer HTTP/1.1) makes the link fall back for good.  After a fallback
(:attr:`H2Link.http1`) the caller uses its HTTP/1.1 client instead.

The connection task runs in :meth:`run`'s nursery; requests, from any task, reuse the
connection while it is usable and open a new one when it has ended.  Failures leave as
:mod:`.k8s_errors`' classes (translated once, in :mod:`.http_edge`).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import NoReturn
from urllib.parse import urlsplit

import trio

from ..h2client.shell import (
    H2ClientConnection,
    H2ConnectionError,
    H2Stream,
    Keepalive,
    NotHttp2,
    SharedConnection,
    connect_tcp,
)
from .k8s_errors import K8sTimeout, K8sTransportError

log = logging.getLogger(__name__)

Headers = list[tuple[bytes, bytes]]


class FallBack(Exception):
    """The server does not speak HTTP/2 (ALPN chose otherwise, or plaintext h2c was not
    understood): use HTTP/1.1."""


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    headers: Headers
    body: bytes


class H2Link:
    """The shared HTTP/2 connection to one API server (see the module docstring)."""

    def __init__(self, server: str, *, ssl_context: ssl.SSLContext | None,
                 server_hostname: str | None = None, keepalive: Keepalive | None,
                 connect_timeout: float = 30.0) -> None:
        url = urlsplit(server)
        self.tls = url.scheme == "https"
        self.host = url.hostname or "localhost"
        self.port = url.port or (443 if self.tls else 80)
        self.authority = url.netloc.rpartition("@")[2]
        self.base_path = url.path.rstrip("/")
        self._ssl_context = ssl_context
        self._server_hostname = server_hostname
        self.keepalive = keepalive
        self.connect_timeout = connect_timeout
        #: the server does not speak HTTP/2: the caller uses HTTP/1.1 from now on
        self.http1 = False
        self.shared = SharedConnection(self._connect, on_end=self._report_end)
        self._answered = False  # some response came over HTTP/2 (h2c is understood)

    @property
    def running(self) -> bool:
        return self.shared.running and not self.http1

    @property
    def conn(self) -> H2ClientConnection | None:
        return self.shared.conn

    @property
    def connections_opened(self) -> int:
        return self.shared.connections_opened

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Host the connection task until cancelled (then the connection closes)."""
        await self.shared.run(task_status=task_status)

    async def connection(self) -> H2ClientConnection:
        """The usable connection, opened now if there is none (one opener at a time)."""
        if self.http1:
            raise FallBack
        try:
            with trio.fail_after(self.connect_timeout):
                return await self.shared.get()
        except trio.TooSlowError:
            raise K8sTimeout(f"ConnectTimeout: HTTP/2 connection to {self.authority}") from None

    async def _connect(self) -> H2ClientConnection:
        if self.http1:  # found out by the opener this one waited for
            raise FallBack
        try:
            # Over TLS offer both, as client-go does; the server's choice decides.
            stream = await connect_tcp(self.host, self.port, ssl_context=self._ssl_context,
                                       server_hostname=self._server_hostname,
                                       alpn=("h2", "http/1.1"))
        except NotHttp2 as exc:
            self._fall_back(f"TLS ALPN chose {exc.chosen or 'nothing'}")
        except H2ConnectionError as exc:
            # The kind of failure as httpx names it, the OSError (or TLS error) as cause.
            raise K8sTransportError(f"ConnectError: {exc}") from exc.__cause__
        log.debug("HTTP/2 connection %d to %s", self.connections_opened + 1, self.authority)
        return H2ClientConnection(stream, authority=self.authority,
                                  scheme="https" if self.tls else "http",
                                  keepalive=self.keepalive)

    def _report_end(self, conn: H2ClientConnection) -> None:
        """One line when a connection ends: a WARNING when its PINGs went unanswered (the
        path or the server went silent; every watch on it then resumes on a new one)."""
        if conn.core.pings_sent and "PING" in conn.end_reason:
            log.warning("HTTP/2 connection to %s broke, silent past its PING deadline (%s); "
                        "its watches resume on a new connection", self.authority,
                        conn.end_reason)
        else:
            log.info("HTTP/2 connection to %s ended: %s", self.authority,
                     conn.end_reason or "closed")

    def _fall_back(self, why: str) -> NoReturn:
        log.info("Kubernetes API server %s does not speak HTTP/2 (%s); using HTTP/1.1",
                 self.authority, why)
        self.http1 = True
        raise FallBack

    def _lost_before_answer(self, exc: H2ConnectionError) -> None:
        """A plaintext server that never answered over HTTP/2 does not speak h2c."""
        if not self.tls and not self._answered:
            self._fall_back(f"h2c with prior knowledge was not understood: {exc}")

    # --- requests -----------------------------------------------------------------------

    async def request(self, method: str, target: str, headers: Headers,
                      body: bytes | None = None) -> Answer:
        """One request's whole answer (the caller bounds its time)."""
        async with self.exchange(method, target, headers, body) as (stream, status, head):
            chunks = []
            while chunk := await stream.receive():
                chunks.append(chunk)
        return Answer(status, head, b"".join(chunks))

    @asynccontextmanager
    async def exchange(self, method: str, target: str, headers: Headers,
                       body: bytes | None = None
                       ) -> AsyncIterator[tuple[H2Stream, int, Headers]]:
        """Open a stream for the request, wait for the response headers, and yield the
        stream (to read the body from), the status and the headers; a stream left
        unfinished is reset on exit (a watch the caller stops reading)."""
        conn = await self.connection()
        request_headers = [(b"accept", b"application/json"), *headers]
        try:
            stream = await conn.open_stream(method.encode(),
                                            (self.base_path + target).encode(),
                                            request_headers, end_stream=body is None)
            if body is not None:
                await stream.send(body, end_stream=True)
            head = await stream.response()
        except H2ConnectionError as exc:
            self._lost_before_answer(exc)
            raise
        self._answered = True
        status = next((int(v) for k, v in head if k == b":status"), 0)
        try:
            yield stream, status, head
        finally:
            stream.reset()  # a no-op once the server has ended the stream
