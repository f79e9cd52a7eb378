"""List-watch against the test bed API server with a raw httpx client on real sockets."""

from __future__ import annotations

import functools
import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import yaml

from testbed.apiserver import ApiServer, open_apiserver
from testbed.cluster import k8s_pod
from trio_typha.model.kinds import POD, calico_kind

IPPOOL = calico_kind("IPPool", "crd.projectcalico.org")
PODS = "/api/v1/namespaces/default/pods"


def pod(name: str, **labels: str) -> dict[str, Any]:
    return k8s_pod(name, labels=labels)


@pytest.fixture
async def server() -> AsyncIterator[ApiServer]:
    async with open_apiserver(bookmark_interval=0.05) as srv:
        yield srv


@pytest.fixture
async def http(server: ApiServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as c:
        yield c


class Watch:
    """Reads ``{"type","object"}`` lines from a streaming httpx response."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._lines = response.aiter_lines()

    async def next(self) -> dict[str, Any]:
        with trio.fail_after(10):  # a hang guard, not a timing assertion
            while True:
                line = await anext(self._lines)
                if line:
                    return json.loads(line)

    async def rest(self) -> list[dict[str, Any]]:
        with trio.fail_after(10):
            return [json.loads(line) async for line in self._lines if line]


async def test_watch_streams_added_modified_deleted(server: ApiServer,
                                                    http: httpx.AsyncClient) -> None:
    listed = (await http.get(PODS)).json()
    rv = listed["metadata"]["resourceVersion"]
    async with http.stream("GET", PODS, params={"watch": "1", "resourceVersion": rv}) as r:
        assert r.status_code == 200
        assert r.headers["transfer-encoding"] == "chunked"
        watch = Watch(r)
        created = (await http.post(PODS, json=pod("a", app="x"))).json()
        await http.patch(f"{PODS}/a", json={"metadata": {"labels": {"app": "y"}}},
                         headers={"content-type": "application/merge-patch+json"})
        # Another kind and another namespace's pods are not in this stream.
        server.store.create(IPPOOL, {"metadata": {"name": "pool"}})
        await http.post("/api/v1/namespaces", json={"metadata": {"name": "other"}})
        server.store.create(POD, {**pod("elsewhere"),
                                  "metadata": {"name": "b", "namespace": "other"}})
        await http.delete(f"{PODS}/a")
        events = [await watch.next() for _ in range(3)]
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "DELETED"]
    assert events[0]["object"] == created
    assert events[1]["object"]["metadata"]["labels"] == {"app": "y"}
    revisions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert revisions == sorted(revisions) and revisions[0] > int(rv)


async def test_watch_without_resource_version_starts_with_the_current_state(
        server: ApiServer, http: httpx.AsyncClient) -> None:
    for name in ("a", "b", "c"):
        server.store.create(POD, pod(name, role="web" if name != "b" else "db"))
    params = {"watch": "true", "labelSelector": "role=web"}
    async with http.stream("GET", "/api/v1/pods", params=params) as r:
        watch = Watch(r)
        first = [await watch.next() for _ in range(2)]
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in first] == [
            ("ADDED", "a"), ("ADDED", "c")]
        b = server.store.get(POD, "default", "b")
        server.store.update(POD, {**b, "metadata": {**b["metadata"], "labels": {"role": "web"}}})
        moved_in = await watch.next()
    assert (moved_in["type"], moved_in["object"]["metadata"]["name"]) == ("ADDED", "b")


async def test_bookmarks_carry_the_kind_s_revision(server: ApiServer,
                                                  http: httpx.AsyncClient) -> None:
    """As kube-apiserver's watch cache: a bookmark carries the last revision of its own kind
    (``lastProcessedResourceVersion``), and only once that is past the watch's start; writes
    of other kinds move it only through an etcd progress notification."""
    server.store.create(POD, pod("a"))
    rv = server.store.revision
    params = {"watch": "1", "resourceVersion": str(rv - 1), "allowWatchBookmarks": "true"}
    async with http.stream("GET", PODS, params=params) as r:
        watch = Watch(r)
        assert (await watch.next())["type"] == "ADDED"
        bookmark = await watch.next()
        assert bookmark["type"] == "BOOKMARK"
        assert bookmark["object"] == {"kind": "Pod", "apiVersion": "v1",
                                      "metadata": {"resourceVersion": str(rv)}}
        server.store.create(IPPOOL, {"metadata": {"name": "unrelated"}})
        assert (await watch.next())["object"]["metadata"]["resourceVersion"] == str(rv)
        server.store.progress()
        while (event := await watch.next())["object"]["metadata"]["resourceVersion"] == str(rv):
            pass
    assert event["type"] == "BOOKMARK"
    assert event["object"]["metadata"]["resourceVersion"] == str(server.store.revision)


async def test_too_old_resource_version_is_410() -> None:
    async with open_apiserver(history_size=5) as small:
        for i in range(10):
            small.store.create(POD, pod(f"p{i}"))
        async with httpx.AsyncClient(base_url=small.url) as c:
            async with c.stream("GET", PODS, params={"watch": "1", "resourceVersion": "3"}) as r:
                assert r.status_code == 200
                events = await Watch(r).rest()
            # A paginated list whose revision was compacted away.
            first = (await c.get(PODS, params={"limit": "2"})).json()
            small.store.create(POD, pod("late"))
            small.compact()
            expired = await c.get(PODS, params={"limit": "2",
                                                "continue": first["metadata"]["continue"]})
            assert expired.status_code == 410
            # Watching from a revision that is still retained works.
            params = {"watch": "1", "resourceVersion": str(small.store.revision)}
            async with c.stream("GET", PODS, params=params) as r:
                small.store.create(POD, pod("later"))
                assert (await Watch(r).next())["object"]["metadata"]["name"] == "later"
    assert len(events) == 1
    error = events[0]
    assert error["type"] == "ERROR"
    assert error["object"]["kind"] == "Status"
    assert error["object"]["code"] == 410
    assert error["object"]["reason"] == "Expired"
    assert error["object"]["message"].startswith("too old resource version: 3")
    assert expired.json()["reason"] == "Expired"


async def test_drop_watches_hook(server: ApiServer, http: httpx.AsyncClient) -> None:
    async with http.stream("GET", PODS, params={"watch": "1", "resourceVersion": "1"}) as r:
        watch = Watch(r)
        server.store.create(POD, pod("a"))
        assert (await watch.next())["type"] == "ADDED"
        assert server.open_watches == 1
        assert server.drop_watches(abrupt=False) == 1
        assert await watch.rest() == []  # the chunked body simply ends
    async with http.stream("GET", PODS, params={"watch": "1", "resourceVersion": "1"}) as r:
        watch = Watch(r)
        assert (await watch.next())["type"] == "ADDED"
        server.drop_watches()  # abrupt: the connection dies mid-body
        with pytest.raises(httpx.RemoteProtocolError):
            await watch.rest()
    assert server.open_watches == 0
    assert (await http.get("/healthz")).text == "ok"


async def test_a_client_hanging_up_ends_its_watch(server: ApiServer,
                                                  http: httpx.AsyncClient) -> None:
    async with http.stream("GET", PODS, params={"watch": "1"}):
        assert server.open_watches == 1
    with trio.fail_after(10):
        await server.wait_for_watches(lambda n: n == 0)


async def test_paginated_list_over_http(server: ApiServer, http: httpx.AsyncClient) -> None:
    for i in range(7):
        server.store.create(POD, pod(f"p{i}", parity=str(i % 2)))
    names, token, pages = [], "", 0
    while True:
        params = {"limit": "2", "labelSelector": "parity=0"}
        if token:
            params["continue"] = token
        body = (await http.get("/api/v1/pods", params=params)).json()
        assert body["kind"] == "PodList"
        names += [p["metadata"]["name"] for p in body["items"]]
        pages += 1
        token = body["metadata"].get("continue", "")
        if not token:
            break
    assert names == ["p0", "p2", "p4", "p6"]
    assert pages == 2


async def test_standalone_server_writes_kubeconfig_and_stops_on_sigterm(
        tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kc"
    async with trio.open_nursery() as nursery:
        process = await nursery.start(functools.partial(
            trio.run_process,
            [sys.executable, "-m", "testbed.apiserver", "--port", "0",
             "--kubeconfig", str(kubeconfig), "--calico-group", "both"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=False))
        with trio.fail_after(30):
            line = b""
            while not line.endswith(b"\n"):
                line += await process.stdout.receive_some(4096)
        assert line.decode().strip() == str(kubeconfig)
        config = yaml.safe_load(kubeconfig.read_text())
        url = config["clusters"][0]["cluster"]["server"]
        token = config["users"][0]["user"]["token"]
        async with httpx.AsyncClient(base_url=url,
                                     headers={"authorization": f"Bearer {token}"}) as c:
            groups = (await c.get("/apis")).json()["groups"]
        assert {"crd.projectcalico.org", "projectcalico.org"} <= {g["name"] for g in groups}
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            await process.wait()
    assert process.returncode == 0
