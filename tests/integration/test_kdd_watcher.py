"""The Kubernetes API datastore against the test bed API server, over real loopback sockets.

Every test talks HTTP to ``testbed.apiserver`` through httpx.  A :class:`RequestLog` spies on
the server's request handler (the real one still answers) so tests can wait for "the watcher
re-watched from revision N" instead of sleeping, and can count lists to tell a resumed watch
from a relist.  "No spurious events" is shown with a sentinel: relist events all precede the
next watch, so if the first event after a known write is that write, the relist sent nothing
else.
"""

from __future__ import annotations

import random
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trustme

from testbed.apiserver import ApiServer, Request, Response, open_apiserver
from testbed.apiserver.status import internal_error
from testbed.cluster import k8s_pod
from tests.integration.request_log import RequestLog
from trio_typha.config import Config
from trio_typha.config_sources import environment_config
from trio_typha.datastore.base import Connection, DatastoreEvent, KindSynced, ResourceEvent
from trio_typha.datastore.k8s_api import KubeApi
from trio_typha.datastore.k8s_config import KubeClientConfig, load_kube_client_config
from trio_typha.datastore.k8s_watch import WatchTuning
from trio_typha.datastore.kubernetes import KubernetesDatastore, open_kubernetes_datastore
from trio_typha.model import kinds as K
from trio_typha.model.kinds import ResourceKind

FAST = WatchTuning(page_size=3, min_watch_interval=0.001,
                   backoff_initial=0.01, backoff_max=0.05)
IPPOOL = K.calico_kind("IPPool", K.CALICO_CRD_GROUP)


@pytest.fixture
async def server() -> AsyncIterator[ApiServer]:
    # A watch cache that paginates (kube-apiserver 1.34+), so lists come in pages.
    async with open_apiserver(calico_groups=(K.CALICO_CRD_GROUP,),
                              bookmark_interval=3600, cache_pagination=True) as srv:
        yield srv


@asynccontextmanager
async def watching(server: ApiServer, kinds: Sequence[ResourceKind], *,
                   tuning: WatchTuning = FAST,
                   ) -> AsyncIterator[trio.MemoryReceiveChannel[DatastoreEvent]]:
    cfg = KubeClientConfig(server=server.url, source="test bed")
    send, recv = trio.open_memory_channel[DatastoreEvent](10_000)
    async with KubeApi(cfg) as api, trio.open_nursery() as nursery:
        ds = KubernetesDatastore(api, calico_group=K.CALICO_CRD_GROUP, tuning=tuning,
                                 random=random.Random(4).random)
        await nursery.start(ds.watch, kinds, send)
        yield recv
        nursery.cancel_scope.cancel()


def pod(name: str, ns: str = "default", **labels: str) -> dict[str, Any]:
    return k8s_pod(name, ns, labels=labels)


def summary(event: DatastoreEvent) -> tuple[Any, ...]:
    if isinstance(event, KindSynced):
        return ("synced", event.kind.plural)
    if isinstance(event, Connection):
        return ("conn", event.ok, event.kind.plural if event.kind else None)
    assert isinstance(event, ResourceEvent)
    return ("del" if event.deleted else "set", event.namespace, event.name, event.revision)


async def take(recv: trio.MemoryReceiveChannel[DatastoreEvent], n: int,
               keep: Callable[[DatastoreEvent], bool] = lambda e: True,
               ) -> list[DatastoreEvent]:
    out: list[DatastoreEvent] = []
    with trio.fail_after(10):
        while len(out) < n:
            event = await recv.receive()
            if keep(event):
                out.append(event)
    return out


def rv(obj: dict[str, Any]) -> str:
    return obj["metadata"]["resourceVersion"]


