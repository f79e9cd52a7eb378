"""The API server's HTTP/1.1 shell over in-memory streams, on trio's virtual clock.

A small h11 client drives one connection, so keep-alive, chunked watch bodies, watch
timeouts, bookmark intervals and the latency hook are checked exactly, in virtual time.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import h11
import pytest
import trio
import trio.testing

from testbed.apiserver import ApiServer
from testbed.cluster import k8s_pod
from trio_typha.model.kinds import NAMESPACE, POD

PODS = "/api/v1/namespaces/default/pods"


class Client:
    """One HTTP/1.1 client connection on a memory stream."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.conn = h11.Connection(h11.CLIENT)

    async def send(self, method: str, target: str, body: Any = None,
                   content_type: str = "application/json") -> None:
        data = b"" if body is None else json.dumps(body).encode()
        headers = [("host", "testbed"), ("content-length", str(len(data)))]
        if data:
            headers.append(("content-type", content_type))
        out = self.conn.send(h11.Request(method=method, target=target, headers=headers))
        out += self.conn.send(h11.Data(data=data)) if data else b""
        out += self.conn.send(h11.EndOfMessage())
        await self.stream.send_all(out)

    async def event(self) -> h11.Event:
        while True:
            event = self.conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            self.conn.receive_data(await self.stream.receive_some(65536))

    async def head(self) -> h11.Response:
        event = await self.event()
        assert isinstance(event, h11.Response), event
        return event

    async def body(self) -> bytes:
        data = b""
        while isinstance(event := await self.event(), h11.Data):
            data += event.data
        assert isinstance(event, h11.EndOfMessage), event
        return data

    async def request(self, method: str, target: str, body: Any = None,
                      content_type: str = "application/json") -> tuple[int, Any]:
        await self.send(method, target, body, content_type)
        head = await self.head()
        raw = await self.body()
        self.conn.start_next_cycle()
        return head.status_code, json.loads(raw) if raw.startswith(b"{") else raw

    async def lines(self) -> AsyncIterator[dict[str, Any]]:
        """Watch events until the body ends."""
        pending = b""
        while isinstance(event := await self.event(), h11.Data):
            pending += event.data
            *complete, pending = pending.split(b"\n")
            for line in complete:
                yield json.loads(line)
        assert isinstance(event, h11.EndOfMessage), event
        assert pending == b""
        self.conn.start_next_cycle()


@pytest.fixture
async def server() -> ApiServer:
    return ApiServer(bookmark_interval=10.0)


async def connect(nursery: trio.Nursery, server: ApiServer) -> Client:
    client_stream, server_stream = trio.testing.memory_stream_pair()
    nursery.start_soon(server.handle_connection, server_stream)
    return Client(client_stream)


def pod(name: str) -> dict[str, Any]:
    return k8s_pod(name)


async def test_keep_alive_serves_many_requests_on_one_connection(
        server: ApiServer, nursery: trio.Nursery) -> None:
    client = await connect(nursery, server)
    assert await client.request("GET", "/healthz") == (200, b"ok")
    status, created = await client.request("POST", PODS, pod("a"))
    assert status == 201
    status, got = await client.request("GET", f"{PODS}/a")
    assert (status, got) == (200, created)
    status, body = await client.request("GET", f"{PODS}/missing")
    assert (status, body["kind"], body["status"], body["code"]) == (404, "Status", "Failure",
                                                                   404)


async def test_watch_timeout_bookmarks_and_keep_alive_after_the_watch(
        server: ApiServer, nursery: trio.Nursery, autojump_clock: trio.abc.Clock) -> None:
    """Bookmarks as kube-apiserver sends them (``storage/cacher/cacher.go``
    ``dispatchEvents``, ``cache_watcher.go`` ``nextBookmarkTime`` / ``process``): every
    interval whatever the traffic and once 2 s before the deadline, each carrying the
    revision the kind's watch cache has processed, which writes of other kinds do not move
    and an etcd progress notification brings up to the store's revision."""
    client = await connect(nursery, server)
    start = trio.current_time()
    rv = server.store.revision
    await client.send("GET", f"{PODS}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true"
                             f"&timeoutSeconds=35")
    head = await client.head()
    assert head.status_code == 200
    assert (b"transfer-encoding", b"chunked") in head.headers
    server.store.create(POD, pod("a"))
    seen = []
    async for event in client.lines():
        seen.append((event["type"], event["object"]["metadata"]["resourceVersion"],
                     trio.current_time() - start))
        if len(seen) == 2:
            server.store.create(NAMESPACE, {"metadata": {"name": "elsewhere"}})
        elif len(seen) == 3:
            server.store.progress()
    assert [(t, r) for t, r, _ in seen] == [
        ("ADDED", str(rv + 1)), ("BOOKMARK", str(rv + 1)), ("BOOKMARK", str(rv + 1)),
        ("BOOKMARK", str(rv + 2)), ("BOOKMARK", str(rv + 2))]
    assert [round(at) for _, _, at in seen] == [0, 10, 20, 30, 33]
    # The body ends cleanly at the 35 s timeout.
    assert trio.current_time() - start == pytest.approx(35)
    assert server.open_watches == 0
    # The same connection carries on.
    assert (await client.request("GET", "/healthz"))[0] == 200


