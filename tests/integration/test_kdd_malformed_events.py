"""A malformed watch event or list item from the API server: one warning and a relist.

The test bed API server (over real loopback sockets) answers as usual, except that one watch
request gets a malformed line in front of its events (a spy around its request handler):
bad JSON, a BOOKMARK whose ``metadata`` is null, a resourceVersion that is a number, an
unknown event type, an event without an object, JSON nested too deeply to decode.  The
watcher says so in one warning naming the resource, reports the kind failing, lists again
(which sends only what changed: nothing is lost or repeated) and watches on, and an object
created meanwhile still arrives.  Resuming the same watch would meet the same line again.
"""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
import trio

from testbed.apiserver import ApiServer, Request, open_apiserver
from testbed.apiserver.api import WatchPlan
from testbed.cluster import k8s_pod
from trio_typha.datastore.base import Connection, DatastoreEvent, KindSynced, ResourceEvent
from trio_typha.datastore.k8s_api import KubeApi
from trio_typha.datastore.k8s_config import KubeClientConfig
from trio_typha.datastore.k8s_watch import WatchTuning
from trio_typha.datastore.kubernetes import KubernetesDatastore
from trio_typha.model import kinds as K

FAST = WatchTuning(min_watch_interval=0.001, backoff_initial=0.01, backoff_max=0.05)


class _Prefixed:
    """A watch cursor whose opening lines start with ``line`` (the rest is the real one)."""

    def __init__(self, cursor: Any, line: bytes) -> None:
        self._cursor, self._line = cursor, line

    def initial_lines(self) -> list[bytes]:
        return [self._line + b"\n", *self._cursor.initial_lines()]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


class Injector:
    """Counts list and watch requests for pods; puts ``line`` into the next pod watch."""

    def __init__(self, server: ApiServer) -> None:
        self.lists = self.watches = 0
        self.line: bytes | None = None
        handle = server.api.handle

        def spy(request: Request) -> Any:
            split = urlsplit(request.target)
            query = dict(parse_qsl(split.query))
            result = handle(request)
            if split.path == "/api/v1/pods":
                if "watch" in query:
                    self.watches += 1
                    if self.line is not None and isinstance(result, WatchPlan):
                        result.cursor = _Prefixed(result.cursor, self.line)  # type: ignore[assignment]
                        self.line = None
                else:
                    self.lists += 1
            return result

        server.api.handle = spy  # type: ignore[method-assign]


@asynccontextmanager
async def watching(server: ApiServer) -> AsyncIterator[trio.MemoryReceiveChannel[DatastoreEvent]]:
    cfg = KubeClientConfig(server=server.url, source="test bed")
    send, recv = trio.open_memory_channel[DatastoreEvent](10_000)
    async with KubeApi(cfg) as api, trio.open_nursery() as nursery:
        ds = KubernetesDatastore(api, calico_group=K.CALICO_CRD_GROUP, tuning=FAST,
                                 random=random.Random(4).random)
        await nursery.start(ds.watch, [K.POD], send)
        yield recv
        nursery.cancel_scope.cancel()


def pod(name: str) -> dict[str, Any]:
    return k8s_pod(name)


async def take_until(recv: trio.MemoryReceiveChannel[DatastoreEvent],
                     done: Callable[[DatastoreEvent], bool]) -> list[DatastoreEvent]:
    out: list[DatastoreEvent] = []
    with trio.fail_after(10):
        while not out or not done(out[-1]):
            out.append(await recv.receive())
    return out


DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize(("line", "why"), [
    (b"this is not JSON", "watch event is not JSON"),
    (b'{"type":"BOOKMARK","object":{"metadata":null}}', "metadata is not an object"),
    (b'{"type":"BOOKMARK","object":{"kind":"Pod","metadata":7}}', "metadata is not an object"),
    (b'{"type":"MODIFIED","object":{"metadata":{"name":"a","namespace":"default",'
     b'"resourceVersion":12}}}', "resourceVersion is not a string"),
    (b'{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"1",'
     b'"namespace":["default"]}}}', "metadata.namespace is not a string"),
    (b'{"type":"RESYNC","object":{}}', "unknown watch event type 'RESYNC'"),
    (b'{"type":"ADDED"}', "ADDED watch event has no object"),
    (b'{"type":"ADDED","object":' + DEEP + b"}", "watch event is not JSON"),
], ids=["not-json", "null-metadata-bookmark", "number-metadata-bookmark", "number-rv",
        "list-namespace", "unknown-type", "no-object", "too-deep"])
async def test_a_malformed_watch_event_is_named_then_relisted(
        line: bytes, why: str, caplog: pytest.LogCaptureFixture) -> None:
    async with open_apiserver(bookmark_interval=3600) as server:
        spy = Injector(server)
        a = server.store.create(K.POD, pod("a"))
        async with watching(server) as recv:
            first = await take_until(recv, lambda e: isinstance(e, KindSynced))
            assert [(e.name, e.revision) for e in first if isinstance(e, ResourceEvent)] == [
                ("a", a["metadata"]["resourceVersion"])]
            with trio.fail_after(10):
                await server.wait_for_watches(lambda n: n >= 1)
            spy.line = line
            server.drop_watches()  # the next watch request meets the bad line
            b = server.store.create(K.POD, pod("b"))
            events = await take_until(recv, lambda e: isinstance(e, ResourceEvent))
        # Reported failing, then recovered by the relist, which sends only the new pod.
        assert [(type(e).__name__, getattr(e, "ok", None)) for e in events] == [
            ("Connection", False), ("Connection", True), ("ResourceEvent", None)]
        failed = events[0]
        assert isinstance(failed, Connection) and failed.kind == K.POD
        assert failed.reason.startswith("bad response to watch pods: ") and why in failed.reason
        last = events[-1]
        assert isinstance(last, ResourceEvent)
        assert (last.name, last.revision) == ("b", b["metadata"]["resourceVersion"])
        assert spy.lists == 2
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING
                    and r.name.startswith("trio_typha.datastore")]
        assert [r.getMessage() for r in warnings] == [failed.reason]