async def test_paginated_list_then_watch_changes(server: ApiServer) -> None:
    log = RequestLog(server)
    seeded = [server.store.create(K.POD, pod(f"p{i}", ns)) for ns in ("default", "kube-system")
              for i in range(4)]
    async with watching(server, [K.POD]) as recv:
        listed = await take(recv, 9)
        assert [summary(e) for e in listed] == [
            *(("set", o["metadata"]["namespace"], o["metadata"]["name"], rv(o))
              for o in seeded), ("synced", "pods")]
        first = listed[0]
        assert isinstance(first, ResourceEvent) and first.obj is not None
        # List items carry no apiVersion/kind on the wire; the events do.
        assert (first.obj["apiVersion"], first.obj["kind"]) == ("v1", "Pod")
        assert first.obj["spec"] == seeded[0]["spec"]
        pages = log.lists(K.POD)
        assert [q.get("limit") for q in pages] == ["3", "3", "3"]
        # As Go Typha (client-go's pager): the first page from the watch cache, the rest by
        # continue token alone.
        assert pages[0] == {"limit": "3", "resourceVersion": "0",
                            "resourceVersionMatch": "NotOlderThan"}
        assert all(q.keys() == {"limit", "continue"} for q in pages[1:])
        await log.watch_from(K.POD, server.store.revision)
        watch = log.watches(K.POD)[0]
        # As Go Typha: bookmarks on, no timeoutSeconds (the server ends the stream).
        assert watch["allowWatchBookmarks"] == "true" and "timeoutSeconds" not in watch

        added = server.store.create(K.POD, pod("new"))
        changed = server.store.update(K.POD, {**seeded[0], "spec": {"nodeName": "n1"}})
        gone = server.store.delete(K.POD, "kube-system", "p3")
        events = await take(recv, 3)
        assert [summary(e) for e in events] == [("set", "default", "new", rv(added)),
                                                ("set", "default", "p0", rv(changed)),
                                                ("del", "kube-system", "p3", rv(gone))]
        assert isinstance(events[1], ResourceEvent) and events[1].obj is not None
        assert events[1].obj["spec"] == {"nodeName": "n1"}
        assert events[1].obj["kind"] == "Pod"
        assert len(log.lists(K.POD)) == 3  # no relist


@pytest.mark.parametrize("abrupt", [True, False], ids=["connection-reset", "clean-end"])
async def test_dropped_watch_resumes_without_duplicates(server: ApiServer, abrupt: bool) -> None:
    log = RequestLog(server)
    server.store.create(K.POD, pod("a"))
    async with watching(server, [K.POD]) as recv:
        await take(recv, 2)
        b = server.store.create(K.POD, pod("b"))
        assert [summary(e) for e in await take(recv, 1)] == [("set", "default", "b", rv(b))]
        assert server.drop_watches(abrupt=abrupt) == 1
        await log.watch_from(K.POD, rv(b))
        c = server.store.create(K.POD, pod("c"))
        # The first event after the resume is the new pod: b is not sent again.
        assert [summary(e) for e in await take(recv, 1)] == [("set", "default", "c", rv(c))]
        assert len(log.lists(K.POD)) == 1


async def test_bookmarks_advance_the_resume_point() -> None:
    async with open_apiserver(bookmark_interval=0.05) as server:
        log = RequestLog(server)
        server.store.create(K.POD, pod("a"))
        # timeoutSeconds in [3, 6): the server ends each watch after a few seconds (with
        # bookmarks until 2 s before) and the watcher re-watches from what it has seen,
        # which only bookmarks can have moved.
        tuning = WatchTuning(watch_timeout=3, min_watch_interval=0.001)
        async with watching(server, [K.POD], tuning=tuning) as recv:
            await take(recv, 2)
            listed_at = server.store.revision
            await log.watch_from(K.POD, listed_at)
            other = server.store.create(K.NAMESPACE, {"metadata": {"name": "elsewhere"}})
            server.store.progress()  # etcd's progress notification reaches the Pod cache
            await log.watch_from(K.POD, rv(other))
            assert int(rv(other)) > listed_at
            assert len(log.lists(K.POD)) == 1
            # Resuming from the bookmark survives a compaction up to it: no 410, no relist.
            server.compact()
            server.drop_watches()
            b = server.store.create(K.POD, pod("b"))
            assert [summary(e) for e in await take(recv, 1)] == [("set", "default", "b", rv(b))]
            assert len(log.lists(K.POD)) == 1