async def _progress_at(server: ApiServer, at: float) -> None:
    await trio.sleep_until(at)
    server.store.create(NAMESPACE, {"metadata": {"name": "elsewhere"}})
    server.store.progress()


async def test_no_bookmark_until_the_kind_moves_past_the_watch_start(
        server: ApiServer, nursery: trio.Nursery, autojump_clock: trio.abc.Clock) -> None:
    """kube-apiserver sends a watch only bookmarks past the revision it started from: a
    quiet kind gets none until an etcd progress notification moves its cache on."""
    server.store.create(POD, pod("a"))
    server.store.create(NAMESPACE, {"metadata": {"name": "later"}})
    client = await connect(nursery, server)
    start = trio.current_time()
    rv = server.store.revision
    await client.send("GET", f"{PODS}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true"
                             f"&timeoutSeconds=50")
    await client.head()
    nursery.start_soon(_progress_at, server, start + 25)
    seen = []
    async for event in client.lines():
        seen.append((event["type"], event["object"]["metadata"]["resourceVersion"],
                     round(trio.current_time() - start)))
        if len(seen) == 1:
            server.store.create(NAMESPACE, {"metadata": {"name": "even-later"}})
            server.store.progress()
    assert seen == [("BOOKMARK", str(rv + 1), 30), ("BOOKMARK", str(rv + 2), 40),
                    ("BOOKMARK", str(rv + 2), 48)]


async def test_send_initial_events_streaming_list(server: ApiServer, nursery: trio.Nursery,
                                                  autojump_clock: trio.abc.Clock) -> None:
    for name in ("a", "b"):
        server.store.create(POD, pod(name))
    client = await connect(nursery, server)
    await client.send("GET", f"{PODS}?watch=1&sendInitialEvents=true&allowWatchBookmarks=true"
                             f"&resourceVersionMatch=NotOlderThan&resourceVersion=0"
                             f"&timeoutSeconds=5")
    await client.head()
    events = [e async for e in client.lines()]
    assert [e["type"] for e in events] == ["ADDED", "ADDED", "BOOKMARK"]
    end = events[2]["object"]["metadata"]
    assert end == {"resourceVersion": str(server.store.revision),
                   "annotations": {"k8s.io/initial-events-end": "true"}}
    status, body = await client.request("GET", f"{PODS}?watch=1&sendInitialEvents=true")
    assert status == 400 and "resourceVersionMatch" in body["message"]


async def test_clean_drop_ends_the_body_and_a_pipelined_request_is_served_after(
        server: ApiServer, nursery: trio.Nursery, autojump_clock: trio.abc.Clock) -> None:
    client = await connect(nursery, server)
    await client.send("GET", f"{PODS}?watch=1")
    await client.head()
    # HTTP/1.1 pipelining: the next request arrives while the watch is open.
    await client.stream.send_all(b"GET /version HTTP/1.1\r\nhost: t\r\n\r\n")
    await trio.sleep(1)
    assert server.drop_watches(abrupt=False) == 1
    assert [e async for e in client.lines()] == []
    head = await client.head()
    version = json.loads(await client.body())
    assert head.status_code == 200 and version["major"] == "1"


async def test_latency_hook_delays_responses(server: ApiServer, nursery: trio.Nursery,
                                             autojump_clock: trio.abc.Clock) -> None:
    client = await connect(nursery, server)
    server.set_latency(2.5)
    start = trio.current_time()
    assert (await client.request("GET", "/api/v1/namespaces"))[0] == 200
    assert trio.current_time() - start >= 2.5
    server.set_latency(0)
    start = trio.current_time()
    assert (await client.request("GET", "/api/v1/namespaces"))[0] == 200
    assert trio.current_time() == start


async def test_garbage_gets_400_and_only_that_connection_closes(
        server: ApiServer, nursery: trio.Nursery) -> None:
    bad = await connect(nursery, server)
    await bad.stream.send_all(b"NOT HTTP AT ALL\r\n\r\n")
    response = b""
    while chunk := await bad.stream.receive_some(65536):
        response += chunk
    assert response.startswith(b"HTTP/1.1 400 ")
    assert b'"kind":"Status"' in response
    good = await connect(nursery, server)
    assert (await good.request("GET", "/healthz"))[0] == 200


async def test_oversized_body_is_413(server: ApiServer, nursery: trio.Nursery) -> None:
    client = await connect(nursery, server)
    huge = {"metadata": {"name": "x", "namespace": "default"}, "data": "x" * (9 << 20)}
    await client.send("POST", PODS, huge)
    head = await client.head()
    body = json.loads(await client.body())
    assert head.status_code == 413
    assert body["reason"] == "RequestEntityTooLarge"


async def test_server_bug_costs_one_request(server: ApiServer, nursery: trio.Nursery,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    client = await connect(nursery, server)

    def broken(route: Any) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(server.api, "_get", broken)
    status, body = await client.request("GET", f"{PODS}/a")
    assert (status, body["reason"]) == (500, "InternalError")
    monkeypatch.undo()
    assert (await client.request("GET", f"{PODS}/a"))[0] == 404
