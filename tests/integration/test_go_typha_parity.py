"""The last differences from Go Typha v3.32, each stated as Go Typha's behaviour.

Each test runs the whole daemon on a real datastore (etcd, or the test bed API server) and
reads what its caches publish: the breadcrumbs carry exactly the updates every client is
sent (their encodings are made from them, once per breadcrumb).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from testbed.apiserver import ApiServer, open_apiserver
from tests.e2e.harness import HANG, daemon_config
from tests.etcd_server import run_etcd
from tests.grpcio_sync import grpcio_sync
from trio_typha.cache.core import Breadcrumb
from trio_typha.client.typha import TyphaClient
from trio_typha.daemon import Daemon
from trio_typha.datastore.base import Datastore
from trio_typha.datastore.etcd import EtcdDatastore
from trio_typha.datastore.k8s_config import KubeClientConfig
from trio_typha.datastore.k8s_watch import WatchTuning
from trio_typha.datastore.kubernetes import open_kubernetes_datastore
from trio_typha.logs import TyphaFormatter
from trio_typha.model import kinds as K
from trio_typha.model.kv import SerializedUpdate, SyncStatus, UpdateType

V3_ROOT = "/calico/resources/v3/projectcalico.org"


@asynccontextmanager
async def daemon_on(datastore: Datastore, *syncers: str) -> AsyncIterator[Daemon]:
    daemon = Daemon(daemon_config(), datastore=datastore, listen_port=0,
                    syncer_types=syncers or ("felix",))
    async with trio.open_nursery() as nursery:
        await nursery.start(daemon.run)
        try:
            with trio.fail_after(HANG):
                await daemon.wait_in_sync()
            yield daemon
        finally:
            daemon.shutdown()


async def wait_published(daemon: Daemon, syncer: str, since: Breadcrumb,
                         key: str, update_type: UpdateType) -> list[SerializedUpdate]:
    """Follow the breadcrumbs after ``since`` until one carries ``update_type`` for ``key``;
    every update published meanwhile."""
    feed = daemon.pipelines[syncer].feed
    out: list[SerializedUpdate] = []
    crumb = since
    with trio.fail_after(HANG):
        while not any(u.key == key and u.update_type is update_type for u in out):
            crumb = await feed.wait_next(crumb)
            out.extend(crumb.updates)
    return out


def snapshot(daemon: Daemon, syncer: str = "felix") -> dict[str, SerializedUpdate]:
    return {u.key: u for u in daemon.pipelines[syncer].feed.snapshot_point().snapshot()}


def raw(kind: str, name: str, **md: Any) -> bytes:
    body = {"apiVersion": "projectcalico.org/v3", "kind": kind,
            "metadata": {"name": name, **md}, "spec": {}}
    if kind == "BGPPeer":
        body["spec"] = {"peerIP": "192.0.2.1", "asNumber": 64513}
    if kind == "NetworkSet":
        body["spec"] = {"nets": ["10.1.0.0/16"]}
    return json.dumps(body).encode()


@pytest.mark.etcd
async def test_etcd_mode_names_every_resource_by_its_key(tmp_path: Path) -> None:
    """Go Typha (libcalico's etcdv3 backend) parses the ResourceKey from the etcd key and
    never from the stored body: a GlobalNetworkPolicy stored at .../name-mismatch whose body
    says ``other-name`` is served as ``/calico/v1/policy/GlobalNetworkPolicy//name-mismatch``.
    Namespaced kinds take the namespace from the key too; v3 values go out as stored."""
    async with run_etcd(tmp_path) as etcd, etcd.client() as c:
        await c.put(f"{V3_ROOT}/globalnetworkpolicies/name-mismatch",
                    raw("GlobalNetworkPolicy", "other-name"))
        await c.put(f"{V3_ROOT}/networkpolicies/prod/np-key",
                    raw("NetworkPolicy", "other", namespace="elsewhere"))
        await c.put(f"{V3_ROOT}/networksets/prod/set-key",
                    raw("NetworkSet", "other", namespace="elsewhere"))
        await c.put(f"{V3_ROOT}/bgppeers/peer-key", raw("BGPPeer", "other-peer"))
        async with daemon_on(EtcdDatastore(etcd.config), "felix", "bgp") as daemon:
            felix, bgp = snapshot(daemon), snapshot(daemon, "bgp")
    assert "/calico/v1/policy/GlobalNetworkPolicy//name-mismatch" in felix
    assert "/calico/v1/policy/NetworkPolicy/prod/np-key" in felix
    assert "/calico/v1/netset/prod%2fset-key" in felix
    peer = bgp[f"{V3_ROOT}/bgppeers/peer-key"]
    assert peer.value is not None and json.loads(peer.value)["metadata"]["name"] == "other-peer"
    assert not [k for k in (*felix, *bgp) if "other" in k or "elsewhere" in k]


@pytest.mark.etcd
async def test_etcd_deletions_carry_an_empty_revision(tmp_path: Path) -> None:
    """Go Typha sends ``Revision ""`` with every deletion (Calico's watcher cache sends the
    deleted key alone), whatever the deleted value's revision was."""
    async with run_etcd(tmp_path) as etcd, etcd.client() as c:
        gnp = json.loads(raw("GlobalNetworkPolicy", "doomed"))
        async with daemon_on(EtcdDatastore(etcd.config)) as daemon:
            mark = daemon.pipelines["felix"].feed.latest
            rev = await c.put_resource(gnp)
            await c.delete_resource(K.calico_kind("GlobalNetworkPolicy"), "", "doomed")
            key = "/calico/v1/policy/GlobalNetworkPolicy//doomed"
            updates = await wait_published(daemon, "felix", mark, key, UpdateType.DELETED)
    assert [(u.update_type, u.revision) for u in updates if u.key == key] == [
        (UpdateType.NEW, str(rev)), (UpdateType.DELETED, "")]


@asynccontextmanager
async def kdd_daemon() -> AsyncIterator[tuple[Any, Daemon]]:
    async with open_apiserver(calico_groups=(K.CALICO_CRD_GROUP,)) as server:
        server.store.create(K.NAMESPACE, {"metadata": {"name": "listed",
                                                       "labels": {"team": "a"}}})
        config = KubeClientConfig(server=server.url, source="test")
        tuning = WatchTuning(min_watch_interval=0.01, backoff_initial=0.02, backoff_max=0.2)
        async with open_kubernetes_datastore(config, tuning=tuning) as ds, \
                daemon_on(ds) as daemon:
            yield server, daemon


async def test_kdd_profile_from_a_watched_namespace_has_v3_resource_version_slash() -> None:
    """Go Typha: a Profile derived from a listed Namespace has V3ResourceVersion ``""``;
    one updated through the watch has ``"/"`` (Calico's profile watcher stamps the joined,
    empty, resourceVersions of the profiles it last saw).  Revision is ``"<nsRV>/"`` both
    ways, and a deleted namespace's keys go with Revision ``""``."""
    async with kdd_daemon() as (server, daemon):
        profile = f"{V3_ROOT}/profiles/kns.listed"
        listed = snapshot(daemon)[profile]
        mark = daemon.pipelines["felix"].feed.latest
        ns = server.store.entry(K.NAMESPACE, "", "listed").obj
        updated = server.store.update(K.NAMESPACE, {**ns, "metadata": {
            **ns["metadata"], "labels": {"team": "b"}}})
        updates = {u.key: u for u in await wait_published(daemon, "felix", mark, profile,
                                                          UpdateType.UPDATED)}
        watched = updates[profile]
        labels = updates["/calico/v1/policy/profile/kns.listed/labels"]
        mark = daemon.pipelines["felix"].feed.latest
        server.store.delete(K.NAMESPACE, "", "listed")
        gone = await wait_published(daemon, "felix", mark, profile, UpdateType.DELETED)
    assert (listed.v3_resource_version, listed.revision) == ("", f"{ns['metadata']['resourceVersion']}/")
    assert (watched.v3_resource_version, watched.revision) == (
        "/", f"{updated['metadata']['resourceVersion']}/")
    assert labels.v3_resource_version == ""  # only the v3 Profile value carries one
    assert {(u.update_type, u.revision) for u in gone} == {(UpdateType.DELETED, "")}


async def test_kdd_profiles_carry_the_other_stream_s_last_bookmark() -> None:
    """Go Typha: after churn on the test bed, ``kns.churn-*`` Profiles created during the
    watch carried ``"/11259"``, the ServiceAccount stream's last bookmark
    (``libcalico-go/lib/backend/k8s/resources/profile.go``, ``k8sSARev``).  Here the test
    bed sends bookmarks as kube-apiserver does: once the ServiceAccounts' watch cache moved
    past the watch's start, a bookmark carries that revision; the Namespace created next
    is stamped with it, and a ServiceAccount created after the Namespaces' own bookmark
    with that one, as ``"<nsRV>/"``."""
    async with open_apiserver(calico_groups=(K.CALICO_CRD_GROUP,),
                              bookmark_interval=0.05) as server:
        config = KubeClientConfig(server=server.url, source="test")
        tuning = WatchTuning(min_watch_interval=0.01, backoff_initial=0.02, backoff_max=0.2)
        async with open_kubernetes_datastore(config, tuning=tuning) as ds, \
                daemon_on(ds) as daemon:
            # Both streams must be watching before a bookmark counts: the second one to
            # start is a new profile watcher, which forgets the first one's bookmark.
            await server.wait_for_watches(lambda _: _watching(server) >= {"namespaces",
                                                                          "serviceaccounts"})
            sa = server.store.create(K.SERVICE_ACCOUNT, {"metadata": {
                "name": "builder", "namespace": "default"}})
            sa_rv = sa["metadata"]["resourceVersion"]
            stamps = ds.profile_stamps["felix"]
            await _until(lambda: stamps.service_account_rv == sa_rv)
            mark = daemon.pipelines["felix"].feed.latest
            ns = server.store.create(K.NAMESPACE, {"metadata": {"name": "churn-1"}})
            profile = f"{V3_ROOT}/profiles/kns.churn-1"
            (created,) = [u for u in await wait_published(daemon, "felix", mark, profile,
                                                         UpdateType.NEW) if u.key == profile]
            ns_rv = ns["metadata"]["resourceVersion"]
            await _until(lambda: stamps.namespace_rv == ns_rv)
            mark = daemon.pipelines["felix"].feed.latest
            server.store.create(K.SERVICE_ACCOUNT, {"metadata": {
                "name": "runner", "namespace": "churn-1"}})
            sa_profile = f"{V3_ROOT}/profiles/ksa.churn-1.runner"
            (sa_created,) = [u for u in await wait_published(
                daemon, "felix", mark, sa_profile, UpdateType.NEW) if u.key == sa_profile]
    assert (created.v3_resource_version, created.revision) == (f"/{sa_rv}", f"{ns_rv}/")
    assert sa_created.v3_resource_version == f"{ns_rv}/"


def _watching(server: ApiServer) -> set[str]:
    """The plurals the test bed has a watch stream open for."""
    return {handle.plan.cursor.kind.plural for handle in server.watches}


async def _until(condition: Callable[[], bool]) -> None:
    """Wait for a bookmark to have been taken in (checked every 10 ms, bounded by HANG)."""
    with trio.fail_after(HANG):
        while not condition():  # noqa: ASYNC110 (state of another task, no event)
            await trio.sleep(0.01)


async def test_hello_is_logged_at_info_on_both_protocols(
        caplog: pytest.LogCaptureFixture) -> None:
    """Go Typha logs "Received Hello message from client." at INFO with the client's address
    and the hello (hostname, syncer type, client version); here the compression chosen goes
    on the same line."""
    caplog.set_level(logging.INFO, "trio_typha.protocols")
    async with kdd_daemon() as (_, daemon):
        port = daemon.ports["server"]
        async with grpcio_sync(port, "felix", hostname="grpc-node") as client:
            with trio.fail_after(HANG):
                await client.wait_until(lambda: client.in_sync)
        async with TyphaClient("127.0.0.1", port, syncer_type="felix", hostname="gob-node",
                               version="v3.32.1") as gob:
            with trio.fail_after(HANG):
                await gob.wait_for_status(SyncStatus.IN_SYNC)
    # In Typha's line layout: the fields sorted after the message, strings quoted.
    lines = [TyphaFormatter().format(r) for r in caplog.records
             if r.levelno == logging.INFO and r.getMessage().startswith("Received Hello")]
    grpc_line = next(line for line in lines if 'hostname="grpc-node"' in line)
    gob_line = next(line for line in lines if 'hostname="gob-node"' in line)
    assert ': Received Hello message from client. client="127.0.0.1:' in grpc_line
    assert 'clientVersion="test" compression="none" connID="0x' in grpc_line
    assert grpc_line.endswith('protocol="grpc" start="snapshot" syncerType="felix"')
    assert 'clientVersion="v3.32.1" compression="snappy"' in gob_line
    assert gob_line.endswith('protocol="typha" syncerType="felix"')