async def test_410_relist_without_changes_sends_nothing(server: ApiServer) -> None:
    log = RequestLog(server)
    server.store.create(K.POD, pod("a"))
    server.store.create(K.POD, pod("b"))
    async with watching(server, [K.POD]) as recv:
        await take(recv, 3)
        await log.watch_from(K.POD, server.store.revision)
        # Elsewhere in the cluster time moves on; history is compacted; the watch drops.
        # All three happen before any task runs, so the watch sees none of it.
        server.store.create(K.NAMESPACE, {"metadata": {"name": "elsewhere"}})
        server.compact()
        server.drop_watches()
        await log.watch_from(K.POD, server.store.revision)
        assert len(log.lists(K.POD)) == 2  # the resume got 410 and the watcher relisted
        sentinel = server.store.create(K.POD, pod("z"))
        assert [summary(e) for e in await take(recv, 1)] == [
            ("set", "default", "z", rv(sentinel))]


async def test_410_relist_sends_the_differences(server: ApiServer) -> None:
    log = RequestLog(server)
    a = server.store.create(K.POD, pod("a"))
    server.store.create(K.POD, pod("b"))
    server.store.create(K.POD, pod("c"))
    async with watching(server, [K.POD]) as recv:
        await take(recv, 4)
        await log.watch_from(K.POD, server.store.revision)
        changed = server.store.update(K.POD, {**a, "metadata": {**a["metadata"],
                                                                "labels": {"x": "1"}}})
        server.store.delete(K.POD, "default", "b")
        added = server.store.create(K.POD, pod("d"))
        server.compact()
        server.drop_watches()
        events = await take(recv, 3)
        assert len(log.lists(K.POD)) == 2
        assert [summary(e) for e in events] == [
            ("set", "default", "a", rv(changed)),
            ("set", "default", "d", rv(added)),
            # Deletions found by a relist carry no revision, as Calico's watcher cache.
            ("del", "default", "b", "")]
        assert isinstance(events[0], ResourceEvent) and events[0].obj is not None
        assert events[0].obj["metadata"]["labels"] == {"x": "1"}
        await log.watch_from(K.POD, server.store.revision)
        sentinel = server.store.create(K.POD, pod("z"))
        assert [summary(e) for e in await take(recv, 1)] == [
            ("set", "default", "z", rv(sentinel))]


async def test_410_on_a_continue_token_falls_back_to_one_full_list(server: ApiServer) -> None:
    log = RequestLog(server)
    for i in range(5):
        server.store.create(K.POD, pod(f"p{i}"))
    handle = server.api.handle

    def compact_after_first_page(request: Request) -> Any:
        response = handle(request)
        if "limit=3" in request.target and "continue" not in request.target:
            server.store.create(K.NAMESPACE, {"metadata": {"name": "elsewhere"}})
            server.compact()
        return response

    server.api.handle = compact_after_first_page  # type: ignore[method-assign]
    async with watching(server, [K.POD]) as recv:
        events = await take(recv, 6)
        assert [summary(e)[2] for e in events[:5]] == [f"p{i}" for i in range(5)]
        assert summary(events[5]) == ("synced", "pods")
        assert [(q.get("limit"), "continue" in q) for q in log.lists(K.POD)] == [
            ("3", False), ("3", True), (None, False)]
        # The full list asks again for what the first page did (client-go's pager).
        assert log.lists(K.POD)[2] == {"resourceVersion": "0",
                                       "resourceVersionMatch": "NotOlderThan"}


async def test_forbidden_list_reports_then_recovers(server: ApiServer) -> None:
    server.store.create(K.POD, pod("a"))
    server.store.create(IPPOOL, {"metadata": {"name": "pool"}, "spec": {"cidr": "10.0.0.0/16"}})
    server.forbid(IPPOOL)
    async with watching(server, [K.POD, IPPOOL]) as recv:
        pool_events = lambda e: getattr(e, "kind", None) == IPPOOL  # noqa: E731
        (failure,) = await take(recv, 1, pool_events)
        assert isinstance(failure, Connection) and not failure.ok
        assert failure.kind == IPPOOL
        assert "forbidden to list ippools.crd.projectcalico.org" in failure.reason
        assert "missing RBAC permission 'list' on resource 'ippools'" in failure.reason
        assert 'cannot list resource "ippools"' in failure.reason  # the server's message
        server.allow(IPPOOL)
        events = await take(recv, 3, pool_events)
        assert [summary(e)[:3] for e in events] == [
            ("conn", True, "ippools"), ("set", "", "pool"), ("synced", "ippools")]


