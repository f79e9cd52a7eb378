"""The Kubernetes and etcd clients on real loopback sockets raise only their own errors.

A peer that refuses, hangs, cuts a stream, garbles a body or answers with an error status:
each failure leaves the client as one class of its hierarchy, with a message an operator can
act on and the transport's exception kept as the cause.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial

import httpx
import pytest
import trio

from trio_typha.datastore.etcd_client import EtcdClient
from trio_typha.datastore.etcd_config import EtcdConfig
from trio_typha.datastore.etcd_errors import EtcdTransportError
from trio_typha.datastore.k8s_api import KubeApi
from trio_typha.datastore.k8s_config import KubeClientConfig
from trio_typha.datastore.k8s_errors import (
    ApiError,
    K8sTimeout,
    K8sTransportError,
    MalformedResponse,
)
from trio_typha.h2client.shell import H2ConnectionError
from trio_typha.model import kinds as K

Reply = Callable[[trio.SocketStream], Awaitable[None]]


def dead_port() -> int:
    with socket.socket() as s:  # bound, never listening: connections are refused
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def peer(reply: Reply) -> AsyncIterator[str]:
    """An HTTP peer on loopback that reads one request head and then runs ``reply``."""
    async def handle(stream: trio.SocketStream) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = await stream.receive_some()
            if not chunk:
                return
            head += chunk
        await reply(stream)
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, handle, 0, host="127.0.0.1"))
        yield f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        nursery.cancel_scope.cancel()


def canned(status: str, body: bytes, content_type: str = "application/json") -> Reply:
    async def reply(stream: trio.SocketStream) -> None:
        await stream.send_all(f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\n"
                              f"content-length: {len(body)}\r\n\r\n".encode() + body)
    return reply


def kube(url: str, *, http2: bool = True, **kwargs: float) -> KubeApi:
    """A client of the HTTP/1.1 peers here: with ``http2`` it tries h2c first, and the
    peer's HTTP/1.1 answer to the preface makes it fall back (as to Go's plaintext
    servers)."""
    return KubeApi(KubeClientConfig(server=url, source="test"), http2=http2, **kwargs)


@pytest.mark.parametrize("http2", [True, False])
async def test_refused_connection_is_a_k8s_transport_error(http2: bool) -> None:
    async with kube(f"http://127.0.0.1:{dead_port()}", http2=http2) as api:
        with pytest.raises(K8sTransportError) as info:
            await api.get_json("/apis")
    assert not isinstance(info.value, K8sTimeout)
    assert str(info.value).startswith("ConnectError: ")
    assert isinstance(info.value.__cause__, OSError if http2 else httpx.ConnectError)


async def test_silent_server_is_a_k8s_timeout(autojump_clock: trio.abc.Clock) -> None:
    async def hang(stream: trio.SocketStream) -> None:
        await trio.sleep_forever()

    async with peer(hang) as url, kube(url, request_timeout=5.0) as api:
        with pytest.raises(K8sTimeout, match="ReadTimeout"):
            await api.get_json("/apis")


async def test_error_status_is_an_api_error_with_code_and_reason() -> None:
    status = (b'{"kind":"Status","code":403,"reason":"Forbidden",'
              b'"message":"pods is forbidden: User \\"x\\" cannot list"}')
    async with peer(canned("403 Forbidden", status)) as url, kube(url) as api:
        with pytest.raises(ApiError) as info:
            await api.list_page(K.POD, limit=10)
    assert (info.value.code, info.value.reason) == (403, "Forbidden")
    assert str(info.value) == 'GET /api/v1/pods: HTTP 403: pods is forbidden: User "x" cannot list'


async def test_error_status_without_a_status_body_keeps_what_the_peer_said() -> None:
    async with peer(canned("502 Bad Gateway", b"upstream down", "text/plain")) as url, \
            kube(url) as api:
        with pytest.raises(ApiError) as info:
            await api.get_json("/apis")
    assert (info.value.code, info.value.reason) == (502, "Bad Gateway")
    assert "upstream down" in str(info.value)


async def test_garbled_body_is_malformed_response() -> None:
    async with peer(canned("200 OK", b"<html>not json</html>")) as url, kube(url) as api:
        with pytest.raises(MalformedResponse, match="GET /apis: response is not JSON"):
            await api.served_groups()


async def test_watch_cut_mid_stream_is_a_k8s_transport_error() -> None:
    event = b'{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"5"}}}\n'

    async def cut(stream: trio.SocketStream) -> None:
        await stream.send_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                              + f"{len(event):x}\r\n".encode() + event + b"\r\n"
                              + b"40\r\npartial")  # a chunk promised, never finished

    received = []
    async with peer(cut) as url, kube(url) as api:
        with pytest.raises(K8sTransportError, match="RemoteProtocolError"):
            async with api.watch(K.POD, resource_version="1", timeout_seconds=60) as events:
                async for ev in events:
                    received.append(ev.resource_version)
    assert received == ["5"]  # what arrived before the cut was delivered


async def test_etcd_refused_connection_is_an_etcd_transport_error() -> None:
    endpoint = f"http://127.0.0.1:{dead_port()}"
    with pytest.raises(EtcdTransportError, match="^H2ConnectionError: connect to ") as info:
        async with EtcdClient(EtcdConfig(endpoints=(endpoint,))):
            pass
    assert isinstance(info.value.__cause__, H2ConnectionError)


async def test_etcd_peer_that_is_not_http2_is_an_etcd_transport_error() -> None:
    # An HTTP/1.1 server answers our connection preface with a status line: not HTTP/2.
    async with peer(canned("500 Internal Server Error", b"oops", "text/plain")) as url, \
            EtcdClient(EtcdConfig(endpoints=(url,))) as client:
        with pytest.raises(EtcdTransportError, match="protocol error|closed"):
            await client.status()
