"""The churn generator and the invariant checker against real servers on loopback.

The churn writes through the official ``kubernetes`` client to the test bed's API server;
its record must match what the server holds.  The daemon runs in-process on that API
server (or on a real etcd); clients of both protocols follow it, and the invariant checker,
reading the datastore afresh, must find the caches and every client exactly at the state the
conversion layer derives, both after churn and when something is made to differ.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import kubernetes
import pytest
import trio

from testbed import churn as ch
from testbed import invariant as inv
from testbed.apiserver import open_apiserver
from tests.e2e.harness import HANG, daemon_config, running_daemon
from tests.etcd_server import run_etcd
from trio_typha.client import grpc as grpc_client
from trio_typha.client.typha import TyphaClient
from trio_typha.client.view import SyncView
from trio_typha.config import Config
from trio_typha.datastore.k8s_config import load_kube_client_config
from trio_typha.datastore.kubernetes import open_kubernetes_datastore
from trio_typha.model import kinds as K
from trio_typha.model.kv import SYNCER_TYPES

MIX = ch.Mix(create=2, update=2, delete=1, pod_label=1, namespace=1)


def place_pods(core: kubernetes.client.CoreV1Api, ns: str, n: int) -> None:
    """Pods as a kubelet would leave them (scheduled, with an IP), named and labelled as the
    churn's own, so it adopts them for pod-label churn."""
    core.create_namespace({"metadata": {"name": ns, "labels": {ch.LABEL: "churn"}}})
    for i in range(n):
        name = f"pod-{i}"
        core.create_namespaced_pod(ns, {
            "metadata": {"name": name, "labels": {ch.LABEL: "churn"}},
            "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "pause"}]}})
        ip = f"10.244.0.{10 + i}"
        core.patch_namespaced_pod_status(
            name, ns, {"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}},
            _content_type=ch.MERGE_PATCH)


async def test_churn_records_every_write_it_made(tmp_path: Path) -> None:
    async with open_apiserver() as srv:
        with ch.api_client(srv.kubeconfig_path(tmp_path)) as client:
            churn = ch.Churn(client, ch.ChurnConfig(rate=500, mix=MIX, seed=7,
                                                    pods_per_namespace=2, max_policies=8))
            await trio.to_thread.run_sync(churn.setup)
            made = len(churn.writes)
            assert made == 2 + 4  # two namespaces, two pods in each
            run = await ch.run_in_trio(churn, writes=120)
            assert len(run) == 120 and churn.writes[made:] == run
            assert all(w.ok for w in churn.writes), [w for w in churn.writes if not w.ok]
            assert [w.seq for w in churn.writes] == list(range(len(churn.writes)))
            assert all(a.monotonic <= b.monotonic and a.at <= b.at
                       for a, b in zip(churn.writes, churn.writes[1:], strict=False))
            ops = {(w.kind, w.op) for w in run}
            assert {("NetworkPolicy", "create"), ("NetworkPolicy", "update"),
                    ("NetworkPolicy", "delete"), ("Pod", "update"),
                    ("Namespace", "create")} <= ops

            # The last write to each policy says whether it exists, and at which version.
            last = {(w.namespace, w.name): w for w in churn.writes if w.kind == "NetworkPolicy"}
            net = kubernetes.client.NetworkingV1Api(client)
            listed = await trio.to_thread.run_sync(net.list_network_policy_for_all_namespaces)
            held = {(p.metadata.namespace, p.metadata.name): p.metadata.resource_version
                    for p in listed.items}
            assert held == {k: w.resource_version for k, w in last.items() if w.op != "delete"}
            assert held.keys() == churn.policies
            assert len(held) <= 8

            # Records round-trip as JSON lines.
            row = json.loads(run[0].as_json())
            assert row["seq"] == run[0].seq and row["kind"] == run[0].kind

            await trio.to_thread.run_sync(churn.cleanup)
            listed_ns = await trio.to_thread.run_sync(
                kubernetes.client.CoreV1Api(client).list_namespace)
            names = {n.metadata.name for n in listed_ns.items}
            assert not any(n.startswith("churn-") for n in names)


def test_churn_paces_writes_on_its_schedule() -> None:
    """Open loop: write i is due at i/rate; a late write is not followed by a burst."""
    now = [0.0]
    sleeps: list[float] = []

    def sleep(d: float) -> None:
        sleeps.append(d)
        now[0] += d

    churn = ch.Churn(kubernetes.client.ApiClient(), ch.ChurnConfig(rate=4),
                     clock=lambda: now[0], wall=lambda: 1e9 + now[0])
    due: list[float] = []

    def step() -> ch.Write:
        due.append(now[0])
        now[0] += 0.6 if len(due) == 2 else 0.01  # the second write is slow
        return ch.Write(len(due), 0, now[0], "create", "NetworkPolicy", "n", "p")

    churn.step = step  # type: ignore[method-assign]
    churn.run(seconds=2.0, sleep=sleep)
    assert len(due) == 8
    assert due[:2] == [0.0, 0.25]
    assert due[2] == pytest.approx(0.85) and due[3] == pytest.approx(0.86)  # behind: no sleep
    assert due[4:] == pytest.approx([1.0, 1.25, 1.5, 1.75])


def test_mix_parses_and_refuses_bad_entries() -> None:
    assert ch.Mix.parse("create=1,pod-label=2") == ch.Mix(1, 0, 0, 2, 0)
    for bad, why in (("create", "expected one of"), ("grow=1", "expected one of"),
                     ("create=x", "not a number"), ("delete=-1", "negative"),
                     ("create=0", "enables no operation")):
        with pytest.raises(ValueError, match=why):
            ch.Mix.parse(bad)
    with pytest.raises(ValueError, match="rate must be positive"):
        ch.ChurnConfig(rate=0)


# --- the invariant over a live daemon --------------------------------------------------------

@asynccontextmanager
async def follow(nursery: trio.Nursery, port: int) -> AsyncIterator[dict[str, object]]:
    """One gob client (as calico-node) and one gRPC client per syncer type, kept current
    by background tasks; yields subject -> client state holder."""
    holders: dict[str, object] = {}

    async def gob(syncer: str, *, task_status: trio.TaskStatus[None]) -> None:
        async with TyphaClient(("127.0.0.1", port), syncer_type=syncer,
                               hostname=f"gob-{syncer}") as client:
            holders[f"gob {syncer}"] = client
            await client.wait_for_status()
            task_status.started()
            async for _ in client:
                pass

    async def grpc(syncer: str, *, task_status: trio.TaskStatus[None]) -> None:
        view = SyncView()
        holders[f"grpc {syncer}"] = view
        stream = await grpc_client.open_stream("127.0.0.1", port)
        async with stream:
            started = False
            async for event in grpc_client.sync(stream, syncer, hostname=f"grpc-{syncer}"):
                grpc_client.apply_event(view, event)
                if view.in_sync and not started:
                    started = True
                    task_status.started()

    for syncer in SYNCER_TYPES:
        await nursery.start(gob, syncer)
        await nursery.start(grpc, syncer)
    yield holders


def subjects(daemon: object, holders: dict[str, object]) -> list[tuple[str, str, object]]:
    out: list[tuple[str, str, object]] = [
        (f"cache {t}", t, p) for t, p in daemon.pipelines.items()]  # type: ignore[attr-defined]
    out += [(name, name.split()[1], h) for name, h in holders.items()]
    return out


async def test_caches_and_clients_of_both_protocols_converge_under_churn(
        tmp_path: Path) -> None:
    async with open_apiserver(calico_groups=(K.CALICO_CRD_GROUP,)) as srv:
        kubeconfig = srv.kubeconfig_path(tmp_path)
        config = load_kube_client_config(Config(kubeconfig=str(kubeconfig)))
        with ch.api_client(kubeconfig) as client:
            await trio.to_thread.run_sync(place_pods, kubernetes.client.CoreV1Api(client),
                                          "churn-0", 2)
            churn = ch.Churn(client, ch.ChurnConfig(rate=200, mix=MIX, seed=3,
                                                    pods_per_namespace=2))
            await trio.to_thread.run_sync(churn.setup)
            async with open_kubernetes_datastore(config) as ds, \
                    running_daemon(daemon_config(DatastoreType="kubernetes"),
                                   datastore=ds) as daemon, \
                    trio.open_nursery() as nursery:
                with trio.fail_after(HANG):
                    await daemon.wait_in_sync()
                async with follow(nursery, daemon.ports["server"]) as holders:
                    read = partial(inv.read_kubernetes, client)
                    await ch.run_in_trio(churn, writes=150)
                    reports = await inv.wait_converged(read, lambda: subjects(daemon, holders),
                                                       within=HANG)
                    assert len(reports) == 4 * 3
                    felix = next(r for r in reports if r.subject == "gob felix")
                    # The churn's policies and the placed pods' endpoints are in there.
                    assert felix.expected_keys > 20
                    contents = await trio.to_thread.run_sync(read)
                    keys = inv.expected_state(contents, "felix")
                    assert any("/KubernetesNetworkPolicy/churn-" in k for k in keys)
                    assert any("/workload/k8s/churn-0%2fpod-" in k for k in keys)

                    # A holder that differs is named, key by key.
                    view = holders["grpc felix"]
                    assert isinstance(view, SyncView)
                    wrong = dict(inv.state_of(view))
                    gone = sorted(k for k in wrong if "/KubernetesNetworkPolicy/" in k)[0]
                    del wrong[gone]
                    [report] = inv.check(contents, [("tampered", "felix", wrong)])
                    assert (report.missing, report.extra, report.differing) == (1, 0, 0)
                    assert gone in str(report)
                nursery.cancel_scope.cancel()


@pytest.mark.etcd
async def test_invariant_on_etcd(tmp_path: Path) -> None:
    from tests.e2e.test_etcd_e2e import GNP, NODE, NP, POOL, PROFILE, WEP

    async with run_etcd(tmp_path) as etcd, etcd.client() as c:
        for obj in (NODE, POOL, PROFILE, WEP):
            await c.put_resource(obj)
        cfg = daemon_config({"TYPHA_DATASTORETYPE": "etcdv3", "TYPHA_ETCDENDPOINTS": etcd.url})
        async with running_daemon(cfg) as daemon, trio.open_nursery() as nursery:
            with trio.fail_after(HANG):
                await daemon.wait_in_sync()
            async with follow(nursery, daemon.ports["server"]) as holders:
                for obj in (NP, GNP):
                    await c.put_resource(obj)
                await c.delete_resource(K.calico_kind("Profile"), "", "kns.prod")
                read = partial(inv.read_etcd, etcd.url)
                reports = await inv.wait_converged(read, lambda: subjects(daemon, holders),
                                                   within=HANG)
                by = {r.subject: r for r in reports}
                assert by["gob felix"].expected_keys >= 6
                assert by["grpc bgp"].expected_keys >= 2
                assert by["gob node-status"].expected_keys == 0
            nursery.cancel_scope.cancel()