async def test_forbidden_watch_reports_then_recovers(server: ApiServer) -> None:
    log = RequestLog(server)
    server.store.create(K.POD, pod("a"))
    async with watching(server, [K.POD]) as recv:
        await take(recv, 2)
        listed_at = server.store.revision
        server.forbid(K.POD, ["watch"])
        server.drop_watches()
        (failure,) = await take(recv, 1)
        assert isinstance(failure, Connection) and not failure.ok and failure.kind == K.POD
        assert failure.reason.startswith("forbidden to watch pods: missing RBAC permission "
                                         "'watch' on resource 'pods' in API group ''")
        server.allow(K.POD)
        assert [summary(e) for e in await take(recv, 1)] == [("conn", True, "pods")]
        b = server.store.create(K.POD, pod("b"))
        assert [summary(e) for e in await take(recv, 1)] == [("set", "default", "b", rv(b))]
        assert len(log.lists(K.POD)) == 1  # it resumed from where it was
        assert all(q["resourceVersion"] == str(listed_at) for q in log.watches(K.POD))


async def test_absent_kind_counts_as_synced_and_is_rechecked(server: ApiServer) -> None:
    log = RequestLog(server)
    v3_pool = K.calico_kind("IPPool", K.CALICO_V3_GROUP)  # this server serves only the CRDs
    tuning = WatchTuning(missing_kind_recheck=0.05, min_watch_interval=0.001)
    async with watching(server, [K.K8S_CLUSTER_NETWORK_POLICY, v3_pool],
                        tuning=tuning) as recv:
        events = await take(recv, 2)
        assert {summary(e) for e in events} == {("synced", "clusternetworkpolicies"),
                                                ("synced", "ippools")}
        # Listed again every missing_kind_recheck, never watched.
        await log.wait_until(lambda: len(log.lists(v3_pool)) >= 3)
        assert log.watches(v3_pool) == []


async def test_unreachable_server_reports_and_recovers() -> None:
    server = ApiServer(bookmark_interval=3600)
    server.store.create(K.POD, pod("a"))
    with trio.socket.socket() as probe:  # a free port nothing listens on, yet
        await probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server.host, server.port = "127.0.0.1", port
    async with watching(server, [K.POD]) as recv, trio.open_nursery() as nursery:
        (failure,) = await take(recv, 1)
        assert isinstance(failure, Connection) and not failure.ok
        assert failure.reason.startswith("cannot reach the API server to list pods: ConnectError")
        await nursery.start(server.serve, "127.0.0.1", port)
        events = await take(recv, 3)
        assert [summary(e)[:3] for e in events] == [
            ("conn", True, "pods"), ("set", "default", "a"), ("synced", "pods")]
        nursery.cancel_scope.cancel()


def tls_server_context(ca: trustme.CA) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(ctx)
    return ctx


async def test_tls_kubeconfig_token_and_group_discovery(tmp_path: Path) -> None:
    ca = trustme.CA()
    server_ctx = tls_server_context(ca)
    async with open_apiserver(calico_groups=(K.CALICO_V3_GROUP,), require_token=True,
                              ssl_context=server_ctx, ca_pem=ca.cert_pem.bytes()) as server:
        v3_pool = K.calico_kind("IPPool", K.CALICO_V3_GROUP)
        server.store.create(v3_pool, {"metadata": {"name": "pool"},
                                      "spec": {"cidr": "10.0.0.0/16"}})
        cfg = load_kube_client_config(
            Config(kubeconfig=str(server.kubeconfig_path(tmp_path)), home=str(tmp_path)),
            service_account_dir=tmp_path)
        assert cfg.uses_tls and cfg.authorization == f"Bearer {server.token}"
        async with open_kubernetes_datastore(cfg, tuning=FAST) as ds:
            # Only projectcalico.org is served, so discovery picks the v3 group.
            assert ds.calico_group == K.CALICO_V3_GROUP
            send, recv = trio.open_memory_channel[DatastoreEvent](100)
            async with trio.open_nursery() as nursery:
                await nursery.start(ds.watch, [K.calico_kind("IPPool", ds.calico_group)], send)
                (item, synced) = await take(recv, 2)
                assert isinstance(item, ResourceEvent) and item.obj is not None
                assert item.obj["apiVersion"] == "projectcalico.org/v3"
                assert summary(synced) == ("synced", "ippools")
                nursery.cancel_scope.cancel()


