"""The API server's HTTP/2 shell: h2c with prior knowledge and TLS with ALPN ``h2``, beside
HTTP/1.1 on the same listener.

A small client on the h2 library (client side) drives one connection, in virtual time over
memory streams where timing matters (watch timeouts, flow control), and over real sockets
for protocol choice (plaintext preface, TLS ALPN with trustme certificates, httpx's own
HTTP/2 client).
"""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.settings
import httpx
import pytest
import trio
import trio.testing
import trustme

from testbed.apiserver import ApiServer, open_apiserver
from testbed.cluster import k8s_pod
from trio_typha.model.kinds import NAMESPACE, POD

PODS = "/api/v1/namespaces/default/pods"


class H2Client:
    """One HTTP/2 client connection: sends requests, collects each stream's frames."""

    def __init__(self, stream: trio.abc.Stream, *, window: int | None = None) -> None:
        self.stream = stream
        config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        self.conn = h2.connection.H2Connection(config)
        if window is not None:
            self.conn.local_settings = h2.settings.Settings(client=True, initial_values={
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        self.conn.initiate_connection()
        self.headers: dict[int, dict[str, str]] = {}
        self.data: dict[int, bytearray] = {}
        self.ended: set[int] = set()
        self.reset: set[int] = set()
        self.pings_acked = 0
        self.closed = False
        self.settings_seen: dict[int, int] = {}
        self.hold: set[int] = set()  # streams whose DATA we do not give back (window)
        self._changed = trio.Event()
        self._writing = trio.Lock()

    async def flush(self) -> None:
        async with self._writing:  # the test and the reader both send
            data = self.conn.data_to_send()
            if data:
                await self.stream.send_all(data)

    async def run(self) -> None:
        """Read until the server closes the connection."""
        await self.flush()
        while True:
            try:
                data = await self.stream.receive_some(65536)
            except trio.BrokenResourceError:
                data = b""
            if not data:
                self.closed = True
                self._wake()
                return
            for event in self.conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    self.headers[event.stream_id] = dict(event.headers)
                elif isinstance(event, h2.events.DataReceived):
                    self.data.setdefault(event.stream_id, bytearray()).extend(event.data)
                    if event.stream_id not in self.hold:
                        self.conn.acknowledge_received_data(event.flow_controlled_length,
                                                            event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    self.ended.add(event.stream_id)
                elif isinstance(event, h2.events.StreamReset):
                    self.reset.add(event.stream_id)
                elif isinstance(event, h2.events.PingAckReceived):
                    self.pings_acked += 1
                elif isinstance(event, h2.events.RemoteSettingsChanged):
                    for code, change in event.changed_settings.items():
                        self.settings_seen[int(code)] = change.new_value
                elif isinstance(event, h2.events.ConnectionTerminated):
                    self.closed = True
            await self.flush()
            self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def until(self, condition: Any) -> None:
        while not condition():
            if self.closed:
                raise AssertionError("connection closed")
            await self._changed.wait()

    async def wait_closed(self) -> None:
        while not self.closed:
            await self._changed.wait()

    async def send(self, method: str, target: str, body: Any = None) -> int:
        sid = self.conn.get_next_available_stream_id()
        data = b"" if body is None else json.dumps(body).encode()
        headers = [(":method", method), (":path", target), (":scheme", "http"),
                   (":authority", "testbed")]
        if data:
            headers += [("content-type", "application/json"),
                        ("content-length", str(len(data)))]
        self.conn.send_headers(sid, headers, end_stream=not data)
        if data:
            self.conn.send_data(sid, data, end_stream=True)
        await self.flush()
        return sid

    async def request(self, method: str, target: str, body: Any = None
                      ) -> tuple[int, Any]:
        sid = await self.send(method, target, body)
        await self.until(lambda: sid in self.ended)
        raw = bytes(self.data.get(sid, b""))
        return int(self.headers[sid][":status"]), json.loads(raw) if raw[:1] == b"{" else raw

    def lines(self, sid: int) -> list[dict[str, Any]]:
        """The stream's whole lines so far (a line may span DATA frames)."""
        *complete, _partial = bytes(self.data.get(sid, b"")).split(b"\n")
        return [json.loads(line) for line in complete]

    async def ping(self) -> None:
        acked = self.pings_acked
        self.conn.ping(b"12345678")
        await self.flush()
        await self.until(lambda: self.pings_acked > acked)

    async def give_back(self, sid: int) -> None:
        """Open the stream's window for what it has received (after a hold)."""
        self.hold.discard(sid)
        received = len(self.data.get(sid, b""))
        self.conn.acknowledge_received_data(received, sid)
        await self.flush()


@asynccontextmanager
async def h2_client(server: ApiServer, **options: Any) -> AsyncIterator[H2Client]:
    client_stream, server_stream = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.handle_connection, server_stream)
        client = H2Client(client_stream, **options)
        nursery.start_soon(client.run)
        yield client
        nursery.cancel_scope.cancel()


def watch_target(rv: int, timeout: int | None = None, path: str = PODS) -> str:
    target = f"{path}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true"
    return target if timeout is None else f"{target}&timeoutSeconds={timeout}"


async def test_requests_and_multiplexed_watches_on_one_connection(
        autojump_clock: trio.abc.Clock) -> None:
    server = ApiServer(bookmark_interval=10.0)
    async with h2_client(server) as client:
        assert await client.request("GET", "/healthz") == (200, b"ok")
        rv = server.store.revision
        pods = await client.send("GET", watch_target(rv, timeout=35))
        namespaces = await client.send("GET", watch_target(rv, timeout=35,
                                                           path="/api/v1/namespaces"))
        await server.wait_for_watches(lambda n: n == 2)
        # Lists, creates and gets go over the same connection while both watches stream.
        status, created = await client.request("POST", PODS, k8s_pod("a"))
        assert status == 201
        assert (await client.request("GET", f"{PODS}/a")) == (200, created)
        await client.until(lambda: client.lines(pods))
        (added,) = client.lines(pods)
        assert (added["type"], added["object"]["metadata"]["name"]) == ("ADDED", "a")
        assert client.headers[pods][":status"] == "200"
        assert client.headers[pods]["content-type"] == "application/json"
        await client.ping()  # answered while the watches are open
        start = trio.current_time()
        await client.until(lambda: {pods, namespaces} <= client.ended)
        # Both end cleanly (END_STREAM) at their timeout, the connection stays up.
        assert trio.current_time() - start == pytest.approx(35, abs=0.5)
        types = [e["type"] for e in client.lines(pods)]
        assert types[0] == "ADDED" and set(types[1:]) == {"BOOKMARK"}
        assert not client.closed
        assert (await client.request("GET", "/healthz")) == (200, b"ok")
    assert server.traffic.h2_connections == 1 and server.traffic.connections == 1
    assert server.traffic.requests == 6 and server.traffic.watches == 2
    assert server.traffic.pings == 1
    assert server.traffic.bytes_in > 0 and server.traffic.bytes_out > 0


async def test_kube_apiserver_settings_and_no_timeout_means_the_default(
        autojump_clock: trio.abc.Clock) -> None:
    server = ApiServer(default_watch_timeout=1800.0)
    async with h2_client(server) as client:
        sid = await client.send("GET", watch_target(server.store.revision))
        await server.wait_for_watches(lambda n: n == 1)
        assert client.settings_seen[h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS] == 100
        start = trio.current_time()
        await client.until(lambda: sid in client.ended)
        assert trio.current_time() - start == pytest.approx(1800, abs=1)


async def test_a_stream_whose_window_is_shut_stalls_only_itself(
        autojump_clock: trio.abc.Clock) -> None:
    """Flow control per stream: a watch whose reader stops giving back its window gets
    no more than the window, while another watch on the connection keeps streaming; once
    the window opens the rest arrives."""
    server = ApiServer()
    async with h2_client(server, window=4096) as client:
        rv = server.store.revision
        held = await client.send("GET", watch_target(rv))
        client.hold.add(held)
        free = await client.send("GET", watch_target(rv, path="/api/v1/namespaces"))
        await server.wait_for_watches(lambda n: n == 2)
        for i in range(20):
            server.store.create(POD, k8s_pod(f"p{i}"))  # ~1 KiB lines: past the window
        await trio.sleep(1)
        assert 0 < len(client.data[held]) <= 4096
        server.store.create(NAMESPACE, {"metadata": {"name": "later"}})
        await client.until(lambda: any(e["object"]["metadata"]["name"] == "later"
                                       for e in client.lines(free)))
        assert len(client.data[held]) <= 4096
        await client.give_back(held)
        await client.until(lambda: len(client.lines(held)) == 20)
        assert [e["object"]["metadata"]["name"] for e in client.lines(held)] == [
            f"p{i}" for i in range(20)]


async def test_a_reset_stream_ends_its_watch_and_an_abrupt_drop_closes_the_connection(
        autojump_clock: trio.abc.Clock) -> None:
    server = ApiServer()
    async with h2_client(server) as client:
        rv = server.store.revision
        first = await client.send("GET", watch_target(rv))
        await client.send("GET", watch_target(rv, path="/api/v1/namespaces"))
        await server.wait_for_watches(lambda n: n == 2)
        client.conn.reset_stream(first)
        await client.flush()
        await server.wait_for_watches(lambda n: n == 1)
        assert not client.closed
        assert server.drop_watches(abrupt=True) == 1  # a crashed server: the connection goes
        with trio.fail_after(5):
            await client.wait_closed()
        await server.wait_for_watches(lambda n: n == 0)


async def test_an_expired_revision_is_an_error_event_in_the_stream(
        autojump_clock: trio.abc.Clock) -> None:
    server = ApiServer()
    server.store.create(POD, k8s_pod("a"))
    old = server.store.revision
    server.store.create(POD, k8s_pod("b"))
    server.compact()
    async with h2_client(server) as client:
        sid = await client.send("GET", watch_target(old - 1))
        await client.until(lambda: sid in client.ended)
        (error,) = client.lines(sid)
        assert error["type"] == "ERROR" and error["object"]["code"] == 410


async def test_http1_and_h2c_share_the_plaintext_listener() -> None:
    async with open_apiserver() as server:
        async with httpx.AsyncClient() as http1:
            response = await http1.get(f"{server.url}/api/v1/namespaces")
            assert response.http_version == "HTTP/1.1" and response.status_code == 200
        stream = await trio.open_tcp_stream(server.host, server.port)
        async with trio.open_nursery() as nursery:
            client = H2Client(stream)
            nursery.start_soon(client.run)
            status, body = await client.request("GET", "/api/v1/namespaces")
            assert status == 200 and body["kind"] == "NamespaceList"
            nursery.cancel_scope.cancel()
        await stream.aclose()
    assert server.traffic.h2_connections == 1 and server.traffic.connections == 2


@pytest.mark.parametrize("http2", [True, False])
async def test_tls_negotiates_h2_by_alpn_unless_disabled(http2: bool) -> None:
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    async with open_apiserver(ssl_context=context, ca_pem=ca.cert_pem.bytes(),
                              http2=http2) as server:
        async with httpx.AsyncClient(verify=client_context, http2=True) as http:
            response = await http.get(f"{server.url}/api/v1/namespaces")
        assert response.status_code == 200
        assert response.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
        async with httpx.AsyncClient(verify=client_context) as http:  # offers http/1.1 only
            assert (await http.get(f"{server.url}/healthz")).http_version == "HTTP/1.1"
    assert server.traffic.h2_connections == (1 if http2 else 0)