async def test_wrong_token_is_reported_as_unauthorized() -> None:
    async with open_apiserver(require_token=True) as secured:
        cfg = KubeClientConfig(server=secured.url, source="test", authorization="Bearer wrong")
        send, recv = trio.open_memory_channel[DatastoreEvent](100)
        async with KubeApi(cfg) as api, trio.open_nursery() as nursery:
            ds = KubernetesDatastore(api, calico_group=K.CALICO_CRD_GROUP, tuning=FAST)
            await nursery.start(ds.watch, [K.NAMESPACE], send)
            (failure,) = await take(recv, 1)
            assert isinstance(failure, Connection) and not failure.ok
            assert failure.reason.startswith("unauthorized to list namespaces")
            nursery.cancel_scope.cancel()


@pytest.mark.parametrize("groups, configured, expected", [
    ((K.CALICO_CRD_GROUP,), None, K.CALICO_CRD_GROUP),
    ((K.CALICO_CRD_GROUP, K.CALICO_V3_GROUP), None, K.CALICO_CRD_GROUP),
    ((K.CALICO_V3_GROUP,), None, K.CALICO_V3_GROUP),
    ((K.CALICO_CRD_GROUP,), "projectcalico.org/v3", K.CALICO_V3_GROUP),
])
async def test_calico_group_discovery(groups: tuple[str, ...], configured: str | None,
                                      expected: str) -> None:
    async with open_apiserver(calico_groups=groups) as server:
        cfg = KubeClientConfig(server=server.url, source="test", calico_api_group=configured)
        async with open_kubernetes_datastore(cfg) as ds:
            assert ds.calico_group == expected


async def test_in_cluster_token_is_reread_after_rotation(tmp_path: Path) -> None:
    ca = trustme.CA()
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    ca.cert_pem.write_to_path(str(sa / "ca.crt"))
    (sa / "token").write_text("first-token\n")
    async with open_apiserver(require_token=True, token="first-token", bookmark_interval=3600,
                              ssl_context=tls_server_context(ca)) as server:
        log = RequestLog(server)
        cfg = load_kube_client_config(
            environment_config({"KUBERNETES_SERVICE_HOST": "127.0.0.1",
                                "KUBERNETES_SERVICE_PORT": str(server.port),
                                "HOME": str(tmp_path)}),
            service_account_dir=sa)
        assert cfg.token_file == str(sa / "token")
        send, recv = trio.open_memory_channel[DatastoreEvent](100)
        async with KubeApi(cfg, auth_refresh_interval=3600) as api, \
                trio.open_nursery() as nursery:
            ds = KubernetesDatastore(api, calico_group=K.CALICO_CRD_GROUP, tuning=FAST)
            await nursery.start(ds.watch, [K.POD], send)
            assert [summary(e) for e in await take(recv, 1)] == [("synced", "pods")]
            await log.watch_from(K.POD, server.store.revision)
            # The kubelet rotates the token; the old one stops working.
            (sa / "token").write_text("second-token\n")
            server.api.token = "second-token"
            server.drop_watches()
            # The 401 makes the client re-read the token file before its next request.
            failure, recovered = await take(recv, 2)
            assert isinstance(failure, Connection) and not failure.ok
            assert failure.reason.startswith("unauthorized to watch pods")
            assert summary(recovered) == ("conn", True, "pods")
            b = server.store.create(K.POD, pod("b"))
            assert [summary(e) for e in await take(recv, 1)] == [("set", "default", "b", rv(b))]
            nursery.cancel_scope.cancel()


def test_from_config_discovers_when_run_starts(tmp_path: Path) -> None:
    # A separate API server process, found through the kubeconfig it writes, as in production.
    with subprocess.Popen(
        [sys.executable, "-m", "testbed.apiserver", "--calico-group", "v3",
         "--kubeconfig", str(tmp_path / "kubeconfig")],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) as proc:
        try:
            assert proc.stdout is not None
            kubeconfig = proc.stdout.readline().strip()
            assert kubeconfig == str(tmp_path / "kubeconfig")
            ds = KubernetesDatastore.from_config(Config(kubeconfig=kubeconfig), tuning=FAST)
            with pytest.raises(RuntimeError, match="discovered when KubernetesDatastore.run"):
                ds.calico_group  # noqa: B018 - nothing asked yet

            async def watch_namespaces() -> list[tuple[Any, ...]]:
                send, recv = trio.open_memory_channel[DatastoreEvent](100)
                async with trio.open_nursery() as nursery:
                    await nursery.start(ds.run)  # discovery, on the shared connection
                    assert ds.calico_group == K.CALICO_V3_GROUP
                    await nursery.start(ds.watch, [K.NAMESPACE], send)
                    events = await take(recv, 5)
                    nursery.cancel_scope.cancel()
                await ds.aclose()
                return [summary(e)[:3] for e in events]

            assert trio.run(watch_namespaces) == [
                ("set", "", "default"), ("set", "", "kube-node-lease"), ("set", "", "kube-public"),
                ("set", "", "kube-system"), ("synced", "namespaces")]
        finally:
            proc.terminate()
            proc.wait(10)


async def test_from_config_inside_trio() -> None:
    # Configured: no discovery needed.
    ds = KubernetesDatastore.from_config(environment_config(
        {"K8S_API_ENDPOINT": "http://127.0.0.1:9", "CALICO_API_GROUP": "projectcalico.org/v3"}))
    assert ds.calico_group == K.CALICO_V3_GROUP
    await ds.aclose()
    # Left to discovery, which fails (nothing listens): the v1 CRDs, as Calico assumes.
    ds = KubernetesDatastore.from_config(Config(k8s_api_endpoint="http://127.0.0.1:9"))
    async with trio.open_nursery() as nursery:
        await nursery.start(ds.run)
        assert ds.calico_group == K.CALICO_CRD_GROUP
        nursery.cancel_scope.cancel()
    await ds.aclose()


async def test_lists_are_served_from_the_watch_cache_whole_where_it_cannot_paginate() -> None:
    """kube-apiserver before 1.34 serves ``resourceVersion=0`` lists from its watch cache and
    ignores ``limit`` there; a ``limit`` alone would be a quorum read of etcd per page."""
    async with open_apiserver(calico_groups=(K.CALICO_CRD_GROUP,),
                              bookmark_interval=3600) as server:
        log = RequestLog(server)
        for i in range(7):
            server.store.create(K.POD, pod(f"p{i}"))
        async with watching(server, [K.POD]) as recv:
            assert len(await take(recv, 8)) == 8
            assert log.lists(K.POD) == [{"limit": "3", "resourceVersion": "0",
                                         "resourceVersionMatch": "NotOlderThan"}]
        assert server.api.list_reads["storage"] == 0


async def test_relist_after_repeated_watch_failures_asks_for_no_older_state(
        server: ApiServer) -> None:
    """Calico's watcher cache relists from its current revision after too many failed
    watches (NotOlderThan it), and from "0" only after a 410."""
    a = server.store.create(K.POD, pod("a"))
    handle = server.api.handle

    def failing_watches(request: Request) -> Any:
        if "watch=true" in request.target:
            return Response.error(internal_error("etcd is having a bad day"))
        return handle(request)

    server.api.handle = failing_watches  # type: ignore[method-assign]
    log = RequestLog(server)
    tuning = WatchTuning(page_size=3, min_watch_interval=0.001, backoff_initial=0.001,
                         backoff_max=0.002, max_errors_per_revision=2)
    async with watching(server, [K.POD], tuning=tuning):
        await log.wait_until(lambda: len(log.lists(K.POD)) >= 2)
    assert log.lists(K.POD)[1]["resourceVersion"] == rv(a)


async def test_an_absent_kind_is_never_reported_stale(server: ApiServer) -> None:
    """A kind the server does not serve has no watch stream: however long it stays absent,
    the watch board does not call it silent (a served kind's idle watch stays fresh: over
    HTTP/2, as current as its connection, whose PINGs are answered)."""
    v3_pool = K.calico_kind("IPPool", K.CALICO_V3_GROUP)  # this server serves only the CRDs
    tuning = WatchTuning(missing_kind_recheck=3600, min_watch_interval=0.001,
                         stall_deadline=0.3)
    send, recv = trio.open_memory_channel[DatastoreEvent](100)
    cfg = KubeClientConfig(server=server.url, source="test bed")
    # (The client's PINGs follow the deadline, as the daemon sets it up.)
    async with KubeApi(cfg, stall_deadline=tuning.stall_deadline) as api, \
            trio.open_nursery() as nursery:
        ds = KubernetesDatastore(api, calico_group=K.CALICO_CRD_GROUP, tuning=tuning,
                                 random=random.Random(4).random)
        await nursery.start(partial(ds.watch, name="felix"), [v3_pool, K.POD], send)
        await take(recv, 2)
        await trio.sleep(1.0)  # > 3 deadlines
        states = {s.name: s for s in ds.watches.states()}
        assert not states["felix/ippools"].stale and not states["felix/pods"].stale
        nursery.cancel_scope.cancel()


async def test_namespaces_and_service_accounts_are_listed_as_go_s_profile_client_does(
        server: ApiServer) -> None:
    """Calico v3.32.1 reads both through its profile client
    (``libcalico-go/lib/backend/k8s/resources/profile.go``): the watcher cache's first
    revision "0" splits into two empty ones (``SplitProfileRevision``,
    ``k8s/conversion/conversion.go``), ``listOptionsToK8sListOptions``
    (``k8s/resources/list_pager.go``) adds ``resourceVersionMatch`` only with a
    resourceVersion, and client-go's pager asks for ``limit=500`` and sends continue pages
    with the token alone.  So each list is a consistent read: ``limit`` and nothing else.
    The watches ask for bookmarks from the list's resourceVersion, as
    ``watchOptionsToK8sListOptions`` (``k8s/resources/resources.go``) does."""
    for i in range(4):
        server.store.create(K.NAMESPACE, {"metadata": {"name": f"ns{i}"}})
        server.store.create(K.SERVICE_ACCOUNT, {"metadata": {"name": "default",
                                                             "namespace": f"ns{i}"}})
    log = RequestLog(server)
    reads = server.api.list_reads["storage"]
    async with watching(server, [K.NAMESPACE, K.SERVICE_ACCOUNT]) as recv:
        await take(recv, 2, lambda e: isinstance(e, KindSynced))
        await log.watch_from(K.NAMESPACE, server.store.revision)
        await log.watch_from(K.SERVICE_ACCOUNT, server.store.revision)
        for kind in (K.NAMESPACE, K.SERVICE_ACCOUNT):
            first, *rest = log.lists(kind)
            assert first == {"limit": "3"}
            assert rest and all(q.keys() == {"limit", "continue"} for q in rest)
            (watch,) = log.watches(kind)
            assert watch.keys() == {"watch", "resourceVersion", "allowWatchBookmarks"}
            assert watch["allowWatchBookmarks"] == "true"
        # Consistent reads are quorum reads of etcd, not the watch cache.
        assert server.api.list_reads["storage"] - reads == sum(
            len(log.lists(k)) for k in (K.NAMESPACE, K.SERVICE_ACCOUNT))
        # After a 410 they are listed the same way again.
        server.store.create(K.NAMESPACE, {"metadata": {"name": "later"}})
        server.compact()
        log.requests.clear()
        server.drop_watches()
        await log.wait_until(lambda: len(log.lists(K.NAMESPACE)) >= 1)
        assert log.lists(K.NAMESPACE)[0] == {"limit": "3"}
